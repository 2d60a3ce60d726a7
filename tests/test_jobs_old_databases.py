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
from typing import Optional

from sqlite_utils import Database

from jobs.discover import content_key
from jobs.domain import DONE
from jobs.migrations import migrations
from jobs.spec import JobSpec
from jobs.sqlite_store import SqliteJobStore

from . import faults
from .conftest import JFK

# The fingerprint the code before greedy was beam_size None in both modes (9ff75db; streaming's
# default was 1) stored for a default stream job, recorded by running it.
STREAM_BEFORE_GREEDY_NONE = "023d779aecc3eb84"


def database_before(path: Path, migration: Optional[str]) -> Database:
    """A job database of the schema before ``migration`` (None: this version's), as the code of
    then made it."""
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
    return subprocess.run([sys.executable, "-m", "jobs", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_a_stream_job_done_before_greedy_was_renamed_is_skipped(tmp_path):
    """Streaming's greedy beam_size was 1 and is None now, as one-shot's: a stream job done
    before (its fingerprint hashed beam_size 1) is the same job, skipped by a rerun."""
    media = tmp_path / "jfk.flac"
    shutil.copy(JFK, media)
    db_path = tmp_path / "jobs.db"
    db = database_before(db_path, None)
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

