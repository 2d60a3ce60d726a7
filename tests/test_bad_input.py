"""Issue 11, "nothing invented, nothing spliced": a file rewritten mid-run, a locked database,
flags past any useful range, and the CLI's small lies. Every case: its exit status, one line
(no traceback), no partial outputs, and a database that is intact with the job's row in it.

The model is never loaded: a scripted engine (tests/test_jobs_runner.py's) stands in for it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import jobs.cli
import jobs.engines
from jobs.engines import EngineCache
from jobs.cli import main
from jobs.batch import request_for
from jobs.spec import JobSpec
from jobs.store import JobStore
from transcriber import Segment, Step, Word

from .conftest import JFK, PRESS_YARD, ROOT, damaged_flac
from .test_jobs_runner import ScriptedEngine


@pytest.fixture
def media(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv("TRANSCRIBER_DEBUG", raising=False)
    monkeypatch.delenv("TRANSCRIBER_DB", raising=False)
    monkeypatch.delenv("TRANSCRIBER_DB_TIMEOUT", raising=False)
    path = tmp_path / "talk.flac"
    shutil.copy(JFK, path)
    return path


def use_engine(monkeypatch, engine) -> None:
    """The CLI's runners get ``engine`` for every job instead of loading a model (the CLI
    imports jobs.engines when it runs jobs, so the class is replaced there)."""
    real = EngineCache
    monkeypatch.setattr(jobs.engines, "EngineCache", lambda: real(lambda spec: engine))


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def intact(db: Path, media: Path) -> dict:
    """PRAGMA integrity_check is ok and the job's row is there; the row."""
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        row = conn.execute("SELECT * FROM jobs WHERE path = ?", [str(media.resolve())]).fetchone()
        assert row is not None
        return dict(row)
    finally:
        conn.close()


def no_traceback(result) -> None:
    assert "Traceback" not in result.output and not isinstance(result.exception, sqlite3.Error)


def locked_line(db: Path, waited: str) -> str:
    """The one line a command prints when the job database stayed locked too long."""
    return f"error: the job database {db} is locked by another process (waited {waited} s; see --db-timeout)"


def words_of(media: Path) -> list[str]:
    data = json.loads(media.with_suffix(".json").read_text())
    return [w["word"] for s in data["segments"] for w in s["words"]]


# --- 1. the source is pinned for the life of a job -------------------------------------------

def test_a_file_rewritten_mid_run_fails_and_is_redone_from_scratch(tmp_path, media, monkeypatch):
    db = tmp_path / "jobs.db"
    args = ("--db", str(db), str(media), "-f", "json", "--checkpoint-seconds", "1", "-q")

    def rewrite_at_6(i):  # after the first checkpoint (1.0 s), before the second
        if i == 6:
            shutil.copy(PRESS_YARD, media)

    use_engine(monkeypatch, ScriptedEngine(rewrite_at_6))
    first = invoke(*args)
    no_traceback(first)
    assert first.exit_code == 1
    errors = [line for line in first.stderr.splitlines() if "changed" in line]
    assert errors == [f"error: {media.resolve()}: file changed while being transcribed"]
    assert "0 done, 0 skipped, 1 failed" in first.stderr
    assert not media.with_suffix(".json").exists()  # no output spliced from two recordings
    row = intact(db, media)
    assert row["status"] == "failed" and "file changed" in row["last_error"]

    second_engine = NewRecording()
    use_engine(monkeypatch, second_engine)
    second = invoke(*args)
    assert second.exit_code == 0, second.output
    assert second_engine.started_from == [None]  # from scratch, not from the old checkpoint
    assert words_of(media) == [" Eight.", " The", " press", " yard."]  # none of the old words
    row = intact(db, media)
    assert row["status"] == "done" and row["errors"] == 0


class NewRecording(ScriptedEngine):
    """What the rewritten file says, one word a step (PRESS_YARD: 1.6 s)."""

    def steps(self, path, state):
        self.started_from.append(state)
        for i, text in enumerate([" Eight.", " The", " press", " yard."][state["i"] if state else 0:]):
            word = Word(i * 0.4, i * 0.4 + 0.3, text, 0.9)
            yield Step((word,), (Segment(word.start, word.end, text, (word,)),), {"i": i + 1}, (i + 1) * 0.4, "en")


