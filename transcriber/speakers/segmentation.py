"""pyannote's segmentation-3.0 in MLX: who of (at most) three local speakers speaks in each
frame of a 10 s window.

The model (pyannote.audio's PyanNet, MIT) is, on 16 kHz mono:

- SincNet: the waveform instance-normalised; 80 band-pass filters of 251 taps made from
  learned low and band frequencies (ParamSincFB: 40 cosine and 40 sine filters, Hamming
  windowed), stride 10, then |x|; each of the three stages max-pools (3, stride 3), instance
  normalises (affine) and applies leaky ReLU (slope 0.01); stages two and three are plain
  convolutions 80 -> 60 -> 60, kernel 5;
- a 4-layer bidirectional LSTM (hidden 128 each way; its recurrence runs in numpy, see bilstm);
- two Linear 128 layers with leaky ReLU, a Linear to 7 classes, log-softmax.

The 7 classes are a powerset of 3 speakers with at most 2 at once: {}, {1}, {2}, {3}, {1,2},
{1,3}, {2,3} (``POWERSET``). A 10 s window (160000 samples) gives 589 frames; a frame covers
991 samples (61.9 ms, the receptive field) and frames are 270 samples apart (16.875 ms), the
first centred on sample 495 (``FRAME_STEP``, ``FRAME_DURATION``, ``num_frames``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import mlx.core as mx
import numpy as np

SAMPLE_RATE = 16000
WINDOW_SAMPLES = 10 * SAMPLE_RATE
SINC_STRIDE, SINC_TAPS = 10, 251
MIN_LOW_HZ = MIN_BAND_HZ = 50.0
FRAME_STEP = 270 / SAMPLE_RATE  # seconds between frames
FRAME_DURATION = 991 / SAMPLE_RATE  # seconds a frame sees
LSTM_LAYERS, HIDDEN = 4, 128
EPS = 1e-5  # torch's InstanceNorm1d
SLOPE = 0.01  # torch's leaky_relu
# class -> which of the 3 local speakers speak (pyannote's Powerset(3, 2): by size, then order)
POWERSET = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 0, 1], [0, 1, 1]], dtype=np.float32)


def num_frames(samples: int) -> int:
    """Frames the model gives for ``samples`` samples (589 for 10 s): the sinc convolution,
    then three (max-pool 3) stages with two kernel-5 convolutions between them."""
    n = (samples - SINC_TAPS) // SINC_STRIDE + 1
    for kernel in (None, 5, 5):
        if kernel:
            n = n - kernel + 1
        n //= 3
    return n


def sinc_filters(low_hz: np.ndarray, band_hz: np.ndarray, window: np.ndarray, n: np.ndarray) -> np.ndarray:
    """asteroid's ParamSincFB filters, [80, 251]: for each learned (low, band) a cosine
    (even) and a sine (odd) band-pass filter, from the half window and half time vector the
    checkpoint stores, computed in float32 as torch does."""
    low = MIN_LOW_HZ + np.abs(low_hz)  # [40, 1]
    high = np.clip(low + MIN_BAND_HZ + np.abs(band_hz), MIN_LOW_HZ, SAMPLE_RATE / 2).astype(np.float32)
    band = (high - low)[:, 0]
    ft_low, ft_high = low @ n, high @ n  # [40, 125]
    half = n / 2
    cos_left = ((np.sin(ft_high) - np.sin(ft_low)) / half) * window
    cos = np.concatenate([cos_left, 2 * band[:, None], cos_left[:, ::-1]], axis=1)
    sin_left = ((np.cos(ft_low) - np.cos(ft_high)) / half) * window
    sin = np.concatenate([sin_left, np.zeros_like(band)[:, None], -sin_left[:, ::-1]], axis=1)
    filters = np.concatenate([cos / (2 * band[:, None]), sin / (2 * band[:, None])], axis=0)
    return filters.astype(np.float32)


def instance_norm(x: mx.array, weight: mx.array, bias: mx.array) -> mx.array:
    """torch's InstanceNorm1d(affine=True) on [batch, time, channels]: each channel of each
    item normalised over time (biased variance)."""
    mean = mx.mean(x, axis=1, keepdims=True)
    var = mx.var(x, axis=1, keepdims=True)
    return (x - mean) * mx.rsqrt(var + EPS) * weight + bias


def max_pool3(x: mx.array) -> mx.array:
    """MaxPool1d(3, stride 3) over time on [batch, time, channels] (a trailing rest dropped)."""
    batch, time, channels = x.shape
    usable = time - time % 3
    return mx.max(x[:, :usable].reshape(batch, usable // 3, 3, channels), axis=2)


def leaky_relu(x: mx.array) -> mx.array:
    return mx.where(x >= 0, x, SLOPE * x)


class Segmentation:
    """segmentation-3.0 with its weights, in MLX. ``scores(windows)``: log-probabilities of the
    7 powerset classes per frame; ``powerset_to_speakers``: which local speakers speak."""

    def __init__(self, weights: dict[str, mx.array]):
        w = weights
        fb = "sincnet.conv1d.0.filterbank."
        filters = sinc_filters(*(np.array(w[fb + k]) for k in ("low_hz_", "band_hz_", "window_", "n_")))
        self.sinc = mx.array(filters[:, :, None])  # [80, 251, 1]: MLX's conv weight layout (out, k, in)
        self.wav_norm = (w["sincnet.wav_norm1d.weight"], w["sincnet.wav_norm1d.bias"])
        self.norms = [(w[f"sincnet.norm1d.{i}.weight"], w[f"sincnet.norm1d.{i}.bias"]) for i in range(3)]
        self.convs = [(w[f"sincnet.conv1d.{i}.weight"].transpose(0, 2, 1), w[f"sincnet.conv1d.{i}.bias"]) for i in (1, 2)]
        self.lstm = [self._lstm_layer(w, layer) for layer in range(LSTM_LAYERS)]
        self.linear = [(w[f"linear.{i}.weight"].T, w[f"linear.{i}.bias"]) for i in range(2)]
        self.classifier = (w["classifier.weight"].T, w["classifier.bias"])

    @staticmethod
    def _lstm_layer(w, layer: int):
        """(input weights [2, in, 4H], hidden weights [2, H, 4H] (numpy), biases [2, 4H]): forward and
        reverse directions stacked, torch's two biases summed, gates in torch's order i, f, g, o."""
        names = [f"l{layer}", f"l{layer}_reverse"]
        wx = mx.stack([w[f"lstm.weight_ih_{n}"].T for n in names])
        wh = np.stack([np.array(w[f"lstm.weight_hh_{n}"]).T for n in names])
        bias = mx.stack([w[f"lstm.bias_ih_{n}"] + w[f"lstm.bias_hh_{n}"] for n in names])
        return wx, wh, bias

    @classmethod
    def from_weights(cls, path: Union[str, Path]) -> "Segmentation":
        """The model from segmentation-3.0.safetensors (``transcribe models pull speakers``)."""
        return cls(mx.load(str(path)))

    def sincnet(self, audio: mx.array) -> mx.array:
        """[batch, samples] -> [batch, frames, 60]."""
        x = instance_norm(audio[:, :, None], *self.wav_norm)
        x = mx.abs(mx.conv1d(x, self.sinc, stride=SINC_STRIDE))
        x = leaky_relu(instance_norm(max_pool3(x), *self.norms[0]))
        for (weight, bias), norm in zip(self.convs, self.norms[1:]):
            x = mx.conv1d(x, weight) + bias
            x = leaky_relu(instance_norm(max_pool3(x), *norm))
        return x

    @staticmethod
    def bilstm(x: mx.array, wx: mx.array, wh: np.ndarray, bias: mx.array) -> mx.array:
        """One bidirectional LSTM layer on [batch, time, in] -> [batch, time, 2H]. The input
        projections of every step are one MLX matmul; the recurrence steps both directions
        together (the reverse one over the time-reversed input) in numpy: 589 small steps,
        where MLX's per-operation cost measured 4 to 30 times numpy's."""
        both = mx.stack([x, x[:, ::-1]])  # [2, batch, time, in]
        gates_x = np.array(mx.moveaxis(both @ wx[:, None] + bias[:, None, None], 2, 0))  # [time, 2, batch, 4H]
        h = np.zeros(gates_x.shape[1:3] + (HIDDEN,), dtype=np.float32)
        c = np.zeros_like(h)
        out = np.empty(gates_x.shape[:3] + (HIDDEN,), dtype=np.float32)
        for t, step in enumerate(gates_x):
            gates = step + h @ wh
            sig = 1 / (1 + np.exp(-gates))  # sigmoid (gates i, f, o; g's part unused)
            c = sig[..., HIDDEN:2 * HIDDEN] * c + sig[..., :HIDDEN] * np.tanh(gates[..., 2 * HIDDEN:3 * HIDDEN])
            h = out[t] = sig[..., 3 * HIDDEN:] * np.tanh(c)
        return mx.array(np.concatenate([out[:, 0], out[::-1, 1]], axis=-1).transpose(1, 0, 2))

    def forward(self, audio: mx.array) -> mx.array:
        x = self.sincnet(audio)
        for layer in self.lstm:
            x = self.bilstm(x, *layer)
        for weight, bias in self.linear:
            x = leaky_relu(x @ weight + bias)
        weight, bias = self.classifier
        logits = x @ weight + bias
        return logits - mx.logsumexp(logits, axis=-1, keepdims=True)

    def scores(self, windows: np.ndarray) -> np.ndarray:
        """Log-probabilities [batch, frames, 7] of the powerset classes for windows of 16 kHz
        mono samples [batch, samples] (10 s: 160000 samples, 589 frames)."""
        windows = np.asarray(windows, dtype=np.float32)
        if windows.ndim == 1:
            windows = windows[None]
        out = self.forward(mx.array(windows))
        mx.eval(out)
        return np.array(out)


def powerset_to_speakers(scores: np.ndarray) -> np.ndarray:
    """[..., frames, 7] powerset scores -> [..., frames, 3] 0/1 activity of each local
    speaker: the most likely class's speakers (pyannote's hard Powerset.to_multilabel)."""
    return POWERSET[np.argmax(scores, axis=-1)]
