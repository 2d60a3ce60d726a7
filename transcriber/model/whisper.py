"""Whisper in MLX: an encoder, and a decoder that returns its cross-attention.

Parameter names follow the common MLX layout (mlx-examples' ``whisper``), so a folder of
``config.json`` + ``weights.safetensors`` in that layout loads directly.

Shapes: B batch, T tokens, S audio positions (1500 per 30 s window, 20 ms each), D model width,
H heads, V vocabulary.
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Collection, Optional, Sequence, Union

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map, tree_unflatten

from .. import native
from ..native import blas

# One layer's attention keys and values, each (B, H, T, D/H).
LayerCache = tuple[mx.array, mx.array]

# Above this many rows (beams, samples) one sgemm reading the weights once beats a matvec per row.
MAX_MATVEC_ROWS = 2

# erf(z) ~ 1 - 1 / (1 + a1 z + ... + a6 z^6)^16 for z >= 0, |error| < 3e-7 (Abramowitz & Stegun
# 7.1.28). Only multiplies and adds: compiled, MLX fuses them into one vectorised CPU kernel,
# ~9x faster than its scalar erf (GELU was a fifth of the encoder's time on a 2-core CPU).
_ERF_A = (0.0705230784, 0.0422820123, 0.0092705272, 0.0001520143, 0.0002765672, 0.0000430638)


@mx.compile
def gelu(x: mx.array) -> mx.array:
    """Exact-form GELU, x * Phi(x), to ~1e-6."""
    z = mx.abs(x) * (1 / math.sqrt(2))
    p = 1.0 + z * (_ERF_A[0] + z * (_ERF_A[1] + z * (_ERF_A[2] + z * (_ERF_A[3] + z * (_ERF_A[4] + z * _ERF_A[5])))))
    p = p * p
    p = p * p
    p = p * p
    p = p * p
    return 0.5 * x + 0.5 * mx.abs(x) * (1.0 - 1.0 / p)


_LOG2E = 1.4426950408889634
# 2^f = e^(f ln 2) for f in [-1/2, 1/2]: its Taylor terms to the 6th (truncation < 2e-7).
_EXP2_C = (0.69314718, 0.24022651, 0.05550411, 0.00961813, 0.00133336, 0.00015404)


@mx.compile
def _exp_nonpositive(x: mx.array) -> mx.array:
    """exp(x) for x <= 0 as 2^n * 2^f, only multiplies, adds and a bit shift: compiled, MLX fuses
    it into one vectorised CPU kernel (its own exp is scalar there). Relative error < 3e-7 for
    x in [-1, 0], < 4e-6 down to -87 (float32 rounding of x * log2(e)); below 2^-126 (and for
    -inf) exactly 0: n = -127 makes an all-zero exponent field."""
    y = mx.maximum(x * _LOG2E, -127.0)
    n = mx.floor(y + 0.5)
    f = y - n
    c = _EXP2_C
    p = 1.0 + f * (c[0] + f * (c[1] + f * (c[2] + f * (c[3] + f * (c[4] + f * c[5])))))
    return p * mx.view((n.astype(mx.int32) + 127) << 23, mx.float32)


def fast_softmax(scores: mx.array) -> mx.array:
    """Softmax over the last axis, lazily in MLX (no host round trip), to a few 1e-6: the decoder's
    cross-attention over one window (a few thousand scores a head), where MLX's CPU softmax
    costs more than the products around it. -inf scores (masked) get exactly 0. Elsewhere
    (Metal) MLX's own softmax."""
    if mx.default_device() != mx.cpu:
        return mx.softmax(scores, axis=-1, precise=True)
    e = _exp_nonpositive(scores - mx.max(scores, axis=-1, keepdims=True))
    return e / mx.sum(e, axis=-1, keepdims=True)


def softmax(scores: mx.array) -> mx.array:
    """Softmax over the last axis of attention scores (..., T, S).

    MLX's CPU backend computes exp one element at a time, which made the encoder's softmax over
    6 x 1500 x 1500 scores half of its time. On the CPU, numpy's vectorised exp (~7x faster)
    does it in place on a zero-copy view of the evaluated scores: that array is a fresh
    intermediate that nothing else references, so no one can observe the write, and no copy
    crosses between the two libraries. Elsewhere (Metal) MLX's own softmax is used.
    """
    if mx.default_device() != mx.cpu:
        return mx.softmax(scores, axis=-1, precise=True)
    scores = scores.astype(mx.float32)
    mx.eval(scores)
    w = np.asarray(scores)
    ops = native.ops()
    kernel = ops.softmax_inplace() if ops is not None and w.flags.c_contiguous else None
    if kernel is not None:  # one vectorised pass (AVX-512: ~3x numpy's three)
        kernel(w)
        return scores
    w -= w.max(axis=-1, keepdims=True)
    np.exp(w, out=w)
    w /= w.sum(axis=-1, keepdims=True)
    return scores


