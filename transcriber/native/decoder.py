"""The decoder's one-token step on the native kernels: one call per layer, then the projection.

Per layer, one native call does what ``ResidualAttentionBlock.decode`` does for one new token
per row (layer norms, the linears with their biases and residuals, self-attention over the
cache plus the token, cross-attention over the audio, GELU), reading each weight once for all
rows. Weights are copied once, at first use, to bfloat16 (or kept float32, or int8 per output
column: ``precision``); the MLX model keeps its own float32 weights for prompt passes and the
encoder. With int8-projection the step's vocabulary projection reads int8 (src/int8.cpp), with
int8 its layers' linears too, while the layers' bf16 copies stay for the multi-token pass
(prefill.py), which reads them.

Shapes: B rows (<= MAX_ROWS), D width, H heads, T cached tokens, S audio positions, V vocabulary.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Collection, Optional

import mlx.core as mx
import numpy as np

from transcriber.settings import KERNEL_WEIGHTS as PRECISIONS
from transcriber.native.kernels import GemmWeight, Int8Weight, Kernels, Packed, _strides
from transcriber.native.kvcache import GrowingCache

MAX_ROWS = 8  # the small-row linear's range: greedy, beams, --batch-files, streaming passes
AUDIO_KEPT = 1  # windows whose bf16 keys/values are remembered: the one decoded (its rewinds and
# fallbacks share it): it keeps its float32 arrays alive too, so no older one (~14 MB, tiny.en)
INT8 = ("int8", "int8-projection")  # the step's projection in int8; "int8": its layers' linears too


TRANSPOSE_ROWS = 16  # rows of the source a block of _transpose_into reads


def _transpose_into(out: np.ndarray, a: np.ndarray) -> None:
    """out (N, M) = a (M, N) transposed, ``TRANSPOSE_ROWS`` rows of a at a time. numpy's whole
    transposed copy walks a column at a time, which is slow where a's rows lie a power of two
    apart: base's cross keys, rows of 1024 floats (4 KiB), share cache sets; 1500 x 512 took
    4.1 ms, blocks 0.46 ms (tiny.en's 1500 x 384: 0.9 -> 0.26 ms). The same floats."""
    for i in range(0, len(a), TRANSPOSE_ROWS):
        out[:, i: i + TRANSPOSE_ROWS] = a[i: i + TRANSPOSE_ROWS].T


class _Layer(ctypes.Structure):  # struct Layer in src/kernels.cpp, field for field
    _fields_ = [(n, ctypes.c_void_p) for n in (
        "wq", "wk", "wv", "wo", "cwq", "cwo", "w1", "w2", "bq", "bv", "bo", "cbq", "cbo", "b1", "b2",
        "ln1_g", "ln1_b", "ln2_g", "ln2_b", "ln3_g", "ln3_b")]


@dataclass(frozen=True)
class LayerWeights:
    """A decoder layer's packed weights ((N, K) linears) and float32 biases and norms."""

    query: GemmWeight | Packed
    key: GemmWeight | Packed
    value: GemmWeight | Packed
    out: GemmWeight | Packed
    cross_query: GemmWeight | Packed
    cross_out: GemmWeight | Packed
    mlp1: GemmWeight | Packed
    mlp2: GemmWeight | Packed
    query_bias: np.ndarray
    value_bias: np.ndarray
    out_bias: np.ndarray
    cross_query_bias: np.ndarray
    cross_out_bias: np.ndarray
    mlp1_bias: np.ndarray
    mlp2_bias: np.ndarray
    ln1: tuple[np.ndarray, np.ndarray]
    ln2: tuple[np.ndarray, np.ndarray]
    ln3: tuple[np.ndarray, np.ndarray]


def _host(a: mx.array) -> np.ndarray:
    """An evaluated MLX array as a numpy view (no copy; its strides as MLX has them)."""
    return np.asarray(a)


class DecoderStep:
    """``step(tokens, state, layers)`` for a TextDecoder; built once per decoder and precision."""

    def __init__(self, kernels: Kernels, decoder, precision: str = "bf16", cross_gemm: bool = False):
        if precision not in PRECISIONS:
            raise ValueError(f"decoder precision must be one of {PRECISIONS}, got {precision!r}")
        self.k, self.precision = kernels, precision
        # per layer, the cross-attention's key and value weights stacked (2D, D) for the GEMM
        self.cross = [self._cross_weight(b.cross_attn) for b in decoder.blocks] if cross_gemm else None
        self.n_head = decoder.blocks[0].attn.n_head
        self._keep = []  # every array a pointer in a _Layer refers to
        self.packed: list[LayerWeights] = []  # the same per layer, by name (the prompt pass reads them)
        self.step_weights: list = []  # every weight the one-token step reads (int8: not self.packed's)
        self.layers = [self._layer(b) for b in decoder.blocks]
        self.embedding = _host(decoder.token_embedding.weight)
        self.positions = _host(decoder.positional_embedding)
        self.projection = self._weight(decoder.token_embedding.weight, step_only=True)
        self.step_weights.append(self.projection)
        self.ln = (self._vector(decoder.ln.weight), self._vector(decoder.ln.bias))
        self._fn = kernels.fn("decoder_layer")
        self._wtype = self.step_weights[0].wtype  # src/kernels.cpp linear(): the layers' weights' layout
        self.cache = GrowingCache(len(self.layers))
        # id(keys) -> (keys, values, their bf16 copies): the windows being decoded
        self._audio: OrderedDict[int, tuple] = OrderedDict()
        self._audio_lock = threading.Lock()
        self.prefill = None  # its multi-token pass (prefill.DecoderPass), made on first use

    def _cross_weight(self, attn) -> tuple[GemmWeight, np.ndarray]:
        w = np.concatenate([np.asarray(attn.key.weight, np.float32), np.asarray(attn.value.weight, np.float32)])
        bias = np.concatenate([np.zeros(attn.key.weight.shape[0], np.float32), np.asarray(attn.value.bias, np.float32)])
        return self.k.gemm_pack(w), bias

    def cross_keys_values(self, features: mx.array, threads: int = 1) -> list[tuple[mx.array, mx.array]]:
        """Per layer, the audio's keys transposed (B, H, Dh, S) and values (B, H, S, Dh) of
        features (B, S, D), as ``MultiHeadAttention.cross_keys_values`` gives them, on the bf16
        GEMM: one product of N = 2D per layer and window (MLX: two float32 sgemms)."""
        f = np.asarray(features.astype(mx.float32))
        b, s, d = f.shape
        h = self.n_head
        out = []
        for w, bias in self.cross:
            k_t, v = np.empty((b, h, d // h, s), np.float32), np.empty((b, h, s, d // h), np.float32)
            for i in range(b):
                y = self.k.gemm(np.ascontiguousarray(f[i]), w, bias, threads=threads)
                _transpose_into(k_t[i].reshape(d, s), y[:, :d])  # (H, Dh, S) is (D, S)
                v[i] = y[:, d:].reshape(s, h, d // h).transpose(1, 0, 2)
            out.append((mx.array(k_t), mx.array(v)))
        return out

    def _weight(self, w: mx.array, step_only: bool = False) -> Packed | GemmWeight | Int8Weight:
        """bf16: the GEMM's layout (bf16 pairs of k), which the prompt pass reads too; f32:
        ``Packed`` float32; int8, int8-projection: ``Int8Weight`` for what only the step reads
        (``step_only``), bf16 otherwise."""
        if self.precision in INT8 and step_only:
            packed = self.k.pack_int8(np.asarray(w, np.float32))
        elif self.precision in ("bf16", *INT8):
            packed = self.k.gemm_pack(np.asarray(w, np.float32))
        else:
            packed = self.k.pack(np.asarray(w), self.precision)
        self._keep.append(packed)
        return packed

    def _vector(self, v: mx.array) -> np.ndarray:
        a = np.ascontiguousarray(np.array(v, dtype=np.float32))
        self._keep.append(a)
        return a

    def _layer(self, block) -> _Layer:
        a, c = block.attn, block.cross_attn
        linears = (a.query, a.key, a.value, a.out, c.query, c.out, block.mlp1, block.mlp2)
        w = [self._weight(m.weight) for m in linears]
        b = [self._vector(m.bias) for m in (a.query, a.value, a.out, c.query, c.out, block.mlp1, block.mlp2)]
        n = [self._vector(p) for ln in (block.attn_ln, block.cross_attn_ln, block.mlp_ln) for p in (ln.weight, ln.bias)]
        self.packed.append(LayerWeights(*w, *b, *[tuple(n[i:i + 2]) for i in (0, 2, 4)]))
        if self.precision == "int8":  # the step's own int8 copies; the pass keeps the bf16 ones
            w = [self._weight(m.weight, step_only=True) for m in linears]
        self.step_weights += w
        return _Layer(*[x.data.ctypes.data for x in w] + [x.ctypes.data for x in b + n])

    def project(self, x: np.ndarray) -> np.ndarray:
        """The final layer norm, then the vocabulary projection: (B, D) -> logits (B, V)."""
        return self.k.linear(self.k.layer_norm(x, *self.ln), self.projection)

    def supports(self, tokens: mx.array, state, want_logits) -> bool:
        """One new token per row after a prompt, all logits, few enough rows. A first token
        (no cache) is a prompt pass (prefill.py: its logits float32, the no-speech probability
        is read there)."""
        return (tokens.ndim == 2 and tokens.shape[1] == 1 and 1 <= tokens.shape[0] <= MAX_ROWS
                and want_logits is True and state.self_kv[0] is not None)

    def _embed(self, tokens: np.ndarray, offset: int, pad: Optional[np.ndarray]) -> np.ndarray:
        """(B,) token ids -> (B, D) embeddings plus each row's position."""
        pos = offset if pad is None else offset - pad
        return np.ascontiguousarray(self.embedding[tokens] + self.positions[pos], dtype=np.float32)

    def step(self, tokens: mx.array, state, layers: Collection[int]):
        """tokens (B, 1) -> logits (B, 1, V) numpy, the new DecoderState, cross-attention
        weights per layer ((B, H, 1, S) MLX arrays for ``layers``, None for the others). The
        new state is of the given state's class (model/whisper.py's DecoderState: not imported
        here, so the model and the kernels do not import each other)."""
        extra = [state.pad, state.audio_len] if state.pad is not None else []
        mx.eval(tokens, *[c for pair in state.cross_kv for c in pair], *extra)
        ids = _host(tokens)[:, 0].astype(np.int64)
        rows = len(ids)
        pad = None if state.pad is None else np.ascontiguousarray(_host(state.pad), dtype=np.int32)
        audio_len = None if state.audio_len is None else np.ascontiguousarray(_host(state.audio_len), dtype=np.int32)
        x = self._embed(ids, state.offset, pad)
        d, h = x.shape[1], self.n_head
        new_kv, weights = [], []
        for i, (layer, (k_t, v), cache) in enumerate(zip(self.layers, state.cross_kv, state.self_kv)):
            cache = (None, None) if cache is None else cache
            k_new, v_new, w = self._layer_step(layer, x, cache, pad, k_t, v, audio_len, i in layers)
            shape = (rows, h, d // h)
            new_kv.append((self.cache.extend(cache[0], k_new.reshape(shape)),
                           self.cache.extend(cache[1], v_new.reshape(shape))))
            weights.append(None if w is None else mx.array(w[:, :, None, :]))
        logits = self.project(x)
        return logits[:, None, :], type(state)(state.cross_kv, new_kv, state.pad, state.audio_len), \
            (weights if layers else None)

    def _layer_step(self, layer: _Layer, x: np.ndarray, cache, pad, k_t: mx.array, v: mx.array,
                    audio_len, want_weights: bool):
        """One layer in place on x (B, D); returns the token's key and value (B, D) and the
        cross-attention weights (B, H, S) when wanted."""
        rows, d = x.shape
        kc, vc = self.cache.past(cache[0]), self.cache.past(cache[1])
        ckt, cv = self._audio_keys_values(k_t, v)
        span = cv.shape[2]
        k_new, v_new = np.empty((rows, d), np.float32), np.empty((rows, d), np.float32)
        w = np.empty((rows, self.n_head, span), np.float32) if want_weights else None
        # keys transposed (B, H, D/H, S) go as their (B, H, S, D/H) view: positions contiguous
        ckt_s = _strides(ckt.transpose(0, 1, 3, 2))
        kc_s, vc_s = (None, None) if kc is None else (_strides(kc), _strides(vc))
        cv_s = _strides(cv)
        p = lambda a: None if a is None else a.ctypes.data  # noqa: E731
        self._fn(ctypes.byref(layer), self._wtype, rows, d, self.n_head, p(x), p(kc), p(kc_s), p(vc), p(vc_s),
                 0 if kc is None else kc.shape[2], p(pad), p(k_new), p(v_new), p(ckt), p(ckt_s), p(cv), p(cv_s),
                 span, p(audio_len), p(w), int(ckt.dtype == np.uint16))
        return k_new, v_new, w

    def _audio_keys_values(self, k_t: mx.array, v: mx.array) -> tuple[np.ndarray, np.ndarray]:
        """A window's cross-attention keys (transposed) and values for the layer kernel: in
        bfloat16 bits, made once per window (the arrays are remembered by identity) unless
        $TRANSCRIBER_KERNEL_CROSS=mlx; float32 views then. Half the bytes a step reads."""
        if self.cross is None:
            return _unit_last(_host(k_t)), _unit_last(_host(v))
        with self._audio_lock:
            hit = self._audio.get(id(k_t))
            if hit is None or hit[0] is not k_t or hit[1] is not v:
                hit = (k_t, v, self._bf16(_host(k_t)), self._bf16(_host(v)))
                self._audio[id(k_t)] = hit
                while len(self._audio) > AUDIO_KEPT * len(self.layers):
                    self._audio.popitem(last=False)
            return hit[2], hit[3]

    def _bf16(self, a: np.ndarray) -> np.ndarray:
        """(B, ...) float32 -> bf16 bits; rows broadcast from one (beams over one window:
        row stride 0) are converted once and broadcast again."""
        if a.shape[0] > 1 and a.strides[0] == 0:
            return np.broadcast_to(self.k.to_bf16(a[:1]), a.shape)
        return self.k.to_bf16(a)


def _unit_last(a: np.ndarray) -> np.ndarray:
    """The kernels need a unit stride on the last axis (slices of MLX arrays keep it)."""
    return a if a.strides[-1] == a.itemsize and a.dtype == np.float32 else np.ascontiguousarray(a, np.float32)
