"""Whisper's log-mel spectrogram: the one log-mel of both modes.

``log_mel_frames`` is the computation (STFT power, mel filterbank, log10; numpy float64) of a
run of frames; ``normalize`` is Whisper's normalisation. One-shot windows
(``log_mel_spectrogram``) and the streaming buffer (``transcriber.engines.streaming.melbuffer``, which
computes a few frames at a time as audio arrives) both go through them.

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

from transcriber.constants import CHUNK_LENGTH, HOP_LENGTH, N_FFT, N_FRAMES, N_SAMPLES, SAMPLE_RATE  # noqa: F401

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
    uses 80 or 128 bins."""
    if n_mels < 1:
        raise ValueError(f"n_mels must be positive, not {n_mels}")
    filters = mel_filters_numpy(n_mels).astype(np.float32)
    filters.flags.writeable = False
    return filters


@lru_cache(maxsize=1)
def hann_window_f32() -> np.ndarray:
    """Periodic Hann window of N_FFT samples (torch.hann_window's default), float32 (N_FFT,), read-only."""
    n = np.arange(N_FFT, dtype=np.float64)
    window = (0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)).astype(np.float32)
    window.flags.writeable = False
    return window


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


def log_mel_frames(padded: np.ndarray, n_frames: int, n_mels: int) -> np.ndarray:
    """Raw log10 mel power of ``n_frames`` frames whose N_FFT-sample windows start every
    HOP_LENGTH samples of ``padded`` (1-D samples, already padded as the caller's frames need),
    float32 (n_frames, n_mels).

    numpy float64 (FFT and filterbank matmul), rounded to float32 at the end: a frame's value
    depends on its window's samples only, not on how many frames are computed with it, so the
    streaming buffer's frames, a few at a time, are those of the whole stream computed at once.
    (MLX's float32 sgemm is not: the BLAS a loaded model binds to it sums a product of a few rows
    in another order than one of many.)
    """
    if n_frames <= 0:
        return np.zeros((0, n_mels), dtype=np.float32)
    padded = np.asarray(padded, dtype=np.float64)
    windows = np.lib.stride_tricks.sliding_window_view(padded[: (n_frames - 1) * HOP_LENGTH + N_FFT], N_FFT)
    windows = windows[::HOP_LENGTH][:n_frames] * hann_window_f32()
    power = np.square(np.abs(np.fft.rfft(windows, axis=-1)))  # (n_frames, N_FREQS)
    mel = power @ mel_filters_f32(n_mels).T  # (n_frames, n_mels), float64: numpy promotes
    return np.log10(np.maximum(mel, 1e-10)).astype(np.float32)


def normalize(raw: np.ndarray) -> np.ndarray:
    """Whisper's normalisation of raw log10 mel frames, float32: floored 8 decades (80 dB) below
    the loudest value of the frames given, then shifted and scaled by (x + 4) / 4."""
    raw = np.asarray(raw, dtype=np.float32)
    if raw.size == 0:
        return raw
    return (np.maximum(raw, raw.max() - np.float32(8.0)) + np.float32(4.0)) / np.float32(4.0)


def log_mel_spectrogram(
    audio: np.ndarray | mx.array, n_mels: int = 80, padding: int = 0
) -> mx.array:
    """Whisper's normalised log-mel spectrogram of 16 kHz mono audio.

    audio: shape (n_samples,), float samples in [-1, 1].
    padding: zero samples appended first (Whisper appends N_SAMPLES so the last window is full).
    Returns float32 of shape ((n_samples + padding) // HOP_LENGTH, n_mels), values roughly in
    [-1, 1.5]: ``normalize`` of the whole input's frames.

    As torch.stft(center=True): N_FFT // 2 samples reflect-padded at both ends (mirroring without
    repeating the edge sample), so frame t is centred on sample t * HOP_LENGTH. That gives
    1 + len // HOP_LENGTH frames; Whisper drops the last one so that N_SAMPLES of audio make
    exactly N_FRAMES frames, so it is never built.
    """
    samples = np.asarray(audio.astype(mx.float32) if isinstance(audio, mx.array) else audio, dtype=np.float32)
    if samples.ndim != 1:
        raise ValueError(f"audio must be 1-D samples, got shape {tuple(samples.shape)}")
    samples = np.concatenate([samples, np.zeros(max(0, padding), dtype=np.float32)])  # float32, as a stream's
    pad = N_FFT // 2
    if samples.shape[0] <= pad:
        raise ValueError(f"need more than {pad} samples for a spectrogram, got {samples.shape[0]}")
    padded = np.concatenate([samples[1: pad + 1][::-1], samples, samples[-pad - 1: -1][::-1]])
    return mx.array(normalize(log_mel_frames(padded, samples.shape[0] // HOP_LENGTH, n_mels)))
