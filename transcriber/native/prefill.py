"""The decoder over several tokens at once (a prompt pass, a word-timing pass) on the bf16 GEMM.

A streaming pass runs ``<|startofprev|>`` + context + SOT + prefix (up to ~224 tokens) through
the decoder; on MLX's float32 ops that was ~77% of streaming's time. Here every linear of a
layer is one bf16 GEMM over all T rows (query, key and value fused; GELU and the residuals in
the epilogues), the causal self-attention and the cross-attention over the window are the
packed-operand attention kernel (scores, masked float32 softmax, values), and the layer norms
the native ones. What it hands back is what MLX's pass hands back: logits at the positions
asked for (the final norm native, the vocabulary projection kept float32: the no-speech
probability is read there), the state whose self-attention cache the native steps extend in
place, and the float32 cross-attention probabilities of the layers asked for.

Before it serves a decoder, its first pass is compared with MLX's float32 pass on the same
input (``check``); a mismatch disables it with a note, and MLX's result is used.

Shapes: T new tokens, T0 cached, N = T0 + T, D width, H heads, Dh = D/H, S audio positions.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Collection, Optional, Sequence, Union

import mlx.core as mx
import numpy as np

from transcriber.native.decoder import LayerWeights
from transcriber.native.kernels import HeadsPacked, Kernels

# A first pass agrees with MLX's float32 pass when the relative RMS difference of its logits
# (each row's mean taken off both: a softmax does not see it) and of its kept keys stays under
# this (bf16 operands: ~0.5-1.5% measured on tiny.en and base), and its cross-attention
# probabilities differ by less than CHECK_WEIGHTS (absolute).
CHECK_RMS = 0.05
CHECK_WEIGHTS = 0.05
DOT_ROWS = 8  # logits of up to this many rows on the kernels' float32 dot_rows
log = logging.getLogger(__name__)


class DecoderPass:
    """``run(tokens, state, layers, want_logits)`` for a TextDecoder at batch 1, next to its
    DecoderStep (bf16 weights): its packed weights, and its cache, where the returned state's
    keys and values live."""

    def __init__(self, kernels: Kernels, decoder, step, threads: Callable[[], int]):
        self.k, self.step, self.decoder, self.threads = kernels, step, decoder, threads
        self.n_head = decoder.blocks[0].attn.n_head
        self.layers = step.packed  # the step's bf16 weights, in the GEMM's layout: no second copy
        self.checked: Optional[bool] = None  # None: the first pass is still to be compared
        self.note: Optional[str] = None
        self._audio: Optional[tuple] = None  # (k_t, v, their packed heads per layer): one window
        self._lock = threading.Lock()

    def supports(self, tokens: mx.array, state) -> bool:
        """Tokens of one row (one: a first window's <|startoftranscript|> alone, no cache yet), no
        batch padding, and the check not failed."""
        return (self.checked is not False and tokens.ndim == 2 and tokens.shape[0] == 1 and tokens.shape[1] >= 1
                and state.pad is None and state.audio_len is None and state.cross_kv[0][1].shape[0] == 1)

    def __call__(self, tokens: mx.array, state, layers: Collection[int],
                 want_logits: Union[bool, Sequence[int]], reference: Callable[[], tuple]):
        """The pass (as TextDecoder.__call__ returns it); ``reference()`` gives MLX's float32
        pass, run once to check the first one."""
        got = self.run(tokens, state, layers, want_logits)
        if self.checked is None:
            want = reference()
            with self._lock:
                self.note = _compare(got, want, layers)
                self.checked = self.note is None
            if self.note is not None:
                log.warning("transcriber: native prompt pass: %s: disabled, MLX's float32 pass serves", self.note)
                return want
        return got

    def run(self, tokens: mx.array, state, layers: Collection[int], want_logits: Union[bool, Sequence[int]]):
        """tokens (1, T) -> logits (1, T', V) (or None), the new state, cross-attention (1, H, T, S)
        MLX arrays for ``layers`` (None for the others; None for all when none is wanted)."""
        mx.eval(tokens, *[a for pair in state.cross_kv for a in pair],
                *[a for c in state.self_kv if c is not None for a in c])
        ids = np.asarray(tokens)[0].astype(np.int64)
        t0 = state.offset
        x = np.ascontiguousarray(self.step.embedding[ids] + self.step.positions[t0: t0 + len(ids)], dtype=np.float32)
        threads = self.threads()
        audio = self._audio_packed(state.cross_kv, threads)
        new_kv, weights = [], []
        for i, (layer, cache, cross) in enumerate(zip(self.layers, state.self_kv, audio)):
            keys, values, w = self._layer_pass(layer, x, cache, cross, i in layers, threads)
            new_kv.append((self.step.cache.start(keys), self.step.cache.start(values)))
            weights.append(None if w is None else mx.array(w[None]))
        logits = self._logits(x, want_logits, threads)
        return logits, type(state)(state.cross_kv, new_kv), (weights if layers else None)

    def _layer_pass(self, L: LayerWeights, x: np.ndarray, cache, cross: tuple[HeadsPacked, HeadsPacked],
                    want_weights: bool, threads: int):
        """One layer in place on x (T, D); returns its keys and values (1, H, N, Dh) for the
        cache and, when wanted, the cross-attention probabilities (H, T, S)."""
        k, (t, d), h = self.k, x.shape, self.n_head
        gemm = lambda a, w, b=None, **kw: k.gemm(a, w, b, threads=threads, **kw)  # noqa: E731
        ln = k.layer_norm(x, *L.ln1)
        heads = lambda a: a.reshape(t, h, d // h).transpose(1, 0, 2)  # noqa: E731 - (T, D) -> (H, T, Dh)
        q, keys, values = gemm(ln, L.query, L.query_bias), heads(gemm(ln, L.key)), heads(gemm(ln, L.value, L.value_bias))
        t0 = 0 if cache is None else cache[0].shape[2]
        if t0:
            keys = np.concatenate([np.asarray(cache[0])[0], keys], axis=1)
            values = np.concatenate([np.asarray(cache[1])[0], values], axis=1)
        keys, values = np.ascontiguousarray(keys), np.ascontiguousarray(values)
        o, _ = k.attention_packed(q, k.pack_heads(keys, 1, threads), k.pack_heads(values, 2, threads),
                                  causal=t0, threads=threads)
        gemm(o, L.out, L.out_bias, res=x, out=x)
        q = gemm(k.layer_norm(x, *L.ln2), L.cross_query, L.cross_query_bias)
        o, w = k.attention_packed(q, *cross, want_weights=want_weights, threads=threads)
        gemm(o, L.cross_out, L.cross_out_bias, res=x, out=x)
        m = gemm(k.layer_norm(x, *L.ln3), L.mlp1, L.mlp1_bias, gelu=True)
        gemm(m, L.mlp2, L.mlp2_bias, res=x, out=x)
        return keys[None], values[None], w

    def _audio_packed(self, cross_kv, threads: int) -> list[tuple[HeadsPacked, HeadsPacked]]:
        """Per layer, the window's keys (from (1, H, Dh, S) transposed) and values (1, H, S, Dh)
        packed per head: once per window (remembered by identity, one window)."""
        with self._lock:
            hit = self._audio
            if hit is not None and len(hit[0]) == len(cross_kv) and all(
                    a is kt and b is v for a, b, (kt, v) in zip(hit[0], hit[1], cross_kv)):
                return hit[2]
        packed = []
        for k_t, v in cross_kv:
            kt = np.asarray(k_t)[0]  # (H, Dh, S): keys as (H, S, Dh) is its transposed view
            packed.append((self.k.pack_heads(kt.transpose(0, 2, 1), 1, threads),
                           self.k.pack_heads(np.asarray(v)[0], 2, threads)))
        with self._lock:
            self._audio = ([kt for kt, _ in cross_kv], [v for _, v in cross_kv], packed)
        return packed

    def _logits(self, x: np.ndarray, want_logits, threads: int):
        """The final norm on the kernels, then the float32 vocabulary projection: for a few
        rows (a prompt's two) on ``dot_rows``, reading the float32 embedding once for them
        (BLAS's sgemv read it once a row: 20 ms each at load 8, more than the pass's layers);
        for many, the decoder's own (MLX)."""
        if want_logits is False:
            return None
        rows = x if want_logits is True else x[np.asarray(list(want_logits), dtype=np.int64)]
        h = self.k.layer_norm(np.ascontiguousarray(rows), *self.step.ln)
        w = self.step.embedding
        if len(h) > DOT_ROWS or w.dtype != np.float32 or not w.flags.c_contiguous:
            return self.decoder.project(mx.array(h[None]))
        return self.k.dot_rows(h, self.step.embedding, threads)[None]


def _relative_rms(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.sqrt(np.mean((got - want) ** 2)) / max(np.sqrt(np.mean(want ** 2)), 1e-12))


def _logits_rms(got, want) -> float:
    """``_relative_rms`` of logits with each row's mean taken off: the same probabilities. (The
    first window of a Harvard-sentences reading gave tiny.en logits of RMS 1.4, the native ones
    0.08 above MLX's all along: 6-7% as they were, 0.5% centred, the top tokens' probabilities
    within 0.002.)"""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return _relative_rms(got - got.mean(axis=-1, keepdims=True), want - want.mean(axis=-1, keepdims=True))


def _compare(got: tuple, want: tuple, layers: Collection[int]) -> Optional[str]:
    """None when the native pass agrees with MLX's, else what differs."""
    (logits, state, weights), (ref_logits, ref_state, ref_weights) = got, want
    if (logits is None) != (ref_logits is None) or (weights is None) != (ref_weights is None):
        return "its results differ in kind from MLX's"
    if logits is not None and (e := _logits_rms(logits, ref_logits)) > CHECK_RMS:
        return f"logits differ from MLX's float32 pass by {e:.1%} RMS"
    for i, (mine, ref) in enumerate(zip(state.self_kv, ref_state.self_kv)):
        if mine[0].shape != ref[0].shape:
            return f"layer {i}'s cache is {mine[0].shape}, MLX's {ref[0].shape}"
        if (e := max(_relative_rms(mine[0], ref[0]), _relative_rms(mine[1], ref[1]))) > CHECK_RMS:
            return f"layer {i}'s keys or values differ from MLX's by {e:.1%} RMS"
    for i in layers:
        e = float(np.abs(np.asarray(weights[i]) - np.asarray(ref_weights[i])).max())
        if e > CHECK_WEIGHTS:
            return f"layer {i}'s cross-attention weights differ from MLX's by {e:.3f}"
    return None
