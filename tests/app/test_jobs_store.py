"""The job store, discovery, specs and the watch tracker against real SQLite files; no model."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from transcriber.app.run.discover import content_key, discover, is_temporary, looks_like_media
from transcriber.app.store.domain import BUSY, FAILED, FAILED_BEFORE, NEW, OUTPUTS, QUEUED, REDO, RESUME, SKIP, LeaseLost, Request
from transcriber.app.store.lease import owner_is_dead
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.sqlite_store import SqliteJobStore, segments_from_json, segments_to_json
from transcriber.app.run.watch import StableFiles
from transcriber.transcript.types import Segment, Word

from tests.conftest import JFK


def request(path="/media/a.wav", key="1:1:aa", fingerprint="f1", spec=None, stem=None) -> Request:
    return Request(path=path, content_key=key, fingerprint=fingerprint, spec=spec or {"formats": ["srt"]},
                   output_stem=stem or path.rsplit(".", 1)[0])


def seg(start: float, words: list[str]) -> Segment:
    ws = tuple(Word(start + i * 0.1 + 1e-9, start + i * 0.1 + 0.07, " " + w, 0.123456789) for i, w in enumerate(words))
    return Segment(ws[0].start, ws[-1].end, "".join(w.text for w in ws), ws, avg_logprob=-0.25, temperature=0.2)


@pytest.fixture
def store(tmp_path):
    with SqliteJobStore(tmp_path / "jobs.db") as s:
        yield s


def test_new_database_has_wal_and_tables(store):
    assert store.db.journal_mode == "wal"
    assert {"jobs", "checkpoints", "_sqlite_migrations"} <= set(store.db.table_names())
    SqliteJobStore(store.path).close()  # reopening applies nothing twice


def test_databases_opened_together_migrate_once(tmp_path):
    path, errors = tmp_path / "fresh.db", []

    def open_it():
        try:
            SqliteJobStore(path).close()
        except Exception as e:  # pragma: no cover - the failure being tested for
            errors.append(e)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with SqliteJobStore(path) as s:
        names = [r["name"] for r in s.db.query("SELECT name FROM _sqlite_migrations")]
        assert names == ["m001_jobs", "m002_checkpoints", "m003_language_probability", "m004_worker",
                         "m005_warnings", "m006_outputs", "m007_job_is_file_and_place",
                         "m008_kept_words", "m009_application_id", "m010_output_root",
                         "m011_following"]  # each once


def test_a_database_of_an_earlier_version_gains_the_new_column(tmp_path):
    """A database made before m003 (two migrations) opens and is migrated, rows kept."""
    from sqlite_utils import Database

    from transcriber.app.store.migrations import migrations

    path = tmp_path / "old.db"
    db = Database(path)
    migrations.apply(db, stop_before="m003_language_probability")
    db["jobs"].insert({"path": "/x.wav", "content_key": "k", "fingerprint": "f", "spec": "{}",
                       "output_stem": "/x", "status": "done", "language": "de"})
    db.conn.close()
    with SqliteJobStore(path) as s:
        job = s.jobs()[0]
        assert job.language == "de" and job.language_probability is None and job.worker is None
        assert job.warnings == ()


def test_the_worker_is_recorded_at_the_start_and_cleared_by_a_redo(store, tmp_path):
    job, _ = store.enqueue(request(stem=str(tmp_path / "a")))
    owner = "me:1:x"
    store.claim(owner, [job.id], 60)
    store.start(job.id, owner, job.content_key, 2.0, worker="node-a:4242")
    assert store.get(job.id).worker == "node-a:4242"
    store.set_worker(job.id, owner, "node-b:77")  # a Ray worker restarted on another node
    assert store.get(job.id).worker == "node-b:77"
    store.release(job.id, owner)
    assert store.get(job.id).worker == "node-b:77"  # who had it last, until it runs again
    job, action = store.enqueue(request(stem=str(tmp_path / "a")), force=True)
    assert action == REDO and job.worker is None


def test_enqueue_decisions(store, tmp_path):
    out = tmp_path / "a.srt"
    job, action = store.enqueue(request(stem=str(tmp_path / "a")))
    assert action == NEW and job.status == QUEUED
    assert store.enqueue(request(stem=str(tmp_path / "a")))[1] == RESUME
    owner = "me:1:x"
    assert store.claim(owner, [job.id], 60).id == job.id
    assert store.enqueue(request(stem=str(tmp_path / "a")))[1] == BUSY
    store.checkpoint(job.id, owner, [seg(0, ["a"])], {"seek": 1}, 1.0, "en", "tiny.en", 60, complete=True)
    out.write_text("1\n")
    store.finish(job.id, owner, [str(out)])
    assert store.enqueue(request(stem=str(tmp_path / "a")))[1] == SKIP
    # only the output settings changed: rewrite outputs, keep the words
    job, action = store.enqueue(request(stem=str(tmp_path / "a"), spec={"formats": ["srt", "vtt"]}))
    assert action == OUTPUTS and job.words_complete and store.resume_point(job.id).checkpoints == 1
    out.unlink()  # outputs deleted by the user: rewritten
    store.claim(owner, [job.id], 60)
    store.finish(job.id, owner, [str(out)])
    assert store.enqueue(request(stem=str(tmp_path / "a"), spec={"formats": ["srt", "vtt"]}))[1] == OUTPUTS
    # changed content, changed options, --force: from scratch
    for changed in (dict(key="2:2:bb"), dict(fingerprint="f2"), dict()):
        store.claim(owner, [job.id], 60)
        store.finish(job.id, owner, [str(out)])
        job, action = store.enqueue(request(stem=str(tmp_path / "a"), **changed), force=not changed)
        assert action == REDO and not job.words_complete and job.progress == 0
        assert store.resume_point(job.id).checkpoints == 0


def test_failures_retry_then_fail_and_input_errors_stay_failed(store):
    job, _ = store.enqueue(request())
    for attempt in (1, 2, 3):
        store.claim("me:1:x", [job.id], 60)
        status = store.fail(job.id, "me:1:x", f"disk full {attempt}", retryable=True, max_attempts=3)
        assert status == (FAILED if attempt == 3 else QUEUED)
    job = store.get(job.id)
    assert (job.errors, job.runs, job.last_error) == (3, 3, "disk full 3")
    job, action = store.enqueue(request())  # a new run gives a transient failure fresh attempts
    assert action == RESUME and job.errors == 0
    store.claim("me:1:x", [job.id], 60)
    assert store.fail(job.id, "me:1:x", "file is empty", retryable=False, max_attempts=3) == FAILED
    assert store.enqueue(request())[1] == FAILED_BEFORE  # unchanged bad input: not retried
    assert store.enqueue(request(key="9:9:cc"))[1] == REDO  # the file changed: tried again
    store.claim("me:1:x", [job.id], 60)
    store.fail(job.id, "me:1:x", "file is empty", retryable=False, max_attempts=3)
    (job, action), = store.retry([job.id])
    assert action == RESUME and job.status == QUEUED and job.errors == 0


def test_claims_are_exclusive_across_connections(tmp_path):
    path = tmp_path / "jobs.db"
    with SqliteJobStore(path) as s:
        ids = [s.enqueue(request(path=f"/m/{i}.wav"))[0].id for i in range(40)]
    claimed: dict[str, list[int]] = {}

    def worker(name):
        with SqliteJobStore(path) as s:
            mine = claimed.setdefault(name, [])
            while (job := s.claim(name, ids, 60)) is not None:
                mine.append(job.id)
                s.finish(job.id, name, [])

    threads = [threading.Thread(target=worker, args=(f"h:{i}:x",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for ids_ in claimed.values() for i in ids_]
    assert sorted(every) == ids  # each job once, none lost


def test_expired_lease_is_taken_over_and_the_old_owner_fenced_off(store):
    job, _ = store.enqueue(request())
    old, new = "otherhost:123:a", "thishost:456:b"
    # a 1 s lease: the next call (milliseconds later) finds it live; 1.5 s later it has expired
    assert store.claim(old, [job.id], lease_seconds=1.0).lease_owner == old
    assert store.claim(new, [job.id], 60) is None  # live lease
    time.sleep(1.5)
    assert store.get(job.id).stalled()
    taken = store.claim(new, [job.id], 60)
    assert taken.lease_owner == new and taken.runs == 2
    with pytest.raises(LeaseLost):
        store.checkpoint(job.id, old, [seg(0, ["x"])], {"s": 1}, 5.0, "en", "m", 60)
    assert not store.heartbeat(job.id, old, 60)
    with pytest.raises(LeaseLost):
        store.finish(job.id, old, [])
    assert store.heartbeat(job.id, new, 60)
    assert store.resume_point(job.id).checkpoints == 0


def test_dead_runner_on_this_host_releases_its_job_at_once(store):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dead = f"{socket.gethostname()}:{proc.pid}:dead"
    alive = f"{socket.gethostname()}:{os.getpid()}:other"
    assert owner_is_dead(dead) and not owner_is_dead(alive) and not owner_is_dead("elsewhere:1:x")
    a, _ = store.enqueue(request(path="/m/a.wav"))
    b, _ = store.enqueue(request(path="/m/b.wav"))
    store.claim(dead, [a.id], 3600)
    store.claim(alive, [b.id], 3600)
    assert store.expire_dead_leases(owner_is_dead) == [a.id]
    assert store.claim("me:1:x", [a.id, b.id], 60).id == a.id


def test_checkpoints_append_words_and_resume_exactly(store):
    job, _ = store.enqueue(request())
    owner = "me:1:x"
    store.claim(owner, [job.id], 60)
    first, second = [seg(0.1 + 0.2, ["one", "two"])], [seg(30.000001, ["three"]), seg(40, ["four"])]
    assert store.checkpoint(job.id, owner, first, {"seek": 3000, "prompt_tokens": [1, 2]}, 30.0, "en", "m", 60) == 1
    assert store.checkpoint(job.id, owner, second, {"seek": 6000, "prompt_tokens": [3]}, 60.0, "en", "m", 60) == 2
    resume = store.resume_point(job.id)
    assert resume.segments == first + second  # full precision, diagnostics included
    assert resume.state == {"seek": 6000, "prompt_tokens": [3]} and resume.position == 60.0
    rows = store.checkpoints(job.id)
    assert [r["seq"] for r in rows] == [1, 2] and [r["has_state"] for r in rows] == [0, 1]
    assert store.checkpoint(job.id, owner, [], None, 60.0, "en", "m", 60, complete=True) == 2
    assert store.get(job.id).words_complete
    assert segments_from_json(segments_to_json(second)) == second


def test_spec_fingerprint_covers_words_not_outputs():
    base = JobSpec()
    assert base.fingerprint() == JobSpec(formats=("vtt", "json"), live=True).fingerprint()
    assert base.fingerprint() != JobSpec(options={"beam_size": 2}).fingerprint()
    assert base.fingerprint() != JobSpec(model="base").fingerprint()
    assert JobSpec.from_dict(json.loads(json.dumps(JobSpec(options={"beam_size": 3}, formats=("srt", "txt")).to_dict()))) == \
        JobSpec(options={"beam_size": 3}, formats=("srt", "txt"))
    with pytest.raises(ValueError):
        JobSpec(options={"beam_size": 0})


def test_content_key_sees_same_size_same_mtime_replacements(tmp_path):
    f = tmp_path / "a.wav"
    f.write_bytes(b"a" * 300_000)
    key = content_key(f)
    assert content_key(f) == key
    st = f.stat()
    f.write_bytes(b"a" * 150_000 + b"b" + b"a" * 149_999)  # same size, one byte in the middle
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert content_key(f) != key
    f.write_bytes(b"a" * 300_000)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert content_key(f) == key


def test_discovery_by_extension_and_by_probe(tmp_path):
    shutil.copy(JFK, tmp_path / "a.flac")
    shutil.copy(JFK, tmp_path / "recording.dat")  # unknown extension, real audio: probed, taken
    (tmp_path / "notes.xyz").write_text("not media")  # unknown extension, not audio: left out
    (tmp_path / "a.srt").write_text("1\n")  # our own output: never probed
    (tmp_path / "b.mp3.part").write_bytes(b"x")  # still downloading
    (tmp_path / ".hidden.wav").write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    shutil.copy(JFK, tmp_path / "sub" / "c.wav")
    found, missing = discover([tmp_path, tmp_path / "a.flac", tmp_path / "nope.mp3"])
    assert [f.name for f, _ in found] == ["a.flac", "recording.dat", "c.wav"]
    assert missing == [(tmp_path / "nope.mp3", "no such file or folder")]
    assert is_temporary(Path("x.crdownload")) and is_temporary(Path("~$x.wav")) and not is_temporary(Path("-a.wav"))
    assert not looks_like_media(tmp_path / "a.srt", check=lambda p: pytest.fail("probed an output"))


def test_stable_files_waits_for_growth_to_stop(tmp_path):
    tracker = StableFiles(tmp_path, stable_seconds=2.0, check=lambda p: True)
    f = tmp_path / "talk.wav"
    f.write_bytes(b"x" * 10)
    (tmp_path / "talk.wav.part").write_bytes(b"x" * 10)
    (tmp_path / "empty.wav").write_bytes(b"")
    assert tracker.scan(now=0.0) == []
    assert tracker.scan(now=1.5) == []
    with open(f, "ab") as fh:
        fh.write(b"y" * 10)  # still growing: the clock starts again
    assert tracker.scan(now=2.5) == []
    assert tracker.scan(now=4.0) == []
    assert tracker.scan(now=4.6) == [f]
    tracker.mark_taken(f)
    assert tracker.scan(now=10.0) == []  # taken: not again while unchanged
    f.write_bytes(b"z" * 50)
    assert tracker.scan(now=11.0) == []
    assert tracker.scan(now=13.5) == [f]  # changed and stable again
