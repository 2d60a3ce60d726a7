"""Whisper in MLX: an encoder, and a decoder that returns its cross-attention.

Parameter names follow the common MLX layout (mlx-examples' ``whisper``), so a folder of
``config.json`` + ``weights.safetensors`` in that layout loads directly.

A plain MLX module: it knows no backend. How it runs on this machine (MLX's ops, or the native
CPU kernels where they serve) is an inference's business (model/inference.py,
native/inference.py), which lends it host kernels (``fastmath.HostKernels``) for the few ops
done on evaluated arrays. Its sizes are dimensions.py's, the decoder's state between calls
state.py's.

Shapes: B batch, T tokens, S audio positions (1500 per 30 s window, 20 ms each), D model width,
H heads, V vocabulary.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Optional, Sequence, Union

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map, tree_unflatten

from transcriber.model.dimensions import ModelDimensions
from transcriber.model.fastmath import NO_KERNELS, HostKernels, fast_softmax, gelu, softmax
from transcriber.model.state import DecoderState, LayerCache

# Above this many rows (beams, samples) one sgemm reading the weights once beats a matvec per row.
MAX_MATVEC_ROWS = 2

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

    def attend_cross(self, q: mx.array, k_t: mx.array, v: mx.array, mask=None, want_weights: bool = False,
                     kernels: HostKernels = NO_KERNELS):
        """Attention over an audio window. q (B,T,D); k_t (B,H,D/H,S) and v (B,H,S,D/H) from
        ``cross_keys_values``; mask (B,1,1,S) or None: the positions each row may attend.
        Returns the output (B,T,D) and, when ``want_weights``, the weights (B,H,T,S) (computed
        exactly on the host, by ``kernels.softmax`` where lent: they time words), else None."""
        scale = (q.shape[-1] // self.n_head) ** -0.5
        scores = (self.split_heads(q) * scale) @ k_t
        if mask is not None:
            scores = mx.where(mask, scores, -mx.inf)
        # several query rows (a prompt pass): the host softmax, ~40x MLX's compiled exp over
        # (B, H, T, S) scores on the CPU; one row (an MLX step): lazily, no host round trip
        weights = softmax(scores, kernels.softmax) if want_weights or scores.shape[-2] > 1 else fast_softmax(scores)
        return self.out(self.merge_heads(weights @ v)), (weights if want_weights else None)

    def attend(self, q: mx.array, k: mx.array, v: mx.array, mask=None) -> mx.array:
        """Fused attention without weights. q (B,T,D); k, v (B,H,S,D/H) -> (B,T,D)."""
        scale = (q.shape[-1] // self.n_head) ** -0.5
        out = mx.fast.scaled_dot_product_attention(self.split_heads(q), k, v, scale=scale, mask=mask)
        return self.out(self.merge_heads(out))

    def attend_all(self, q: mx.array, k: mx.array, v: mx.array, kernels: HostKernels = NO_KERNELS) -> mx.array:
        """Unmasked attention without weights (the encoder). q (B,S,D); k, v (B,H,S,D/H) ->
        (B,S,D). On the CPU ``kernels.attention`` where lent (the native kernel: scores, softmax
        and values in L1-sized tiles, ~2x MLX's two batched sgemms and the softmax between),
        else ``attend_with_weights``."""
        kernel = kernels.attention if mx.default_device() == mx.cpu else None
        if kernel is None:
            return self.attend_with_weights(q, k, v, kernels)[0]
        mx.eval(q, k, v)
        qs, ks, vs = np.asarray(q), np.asarray(k), np.asarray(v)
        outs = [kernel(np.ascontiguousarray(qs[b], dtype=np.float32),
                       np.ascontiguousarray(ks[b].transpose(0, 2, 1), dtype=np.float32),
                       np.ascontiguousarray(vs[b], dtype=np.float32)) for b in range(qs.shape[0])]
        if any(o is None for o in outs):
            return self.attend_with_weights(q, k, v, kernels)[0]
        return self.out(mx.array(np.stack(outs)))

    def attend_with_weights(self, q: mx.array, k: mx.array, v: mx.array, kernels: HostKernels = NO_KERNELS):
        """Explicit attention. q (B,T,D); k, v (B,H,S,D/H) -> output (B,T,D) and the weights
        (B,H,T,S) after softmax: ``attend_cross`` over a transposed view of the keys."""
        return self.attend_cross(q, k.transpose(0, 1, 3, 2), v, want_weights=True, kernels=kernels)


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

    def encode(self, x: mx.array, kernels: HostKernels = NO_KERNELS) -> mx.array:
        """Encoder block: (B, S, D) -> (B, S, D)."""
        h = self.attn_ln(x)
        return self.mlp(x + self.attn.attend_all(self.attn.query(h), *self.attn.keys_values(h), kernels=kernels))

    def decode(self, x, cross_kv, cache: Optional[LayerCache], mask, want_weights: bool, cross_mask=None,
               kernels: HostKernels = NO_KERNELS):
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
        out, weights = self.cross_attn.attend_cross(q, *cross_kv, mask=cross_mask, want_weights=want_weights,
                                                    kernels=kernels)
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

    def __call__(self, mel: mx.array, kernels: HostKernels = NO_KERNELS) -> mx.array:
        """mel (B, 2*S, n_mels) -> audio features (B, S, D), on MLX's float32 ops (weights read
        again if they were dropped). S may be shorter than n_audio_ctx."""
        self.restore_weights()
        x = gelu(self.conv1(mel))
        x = gelu(self.conv2(x))
        x = x + self._positional_embedding[: x.shape[1]]
        for block in self.blocks:
            x = block.encode(x, kernels)
        return self.ln_post(x)


def weight_layers(want_weights: Union[bool, Collection[int]], n_layers: int) -> Collection[int]:
    """The decoder layers whose cross-attention a call wants (``TextDecoder.__call__``'s
    ``want_weights``: True for all, or the layers listed)."""
    return range(n_layers) if want_weights is True else (want_weights or ())


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
        """Precompute the cross-attention keys/values of one window's features (B, S, D)."""
        cross_kv = [b.cross_attn.cross_keys_values(audio_features) for b in self.blocks]
        return DecoderState(cross_kv, [None] * len(self.blocks))

    def __call__(self, tokens: mx.array, state: DecoderState,
                 want_weights: Union[bool, Collection[int]] = False,
                 want_logits: Union[bool, Sequence[int]] = True, kernels: HostKernels = NO_KERNELS):
        """tokens (B, T) -> logits (B, T, V), the new state, cross-attention per layer.

        Cross-attention is a list of (B, H, T, S) weights, one per layer, when ``want_weights``
        is True, or for the layers it lists (None for the others: they take the fused path);
        else None. ``want_logits``: True for every position, False for none (None returned), or
        the positions wanted, giving (B, len(positions), V): the vocabulary projection is the
        costliest part of a pass over many tokens (a 200-token prompt needs two positions).
        Nothing is mutated: the caller keeps or drops the returned state.
        """
        layers = weight_layers(want_weights, len(self.blocks))
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
            x, kv, w = block.decode(x, cross_kv, cache, mask, i in layers, cross_mask, kernels)
            new_kv.append(kv)
            weights.append(w)
        if want_logits is False:
            logits = None
        else:
            h = self.ln(x if want_logits is True else x[:, mx.array(list(want_logits))])
            logits = self.project(h, kernels.matvec)
        return logits, DecoderState(state.cross_kv, new_kv, state.pad, state.audio_len), (weights if layers else None)

    def project(self, h: mx.array, matvec: Optional[Callable] = None):
        """Logits (B, T, V) of final hidden states (B, T, D) in float32, for passes over several
        tokens (a one-token step's go through the native step, in bf16): an MLX array, or on the
        CPU for a row or two (a prompt's two positions) a numpy array from ``matvec`` where lent
        (``HostKernels.matvec``: the sgemv of the BLAS serving MLX). Kept float32 on purpose: the no-speech probability
        is read here, and bf16 weights tipped it on music (tests/engines/test_streaming.py's Brahms
        recording then streamed 55 words)."""
        b, t, d = h.shape
        matvec = matvec if b * t <= MAX_MATVEC_ROWS and mx.default_device() == mx.cpu else None
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
