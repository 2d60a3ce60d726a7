"""Faults that no input can cause are the run's, said once: ffprobe or ffmpeg that cannot
start, a full temporary folder, an unusable cache folder, a model that cannot load (a pickle
given as the model, a config no Whisper has). The files stay queued with no attempt counted.
A bad TRANSCRIBER_* value is a usage error (exit 2) before any work.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import sqlite3
import time
import zipfile
from pathlib import Path

import pytest

from transcriber import ModelError
from transcriber.media import ffmpegtool
from transcriber.model import loader
from transcriber.model.dimensions import ModelDimensions

from ..conftest import PRESS_YARD
from ..app.test_jobs_runner import ScriptedEngine
from .helpers import cli, intact, invoke, lines, media_folder, no_traceback, read_only, use_engine


def test_a_stale_conversion_folder_is_no_model_and_the_next_conversion_removes_it(tmp_path, monkeypatch):
    """kill -9 mid-conversion leaves models/.convert-XXXX: `transcribe models` does not list
    it, and the next conversion in that cache removes it once it is stale (not a fresh one)."""
    import numpy as np
    from transcriber.model import loader
    monkeypatch.setenv("TRANSCRIBER_CACHE", str(tmp_path / "cache"))
    models = tmp_path / "cache" / "models"
    stale, fresh = models / ".convert-k1ll3d", models / ".convert-wr1t1n"
    for folder in (stale, fresh):
        folder.mkdir(parents=True)
        (folder / "weights.safetensors").write_bytes(b"\0" * 1000)
        (folder / "config.json").write_text("{}")
    os.utime(stale, (time.time() - 3600,) * 2)
    listing = invoke("models")
    assert listing.exit_code == 0 and ".convert" not in listing.stdout
    loader._convert_once(models / "made-1234", tmp_path, lambda: ({"w": np.zeros(2, np.float32)}, {}))
    assert (models / "made-1234" / "weights.safetensors").is_file()
    assert not stale.exists() and fresh.exists()


@pytest.fixture
def converted_tiny() -> Path:
    """The default cache's conversion of tiny.en (made if needed)."""
    from transcriber.model import loader
    folder, _ = loader.resolve("tiny.en")
    return folder


@pytest.mark.parametrize("fault", ["not a folder", "read-only"])
def test_an_unusable_cache_folder_is_one_line_and_fails_no_job(tmp_path, media, fault):
    """$TRANSCRIBER_CACHE a file, or a read-only folder without the conversion: one line naming
    the cache folder and what to do, exit 1; the job is still queued, no attempt counted."""
    cache = tmp_path / "cache"
    db = tmp_path / "jobs.db"
    with contextlib.ExitStack() as stack:
        if fault == "not a folder":
            cache.write_text("")
        else:
            cache.mkdir()
            stack.enter_context(read_only(cache))
        result = cli("--db", str(db), str(media), "-q", env={"TRANSCRIBER_CACHE": str(cache)})
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: the cache folder {cache} cannot be used (") and line.endswith(
        "): make it a writable folder, or point $TRANSCRIBER_CACHE at one"), line
    row = intact(db, media)
    assert row["status"] == "queued" and row["errors"] == 0


@pytest.mark.slow
def test_a_cache_that_cannot_take_the_checked_marker_still_transcribes(tmp_path, media, converted_tiny):
    """A cache holding a good conversion where the "checked" marker cannot be written (read-only,
    or its folder taken by a file): the model is checked again and the file transcribed."""
    models = tmp_path / "cache" / "models" / converted_tiny.name
    models.mkdir(parents=True)
    for f in converted_tiny.iterdir():
        os.link(f, models / f.name)
    (tmp_path / "cache" / "checked").write_text("")  # the marker's folder cannot be made
    for folder in (models, models.parent, tmp_path / "cache"):
        folder.chmod(0o500)
    try:
        result = cli("--db", str(tmp_path / "jobs.db"), str(media), "--mode", "oneshot", "-f", "json", "-q",
                     env={"TRANSCRIBER_CACHE": str(tmp_path / "cache")})
    finally:
        for folder in (models, models.parent, tmp_path / "cache"):
            folder.chmod(0o700)
    assert result.returncode == 0, result.stderr
    assert "country" in media.with_suffix(".json").read_text()


class Trap:
    """Unpickling this makes a folder: the proof that something unpickled it."""

    def __init__(self, sentinel: Path):
        self.sentinel = str(sentinel)

    def __reduce__(self):
        return os.mkdir, (self.sentinel,)


