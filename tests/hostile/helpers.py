"""What the hostile-input suite's modules share: running the command (in this process with a
scripted engine, or in its own process), and reading what it said and left.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import transcriber.app.cli.main
import transcriber.app.run.engines
from transcriber.app.cli.main import main
from transcriber.app.run.engines import EngineCache

from .. import faults
from ..conftest import PRESS_YARD, ROOT


def use_engine(monkeypatch, engine) -> None:
    """The CLI's runners get ``engine`` for every job instead of loading a model (the CLI
    imports transcriber.app.run.engines when it runs jobs, so the class is replaced there)."""
    real = EngineCache
    monkeypatch.setattr(transcriber.app.run.engines, "EngineCache", lambda: real(lambda spec: engine))


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def intact(db: Path, media: Path) -> dict:
    """PRAGMA integrity_check is ok and the job's row is there; the row."""
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        row = conn.execute("SELECT * FROM jobs WHERE path = ?", [str(media.resolve())]).fetchone()
        assert row is not None
        return dict(row)
    finally:
        conn.close()


def no_traceback(result) -> None:
    assert "Traceback" not in result.output and not isinstance(result.exception, sqlite3.Error)


def words_of(media: Path) -> list[str]:
    data = json.loads(media.with_suffix(".json").read_text())
    return [w["word"] for s in data["segments"] for w in s["words"]]


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """The command in its own process (a hang is a TimeoutExpired, not a stuck suite)."""
    return subprocess.run([sys.executable, "-m", "transcriber.app", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TRANSCRIBER_BLAS": "none", **(env or {})}, cwd=ROOT)


MS_RDONLY, MS_REMOUNT, MS_BIND, MNT_DETACH = 1, 32, 4096, 2


@contextlib.contextmanager
def read_only(folder: Path):
    """``folder`` read-only for every process: mode 0o500, and where this user writes anyway
    (root), a read-only bind mount of it over itself (what root cannot write either)."""
    folder.chmod(0o500)
    libc, mounted = ctypes.CDLL(None, use_errno=True), False
    try:
        if os.access(folder, os.W_OK):
            name = os.fsencode(folder)
            mounted = libc.mount(name, name, None, MS_BIND, None) == 0
            if not mounted or libc.mount(None, name, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None) != 0:
                pytest.skip(f"this user writes anywhere and cannot mount: {os.strerror(ctypes.get_errno())}")
        assert not os.access(folder, os.W_OK)
        yield folder
    finally:
        if mounted:
            libc.umount2(os.fsencode(folder), MNT_DETACH)
        folder.chmod(0o700)


BAR = re.compile(r".*\d+%\|.*\| .*\[.*\]\s*")  # tqdm's "talk.flac:  40%|####  | 0.6/1.6 s [00:01<00:01]"


def lines(result) -> list[str]:
    """stderr's lines, without the progress bars drawn between them (a bar is redrawn after a
    carriage return, and a message can follow a bar on the same line)."""
    pieces = (piece for line in result.stderr.splitlines() for piece in line.split("\r"))
    return [piece for piece in pieces if piece.strip() and not BAR.fullmatch(piece)]


def leftovers(folder: Path) -> list[str]:
    """Temporary files of the atomic writer, which never outlive a run."""
    return [p.name for p in folder.rglob("*") if p.name.endswith(".part")]


def transcribe_cli(*args: str, seconds: float, sigint: object = signal.SIG_DFL) -> subprocess.Popen:
    """The command in its own process, with the bound on reads set to ``seconds``, started with
    Ctrl-C's disposition ``sigint`` whatever this process's is (a script's background job starts
    with it ignored: the suite run so once gave every such child an ignored SIGINT)."""
    env = {**os.environ, "TRANSCRIBER_BLAS": "none", "TRANSCRIBER_READ_TIMEOUT": str(seconds)}
    env = faults.environment({k: v for k, v in env.items() if k not in ("TRANSCRIBER_DB", "TRANSCRIBER_DEBUG")})
    return subprocess.Popen([sys.executable, "-m", "transcriber.app", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))


def media_folder(tmp_path: Path, n: int = 2) -> list[Path]:
    folder = tmp_path / "in"
    folder.mkdir()
    paths = [folder / f"{chr(97 + i)}.flac" for i in range(n)]
    for path in paths:
        shutil.copy(PRESS_YARD, path)
    return paths