def test_a_file_deleted_mid_run_finishes_from_what_was_opened(tmp_path, media, monkeypatch):
    db = tmp_path / "jobs.db"

    def delete_at_6(i):
        if i == 6:
            media.unlink()

    use_engine(monkeypatch, ScriptedEngine(delete_at_6))
    result = invoke("--db", str(db), str(media), "-f", "json", "--checkpoint-seconds", "1", "-q")
    assert result.exit_code == 0, result.output
    assert words_of(media) == [f" w{i}" for i in range(1, 11)]
    assert intact(db, media)["status"] == "done"


# --- 2. database contention -------------------------------------------------------------------

@pytest.fixture
def locked(tmp_path):
    """A job database (created) and a function that locks it from another connection."""
    db = tmp_path / "jobs.db"
    JobStore(db).close()
    conns = []

    def lock():
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        conns.append(conn)

    def unlock():
        while conns:
            conns.pop().rollback()

    yield db, lock, unlock
    unlock()


# (``status`` only reads: in WAL mode a writer's lock never blocks it)
@pytest.mark.parametrize("command", [["run", "{media}"], ["run", "--force", "{media}"], ["retry", "{media}"]])
def test_a_database_locked_before_the_run_is_one_line_and_exit_1(locked, media, command):
    db, lock, unlock = locked
    with JobStore(db) as store:  # a job to retry
        store.enqueue(request_for(media, None, None, JobSpec()))
    lock()
    args = [a.replace("{media}", str(media)) for a in command]
    result = invoke(*args, "--db", str(db), "--db-timeout", "0.3")
    no_traceback(result)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [locked_line(db, "0.3")]
    assert not media.with_suffix(".srt").exists()
    unlock()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_a_long_wait_is_told_once_and_the_env_var_sets_the_timeout(locked, media, monkeypatch):
    db, lock, unlock = locked
    lock()
    monkeypatch.setenv("TRANSCRIBER_DB_TIMEOUT", "3.4")
    result = invoke("--db", str(db), str(media))
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"waiting for the job database {db}, locked by another process", locked_line(db, "3.4")]


def test_a_database_locked_mid_run_stops_with_one_line_and_resumes(locked, media, monkeypatch):
    db, lock, unlock = locked

    def lock_at_6(i):
        if i == 6:
            lock()

    engine = ScriptedEngine(lock_at_6)
    use_engine(monkeypatch, engine)
    args = ("--db", str(db), "--db-timeout", "0.3", str(media), "-f", "json", "--checkpoint-seconds", "1", "-q")
    result = invoke(*args)
    no_traceback(result)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [locked_line(db, "0.3")]
    assert not media.with_suffix(".json").exists()
    unlock()
    row = intact(db, media)
    assert row["status"] == "running"  # its runner is gone: resumed from its checkpoint next time
    with JobStore(db) as store:  # as the next process sees it (here, the runner's pid still lives)
        store.expire_dead_leases(lambda owner: True)
    again = ScriptedEngine()
    use_engine(monkeypatch, again)
    assert invoke(*args).exit_code == 0
    assert again.started_from == [{"i": 4}]
    assert words_of(media) == [f" w{i}" for i in range(1, 11)]
    assert intact(db, media)["status"] == "done"


# --- 3. every flag's cost is bounded ----------------------------------------------------------

@pytest.mark.parametrize("flag, value, message", [
    ("--beam-size", "1000", "--beam-size must be in [1, 16], not 1000"),
    ("--chunk-seconds", "0.001", "--chunk-seconds must be in [0.1, 30]"),
    ("--chunk-seconds", "31", "--chunk-seconds"),
    ("--audio-max-len", "0.5", "--audio-max-len must be in [1, 30]"),
    ("--audio-max-len", "1e9", "--audio-max-len must be in [1, 30]"),
    ("--frame-threshold", "100000", "--frame-threshold (100000 frames) must be shorter than --audio-max-len"),
    ("--max-line-chars", "100000", "--max-line-chars must be at most 200"),
    ("--max-lines", "1000", "--max-lines must be at most 10"),
    ("--max-cps", "1e6", "--max-cps must be at most 100"),
    ("--max-duration", "1e6", "--max-duration must be at most 60"),
])
def test_flags_past_their_range_are_usage_errors(tmp_path, media, flag, value, message):
    from transcriber import option_table

    db = tmp_path / "jobs.db"
    modes = option_table().get(flag[2:].replace("-", "_"), (None, ("oneshot",)))[1]  # a mode that takes it
    result = invoke("--db", str(db), str(media), "--mode", modes[0], flag, value)
    no_traceback(result)
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], result.output
    assert not media.with_suffix(".srt").exists() and not db.exists()  # refused before anything


