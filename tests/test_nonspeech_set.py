"""Nothing is written over non-speech, in either mode: every class of the synthesized set
(bench/nonspeech_set.py: noise colours, tone, sweeps, clicks, hum, beeps, an animal-like call,
laughter-like bursts, plucked music, rain, applause-like bursts, babble of reversed voices), at
two lengths and seeds. Before one-shot's after-a-pause rule (nonspeech.is_unlikely_start, the
start of the audio counting as a pause) and its dropping of a window still looping after the
fallback, one-shot wrote " Thank you." over the music (15 s) and one sentence 13 times (104
words) over applause (30 s). Before a doubtful pass after a pause was judged again as one-shot
would judge its buffer (``StreamingSession._one_shot_refuses``), streaming wrote words over
clicks, beeps, babble and the animal-like call (``STREAM_BEFORE``)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.nonspeech_set import CLASSES, LEVEL_DB, synthesize, words_written, write_wav
from transcriber.modes import make_engine

CASES = [(15.0, 0), (30.0, 1)]  # (seconds, seed)
# What streaming wrote before the re-judging, (class, seconds, seed): words (a pass's no-speech
# probability and log probability put them where the Apollo 11 radio's speech is).
STREAM_BEFORE = {("clicks", 15, 0): "\" I'm to go to the one.\" (no-speech 0.58, log probability -1.81)",
                 ("clicks", 30, 1): "\" I'm to go to the one.\" (0.48, -1.76)",
                 ("beeps", 30, 1): "\" F***. F***.\" (0.71, -0.82)",
                 ("babble", 15, 0): "24 words, a loop of \" I'm not going to stop.\" (0.53-0.59)",
                 ("babble", 30, 1): "18 words of reversed voices (0.56, -1.28)",
                 ("animal", 30, 0): "\" Yes, yes, yes, Woo, Woo,\" (0.74, -0.89)",
                 ("babble", 30, 0): "\" know, see you\" (0.59, -1.30)"}


@pytest.fixture(scope="module")
def engines(model):
    return {mode: make_engine(mode, model) for mode in ("oneshot", "stream")}


def test_the_set_is_deterministic_and_at_its_level(data_dir):
    for name in CLASSES:
        x = synthesize(name, 5.0, data_dir, seed=3)
        assert x.dtype == np.float32 and len(x) == 80000 and np.max(np.abs(x)) <= 0.9 + 1e-6
        rms_db = 20 * np.log10(np.sqrt(np.mean(x.astype(np.float64) ** 2)))
        assert LEVEL_DB - 30 < rms_db <= LEVEL_DB + 0.01, name  # sparse classes stay under their peak
        assert np.array_equal(x, synthesize(name, 5.0, data_dir, seed=3))
    assert not np.array_equal(synthesize("white", 5.0, seed=1), synthesize("white", 5.0, seed=2))


@pytest.mark.slow
@pytest.mark.parametrize("seconds,seed", CASES, ids=[f"{s:g}s-seed{d}" for s, d in CASES])
@pytest.mark.parametrize("mode", ["oneshot", "stream"])
@pytest.mark.parametrize("name", list(CLASSES))
def test_no_words_over_non_speech(engines, data_dir, tmp_path, name, mode, seconds, seed):
    path = write_wav(tmp_path / f"{name}.wav", synthesize(name, seconds, data_dir, seed))
    words = words_written(engines[mode], path)
    assert words == [], "".join(w.text for w in words)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["animal", "babble"])
def test_no_words_streamed_over_the_30s_seed0_clips(engines, data_dir, tmp_path, name):
    """The other clips streaming wrote words over (``STREAM_BEFORE``), at 30 s, seed 0."""
    test_no_words_over_non_speech(engines, data_dir, tmp_path, name, "stream", 30.0, 0)


@pytest.mark.slow
def test_speech_through_noise_is_still_streamed(engines, data_dir):
    """The Apollo 11 radio (speech through noise): its first passes after pauses score like
    the passes over clicks and babble; judged again as one-shot, their words stay (106 streamed
    before and after; the pass's own scores alone kept 22)."""
    words = words_written(engines["stream"], data_dir / "audio" / "extra" / "nasa_apollo11_radio.flac")
    assert len(words) >= 100, "".join(w.text for w in words)