def torch_zip(path: Path, payload: bytes) -> None:
    """What ``torch.save`` writes: a zip whose ``data.pkl`` is a pickle."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/version", "3\n")


def model_folder(folder: Path, weights: str, payload: bytes, as_zip: bool) -> Path:
    """A model folder with the real tiny.en config and tokenizer, and ``weights`` a pickle."""
    source, _ = loader.resolve("tiny.en")
    folder.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(source / name, folder / name)
    if as_zip:
        torch_zip(folder / weights, payload)
    else:
        (folder / weights).write_bytes(payload)
    return folder


@pytest.mark.parametrize("weights, as_zip, cause", [
    ("model.pt", False, "is not a folder"),
    ("weights.safetensors", False, "weights.safetensors"),
    ("weights.npz", False, "weights.npz"),
    ("weights.npz", True, "weights.npz"),
    ("model.bin", True, "model.bin"),
    ("pytorch_model.bin", True, "has no weights.safetensors, weights.npz, model.safetensors or model.bin"),
])
def test_a_pickle_given_as_the_model_is_refused_never_unpickled(tmp_path, monkeypatch, weights, as_zip, cause):
    monkeypatch.setenv("TRANSCRIBER_CACHE", str(tmp_path / "cache"))
    sentinel = tmp_path / "unpickled"
    payload = pickle.dumps({"model_state_dict": Trap(sentinel)})
    if weights == "model.pt":
        model = tmp_path / weights
        model.write_bytes(payload)
    else:
        model = model_folder(tmp_path / "evil-model", weights, payload, as_zip)
    media = tmp_path / "talk.flac"
    shutil.copy(PRESS_YARD, media)
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), str(media), "--model", str(model), "-q")
    no_traceback(result)
    assert result.exit_code == 1
    (line,) = lines(result)
    assert line.startswith("error: ") and str(model) in line and cause in line, line
    assert not sentinel.exists()
    assert not media.with_suffix(".srt").exists()
    row = intact(db, media)
    assert row["status"] == "queued" and row["errors"] == 0  # the model, not the file: nothing counted


def runs_anew() -> None:
    """What a new process would find: ffprobe looked up on $PATH again."""
    ffmpegtool.ffprobe_binary.cache_clear()


def rows(db: Path) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT status, runs - 1 >= 0, errors FROM jobs ORDER BY id").fetchall()
    finally:
        conn.close()


def test_ffprobe_unable_to_start_is_the_runs_fault_not_the_files(tmp_path, monkeypatch):
    """ffprobe that cannot start (a shared library missing: the loader's status 127): one line
    for the run, exit 1, every file still queued with no error counted; once ffprobe is fixed,
    the same command transcribes them all (not "failed before; unchanged since")."""
    files = media_folder(tmp_path)
    broken = tmp_path / "bin"
    broken.mkdir()
    (broken / "ffprobe").write_text("#!/bin/sh\necho 'ffprobe: error while loading shared libraries: "
                                    "libavdevice.so.59: cannot open shared object file' >&2\nexit 127\n")
    (broken / "ffprobe").chmod(0o755)
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", f"{broken}:{path}")
    runs_anew()
    use_engine(monkeypatch, ScriptedEngine(n=4))
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), *map(str, files), "-q")
    no_traceback(result)
    assert result.exit_code == 1
    assert lines(result) == [f"error: ffprobe ({broken / 'ffprobe'}) cannot start: ffprobe: error while loading "
                             f"shared libraries: libavdevice.so.59: cannot open shared object file"]
    assert [(status, errors) for status, _, errors in rows(db)] == [("queued", 0), ("queued", 0)]
    monkeypatch.setenv("PATH", path)
    runs_anew()
    fixed = invoke("--db", str(db), *map(str, files), "-q")
    assert fixed.exit_code == 0, fixed.output
    assert lines(fixed) == ["2 done, 0 skipped, 0 failed"]


def test_a_full_temporary_folder_is_the_runs_fault(tmp_path, monkeypatch):
    """The engine failing for want of space (MLX's compile step in a full TMPDIR says "No space
    left on device" in a RuntimeError): one line for the run, not a failure per file."""
    files = media_folder(tmp_path)

    def full(i):
        raise RuntimeError("[compile] Failed to write /tmp/mlx_kernel.cpp: No space left on device")

    use_engine(monkeypatch, ScriptedEngine(on_step=full, n=4))
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), *map(str, files), "-q")
    no_traceback(result)
    assert result.exit_code == 1
    (line,) = lines(result)
    assert line.startswith("error: no space left on a disk this run writes to") and "No space left" in line
    assert [(status, errors) for status, _, errors in rows(db)] == [("queued", 0), ("queued", 0)]


