"""Each kernel against MLX's own op, once per process before it serves (and in the tests).

Inputs are small and awkward on purpose: widths that are no multiple of the 16 lanes, rows
1-8, masked positions and -inf scores. A kernel passes when it agrees with MLX to float32
rounding of the same arithmetic (bf16 weights are rounded the same way on both sides).
"""

from __future__ import annotations

import math
from typing import Callable

import mlx.core as mx
import numpy as np

from transcriber.native.kernels import INTEGER_LEVELS, Kernels, from_bf16

TOLERANCE = 2e-4  # relative to the output's scale: float32 sums in another order, exp to 3e-7


def _close(got: np.ndarray, want: mx.array) -> bool:
    want = np.array(want, dtype=np.float32)
    scale = max(float(np.abs(want).max()), 1e-6)
    return got.shape == want.shape and bool(np.all(np.abs(got - want) <= TOLERANCE * scale))


def _rng() -> np.random.Generator:
    return np.random.default_rng(21)


def check_linear(k: Kernels) -> bool:
    rng = _rng()
    for rows, width, out in ((1, 37, 29), (3, 64, 33), (5, 100, 17), (8, 48, 70), (4, 16, 1)):
        x = rng.standard_normal((rows, width), dtype=np.float32)
        w = rng.standard_normal((out, width), dtype=np.float32)
        b = rng.standard_normal(out, dtype=np.float32)
        res = rng.standard_normal((rows, out), dtype=np.float32)
        ref = mx.array(x) @ mx.array(w).astype(mx.bfloat16).astype(mx.float32).T + mx.array(b) + mx.array(res)
        if not (_close(k.linear(x, k.pack(w, "bf16"), b, res), ref)
                and _close(k.linear(x, k.gemm_pack(w), b, res), ref)  # bf16 pairs: the step's layout
                and _close(k.linear(x, k.pack(w, "f32")), mx.array(x) @ mx.array(w).T)
                and _close(k.dot_rows(x, w), mx.array(x) @ mx.array(w).T)):
            return False
        packed = from_bf16(k.pack(w, "bf16").data).transpose(0, 2, 1).reshape(-1, width)[:out]
        if not np.array_equal(packed, np.array(mx.array(w).astype(mx.bfloat16).astype(mx.float32))):
            return False  # our rounding to bf16 is MLX's
    return True


def _quantize(a: np.ndarray, levels: float) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a (R, K) float32 -> round-half-even(a x levels / max |a[r]|) and max |a[r]| / levels."""
    amax = np.abs(a).max(axis=1).astype(np.float32)
    inv = np.divide(np.float32(levels), amax, out=np.zeros_like(amax), where=amax > 0)
    return np.rint(a * inv[:, None]), (amax / np.float32(levels)).astype(np.float32)


def quantize_int8(w: np.ndarray, levels: int = 127) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A weight (N, K) as src/int8.cpp packs it (``levels`` 127; src/gemm.cpp's igemm_pack: any
    levels, int16): values (N, K) in [-levels, levels], column scales (N,) and channel scales t
    (K,) = max |w[:, k]|: w ~ values x column scale x t."""
    t = np.abs(w).max(axis=0).astype(np.float32)
    values, scale = _quantize(np.divide(w, t, out=np.zeros_like(w), where=t > 0), levels)
    return values.astype(np.int8 if levels <= 127 else np.int16), scale, t


