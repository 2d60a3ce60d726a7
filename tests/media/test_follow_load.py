"""``transcribe follow`` on a loaded machine (issue 48, item 4): a FLAC written by ffmpeg with
``-flush_packets 1`` (a recorder's way), followed while CPU burners take every core, ends with the
words and the bytes of the replay of the finished file, and a LiveSource over it gives the
finished file's samples. (Once, on a busy machine, a follow's transcript had 57 words where the
replay had 59.)"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bench.streaming.follow_latency import GrowingWriter
from tests.conftest import JFK, ROOT
from transcriber import FollowOptions, LiveSource
from transcriber.media.audio import load_audio

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def burners():
    """A busy loop per core (at least 2), stopped (each by its own process) on the way out."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(2, os.cpu_count() or 2))]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def growing_flac(path: Path, repeats: int = 2) -> GrowingWriter:
    """jfk.flac ``repeats`` times over, written as ffmpeg's FLAC in 1 s pieces at real time."""
    writer = GrowingWriter(np.tile(load_audio(JFK), repeats), path, piece_seconds=1.0)
    writer.start()
    while not path.exists():
        time.sleep(0.01)
    return writer


def cli(*args, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transcriber.app", *map(str, args), "--db", str(db), "-q"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)


def test_a_live_flac_gives_the_finished_files_samples_under_load(tmp_path):
    source = tmp_path / "rec.flac"
    with burners():
        writer = growing_flac(source)
        live = LiveSource(str(source), FollowOptions(idle_seconds=1.5))
        got = np.concatenate([samples for _, samples in live.chunks(chunk_seconds=1.0)])
        writer.join()
    assert np.array_equal(got, load_audio(source))


def test_a_followed_flac_ends_as_its_replay_under_load(tmp_path):
    source = tmp_path / "rec.flac"
    with burners():
        writer = growing_flac(source)
        follow = cli("follow", source, "-o", tmp_path / "out", "-f", "srt,json", "--idle-seconds", 1.5,
                     "--update-seconds", 0.5, db=tmp_path / "follow.db")
        writer.join()
    assert follow.returncode == 0, follow.stderr
    replay = cli(source, "--mode", "stream", "-o", tmp_path / "replay", "-f", "srt,json", db=tmp_path / "replay.db")
    assert replay.returncode == 0, replay.stderr
    for name in ("rec.json", "rec.srt"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "replay" / name).read_bytes(), name


def test_a_writer_that_stalls_past_the_idle_time_is_waited_for(tmp_path):
    """A busy machine holds the recorder back longer than --idle-seconds while it keeps the
    file open: the follow waits for it (the file is held for writing) and ends with every
    sample; once the writer closes the file, the idle time ends it as before."""
    from transcriber.media.growingfile import held_for_writing

    whole = tmp_path / "whole.wav"
    whole.write_bytes(jfk_wav_bytes(tmp_path))
    data, source = whole.read_bytes(), tmp_path / "rec.wav"
    half = len(data) // 2

    def write():
        with open(source, "wb") as f:
            f.write(data[:half])
            f.flush()
            time.sleep(3.0)  # the stall: three idle times
            f.write(data[half:])

    writer = threading.Thread(target=write)
    writer.start()
    while not source.exists():
        time.sleep(0.01)
    assert held_for_writing(str(source))
    got = np.concatenate([s for _, s in LiveSource(str(source), FollowOptions(idle_seconds=1.0)).chunks(1.0)])
    writer.join()
    assert not held_for_writing(str(source))
    assert np.array_equal(got, load_audio(whole))


def jfk_wav_bytes(folder: Path) -> bytes:
    """jfk.flac as a 16-bit WAV's bytes (header sizes final, as a recorder's first write is not)."""
    from transcriber.media.ffmpegtool import ffmpeg_binary

    out = folder / "jfk.wav"
    subprocess.run([ffmpeg_binary(), "-v", "error", "-y", "-i", str(JFK), "-ar", "16000", "-ac", "1", str(out)], check=True)
    return out.read_bytes()
