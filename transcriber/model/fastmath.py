"""The CPU-minded arithmetic of the model: GELU and softmax in forms MLX's CPU backend runs fast,
and the host kernels an inference may lend the model (``HostKernels``).

Plain MLX and numpy: nothing here chooses a backend. An inference (model/inference.py, and
native/inference.py on CPUs where the kernels serve) passes ``HostKernels`` down the model's
calls; the default (``NO_KERNELS``) leaves every op to MLX and numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import mlx.core as mx
import numpy as np


@dataclass(frozen=True)
class HostKernels:
    """Functions over evaluated float32 numpy arrays that serve parts of the model on the CPU;
    None: MLX's (and numpy's) own ops.

    softmax: ``f(w)``, softmax over the last axis of a C-contiguous array, in place.
    attention: ``f(q (H, S, D/H), k_t (H, D/H, S), v (H, S, D/H)) -> (S, D)`` or None (refused):
    unmasked attention, the encoder's.
    matvec: ``f(a, x, out)``, ``out = a @ x`` for float32 (M, K) @ (K,) (the sgemv of the BLAS
    bound into MLX, ``blas.host_matvec``): the vocabulary projection of a row or two.
    """

    softmax: Optional[Callable[[np.ndarray], None]] = None
    attention: Optional[Callable] = None
    matvec: Optional[Callable] = None


NO_KERNELS = HostKernels()


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


def softmax(scores: mx.array, kernel: Optional[Callable[[np.ndarray], None]] = None) -> mx.array:
    """Softmax over the last axis of attention scores (..., T, S).

    MLX's CPU backend computes exp one element at a time, which made the encoder's softmax over
    6 x 1500 x 1500 scores half of its time. On the CPU, numpy's vectorised exp (~7x faster)
    does it in place on a zero-copy view of the evaluated scores: that array is a fresh
    intermediate that nothing else references, so no one can observe the write, and no copy
    crosses between the two libraries. Elsewhere (Metal) MLX's own softmax is used.
    ``kernel``: ``f(w)``, the same in place in one vectorised pass (the native library's,
    ``HostKernels.softmax``), used where the scores are contiguous.
    """
    if mx.default_device() != mx.cpu:
        return mx.softmax(scores, axis=-1, precise=True)
    scores = scores.astype(mx.float32)
    mx.eval(scores)
    w = np.asarray(scores)
    if kernel is not None and w.flags.c_contiguous:  # one vectorised pass (AVX-512: ~3x numpy's three)
        kernel(w)
        return scores
    w -= w.max(axis=-1, keepdims=True)
    np.exp(w, out=w)
    w /= w.sum(axis=-1, keepdims=True)
    return scores
