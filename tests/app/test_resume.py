"""Resume is exact: a job resumed from any checkpoint gives the words of an uninterrupted run, in
both modes, whatever the container and codec.

Seeking into compressed audio does not give the samples a decode from the start gives there
(MP3's bit reservoir, decoder warm-up, AAC's priming): ``transcriber.media.audio`` seeks only where it
is sample-exact (PCM, FLAC at 16 kHz) and otherwise decodes from the start, dropping what is
done. The uninterrupted run's steps hand us every state the job runner would checkpoint
(``CheckpointClock``, every 10 s of audio): each is resumed after a JSON round trip, as the job
store keeps it, and the words must be those of the uninterrupted run, times included.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest

from transcriber.app.store.lease import DEFAULT_CHECKPOINT_SECONDS, CheckpointClock
from transcriber.media import audio, ffmpegtool
from transcriber.engines.modes import make_engine

from tests.conftest import ffmpeg
from tests.app.test_jobs_e2e import LONG_SOURCE, transcribe, words

pytestmark = pytest.mark.slow
# Lengths end at sentence ends of the reading (a cut word leaves one-shot a sliver of a window,
# a cost of its own): one-shot gets two window checkpoints, streaming three; streaming resumes
# cost the square of the length, hence its shorter file.
SECONDS = {"oneshot": 57.88, "stream": 34.47}
# container -> (file name, ffmpeg output arguments); the video gets a generated picture
CONTAINERS = {
    "flac": ("reading.flac", []),  # 16 kHz FLAC: seeked into, exactly
    "mp3": ("reading.mp3", ["-b:a", "64k"]),
    "m4a": ("reading.m4a", ["-c:a", "aac", "-b:a", "64k"]),
    "opus": ("reading.opus", ["-c:a", "libopus", "-b:a", "32k"]),
    "mkv": ("reading.mkv", ["-c:v", "mpeg4", "-c:a", "libvorbis", "-q:a", "3"]),
}
VIDEO = ["-f", "lavfi", "-i", "testsrc=size=160x120:rate=10", "-map", "1:v", "-map", "0:a"]


@pytest.fixture(scope="module")
def media(tmp_path_factory, data_dir) -> dict[tuple[str, str], Path]:
    """The start of the long_en reading in every container, per mode: {(mode, container): path}."""
    out = {}
    for mode, seconds in SECONDS.items():
        folder = tmp_path_factory.mktemp(mode)
        for container, (name, args) in CONTAINERS.items():
            video = VIDEO if container == "mkv" else []
            ffmpeg("-i", str(data_dir / LONG_SOURCE), *video, "-t", str(seconds), *args, str(folder / name))
            out[mode, container] = folder / name
    return out


def key(words) -> list[tuple[str, float, float]]:
    return [(w.text, w.start, w.end) for w in words]


def checkpoints(steps) -> list[int]:
    """Indices of the steps after which the job runner commits a checkpoint (not the last)."""
    clock = CheckpointClock(0.0, DEFAULT_CHECKPOINT_SECONDS)
    return [i for i, step in enumerate(steps[:-1]) if clock.due(step.position)]


@pytest.mark.parametrize("container", list(CONTAINERS))
def test_samples_from_an_offset_are_those_of_a_decode_from_the_start(media, container):
    path = media["oneshot", container]
    full = audio.load_audio(path)
    for start in (7.0, 31.37, 45.0):
        offset = round(start * audio.SAMPLE_RATE)
        chunks = list(audio.iter_audio(path, chunk_seconds=5.0, start=start))
        assert chunks[0][0] == offset
        assert np.array_equal(np.concatenate([s for _, s in chunks]), full[offset:]), start
        assert np.array_equal(audio.load_audio(path, start=start, duration=2.0),
                              full[offset: offset + 2 * audio.SAMPLE_RATE])


def test_seeking_is_used_only_where_it_is_exact(media):
    probes = [audio._probe_ffmpeg] + ([audio._probe_ffprobe] if ffmpegtool.ffprobe_binary() else [])
    for probe in probes:  # both ways of reading a file's streams tell the codec and rate
        exact = {c: probe(str(media["oneshot", c])).seeks_exactly for c in CONTAINERS}
        assert exact == {"flac": True, "mp3": False, "m4a": False, "opus": False, "mkv": False}, probe


@pytest.mark.parametrize("container", list(CONTAINERS))
@pytest.mark.parametrize("mode", ["oneshot", "stream"])
def test_resume_from_every_checkpoint_gives_the_uninterrupted_words(model, media, mode, container):
    engine, path = make_engine(mode, model), media[mode, container]
    steps = list(engine.steps(path))
    expected = [w for s in steps for w in s.words]
    assert len(expected) > 75
    points = checkpoints(steps)
    assert len(points) >= (2 if mode == "oneshot" else 3)
    for i in points:
        state = json.loads(json.dumps(steps[i].state))  # as the job store keeps it
        resumed = list(engine.steps(path, state))
        assert resumed[0].position > steps[i].position
        got = [w for s in steps[: i + 1] for w in s.words] + [w for s in resumed for w in s.words]
        assert key(got) == key(expected), f"resumed at {steps[i].position:.2f} s"
        assert [s.position for s in resumed] == [s.position for s in steps[i + 1:]]


def test_a_transcribe_killed_mid_mp3_reruns_to_the_uninterrupted_words(media, tmp_path):
    """The CLI, default mode: kill -9 after the second checkpoint (20 s into the MP3), rerun."""
    reference, work = tmp_path / "ref", tmp_path / "work"
    for folder in (reference, work):
        folder.mkdir()
        (folder / "talk.mp3").write_bytes(media["stream", "mp3"].read_bytes())
    args = ("-f", "json,srt", "-q")
    r = transcribe(reference / "talk.mp3", *args, db=tmp_path / "ref.db")
    assert r.returncode == 0, r.stderr
    expected = words(reference / "talk.json")
    assert len(expected) > 75

    db = tmp_path / "jobs.db"
    r = transcribe(work / "talk.mp3", *args, db=db, TRANSCRIBER_TEST_KILL_AT="checkpoint:2")
    assert r.returncode == -signal.SIGKILL and not (work / "talk.json").exists()
    r = transcribe(work / "talk.mp3", *args, db=db)
    assert r.returncode == 0, r.stderr
    assert words(work / "talk.json") == expected
    assert (work / "talk.srt").read_text() == (reference / "talk.srt").read_text()


@pytest.mark.parametrize("mode", ["oneshot", "stream"])
def test_a_detected_language_resumes_exactly(base_model, data_dir, tmp_path, mode):
    """The multilingual model detects the language on the first run; a resume takes it from the
    state (streaming rebuilds its tokenizer from it): 20 s of the German reading as MP3."""
    path = tmp_path / "de.mp3"
    ffmpeg("-i", str(data_dir / "audio/non_en/librivox_de.flac"), "-t", "20", "-b:a", "64k", str(path))
    engine = make_engine(mode, base_model)
    steps = list(engine.steps(path))
    assert steps[0].language == "de"
    (i,) = checkpoints(steps)[:1]
    resumed = list(engine.steps(path, json.loads(json.dumps(steps[i].state))))
    got = [w for s in steps[: i + 1] for w in s.words] + [w for s in resumed for w in s.words]
    assert len(got) > 20 and key(got) == key([w for s in steps for w in s.words])
    assert {s.language for s in resumed} == {"de"}
