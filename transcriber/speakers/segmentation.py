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

Speed: 2.64 GFLOP per window (SincNet 0.96, of it 0.64 the sinc filters; the LSTM's input
projections 1.0, its recurrence 0.62; the linear layers 0.06); about 42 ms of one core of the
2-core Xeon per window (63 GFLOP/s), a third of it in the sequential recurrence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

import mlx.core as mx
import numpy as np

from transcriber.speakers.taps import tap_sum

SAMPLE_RATE = 16000
WINDOW_SAMPLES = 10 * SAMPLE_RATE
SINC_STRIDE, SINC_TAPS = 10, 251
MIN_LOW_HZ = MIN_BAND_HZ = 50.0
FRAME_STEP = 270 / SAMPLE_RATE  # seconds between frames
FRAME_DURATION = 991 / SAMPLE_RATE  # seconds a frame sees
LSTM_LAYERS, HIDDEN = 4, 128
# Windows scored together: the LSTM's 589 steps cost about as much for 1 window as for a few,
# so a batch shares them (per window and layer, on one core: 7.3 ms at 16, 6.7 at 32, 6.3 at 64);
# the SincNet takes fewer at a time (its unfolded input is large).
# SINC_BATCH: 2, not 4: the pass runs two parts side by side (cores.py), and at 4 their
# SincNet temporaries at once took the 10-minute pass's peak to 577-611 MB; at 2, 496 MB
BATCH, SINC_BATCH = 32, 2
CHUNK = 64  # LSTM steps whose input projections are made at once (32 windows: 8 MB, not 77)
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
    batch, time, channels = x.shape  # x viewed as [batch, time // 3, 3, channels] in place
    view = mx.as_strided(x, (batch, time // 3, 3, channels), (time * channels, 3 * channels, channels, 1))
    return mx.max(view, axis=2)


def leaky_relu(x: mx.array) -> mx.array:
    return mx.where(x >= 0, x, SLOPE * x)


def sinc_conv(x: np.ndarray, filters: np.ndarray) -> mx.array:
    """|the sinc filter bank|, stride 10, on [batch, samples] -> [batch, frames, 80], in numpy:
    the windows of 251 samples copied out of a strided view, one matmul with the filters
    [251, 80]. The same numbers as ``mx.conv1d``, whose own unfolding copy made it 1.5 times
    slower (14 -> 9 ms per window on one core)."""
    frames = (x.shape[1] - SINC_TAPS) // SINC_STRIDE + 1
    windows = np.lib.stride_tricks.as_strided(x, (x.shape[0], frames, SINC_TAPS),
                                              (x.strides[0], SINC_STRIDE * x.strides[1], x.strides[1]))
    out = np.ascontiguousarray(windows) @ filters
    return mx.array(np.abs(out, out=out))


def conv_taps(x: mx.array, weight: mx.array, bias: mx.array) -> mx.array:
    """A "valid" convolution over time of [batch, time, in] by weight [taps, in, out]: x read
    as one long list of frames, a tap is an offset into it (``taps.tap_sum``; frames that run
    into the next item are cut away). ``mx.conv1d`` gave the same numbers about 2 times slower."""
    batch, time, channels = x.shape
    taps = weight.shape[0]
    out = tap_sum(x.reshape(batch * time, channels), range(taps), weight, batch * time - (taps - 1))
    channels = out.shape[1]  # the outputs, read in place (a strided view): the last lies before ``length``
    return mx.as_strided(out, (batch, time - taps + 1, channels), (time * channels, channels, 1)) + bias


class Segmentation:
    """segmentation-3.0 with its weights, in MLX. ``scores(windows)``: log-probabilities of the
    7 powerset classes per frame; ``powerset_to_speakers``: which local speakers speak."""

    def __init__(self, weights: dict[str, mx.array]):
        w = weights
        fb = "sincnet.conv1d.0.filterbank."
        filters = sinc_filters(*(np.array(w[fb + k]) for k in ("low_hz_", "band_hz_", "window_", "n_")))
        self.sinc = np.ascontiguousarray(filters.T)  # [251, 80]: see sinc_conv
        self.wav_norm = (w["sincnet.wav_norm1d.weight"], w["sincnet.wav_norm1d.bias"])
        self.norms = [(w[f"sincnet.norm1d.{i}.weight"], w[f"sincnet.norm1d.{i}.bias"]) for i in range(3)]
        self.convs = [(w[f"sincnet.conv1d.{i}.weight"].transpose(2, 1, 0), w[f"sincnet.conv1d.{i}.bias"]) for i in (1, 2)]
        self.lstm = [self._lstm_layer(w, layer) for layer in range(LSTM_LAYERS)]
        self.linear = [(w[f"linear.{i}.weight"].T, w[f"linear.{i}.bias"]) for i in range(2)]
        self.classifier = (w["classifier.weight"].T, w["classifier.bias"])

    @staticmethod
    def _lstm_layer(w, layer: int):
        """(input weights [in, 8H], biases [8H]: the forward direction's 4H then the reverse
        one's, torch's two biases summed; hidden weights [2, H, 4H] in numpy). The gates are
        reordered from torch's i, f, g, o to i, f, o, g: the three sigmoid gates side by side."""
        names = [f"l{layer}", f"l{layer}_reverse"]
        order = np.concatenate([np.arange(0, 2 * HIDDEN), np.arange(3 * HIDDEN, 4 * HIDDEN),
                                np.arange(2 * HIDDEN, 3 * HIDDEN)])
        wx = np.concatenate([np.array(w[f"lstm.weight_ih_{n}"])[order].T for n in names], axis=1)
        bias = np.concatenate([np.array(w[f"lstm.bias_ih_{n}"] + w[f"lstm.bias_hh_{n}"])[order] for n in names])
        wh = np.stack([np.array(w[f"lstm.weight_hh_{n}"])[order].T for n in names])
        return mx.array(wx), mx.array(bias), np.ascontiguousarray(wh)

    @classmethod
    def from_weights(cls, path: Union[str, Path]) -> "Segmentation":
        """The model from segmentation-3.0.safetensors (``transcribe models pull speakers``)."""
        return cls(mx.load(str(path)))

    def sincnet(self, audio: mx.array) -> mx.array:
        """[batch, samples] -> [batch, frames, 60]."""
        x = sinc_conv(np.asarray(instance_norm(audio[:, :, None], *self.wav_norm)[:, :, 0]), self.sinc)
        x = leaky_relu(instance_norm(max_pool3(x), *self.norms[0]))
        for (weight, bias), norm in zip(self.convs, self.norms[1:]):
            x = conv_taps(x, weight, bias)
            x = leaky_relu(instance_norm(max_pool3(x), *norm))
        return x

    @staticmethod
    def bilstm(x: mx.array, wx: mx.array, bias: mx.array, wh: np.ndarray) -> mx.array:
        """One bidirectional LSTM layer on [batch, time, in] -> [batch, time, 2H]. The input
        projections are MLX matmuls, ``CHUNK`` steps of both directions at a time (the reverse
        one from the last step back); the recurrence steps both directions together in numpy,
        the windows of the batch as the rows of one small matmul per step: 589 steps, where
        MLX's per-operation cost measured 4 to 30 times numpy's. Each step writes into buffers
        made once (``out=``)."""
        batch, time, _ = x.shape
        four, three = 4 * HIDDEN, 3 * HIDDEN
        h = np.zeros((2, batch, HIDDEN), dtype=np.float32)
        c, cell = np.zeros_like(h), np.empty_like(h)
        gates = np.empty((2, batch, four), dtype=np.float32)
        sig = gates[..., :three]  # i, f, o: made sigmoids in place; g: its tanh in place
        out = np.empty((batch, time, 2 * HIDDEN), dtype=np.float32)
        for first in range(0, time, CHUNK):
            last = min(time, first + CHUNK)
            ahead = np.asarray(x[:, first:last] @ wx[:, :four] + bias[:four])
            back = np.asarray(x[:, time - last:time - first] @ wx[:, four:] + bias[four:])
            for t in range(first, last):
                np.matmul(h, wh, out=gates)
                gates[0] += ahead[:, t - first]
                gates[1] += back[:, last - 1 - t]
                np.negative(sig, out=sig)
                np.exp(sig, out=sig)
                sig += 1
                np.reciprocal(sig, out=sig)
                np.tanh(gates[..., three:], out=gates[..., three:])
                c *= sig[..., HIDDEN:2 * HIDDEN]
                np.multiply(sig[..., :HIDDEN], gates[..., three:], out=cell)
                c += cell
                np.tanh(c, out=cell)
                np.multiply(sig[..., 2 * HIDDEN:three], cell, out=h)
                out[:, t, :HIDDEN], out[:, time - 1 - t, HIDDEN:] = h
        return mx.array(out)

    def forward(self, audio: mx.array) -> mx.array:
        """[batch, samples] -> log-probabilities [batch, frames, 7]. The SincNet runs
        ``SINC_BATCH`` windows at a time: its first convolution unfolds each window into
        15975 x 251 floats (16 MB)."""
        parts = []
        for start in range(0, audio.shape[0], SINC_BATCH):
            parts.append(self.sincnet(audio[start:start + SINC_BATCH]))
            mx.eval(parts[-1])
        x = mx.concatenate(parts)
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
        scores = []
        for start in range(0, len(windows), BATCH):
            out = self.forward(mx.array(windows[start:start + BATCH]))
            mx.eval(out)
            scores.append(np.array(out))
        return np.concatenate(scores) if scores else np.zeros((0, num_frames(windows.shape[1]), 7), np.float32)


def powerset_to_speakers(scores: np.ndarray) -> np.ndarray:
    """[..., frames, 7] powerset scores -> [..., frames, 3] 0/1 activity of each local
    speaker: the most likely class's speakers (pyannote's hard Powerset.to_multilabel)."""
    return POWERSET[np.argmax(scores, axis=-1)]
