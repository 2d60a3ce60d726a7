"""``transcribe --embed``: the subtitles written into a copy of each video (or into the video),
through the job runner, with the real model on a real video: the original untouched, the copy an
output of the job (a rerun skips it, a folder walk never takes it for an input), in place adopted
so a rerun neither redoes the file nor adds a second track."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from transcriber.subtitles import embed

from tests.conftest import JFK, ROOT, ffmpeg

pytestmark = pytest.mark.slow


def transcribe(*args: str, db, quiet: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transcriber.app", *args, "--db", str(db), *(["-q"] if quiet else [])],
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)


@pytest.fixture
def library(tmp_path):
    folder = tmp_path / "library"
    folder.mkdir()
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=96x64:rate=5", "-i", str(JFK), "-t", "11", "-shortest",
           "-c:v", "mpeg4", "-c:a", "aac", str(folder / "speech.mkv"))
    ffmpeg("-i", str(JFK), str(folder / "podcast.mp3"))
    return folder


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_embed_writes_a_subtitled_copy_beside_the_outputs(library, tmp_path):
    original = digest(library / "speech.mkv")
    run = transcribe(str(library), "--embed", db=tmp_path / "jobs.db", quiet=False)
    assert run.returncode == 0, run.stderr
    copy = library / "speech.subtitled.mkv"
    assert digest(library / "speech.mkv") == original
    assert [(s.kind, s.language) for s in embed.streams(copy)][-1] == ("subtitle", "eng")
    assert "not a container that carries them" in run.stderr  # the mp3: said, not failed
    assert (library / "podcast.srt").exists() and not (library / "podcast.subtitled.mp3").exists()
    again = transcribe(str(library), "--embed", db=tmp_path / "jobs.db")
    assert again.returncode == 0 and "0 done, 2 skipped" in again.stderr  # the copy is no new input
    assert not (library / "speech.subtitled.subtitled.mkv").exists()


def test_embed_in_place_adds_one_track_and_a_rerun_keeps_it(library, tmp_path):
    video = library / "speech.mkv"
    run = transcribe(str(video), "--embed", "in-place", db=tmp_path / "jobs.db")
    assert run.returncode == 0, run.stderr
    assert [s.kind for s in embed.streams(video)].count("subtitle") == 1
    again = transcribe(str(video), "--embed", "in-place", db=tmp_path / "jobs.db")
    assert again.returncode == 0 and "0 done, 1 skipped" in again.stderr  # adopted: not a changed file
    assert [s.kind for s in embed.streams(video)].count("subtitle") == 1
    assert sorted(p.name for p in library.iterdir()) == ["podcast.mp3", "speech.mkv", "speech.srt"]


def test_an_embed_value_that_is_not_a_choice_is_a_usage_error(library, tmp_path):
    run = transcribe(str(library), "--embed", "sideways", db=tmp_path / "jobs.db")
    assert run.returncode == 2 and "'sideways' is not one of 'copy', 'in-place'" in run.stderr


def test_watch_mode_never_takes_an_embedded_copy_for_an_input(tmp_path):
    from transcriber.app.run.discover import looks_like_media

    copy = tmp_path / "speech.subtitled.mkv"
    copy.write_bytes(b"x")
    assert not looks_like_media(copy, check=lambda path: True)
    assert looks_like_media(tmp_path / "speech.mkv", check=lambda path: True)