BAD_SETTINGS = [
    ("TRANSCRIBER_READ_TIMEOUT", "inf", "a number of seconds from 0.001 to 86400"),
    ("TRANSCRIBER_READ_TIMEOUT", "-1", "a number of seconds from 0.001 to 86400"),
    ("TRANSCRIBER_READ_TIMEOUT", "0", "a number of seconds from 0.001 to 86400"),
    ("TRANSCRIBER_READ_TIMEOUT", "abc", "a number of seconds from 0.001 to 86400"),
    ("TRANSCRIBER_DB_TIMEOUT", "nan", "a number of seconds from 0 to 86400"),
    ("TRANSCRIBER_BLAS_THREADS", "100000", "a whole number from 1 to"),
    ("TRANSCRIBER_KERNEL_THREADS", "0", "a whole number from 1 to"),
    ("TRANSCRIBER_KERNELS", "avx9000", "one of off, none, 0, avx512, avx2, neon, portable"),
    ("TRANSCRIBER_KERNEL_WEIGHTS", "f16", "one of bf16, f32"),
]


@pytest.mark.parametrize("name, value, takes", BAD_SETTINGS, ids=lambda v: str(v))
def test_a_bad_setting_is_a_usage_error_before_any_work(tmp_path, monkeypatch, name, value, takes):
    """A TRANSCRIBER_* variable out of its range (inf, nan, negative, zero, not a number, more
    threads than cores, an unknown word): exit 2, one line naming it, the value and what it
    takes; no database made, nothing read or written."""
    (media,) = media_folder(tmp_path, 1)
    engine = ScriptedEngine(n=4)
    use_engine(monkeypatch, engine)
    monkeypatch.setenv(name, value)
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), str(media), "-q")
    no_traceback(result)
    assert result.exit_code == 2
    (line,) = lines(result)
    assert line.startswith(f"error: {name}={value!r}: takes {takes}")
    assert not db.exists() and engine.started_from == []


TINY = {"n_mels": 80, "n_audio_ctx": 1500, "n_audio_state": 384, "n_audio_head": 6, "n_audio_layer": 4,
        "n_vocab": 51864, "n_text_ctx": 448, "n_text_state": 384, "n_text_head": 6, "n_text_layer": 4}


BAD_CONFIGS = {
    "heads 0": ({**TINY, "n_audio_head": 0}, "n_audio_head 0 is not from 1 to 64"),
    "heads that do not divide": ({**TINY, "n_text_head": 5}, "n_text_head 5 does not divide n_text_state 384"),
    "dims 1e9": ({**TINY, "n_audio_state": 10 ** 9}, "n_audio_state 1000000000 is not from 2 to 4096"),
    "alignment heads out of range": ({**TINY, "alignment_heads": [[9, 0]]}, "alignment head (layer, head) (9, 0)"),
    "suppress ids out of range": ({**TINY, "suppress_ids": [-5]}, "suppress_ids holds -5"),
}


def model_with_config(tmp_path: Path, config: str) -> Path:
    """An MLX-layout folder: the real tiny.en's weights and tokenizer, and ``config`` as its config.json."""
    from transcriber.model.loader import resolve

    real, _ = resolve("tiny.en")
    folder = tmp_path / "model"
    folder.mkdir()
    for f in real.iterdir():
        (folder / f.name).symlink_to(f)
    (folder / "config.json").unlink()
    (folder / "config.json").write_text(config)
    return folder


@pytest.mark.parametrize("config, why", list(BAD_CONFIGS.values()), ids=list(BAD_CONFIGS))
def test_a_malformed_model_config_is_refused_when_the_model_loads(tmp_path, monkeypatch, config, why):
    """Dimensions no Whisper has, alignment heads outside the model, token ids outside the
    vocabulary: the model is refused as it loads, one line naming the folder and the entry,
    exit 1; the file stays queued with no attempt counted."""
    (media,) = media_folder(tmp_path, 1)
    folder = model_with_config(tmp_path, json.dumps(config))
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), str(media), "--model", str(folder), "-q")
    no_traceback(result)
    assert result.exit_code == 1
    (line,) = lines(result)
    assert line.startswith(f"error: cannot load model from {folder}") and why in line
    assert [(status, errors) for status, _, errors in rows(db)] == [("queued", 0)]


def test_a_deeply_nested_model_config_is_refused_without_recursing(tmp_path):
    """A config.json nested 200,000 deep: a ModelError naming the folder, not a RecursionError."""
    from transcriber import ModelError, load_model

    folder = model_with_config(tmp_path, "[" * 200_000 + "]" * 200_000)
    with pytest.raises(ModelError, match=f"cannot load model from {folder}"):
        load_model(folder)


def test_model_dimensions_are_bounded_before_allocation():
    """Within every bound, but a model far larger than any Whisper: refused before allocating."""
    with pytest.raises(ValueError, match="more than any Whisper"):
        ModelDimensions(128, 1500, 4096, 64, 64, 51866, 448, 4096, 64, 64)
