"""Job databases written by the code before a change still work with this one: a database of
the schema before a migration opens migrated, and a job done then is found as the same job
(skipped, not run again). Real SQLite files made with the migrations of before, the real
``transcribe`` command, real ffmpeg; no model is loaded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sqlite_utils import Database

from transcriber.app.run.discover import content_key
from transcriber.app.store.domain import DONE, FOLLOWING, REDO, RUNNING, SKIP, Request
from transcriber.app.store.migrations import migrations
from transcriber.app.store.policy import runner_status
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.sqlite_store import SqliteJobStore
from transcriber import LiveSource

from tests import faults
from tests.conftest import JFK

# The fingerprint the code before greedy was beam_size None in both modes (9ff75db; streaming's
# default was 1) stored for a default stream job, recorded by running it.
STREAM_BEFORE_GREEDY_NONE = "023d779aecc3eb84"
# The content keys of followed sources before m011 (the ``following`` column) started with it.
FOLLOW_PREFIX = "follow:"


def database_before(path: Path, migration: str) -> Database:
    """A job database of the schema before ``migration``, as the code of then made it."""
    db = Database(path)
    migrations.apply(db, stop_before=migration)
    return db


def done_row(media: Path, key: str, fingerprint: str, spec: JobSpec) -> dict:
    """A done job's row as the code before wrote it, with its SRT written next to ``media``."""
    stem = media.with_suffix("")
    srt = stem.with_suffix(".srt")
    srt.write_text("1\n00:00:00,000 --> 00:00:02,000\nAnd so, my fellow Americans\n\n")
    now = time.time()
    return {"path": str(media), "content_key": key, "fingerprint": fingerprint,
            "spec": json.dumps(spec.stored(), sort_keys=True), "output_stem": str(stem), "status": DONE,
            "progress": 11.0, "duration": 11.0, "words_complete": 1, "language": "en", "model": "tiny.en",
            "runs": 1, "outputs": json.dumps([str(srt)]), "created_at": now, "queued_at": now,
            "started_at": now, "updated_at": now, "finished_at": now}


def transcribe(*args, db: Path) -> subprocess.CompletedProcess:
    env = faults.environment({**os.environ, "TRANSCRIBER_DB": str(db)})
    return subprocess.run([sys.executable, "-m", "transcriber.app", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_a_stream_job_done_before_greedy_was_renamed_is_skipped(tmp_path):
    """Streaming's greedy beam_size was 1 and is None now, as one-shot's: a stream job done
    before (its fingerprint hashed beam_size 1) is the same job, skipped by a rerun."""
    media = tmp_path / "jfk.flac"
    shutil.copy(JFK, media)
    db_path = tmp_path / "jobs.db"
    db = database_before(db_path, "m011_following")
    db["jobs"].insert(done_row(media.resolve(), content_key(media), STREAM_BEFORE_GREEDY_NONE, JobSpec(mode="stream")))
    db.conn.close()
    srt = tmp_path / "jfk.srt"
    written = srt.stat().st_mtime_ns

    result = transcribe(media, "--mode", "stream", db=db_path)
    assert result.returncode == 0 and "1 skipped" in result.stderr, result.stderr
    with SqliteJobStore(db_path) as store:
        (job,) = store.jobs()
    assert job.status == DONE and job.runs == 1  # not run again
    assert srt.stat().st_mtime_ns == written
    # greedy is None in both modes now; a beam of 1 is greedy too, and the same job
    assert JobSpec(mode="stream").engine_options().beam_size is None
    assert JobSpec(mode="stream", options={"beam_size": 1}).fingerprint() == STREAM_BEFORE_GREEDY_NONE
    assert JobSpec(mode="stream", options={"beam_size": 2}).fingerprint() != STREAM_BEFORE_GREEDY_NONE


def test_followed_jobs_of_a_database_before_the_following_column(tmp_path):
    """A database of before m011, where a followed job's content key began with ``follow:``,
    opens migrated: its followed jobs are marked ``following`` (status shows a running one so),
    their keys (and the kept words' of a redo) lose the prefix, and the key a follow writes now
    finds the done followed job as the same job."""
    media = tmp_path / "jfk.flac"
    shutil.copy(JFK, media)
    live_key = LiveSource(str(media)).key()  # what transcriber/app/run/follow.py keys a followed source by
    spec = JobSpec(mode="stream")
    db_path = tmp_path / "jobs.db"
    db = database_before(db_path, "m011_following")
    done = done_row(media.resolve(), FOLLOW_PREFIX + live_key, spec.fingerprint(), spec)
    running = {**done, "path": "/radio/live.mp3", "output_stem": str(tmp_path / "live"), "status": RUNNING,
               "content_key": FOLLOW_PREFIX + "0123456789abcdef", "words_complete": 0,
               "lease_owner": "otherhost:1:abc", "lease_expires": time.time() + 3600}
    plain = {**done, "path": "/media/talk.wav", "output_stem": "/media/talk", "content_key": "10:20:aabbcc"}
    ids = [db["jobs"].insert(row).last_pk for row in (done, running, plain)]
    kept_columns = {"content_key": FOLLOW_PREFIX + live_key, "fingerprint": "older", "progress": 11.0}
    db["kept"].insert({"job_id": ids[0], "fingerprint": "older", "content_key": FOLLOW_PREFIX + live_key,
                       "job": json.dumps(kept_columns), "segments": "[]"})
    db.conn.close()

    with SqliteJobStore(db_path) as store:
        followed, live, talk = (store.get(i) for i in ids)
        assert (followed.following, live.following, talk.following) == (True, True, False)
        assert (followed.content_key, live.content_key, talk.content_key) == (live_key, "0123456789abcdef",
                                                                              "10:20:aabbcc")
        assert runner_status(live, time.time(), lambda owner: False) == FOLLOWING
        assert runner_status(talk, time.time(), lambda owner: False) == DONE
        kept = next(store.db.query("SELECT content_key, job FROM kept"))
        assert kept["content_key"] == live_key
        assert json.loads(kept["job"]) == {**kept_columns, "content_key": live_key, "following": 1}

        # followed again (the request transcriber/app/run/follow.py makes): the same job, done, skipped
        request = Request(followed.path, live_key, spec.fingerprint(), spec.stored(), followed.output_stem,
                          following=True)
        job, action = store.enqueue(request)
        assert action == SKIP and job.id == followed.id and job.following
        # the finished file transcribed as a file: redone, and no longer a followed job
        as_file = Request(followed.path, content_key(media), spec.fingerprint(), spec.stored(), followed.output_stem)
        job, action = store.enqueue(as_file)
        assert action == REDO and not job.following and store.get(job.id).following is False
