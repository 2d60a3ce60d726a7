"""`transcribe status` and `transcribe retry` through Click's CliRunner, on a real database
whose jobs are put in every state through the store (no model is loaded here)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import srt
from click.testing import CliRunner

from transcriber.app.cli.main import main
from transcriber.app.store.domain import Request
from transcriber.app.run.enqueue import request_for
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.sqlite_store import SqliteJobStore
from transcriber.app.store.jobstore import default_path
from transcriber.transcript.types import Segment, Word

from tests.conftest import JFK

SHORT = "audio/short_en/sr_one_two_three.flac"  # 2.74 s, in the recordings (the data_dir fixture)
OWNER = "me:1:x"


def words_segment() -> Segment:
    words = (Word(0.2, 0.6, " One,", 0.9), Word(0.7, 1.1, " two,", 0.9), Word(1.2, 1.8, " three.", 0.9))
    return Segment(0.2, 1.8, " One, two, three.", words)


@pytest.fixture
def db(tmp_path, data_dir) -> Path:
    """gone.wav: failed on its input; done.wav: done; queued.wav: queued; stalled.wav: its runner
    died; real.flac: words complete but writing its outputs failed (a full disk, say)."""
    path = tmp_path / "jobs.db"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    shutil.copy(data_dir / SHORT, tmp_path / "real.flac")
    for name in ("gone.wav", "done.wav", "queued.wav", "stalled.wav"):  # there: not shown "gone"
        (tmp_path / name).write_bytes(b"")
    with SqliteJobStore(path) as store:
        def add(name: str) -> int:
            p = str(tmp_path / name)
            return store.enqueue(Request(p, "1:1:x", "f", JobSpec().to_dict(), p[:-4]))[0].id

        gone, done, _, stalled = add("gone.wav"), add("done.wav"), add("queued.wav"), add("stalled.wav")
        store.claim(OWNER, [gone], 60)
        store.fail(gone, OWNER, "cannot read audio from 'gone.wav': file is empty", False, 3)
        store.claim(OWNER, [done], 60)
        store.checkpoint(done, OWNER, [words_segment()], {"seek": 1}, 2.0, "en", "tiny.en", 60, complete=True)
        store.finish(done, OWNER, [str(tmp_path / "done.srt")])
        store.claim(f"{socket.gethostname()}:{dead.pid}:gone", [stalled], 3600)
        real = store.enqueue(request_for(tmp_path / "real.flac", None, None, JobSpec(formats=("srt", "json"))))[0].id
        store.claim(OWNER, [real], 60)
        store.start(real, OWNER, store.get(real).content_key, 2.74, worker="node-a:42")
        store.checkpoint(real, OWNER, [words_segment()], {"seek": 274}, 2.74, "en", "tiny.en", 60, complete=True)
        store.fail(real, OWNER, "cannot write real.srt: No space left on device", True, 1)
    return path


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_status_table(db):
    result = invoke("status", "--db", str(db))
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "PROGRESS", "RUNS", "LANGUAGE", "WORKER", "UPDATED", "FILE", "NOTE"]
    rows = {Path(line.split()[8]).name: line for line in lines[1:6]}
    assert rows["real.flac"].split()[5] == "node-a:42"  # the process that decoded it
    assert rows["queued.wav"].split()[5] == "-"  # never started
    assert rows["gone.wav"].split()[1] == "failed" and rows["gone.wav"].endswith("file is empty")
    assert rows["done.wav"].split()[1] == "done" and "0:02/" in rows["done.wav"]
    assert rows["queued.wav"].split()[1] == "queued"
    assert rows["stalled.wav"].split()[1] == "stalled"  # its runner's process is gone
    assert rows["real.flac"].split()[1] == "failed" and rows["real.flac"].endswith("No space left on device")
    assert lines[-1] == "1 queued, 1 done, 2 failed, 1 stalled"  # as the table says


def test_status_json_and_filter(db):
    jobs = json.loads(invoke("status", "--db", str(db), "--json").stdout)
    assert [Path(j["path"]).name for j in jobs] == ["gone.wav", "done.wav", "queued.wav", "stalled.wav", "real.flac"]
    assert {j["status"] for j in jobs} == {"failed", "done", "queued", "stalled"}
    assert [j["stalled"] for j in jobs] == [False, False, False, True, False]
    gone = jobs[0]
    assert gone["last_error"].endswith("file is empty") and "\n" not in gone["last_error"]
    assert gone["errors"] == 1 and gone["retryable"] is False and gone["spec"]["model"] == "tiny.en"
    failed = invoke("status", "--db", str(db), "-s", "failed")
    assert [line.split()[1] for line in failed.stdout.splitlines()[1:3]] == ["failed", "failed"]
    assert invoke("status", "--db", str(db), "-s", "running").stdout.strip() == "no jobs with status running"
    stalled = invoke("status", "--db", str(db), "-s", "stalled")
    assert [Path(line.split()[8]).name for line in stalled.stdout.splitlines()[1:-1]] == ["stalled.wav"]
    assert stalled.stdout.splitlines()[-1] == "1 stalled"
    empty = invoke("status", "--db", str(db.parent / "other.db"))
    assert empty.stdout.strip() == "no jobs"


def test_db_location_env_and_default(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSCRIBER_DB", str(tmp_path / "env.db"))
    assert invoke("status").exit_code == 0 and (tmp_path / "env.db").exists()
    monkeypatch.delenv("TRANSCRIBER_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    if sys.platform.startswith("linux"):
        assert default_path() == tmp_path / "data" / "transcriber" / "jobs.db"
        assert invoke("status").exit_code == 0 and default_path().exists()


def test_retry_needs_a_job(db):
    result = CliRunner().invoke(main, ["retry", "--db", str(db)])
    assert result.exit_code == 2 and "--failed" in result.output
    result = invoke("retry", "--db", str(db), "99", "-q")
    assert result.exit_code == 1 and "failed: 99: no such job" in result.stderr


def test_retry_failed_resumes_from_the_stored_words(db, tmp_path):
    """retry --failed: the bad input fails again (one line, exit 1); the job whose words were
    complete only has its outputs written: done, without the model."""
    result = invoke("retry", "--db", str(db), "--failed", "-q")
    assert result.exit_code == 1
    assert "1 done, 0 skipped, 1 failed" in result.stderr
    assert [line for line in result.stderr.splitlines() if "gone.wav" in line] == [  # once, as it failed
        f"error: cannot read audio from {str(tmp_path / 'gone.wav')!r}: file is empty"]
    subs = list(srt.parse((tmp_path / "real.srt").read_text()))
    assert " ".join(s.content.replace("\n", " ") for s in subs) == "One, two, three."
    assert json.loads((tmp_path / "real.json").read_text())["segments"][0]["text"] == " One, two, three."
    with SqliteJobStore(db) as store:
        real = store.by_path(str(tmp_path / "real.flac"))
        assert (real.status, real.runs, real.errors, real.last_error) == ("done", 2, 0, None)
        assert store.by_path(str(tmp_path / "gone.wav")).runs == 2
    again = invoke("retry", "--db", str(db), str(tmp_path / "done.wav"), "-q")  # done: redone from scratch
    assert again.exit_code == 1 and "done.wav" in again.stderr  # done.wav does not exist


def test_help_has_examples():
    for command in ([], ["run"], ["status"], ["retry"], ["watch"]):
        result = invoke(*command, "--help")
        assert result.exit_code == 0 and "Examples:" in result.output, command


def test_run_reports_bad_inputs_without_loading_a_model(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "empty.wav").write_bytes(b"")
    (folder / "text.mp3").write_text("not audio\n" * 100)
    db = str(tmp_path / "jobs.db")
    result = invoke("--db", db, str(folder), str(tmp_path / "missing.wav"), "-q")  # the default command
    assert result.exit_code == 1
    lines = result.stderr.splitlines()  # each error once: the runner's as they happen, then the summary
    assert lines[0].startswith("error: cannot read audio from") and lines[0].endswith("file is empty")
    assert lines[1].startswith("error: cannot read audio from") and "text.mp3" in lines[1]
    assert lines[2] == "0 done, 0 skipped, 3 failed"
    assert lines[3] == f"failed: {tmp_path / 'missing.wav'}: no such file or folder"
    assert len(lines) == 4 and "Traceback" not in result.output
    assert sorted(p.name for p in folder.iterdir()) == ["empty.wav", "text.mp3"]  # no outputs
    nothing = invoke("--db", db, str(tmp_path / "empty-folder-does-not-exist"), "-q")
    assert nothing.exit_code == 1 and "no such file or folder" in nothing.stderr
    (tmp_path / "void").mkdir()
    assert f"no media files found in {tmp_path / 'void'}" in invoke("--db", db, str(tmp_path / "void")).stderr


def test_same_stem_files_keep_their_suffix(tmp_path):
    from transcriber.app.run.enqueue import enqueue_files

    for name in ("talk.wav", "talk.flac", "other.flac"):
        shutil.copy(JFK, tmp_path / name)
    with SqliteJobStore(tmp_path / "jobs.db") as store:
        files = [(tmp_path / n, tmp_path) for n in ("talk.wav", "talk.flac", "other.flac")]
        batch = enqueue_files(store, files, JobSpec(), None)
        stems = sorted(Path(j.output_stem).name for j in store.jobs(ids=batch.to_run))
    assert stems == ["other", "talk.flac", "talk.wav"]


def test_the_format_flag_given_again_adds_formats(tmp_path):
    shutil.copy(JFK, tmp_path / "talk.flac")
    db = str(tmp_path / "jobs.db")
    result = invoke("--db", db, str(tmp_path / "talk.flac"), "-f", "srt", "-f", "vtt,json", "-q")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.glob("talk.*")) == ["talk.flac", "talk.json", "talk.srt", "talk.vtt"]
    bad = CliRunner().invoke(main, ["--db", db, str(tmp_path / "talk.flac"), "-f", "srt", "-f", "docx"])
    assert bad.exit_code == 2 and "unknown format 'docx'" in bad.output