def test_library_options_bound_what_the_cli_does_not_expose():
    from transcriber import DecodingOptions, TranscribeOptions

    with pytest.raises(ValueError, match="best_of must be in 1..16"):
        DecodingOptions(temperature=0.5, best_of=100)
    with pytest.raises(ValueError, match="patience"):
        DecodingOptions(beam_size=5, patience=1000)
    with pytest.raises(ValueError, match="best_of"):
        TranscribeOptions(best_of=1000)
    DecodingOptions(beam_size=16, patience=2.0)  # the bounds themselves are allowed


# --- 4. smaller items -------------------------------------------------------------------------

def test_group_level_options_before_a_subcommand(tmp_path, media):
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), "status")
    assert result.exit_code == 0 and result.output.strip() == "no jobs"
    assert db.exists()
    assert invoke("--db-timeout", "5", "--db", str(db), "status", "--json").output.strip() == "[]"


def test_retries_count_once_in_the_batch_bar_and_each_error_prints_once(tmp_path, media, monkeypatch):
    db = tmp_path / "jobs.db"
    other = tmp_path / "other.flac"
    shutil.copy(PRESS_YARD, other)

    def always(i):
        if i == 3:
            raise RuntimeError("boom")

    use_engine(monkeypatch, ScriptedEngine(always))
    totals = []
    import jobs.progress

    real_end = jobs.progress.Reporter.end

    def end(self, file, counts_as_file=True):
        if counts_as_file:  # the batch's count of files, with or without a bar (here a pipe: none)
            totals.append(self.total_files)
        return real_end(self, file, counts_as_file)

    monkeypatch.setattr(jobs.progress.Reporter, "end", end)
    result = invoke("--db", str(db), str(media), str(other), "-f", "json", "--max-attempts", "3")
    assert result.exit_code == 1
    assert totals == [2, 2]  # two files end, though each was attempted three times
    booms = [line for line in result.stderr.splitlines() if "error: " in line]  # between bars
    assert len(booms) == 2 and all(line.endswith("unexpected RuntimeError: boom") for line in booms)
    assert "0 done, 0 skipped, 2 failed" in result.stderr
    assert not any(line.startswith("failed:") for line in result.stderr.splitlines())
    assert not media.with_suffix(".json").exists() and not other.with_suffix(".json").exists()
    assert intact(db, media)["errors"] == 3


def test_no_media_names_the_folder(tmp_path):
    folder = tmp_path / "nothing here"
    folder.mkdir()
    (folder / "notes.txt").write_text("hi")
    result = invoke("--db", str(tmp_path / "jobs.db"), str(folder))
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"error: no media files found in {folder}"]


@pytest.mark.parametrize("mode", ["oneshot", "stream"])
def test_ffmpeg_errors_on_a_file_it_decodes_are_kept_on_the_job_as_a_warning(tmp_path, monkeypatch, mode):
    """20 KB of garbage in a FLAC: transcribed (done, exit 0), and ffmpeg's complaint is told in
    the run's line for the file, by ``status`` and ``status --json``: a count and the first
    message, not pages of stderr. The real model: the warning comes from decoding the audio."""
    monkeypatch.delenv("TRANSCRIBER_DB", raising=False)
    media = damaged_flac(tmp_path / "damaged.flac")
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), str(media), "--mode", mode, "-f", "json")
    assert result.exit_code == 0, result.output
    done = [line[line.index("done: "):] for line in result.stderr.splitlines() if "done: " in line]
    warning = re.search(r"\(warning: (ffmpeg reported \d+ error messages? while decoding, the first: [^()]+)\)$",
                        done[0])
    assert len(done) == 1 and warning, result.stderr
    assert len(warning.group(1)) < 200
    assert words_of(media)  # the speech that survived is there

    row = intact(db, media)
    assert row["status"] == "done" and json.loads(row["warnings"]) == [warning.group(1)]
    table = invoke("--db", str(db), "status").stdout.splitlines()
    assert table[0].split()[-1] == "NOTE" and table[1].endswith(f"warning: {warning.group(1)}")
    (job,) = json.loads(invoke("--db", str(db), "status", "--json").stdout)
    assert job["warnings"] == [warning.group(1)]

    if mode == "oneshot":  # (the store's part, the same for both modes: once is enough)
        shutil.copy(PRESS_YARD, media)  # repaired: redone from scratch, its old warning dropped
        assert invoke("--db", str(db), str(media), "--mode", mode, "-f", "json", "-q").exit_code == 0
        assert intact(db, media)["warnings"] is None
        assert json.loads(invoke("--db", str(db), "status", "--json").stdout)[0]["warnings"] == []


