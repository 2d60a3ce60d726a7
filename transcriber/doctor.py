"""What this installation runs on, as plain text for bug reports (``transcribe doctor``).

Everything is looked up the way the library itself does it (ffmpeg through
``transcriber.media.ffmpegtool.ffmpeg_binary``, models through the loader's package table, the BLAS through
``transcriber.blas``, the native kernels through ``transcriber.native``), so the report shows what a transcription would actually use.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _ffmpeg() -> str:
    from transcriber.media.ffmpegtool import ffmpeg_binary

    try:
        path = ffmpeg_binary()
        out = subprocess.run([path, "-hide_banner", "-version"], capture_output=True, text=True, timeout=20)
        first = (out.stdout.splitlines() or ["?"])[0]
        return f"{path} ({first.removeprefix('ffmpeg version ').split(' Copyright')[0]})"
    except Exception as e:  # noqa: BLE001 - a report line, not a crash
        return f"not found: {e}"


def _blas(probe: bool) -> list[str]:
    from transcriber.native import blas

    if probe:
        blas.apply(reprobe=True)
    lines = [blas.describe()]
    if blas.current.name == "platform":
        return lines
    serving = blas.served_by()  # from the slot itself, not from what apply() believes it did
    lines.append(f"  MLX's sgemm is served by: {serving or 'unknown (no cblas_sgemm slot found)'}")
    threads = blas.threads()
    lines.append(f"  threads: {threads if threads is not None else 'n/a (not settable)'}")
    lines.append("  vocabulary projection of MLX's decoder passes (kernels off, padded batches): "
                 + ("that library's sgemv" if blas.host_matvec() else "MLX's own matmul"))
    lines.append(f"  measured now: {blas.measure():.1f} GFLOP/s (float32 matmul, Whisper shapes)")
    results = blas.probe_results()
    if results:
        for name, result in results.get("measured", {}).items():
            if "gflops" in result:
                figures = ", ".join(f"{g:.1f}" + (f" ({n} thread{'s' if n != '1' else ''})" if n != "0" else "")
                                    for n, g in result["gflops"].items())
            else:
                figures = result.get("error", "?")
            lines.append(f"  probe: {name}: {figures}")
        lines.append(f"  probe cache: {blas.cache_file} (`transcribe doctor --probe` measures again)")
    return lines


def _kernels() -> list[str]:
    """The native kernels: the path serving each kind and its self-check, or why MLX's ops."""
    from transcriber import native
    from transcriber.native import loader

    status = native.status()
    lines = [status.line()]
    info = loader.record()
    if info and not info.get("error"):
        failed = "; ".join(f"{k}: {v}" for k, v in (info.get("failed") or {}).items())
        lines.append(f"  built: {', '.join(info.get('paths', []))} with {info.get('compiler')}, one library "
                     f"each, in {loader.FOLDER}" + (f"; not built: {failed}" if failed else ""))
    if status.path is not None:
        for kind, note in status.checks.items():
            lines.append(f"  {kind}: {status.isa}, self-check {'passed' if note is None else note}")
        lines.append(f"  {native.encoder_line()}")
        lines.append(f"  {native.pass_line()}")
        lines.append(f"  decoder weights: {native.weights_precision()} ({native.PRECISION_ENV}); "
                     f"{loader.ENV}={'|'.join([*info['paths'], 'off'])} forces a path")
    return lines


def _models() -> list[str]:
    from transcriber.model.catalog import list_models

    models = list_models().models
    lines = []
    for m in (m for m in models if m.known):
        found = f"{m.source}" if m.installed else f"not installed ({m.install})"
        cache = f"; converted: {m.cache}" if m.converted else ""
        lines.append(f"  {m.name}: {found}{cache}")
    others = [m.name for m in models if not m.known]
    if others:
        lines.append(f"  converted from model folders (cached): {', '.join(others)}")
    lines.append("  (`transcribe models` for languages, sizes and the cache)")
    return lines


def report(probe: bool = False) -> str:
    """The doctor's text. ``probe``: measure the BLAS candidates again first."""
    import mlx.core as mx
    import numpy as np

    from transcriber.native import blas
    from transcriber.model.loader import cache_root

    lines = [
        f"transcriber {_version('transcriber')}",
        f"python {platform.python_version()} ({sys.executable})",
        f"platform {platform.platform()}, {platform.machine()}",
        f"cpu: {blas.cpu_model()}, {os.cpu_count()} cores",
        f"mlx {mx.__version__}, numpy {np.__version__}",
        f"ffmpeg: {_ffmpeg()}",
        *_blas(probe),
        *_kernels(),
        f"cache directory: {cache_root()}",
        "models:",
        *_models(),
    ]
    return "\n".join(lines)
