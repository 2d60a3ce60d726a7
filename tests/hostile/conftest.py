"""The hostile-input suite's fixtures: a clean environment for every test, the media files and
the database states several modules use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from transcriber.media import ffmpegtool

from ..conftest import JFK


@pytest.fixture
def media(tmp_path) -> Path:
    """talk.flac (JFK) in the test's folder (its environment cleaned by ``clean_env``)."""
    path = tmp_path / "talk.flac"
    shutil.copy(JFK, path)
    return path


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("TRANSCRIBER_DEBUG", "TRANSCRIBER_DB", "TRANSCRIBER_DB_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def tiny_fs(tmp_path):
    """A 256 KiB tmpfs (Linux, as root where the container allows mounts), and a function that
    fills it up; skipped, saying why, where it cannot be mounted."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("a full disk needs a tiny tmpfs: mounting one needs root on Linux")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")

    def fill() -> Path:
        filler = mount / "filler"
        try:
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError:  # ENOSPC: full
            return filler

    yield mount, fill
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(autouse=True)
def ffprobe_found_anew():
    yield
    ffmpegtool.ffprobe_binary.cache_clear()  # found on $PATH once per process: a test's PATH is its own
