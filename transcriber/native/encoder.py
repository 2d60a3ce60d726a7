"""The audio encoder on the native kernels: a window's convolutions and blocks in few calls.

Every product of the encoder (the two convolutions as im2col products, the attention's
query/key/value and output linears, the MLP) runs through the bf16 GEMM (src/gemm.cpp:
vdpbf16ps where the CPU has AVX-512 BF16), with bias, GELU and residual fused; layer norms and
the self-attention (scores, softmax, values in float32) are the existing kernels. Weights are
packed once per model; the MLX model keeps its float32 weights (prompt passes, other devices).
``integer``: the linears and convolutions on integer products instead (12-bit weights, 14-bit
rows, vpmaddwd on AVX2: src/gemm.cpp's igemm), the attention's products still bf16.

Shapes: B windows, S audio positions (2S mel frames in), D width, H heads, C mel bins.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from transcriber.native.kernels import GemmWeight, IntGemmWeight, Kernels


def _host(a: mx.array) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a.astype(mx.float32)), dtype=np.float32)


@dataclass(frozen=True)
class _Block:
    """One encoder block's packed weights and float32 vectors."""

    ln1: tuple[np.ndarray, np.ndarray]
    qkv: GemmWeight | IntGemmWeight  # (3D, D): query, key, value stacked
    qkv_bias: np.ndarray  # (3D,): the key has none
    out: GemmWeight | IntGemmWeight
    out_bias: np.ndarray
    ln2: tuple[np.ndarray, np.ndarray]
    mlp1: GemmWeight | IntGemmWeight
    mlp1_bias: np.ndarray
    mlp2: GemmWeight | IntGemmWeight
    mlp2_bias: np.ndarray


class NativeEncoder:
    """``encoder(mel)`` for an AudioEncoder: mel (B, 2S, C) -> features (B, S, D) as MLX arrays."""

    def __init__(self, kernels: Kernels, encoder, threads: int = 1, integer: bool = False):
        self.k, self.threads, self.integer = kernels, max(1, int(threads)), integer
        self.n_head = encoder.blocks[0].attn.n_head
        self.conv1, self.conv1_bias = self._conv(encoder.conv1)
        self.conv2, self.conv2_bias = self._conv(encoder.conv2)
        self.positions = _host(encoder._positional_embedding)
        self.blocks = [self._block(b) for b in encoder.blocks]
        self.ln_post = (_host(encoder.ln_post.weight), _host(encoder.ln_post.bias))

    def _pack(self, w: np.ndarray) -> GemmWeight | IntGemmWeight:
        return self.k.igemm_pack(w) if self.integer else self.k.gemm_pack(w)

    def _conv(self, conv) -> tuple[GemmWeight | IntGemmWeight, np.ndarray]:
        """MLX's Conv1d weight (C_out, 3, C_in) is already an im2col row per output channel."""
        w = _host(conv.weight)
        return self._pack(w.reshape(w.shape[0], -1)), _host(conv.bias)

    def _block(self, b) -> _Block:
        a = b.attn
        qkv = np.concatenate([_host(a.query.weight), _host(a.key.weight), _host(a.value.weight)])
        zeros = np.zeros(a.key.weight.shape[0], np.float32)
        return _Block((_host(b.attn_ln.weight), _host(b.attn_ln.bias)),
                      self._pack(qkv), np.concatenate([_host(a.query.bias), zeros, _host(a.value.bias)]),
                      self._pack(_host(a.out.weight)), _host(a.out.bias),
                      (_host(b.mlp_ln.weight), _host(b.mlp_ln.bias)),
                      self._pack(_host(b.mlp1.weight)), _host(b.mlp1.bias),
                      self._pack(_host(b.mlp2.weight)), _host(b.mlp2.bias))

    def __call__(self, mel: mx.array) -> mx.array:
        """mel (B, 2S, C) -> (B, S, D); S may be shorter than the model's audio context."""
        mel = np.asarray(mel.astype(mx.float32))
        return mx.array(np.stack([self.window(m) for m in mel]))

    def convolve(self, mel: np.ndarray) -> np.ndarray:
        """mel (2S, C) -> (S, D): conv1 (stride 1), GELU, conv2 (stride 2), GELU, + positions.
        A kernel-3 convolution over the zero-padded input is a GEMM whose row t is the 3 x C
        floats from frame t x stride: rows at a stride of stride x C, overlapping."""
        frames, c = mel.shape
        padded = np.zeros((frames + 2, c), np.float32)
        padded[1:-1] = mel
        h = np.zeros((frames + 2, self.conv1.n), np.float32)
        self.k.gemm(padded, self.conv1, self.conv1_bias, gelu=True, rows=frames, row_stride=c,
                    out=h[1:-1], threads=self.threads)
        positions = (frames + 1) // 2
        x = self.k.gemm(h, self.conv2, self.conv2_bias, gelu=True, rows=positions, row_stride=2 * h.shape[1],
                        threads=self.threads)
        x += self.positions[:positions]
        return x

    def window(self, mel: np.ndarray) -> np.ndarray:
        """One window: mel (2S, C) -> features (S, D)."""
        x = self.convolve(np.ascontiguousarray(mel, dtype=np.float32))
        for block in self.blocks:
            x = self.block(block, x)
        return self.k.layer_norm(x, *self.ln_post)

    def block(self, b: _Block, x: np.ndarray) -> np.ndarray:
        """x (S, D) -> (S, D): x + attention(ln(x)), then + mlp(ln(.)), residuals in place."""
        qkv = self.k.gemm(self.k.layer_norm(x, *b.ln1), b.qkv, b.qkv_bias, threads=self.threads)
        o = self.k.attention_bf16(qkv, self.n_head, threads=self.threads)
        self.k.gemm(o, b.out, b.out_bias, res=x, out=x, threads=self.threads)
        m = self.k.gemm(self.k.layer_norm(x, *b.ln2), b.mlp1, b.mlp1_bias, gelu=True, threads=self.threads)
        self.k.gemm(m, b.mlp2, b.mlp2_bias, res=x, out=x, threads=self.threads)
        return x