# What any Whisper's config holds (tiny to large-v3 and the distilled ones), with room; a config
# outside is refused when the model loads, before a file is transcribed.
DIMENSION_BOUNDS = {"n_mels": (80, 128), "n_audio_ctx": (1, 1500), "n_audio_state": (2, 4096), "n_audio_head": (1, 64),
                    "n_audio_layer": (1, 64), "n_vocab": (51864, 52000), "n_text_ctx": (1, 448),
                    "n_text_state": (2, 4096), "n_text_head": (1, 64), "n_text_layer": (1, 64)}
MAX_PARAMETERS = 2_000_000_000  # large-v3: 1.55 billion


@dataclass(frozen=True)
class ModelDimensions:
    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    def __post_init__(self) -> None:
        """ValueError, naming the entry, for dimensions no Whisper has: checked before anything
        is allocated (a config of 10^9 dimensions would allocate until memory runs out)."""
        for name, (low, high) in DIMENSION_BOUNDS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise ValueError(f"{name} {value!r} is not from {low} to {high}")
        for state, head in (("n_audio_state", "n_audio_head"), ("n_text_state", "n_text_head")):
            if getattr(self, state) % getattr(self, head):
                raise ValueError(f"{head} {getattr(self, head)} does not divide {state} {getattr(self, state)}")
        if self.n_parameters() > MAX_PARAMETERS:
            raise ValueError(f"{self.n_parameters():,} parameters, more than any Whisper ({MAX_PARAMETERS:,})")

    def n_parameters(self) -> int:
        """About how many weights a model of these dimensions has (4 d^2 per attention, 8 d^2
        per MLP; the text decoder's layers attend twice; the token embedding)."""
        audio, text = self.n_audio_state, self.n_text_state
        return (self.n_audio_layer * 12 * audio * audio + self.n_text_layer * 16 * text * text
                + self.n_vocab * text + self.n_text_ctx * text + self.n_mels * audio * 3)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelDimensions":
        """ValueError (or KeyError) for a config that is not one of a Whisper."""
        values = {}
        for k in cls.__dataclass_fields__:
            if not isinstance(d[k], (int, float)) or isinstance(d[k], bool) or d[k] != int(d[k]):
                raise ValueError(f"{k} {d[k]!r} is not a whole number")
            values[k] = int(d[k])
        return cls(**values)

    @property
    def is_multilingual(self) -> bool:
        """English-only vocabularies (GPT-2's) have 51864 tokens; multilingual ones more."""
        return self.n_vocab >= 51865

    @property
    def num_languages(self) -> int:
        """The language tokens the vocabulary has (99 for most models, 100 for large-v3)."""
        return self.n_vocab - 51765 - int(self.is_multilingual)

    def to_dict(self) -> dict:
        return asdict(self)


