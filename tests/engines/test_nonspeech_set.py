"""Nothing is written over non-speech, in either mode: every class of the synthesized set
(bench/peers/nonspeech_set.py: noise colours, tone, sweeps, clicks, hum, beeps, an animal-like call,
laughter-like bursts, plucked music, rain, applause-like bursts, babble of reversed voices, one
reversed voice, chirps, an engine, wind, barks), at two lengths and seeds (15 s and 30 s: about
a second a clip on tiny.en). Before the gate (main, 2026-12-04) one-shot wrote " Thank you." over
the music (15 s) and one sentence 13 times (104 words) over applause (30 s): a loop the
no-speech probability ended the fallback on (``nonspeech.is_heard_loop``); streaming wrote
words over clicks, beeps, babble and the animal-like call (``STREAM_BEFORE``), now judged again
as one-shot would judge the pass's buffer (``OneShotReading.refuses_doubted``)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from bench.peers.nonspeech_set import CLASSES, LEVEL_DB, synthesize, words_written, write_wav
from tests.conftest import ROOT
from transcriber.media.audio import load_audio
from transcriber.constants import SAMPLE_RATE
from transcriber.engines.decoding.task import DecodingResult
from transcriber.model.mel import log_mel_spectrogram
from transcriber.engines.modes import make_engine
from transcriber.engines.nonspeech import BACKWARDS_BELOW, MIN_JUDGED_FRAMES, runs_backwards, time_asymmetry
from transcriber.engines.streaming import StreamingOptions, StreamingSession

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

# A single reversed voice (a dev-set reading played backwards, looped) was written in both modes
# before the gate judged which way the audio runs (``nonspeech.runs_backwards``): streamed 16
# words in 15 s (seed 0) and 8 in 30 s (seed 1), its passes scoring where speech after a pause
# in noise does; one-shot 44 words in 15 s (seed 0): " You're not going to lose your food, ..."
# at compression ratio 2.34, just under the 2.4 that starts the fallback.


def assert_nothing_written(engine, path, samples):
    words = words_written(engine, write_wav(path, samples))
    assert words == [], "".join(w.text for w in words)


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
    assert_nothing_written(engines[mode], tmp_path / f"{name}.wav", synthesize(name, seconds, data_dir, seed))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["animal", "babble"])
def test_no_words_streamed_over_the_30s_seed0_clips(engines, data_dir, tmp_path, name):
    """The other clips streaming wrote words over (``STREAM_BEFORE``), at 30 s, seed 0."""
    assert_nothing_written(engines["stream"], tmp_path / f"{name}.wav", synthesize(name, 30.0, data_dir, 0))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["oneshot", "stream"])
def test_no_subtitle_credits_over_white_noise(engines, data_dir, tmp_path, mode):
    """20 s of white noise (seed 3): one-shot's first reading is " ..." (log probability
    -1.57), and the fallback used to go on to " Subs by www.zeoranger.co.uk" at temperature
    0.4; a reading without a word now ends the fallback (``OneShotEngine.decode_with_fallback``)."""
    assert_nothing_written(engines[mode], tmp_path / "white.wav", synthesize("white", 20.0, data_dir, 3))


def test_a_loop_left_at_the_last_temperature_is_not_written(engines):
    """pygame's whoosh (whiff, not in the test data), 30 s seed 1, one-shot: the fallback ended
    at temperature 1.0 on " lines, points, points, ..." (compression ratio 6.2, log probability
    -0.70: not unlikely), and its 31 words were written. A text that still loops at the last
    temperature is refused; speech that reaches it (the Apollo 11 radio) compresses 1.28 at most."""
    engine = engines["oneshot"]
    loop = DecodingResult(tokens=(), text=" lines," + " points," * 28 + " imparting", language="en",
                          avg_logprob=-0.70, no_speech_prob=0.30, temperature=1.0, compression_ratio=6.2)
    assert engine.refuses(loop, 3000)
    assert not engine.refuses(replace(loop, temperature=0.4), 3000)  # the fallback goes on from there
    said = replace(loop, text=" It was a quick camera, I tried. Alright, okay, fine.", compression_ratio=1.28)
    assert not engine.refuses(said, 3000)


@pytest.mark.slow
def test_speech_through_noise_is_still_streamed(engines, data_dir):
    """The Apollo 11 radio (speech through noise): its first passes after pauses score like
    the passes over clicks and babble; judged again as one-shot, their words stay (106 streamed
    before and after; the pass's own scores alone kept 22)."""
    words = words_written(engines["stream"], data_dir / "audio" / "extra" / "nasa_apollo11_radio.flac")
    assert len(words) >= 100, "".join(w.text for w in words)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["babble", "clicks", "reversed_voice"])
