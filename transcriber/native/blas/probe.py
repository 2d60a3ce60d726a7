"""Which library serves MLX's sgemm, with how many threads: measured in subprocesses, cached.

A probe runs each candidate in a subprocess (a crash there costs nothing), times MLX matmuls of
Whisper's shapes and keeps the fastest. The result is cached per machine (CPU model, core count,
MLX and library versions) under the cache directory as ``blas/<key>.json``, so later starts only
apply the cached choice (a few ms).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from transcriber import settings
from transcriber.native.blas import slot
from transcriber.native.blas.libraries import Failure, Library
from transcriber.native.blas.matvec import set_library_threads

log = logging.getLogger(__name__)

CACHE_FORMAT = 1

# Whisper's typical float32 products (tiny: width 384, 1500 encoder frames, 6 heads of 64):
# a linear layer, and attention scores as a batched matmul. GFLOP/s over both decides.
_SHAPES = (((1500, 384), (384, 1536)), ((6, 1500, 64), (6, 64, 1500)))


def measure(budget_s: float = 0.15) -> float:
    """GFLOP/s of MLX float32 matmul now, over Whisper-like shapes (best of repeated runs within
    ``budget_s`` per shape, at least one run: the slow reference BLAS takes ~1 s a run)."""
    import mlx.core as mx

    flops = seconds = 0.0
    for shape_a, shape_b in _SHAPES:
        a = mx.random.normal(shape_a, stream=mx.cpu)
        b = mx.random.normal(shape_b, stream=mx.cpu)
        mx.eval(a, b)
        best, spent, runs = float("inf"), 0.0, 0
        while runs == 0 or (spent < budget_s and runs < 20):
            start = time.perf_counter()
            mx.eval(mx.matmul(a, b, stream=mx.cpu))
            took = time.perf_counter() - start
            best, spent, runs = min(best, took), spent + took, runs + 1
        n = 1
        for d in shape_a:
            n *= d
        flops += 2.0 * n * shape_b[-1]
        seconds += best
    return flops / seconds / 1e9


def cpu_model() -> str:
    """The CPU model from /proc/cpuinfo (x86: "model name"; Arm: implementer and part)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields.get("model name") or " ".join(
        fields.get(k, "") for k in ("CPU implementer", "CPU part")).strip() or platform.processor()


def _thread_options() -> list[int]:
    cpus = settings.cores()
    return sorted({n for n in (1, 2, cpus) if n <= cpus})


# -- the probe subprocess ----------------------------------------------------------------------------

def worker(spec_json: str) -> None:
    """Probe subprocess: bind one library, print {"gflops": {threads: GFLOP/s}} or {"error"}."""
    spec = json.loads(spec_json)
    lib = Library(**spec["library"])
    importlib.import_module("mlx.core")  # loads libmlx.so, whose slot we rewrite
    try:
        slot.bind(lib)
    except Failure as e:
        print(json.dumps({"error": str(e)}))
        return
    result: dict[str, float] = {}
    options = spec["threads"] or [0]
    for _ in range(2 if len(options) > 1 else 1):  # interleaved rounds, best of each: load shifts
        for n in options:
            set_library_threads(lib, n)
            result[str(n)] = max(result.get(str(n), 0.0), round(measure(), 2))
    print(json.dumps({"gflops": result}))


# The subprocess imports this module from the same folder as this process did (argv[1] replaces
# sys.path[0], '' for -c, so the cwd cannot shadow modules); ``import transcriber`` is light, and
# only transcriber.model applies the binding, so the probe never probes again.
_WORKER = f"import sys; sys.path[0] = sys.argv[1]; from {__name__} import worker; worker(sys.argv[2])"
_ROOT = str(Path(__file__).resolve().parents[len(__name__.split(".")) - 1])


def _pick_threads(gflops: dict[str, float]) -> tuple[int, float]:
    """(threads, GFLOP/s) from one library's measurements: the fewest threads unless more are
    clearly (25%) faster. Extra BLAS threads help little on Whisper's small matrices, and a
    threaded OpenBLAS slows down sharply when the machine is busy; one thread degrades gently."""
    chosen = None
    for n, g in sorted(((int(n), g) for n, g in gflops.items())):
        if chosen is None or g > 1.25 * chosen[1]:
            chosen = (n, g)
    return chosen


def _measure_one(lib: Library) -> dict:
    """One candidate in its own subprocess: {"gflops": {threads: GFLOP/s}} or {"error": why}."""
    threads = _thread_options() if lib.set_threads else []
    spec = json.dumps({"library": asdict(lib), "threads": threads})
    try:
        proc = subprocess.run([sys.executable, "-c", _WORKER, _ROOT, spec],
                              capture_output=True, text=True, timeout=120)
        lines = proc.stdout.strip().splitlines()
        return json.loads(lines[-1]) if proc.returncode == 0 and lines else {
            "error": f"probe exited with status {proc.returncode}: "
                     f"{(proc.stderr.strip().splitlines() or [''])[-1]}"}
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        return {"error": f"probe failed: {e}"}


def _probe(libraries: list[Library]) -> dict:
    """Measure each candidate; returns {"measured", "choice"} (the cache file's content)."""
    measured, best = {}, None
    for lib in libraries:
        result = measured[lib.name] = _measure_one(lib)
        if result.get("gflops"):
            n, gflops = _pick_threads(result["gflops"])
            if best is None or gflops > best[2]:
                best = (lib, n or None, gflops)
    choice = {"library": asdict(best[0]), "threads": best[1], "gflops": best[2]} if best else None
    return {"measured": measured, "choice": choice}


# -- the per-machine cache ---------------------------------------------------------------------------

def _cache_path(names: list[str], libraries: list[Library]) -> str:
    import mlx.core as mx

    from transcriber.cachedir import cache_root

    key = {"format": CACHE_FORMAT, "cpu": cpu_model(), "cpus": _thread_options()[-1],
           "machine": platform.machine(), "mlx": mx.__version__, "names": names,
           "libraries": {lib.name: lib.version for lib in libraries}}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return str(cache_root() / "blas" / f"{digest}.json")


def probed(names: list[str], libraries: list[Library], reprobe: bool) -> tuple[dict, str | None]:
    """(the probe result for these candidates on this machine: cached, else measured now; the
    cache file it is in, or None when it is not cached)."""
    path = _cache_path(names, libraries)
    if not reprobe:
        try:
            with open(path) as f:
                return json.load(f), path
        except (OSError, ValueError):
            pass
    log.info("measuring BLAS libraries for MLX (once per machine): %s",
             ", ".join(lib.name for lib in libraries))
    result = _probe(libraries)
    if not result["choice"]:
        return result, None  # nothing worked, perhaps only this time: not worth remembering
    from transcriber.cachedir import private_write

    try:  # atomically (a concurrent first run must never read half a file), private to the user
        private_write(path, json.dumps(result, indent=1))
        return result, path
    except OSError as e:
        log.debug("cannot cache the BLAS probe in %s: %s", path, e)
        return result, None


def read_cache(path: str | None) -> dict | None:
    """A cache file's probe result ({"measured", "choice"}), or None."""
    if not path:
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
