"""Build the native kernels (src/kernels.cpp, src/gemm.cpp): one shared library per instruction set.

Run by the package's own build (setup.py: ``pip install .``, ``pip install -e .``, a wheel,
an sdist) with the machine's C++ compiler ($CXX, else c++, g++, clang++ on PATH); also
runnable by path (``python transcriber/native/build.py [FOLDER]``). It never fails the
install: a missing compiler or a failed build writes the reason into ``build.json``, and
transcription runs on MLX's own ops (``transcribe doctor`` says why and how to get the kernels).

The sources are compiled once per instruction set (x86_64: avx512, avx2, portable; aarch64:
neon, the baseline there), each into a library of its own (``libtranscriber_kernels_avx2.so``,
exported names ``tk_avx2_linear``...), linked ``-Bsymbolic``: no code is shared between the
paths, so a path can never reach an instruction of another. (One library of all three once
kept a single copy of a template that every path instantiated, the AVX-512 one, and the avx2
path crashed on CPUs without AVX-512.) ``libtranscriber_cpu.so``, built with no instruction-set
flag, tells loader.py what the CPU itself reports. ``build.json`` records the paths built.

Run it by path, not as ``-m transcriber.native.build``: importing the package would load MLX.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = [os.path.join(HERE, "src", name) for name in ("kernels.cpp", "gemm.cpp", "int8.cpp", "pool.cpp")]
CPU_SOURCE = os.path.join(HERE, "src", "cpu.cpp")
CPU_LIBRARY = "libtranscriber_cpu.so"
INFO = "build.json"
FORMAT = 2


def library(path: str) -> str:
    """The file name of one path's library."""
    return f"libtranscriber_kernels_{path}.so"


_COMMON = ["-O3", "-std=c++17", "-fPIC", "-fno-math-errno", "-ffp-contract=fast", "-fvisibility=hidden",
           "-fvisibility-inlines-hidden", "-fno-exceptions", "-Wall", "-pthread"]
# each library binds its own calls to its own code (a std:: template it instantiates included)
_LINK = ["-shared", "-Wl,-Bsymbolic", "-pthread"]
# path -> ISA flags. avx512 needs F+BW+VL+DQ (Skylake-SP and later, Zen 4); avx2 needs FMA.
_X86 = {"avx512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c",
                   "-mprefer-vector-width=512"],
        "avx2": ["-mavx2", "-mfma", "-mf16c"],
        "portable": []}
_ARM = {"neon": [], "portable": ["-fno-tree-vectorize"]}


def paths_for(machine: str) -> dict[str, list[str]]:
    """The paths built on this architecture and their compiler flags."""
    m = machine.lower()
    if m in ("x86_64", "amd64"):
        return _X86
    if m in ("aarch64", "arm64"):
        return _ARM
    return {"portable": []}


def compiler() -> str | None:
    """The C++ compiler: $CXX when set (even if it is not there: the user asked for it), else
    the first of c++, g++, clang++ on PATH."""
    cxx = os.environ.get("CXX", "").strip()
    if cxx:
        return shutil.which(cxx.split()[0]) and cxx
    return next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)


