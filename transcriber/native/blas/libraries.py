"""The BLAS libraries that can serve MLX's sgemm: what each is called, where it is installed.

No MLX and no numpy here: ``TRANSCRIBER_BLAS`` is read and the candidates are found before
anything is loaded, and the probe's cache key names each candidate's file (``file_version``).
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import sys
from dataclasses import dataclass

ENV = "TRANSCRIBER_BLAS"
BUNDLED = "bundled"
NAMES = (BUNDLED, "scipy-openblas32", "system-openblas", "mkl")

_SYSTEM_OPENBLAS = (  # where distributions put it (the pthread variant first)
    "/usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/*-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)


class Failure(Exception):
    """A reason to leave MLX on its bundled BLAS."""


@dataclass(frozen=True)
class Library:
    """A BLAS that can serve MLX's sgemm: where it is and what it calls its functions. Its
    fields are the probe cache's ``choice.library`` (a new field needs a new cache format)."""

    name: str
    path: str | None  # None: MLX's bundled BLAS, already loaded
    sgemm: str = "cblas_sgemm"
    set_threads: str | None = None  # int -> void, where the library has one
    get_threads: str | None = None
    version: str = ""  # for the cache key
    rtld_global: bool = False  # MKL's dispatcher wants its symbols global


def candidates(names: list[str]) -> tuple[list[Library], dict[str, str]]:
    """The named libraries that are installed, and why the others are not candidates."""
    found, missing = [], {}
    for name in names:
        if name == BUNDLED:
            found.append(Library(BUNDLED, None))
            continue
        lib, why = _find(name)
        if lib is not None:
            found.append(lib)
        elif why:
            missing[name] = why
    return found, missing


def _find(name: str) -> tuple[Library | None, str | None]:
    """One named library, or (None, why not); a system library that is simply absent has no why."""
    if name == "scipy-openblas32":
        # The folder scipy_openblas32.get_lib_dir() returns, found without importing the
        # package: its import reads package metadata, ~20 ms on every start.
        spec = importlib.util.find_spec("scipy_openblas32")
        if spec is None or not spec.submodule_search_locations:
            return None, "not installed (pip install scipy-openblas32)"
        lib_dir = os.path.join(list(spec.submodule_search_locations)[0], "lib")
        hits = sorted(glob.glob(os.path.join(lib_dir, "libscipy_openblas*.so*")))
        if not hits:
            return None, f"no library in {lib_dir}"
        return Library(name, hits[0], "scipy_cblas_sgemm", "scipy_openblas_set_num_threads",
                       "scipy_openblas_get_num_threads", file_version(hits[0])), None
    if name == "system-openblas":
        hits = [h for p in _SYSTEM_OPENBLAS for h in sorted(glob.glob(p))]
        return (Library(name, hits[0], "cblas_sgemm", "openblas_set_num_threads",
                        "openblas_get_num_threads", file_version(hits[0])) if hits else None), None
    if name == "mkl":  # the `mkl` wheel puts its libraries in <prefix>/lib
        hits = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
        return (Library(name, hits[0], "cblas_sgemm", "MKL_Set_Num_Threads", "MKL_Get_Max_Threads",
                        file_version(hits[0]), rtld_global=True) if hits else None), None
    raise ValueError(f"unknown BLAS name {name!r}")


def file_version(path: str) -> str:
    """Identifies a library file for the cache key: its real name and size."""
    real = os.path.realpath(path)
    return f"{os.path.basename(real)}:{os.path.getsize(real)}"


def library_from_path(path: str) -> Library:
    """TRANSCRIBER_BLAS=/path: a library exporting cblas_sgemm (or scipy-openblas's prefixed one)."""
    try:
        handle = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        raise Failure(f"{ENV}={path}: cannot load it: {e}") from e
    for prefix in ("", "scipy_"):
        if hasattr(handle, f"{prefix}cblas_sgemm"):
            setter = next((s for s in (f"{prefix}openblas_set_num_threads", "MKL_Set_Num_Threads")
                           if hasattr(handle, s)), None)
            getter = next((s for s in (f"{prefix}openblas_get_num_threads", "MKL_Get_Max_Threads")
                           if hasattr(handle, s)), None)
            return Library("path", path, f"{prefix}cblas_sgemm", setter, getter)
    raise Failure(f"{ENV}={path}: exports no cblas_sgemm")
