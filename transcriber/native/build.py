"""Build the native kernels (src/kernels.cpp, src/gemm.cpp) into one shared library, next to this file.

Run by the install (``make install``: ``python transcriber/native/build.py``) with the
machine's C++ compiler ($CXX, else c++, g++, clang++ on PATH). It never fails the install: a
missing compiler or a failed build writes the reason into ``build.json``, and transcription
runs on MLX's own ops (``transcribe doctor`` says why and how to get the kernels).

The source is compiled once per instruction set (x86_64: avx512, avx2, portable; aarch64:
neon, the baseline there) into one library whose exported names carry the path
(``tk_avx512_linear``); loader.py picks one at run time from the CPU's flags. ``build.json``
records the paths built and the MLX version the kernels were built and checked against.

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
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = [os.path.join(HERE, "src", name) for name in ("kernels.cpp", "gemm.cpp")]
LIBRARY = "libtranscriber_kernels.so"
INFO = "build.json"
FORMAT = 1

_COMMON = ["-O3", "-std=c++17", "-fPIC", "-fno-math-errno", "-ffp-contract=fast", "-fvisibility=hidden",
           "-fno-exceptions", "-Wall"]
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


def _mlx_version() -> str | None:
    for dist in ("mlx", "mlx-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


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


def build(out_dir: str = HERE) -> dict:
    """Compile every path that builds, link them into one library; returns (and writes) the
    build record: {"format", "mlx", "machine", "compiler", "paths", "failed", "error"}."""
    machine = platform.machine()
    info = {"format": FORMAT, "mlx": _mlx_version(), "machine": machine, "compiler": None,
            "paths": [], "failed": {}, "error": None}
    cxx = compiler()
    target = os.path.join(out_dir, LIBRARY)
    if os.path.exists(target):
        os.remove(target)  # never leave an older library next to a new record
    if not sys.platform.startswith("linux"):
        info["error"] = f"not built on {sys.platform} (MLX's own ops there)"
    elif cxx is None:
        info["error"] = "no C++ compiler found ($CXX, c++, g++, clang++)"
    else:
        info["compiler"] = cxx
        _compile(cxx.split(), paths_for(machine), target, info)
    with open(os.path.join(out_dir, INFO), "w") as f:
        json.dump(info, f, indent=1)
    return info


def _compile(cxx: list[str], paths: dict[str, list[str]], target: str, info: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # OpenMP for the two-thread projection and heads; without it (a clang lacking libomp)
        # the pragmas are ignored and everything runs on the caller's thread
        probe = os.path.join(tmp, "omp.cpp")
        with open(probe, "w") as f:
            f.write("int main() { int n = 0;\n#pragma omp parallel\n n = 1; return n - 1; }\n")
        omp = ["-fopenmp"] if _run([*cxx, "-fopenmp", probe, "-o", os.path.join(tmp, "omp")]) is None else []
        info["openmp"] = bool(omp)
        objects = []
        for name, flags in paths.items():
            built = _compile_path(cxx, name, [*omp, *flags], tmp, info)
            if built:
                objects += built
                info["paths"].append(name)
        if not objects:
            info["error"] = "build failed: " + "; ".join(f"{k}: {v}" for k, v in info["failed"].items())
            return
        err = _run([*cxx, "-shared", *omp, *objects, "-o", target])
        if err:
            info["paths"], info["error"] = [], f"link failed: {err}"


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


def main(argv: list[str]) -> int:
    """``build.py [FOLDER]``: build into FOLDER (default: next to this file)."""
    info = build(argv[0] if argv else HERE)
    if info["error"]:
        print(f"transcriber: native kernels not built ({info['error']}); MLX's own ops will be used")
    else:
        print(f"transcriber: native kernels built ({', '.join(info['paths'])}) with {info['compiler']}")
    return 0  # never fail the install


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
