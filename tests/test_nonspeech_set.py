"""Nothing is written over non-speech, in either mode: every class of the synthesized set
(bench/nonspeech_set.py: noise colours, tone, sweeps, clicks, hum, beeps, an animal-like call,
laughter-like bursts, plucked music, rain, applause-like bursts, babble of reversed voices), at
two lengths and seeds. Before one-shot's after-a-pause rule (nonspeech.is_unlikely_start, the
start of the audio counting as a pause) and its dropping of a window still looping after the
fallback, one-shot wrote " Thank you." over the music (15 s) and one sentence 13 times (104
words) over applause (30 s); streaming writes words over
clicks, beeps and babble (``STREAM_OPEN``: still open)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.nonspeech_set import CLASSES, LEVEL_DB, synthesize, words_written, write_wav
from transcriber.modes import make_engine

CASES = [(15.0, 0), (30.0, 1)]  # (seconds, seed)
# Still open (issue 35): streaming writes words over these. A pass's no-speech probability and
# log probability put them where the Apollo 11 radio's speech is (nonspeech.GUESS_CORNERS).
STREAM_OPEN = {("clicks", 0): "\" I'm to go to the one.\" (no-speech 0.58, log probability -1.81)",
               ("clicks", 1): "\" I'm to go to the one.\" (0.48, -1.76)",
               ("beeps", 1): "\" F***. F***.\" (0.60, -1.61)",
               ("babble", 0): "24 words, a loop of \" I'm not going to stop.\" (0.53-0.59)",
               ("babble", 1): "18 words of reversed voices"}


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
def test_no_words_over_non_speech(engines, data_dir, tmp_path, name, mode, seconds, seed, request):
    if mode == "stream" and (name, seed) in STREAM_OPEN:
        request.applymarker(pytest.mark.xfail(strict=True, reason=STREAM_OPEN[name, seed]))
    path = write_wav(tmp_path / f"{name}.wav", synthesize(name, seconds, data_dir, seed))
    words = words_written(engines[mode], path)
    assert words == [], "".join(w.text for w in words)
