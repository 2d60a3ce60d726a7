"""Load an optimized BLAS into the process before MLX, when one is installed.

MLX's Linux CPU wheel links a bundled reference (netlib) BLAS: float32 matmul runs at about
8 GFLOP/s. Its symbols are resolved at load time, so a BLAS loaded earlier with RTLD_GLOBAL
takes precedence: Debian's OpenBLAS (``apt-get install libopenblas0-pthread``) measured
120-220 GFLOP/s on the same 2-core machine. This module must run before ``import mlx.core``;
``transcriber/__init__.py`` imports it first.

``TRANSCRIBER_BLAS=/path/to/libopenblas.so`` picks a library; ``TRANSCRIBER_BLAS=none`` turns
the preload off (for comparisons).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys

INSTALL_HINT = "apt-get install libopenblas0-pthread  (Debian/Ubuntu; then rerun)"

_CANDIDATES = (
    "/usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/*-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)

loaded_path: str | None = None  # the library preloaded, if any


def find_openblas() -> str | None:
    """The path of an installed OpenBLAS shared library, or None."""
    for pattern in _CANDIDATES:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[0]
    name = ctypes.util.find_library("openblas")
    return name


def preload() -> str | None:
    """Load OpenBLAS globally (Linux only) unless MLX is already imported. Returns its path."""
    global loaded_path
    if loaded_path is not None or not sys.platform.startswith("linux"):
        return loaded_path
    choice = os.environ.get("TRANSCRIBER_BLAS", "")
    if choice.lower() == "none" or "mlx.core" in sys.modules:
        return None
    path = choice or find_openblas()
    if not path:
        return None
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return None
    loaded_path = path
    return path


def describe() -> str:
    """One line for users: which BLAS MLX's CPU matmuls use, and how to get the fast one."""
    if not sys.platform.startswith("linux"):
        return "BLAS: the platform's own (Accelerate on macOS)"
    if loaded_path:
        return f"BLAS: OpenBLAS ({loaded_path})"
    return f"BLAS: MLX's bundled reference BLAS (slow). For ~15x faster matmuls: {INSTALL_HINT}"