def test_nothing_written_over_non_speech_followed(data_dir, tmp_path, name):
    """``transcribe follow -`` (a recording read as it is made, through the streaming session):
    15 s of reversed-voice babble, clicks or a single reversed voice on standard input, no words
    (main streamed 24, 6 and 16)."""
    clip = write_wav(tmp_path / f"{name}.wav", synthesize(name, 15.0, data_dir, 0))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "transcriber.app", "follow", "-", "-o", str(out), "--name", "rec", "-f", "json", "-q",
                        "--db", str(tmp_path / "jobs.db")], input=clip.read_bytes(), cwd=ROOT,
                       capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    segments = json.loads((out / "rec.json").read_text())["segments"]
    assert [w["word"] for s in segments for w in s["words"]] == []


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["oneshot", "stream"])
def test_no_words_over_a_reversed_voice_at_20s(engines, data_dir, tmp_path, mode):
    """The reversed voice at 20 s, seed 2 (the JFK reading): main wrote 48 words one-shot
    (" Here's not all your food and that foods shall clap. ...", log probability -0.70) and 16
    streamed; the audio runs backwards (time asymmetry -0.096, forwards +0.101)."""
    assert_nothing_written(engines[mode], tmp_path / "rv.wav", synthesize("reversed_voice", 20.0, data_dir, 2))


@pytest.mark.slow
def test_no_words_streamed_over_babble_at_20s(engines, data_dir, tmp_path):
    """Babble of six reversed voices, 20 s, seed 2: the stream's first pass said " I'm not there
    for all of you" (no-speech 0.29, log probability -1.17: no guess by the corners, and its 2 s
    too short to judge which way it runs); read again as one-shot, " So I'm never going to be able
    to hear what's going on." at temperature 0.4. Main wrote 7 words."""
    assert_nothing_written(engines["stream"], tmp_path / "babble.wav", synthesize("babble", 20.0, data_dir, 2))


@pytest.mark.slow
@pytest.mark.parametrize("seconds,seed", CASES, ids=[f"{s:g}s-seed{d}" for s, d in CASES])
def test_base_streams_no_words_over_babble(base_model, data_dir, tmp_path, seconds, seed):
    """The multilingual base model over babble of reversed voices. 15 s, seed 0: main wrote
    " Yes, I'm going to stop." on the last pass (no-speech 0.30, log probability -1.67), which one-shot
    read from the same padded window as " If so, thank you. Yes, thank you. ..." (greedy): two
    readings of the same input that disagree. 30 s, seed 1: main wrote " Zimmer is in the of the",
    the stream's first words (0.10, -1.87), read again as one-shot unreadable."""
    engine = make_engine("stream", base_model)
    assert_nothing_written(engine, tmp_path / "babble.wav", synthesize("babble", seconds, data_dir, seed))


