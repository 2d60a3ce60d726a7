"""Every instruction-set path where it must run, and a path that cannot run never kills a run.

On an AVX-512 machine the avx2 and portable paths run on a CPU that has more than they use, so
a path that reaches a wider instruction (as one did: the three paths once shared a template's
AVX-512 copy, and every command died of SIGILL on AVX2-only CPUs) passes there unseen. So:

- each path's library is disassembled: no instruction of a wider set in it (any x86 machine);
- under Debian's qemu-user (``apt-get install qemu-user``; CI installs it), ``qemu-x86_64 -cpu
  max`` emulates a CPU with AVX2 and FMA but no AVX-512: there the loader must pick avx2 from
  what the CPU reports (cpuid), the kernel tests pass on the avx2 and portable paths inside the
  emulated process, and the real model transcribes examples/jfk.flac on the avx2 path (the one
  an AVX2 CPU's users get) to the same JSON as natively (not the portable path's: emulated,
  that cost 4 minutes of CI; its kernel tests and self-check run emulated, its decoder step and
  encoder on the real model natively, tests/native/test_native.py);
- on aarch64's paths (NEON, portable), built by build.py with Debian's cross compiler, a small
  C++ driver (tests/native_harness.cpp) under qemu-aarch64 gives this CPU's outputs;
- a self-check child that crashes (SIGILL) or disagrees turns the kernels off for the run, with
  one line, and the run goes on on MLX's ops.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import JFK, ROOT
from transcriber import native
from transcriber.native import build, loader

BUILT = (loader.record() or {}).get("paths", [])
X86 = platform.machine().lower() in ("x86_64", "amd64")
QEMU = shutil.which("qemu-x86_64")
needs_x86_build = pytest.mark.skipif(not (X86 and BUILT), reason="native kernels not built here, or not x86_64")
needs_qemu = pytest.mark.skipif(not (X86 and BUILT and QEMU),
                                reason="qemu-x86_64 not installed (Debian: apt-get install qemu-user)")

# what each path's library may not contain: registers of a wider instruction set (zmm, the
# upper 16 xmm/ymm of AVX-512, its mask registers k1-k7; ymm for the SSE2 baseline)
_WIDER = {"avx2": r"%zmm|%[xy]mm(1[6-9]|2\d|3[01])\b|%k[1-7]\b", "portable": r"%[yz]mm"}


@needs_x86_build
@pytest.mark.parametrize("path", ["avx2", "portable"])
def test_a_path_library_holds_no_instruction_of_a_wider_set(path):
    if path not in BUILT:
        pytest.skip(f"{path} not built here")
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump not installed (binutils)")
    for name in (build.library(path), build.CPU_LIBRARY):
        text = subprocess.run([objdump, "-d", "--no-show-raw-insn", os.path.join(loader.FOLDER, name)],
                              capture_output=True, text=True, check=True).stdout
        assert "\tret" in text, "nothing disassembled"
        found = [ln for ln in text.splitlines() if re.search(_WIDER[path], ln)]
        assert not found, f"{name}: {len(found)} wider instructions, e.g. {found[0]}"


def _emulated(args: list[str], path: str | None = None, timeout: float = 600, **env) -> subprocess.CompletedProcess:
    """``python ARGS`` on qemu's emulated CPU (AVX2, no AVX-512), with $TRANSCRIBER_KERNELS=path."""
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    full.pop("TRANSCRIBER_KERNELS", None)
    if path:
        full["TRANSCRIBER_KERNELS"] = path
    return subprocess.run([QEMU, "-cpu", "max", sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=full, stdin=subprocess.DEVNULL)


@needs_qemu
def test_the_emulated_avx2_cpu_gets_the_avx2_path_and_its_self_check_passes(tmp_path):
    proc = _emulated(["-m", "transcriber.app", "doctor"], TRANSCRIBER_CACHE=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("native kernels:"))
    assert line.startswith("native kernels: avx2; self-check passed: "), line
    assert "avx512" not in line


@needs_qemu
@pytest.mark.parametrize("path", ["avx2", "portable"])
def test_the_checks_pass_inside_the_emulated_cpu(path):
    """The self-check in the emulated process itself (its child would run on the host CPU)."""
    proc = _emulated(["-m", "transcriber.native.selfcheck"], path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdict = proc.stdout.strip().splitlines()[-1]
    assert '"*"' not in verdict and "differs" not in verdict and '": null' in verdict, verdict


# the kernel tests of test_native.py (the model's decoder and encoder are covered by jfk below)
_MODEL_TESTS = "decoder_step or cross_keys or bf16_encoder or native_encoder or encoder_on_the_kernels or failing"


@needs_qemu
@pytest.mark.slow
def test_the_kernel_tests_pass_on_every_path_the_emulated_cpu_runs():
    proc = _emulated(["-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/native/test_native.py",
                      "-k", f"not ({_MODEL_TESTS})", "-o", "addopts="], timeout=1200)
    tail = proc.stdout[-3000:]
    assert proc.returncode == 0, tail
    assert re.search(r"\d+ passed", tail) and "skipped" not in tail, tail
    ran = {m.group(1) for m in re.finditer(r"-?(avx512|avx2|portable)\] PASSED", proc.stdout)}
    assert ran == {"avx2", "portable"}, ran


@needs_qemu
@pytest.mark.slow
@pytest.mark.parametrize("path", ["avx2"])
def test_jfk_on_the_emulated_cpu_is_the_native_transcript(tmp_path, path):
    outputs = {}
    for where in ("native", "emulated"):
        out = tmp_path / where
        args = ["-m", "transcriber.app", str(JFK), "-f", "json", "-o", str(out), "--db", str(tmp_path / f"{where}.db")]
        if where == "native":
            env = {**os.environ, "TRANSCRIBER_KERNELS": path}
            proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                                  timeout=600, stdin=subprocess.DEVNULL)
        else:
            proc = _emulated(args, path, timeout=1500)
        assert proc.returncode == 0, f"{where}: {proc.stderr[-2000:]}"
        outputs[where] = (out / "jfk.json").read_text()
    assert outputs["emulated"] == outputs["native"]
    assert "country" in outputs["native"]


# -- aarch64: the NEON and portable paths, cross-built, under qemu-aarch64 ----------------------

CROSS = shutil.which("aarch64-linux-gnu-g++")
QEMU_ARM = shutil.which("qemu-aarch64")
ARM_ROOT = Path("/usr/aarch64-linux-gnu")  # the cross toolchain's libraries, for qemu -L
HARNESS = ROOT / "tests" / "native_harness.cpp"


def _outputs(text: str) -> dict[str, list[float]]:
    return {name: [float(v) for v in rest] for name, *rest in (ln.split() for ln in text.splitlines())}


@pytest.mark.skipif(not (X86 and BUILT and CROSS and QEMU_ARM and ARM_ROOT.is_dir()),
                    reason="no aarch64 cross compiler or qemu-aarch64 (Debian: apt-get install qemu-user "
                           "g++-aarch64-linux-gnu)")
def test_the_aarch64_paths_built_by_build_py_agree_with_this_cpu_under_qemu_aarch64(tmp_path, monkeypatch):
    """build.py's aarch64 build (neon, portable) with the cross compiler; tests/native_harness.cpp
    drives each library under qemu-aarch64 and, built for this machine, the native avx2 (or
    portable) library, which passed its checks against MLX: every output agrees to the checks'
    tolerance."""
    arm = tmp_path / "arm"
    monkeypatch.setenv("CXX", CROSS)
    info = build.build(str(arm), machine="aarch64")
    assert info["paths"] == ["neon", "portable"] and not info["failed"], info
    subprocess.run([CROSS, "-O2", "-o", str(arm / "harness"), str(HARNESS), "-ldl"], check=True)
    here = "avx2" if "avx2" in BUILT and loader.runnable("avx2", loader.cpu_flags()) else "portable"
    subprocess.run(["g++", "-O2", "-o", str(tmp_path / "harness"), str(HARNESS), "-ldl"], check=True)
    want = _outputs(subprocess.run([str(tmp_path / "harness"), loader.library_file(here), here],
                                   capture_output=True, text=True, check=True).stdout)
    assert len(want) >= 20
    from transcriber.native.checks import TOLERANCE

    for path in ("neon", "portable"):
        proc = subprocess.run([QEMU_ARM, "-L", str(ARM_ROOT), str(arm / "harness"), str(arm / build.library(path)),
                               path], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        got = _outputs(proc.stdout)
        assert got.keys() == want.keys()
        for name, ref in want.items():
            scale = max(max(abs(v) for v in ref), 1e-6)
            worst = max(abs(a - b) for a, b in zip(got[name], ref))
            assert len(got[name]) == len(ref) and worst <= TOLERANCE * scale, f"{path} {name}: {worst / scale:.2e}"


# -- a self-check that crashes or disagrees --------------------------------------------------------


_SIGILL = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]


@needs_x86_build
def test_a_self_check_that_crashes_turns_the_kernels_off_and_the_run_goes_on(fresh_verdicts, monkeypatch, tmp_path):
    monkeypatch.setattr(fresh_verdicts, "CHILD", _SIGILL)
    status = native.status()
    assert status.path is None and native.ops() is None
    assert "self-check crashed: SIGILL (an instruction this CPU lacks)" in status.line()
    from transcriber.app.cli.main import main

    args = [str(JFK), "-f", "json", "-o", str(tmp_path / "out"), "--db", str(tmp_path / "jobs.db")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    notes = [ln for ln in result.output.splitlines() if "native kernels" in ln]
    assert len(notes) == 1 and "SIGILL" in notes[0] and "MLX's own ops serve" in notes[0], result.output
    assert "country" in (tmp_path / "out" / "jfk.json").read_text()
    # the verdict is cached: the next process reads it (no child), and the note is not repeated
    monkeypatch.setattr(fresh_verdicts, "CHILD", ["/nonexistent/never-run"])
    native.reset()
    assert "SIGILL" in native.status().line()
    again = CliRunner().invoke(main, [*args[:-1], str(tmp_path / "again.db")])
    assert again.exit_code == 0 and "native kernels" not in again.output, again.output


def test_a_self_check_verdict_is_cached_per_library_and_private(fresh_verdicts, tmp_path):
    status = native.status()
    if status.path is None:
        pytest.skip(f"kernels not built here: {status.line()}")
    files = list((tmp_path / "kernels").glob("*.json"))
    assert len(files) == 1 and (files[0].stat().st_mode & 0o777) == 0o600
    assert (tmp_path / "kernels").stat().st_mode & 0o077 == 0
    fresh_verdicts.CHILD, before = ["/nonexistent/never-run"], fresh_verdicts.CHILD
    try:
        native.reset()
        assert native.status().checks == status.checks  # read from the cache, no child
    finally:
        fresh_verdicts.CHILD = before


def test_without_kernels_the_first_run_says_so_once(tmp_path, monkeypatch):
    from transcriber.native import selfcheck

    monkeypatch.setattr(loader, "FOLDER", str(tmp_path))  # no build record there
    monkeypatch.setattr(selfcheck, "folder", lambda: tmp_path / "kernels")
    native.reset()
    try:
        first, second = native.first_run_note(), native.first_run_note()
    finally:
        native.reset()
    assert first and first.startswith("note: native kernels: not built (reinstall with a C++ compiler")
    assert "\n" not in first and second is None


def test_kernels_turned_off_on_purpose_say_nothing(tmp_path, monkeypatch):
    from transcriber.native import selfcheck

    monkeypatch.setenv("TRANSCRIBER_KERNELS", "off")
    monkeypatch.setattr(selfcheck, "folder", lambda: tmp_path / "kernels")
    native.reset()
    try:
        assert native.first_run_note() is None
    finally:
        native.reset()
