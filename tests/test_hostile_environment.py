"""Faults of the environment, bad settings, and a job row steering writes (issue 31): an
environment fault is said once for the run, its files stay queued with no attempt counted; a bad
TRANSCRIBER_* value is a usage error before any work; an output path is checked against the job's
own output folder when it is written; a model's config that no Whisper has is refused when the
model loads.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from jobs.discover import file_signature
from transcriber import audio
from transcriber.model.whisper import ModelDimensions

from .conftest import PRESS_YARD
from .test_bad_input import invoke, no_traceback, use_engine
from .test_hostile_input import lines
from .test_jobs_runner import ScriptedEngine


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("TRANSCRIBER_DEBUG", "TRANSCRIBER_DB", "TRANSCRIBER_DB_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    yield
    audio._ffprobe_binary.cache_clear()  # found on $PATH once per process: a test's PATH is its own


def runs_anew() -> None:
    """What a new process would find: ffprobe looked up on $PATH again."""
    audio._ffprobe_binary.cache_clear()


def media_folder(tmp_path: Path, n: int = 2) -> list[Path]:
    folder = tmp_path / "in"
    folder.mkdir()
    paths = [folder / f"{chr(97 + i)}.flac" for i in range(n)]
    for path in paths:
        shutil.copy(PRESS_YARD, path)
    return paths


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


def test_force_replaces_a_dangling_symbolic_link(tmp_path, monkeypatch):
    """talk.srt a symbolic link to nothing: refused without --force (it says to use it); with
    --force the link itself is replaced by the subtitle (nothing made where it pointed)."""
    (media,) = media_folder(tmp_path, 1)
    link = media.with_suffix(".srt")
    target = tmp_path / "nowhere" / "x.srt"
    link.symlink_to(target)
    use_engine(monkeypatch, ScriptedEngine(n=4))
    db = tmp_path / "jobs.db"
    refused = invoke("--db", str(db), str(media), "-q")
    assert lines(refused)[1].endswith("--force replaces it")
    forced = invoke("--db", str(db), str(media), "-q", "--force")
    assert forced.exit_code == 0, forced.output
    assert lines(forced) == ["1 done, 0 skipped, 0 failed"]
    assert not link.is_symlink() and "w1" in link.read_text() and not target.parent.exists()


def test_a_forged_job_row_writes_nothing_outside_its_output_folder(tmp_path, monkeypatch):
    """A failed job's ``output_stem`` edited to point outside its output folder, with an
    ``outputs`` row forged (size, mtime, SHA-256) for a file there: ``retry --failed`` creates
    nothing there and leaves the claimed file as it was; one line says why."""
    (media,) = media_folder(tmp_path, 1)
    use_engine(monkeypatch, ScriptedEngine(n=4))
    db = tmp_path / "jobs.db"
    assert invoke("--db", str(db), str(media), "-q").exit_code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / "victim.srt"
    victim.write_text("precious\n")
    sig = file_signature(victim)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE jobs SET status = 'failed', output_stem = ?", [str(elsewhere / "victim")])
    conn.execute("INSERT INTO outputs (path, job_id, size, mtime_ns, sha256, written_at) VALUES (?, 1, ?, ?, ?, 0)",
                 [str(victim), sig.size, sig.mtime_ns, sig.sha256])
    conn.commit()
    conn.close()
    result = invoke("--db", str(db), "retry", "--failed", "-q")
    no_traceback(result)
    assert result.exit_code == 1
    assert f"not written: {victim} is outside the job's output folder {media.parent}" in result.stderr
    assert victim.read_text() == "precious\n" and sorted(p.name for p in elsewhere.iterdir()) == ["victim.srt"]


TINY = {"n_mels": 80, "n_audio_ctx": 1500, "n_audio_state": 384, "n_audio_head": 6, "n_audio_layer": 4,
        "n_vocab": 51864, "n_text_ctx": 448, "n_text_state": 384, "n_text_head": 6, "n_text_layer": 4}
BAD_CONFIGS = {
    "heads 0": ({**TINY, "n_audio_head": 0}, "n_audio_head 0 is not from 1 to 64"),
    "heads that do not divide": ({**TINY, "n_text_head": 5}, "n_text_head 5 does not divide n_text_state 384"),
    "dims 1e9": ({**TINY, "n_audio_state": 10 ** 9}, "n_audio_state 1000000000 is not from 2 to 4096"),
    "alignment heads out of range": ({**TINY, "alignment_heads": [[9, 0]]}, "alignment head (layer, head) (9, 0)"),
    "suppress ids out of range": ({**TINY, "suppress_ids": [-5]}, "suppress_ids holds -5"),
}


def model_folder(tmp_path: Path, config: str) -> Path:
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
    folder = model_folder(tmp_path, json.dumps(config))
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

    folder = model_folder(tmp_path, "[" * 200_000 + "]" * 200_000)
    with pytest.raises(ModelError, match=f"cannot load model from {folder}"):
        load_model(folder)


def test_model_dimensions_are_bounded_before_allocation():
    """Within every bound, but a model far larger than any Whisper: refused before allocating."""
    with pytest.raises(ValueError, match="more than any Whisper"):
        ModelDimensions(128, 1500, 4096, 64, 64, 51866, 448, 4096, 64, 64)