@pytest.mark.slow
def test_base_streams_no_thanks_after_the_brahms_applause(base_model, data_dir):
    """The dev set's Brahms (no voice), base streamed: main wrote " Thank you." at 39.1 s, the
    pass after one that captioned the music's end " Applause" (refused); " Thank" 0.152.
    The caption's end travels with the session's state."""
    path = data_dir / "audio" / "no_speech" / "music_brahms_hungarian_dance5.flac"
    words = words_written(make_engine("stream", base_model), path)
    assert words == [], "".join(w.text for w in words)
    samples = load_audio(str(path))
    session = StreamingSession(base_model, StreamingOptions())  # as the engine streams it
    for i in range(0, 41 * SAMPLE_RATE, SAMPLE_RATE):
        session.insert_audio(samples[i:i + SAMPLE_RATE])
        session.process()
    state = session.state()
    assert 38.0 < state["caption_end"] < 40.0  # " Applause", 38.86-39.06 s
    restored = StreamingSession.restore(base_model, StreamingOptions(), state)
    assert restored.state()["caption_end"] == state["caption_end"]


@pytest.fixture(scope="module")
def harvard(data_dir):
    return load_audio(str(data_dir / "audio" / "long_en" / "osr_us_000_0034_harvard.flac"))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["oneshot", "stream"])
def test_a_reading_played_backwards_is_not_written(engines, harvard, tmp_path, mode):
    """The 35 s Harvard sentences played backwards, once (not looped: no repetition to catch):
    main streamed 48 words (" He'll be able to come I have a dream. ..."); the model is unsure
    of them and the audio swells and stops short, so nothing is written."""
    assert_nothing_written(engines[mode], tmp_path / "backwards.wav", harvard[::-1].copy())


@pytest.mark.slow
def test_audio_judged_backwards_stays_judged_so(model, data_dir, tmp_path):
    """A LibriSpeech sentence (ls_icefall_1089-134686-0001, 6.6 s) played backwards, streamed: the
    pass over its first 3 s runs backwards (-0.050) and is refused, the one over 4 s measures
    -0.011 (its last second leans forwards) and wrote 10 words (" So far with my joke, the locks
    in her head"). A doubtful pass whose buffer still holds audio judged backwards is refused too:
    nothing written. The verdict travels with the session's state."""
    samples = load_audio(str(data_dir / "audio" / "short_en" / "ls_icefall_1089-134686-0001.flac"))[::-1].copy()
    assert_nothing_written(make_engine("stream", model), tmp_path / "backwards.wav", samples)
    session = StreamingSession(model, StreamingOptions(language="en"))
    for i in range(0, 3 * SAMPLE_RATE, SAMPLE_RATE):
        session.insert_audio(samples[i:i + SAMPLE_RATE])
        assert session.process() == []
    state = session.state()
    assert state["backwards_until"] == 300  # the 3 s judged (10 ms mel frames)
    restored = StreamingSession.restore(model, StreamingOptions(language="en"), state)
    assert restored.state()["backwards_until"] == 300


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["oneshot", "stream"])
def test_the_same_reading_forwards_is_written(engines, harvard, tmp_path, mode):
    """The same audio forwards keeps all its words (73 in both modes, as on main)."""
    words = words_written(engines[mode], write_wav(tmp_path / "forwards.wav", harvard))
    text = "".join(w.text for w in words).lower()
    assert len(words) >= 70 and "a gold ring will please most any girl" in text, text


def test_speech_runs_forwards_and_backwards_played_speech_does_not(harvard):
    """The measure itself (``nonspeech.time_asymmetry``) on the Harvard reading: clearly positive
    forwards, under ``BACKWARDS_BELOW`` backwards; under ``MIN_JUDGED_FRAMES`` nothing is judged."""
    forwards = np.asarray(log_mel_spectrogram(harvard))
    backwards = forwards[::-1].copy()
    assert time_asymmetry(forwards) > 0.1 and not runs_backwards(forwards)
    assert time_asymmetry(backwards) < BACKWARDS_BELOW and runs_backwards(backwards)
    assert not runs_backwards(backwards[:MIN_JUDGED_FRAMES - 1])
