"""Fault injection for the tests that kill or signal a run at a precise point: see
sitecustomize.py in this folder, which a process runs at its start when this folder is on its
PYTHONPATH."""

from __future__ import annotations

import os
from pathlib import Path

FOLDER = Path(__file__).resolve().parent


def environment(env: dict) -> dict:
    """``env`` with this folder first on PYTHONPATH: a process started with it acts on the
    TRANSCRIBER_TEST_* variables (sitecustomize.py), and so do the Ray workers of a Ray instance
    it starts."""
    paths = [str(FOLDER), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