def quantize_rows(x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows x (R, K) as src/int8.cpp quantises them for a weight of channel scales t: x t to
    int16 in [-8191, 8191] per row, and the rows' scales."""
    values, scale = _quantize(x * t, 8191)
    return values.astype(np.int16), scale


def int8_reference(x: np.ndarray, w: np.ndarray, levels: int = 127) -> mx.array:
    """MLX's float32 product of the quantised rows and weight, scaled: what ``linear`` gives
    for an int8 weight, and ``gemm`` for an integer one of ``levels`` (their int32 sums are
    exact, of whole chunks of k; MLX's float32 ones are within rounding)."""
    wq, ws, t = quantize_int8(w, levels)
    xq, xs = quantize_rows(x, t)
    sums = mx.array(xq.astype(np.float32)) @ mx.array(wq.astype(np.float32)).T
    return sums * mx.array(xs)[:, None] * mx.array(ws)[None, :]


def check_linear_int8(k: Kernels) -> bool:
    """int8 weights and int16 rows against MLX's float32 product of the same quantised values;
    the packed values are the reference's. Both the vpdpwssd route (where it serves) and the
    other (vpmaddwd, plain C); rows 1-8, odd widths, an outlier, a zero column and channel."""
    rng = _rng()
    for rows, width, out in ((1, 37, 29), (3, 64, 33), (4, 384, 70), (5, 100, 17), (8, 48, 70), (2, 1536, 40)):
        x = rng.standard_normal((rows, width), dtype=np.float32)
        x[0, 3] = 9.0  # an outlier: the row's scale follows it
        w = rng.standard_normal((out, width), dtype=np.float32)
        w[1], w[:, 2] = 0.0, 0.0  # a zero column and channel: scale 0
        w[:, 5] *= 30  # an outsize channel
        b = rng.standard_normal(out, dtype=np.float32)
        res = rng.standard_normal((rows, out), dtype=np.float32)
        ref = int8_reference(x, w)
        for vnni in ((True, False) if k.vnni else (False,)):
            packed = k.pack_int8(w, vnni)
            if not all(np.array_equal(a, b) for a, b in zip(packed.values(), quantize_int8(w))):
                return False
            if not (_close(k.linear(x, packed, b, res), ref + mx.array(b) + mx.array(res))
                    and _close(k.linear(x, packed), ref)):
                return False
    return True


def check_layer_norm(k: Kernels) -> bool:
    rng = _rng()
    for rows, width in ((1, 37), (4, 384), (7, 19)):
        x = rng.standard_normal((rows, width), dtype=np.float32) * 3 + 1
        g, b = rng.standard_normal(width, dtype=np.float32), rng.standard_normal(width, dtype=np.float32)
        ref = mx.fast.layer_norm(mx.array(x), mx.array(g), mx.array(b), 1e-5)
        if not _close(k.layer_norm(x, g, b), ref):
            return False
    return True


def check_gelu(k: Kernels) -> bool:
    x = (_rng().standard_normal(1003, dtype=np.float32) * 4).astype(np.float32)
    x[:3] = (-12.0, 0.0, 12.0)
    ref = mx.array(x) * 0.5 * (1 + mx.erf(mx.array(x) / math.sqrt(2)))
    return _close(k.gelu(x), ref)


def check_softmax(k: Kernels) -> bool:
    s = _rng().standard_normal((6, 77), dtype=np.float32) * 5
    s[1, :40] = -np.inf  # masked positions
    s[2, 5] = -np.inf
    ref = mx.softmax(mx.array(s), axis=-1, precise=True)
    got = k.softmax(s.copy())
    return _close(got, ref) and bool(np.all(got[1, :40] == 0)) and got[2, 5] == 0


def _attention(q, k, v, valid) -> mx.array:
    """MLX's reference: q (R, H, Dh), k/v (R, H, T, Dh), valid (R, T) bool -> (R, H, Dh)."""
    scale = q.shape[-1] ** -0.5
    scores = mx.where(mx.array(valid)[:, None, None, :], (mx.array(q)[:, :, None] * scale) @ mx.array(k).swapaxes(-1, -2),
                      -mx.inf)
    return (mx.softmax(scores, axis=-1, precise=True) @ mx.array(v))[:, :, 0]


def _bf16(a: np.ndarray) -> mx.array:
    return mx.array(a).astype(mx.bfloat16).astype(mx.float32)


def check_attend(k: Kernels) -> bool:
    rng = _rng()
    for rows, heads, dh, t in ((1, 2, 24, 35), (3, 3, 64, 100), (8, 1, 17, 5)):
        q = rng.standard_normal((rows, heads, dh), dtype=np.float32)
        keys = rng.standard_normal((rows, heads, t + 1, dh), dtype=np.float32)
        vals = rng.standard_normal((rows, heads, t + 1, dh), dtype=np.float32)
        lo = rng.integers(0, t // 2, rows).astype(np.int32)
        hi = (t + 1 - rng.integers(0, t // 2, rows)).astype(np.int32)
        valid = (np.arange(t + 1)[None] >= lo[:, None]) & (np.arange(t + 1)[None] < hi[:, None])
        ref = _attention(q, keys, vals, valid)
        extra = (np.ascontiguousarray(keys[:, :, t]), np.ascontiguousarray(vals[:, :, t]))
        got, w = k.attend(q, keys[:, :, :t], vals[:, :, :t], extra=extra, lo=lo, hi=hi, want_weights=True)
        k_t = np.ascontiguousarray(keys.transpose(0, 1, 3, 2))  # the cross-attention layout
        got_t, _ = k.attend(q, k_t.transpose(0, 1, 3, 2), vals, lo=lo, hi=hi)
        if not (_close(got, ref) and _close(got_t, ref) and bool(np.all(w[~valid[:, None, :].repeat(heads, 1)] == 0))):
            return False
        # keys and values in bf16 bits (the decoder's cross-attention), both layouts
        ref_bf = _attention(q, np.array(_bf16(keys)), np.array(_bf16(vals)), valid)
        kt16, v16 = k.to_bf16(k_t), k.to_bf16(vals)
        got_bf, _ = k.attend(q, kt16.transpose(0, 1, 3, 2), v16, lo=lo, hi=hi)
        got_bp, _ = k.attend(q, k.to_bf16(keys), v16, lo=lo, hi=hi)
        if not (_close(got_bf, ref_bf) and _close(got_bp, ref_bf)):
            return False
        if not _check_shared_rows(k, q, keys[:1], vals[:1], lo, hi):
            return False
    return True


def _check_shared_rows(k: Kernels, q, keys, vals, lo, hi) -> bool:
    """Rows that read one window's keys (transposed) and values, broadcast (row stride 0):
    beams over one window, in the kernel's groups of rows; float32 and bf16 bits."""
    rows, t = q.shape[0], keys.shape[2]
    valid = (np.arange(t)[None] >= lo[:, None]) & (np.arange(t)[None] < np.minimum(hi, t)[:, None])
    share = lambda a: np.broadcast_to(a, (rows, *a.shape[1:]))  # noqa: E731
    k_t = np.ascontiguousarray(keys.transpose(0, 1, 3, 2))
    for cast, ref_k, ref_v in ((lambda a: a, keys, vals), (k.to_bf16, np.array(_bf16(keys)), np.array(_bf16(vals)))):
        ref = _attention(q, share(ref_k), share(ref_v), valid)
        got, w = k.attend(q, share(cast(k_t)).transpose(0, 1, 3, 2), share(cast(vals)), lo=lo, hi=hi, want_weights=True)
        if not (_close(got, ref) and bool(np.all(w[~valid[:, None, :].repeat(q.shape[1], 1)] == 0))):
            return False
    return True


def check_encoder_attention(k: Kernels) -> bool:
    rng = _rng()
    for s, h, dh in ((37, 2, 16), (100, 3, 64), (7, 1, 32)):
        q = rng.standard_normal((s, h * dh), dtype=np.float32)
        keys = rng.standard_normal((h, s, dh), dtype=np.float32)
        vals = rng.standard_normal((h, s, dh), dtype=np.float32)
        qh = mx.array(q).reshape(s, h, dh).transpose(1, 0, 2)
        weights = mx.softmax((qh * dh ** -0.5) @ mx.array(keys).swapaxes(-1, -2), axis=-1, precise=True)
        ref = (weights @ mx.array(vals)).transpose(1, 0, 2).reshape(s, h * dh)
        got = k.encoder_attention(q, np.ascontiguousarray(keys.transpose(0, 2, 1)), vals)
        if got is None or not _close(got, ref):
            return False
    return True


def check_gemm(k: Kernels) -> bool:
    """Both inputs rounded to bf16 by MLX, float32 product; vdpbf16ps and the widening path;
    odd K and N, a fused GELU, an in-place residual, overlapping rows (a convolution)."""
    rng = _rng()
    bf = lambda a: mx.array(a).astype(mx.bfloat16).astype(mx.float32)  # noqa: E731
    for rows, width, out in ((1, 37, 29), (7, 64, 48), (13, 240, 70), (100, 19, 130)):
        x = rng.standard_normal((rows, width), dtype=np.float32)
        w = rng.standard_normal((out, width), dtype=np.float32)
        b = rng.standard_normal(out, dtype=np.float32)
        res = rng.standard_normal((rows, out), dtype=np.float32)
        pre = bf(x) @ bf(w).T + mx.array(b)
        ref_gelu = pre * 0.5 * (1 + mx.erf(pre / math.sqrt(2)))
        packed = k.gemm_pack(w)
        for dot in ((True, False) if k.dot else (False,)):
            y = res.copy()
            if not (_close(k.gemm(x, packed, b, gelu=True, dot=dot), ref_gelu)
                    and _close(k.gemm(x, packed, b, res=y, out=y, dot=dot), pre + mx.array(res))):
                return False
    x = rng.standard_normal((20, 6), dtype=np.float32)  # rows of 3 frames x 6, 2 frames apart
    w = rng.standard_normal((33, 18), dtype=np.float32)
    cols = np.stack([x[2 * t: 2 * t + 3].ravel() for t in range(9)])
    return _close(k.gemm(x, k.gemm_pack(w), rows=9, row_stride=12), bf(cols) @ bf(w).T)


def check_igemm(k: Kernels) -> bool:
    """Integer products (src/gemm.cpp's igemm) against MLX's float32 product of the same
    quantised rows and weight: odd K and N, K over one exact chunk of 128 (12-bit weights), a
    fused GELU, an in-place residual, overlapping rows (a convolution)."""
    rng = _rng()
    levels = INTEGER_LEVELS
    for rows, width, out in ((1, 37, 29), (7, 64, 48), (13, 301, 70), (100, 19, 130)):
        x = rng.standard_normal((rows, width), dtype=np.float32)
        w = rng.standard_normal((out, width), dtype=np.float32)
        b = rng.standard_normal(out, dtype=np.float32)
        y = rng.standard_normal((rows, out), dtype=np.float32)
        pre = int8_reference(x, w, levels) + mx.array(b)
        packed = k.igemm_pack(w, levels)
        want = pre + mx.array(y)
        if not (_close(k.gemm(x, packed, b, gelu=True), pre * 0.5 * (1 + mx.erf(pre / math.sqrt(2))))
                and _close(k.gemm(x, packed, b, res=y, out=y), want)):
            return False
    x = rng.standard_normal((20, 6), dtype=np.float32)  # rows of 3 frames x 6, 2 frames apart
    w = rng.standard_normal((33, 18), dtype=np.float32)
    cols = np.stack([x[2 * t: 2 * t + 3].ravel() for t in range(9)])
    return _close(k.gemm(x, k.igemm_pack(w, levels), rows=9, row_stride=12), int8_reference(cols, w, levels))


def check_attention_bf16(k: Kernels) -> bool:
    """Against MLX's attention over the bf16-rounded query and keys (the probabilities are
    rounded too: a looser bound, 2^-8 of the output's scale)."""
    rng = _rng()
    bf = lambda a: mx.array(a).astype(mx.bfloat16).astype(mx.float32)  # noqa: E731
    for s, h, dh in ((37, 2, 16), (100, 3, 64), (7, 1, 24)):
        qkv = rng.standard_normal((s, 3 * h * dh), dtype=np.float32)
        q, keys, vals = (bf(qkv[:, i * h * dh:(i + 1) * h * dh]).reshape(s, h, dh).transpose(1, 0, 2) for i in range(3))
        weights = mx.softmax((q * dh ** -0.5) @ keys.swapaxes(-1, -2), axis=-1, precise=True)
        ref = np.array((weights @ vals).transpose(1, 0, 2).reshape(s, h * dh))
        for dot in ((True, False) if k.dot else (False,)):
            got = k.attention_bf16(qkv, h, dot=dot)
            if got.shape != ref.shape or np.abs(got - ref).max() > np.abs(ref).max() / 256:
                return False
    return True


def _masked_attention(q: mx.array, keys: mx.array, vals: mx.array, causal: int):
    """MLX's reference: q (H, T, Dh) already scaled by Dh^-1/2, keys/values (H, N, Dh); causal
    as ``attention_packed`` -> out (T, H*Dh), weights (H, T, N)."""
    h, t, dh = q.shape
    scores = q @ keys.swapaxes(-1, -2)
    if causal >= 0:
        visible = mx.arange(keys.shape[1])[None, :] <= (causal + mx.arange(t))[:, None]
        scores = mx.where(visible, scores, -mx.inf)
    weights = mx.softmax(scores, axis=-1, precise=True)
    return np.array((weights @ vals).transpose(1, 0, 2).reshape(t, h * dh)), np.array(weights)


def check_attention_packed(k: Kernels) -> bool:
    """T query rows over N positions (T, N not multiples of 16 or of the 48-row blocks), causal
    after cached positions and unmasked, with the probabilities; against MLX's attention over
    the bf16-rounded query, keys and values (2^-8 of the output's scale: bf16 probabilities)."""
    rng = _rng()
    bf = lambda a: mx.array(a).astype(mx.bfloat16).astype(mx.float32)  # noqa: E731
    for t, n, h, dh, causal in ((5, 5, 2, 16, 0), (50, 57, 3, 24, 7), (3, 301, 2, 64, -1), (1, 19, 1, 17, -1)):
        q = rng.standard_normal((t, h * dh), dtype=np.float32)
        keys = rng.standard_normal((h, n, dh), dtype=np.float32)
        vals = rng.standard_normal((h, n, dh), dtype=np.float32)
        # the kernel rounds the scaled query to bf16, as here
        ref, ref_w = _masked_attention(bf(q * dh ** -0.5).reshape(t, h, dh).transpose(1, 0, 2), bf(keys), bf(vals), causal)
        kp, vp = k.pack_heads(keys, 1), k.pack_heads(np.ascontiguousarray(vals.transpose(0, 2, 1)).transpose(0, 2, 1), 2)
        for dot in ((True, False) if k.dot else (False,)):
            got, w = k.attention_packed(q, kp, vp, causal=causal, want_weights=True, dot=dot)
            if got.shape != ref.shape or np.abs(got - ref).max() > np.abs(ref).max() / 256:
                return False
            if np.abs(w - ref_w).max() > 2e-4 or bool(np.any(w[ref_w == 0] != 0)):
                return False  # masked positions exactly 0, the rest float32 softmax of bf16 scores
    return True


CHECKS: dict[str, Callable[[Kernels], bool]] = {
    "attention_bf16": check_attention_bf16, "attention_packed": check_attention_packed,
    "gemm": check_gemm, "igemm": check_igemm,
    "linear": check_linear, "linear_int8": check_linear_int8, "layer_norm": check_layer_norm, "gelu": check_gelu,
    "softmax": check_softmax, "attend": check_attend, "encoder_attention": check_encoder_attention,
}


def run(k: Kernels) -> dict[str, str | None]:
    """kind -> None (passed) or a one-line note why it is disabled."""
    results = {}
    with mx.stream(mx.cpu):
        for kind, check in CHECKS.items():
            try:
                results[kind] = None if check(k) else f"differs from MLX's op on the {k.path} path: disabled"
            except Exception as e:  # noqa: BLE001 - a failed check disables, never breaks
                results[kind] = f"self-check failed ({type(e).__name__}: {e}): disabled"
    return results
