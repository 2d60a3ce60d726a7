"""The transcriber's cache folder, in a module of its own: the model loader and the BLAS probe
(transcriber/native/blas/probe.py, imported by the model) both need it, and neither may import the other."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$TRANSCRIBER_CACHE, else $XDG_CACHE_HOME/transcriber, else ~/.cache/transcriber."""
    base = os.environ.get("TRANSCRIBER_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "transcriber"
