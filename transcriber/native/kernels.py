"""The native kernels as Python calls over numpy float32 arrays (views of evaluated MLX arrays).

Shapes: R rows (<= 8 for the linear's fast path), K in, N out, D model width, H heads, T cached
positions, S audio positions. Weights are (N, K) as nn.Linear stores them, in bfloat16 (kept as
uint16, see ``to_bf16``) or float32. Outputs are written into arrays the caller passes or new
ones; nothing here touches MLX.
"""

from __future__ import annotations

import ctypes
import numpy as np

from transcriber.native import aligned

_f = ctypes.c_void_p  # every array goes as its data pointer
_i, _l, _fl = ctypes.c_int, ctypes.c_long, ctypes.c_float

# name -> argument types (see src/kernels.cpp)
_SIGNATURES = {
    "linear": [_i, _i, _i, _f, _f, _i, _f, _f, _f],
    "layer_norm": [_i, _i, _f, _f, _f, _fl, _f],
    "pack": [_i, _i, _f, _i, _f],
    "set_threads": [_i],
    "encoder_attention": [_i, _i, _i, _f, _f, _f, _f],
    "encoder_attention_threads": [_i, _i, _i, _f, _f, _f, _f, _i],
    "gelu": [_l, _f, _f],
    "softmax": [_l, _i, _f],
    "attend": [_i, _i, _i, _fl, _f, _f, _f, _f, _f, _i, _f, _f, _f, _f, _f, _f],
    "attend_bf16": [_i, _i, _i, _fl, _f, _f, _f, _f, _f, _i, _f, _f, _f, _f, _f, _f],
    "gemm": [_i, _i, _i, _f, _l, _f, _f, _f, _l, _i, _f, _l, _i, _i],
    "gemm_pack": [_i, _i, _f, _f],
    "gemm_has_dot": [],
    "attention_bf16": [_i, _i, _i, _f, _l, _f, _l, _i, _i],
    "gemm_pack_heads": [_i, _i, _i, _f, _l, _l, _l, _f, _i],
    "attention_packed": [_i, _i, _i, _f, _l, _f, _f, _i, _i, _f, _l, _f, _i, _i],
    "decoder_layer": [_f, _i, _i, _i, _i, _f, _f, _f, _f, _f, _i, _f, _f, _f, _f, _f, _f, _f, _i, _f, _f, _i],
    "to_bf16": [_l, _f, _f],
    "dot_rows": [_i, _i, _i, _f, _f, _f, _i],
    "pack_int8": [_i, _i, _f, _f],
    "int8_bytes": [_i, _i],
    "int8_has_vnni": [],
    "igemm_pack": [_i, _i, _f, _i, _f, _f, _f],
    "igemm": [_i, _i, _i, _f, _l, _f, _f, _f, _i, _f, _f, _l, _i, _f, _l, _i],
}


_RESULTS = {**{name: ctypes.c_int for name in (
    "encoder_attention", "encoder_attention_threads", "gemm", "gemm_has_dot", "attention_bf16", "attention_packed",
    "int8_has_vnni")}, "int8_bytes": ctypes.c_long}  # the rest return nothing


