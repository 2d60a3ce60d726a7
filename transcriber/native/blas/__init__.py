"""Give MLX's CPU matmuls a fast BLAS on Linux, from ``pip install`` alone.

MLX's Linux CPU wheel links a bundled reference (netlib) BLAS: float32 matmul runs at 2-8
GFLOP/s, and Whisper's encoder and decoder are mostly float32 matmuls. libmlx.so calls
``cblas_sgemm`` through one slot of its global offset table (GOT). After ``import mlx.core``,
``apply`` rewrites that slot, in memory, to the ``sgemm`` of a faster library:

- ``scipy-openblas32`` (a PyPI wheel, a Linux dependency of transcriber): a self-contained
  OpenBLAS with runtime CPU dispatch whose symbols carry a ``scipy_`` prefix, so the dynamic
  loader could never bind MLX to it by name; writing the slot is the only way in;
- a system OpenBLAS (``libopenblas.so.0``), if one is installed;
- MKL (``libmkl_rt``), if the ``mkl`` wheel is installed.

Which one (if any) and with how many threads is decided by measurement, not by name, once per
machine (probe.py). The slot is found, written and checked in slot.py: it is only rewritten
while it points into libmlx.so's own BLAS, and a matmul checked against numpy after writing it
puts the old pointer back if it differs. Any failure leaves MLX on its own BLAS with one logged
note. The bound library also gives the decoder a host sgemv and reports its threads (matvec.py).

Loading a model binds it (``bind_once``, from ``model.loader.load_model``): importing
transcriber changes nothing in MLX.

``TRANSCRIBER_BLAS`` overrides the automatic choice:

- ``none``: leave MLX's bundled BLAS alone (for comparisons);
- a name or comma-separated names (``scipy-openblas32``, ``system-openblas``, ``mkl``,
  ``bundled``): measure only these and use the fastest;
- a path containing ``/``: use that shared library (it must export ``cblas_sgemm`` or
  ``scipy_cblas_sgemm``), without measuring.

``TRANSCRIBER_BLAS_THREADS=N`` overrides the measured thread count (several processes sharing the
cores, such as Ray workers, each want fewer threads than one process alone); ``set_threads``
does the same from Python. The rest of transcriber imports this package only (public names
below), as ``transcriber.blas``.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Callable

from transcriber import settings
from transcriber.native.blas import matvec, probe, slot
from transcriber.native.blas.libraries import BUNDLED, ENV, NAMES, Failure, Library, candidates, library_from_path
from transcriber.native.blas.matvec import THREADS_ENV, numpy_one_thread
from transcriber.native.blas.probe import cpu_model, measure
from transcriber.native.blas.slot import served_by

__all__ = ["ENV", "THREADS_ENV", "NAMES", "Choice", "Library", "apply", "bind_once", "current", "loaded_path",
           "cache_file", "describe", "served_by", "threads", "set_threads", "asked_threads", "host_matvec", "measure",
           "cpu_model", "probe_results", "numpy_one_thread"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Choice:
    """What serves MLX's sgemm in this process, as decided by ``apply``."""

    name: str  # one of NAMES, "path" (forced by TRANSCRIBER_BLAS=/path), "preloaded" or "platform"
    path: str | None = None
    threads: int | None = None  # what we set; None: the library's default
    gflops: float | None = None  # measured by the probe
    note: str | None = None  # why MLX is on its bundled BLAS, when that is a fallback


current = Choice(BUNDLED)
loaded_path: str | None = None  # the faster library serving MLX now, or None (transcriber/app/cli/main.py reads it)
cache_file: str | None = None  # the probe result used, if any
_library: Library | None = None  # the library behind ``current``
_applied = False  # ``apply`` ran in this process
_asked: int | None = None  # the thread count ``set_threads`` was given


def _decide(setting: str, reprobe: bool) -> tuple[Library, int | None, float | None, str | None]:
    """(library, threads, measured GFLOP/s, note) for a TRANSCRIBER_BLAS value."""
    global cache_file
    if "/" in setting:
        return library_from_path(setting), None, None, None
    names = [n.strip().lower() for n in setting.split(",") if n.strip()] or list(NAMES)
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise Failure(f"{ENV}: unknown name {', '.join(unknown)} (known: none, {', '.join(NAMES)}, or a path)")
    libraries, missing = candidates(names)
    if all(lib.name == BUNDLED for lib in libraries):
        why = "; ".join(f"{n}: {reason}" for n, reason in missing.items())
        return Library(BUNDLED, None), None, None, (f"no faster BLAS found ({why})" if why else None)
    result, path = probe.probed(names, libraries, reprobe)
    cache_file = path or cache_file
    choice = result.get("choice")
    if not choice:
        raise Failure("the BLAS probe measured nothing")
    # The cache is data, never an instruction to load code: the chosen library is taken from
    # this environment's candidates (same name and file version, by the cache key), never from
    # a path the file holds. A choice that names none of them (another virtualenv's, or a file
    # someone wrote there) is measured again.
    lib = next((c for c in libraries if c.name == choice["library"]["name"]), None)
    if lib is None:
        if reprobe:
            raise Failure(f"the BLAS probe chose {choice['library']['name']!r}, not a candidate here")
        return _decide(setting, True)
    note = None
    if lib.name == BUNDLED:  # every faster candidate failed (or was slower): say why
        errors = [f"{n}: {r['error']}" for n, r in result["measured"].items() if "error" in r]
        note = "; ".join(errors) or None
    return lib, choice["threads"], choice["gflops"], note


