"""The bound library's other services: its sgemv for the host matvec, its thread count, and
numpy's own OpenBLAS held to one thread.

Each takes the ``Library`` that ``apply`` bound (None or the bundled one: there is nothing to
ask) and looks its symbols up in the handle ``slot.bind`` keeps loaded.
"""

from __future__ import annotations

import ctypes
import glob
import logging
import os
from typing import TYPE_CHECKING, Callable

from transcriber import settings
from transcriber.native.blas import slot
from transcriber.native.blas.libraries import Library

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

THREADS_ENV = "TRANSCRIBER_BLAS_THREADS"

# numpy's own OpenBLAS (the wheel's copy in numpy.libs; symbols suffixed for 64-bit ints)
NUMPY_BLAS = ("libscipy_openblas*.so*", "libopenblas*.so*")
_NUMPY_SET_THREADS = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads")

_gemv: tuple[str | None, Callable | None] = (None, None)  # (library path, its checked matvec)


# -- threads -----------------------------------------------------------------------------------------

def set_library_threads(lib: Library | None, n: int | None) -> None:
    """Tell ``lib`` to use ``n`` threads, where it can be told (n None or 0: leave it)."""
    if n and lib is not None and lib.set_threads and hasattr(slot.handles.get(lib.path), lib.set_threads):
        fn = getattr(slot.handles[lib.path], lib.set_threads)
        fn.argtypes = [ctypes.c_int]
        fn(n)


def library_threads(lib: Library | None) -> int | None:
    """The thread count of ``lib``, as the library reports it (None: it cannot say)."""
    if lib is None or not lib.get_threads or not hasattr(slot.handles.get(lib.path), lib.get_threads):
        return None
    return int(getattr(slot.handles[lib.path], lib.get_threads)())


def threads_override() -> int | None:
    """$TRANSCRIBER_BLAS_THREADS (1 to the cores), or None when unset (SettingError if bad)."""
    return settings.get(THREADS_ENV)


def numpy_one_thread() -> bool:
    """Run numpy's own OpenBLAS on one thread (True when it was found and told). Its products
    here are small (the streaming log-mel's (100, 201) x (201, 80) per second of audio), and
    its threads fought the BLAS serving MLX for the two cores: that product took ~8-16 ms
    instead of ~0.1 ms on one thread. No threadpoolctl: the library numpy loaded is opened
    again (the same handle) and told through its own setter."""
    import numpy as np

    folder = os.path.dirname(os.path.dirname(np.__file__))
    for pattern in NUMPY_BLAS:
        for path in glob.glob(os.path.join(folder, "numpy.libs", pattern)):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            setter = next((getattr(lib, n) for n in _NUMPY_SET_THREADS if hasattr(lib, n)), None)
            if setter is not None:
                setter.argtypes = [ctypes.c_int]
                setter(1)
                return True
    return False


# -- the host matvec ---------------------------------------------------------------------------------

def host_matvec(lib: Library | None) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None:
    """``f(a, x, out)``: ``out = a @ x`` for a C-contiguous float32 matrix (M, K) and vectors
    (K,), (M,), by the sgemv of ``lib``, the library serving MLX's sgemm; None when MLX is on its
    own BLAS.

    Why: MLX runs a (1, K) x (K, M) product as an sgemm, which packs the whole (K, M) operand
    first. For the decoder's vocabulary projection (384 x 51864, 80 MB, once per token) that is
    twice the memory traffic of a matrix-vector product: measured on a 2-core Xeon, a tiny.en
    decode step took 11.0 ms with MLX's product and 9.2 ms with this one. The same library (so
    the same thread pool: two OpenBLAS pools spin against each other on 2 cores) and a check
    against numpy on first use; any problem gives None, and MLX does the product. Not the
    native kernels' small-row linear: on float32 weights it was 3-7x faster at 1-2 rows
    (bench/kernels/project_matvec.py), but it reads a packed copy of the weight, 76 MiB more for
    tiny.en, for a product a prompt pass makes once."""
    global _gemv
    path = lib.path if lib is not None else None
    if path is None or path not in slot.handles:
        return None
    if _gemv[0] != path:
        _gemv = (path, _checked(_sgemv(slot.handles[path], lib.sgemm.replace("sgemm", "sgemv")), path))
    return _gemv[1]


def _sgemv(handle: ctypes.CDLL, symbol: str) -> Callable | None:
    """The library's row-major, untransposed cblas sgemv as ``f(a, x, out)``, or None."""
    import numpy as np

    try:
        fn = getattr(handle, symbol)
    except AttributeError:
        return None
    fn.restype = None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_void_p,
                   ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    row_major, no_trans = 101, 111  # CblasRowMajor, CblasNoTrans

    def matvec(a: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
        assert a.dtype == x.dtype == out.dtype == np.float32 and a.flags.c_contiguous
        assert x.flags.c_contiguous and out.flags.c_contiguous and out.shape == a.shape[:1] == (len(out),)
        m, k = a.shape
        fn(row_major, no_trans, m, k, 1.0, a.ctypes.data, k, x.ctypes.data, 1, 0.0, out.ctypes.data, 1)

    return matvec


def _checked(matvec: Callable | None, path: str) -> Callable | None:
    """``matvec`` if it agrees with numpy in float64 on a small odd-sized product, else None."""
    import numpy as np

    if matvec is None:
        return None
    rng = np.random.default_rng(11)
    a, x = rng.standard_normal((97, 45), dtype=np.float32), rng.standard_normal(45, dtype=np.float32)
    out = np.empty(97, np.float32)
    matvec(a, x, out)
    if not np.allclose(out, a.astype(np.float64) @ x, rtol=1e-4, atol=1e-4):
        log.warning("transcriber: BLAS: %s: sgemv gave a wrong result: not used", path)
        return None
    return matvec
