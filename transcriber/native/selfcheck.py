"""The kernels' self-check, run once per library build, CPU and MLX in a child process.

A kernel library that reaches an instruction the CPU lacks dies of SIGILL; one miscompiled for
a CPU may give wrong numbers. Either way the user's run must go on, on MLX's own ops. So the
first process that loads a library on a CPU runs ``checks.run`` in a child (``python -m
transcriber.native.selfcheck``, the path in $TRANSCRIBER_KERNELS) and reads its verdict: each
kind passed or why not, or that the child crashed. The verdict is cached in the cache folder
(``kernels/<key>.json``, private to the user), keyed by the library's bytes, what the CPU
reports, the CPU's model and MLX's version: later runs read it and pay nothing.

Under qemu-user the child runs on the host CPU, not the emulated one (the emulator does not
follow exec); the process that then uses the library is the emulated one, where a wrong
instruction kills it: tests/native/test_native_emulated.py runs the checks in that process itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

FORMAT = 1
TIMEOUT_S = 300.0  # the checks take ~1 s natively, a minute under emulation
CRASHED = "*"  # the verdict's key when the child died: every kind is off
# the child: the checks in a fresh interpreter (tests may point this at a child that crashes)
CHILD = [sys.executable, "-m", "transcriber.native.selfcheck"]


def _mlx_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("mlx")
    except metadata.PackageNotFoundError:
        return "?"


def _key(library: str, path: str, flags: frozenset[str]) -> str:
    from transcriber.native.blas.probe import cpu_model

    h = hashlib.sha256()
    with open(library, "rb") as f:
        h.update(f.read())
    # The checks themselves: a verdict on a library checked by an older checks.py is stale.
    h.update(Path(__file__).with_name("checks.py").read_bytes())
    h.update(json.dumps([FORMAT, path, sorted(flags), cpu_model(), _mlx_version()]).encode())
    return h.hexdigest()[:20]


def folder() -> Path:
    """Where verdicts (and __init__'s 'said once' markers) are kept."""
    from transcriber.cachedir import cache_root

    return cache_root() / "kernels"


def _cache_file(key: str) -> Path:
    return folder() / f"{key}.json"


def verdict(library: str, path: str, flags: frozenset[str]) -> dict[str, str | None]:
    """kind -> None (passed) or why it is disabled; {CRASHED: why} when the checks crashed.
    From the cache when this library, CPU and MLX were checked before, else from a child."""
    file = _cache_file(_key(library, path, flags))
    try:
        cached = json.loads(file.read_text())
        if isinstance(cached, dict) and all(isinstance(v, (str, type(None))) for v in cached.values()):
            return cached
    except (OSError, ValueError):
        pass
    found = _run_child(path)
    _store(file, found)
    return found


def _run_child(path: str) -> dict[str, str | None]:
    env = {**os.environ, "TRANSCRIBER_KERNELS": path}
    try:
        proc = subprocess.run(CHILD, capture_output=True, text=True, env=env, timeout=TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {CRASHED: f"the {path} self-check did not finish in {TIMEOUT_S:.0f} s"}
    except OSError as e:
        return {CRASHED: f"the {path} self-check could not start ({e})"}
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        why = " (an instruction this CPU lacks)" if name == "SIGILL" else ""
        return {CRASHED: f"the {path} self-check crashed: {name}{why}"}
    lines = proc.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1])
        if isinstance(found, dict):
            return found
    except (IndexError, ValueError):
        pass
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {CRASHED: f"the {path} self-check failed (exit {proc.returncode}: {last[:200]})"}


def _store(file: Path, found: dict) -> None:
    """Write the verdict atomically, readable by this user only; a cache that cannot be
    written costs a child per process, nothing more."""
    from transcriber.cachedir import private_write

    try:
        private_write(file, json.dumps(found))
    except OSError:
        pass


def main() -> int:
    """The child: load the path in $TRANSCRIBER_KERNELS, run every check, print the verdict."""
    from transcriber.native import checks, loader
    from transcriber.native.kernels import Kernels

    loaded = loader.load()
    if loaded.lib is None:
        print(json.dumps({CRASHED: loaded.reason}))
        return 0
    k = Kernels(loaded.lib, loaded.path, "avx512_bf16" in loaded.flags, "avx512_vnni" in loaded.flags)  # one thread
    print(json.dumps(checks.run(k)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
