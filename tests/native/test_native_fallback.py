"""Without the native kernels: no compiler, a failed build, an older build, no build at all.

The install never fails for them (build.py records why and exits 0), transcription runs on
MLX's own ops with the same words, and `transcribe doctor` says why in one line and how to get
the kernels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import JFK
from transcriber import native
from transcriber.native import build, loader
from transcriber.backend import NativeInference, inference_for


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """The loader reads its build record from tmp_path; the state is reloaded before and after."""
    monkeypatch.setattr(loader, "FOLDER", str(tmp_path))
    native.reset()
    yield tmp_path
    native.reset()


def test_no_compiler_on_path_records_why_and_the_install_step_succeeds(tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CXX", raising=False)
    info = build.build(str(tmp_path))
    assert info["error"] == "no C++ compiler found ($CXX, c++, g++, clang++)"
    assert json.loads((tmp_path / build.INFO).read_text())["error"] == info["error"]
    assert not list(tmp_path.glob("*.so"))
    # the install's own command, as the Makefile runs it: exit status 0, one line saying why
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run([sys.executable, build.__file__, str(out)], capture_output=True, text=True,
                          env={**os.environ, "PATH": str(empty)})
    assert proc.returncode == 0, proc.stderr
    assert "native kernels not built (no C++ compiler found" in proc.stdout
    assert (out / build.INFO).exists()


def test_a_failing_compiler_records_the_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "/bin/false")
    info = build.build(str(tmp_path))
    assert info["error"].startswith("build failed: ") and info["paths"] == []
    assert not list(tmp_path.glob("*.so"))


@pytest.mark.parametrize("record,why", [
    (None, "not built (reinstall with a C++ compiler"),
    ({"error": "no C++ compiler found ($CXX, c++, g++, clang++)"}, "not built (no C++ compiler found"),
    ({"error": "build failed: avx512: c++ exited with 1"}, "not built (build failed"),
    ({"format": 1, "error": None, "mlx": "0.0.1", "paths": ["portable"]}, "not built by this version (an older build"),
])
def test_doctor_says_why_in_one_line_and_mlx_serves(elsewhere, record, why):
    if record is not None:
        (elsewhere / build.INFO).write_text(json.dumps(record))
    assert native.ops() is None
    line = native.status().line()
    assert line.startswith(f"native kernels: {why}") and "make install" in line and "\n" not in line
    from transcriber.doctor import report

    assert line in report()


def test_without_kernels_jfk_transcribes_to_the_same_words(model, elsewhere):
    import transcriber

    (elsewhere / build.INFO).write_text(json.dumps({"error": "no C++ compiler found ($CXX, c++, g++, clang++)"}))
    assert not isinstance(inference_for(model), NativeInference)
    without = transcriber.transcribe(JFK, model)
    loader.FOLDER = build.HERE  # the real build, when there is one (the fixture restores it)
    native.reset()
    with_kernels = transcriber.transcribe(JFK, model)
    assert [w.text for w in without.words] == [w.text for w in with_kernels.words]
    assert [round(w.start, 2) for w in without.words] == [round(w.start, 2) for w in with_kernels.words]


def test_doctor_names_the_path_and_self_check_of_every_kernel_kind():
    """With the kernels built: one line per kind with the ISA serving it and its self-check, and
    what serves the encoder and the decoder's passes."""
    native.reset()
    status = native.status()
    if status.path is None:
        pytest.skip(f"kernels not built here: {status.line()}")
    from transcriber.doctor import report

    text = report()
    assert status.checks, "no kernel kind was checked"
    for kind, note in status.checks.items():
        assert f"  {kind}: {status.isa}, self-check {'passed' if note is None else note}" in text
    assert "encoder: native bf16 GEMM on " in text
    assert "decoder passes (prompts, word timing; batch 1): native bf16 GEMM and attention on " in text
