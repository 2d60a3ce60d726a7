"""The log-mel spectrogram (transcriber/model/mel.py) against an independent float64 numpy reference."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from transcriber.model import mel

from tests.conftest import JFK


# -- an independent reference, written out from the formulas ---------------------------------


def slaney_hz_to_mel(hz: float) -> float:
    # Slaney's Auditory Toolbox: 3 mels per 200 Hz up to 1 kHz, then 27 mels per factor 6.4.
    if hz < 1000.0:
        return 3.0 * hz / 200.0
    return 15.0 + 27.0 * math.log(hz / 1000.0) / math.log(6.4)


def slaney_mel_to_hz(m: float) -> float:
    if m < 15.0:
        return 200.0 * m / 3.0
    return 1000.0 * 6.4 ** ((m - 15.0) / 27.0)


def reference_mel_points(n_mels: int) -> list[float]:
    top = slaney_hz_to_mel(8000.0)
    return [slaney_mel_to_hz(top * k / (n_mels + 1)) for k in range(n_mels + 2)]


def reference_filters(n_mels: int) -> np.ndarray:
    """Triangles of unit area in Hz, evaluated bin by bin: (n_mels, 201) float64."""
    points = reference_mel_points(n_mels)
    out = np.zeros((n_mels, 201))
    for i in range(n_mels):
        low, centre, high = points[i], points[i + 1], points[i + 2]
        height = 2.0 / (high - low)
        for k in range(201):
            f = k * 8000.0 / 200
            if low < f <= centre:
                out[i, k] = height * (f - low) / (centre - low)
            elif centre < f < high:
                out[i, k] = height * (high - f) / (high - centre)
    return out


def reference_log_mel(audio: np.ndarray, n_mels: int = 80, padding: int = 0) -> np.ndarray:
    """Whisper's recipe with numpy float64 rfft: (n_frames, n_mels)."""
    x = np.concatenate([audio.astype(np.float64), np.zeros(padding)])
    x = np.pad(x, 200, mode="reflect")  # torch.stft(center=True, pad_mode="reflect")
    n_frames = 1 + (len(x) - 400) // 160
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)  # periodic Hann
    frames = np.stack([x[t * 160 : t * 160 + 400] for t in range(n_frames)])
    power = np.abs(np.fft.rfft(frames * window, axis=-1)) ** 2
    power = power[:-1]  # Whisper drops the last frame
    spec = power @ reference_filters(n_mels).T
    log_spec = np.log10(np.maximum(spec, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def load_audio(path: Path) -> np.ndarray:
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    command = [imageio_ffmpeg.get_ffmpeg_exe(), "-nostdin", "-v", "error", "-i", str(path),
               "-f", "f32le", "-ac", "1", "-ar", "16000", "-"]
    out = subprocess.run(command, capture_output=True, check=True).stdout
    return np.frombuffer(out, dtype=np.float32)


@pytest.fixture(scope="module")
def jfk_audio() -> np.ndarray:
    return load_audio(JFK)


# -- filterbank --------------------------------------------------------------------------------


@pytest.mark.parametrize("n_mels", [80, 128])
def test_filters_match_reference(n_mels):
    np.testing.assert_allclose(mel.mel_filters_numpy(n_mels), reference_filters(n_mels),
                               rtol=1e-10, atol=1e-12)
    filters = mel.mel_filters_f32(n_mels)
    assert filters.shape == (n_mels, 201) and filters.dtype == np.float32
    np.testing.assert_allclose(filters, reference_filters(n_mels), rtol=1e-6, atol=1e-9)


def test_filters_known_values():
    filters = mel.mel_filters_numpy(80)
    # Whisper's mel_filters.npz["mel_80"][0] starts [-0., 0.02486259, 0., ...]: the first
    # triangle (0 .. 74.5 Hz, peak 37.2 Hz) catches only the 40 Hz bin.
    assert filters[0, 1] == pytest.approx(0.02486259, abs=1e-8)
    assert np.count_nonzero(filters[0]) == 1
    assert mel.hz_to_mel(1000.0) == pytest.approx(15.0)
    assert mel.mel_to_hz(mel.hz_to_mel(np.array([0.0, 440.0, 1000.0, 6400.0, 8000.0]))) == \
        pytest.approx([0.0, 440.0, 1000.0, 6400.0, 8000.0])


@pytest.mark.parametrize("n_mels", [80, 128])
def test_filter_bands(n_mels):
    filters = mel.mel_filters_numpy(n_mels)
    points = reference_mel_points(n_mels)
    freqs = np.arange(201) * 40.0
    starts = []
    for i, row in enumerate(filters):
        nonzero = np.flatnonzero(row > 0)
        assert nonzero.size >= 1, f"filter {i} is empty"
        # One contiguous band strictly inside the triangle's feet...
        assert np.all(np.diff(nonzero) == 1)
        assert freqs[nonzero[0]] > points[i] and freqs[nonzero[-1]] < points[i + 2]
        # ...peaking at the bin nearest its centre frequency.
        assert abs(freqs[row.argmax()] - points[i + 1]) <= 40.0
        starts.append(nonzero[0])
    assert starts == sorted(starts)  # bands move up in frequency
    assert np.all(filters >= 0)


def test_filter_row_sums():
    # Slaney normalisation gives each triangle unit area in Hz, so sum * bin width ~ 1; exact
    # only up to how the 40 Hz bins sample the narrow low triangles.
    filters = mel.mel_filters_numpy(80)
    area = filters.sum(axis=1) * 40.0
    assert np.all((area > 0.9) & (area < 1.1))
    wide = np.count_nonzero(filters, axis=1) >= 8
    assert wide.sum() >= 15
    np.testing.assert_allclose(area[wide], 1.0, atol=0.02)
    # Below 1 kHz the triangles are identical, just shifted: 0 .. 12 sample the same way.
    np.testing.assert_allclose(area[:13], area[0], rtol=1e-9)


# -- spectrogram -------------------------------------------------------------------------------


def test_log_mel_matches_reference(jfk_audio):
    got = np.array(mel.log_mel_spectrogram(jfk_audio))
    want = reference_log_mel(jfk_audio)
    assert got.shape == want.shape == (len(jfk_audio) // 160, 80)
    assert np.abs(got - want).max() < 1e-4  # float32 FFT vs float64: ~2e-5 measured


def test_log_mel_with_whisper_padding(jfk_audio):
    got = mel.log_mel_spectrogram(mx.array(jfk_audio), padding=mel.N_SAMPLES)
    want = reference_log_mel(jfk_audio, padding=mel.N_SAMPLES)
    assert got.shape == ((len(jfk_audio) + mel.N_SAMPLES) // 160, 80)
    assert np.abs(np.array(got) - want).max() < 1e-3
    # The padded tail is silence: clamped at the floor, 8 decades under the loudest value.
    tail = np.array(got[-1000:])
    assert np.allclose(tail, tail.min()) and tail.min() == pytest.approx(got.max().item() - 2.0)


def test_log_mel_128(jfk_audio):
    window = mel.pad_or_trim(jfk_audio, mel.N_SAMPLES)
    got = mel.log_mel_spectrogram(window, n_mels=128)
    assert got.shape == (mel.N_FRAMES, 128) and got.dtype == mx.float32
    assert np.abs(np.array(got) - reference_log_mel(window, n_mels=128)).max() < 1e-3


def test_log_mel_accepts_float64_and_rejects_tiny_input():
    audio = np.sin(np.arange(16000) * 2 * np.pi * 440 / 16000)  # float64, 1 s of A4
    got = mel.log_mel_spectrogram(audio)
    assert got.shape == (100, 80)
    assert np.abs(np.array(got) - reference_log_mel(audio)).max() < 1e-3
    with pytest.raises(ValueError):
        mel.log_mel_spectrogram(np.zeros(100, dtype=np.float32))
    with pytest.raises(ValueError):
        mel.log_mel_spectrogram(np.zeros((2, 16000), dtype=np.float32))


def test_pad_or_trim():
    a = np.arange(10, dtype=np.float32)
    assert mel.pad_or_trim(a, 4).tolist() == [0, 1, 2, 3]
    assert mel.pad_or_trim(a, 12).tolist() == list(range(10)) + [0, 0]
    b = mx.ones((3, 5))
    padded = mel.pad_or_trim(b, 7, axis=0)
    assert isinstance(padded, mx.array) and padded.shape == (7, 5)
    assert padded[3:].sum().item() == 0
    assert mel.pad_or_trim(b, 2, axis=1).shape == (3, 2)
    assert mel.pad_or_trim(a, 10) is a