# --- issue 18: usage errors before anything is queued; nothing hangs; the environment named -----

@pytest.mark.parametrize("args, message", [
    (["--model", "base", "--language", "xx"], "unknown language 'xx': --language takes one of Whisper's codes: en, "),
    (["--model", "no-such-model"], "unknown model 'no-such-model': --model takes a name, tiny.en (pip install "),
    (["--mode", "oneshot", "--chunk-seconds", "2"], "--chunk-seconds does not apply to --mode oneshot (only to stream)"),
    (["--vtt-karaoke"], "--vtt-karaoke needs the vtt format (-f vtt)"),
    (["--json-cues", "-f", "srt"], "--json-cues needs the json format (-f json)"),
])
def test_usage_errors_come_before_anything_is_queued(tmp_path, media, monkeypatch, args, message):
    """Exit 2 with the cause (an unknown model names the pip packages and folder layouts), the
    database not even created, the engine never asked."""
    engine = ScriptedEngine(n=4)
    use_engine(monkeypatch, engine)
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), str(media), "-q", *args)
    no_traceback(result)
    assert result.exit_code == 2
    assert f"Error: {message}" in result.stderr
    if "no-such-model" in args:
        assert "CTranslate2 layout (model.bin" in result.stderr and "MLX layout" in result.stderr
    assert not db.exists() and engine.started_from == []


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """The command in its own process (a hang is a TimeoutExpired, not a stuck suite)."""
    return subprocess.run([sys.executable, "-m", "jobs", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TRANSCRIBER_BLAS": "none", **(env or {})}, cwd=ROOT)


@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_a_fifo_socket_or_device_named_is_refused_at_once(tmp_path, kind):
    """Never opened (a FIFO nobody writes would block the content key's open() forever): one
    line naming it, exit 1, within seconds."""
    if kind == "fifo":
        path = tmp_path / "pipe.wav"
        os.mkfifo(path)
        what = "a named pipe (FIFO)"
    elif kind == "socket":
        path = tmp_path / "sock.wav"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        what = "a socket"
    else:
        path, what = Path("/dev/zero"), "a character device"
    result = cli("--db", str(tmp_path / "jobs.db"), str(path), "-q", timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        "0 done, 0 skipped, 1 failed",
        f"failed: {path}: {what}, not a file: refused (only regular files are transcribed)"]


def test_a_queued_file_deleted_since_is_gone_in_every_view(tmp_path, media):
    """Queued, then deleted: ``gone`` in the table, the count line and --json; ``-s gone`` finds it."""
    db = tmp_path / "jobs.db"
    with JobStore(db) as store:
        store.enqueue(request_for(media, None, None, JobSpec()))
    media.unlink()
    table = invoke("status", "--db", str(db)).stdout.splitlines()
    assert table[1].split()[1] == "gone" and table[-1] == "1 gone"
    (job,) = json.loads(invoke("status", "--db", str(db), "--json").stdout)
    assert job["status"] == "gone" and job["stalled"] is False
    assert invoke("status", "--db", str(db), "-s", "gone").stdout.splitlines()[-1] == "1 gone"


def test_status_json_is_written_job_by_job(tmp_path, media, monkeypatch):
    """``status --json`` writes the jobs as it reads them (flat memory for any number of jobs),
    a chunk at a time (whether the files of a chunk's queued jobs exist is asked of one child,
    with the bound on reads): when the store hands out its Nth job, the chunks before it are on
    stdout already."""
    monkeypatch.setattr(jobs.cli, "LOOK_CHUNK", 4)
    db = tmp_path / "jobs.db"
    with JobStore(db) as store:
        for i in range(30):
            store.enqueue(request_for(media, None, Path(tmp_path / f"out{i}"), JobSpec()))
    written_before = []
    each_job = JobStore.each_job

    def watched(self):
        for job in each_job(self):
            sys.stdout.flush()
            written_before.append(sys.stdout.buffer.getvalue().count(b'"id": '))
            yield job

    monkeypatch.setattr(JobStore, "each_job", watched)
    result = invoke("--db", str(db), "status", "--json")
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == 30
    assert written_before == [n // 4 * 4 for n in range(30)]


def test_a_name_of_241_bytes_and_more_gets_its_outputs(tmp_path, monkeypatch):
    """A 250-byte name (255 is the usual limit): its outputs (249 bytes) fit, and so must the
    atomic writer's temporary names."""
    media = tmp_path / ("x" * 245 + ".flac")
    shutil.copy(PRESS_YARD, media)
    use_engine(monkeypatch, ScriptedEngine(n=4))
    result = invoke("--db", str(tmp_path / "jobs.db"), str(media), "-f", "srt,json", "-q")
    assert result.exit_code == 0, result.output
    assert sorted(p.suffix for p in tmp_path.glob("x*")) == [".flac", ".json", ".srt"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_stale_part_files_are_removed_by_the_next_run(tmp_path, media, monkeypatch):
    """What a kill between writing and renaming leaves (today's temporary names and the old
    ``.talk.srt.XXXXXXXX.part``) is removed once it is a minute old; a fresh one (another
    writer's, maybe) and files that are not ours stay."""
    from transcriber.writers import temp_prefix
    old = [tmp_path / ".talk.srt.ab12cd34.part", tmp_path / f"{temp_prefix('talk.json')}zz9_abcd.part"]
    fresh = tmp_path / f"{temp_prefix('talk.srt')}fresh123.part"
    other = tmp_path / ".download.part"
    for path in (*old, fresh, other):
        path.write_text("partial")
    for path in (*old, other):
        os.utime(path, (time.time() - 3600,) * 2)
    use_engine(monkeypatch, ScriptedEngine(n=4))
    assert invoke("--db", str(tmp_path / "jobs.db"), str(media), "-f", "srt,json", "-q").exit_code == 0
    assert [p.exists() for p in (*old, fresh, other)] == [False, False, True, True]


def test_a_stale_conversion_folder_is_no_model_and_the_next_conversion_removes_it(tmp_path, monkeypatch):
    """kill -9 mid-conversion leaves models/.convert-XXXX: `transcribe models` does not list
    it, and the next conversion in that cache removes it once it is stale (not a fresh one)."""
    import numpy as np
    from transcriber.model import loader
    monkeypatch.setenv("TRANSCRIBER_CACHE", str(tmp_path / "cache"))
    models = tmp_path / "cache" / "models"
    stale, fresh = models / ".convert-k1ll3d", models / ".convert-wr1t1n"
    for folder in (stale, fresh):
        folder.mkdir(parents=True)
        (folder / "weights.safetensors").write_bytes(b"\0" * 1000)
        (folder / "config.json").write_text("{}")
    os.utime(stale, (time.time() - 3600,) * 2)
    listing = invoke("models")
    assert listing.exit_code == 0 and ".convert" not in listing.stdout
    loader._convert_once(models / "made-1234", tmp_path, lambda: ({"w": np.zeros(2, np.float32)}, {}))
    assert (models / "made-1234" / "weights.safetensors").is_file()
    assert not stale.exists() and fresh.exists()


@pytest.fixture
def converted_tiny() -> Path:
    """The default cache's conversion of tiny.en (made if needed)."""
    from transcriber.model import loader
    folder, _ = loader.resolve("tiny.en")
    return folder


MS_RDONLY, MS_REMOUNT, MS_BIND, MNT_DETACH = 1, 32, 4096, 2


@contextlib.contextmanager
def read_only(folder: Path):
    """``folder`` read-only for every process: mode 0o500, and where this user writes anyway
    (root), a read-only bind mount of it over itself (what root cannot write either)."""
    folder.chmod(0o500)
    libc, mounted = ctypes.CDLL(None, use_errno=True), False
    try:
        if os.access(folder, os.W_OK):
            name = os.fsencode(folder)
            mounted = libc.mount(name, name, None, MS_BIND, None) == 0
            if not mounted or libc.mount(None, name, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None) != 0:
                pytest.skip(f"this user writes anywhere and cannot mount: {os.strerror(ctypes.get_errno())}")
        assert not os.access(folder, os.W_OK)
        yield folder
    finally:
        if mounted:
            libc.umount2(os.fsencode(folder), MNT_DETACH)
        folder.chmod(0o700)


@pytest.mark.parametrize("fault", ["under a file", "read-only"])
def test_an_unusable_database_folder_is_one_line_saying_what_to_do(tmp_path, media, fault):
    """--db in a folder that cannot be made (under a file) or written: one line naming the
    database and its folder and what to do, exit 1, nothing written."""
    folder = tmp_path / "a-file" / "db" if fault == "under a file" else tmp_path / "db"
    if fault == "under a file":
        folder.parent.write_text("")
    else:
        folder.mkdir()
    db = folder / "jobs.db"
    with read_only(folder) if fault == "read-only" else contextlib.nullcontext():
        result = cli("--db", str(db), str(media), "-q")
    why = "Not a directory" if fault == "under a file" else "its folder is read-only"
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f"error: cannot open job database {db} ({why}): make its folder {folder} writable, or put it elsewhere "
        f"with --db or $TRANSCRIBER_DB"]
    assert not db.exists() and not media.with_suffix(".srt").exists()


@pytest.mark.parametrize("fault", ["not a folder", "read-only"])
def test_an_unusable_cache_folder_is_one_line_and_fails_no_job(tmp_path, media, fault):
    """$TRANSCRIBER_CACHE a file, or a read-only folder without the conversion: one line naming
    the cache folder and what to do, exit 1; the job is still queued, no attempt counted."""
    cache = tmp_path / "cache"
    db = tmp_path / "jobs.db"
    with contextlib.ExitStack() as stack:
        if fault == "not a folder":
            cache.write_text("")
        else:
            cache.mkdir()
            stack.enter_context(read_only(cache))
        result = cli("--db", str(db), str(media), "-q", env={"TRANSCRIBER_CACHE": str(cache)})
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: the cache folder {cache} cannot be used (") and line.endswith(
        "): make it a writable folder, or point $TRANSCRIBER_CACHE at one"), line
    row = intact(db, media)
    assert row["status"] == "queued" and row["errors"] == 0


@pytest.mark.slow
def test_a_cache_that_cannot_take_the_checked_marker_still_transcribes(tmp_path, media, converted_tiny):
    """A cache holding a good conversion where the "checked" marker cannot be written (read-only,
    or its folder taken by a file): the model is checked again and the file transcribed."""
    models = tmp_path / "cache" / "models" / converted_tiny.name
    models.mkdir(parents=True)
    for f in converted_tiny.iterdir():
        os.link(f, models / f.name)
    (tmp_path / "cache" / "checked").write_text("")  # the marker's folder cannot be made
    for folder in (models, models.parent, tmp_path / "cache"):
        folder.chmod(0o500)
    try:
        result = cli("--db", str(tmp_path / "jobs.db"), str(media), "--mode", "oneshot", "-f", "json", "-q",
                     env={"TRANSCRIBER_CACHE": str(tmp_path / "cache")})
    finally:
        for folder in (models, models.parent, tmp_path / "cache"):
            folder.chmod(0o700)
    assert result.returncode == 0, result.stderr
    assert "country" in media.with_suffix(".json").read_text()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_acts_within_2_seconds_even_in_a_long_step(tmp_path, media, monkeypatch, signum):
    """SIGTERM or Ctrl-C while the engine is in a 30 s step (a long one-shot window, a slow model
    load): the step is dropped within 2 s, exit 128 + the signal, and the job goes back to the
    queue with its last checkpoint (the first two steps)."""
    def slow_third_step(i):
        if i == 3:
            threading.Timer(0.2, os.kill, [os.getpid(), signum]).start()
            time.sleep(30)

    use_engine(monkeypatch, ScriptedEngine(slow_third_step))
    db = tmp_path / "jobs.db"
    t0 = time.monotonic()
    result = invoke("--db", str(db), str(media), "-f", "json", "--checkpoint-seconds", "0.25", "-q")
    assert time.monotonic() - t0 < 2.0 + 0.5 + 1.0  # the stop's 2 s, the first steps, slack
    no_traceback(result)
    assert result.exit_code == 128 + signum
    row = intact(db, media)
    assert row["status"] == "queued" and row["errors"] == 0 and row["progress"] == 0.5
    assert not media.with_suffix(".json").exists()