def sinusoids(length: int, channels: int, max_timescale: float = 10000) -> np.ndarray:
    """Whisper's fixed encoder position embedding, (length, channels)."""
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = np.exp(-log_timescale_increment * np.arange(channels // 2))
    scaled_time = np.arange(length)[:, None] * inv_timescales[None, :]
    return np.concatenate([np.sin(scaled_time), np.cos(scaled_time)], axis=1).astype(np.float32)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)

    def split_heads(self, x: mx.array) -> mx.array:
        """(B, T, D) -> (B, H, T, D/H)"""
        b, t, d = x.shape
        return x.reshape(b, t, self.n_head, d // self.n_head).transpose(0, 2, 1, 3)

    def merge_heads(self, x: mx.array) -> mx.array:
        """(B, H, T, D/H) -> (B, T, D)"""
        b, h, t, dh = x.shape
        return x.transpose(0, 2, 1, 3).reshape(b, t, h * dh)

    def keys_values(self, x: mx.array) -> LayerCache:
        """Keys and values of x (B, S, D), split into heads and made contiguous once: (B, H, S, D/H)."""
        return mx.contiguous(self.split_heads(self.key(x))), mx.contiguous(self.split_heads(self.value(x)))

    def cross_keys_values(self, x: mx.array) -> LayerCache:
        """An audio window's keys, transposed, and values, made contiguous once: (B, H, D/H, S)
        and (B, H, S, D/H). The transposed keys make each decode step's q x K^T a plain product
        (MLX's fused attention over a one-token query reads them ~1.4x slower)."""
        k, v = self.keys_values(x)
        return mx.contiguous(k.transpose(0, 1, 3, 2)), v

    def attend_cross(self, q: mx.array, k_t: mx.array, v: mx.array, mask=None, want_weights: bool = False):
        """Attention over an audio window. q (B,T,D); k_t (B,H,D/H,S) and v (B,H,S,D/H) from
        ``cross_keys_values``; mask (B,1,1,S) or None: the positions each row may attend.
        Returns the output (B,T,D) and, when ``want_weights``, the weights (B,H,T,S) (computed
        exactly on the host: they time words), else None."""
        scale = (q.shape[-1] // self.n_head) ** -0.5
        scores = (self.split_heads(q) * scale) @ k_t
        if mask is not None:
            scores = mx.where(mask, scores, -mx.inf)
        # several query rows (a prompt pass): the host softmax, ~40x MLX's compiled exp over
        # (B, H, T, S) scores on the CPU; one row (an MLX step): lazily, no host round trip
        weights = softmax(scores) if want_weights or scores.shape[-2] > 1 else fast_softmax(scores)
        return self.out(self.merge_heads(weights @ v)), (weights if want_weights else None)

    def attend(self, q: mx.array, k: mx.array, v: mx.array, mask=None) -> mx.array:
        """Fused attention without weights. q (B,T,D); k, v (B,H,S,D/H) -> (B,T,D)."""
        scale = (q.shape[-1] // self.n_head) ** -0.5
        out = mx.fast.scaled_dot_product_attention(self.split_heads(q), k, v, scale=scale, mask=mask)
        return self.out(self.merge_heads(out))

    def attend_all(self, q: mx.array, k: mx.array, v: mx.array) -> mx.array:
        """Unmasked attention without weights (the encoder). q (B,S,D); k, v (B,H,S,D/H) ->
        (B,S,D). On the CPU the native kernel where it serves (scores, softmax and values in
        L1-sized tiles: ~2x MLX's two batched sgemms and the softmax between), else
        ``attend_with_weights``."""
        ops = native.ops() if mx.default_device() == mx.cpu else None
        kernel = ops.encoder_attention() if ops is not None else None
        if kernel is None:
            return self.attend_with_weights(q, k, v)[0]
        mx.eval(q, k, v)
        qs, ks, vs = np.asarray(q), np.asarray(k), np.asarray(v)
        outs = [kernel(np.ascontiguousarray(qs[b], dtype=np.float32),
                       np.ascontiguousarray(ks[b].transpose(0, 2, 1), dtype=np.float32),
                       np.ascontiguousarray(vs[b], dtype=np.float32)) for b in range(qs.shape[0])]
        if any(o is None for o in outs):
            return self.attend_with_weights(q, k, v)[0]
        return self.out(mx.array(np.stack(outs)))

    def attend_with_weights(self, q: mx.array, k: mx.array, v: mx.array):
        """Explicit attention. q (B,T,D); k, v (B,H,S,D/H) -> output (B,T,D) and the weights
        (B,H,T,S) after softmax: ``attend_cross`` over a transposed view of the keys."""
        return self.attend_cross(q, k.transpose(0, 1, 3, 2), v, want_weights=True)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross_attention: bool = False):
        super().__init__()
        self.attn = MultiHeadAttention(n_state, n_head)
        self.attn_ln = nn.LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = nn.LayerNorm(n_state) if cross_attention else None
        n_mlp = n_state * 4
        self.mlp1 = nn.Linear(n_state, n_mlp)
        self.mlp2 = nn.Linear(n_mlp, n_state)
        self.mlp_ln = nn.LayerNorm(n_state)

    def mlp(self, x: mx.array) -> mx.array:
        return x + self.mlp2(gelu(self.mlp1(self.mlp_ln(x))))

    def encode(self, x: mx.array) -> mx.array:
        """Encoder block: (B, S, D) -> (B, S, D)."""
        h = self.attn_ln(x)
        return self.mlp(x + self.attn.attend_all(self.attn.query(h), *self.attn.keys_values(h)))

    def decode(self, x, cross_kv, cache: Optional[LayerCache], mask, want_weights: bool, cross_mask=None):
        """Decoder block. x (B,T,D); cross_kv = precomputed keys (transposed) and values of the
        audio, (B,H,D/H,S) and (B,H,S,D/H) (``cross_keys_values``); cache = this layer's keys and values of earlier tokens, (B,H,T',D/H).

        Returns x, the updated self-attention cache, and cross-attention weights (B,H,T,S) when
        ``want_weights`` (else None). ``cross_mask``: the audio positions each row may attend
        (a batch of windows padded to one length); not with ``want_weights``.
        """
        h = self.attn_ln(x)
        q = self.attn.query(h)
        k, v = self.attn.split_heads(self.attn.key(h)), self.attn.split_heads(self.attn.value(h))
        if cache is not None:
            k = mx.concatenate([cache[0], k], axis=2)
            v = mx.concatenate([cache[1], v], axis=2)
        x = x + self.attn.attend(q, k, v, mask=mask)
        h = self.cross_attn_ln(x)
        q = self.cross_attn.query(h)
        out, weights = self.cross_attn.attend_cross(q, *cross_kv, mask=cross_mask, want_weights=want_weights)
        return self.mlp(x + out), (k, v), weights


class AudioEncoder(nn.Module):
    def __init__(self, dims: ModelDimensions):
        super().__init__()
        d = dims.n_audio_state
        self.conv1 = nn.Conv1d(dims.n_mels, d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self._positional_embedding = mx.array(sinusoids(dims.n_audio_ctx, d))
        self.blocks = [ResidualAttentionBlock(d, dims.n_audio_head) for _ in range(dims.n_audio_layer)]
        self.ln_post = nn.LayerNorm(d)
        # () -> this encoder's float32 weights read again from the model's file (the loader
        # sets it); None: no file, the weights are never dropped
        self._source: Optional[Callable[[], dict[str, mx.array]]] = None
        self._dropped = False
        self._weights_lock = threading.RLock()

    def set_weights_source(self, source: Optional[Callable[[], dict[str, mx.array]]]) -> None:
        """Where ``restore_weights`` reads the weights from: a callable giving them by the
        names ``parameters()`` flattens to ("conv1.weight", "blocks.0.mlp1.bias", ...)."""
        self._source = source

    def drop_weights(self) -> bool:
        """Free MLX's float32 copy of the weights while the native encoder serves from its own
        packed bf16 copy (tens of MB of peak RSS). Only when they can be read again from the
        model's file: False (and nothing dropped) otherwise. ``parameters()`` still gives
        the weights: it reads them again (``filter_and_map``)."""
        with self._weights_lock:
            if self._source is None or self._dropped:
                return self._dropped
            self.update(tree_map(lambda _: mx.zeros((0,)), self.parameters()))
            self._dropped = True
            return True

    def restore_weights(self) -> None:
        """Read the float32 weights again if ``drop_weights`` freed them (MLX's ops serve now,
        the native encoder is packed again, or someone reads ``parameters()``)."""
        with self._weights_lock:
            if self._dropped:
                self._dropped = False  # before parameters() below, which comes back here
                self.update(tree_unflatten(list(self._source().items())))
                mx.eval(self.parameters())

    def filter_and_map(self, *args, **kwargs):
        # what parameters(), load_weights, tree_flatten(model.parameters()) are built on: they
        # see the float32 weights, never the empty arrays of a drop
        self.restore_weights()
        return super().filter_and_map(*args, **kwargs)

    def __call__(self, mel: mx.array) -> mx.array:
        """mel (B, 2*S, n_mels) -> audio features (B, S, D). S may be shorter than n_audio_ctx.
        On the CPU, the native kernels' bf16 encoder where it serves (transcriber/native)."""
        ops = native.ops() if mx.default_device() == mx.cpu else None
        run = ops.encoder(self) if ops is not None else None
        return run(mel) if run is not None else self.mlx_forward(mel)

    def mlx_forward(self, mel: mx.array) -> mx.array:
        """The encoder on MLX's own float32 ops (weights read again if they were dropped)."""
        self.restore_weights()
        x = gelu(self.conv1(mel))
        x = gelu(self.conv2(x))
        x = x + self._positional_embedding[: x.shape[1]]
        for block in self.blocks:
            x = block.encode(x)
        return self.ln_post(x)


@dataclass
class DecoderState:
    """What the decoder keeps between calls for one audio window (or a batch of them).

    cross_kv: per layer, the audio's keys, transposed, (B, H, D/H, S) and values (B, H, S, D/H):
    computed once per window (``MultiHeadAttention.cross_keys_values``).
    self_kv: per layer, the tokens' keys and values so far (B, H, T_past, D/H) each.
    pad, audio_len: rows of different windows in one batch (decoding/batch.py): per row, the
    padded positions at the left of self_kv, and the real audio positions of cross_kv (the rest
    is padding); both (B,) int32, masked out in attention. None: no padding.
    """

    cross_kv: list[tuple[mx.array, mx.array]]
    self_kv: list[Optional[LayerCache]]
    pad: Optional[mx.array] = None
    audio_len: Optional[mx.array] = None

    @property
    def offset(self) -> int:
        first = self.self_kv[0]
        return 0 if first is None else first[0].shape[2]

    @property
    def audio_span(self) -> int:
        """Audio positions in cross_kv (padding included)."""
        return self.cross_kv[0][1].shape[2]

    def select(self, indices: mx.array) -> "DecoderState":
        """Reorder the batch (beam search): keep rows ``indices`` of the self-attention cache."""
        self_kv = [None if c is None else (c[0][indices], c[1][indices]) for c in self.self_kv]
        return DecoderState(self.cross_kv, self_kv)

    def keep_rows(self, indices: mx.array) -> "DecoderState":
        """Rows ``indices`` of a batch of windows: their audio, their tokens, their padding."""
        take = lambda pair: (pair[0][indices], pair[1][indices])  # noqa: E731
        return DecoderState([take(c) for c in self.cross_kv], [None if c is None else take(c) for c in self.self_kv],
                            None if self.pad is None else self.pad[indices],
                            None if self.audio_len is None else self.audio_len[indices])

    def truncate(self, length: int) -> "DecoderState":
        """Forget cached positions from ``length`` on (a rewind, or a shared prompt reused)."""
        self_kv = [None if c is None or length == 0 else (c[0][:, :, :length], c[1][:, :, :length])
                   for c in self.self_kv]
        return DecoderState(self.cross_kv, self_kv)

    @classmethod
    def stack(cls, states: list["DecoderState"]) -> "DecoderState":
        """States of different windows (batch 1, or batches of windows already) as one batch:
        token caches padded on the left to one length, audio on the right to one span."""
        lengths = [s.offset for s in states]
        spans = [s.audio_span for s in states]
        width, span = max(lengths), max(spans)

        def pad(a: mx.array, axis: int, before: int, after: int) -> mx.array:
            widths = [(0, 0)] * a.ndim
            widths[axis] = (before, after)
            return mx.pad(a, widths) if before or after else a

        def rows(s: "DecoderState") -> int:
            return s.cross_kv[0][1].shape[0]

        layers = range(len(states[0].cross_kv))
        self_kv = [tuple(mx.concatenate([pad(s.self_kv[i][k], 2, width - n, 0) for s, n in zip(states, lengths)])
                         for k in (0, 1)) for i in layers]
        # keys are transposed: their audio axis is the last one
        cross_kv = [tuple(mx.concatenate([pad(s.cross_kv[i][k], 3 - k, 0, span - n) for s, n in zip(states, spans)])
                          for k in (0, 1)) for i in layers]
        pads = [(s.pad if s.pad is not None else mx.zeros((rows(s),), mx.int32)) + (width - n)
                for s, n in zip(states, lengths)]
        audio = [s.audio_len if s.audio_len is not None else mx.full((rows(s),), n, mx.int32)
                 for s, n in zip(states, spans)]
        return cls(cross_kv, self_kv, mx.concatenate(pads), mx.concatenate(audio))

    def compact(self) -> "DecoderState":
        """Drop the padding every row has (after rows left the batch)."""
        if self.pad is None:
            return self
        cut = int(mx.min(self.pad).item())
        span = int(mx.max(self.audio_len).item())
        self_kv = [None if c is None else (c[0][:, :, cut:], c[1][:, :, cut:]) for c in self.self_kv]
        cross_kv = [(k_t[..., :span], v[:, :, :span]) for k_t, v in self.cross_kv]
        if self_kv[0] is not None and self_kv[0][0].shape[0] == 1:  # one row left: no padding at all
            return DecoderState(cross_kv, self_kv)
        return DecoderState(cross_kv, self_kv, self.pad - cut, self.audio_len)


class TextDecoder(nn.Module):
    def __init__(self, dims: ModelDimensions):
        super().__init__()
        d = dims.n_text_state
        self.token_embedding = nn.Embedding(dims.n_vocab, d)
        self.positional_embedding = mx.zeros((dims.n_text_ctx, d))
        self.blocks = [ResidualAttentionBlock(d, dims.n_text_head, cross_attention=True)
                       for _ in range(dims.n_text_layer)]
        self.ln = nn.LayerNorm(d)

    def output_weight(self) -> mx.array:
        """The tied output projection as (D, V), made once: a row-major copy of the embedding's
        transpose runs the per-token (1, D) x (D, V) product ~2x faster on the CPU than
        multiplying by the transposed view."""
        if getattr(self, "_output_cache", None) is None or self._output_cache[0] is not self.token_embedding.weight:
            weight = self.token_embedding.weight
            transposed = mx.contiguous(weight.T)
            mx.eval(transposed)
            self._output_cache = (weight, transposed)
        return self._output_cache[1]

    def start(self, audio_features: mx.array) -> DecoderState:
        """Precompute the cross-attention keys/values of one window's features (B, S, D): on
        the CPU on the native bf16 GEMM where it serves, else MLX's float32 linears."""
        step = self.native_step()
        if step is not None and step.cross is not None:
            cross_kv = step.cross_keys_values(audio_features, native.encoder_threads())
        else:
            cross_kv = [b.cross_attn.cross_keys_values(audio_features) for b in self.blocks]
        return DecoderState(cross_kv, [None] * len(self.blocks))

    def __call__(self, tokens: mx.array, state: DecoderState,
                 want_weights: Union[bool, Collection[int]] = False,
                 want_logits: Union[bool, Sequence[int]] = True):
        """tokens (B, T) -> logits (B, T, V), the new state, cross-attention per layer.

        Cross-attention is a list of (B, H, T, S) weights, one per layer, when ``want_weights``
        is True, or for the layers it lists (None for the others: they take the fused path);
        else None. ``want_logits``: True for every position, False for none (None returned), or
        the positions wanted, giving (B, len(positions), V): the vocabulary projection is the
        costliest part of a pass over many tokens (a 200-token prompt needs two positions).
        Nothing is mutated: the caller keeps or drops the returned state.
        """
        layers = range(len(self.blocks)) if want_weights is True else (want_weights or ())
        step = self.native_step()
        if step is not None and step.supports(tokens, state, want_logits):
            return step.step(tokens, state, layers)
        prefill = self.native_pass()
        if prefill is not None and prefill.supports(tokens, state):
            return prefill(tokens, state, layers, want_logits, lambda: self.mlx_pass(tokens, state, layers, want_logits))
        return self.mlx_pass(tokens, state, layers, want_logits)

    def mlx_pass(self, tokens: mx.array, state: DecoderState, layers: Collection[int],
                 want_logits: Union[bool, Sequence[int]] = True):
        """``__call__`` on MLX's float32 ops (``layers``: the layers whose weights are wanted)."""
        offset = state.offset
        t = tokens.shape[1]
        mask = None
        if t > 1:
            # causal over the new tokens, everything cached is visible
            idx_q = mx.arange(offset, offset + t)[:, None]
            idx_k = mx.arange(offset + t)[None, :]
            mask = idx_k <= idx_q
        cross_mask = None
        if state.pad is None:
            x = self.token_embedding(tokens) + self.positional_embedding[offset: offset + t]
        else:  # a batch of windows (DecoderState.stack): each row at its own position
            positions = (offset - state.pad)[:, None] + mx.arange(t)[None, :]
            x = self.token_embedding(tokens) + self.positional_embedding[positions]
            visible = (mx.arange(offset + t)[None, :] >= state.pad[:, None])[:, None, None, :]
            mask = visible if mask is None else visible & mask
            cross_mask = (mx.arange(state.audio_span)[None, :] < state.audio_len[:, None])[:, None, None, :]
        new_kv, weights = [], []
        for i, (block, cross_kv, cache) in enumerate(zip(self.blocks, state.cross_kv, state.self_kv)):
            x, kv, w = block.decode(x, cross_kv, cache, mask, i in layers, cross_mask)
            new_kv.append(kv)
            weights.append(w)
        if want_logits is False:
            logits = None
        else:
            logits = self.project(self.ln(x if want_logits is True else x[:, mx.array(list(want_logits))]))
        return logits, DecoderState(state.cross_kv, new_kv, state.pad, state.audio_len), (weights if layers else None)

    def native_pass(self):
        """The native kernels' multi-token pass at batch 1 (transcriber/native/prefill.py), or None."""
        ops = native.ops() if mx.default_device() == mx.cpu else None
        return ops.decoder_pass(self, native.weights_precision()) if ops is not None else None

    def native_step(self):
        """The native kernels' one-token step for this decoder (transcriber/native), or None:
        off the CPU, kernels not built or disabled (then every op here is MLX's)."""
        ops = native.ops() if mx.default_device() == mx.cpu else None
        return ops.decoder_step(self, native.weights_precision()) if ops is not None else None

    def project(self, h: mx.array):
        """Logits (B, T, V) of final hidden states (B, T, D) in float32, for passes over several
        tokens (a one-token step's go through the native step, in bf16): an MLX array, or on the
        CPU for a row or two (a prompt's two positions) a numpy array from the sgemv of the BLAS
        serving MLX (``blas.host_matvec``). Kept float32 on purpose: the no-speech probability
        is read here, and bf16 weights tipped it on music (tests/test_streaming.py's Brahms
        recording then streamed 55 words)."""
        b, t, d = h.shape
        matvec = blas.host_matvec() if b * t <= MAX_MATVEC_ROWS and mx.default_device() == mx.cpu else None
        if matvec is None:
            return h @ self.output_weight()
        weight = np.array(self.token_embedding.weight, copy=False)  # (V, D), a view: no copy
        rows = np.array(h.reshape(b * t, d), dtype=np.float32)
        logits = np.empty((b * t, weight.shape[0]), dtype=np.float32)
        for row, out in zip(rows, logits):
            matvec(weight, row, out)
        return logits.reshape(b, t, -1)


@dataclass(frozen=True)
class ModelInfo:
    """What decoding needs to know about a model besides its weights."""

    name: str
    folder: Optional[Path] = None  # holds the tokenizer files
    suppress_ids: tuple[int, ...] = ()  # the model's own "-1" suppression set (may be empty)


class Whisper(nn.Module):
    def __init__(self, dims: ModelDimensions, info: ModelInfo = ModelInfo(""),
                 alignment_heads: Optional[np.ndarray] = None):
        super().__init__()
        self.dims = dims
        self.info = info
        self.name = info.name
        self.encoder = AudioEncoder(dims)
        self.decoder = TextDecoder(dims)
        if alignment_heads is None:
            # default as in openai/whisper: the heads of the second half of the decoder
            alignment_heads = [(layer, head) for layer in range(dims.n_text_layer // 2, dims.n_text_layer)
                               for head in range(dims.n_text_head)]
        self._alignment_heads = np.asarray(alignment_heads, dtype=np.int64).reshape(-1, 2)
        outside = [(int(layer), int(head)) for layer, head in self._alignment_heads
                   if not (0 <= layer < dims.n_text_layer and 0 <= head < dims.n_text_head)]
        if outside:
            raise ValueError(f"alignment head (layer, head) {outside[0]} is not in the model's "
                             f"{dims.n_text_layer} layers of {dims.n_text_head} heads")
        if any(not 0 <= i < dims.n_vocab for i in info.suppress_ids):
            raise ValueError(f"suppress_ids holds {next(i for i in info.suppress_ids if not 0 <= i < dims.n_vocab)}, "
                             f"not a token of the {dims.n_vocab} of the vocabulary")

    def filter_and_map(self, *args, **kwargs):
        # parameters() walks the encoder's items directly: give it the float32 weights, never
        # the empty arrays of AudioEncoder.drop_weights
        self.encoder.restore_weights()
        return super().filter_and_map(*args, **kwargs)

    @property
    def alignment_heads(self) -> np.ndarray:
        """(n, 2) array of (layer, head) pairs whose cross-attention follows the audio."""
        return self._alignment_heads

    @property
    def alignment_layers(self) -> frozenset[int]:
        """The decoder layers that hold an alignment head (their cross-attention is wanted)."""
        return frozenset(self._alignment_heads[:, 0].tolist())

    @property
    def is_multilingual(self) -> bool:
        return self.dims.is_multilingual

    @property
    def num_languages(self) -> int:
        return self.dims.num_languages
