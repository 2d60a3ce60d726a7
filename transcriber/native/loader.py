"""Load the native kernel library of the path this CPU can run, and say why when none.

The path: $TRANSCRIBER_KERNELS (avx512, avx2, portable, neon, or off) when set, else the best
the CPU allows among the paths built. What the CPU allows is what it reports itself (cpuid,
through the small ``libtranscriber_cpu.so``; NEON from the auxiliary vector), which an emulator
answers truthfully; /proc/cpuinfo is the host's under qemu-user. A forced path the CPU cannot
run is refused (an illegal instruction would kill the process), with a note.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import sys
from dataclasses import dataclass

from transcriber.native import build
from transcriber import settings

ENV = "TRANSCRIBER_KERNELS"
FOLDER = build.HERE  # where build.py put the library and build.json
PATHS = ("avx512", "avx2", "neon", "portable")  # best first
HOW = ("reinstall with a C++ compiler on PATH (g++ or clang++): `make install`, or "
       "`pip install --force-reinstall --no-deps .` in the source")

# path -> the CPU features it needs (x86, named as /proc/cpuinfo names them) or the aarch64
# feature ("asimd" is NEON)
_NEEDS = {"avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "f16c"),
          "avx2": ("avx2", "fma", "f16c"), "neon": ("asimd",), "portable": ()}
# flags reported next to the path (what the CPU has; the kernels use the path's own set)
_EXTRAS = ("avx512_bf16", "avx512_vnni")


@dataclass(frozen=True)
class Loaded:
    """The library and the path serving, or why there is none (lib None, reason set)."""

    lib: ctypes.CDLL | None
    path: str | None
    isa: str  # e.g. "avx512 (+avx512_bf16, avx512_vnni)": the path and the CPU's extras
    reason: str | None = None
    flags: frozenset[str] = frozenset()  # what the CPU reported (``cpu_flags``), read once


# aarch64: getauxval(AT_HWCAP) bit 1 is HWCAP_ASIMD (NEON), as the kernel gives it to this process
_AT_HWCAP, _HWCAP_ASIMD = 16, 1 << 1


# x86: the bits of tk_cpu_features (src/cpu.cpp), in order
FEATURES = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512_vnni")


def cpu_flags() -> frozenset[str]:
    """The features this CPU reports: on x86 from cpuid (src/cpu.cpp, built with the kernels;
    none when it was not built), on aarch64 from AT_HWCAP."""
    if platform.machine().lower() in ("aarch64", "arm64"):
        return _arm_flags()
    try:
        probe = ctypes.CDLL(os.path.join(FOLDER, build.CPU_LIBRARY))
    except OSError:
        return frozenset()
    probe.tk_cpu_features.restype, probe.tk_cpu_features.argtypes = ctypes.c_uint, []
    bits = probe.tk_cpu_features()
    return frozenset(name for i, name in enumerate(FEATURES) if bits >> i & 1)


def _arm_flags() -> frozenset[str]:
    """NEON from the auxiliary vector, not /proc/cpuinfo: under qemu user emulation that file
    is the host's (x86 "flags", no "Features"), so NEON looked absent and x86 flags present."""
    try:
        getauxval = ctypes.CDLL(None).getauxval
        getauxval.restype, getauxval.argtypes = ctypes.c_ulong, [ctypes.c_ulong]
        return frozenset(["asimd"]) if getauxval(_AT_HWCAP) & _HWCAP_ASIMD else frozenset()
    except (OSError, AttributeError):
        return frozenset()


def runnable(path: str, flags: frozenset[str]) -> bool:
    return all(f in flags for f in _NEEDS.get(path, ("?",)))


def _describe(path: str, flags: frozenset[str]) -> str:
    extras = [f for f in _EXTRAS if f in flags] if path == "avx512" else []
    return f"{path} (+{', '.join(extras)})" if extras else path


def record() -> dict | None:
    """build.json, or None when the install never ran the build."""
    try:
        with open(os.path.join(FOLDER, build.INFO)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _choose(built: list[str], flags: frozenset[str]) -> tuple[str | None, str | None]:
    """(path, None) or (None, reason)."""
    forced = settings.get(ENV) or ""
    if forced in ("off", "none", "0"):
        return None, f"off ({ENV}={forced})"
    if forced:
        if forced not in PATHS:
            return None, f"off ({ENV}={forced} is not one of {', '.join(PATHS)}, off)"
        if forced not in built:
            return None, f"off ({ENV}={forced}: that path was not built; built: {', '.join(built) or 'none'})"
        if not runnable(forced, flags):
            return None, f"off ({ENV}={forced}: this CPU lacks {', '.join(f for f in _NEEDS[forced] if f not in flags)})"
        return forced, None
    for path in PATHS:
        if path in built and runnable(path, flags):
            return path, None
    return None, f"no built path runs on this CPU (built: {', '.join(built)})"


def library_file(path: str) -> str:
    return os.path.join(FOLDER, build.library(path))


def load() -> Loaded:
    """The library with one path chosen, or the one-line reason there is none."""
    if not sys.platform.startswith("linux"):
        return Loaded(None, None, "", f"not used on {sys.platform} (MLX's own ops)")
    info = record()
    if info is None:
        return Loaded(None, None, "", f"not built ({HOW})")
    if info.get("error"):
        return Loaded(None, None, "", f"not built ({info['error']}; {HOW})")
    if info.get("format") != build.FORMAT:
        return Loaded(None, None, "", f"not built by this version (an older build; {HOW})")
    if info.get("machine") != platform.machine():
        return Loaded(None, None, "", f"not built for {platform.machine()} (built on {info.get('machine')}; {HOW})")
    flags = cpu_flags()
    path, reason = _choose(list(info.get("paths", [])), flags)
    if path is None:
        return Loaded(None, None, "", reason)
    # libgomp reads this once, when it loads: threads that spin while they wait for work take
    # the core from the thread doing it on a shared 2-core machine (the encoder with 2 threads
    # ran 2x slower under load 3, and no slower than 1 thread once waiting threads sleep)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        lib = ctypes.CDLL(library_file(path))
    except OSError as e:
        return Loaded(None, None, "", f"not loadable ({e}; {HOW} again)")
    return Loaded(lib, path, _describe(path, flags), flags=flags)
