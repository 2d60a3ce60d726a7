"""A follow whose ffmpeg fails never loses the file (issue 29): its job is failed with ffmpeg's
reason and the command exits non-zero, in ``follow`` and in ``watch --follow``. ffmpeg fails
for real here: a script named ``ffmpeg`` first on PATH, exiting 1 with a message, as Debian's
5.1 did at an option it refused."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from bench.streaming.follow_latency import GrowingWriter
from transcriber.app.store.sqlite_store import SqliteJobStore
from tests.conftest import JFK
from tests.media.test_follow import start, transcribe
from transcriber.media.audio import load_audio

MESSAGE = "pipe:0: Error setting option max_size to value 128."


@pytest.fixture
def failing_ffmpeg(tmp_path) -> dict:
    """The environment of a command whose ffmpeg (and ffprobe) fail at once, with MESSAGE."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("ffmpeg", "ffprobe"):
        (folder / name).write_text(f"#!/bin/sh\necho '{MESSAGE}' >&2\nexit 1\n")
        (folder / name).chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def the_job(db: Path):
    """The one job of the store (None: none yet)."""
    if not db.exists():
        return None
    with SqliteJobStore(db) as store:
        jobs = store.jobs()
    assert len(jobs) <= 1, jobs
    return jobs[0] if jobs else None


def test_follow_whose_ffmpeg_fails_is_a_failed_job_with_the_reason(tmp_path, failing_ffmpeg):
    source = tmp_path / "rec.wav"
    writer = GrowingWriter(load_audio(JFK)[:3 * 16000], source, piece_seconds=0.5)
    writer.start()
    while not source.exists():
        time.sleep(0.01)
    r = transcribe("follow", source, "-o", tmp_path / "out", "--idle-seconds", 1, tmp=tmp_path, env=failing_ffmpeg)
    writer.join()
    assert r.returncode == 1, r.stderr
    (line,) = r.stderr.splitlines()
    assert line == f"error: cannot read audio from '{source}': {MESSAGE[:-1]}"
    job = the_job(tmp_path / "jobs.db")
    assert job.status == "failed" and MESSAGE[:-1] in job.last_error


@pytest.mark.slow
def test_watch_follow_whose_ffmpeg_fails_is_a_failed_job_never_a_lost_file(tmp_path, failing_ffmpeg):
    """The file's follow fails at once: its job is failed with the reason, it is not followed
    again at each growth, and once it is stable it is transcribed as any file is (failing the
    same way here). The summary counts it; the exit status says so. (It was "0 done, 0 failed",
    exit 0, and no job.)"""
    folder = tmp_path / "in"
    folder.mkdir()
    watch = start("watch", folder, "--follow", "--mode", "stream", "-o", tmp_path / "out", "-f", "json",
                  "--stable-seconds", 1.5, "--interval", 0.2, tmp=tmp_path, env=failing_ffmpeg)
    time.sleep(1)  # its first scan: the file is new after it
    writer = GrowingWriter(load_audio(JFK)[:6 * 16000], folder / "rec.wav", piece_seconds=0.5)
    writer.start()
    writer.join()
    deadline, job = time.monotonic() + 60, None
    while job is None or (job.runs, job.status) != (2, "failed"):  # the follow's run, then the stable file's
        assert time.monotonic() < deadline and watch.poll() is None
        time.sleep(0.2)
        job = the_job(tmp_path / "jobs.db")
    watch.send_signal(signal.SIGINT)
    _, stderr = watch.communicate(timeout=60)
    assert watch.returncode == 1, stderr
    assert stderr.splitlines()[-1] == "watch stopped: 0 done, 1 failed", stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2 and all(MESSAGE[:-1] in line for line in errors), stderr
    job = the_job(tmp_path / "jobs.db")
    assert job.status == "failed" and MESSAGE[:-1] in job.last_error
