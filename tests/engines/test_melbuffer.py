"""The streaming buffer's log-mel (transcriber/engines/streaming/melbuffer.py) against one-shot's
(transcriber/model/mel.py): the buffer computes its frames through the same ``log_mel_frames``, a few
at a time as audio arrives, so its frames are one-shot's frames of the same audio, to the bit
(float64 sums, rounded to float32: not the order in which a BLAS sums a matmul of a few rows or
of many, which MLX's float32 sgemm shows once a model has bound its BLAS)."""

from __future__ import annotations

import numpy as np
import pytest

from transcriber.media.audio import load_audio
from transcriber.constants import HOP_LENGTH, N_SAMPLES
from transcriber.model.mel import log_mel_spectrogram, normalize
from transcriber.engines.streaming.melbuffer import MelBuffer, raw_log_mel

from tests.conftest import JFK


@pytest.mark.parametrize("pieces", ["1 s", "irregular"])
def test_streaming_frames_are_one_shot_frames_of_the_same_audio(model, pieces):
    """JFK fed to the buffer as a stream is fed (1 s chunks), and in odd pieces, with the model
    loaded (its BLAS bound): the frames, normalised, are one-shot's log-mel of the recording
    (Whisper's zero padding after it)."""
    audio = load_audio(JFK)
    rng = np.random.default_rng(0)
    buf, i = MelBuffer(model.dims.n_mels), 0
    while i < len(audio):
        n = 16000 if pieces == "1 s" else int(rng.integers(1, 7000))
        buf.append(audio[i:i + n])
        i += n
    one_shot = np.array(log_mel_spectrogram(audio, model.dims.n_mels, padding=N_SAMPLES))
    n_frames = len(audio) // HOP_LENGTH
    assert buf.raw().shape == (n_frames, 80)
    assert np.array_equal(normalize(buf.raw()), one_shot[:n_frames])
    assert np.all(one_shot[n_frames + 2:] == one_shot.min())  # windows wholly in the padding: the floor


def test_mel_buffer_equals_the_whole_stream_at_once():
    rng = np.random.default_rng(1)
    t = np.arange(16000 * 3) / 16000
    audio = (0.3 * np.sin(2 * np.pi * 440 * t) * (1 + np.sin(t * 3)) + 0.01 * rng.standard_normal(len(t))).astype(np.float32)
    buf = MelBuffer(80)
    i = 0
    while i < len(audio):
        n = int(rng.integers(1, 7000))
        buf.append(audio[i:i + n])
        i += n
        assert buf.raw().shape == (len(audio[:i]) // 160 if i > 200 else 0, 80)
    assert np.array_equal(buf.raw(), raw_log_mel(audio, 80))
    # and one-shot's log-mel (zero padding after the audio) is the same
    whisper = np.array(log_mel_spectrogram(audio, 80, padding=16000))[: len(audio) // 160]
    assert np.array_equal(normalize(buf.raw()), whisper)


def test_mel_buffer_drop_and_state():
    audio = np.random.default_rng(2).standard_normal(16000 * 2).astype(np.float32) * 0.1
    buf = MelBuffer(80, origin_sample=16000)
    buf.append(audio[:20000])
    assert buf.drop_until(50) == 50
    copy = MelBuffer.from_state(buf.state())
    buf.append(audio[20000:])
    copy.append(audio[20000:])
    assert np.array_equal(buf.raw(), copy.raw())
    assert np.array_equal(buf.raw(), raw_log_mel(audio, 80)[50:])
    assert buf.seconds(buf.start) == pytest.approx(1.5)
    assert buf.end_time == pytest.approx(3.0)


def test_mel_buffer_deferred_frames_equal_eager_ones():
    """Deferred audio (silence) is computed only when raw() needs it, to the same values; frames
    dropped before that are never computed, and a state saved meanwhile resumes exactly."""
    rng = np.random.default_rng(3)
    audio = (rng.standard_normal(16000 * 4) * 10 ** (-60 / 20)).astype(np.float32)
    audio[40000:] = rng.standard_normal(24000) * 0.1
    eager, lazy = MelBuffer(80), MelBuffer(80)
    for i in range(0, 32000, 4000):
        eager.append(audio[i:i + 4000])
        lazy.append(audio[i:i + 4000], defer=True)
    assert lazy.n_final == 0 and lazy.n_ready == eager.n_final
    assert lazy.drop_until(150) == eager.drop_until(150) == 150
    assert lazy.n_final == lazy.start == 150 and len(lazy.final) == 0  # dropped, never computed
    copy = MelBuffer.from_state(lazy.state())
    for buf in (eager, lazy, copy):
        buf.append(audio[32000:40000], defer=buf is not eager)
        buf.append(audio[40000:])
    assert np.array_equal(lazy.raw(), eager.raw()) and np.array_equal(copy.raw(), eager.raw())
    assert np.array_equal(eager.raw(), raw_log_mel(audio, 80)[150:])