def _run(cmd: list[str]) -> str | None:
    """None on success, else the compiler's first error line."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{cmd[0]}: {e}"
    if proc.returncode == 0:
        return None
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return f"{os.path.basename(cmd[0])} exited with {proc.returncode}: {(errors or lines or ['no output'])[0].strip()}"


def build(out_dir: str = HERE, machine: str | None = None) -> dict:
    """Compile every path that builds, each into its library; returns (and writes) the build
    record: {"format", "machine", "compiler", "paths", "failed", "error"}. ``machine``: the
    architecture built for (default: this one; another needs a cross compiler in $CXX)."""
    machine = machine or platform.machine()
    info = {"format": FORMAT, "machine": machine, "compiler": None, "paths": [], "failed": {}, "error": None}
    cxx = compiler()
    os.makedirs(out_dir, exist_ok=True)
    for old in _built_files(out_dir):
        os.remove(old)  # never leave an older library next to a new record
    if not sys.platform.startswith("linux"):
        info["error"] = f"not built on {sys.platform} (MLX's own ops there)"
    elif cxx is None:
        info["error"] = "no C++ compiler found ($CXX, c++, g++, clang++)"
    else:
        info["compiler"] = cxx
        _compile(cxx.split(), paths_for(machine), out_dir, info)
    with open(os.path.join(out_dir, INFO), "w") as f:
        json.dump(info, f, indent=1)
    return info


def _built_files(folder: str) -> list[str]:
    """The libraries a build left in folder (this format's and the one-library format's)."""
    return [os.path.join(folder, n) for n in os.listdir(folder)
            if n.startswith("libtranscriber_") and n.endswith(".so")]


def _compile(cxx: list[str], paths: dict[str, list[str]], out_dir: str, info: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # OpenMP for the two-thread projection and heads; without it (a clang lacking libomp)
        # the pragmas are ignored and everything runs on the caller's thread
        probe = os.path.join(tmp, "omp.cpp")
        with open(probe, "w") as f:
            f.write("int main() { int n = 0;\n#pragma omp parallel\n n = 1; return n - 1; }\n")
        omp = ["-fopenmp"] if _run([*cxx, "-fopenmp", probe, "-o", os.path.join(tmp, "omp")]) is None else []
        info["openmp"] = bool(omp)
        if info["machine"].lower() in ("x86_64", "amd64"):  # aarch64: NEON from the auxiliary vector
            err = _run([*cxx, *_COMMON, *_LINK, CPU_SOURCE, "-o", os.path.join(out_dir, CPU_LIBRARY)])
            if err:
                info["error"] = f"build failed: cpu features: {err}"
                return
        for name, flags in paths.items():
            objects = _compile_path(cxx, name, [*omp, *flags], tmp, info)
            if objects:
                err = _run([*cxx, *_LINK, *omp, *objects, "-o", os.path.join(out_dir, library(name))])
                if err:
                    info["failed"][name] = f"link failed: {err}"
                else:
                    info["paths"].append(name)
        if not info["paths"]:
            info["error"] = "build failed: " + "; ".join(f"{k}: {v}" for k, v in info["failed"].items())


# paths whose GEMM also gets vdpbf16ps (AVX-512 BF16), chosen at run time by the CPU's flags
_BF16 = {"avx512": ["-DTK_BF16"]}


def _compile_path(cxx: list[str], name: str, flags: list[str], tmp: str, info: dict) -> list[str] | None:
    """Both sources for one path -> their objects, or None (the reason in info["failed"]). A
    compiler without AVX-512 BF16 builds the path without vdpbf16ps (info["no_bf16"])."""
    objects = []
    for source in SOURCES:
        obj = os.path.join(tmp, f"{name}-{os.path.basename(source)}.o")
        base = [*cxx, *_COMMON, *flags, f"-DTK_PATH={name}", "-c", source, "-o", obj]
        extra = _BF16.get(name, []) if source.endswith("gemm.cpp") else []
        err = _run([*base, *extra])
        if err and extra:
            info["no_bf16"] = err
            err = _run(base)
        if err:
            info["failed"][name] = err
            return None
        objects.append(obj)
    return objects


def summary(info: dict) -> str:
    """One line: what was built, or why nothing."""
    if info["error"]:
        return f"transcriber: native kernels not built ({info['error']}); MLX's own ops will be used"
    return f"transcriber: native kernels built ({', '.join(info['paths'])}) with {info['compiler']}"


def main(argv: list[str]) -> int:
    """``build.py [FOLDER]``: build into FOLDER (default: next to this file)."""
    print(summary(build(argv[0] if argv else HERE)))
    return 0  # never fail the install


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