def from_bf16(h: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32."""
    return (h.astype(np.uint32) << 16).view(np.float32)


LANES = 16  # the kernels' vector width: weights are packed in blocks of this many columns


class Packed:
    """A linear's weight (N, K) packed once for the kernels (by the native ``pack``):
    (ceil(N/16), K, 16), column blocks zero-padded, in bfloat16 bits (uint16) or float32."""

    def __init__(self, kernels: "Kernels", w: np.ndarray, precision: str = "bf16"):
        if precision not in ("bf16", "f32"):
            raise ValueError(f"weight precision must be bf16 or f32, got {precision!r}")
        w = np.ascontiguousarray(w, dtype=np.float32)
        n, k = w.shape
        self.n, self.k, self.wtype = n, k, int(precision == "bf16")
        self.data = aligned.empty((-(-n // LANES), k, LANES), np.uint16 if self.wtype else np.float32)
        kernels.fn("pack")(n, k, _ptr(w), self.wtype, _ptr(self.data))


class GemmWeight:
    """A weight (N, K) for ``Kernels.gemm``, packed once (by the native ``gemm_pack``): bfloat16
    pairs of k in 32-bit words, (ceil(N/16), ceil(K/2), 16), column blocks zero-padded."""

    wtype = 2  # for ``linear``: its small-row path reads this layout too

    def __init__(self, kernels: "Kernels", w: np.ndarray):
        w = np.ascontiguousarray(w, dtype=np.float32)
        self.n, self.k = w.shape
        self.data = aligned.empty((-(-self.n // LANES), -(-self.k // 2), LANES), np.uint32)
        kernels.fn("gemm_pack")(self.n, self.k, _ptr(w), _ptr(self.data))


class Int8Weight:
    """A weight (N, K) in int8 for ``linear`` (src/int8.cpp, packed once by the native
    ``pack_int8``): per input channel a scale t[k] = max |w[:, k]| (folded into the rows at run
    time), per output column a scale s[n] = max |w[n] / t| / 127, the values rounded to
    [-127, 127], 4 k per column in blocks of 16 columns; then s and t. ``vnni``: the products
    on vpdpwssd (wtype 4) rather than vpmaddwd / plain C (3)."""

    def __init__(self, kernels: "Kernels", w: np.ndarray, vnni: bool):
        w = np.ascontiguousarray(w, dtype=np.float32)
        self.n, self.k = w.shape
        self.wtype = 4 if vnni else 3
        self.data = aligned.empty((int(kernels.fn("int8_bytes")(self.n, self.k)),), np.int8)
        kernels.fn("pack_int8")(self.n, self.k, _ptr(w), _ptr(self.data))

    def values(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The packed weight read back: (N, K) int8 values, (N,) column and (K,) channel scales."""
        blocks, q = -(-self.n // LANES), -(-self.k // 4)
        body = self.data[:blocks * q * LANES * 4].reshape(blocks, q, LANES, 4)
        w = body.transpose(0, 2, 1, 3).reshape(blocks * LANES, q * 4)[:self.n, :self.k]
        scales = self.data[blocks * q * LANES * 4:].view(np.float32)
        return w, scales[:self.n], scales[blocks * LANES: blocks * LANES + self.k]


# The integer GEMM's weight levels: 12 bits. Its int32 sums are exact over chunks of 128 k
# (128 x 8191 x 2047 < 2^31), added in float32; the chunks cost nothing measurable against 8-bit
# weights (one chunk for every encoder K), and on random products the error is a quarter of
# bf16's where 8-bit weights give three times it (docs/speed.md).
INTEGER_LEVELS = 2047


class IntGemmWeight:
    """A weight (N, K) for ``Kernels.gemm`` on integer products (src/gemm.cpp's igemm, packed
    once by the native ``igemm_pack``): per input channel a scale t[k] = max |w[:, k]| (folded
    into the rows at run time), per output column a scale s[n] = max |w[n] / t| / levels, the
    values rounded to [-levels, levels] as int16 pairs of k in 32-bit words, (ceil(N/16),
    ceil(K/2), 16), column blocks zero-padded."""

    def __init__(self, kernels: "Kernels", w: np.ndarray, levels: int = INTEGER_LEVELS):
        if not 1 <= levels <= 16383:
            raise ValueError(f"integer weight levels must be 1-16383, got {levels}")
        w = np.ascontiguousarray(w, dtype=np.float32)
        self.n, self.k = w.shape
        self.levels = int(levels)
        blocks, pairs = -(-self.n // LANES), -(-self.k // 2)
        self.data = aligned.empty((blocks, pairs, LANES), np.uint32)
        self.scale = np.empty(blocks * LANES, np.float32)
        self.channel = np.empty(2 * pairs, np.float32)
        kernels.fn("igemm_pack")(self.n, self.k, _ptr(w), self.levels, _ptr(self.data), _ptr(self.scale),
                                 _ptr(self.channel))


class HeadsPacked:
    """Per head, an operand packed for ``attention_packed``: data (H, ceil(N/16), ceil(K/2), 16)
    bf16 pairs of k in 32-bit words (``gemm_pack``'s layout); n, k its sizes."""

    def __init__(self, data: np.ndarray, n: int, k: int):
        self.data, self.n, self.k = data, n, k


def _ptr(a: np.ndarray | None):
    return None if a is None else a.ctypes.data


def _strides(a: np.ndarray) -> np.ndarray:
    """A 4-d array's strides in elements, as the kernels take them."""
    return np.array([s // a.itemsize for s in a.strides], dtype=np.int64)


def _check(a: np.ndarray, dtype=np.float32) -> np.ndarray:
    if a.dtype != dtype or not a.flags.c_contiguous:
        raise ValueError(f"kernel input must be C-contiguous {np.dtype(dtype).name}, got {a.dtype} {a.strides}")
    return a


class Kernels:
    """One path's functions of the library (``tk_<path>_<name>``)."""

    def set_threads(self, n: int) -> None:
        """Threads for the large linears and the attention heads (1: the caller's only)."""
        self.fn("set_threads")(max(1, int(n)))

    def pack(self, w: np.ndarray, precision: str = "bf16") -> Packed:
        """w (N, K) float32 packed for ``linear``."""
        return Packed(self, w, precision)

    def __init__(self, lib: ctypes.CDLL, path: str, cpu_bf16: bool = False, cpu_vnni: bool = False):
        self.lib, self.path = lib, path
        self._fns: dict[str, object] = {}
        # vdpbf16ps: built into this path and the CPU has AVX-512 BF16
        self.dot = bool(cpu_bf16 and self.fn("gemm_has_dot")())
        # vpdpwssd for the int8 linears: built into this path and the CPU has AVX-512 VNNI
        self.vnni = bool(cpu_vnni and self.fn("int8_has_vnni")())

    def pack_int8(self, w: np.ndarray, vnni: bool | None = None) -> Int8Weight:
        """w (N, K) float32 in int8 for ``linear`` (``vnni``: vpdpwssd, default where it serves)."""
        return Int8Weight(self, w, self.vnni if vnni is None else vnni)

    def fn(self, name: str):
        f = self._fns.get(name)
        if f is None:
            f = getattr(self.lib, f"tk_{self.path}_{name}")
            f.argtypes, f.restype = _SIGNATURES[name], _RESULTS.get(name)
            self._fns[name] = f
        return f

    def linear(self, x: np.ndarray, w: "Packed | GemmWeight | Int8Weight", b: np.ndarray | None = None,
               res: np.ndarray | None = None) -> np.ndarray:
        """x (R, K) @ w.T (w: the packed (N, K), any layout) + b (N,) + res (R, N) -> (R, N),
        x kept float32 (int8 weights: x's rows quantised to int16 per row, int32 sums)."""
        r, k = _check(x).shape
        if k != w.k:
            raise ValueError(f"linear: x has {k} columns, the weight {w.k}")
        y = np.empty((r, w.n), np.float32)
        b = None if b is None else _check(b)
        self.fn("linear")(r, k, w.n, _ptr(x), _ptr(w.data), w.wtype, _ptr(b),
                          _ptr(None if res is None else _check(res)), _ptr(y))
        return y

    def dot_rows(self, x: np.ndarray, w: np.ndarray, threads: int = 1) -> np.ndarray:
        """x (R, K) @ w.T for a float32 w (N, K) as stored (row-major, not packed) -> (R, N)
        float32: each weight row read once for all rows."""
        r, k = _check(x).shape
        if _check(w).shape[1] != k:
            raise ValueError(f"dot_rows: x has {k} columns, w {w.shape[1]}")
        y = np.empty((r, w.shape[0]), np.float32)
        self.fn("dot_rows")(r, k, w.shape[0], _ptr(x), _ptr(w), _ptr(y), max(1, int(threads)))
        return y

    def to_bf16(self, x: np.ndarray) -> np.ndarray:
        """x (any shape) float32 -> bfloat16 bits (uint16) of the same shape, C-contiguous,
        rounded to nearest even as MLX rounds."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        y = aligned.empty(x.shape, np.uint16)
        self.fn("to_bf16")(x.size, _ptr(x), _ptr(y))
        return y

    def gemm_pack(self, w: np.ndarray) -> GemmWeight:
        """w (N, K) float32 packed for ``gemm``."""
        return GemmWeight(self, w)

    def igemm_pack(self, w: np.ndarray, levels: int = INTEGER_LEVELS) -> IntGemmWeight:
        """w (N, K) float32 packed for ``gemm`` on integer products (weights in [-levels, levels])."""
        return IntGemmWeight(self, w, levels)

    def gemm(self, a: np.ndarray, w: GemmWeight | IntGemmWeight, bias: np.ndarray | None = None, *, gelu: bool = False,
             res: np.ndarray | None = None, rows: int | None = None, row_stride: int | None = None,
             out: np.ndarray | None = None, threads: int = 1, dot: bool | None = None) -> np.ndarray:
        """a (M, K) @ w.T + bias, then GELU, then + res (M, N) -> (M, N) float32, with both
        operands rounded to bfloat16 and float32 sums. ``rows``/``row_stride``: read a as M
        rows of K floats ``row_stride`` apart in a's buffer (overlapping rows: a convolution's
        im2col without the copy). ``out`` may be ``res``. ``dot``: vdpbf16ps (default: where
        it serves) or the widening path."""
        a = _check(a)
        m = a.shape[0] if rows is None else rows
        lda = a.shape[-1] if row_stride is None else row_stride
        if m > 0 and (m - 1) * lda + w.k > a.size:
            raise ValueError(f"gemm: {m} rows of {w.k} at stride {lda} overrun a of {a.size} floats")
        y = np.empty((m, w.n), np.float32) if out is None else _check(out)
        res = None if res is None else _check(res)
        if y.shape != (m, w.n) or (res is not None and res.shape != (m, w.n)):
            raise ValueError(f"gemm: output or residual is not ({m}, {w.n})")
        bias = None if bias is None else _check(bias)
        if isinstance(w, IntGemmWeight):
            self.fn("igemm")(m, w.n, w.k, _ptr(a), lda, _ptr(w.data), _ptr(w.scale), _ptr(w.channel), w.levels,
                             _ptr(bias), _ptr(res), w.n, int(gelu), _ptr(y), w.n, max(1, int(threads)))
            return y
        use_dot = self.dot if dot is None else dot
        self.fn("gemm")(m, w.n, w.k, _ptr(a), lda, _ptr(w.data), _ptr(bias),
                        _ptr(res), w.n, int(gelu), _ptr(y), w.n, int(use_dot), max(1, int(threads)))
        return y

    def attention_bf16(self, qkv: np.ndarray, heads: int, *, threads: int = 1,
                       dot: bool | None = None) -> np.ndarray:
        """Unmasked self-attention on the bf16 GEMM: qkv (S, 3D), the query, key and value
        side by side -> (S, D). Scores and probabilities are rounded to bf16 for the products,
        the softmax is float32."""
        s, d3 = _check(qkv).shape
        d = d3 // 3
        out = np.empty((s, d), np.float32)
        use_dot = self.dot if dot is None else dot
        self.fn("attention_bf16")(s, heads, d // heads, _ptr(qkv), d3, _ptr(out), d, int(use_dot), max(1, int(threads)))
        return out

    def pack_heads(self, a: np.ndarray, n_axis: int, threads: int = 1) -> "HeadsPacked":
        """Per head, a (H, X, Y) float32 array (any strides) packed as ``gemm_pack`` packs a
        weight (N, K): n_axis 1 takes X as N (keys (H, positions, Dh)), 2 takes Y (values
        (H, positions, Dh) as (Dh, positions)). For ``attention_packed``."""
        if a.dtype != np.float32 or a.ndim != 3 or n_axis not in (1, 2):
            raise ValueError(f"pack_heads: a (H, X, Y) float32 and n_axis 1 or 2, got {a.dtype} {a.shape}, {n_axis}")
        h, x, y = a.shape
        sh, sx, sy = (s // a.itemsize for s in a.strides)
        n, k, sn, sk = (x, y, sx, sy) if n_axis == 1 else (y, x, sy, sx)
        out = aligned.empty((h, -(-n // LANES), -(-k // 2), LANES), np.uint32)
        self.fn("gemm_pack_heads")(h, n, k, _ptr(a), sh, sn, sk, _ptr(out), max(1, int(threads)))
        return HeadsPacked(out, n, k)

    def attention_packed(self, q: np.ndarray, keys: "HeadsPacked", values: "HeadsPacked", *,
                         causal: int = -1, want_weights: bool = False, threads: int = 1,
                         dot: bool | None = None, q_cols: int | None = None):
        """T query rows over N positions per head on the bf16 GEMM: q (T, >= H*Dh) (its first
        ``q_cols`` = H*Dh columns: the query of a fused q/k/v product), keys packed from
        (H, N, Dh) with n_axis 1, values from (H, N, Dh) with n_axis 2 (``pack_heads``).
        causal >= 0: row t sees positions [0, causal + t] (after ``causal`` cached ones); -1:
        all. -> out (T, H*Dh), weights (H, T, N) float32 probabilities or None."""
        t, width = q.shape
        if q.dtype != np.float32 or q.strides[1] != 4:
            raise ValueError("attention_packed: q must be float32 with unit column stride")
        h, n, dh = keys.data.shape[0], keys.n, keys.k
        if values.n != dh or values.k != n or values.data.shape[0] != h or (q_cols or width) != h * dh:
            raise ValueError(f"attention_packed: keys {h}x{n}x{dh}, values {values.k}x{values.n}, q {q.shape} disagree")
        out = np.empty((t, h * dh), np.float32)
        weights = np.empty((h, t, n), np.float32) if want_weights else None
        use_dot = self.dot if dot is None else dot
        failed = self.fn("attention_packed")(t, h, dh, _ptr(q), q.strides[0] // 4, _ptr(keys.data), _ptr(values.data),
                                             n, int(causal), _ptr(out), h * dh, _ptr(weights), int(use_dot),
                                             max(1, int(threads)))
        if failed:
            raise ValueError(f"attention_packed: vdpbf16ps asked on the {self.path} path, which lacks it")
        return out, weights

    def layer_norm(self, x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
        """Over the last axis of x (R, D)."""
        r, d = _check(x).shape
        y = np.empty_like(x)
        self.fn("layer_norm")(r, d, _ptr(x), _ptr(_check(g)), _ptr(_check(b)), eps, _ptr(y))
        return y

    def gelu(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Exact-form GELU, elementwise (out may be x)."""
        y = np.empty_like(_check(x)) if out is None else _check(out)
        self.fn("gelu")(x.size, _ptr(x), _ptr(y))
        return y

    def softmax(self, s: np.ndarray) -> np.ndarray:
        """In place over the last axis of s (..., N); -inf scores get exactly 0."""
        n = _check(s).shape[-1]
        self.fn("softmax")(s.size // max(n, 1), n, _ptr(s))
        return s

    def encoder_attention(self, q: np.ndarray, k_t: np.ndarray, v: np.ndarray,
                          threads: int | None = None) -> np.ndarray | None:
        """Unmasked self-attention of S positions: q (S, H*Dh), k_t (H, Dh, S), v (H, S, Dh)
        -> (S, H*Dh); None when Dh is no multiple of the path's vector width. ``threads``:
        OpenMP threads over heads and row blocks (default: ``set_threads``'s)."""
        s, d = _check(q).shape
        h, dh, _ = _check(k_t).shape
        out = np.empty((s, d), np.float32)
        args = (s, h, dh, _ptr(q), _ptr(k_t), _ptr(_check(v)), _ptr(out))
        if threads is None:
            failed = self.fn("encoder_attention")(*args)
        else:
            failed = self.fn("encoder_attention_threads")(*args, max(1, int(threads)))
        return None if failed else out

    def attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, *, extra: tuple | None = None,
               lo: np.ndarray | None = None, hi: np.ndarray | None = None,
               want_weights: bool = False):
        """One query per row and head. q (R, H, Dh); k (R, H, T, Dh) or, transposed, (R, H, Dh, T)
        (pass ``k`` as that transposed array's (R, H, T, Dh) view: k.transpose(0, 1, 3, 2));
        v (R, H, T, Dh) with unit last stride; extra = (k, v) of one more position each (R, H, Dh);
        lo, hi (R,) int32: the positions each row sees. k and v both float32 or both bfloat16
        bits (uint16, ``to_bf16``). -> out (R, H, Dh), weights (R, H, T')."""
        r, h, dh = _check(q).shape
        t = k.shape[2]
        bits = k.dtype == np.uint16
        if k.dtype != v.dtype or k.dtype not in (np.float32, np.uint16):
            raise ValueError(f"attend: keys and values must be both float32 or both bf16 bits, got {k.dtype}, {v.dtype}")
        if v.strides[-1] != v.itemsize or (k.strides[-1] != k.itemsize and k.strides[-2] != k.itemsize):
            raise ValueError("attend: keys or values without a unit stride")
        total = t + (extra is not None)
        out = np.empty((r, h, dh), np.float32)
        weights = np.empty((r, h, total), np.float32) if want_weights else None
        ek, ev = (None, None) if extra is None else (_check(extra[0]), _check(extra[1]))
        lo = None if lo is None else _check(lo, np.int32)
        hi = None if hi is None else _check(hi, np.int32)
        ks, vs = _strides(k), _strides(v)  # kept alive across the call
        self.fn("attend_bf16" if bits else "attend")(r, h, dh, dh ** -0.5, _ptr(q), _ptr(k), _ptr(ks), _ptr(v), _ptr(vs), t,
                          _ptr(ek), _ptr(ev), _ptr(lo), _ptr(hi), _ptr(out), _ptr(weights))
        return out, weights
