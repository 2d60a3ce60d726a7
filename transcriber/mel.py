"""Whisper's log-mel spectrogram, computed in MLX.

Same numbers as openai/whisper's ``log_mel_spectrogram`` (torch.stft, center=True, reflect
padding, periodic Hann window, last frame dropped), laid out frames-first as MLX Whisper's
encoder wants them: ``(n_frames, n_mels)``. The mel filterbank is computed here exactly as
``librosa.filters.mel(sr=16000, n_fft=400, n_mels=n, htk=False, norm="slaney")``, which is how
Whisper's ``mel_filters.npz`` asset was made, so no asset is needed.
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx
import numpy as np

from .constants import CHUNK_LENGTH, HOP_LENGTH, N_FFT, N_FRAMES, N_SAMPLES, SAMPLE_RATE  # noqa: F401

N_FREQS = N_FFT // 2 + 1  # 201 rfft bins

# Slaney's mel scale (Auditory Toolbox): linear below 1 kHz, logarithmic above.
_F_SP = 200.0 / 3  # Hz per mel in the linear part
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP  # 15 mels
_LOG_STEP = np.log(6.4) / 27.0  # so that 6.4 kHz lies 27 mels above 1 kHz


def hz_to_mel(freqs: np.ndarray) -> np.ndarray:
    """Slaney mel value of each frequency in Hz (float64, any shape)."""
    freqs = np.asarray(freqs, dtype=np.float64)
    linear = freqs / _F_SP
    log = _MIN_LOG_MEL + np.log(np.maximum(freqs, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOG_STEP
    return np.where(freqs >= _MIN_LOG_HZ, log, linear)


def mel_to_hz(mels: np.ndarray) -> np.ndarray:
    """Inverse of ``hz_to_mel`` (float64, any shape)."""
    mels = np.asarray(mels, dtype=np.float64)
    linear = _F_SP * mels
    log = _MIN_LOG_HZ * np.exp(_LOG_STEP * (mels - _MIN_LOG_MEL))
    return np.where(mels >= _MIN_LOG_MEL, log, linear)


def mel_filters_numpy(n_mels: int) -> np.ndarray:
    """Slaney-normalised triangular mel filterbank, float64 of shape (n_mels, N_FREQS).

    Filter i rises from mel point i to i + 1 and falls to i + 2, the n_mels + 2 points spread
    evenly in mel from 0 Hz to Nyquist; each triangle is scaled to unit area in Hz (Slaney's
    "constant energy" normalisation: height 2 / width).
    """
    fft_freqs = np.linspace(0.0, SAMPLE_RATE / 2, N_FREQS)
    mel_points = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(SAMPLE_RATE / 2), n_mels + 2))
    widths = np.diff(mel_points)  # (n_mels + 1,)
    ramps = mel_points[:, None] - fft_freqs[None, :]  # (n_mels + 2, N_FREQS)
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return weights * (2.0 / (mel_points[2:] - mel_points[:-2]))[:, None]


@lru_cache(maxsize=4)
def mel_filters_f32(n_mels: int) -> np.ndarray:
    """The filterbank in float32 (n_mels, N_FREQS), computed once per size, read-only; Whisper
    uses 80 or 128 bins. The numpy STFT of streaming and the MLX one here share these values."""
    if n_mels < 1:
        raise ValueError(f"n_mels must be positive, not {n_mels}")
    filters = mel_filters_numpy(n_mels).astype(np.float32)
    filters.flags.writeable = False
    return filters


@lru_cache(maxsize=4)
def mel_filters(n_mels: int) -> mx.array:
    """``mel_filters_f32`` as an ``mx.array``."""
    return mx.array(mel_filters_f32(n_mels))


@lru_cache(maxsize=1)
def hann_window_f32() -> np.ndarray:
    """Periodic Hann window of N_FFT samples (torch.hann_window's default), float32 (N_FFT,), read-only."""
    n = np.arange(N_FFT, dtype=np.float64)
    window = (0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)).astype(np.float32)
    window.flags.writeable = False
    return window


@lru_cache(maxsize=1)
def hann_window() -> mx.array:
    """``hann_window_f32`` as an ``mx.array``."""
    return mx.array(hann_window_f32())


def pad_or_trim(array, length: int = N_SAMPLES, *, axis: int = -1):
    """Zero-pad or cut ``array`` to ``length`` along ``axis``; numpy stays numpy, MLX stays MLX."""
    size = array.shape[axis]
    if size == length:
        return array
    if size > length:
        index = [slice(None)] * array.ndim
        index[axis] = slice(0, length)
        return array[tuple(index)]
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, length - size)
    return mx.pad(array, widths) if isinstance(array, mx.array) else np.pad(array, widths)


def _stft_power(audio: mx.array) -> mx.array:
    """Power spectrum |STFT|^2 of 1-D audio, shape (len(audio) // HOP_LENGTH, N_FREQS).

    torch.stft(center=True) reflect-pads N_FFT // 2 samples at both ends (mirroring without
    repeating the edge sample) so frame t is centred on sample t * HOP_LENGTH. That gives
    1 + len // HOP_LENGTH frames; Whisper drops the last one so that N_SAMPLES of audio make
    exactly N_FRAMES frames, so we simply never build it.
    """
    pad = N_FFT // 2
    if audio.shape[0] <= pad:
        raise ValueError(f"need more than {pad} samples for a spectrogram, got {audio.shape[0]}")
    padded = mx.concatenate([audio[1 : pad + 1][::-1], audio, audio[-pad - 1 : -1][::-1]])
    n_frames = audio.shape[0] // HOP_LENGTH
    frames = mx.as_strided(padded, shape=(n_frames, N_FFT), strides=(HOP_LENGTH, 1))
    spectrum = mx.fft.rfft(frames * hann_window(), axis=-1)
    return mx.square(mx.abs(spectrum))


def log_mel_spectrogram(
    audio: np.ndarray | mx.array, n_mels: int = 80, padding: int = 0
) -> mx.array:
    """Whisper's normalised log-mel spectrogram of 16 kHz mono audio.

    audio: shape (n_samples,), float samples in [-1, 1].
    padding: zero samples appended first (Whisper appends N_SAMPLES so the last window is full).
    Returns float32 of shape ((n_samples + padding) // HOP_LENGTH, n_mels), values roughly in
    [-1, 1.5]: log10 power, floored 8 decades (80 dB) below the loudest value of *this* input,
    then shifted and scaled by (x + 4) / 4.
    """
    audio = audio.astype(mx.float32) if isinstance(audio, mx.array) else mx.array(audio, mx.float32)
    if audio.ndim != 1:
        raise ValueError(f"audio must be 1-D samples, got shape {tuple(audio.shape)}")
    if padding > 0:
        audio = mx.pad(audio, [(0, padding)])
    power = _stft_power(audio)  # (n_frames, N_FREQS)
    mel = power @ mel_filters(n_mels).T  # (n_frames, n_mels)
    log_spec = mx.log10(mx.maximum(mel, 1e-10))
    log_spec = mx.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0