def _bind(setting: str, reprobe: bool) -> tuple[Library, int | None, float | None, str | None]:
    """Decide and bind; on any failure MLX's bundled BLAS, with the reason as the note."""
    try:
        if setting.lower() == "none":
            lib = Library(BUNDLED, None)
            if slot.original is not None:  # undo an earlier apply in this process
                slot.bind(lib)
            return lib, None, None, None
        lib, n, gflops, note = _decide(setting, reprobe)
        override = matvec.threads_override()
        if override and override != n:  # the probe's GFLOP/s were for its own thread count
            n, gflops = override, None
        slot.bind(lib)
        matvec.set_library_threads(lib, n)
        return lib, n, gflops, note
    except Exception as e:  # noqa: BLE001 - never let a BLAS choice break the import
        slot.restore()
        return Library(BUNDLED, None), None, None, str(e) if isinstance(e, Failure) else f"{type(e).__name__}: {e}"


def apply(setting: str | None = None, *, reprobe: bool = False) -> Choice:
    """Bind MLX's sgemm to the fastest BLAS measured on this machine (see the module docstring).
    ``setting`` defaults to $TRANSCRIBER_BLAS. Never raises: failures leave MLX on its bundled
    BLAS with one logged note. Returns (and stores in ``current``) what serves MLX now."""
    global current, loaded_path, _library, _applied
    _applied = True
    if not sys.platform.startswith("linux"):
        current, loaded_path = Choice("platform"), None
        return current
    numpy_one_thread()
    setting = (settings.get(ENV) or "" if setting is None else setting).strip()
    importlib.import_module("mlx.core")  # loads libmlx.so, whose slot we rewrite
    preloaded = slot.preloaded()
    if preloaded:  # e.g. LD_PRELOAD=libopenblas.so: someone chose already; not ours to undo
        log.info("MLX's sgemm is already served by %s: left alone", preloaded)
        current, loaded_path, _library = Choice("preloaded", preloaded), preloaded, None
        return current
    lib, n, gflops, note = _bind(setting, reprobe)
    if note:
        log.warning("transcriber: BLAS: %s; MLX keeps its bundled BLAS (slow)", note)
    current, loaded_path, _library = Choice(lib.name, lib.path, n, gflops, note), lib.path, lib
    return current


def bind_once() -> Choice:
    """``apply()`` the first time in this process, before a model's first matmul (model
    loading calls it); later calls keep what serves (``apply`` chooses again on purpose)."""
    return current if _applied else apply()


def set_threads(n: int) -> None:
    """Use ``n`` threads in the library serving MLX's sgemm (where it can be told: OpenBLAS, MKL);
    the native kernels' encoder takes as many (``asked_threads``)."""
    global current, _asked
    if n < 1:
        raise ValueError(f"BLAS threads must be >= 1, got {n}")
    _asked = n
    bind_once()
    if _library is not None and _library.set_threads:
        matvec.set_library_threads(_library, n)
        current = Choice(current.name, current.path, n, current.gflops if n == current.threads else None,
                         current.note)


def asked_threads() -> int | None:
    """The thread count this process was told to use (``set_threads``: --threads, a Ray worker's
    --worker-threads; else $TRANSCRIBER_BLAS_THREADS), None when nobody said."""
    return _asked or matvec.threads_override()


def threads() -> int | None:
    """The thread count of the library serving MLX's sgemm, as the library reports it."""
    bind_once()
    return matvec.library_threads(_library)


def host_matvec() -> Callable | None:
    """``f(a, x, out)``: ``out = a @ x`` (float32 (M, K) @ (K,) -> (M,)) by the sgemv of the
    library serving MLX's sgemm, checked once; None when MLX is on its own BLAS (matvec.py)."""
    bind_once()
    return matvec.host_matvec(_library)


def describe() -> str:
    """One line for users: which BLAS serves MLX's CPU matmuls."""
    bind_once()
    if current.name == "platform":
        return "BLAS: the platform's own (Accelerate on macOS)"
    if current.path is None:
        why = current.note or ("TRANSCRIBER_BLAS=none" if (settings.get(ENV) or "").lower() == "none" else "")
        return (f"BLAS: MLX's bundled reference BLAS (slow{': ' + why if why else ''}); "
                "`transcribe doctor` says more")
    detail = [f"{current.threads} thread{'s' if current.threads != 1 else ''}" if current.threads else "",
              f"{current.gflops:.0f} GFLOP/s measured" if current.gflops else ""]
    extra = ", ".join(d for d in detail if d)
    return f"BLAS: {current.name} ({current.path}){', ' + extra if extra else ''}"


def probe_results() -> dict | None:
    """The cached probe result in use ({"measured", "choice"}), if any."""
    return probe.read_cache(cache_file)
