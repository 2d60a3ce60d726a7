"""Give MLX's CPU matmuls a fast BLAS on Linux, from ``pip install`` alone.

MLX's Linux CPU wheel links a bundled reference (netlib) BLAS: float32 matmul runs at 2-8
GFLOP/s, and Whisper's encoder and decoder are mostly float32 matmuls. libmlx.so calls
``cblas_sgemm`` through one slot of its global offset table (GOT). After ``import mlx.core`` this
module rewrites that slot, in memory, to the ``sgemm`` of a faster library:

- ``scipy-openblas32`` (a PyPI wheel, a Linux dependency of transcriber): a self-contained
  OpenBLAS with runtime CPU dispatch whose symbols carry a ``scipy_`` prefix, so the dynamic
  loader could never bind MLX to it by name; writing the slot is the only way in;
- a system OpenBLAS (``libopenblas.so.0``), if one is installed;
- MKL (``libmkl_rt``), if the ``mkl`` wheel is installed.

Which one (if any) and with how many threads is decided by measurement, not by name: a probe
runs each candidate in a subprocess (a crash there costs nothing), times MLX matmuls of Whisper's
shapes and keeps the fastest. The result is cached per machine (CPU model, core count, library
versions) under the cache directory, so later imports only apply the cached choice (a few ms).

Guards, so that nothing ever computes a wrong result: the slot is only rewritten while it points
into the ``libblas*`` that libmlx.so was linked against (else someone else already chose, or MLX
changed how it links BLAS); after writing it, a small matmul (plain, transposed, batched) is
compared with numpy, and the old pointer is restored if it differs. Any failure leaves MLX on
its own BLAS with one logged note.

``TRANSCRIBER_BLAS`` overrides the automatic choice:

- ``none``: leave MLX's bundled BLAS alone (for comparisons);
- a name or comma-separated names (``scipy-openblas32``, ``system-openblas``, ``mkl``,
  ``bundled``): measure only these and use the fastest;
- a path containing ``/``: use that shared library (it must export ``cblas_sgemm`` or
  ``scipy_cblas_sgemm``), without measuring.

``TRANSCRIBER_BLAS_THREADS=N`` overrides the measured thread count (several processes sharing the
cores, such as Ray workers, each want fewer threads than one process alone); ``set_threads``
does the same from Python.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import importlib.util
import json
import logging
import mmap
import os
import platform
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

ENV = "TRANSCRIBER_BLAS"
THREADS_ENV = "TRANSCRIBER_BLAS_THREADS"
BUNDLED = "bundled"
NAMES = (BUNDLED, "scipy-openblas32", "system-openblas", "mkl")
CACHE_FORMAT = 1

# Whisper's typical float32 products (tiny: width 384, 1500 encoder frames, 6 heads of 64):
# a linear layer, and attention scores as a batched matmul. GFLOP/s over both decides.
_SHAPES = (((1500, 384), (384, 1536)), ((6, 1500, 64), (6, 64, 1500)))

_SYSTEM_OPENBLAS = (  # where distributions put it (the pthread variant first)
    "/usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/*-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)


@dataclass(frozen=True)
class Library:
    """A BLAS that can serve MLX's sgemm: where it is and what it calls its functions."""

    name: str
    path: str | None  # None: MLX's bundled BLAS, already loaded
    sgemm: str = "cblas_sgemm"
    set_threads: str | None = None  # int -> void, where the library has one
    get_threads: str | None = None
    version: str = ""  # for the cache key
    rtld_global: bool = False  # MKL's dispatcher wants its symbols global


@dataclass(frozen=True)
class Choice:
    """What serves MLX's sgemm in this process, as decided by ``apply``."""

    name: str  # one of NAMES, "path" (forced by TRANSCRIBER_BLAS=/path), or "platform"
    path: str | None = None
    threads: int | None = None  # what we set; None: the library's default
    gflops: float | None = None  # measured by the probe
    note: str | None = None  # why MLX is on its bundled BLAS, when that is a fallback


current = Choice(BUNDLED)
loaded_path: str | None = None  # the faster library serving MLX now, or None (jobs/cli.py reads it)
cache_file: str | None = None  # the probe result used, if any

_library: Library | None = None  # the library behind ``current``
_handles: dict[str, ctypes.CDLL] = {}  # libraries we bound: kept loaded while the slot may use them
_original: int | None = None  # the slot's value before we first wrote it


class _Failure(Exception):
    """A reason to leave MLX on its bundled BLAS."""


# -- libmlx.so's sgemm slot ------------------------------------------------------------------------

# e_machine -> relocation types that fill a GOT slot with a symbol's address (JUMP_SLOT, GLOB_DAT)
_SLOT_RELOCS = {62: (7, 6), 183: (1026, 1025)}  # x86_64, aarch64
_RELA = 24  # sizeof(Elf64_Rela), also sizeof(Elf64_Sym)


@dataclass(frozen=True)
class _Slots:
    offsets: tuple[int, ...]  # virtual addresses (relative to the load base) of the GOT slots
    relro: tuple[int, int] | None  # (vaddr, size) made read-only after relocation
    needed: tuple[str, ...]  # DT_NEEDED: the libraries libmlx.so was linked against


def _segments(m, path: str) -> tuple[list, tuple[int, int], tuple[int, int] | None]:
    """An ELF's PT_LOAD (vaddr, offset, size) list, its PT_DYNAMIC (offset, size) and its
    PT_GNU_RELRO (vaddr, size) or None."""
    phoff, = struct.unpack_from("<Q", m, 32)
    phentsize, phnum = struct.unpack_from("<HH", m, 54)
    loads, dynamic, relro = [], None, None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, p_memsz = struct.unpack_from("<IIQQQQQ", m, phoff + i * phentsize)
        if p_type == 1:  # PT_LOAD
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:  # PT_DYNAMIC
            dynamic = (p_offset, p_filesz)
        elif p_type == 0x6474E552:  # PT_GNU_RELRO
            relro = (p_vaddr, p_memsz)
    if dynamic is None:
        raise _Failure(f"{os.path.basename(path)} has no dynamic section")
    return loads, dynamic, relro


def _dynamic_tags(m, dynamic: tuple[int, int]) -> tuple[dict, list[int]]:
    """The dynamic section's tags (first value of each) and its DT_NEEDED string offsets."""
    tags, needed_at = {}, []
    for o in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", m, o)
        if tag == 0:  # DT_NULL
            break
        if tag == 1:  # DT_NEEDED
            needed_at.append(value)
        else:
            tags.setdefault(tag, value)
    return tags, needed_at


def _symbol_slots(m, at, tags: dict, names: set, machine: int) -> list[int]:
    """The offsets of the relocations (DT_JMPREL and DT_RELA) of the GOT-slot kinds whose
    symbol's st_name is one of ``names``."""
    import numpy as np

    offsets = []
    for table, size in ((23, 2), (7, 8)):  # DT_JMPREL/DT_PLTRELSZ, DT_RELA/DT_RELASZ
        if table not in tags or not names:
            continue
        rela = np.frombuffer(m, dtype="<u8", count=tags[size] // 8, offset=at(tags[table])).reshape(-1, 3)
        kinds, syms = rela[:, 1] & 0xFFFFFFFF, rela[:, 1] >> 32
        keep = np.isin(kinds, _SLOT_RELOCS[machine])
        symtab = at(tags[6])  # DT_SYMTAB; st_name is the first field of Elf64_Sym
        offsets += [int(off) for off, sym in zip(rela[keep, 0], syms[keep])
                    if struct.unpack_from("<I", m, symtab + _RELA * int(sym))[0] in names]
        del rela, kinds, syms, keep  # numpy views pin the mmap; release before it closes
    return offsets


def _elf_slots(path: str, symbol: str = "cblas_sgemm") -> _Slots:
    """Find, from a 64-bit little-endian ELF's dynamic relocations, the GOT slots holding
    ``symbol``'s address. Reads only the headers and tables it needs (libmlx.so is ~20 MB)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"\x7fELF" or m[4] != 2 or m[5] != 1:
            raise _Failure(f"{os.path.basename(path)} is not a 64-bit little-endian ELF")
        machine, = struct.unpack_from("<H", m, 18)
        if machine not in _SLOT_RELOCS:
            raise _Failure(f"unsupported architecture (ELF machine {machine})")
        loads, dynamic, relro = _segments(m, path)

        def at(vaddr: int) -> int:  # virtual address -> file offset
            for va, off, size in loads:
                if va <= vaddr < va + size:
                    return off + vaddr - va
            raise _Failure(f"{os.path.basename(path)}: address {vaddr:#x} is in no segment")

        tags, needed_at = _dynamic_tags(m, dynamic)
        strtab = m[at(tags[5]):at(tags[5]) + tags[10]]  # DT_STRTAB, DT_STRSZ
        needed = tuple(strtab[v:strtab.index(b"\0", v)].decode() for v in needed_at)
        # Every place the string "symbol\0" starts is a valid st_name for it (suffixes are shared).
        want, names = symbol.encode() + b"\0", set()
        hit = strtab.find(want)
        while hit >= 0:
            names.add(hit)
            hit = strtab.find(want, hit + 1)
        offsets = _symbol_slots(m, at, tags, names, machine)
    return _Slots(tuple(offsets), relro, needed)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


class _LinkMap(ctypes.Structure):
    _fields_ = [("l_addr", ctypes.c_size_t), ("l_name", ctypes.c_char_p)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
_libc.dlinfo.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]


def _owner(address: int | None) -> str | None:
    """The file of the loaded object that contains ``address`` (dladdr), or None."""
    info = _DlInfo()
    if not address or not _libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.fsdecode(info.dli_fname)


def _libmlx_path() -> str:
    import mlx.core as mx

    return os.path.join(os.path.dirname(mx.__file__), "lib", "libmlx.so")


@dataclass(frozen=True)
class _Site:
    """libmlx.so's sgemm slots in this process."""

    addresses: tuple[int, ...]
    relro: tuple[int, int] | None  # absolute
    bundled: tuple[str, ...]  # basenames of the BLAS libmlx.so was linked against


_site_cache: _Site | None = None


def _site() -> _Site:
    global _site_cache
    if _site_cache is None:
        path = _libmlx_path()
        if not os.path.isfile(path):
            raise _Failure(f"no {os.path.basename(path)} next to mlx.core (unknown MLX layout)")
        slots = _elf_slots(path)
        if not slots.offsets:
            raise _Failure(f"{os.path.basename(path)} has no cblas_sgemm slot (unknown MLX layout)")
        # The load base: RTLD_DI_LINKMAP of the already-loaded libmlx.so (dlopen only finds it).
        link = ctypes.POINTER(_LinkMap)()
        if _libc.dlinfo(ctypes.CDLL(path)._handle, 2, ctypes.byref(link)) != 0:
            raise _Failure(f"cannot find where {os.path.basename(path)} is loaded")
        base = link.contents.l_addr
        relro = (base + slots.relro[0], slots.relro[1]) if slots.relro else None
        _site_cache = _Site(tuple(base + o for o in slots.offsets), relro,
                            tuple(n for n in slots.needed if n.startswith("libblas")))
    return _site_cache


def _read_slot() -> int:
    return ctypes.c_void_p.from_address(_site().addresses[0]).value or 0


def _write_slots(value: int) -> None:
    site, page = _site(), mmap.PAGESIZE
    for address in site.addresses:
        protected = site.relro and site.relro[0] <= address < site.relro[0] + site.relro[1]
        start = address & ~(page - 1)
        if protected and _libc.mprotect(start, page, 3) != 0:  # PROT_READ | PROT_WRITE
            raise _Failure(f"mprotect failed: {os.strerror(ctypes.get_errno())}")
        ctypes.c_void_p.from_address(address).value = value
        if protected:
            _libc.mprotect(start, page, 1)  # back to PROT_READ, as the loader left it


def served_by() -> str | None:
    """The file of the library whose code MLX's sgemm slot points at now (dladdr on the slot,
    not our bookkeeping), or None where there is no such slot."""
    try:
        return _owner(_read_slot())
    except _Failure:
        return None


def _matmul_ok() -> bool:
    """A small plain, transposed and batched MLX float32 matmul agrees with numpy in float64."""
    import mlx.core as mx
    import numpy as np

    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 45, 67), dtype=np.float32)
    b = rng.standard_normal((3, 45, 33), dtype=np.float32)
    want = np.swapaxes(a, 1, 2).astype(np.float64) @ b.astype(np.float64)
    checks = ((mx.swapaxes(mx.array(a[0]), 0, 1), mx.array(b[0]), want[0]),  # a transposed operand
              (mx.array(np.ascontiguousarray(a[0].T)), mx.array(b[0]), want[0]),
              (mx.swapaxes(mx.array(a), 1, 2), mx.array(b), want))  # batched
    for x, y, expected in checks:
        got = np.array(mx.matmul(x, y, stream=mx.cpu))
        if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-4, atol=1e-4):
            return False
    return True


def _address(handle: ctypes.CDLL, symbol: str) -> int:
    """The address of ``symbol`` in a loaded library (a seam for tests)."""
    return ctypes.cast(getattr(handle, symbol), ctypes.c_void_p).value


def _bind(lib: Library) -> None:
    """Point MLX's sgemm slot at ``lib`` (the bundled BLAS: back to the original), then check a
    matmul; on any problem restore the previous pointer and raise _Failure."""
    global _original
    site, now = _site(), _read_slot()
    if _original is None:
        owner = _owner(now)
        if not owner or os.path.basename(owner) not in site.bundled:
            raise _Failure(f"MLX's sgemm is served by {owner or 'an unknown object'}, not by its "
                           f"bundled {', '.join(site.bundled) or 'libblas'}: left alone")
        _original = now
    if lib.path is None:
        _write_slots(_original)
        return
    try:
        handle = _handles.get(lib.path) or ctypes.CDLL(
            lib.path, mode=ctypes.RTLD_GLOBAL if lib.rtld_global else ctypes.RTLD_LOCAL)
        target = _address(handle, lib.sgemm)
    except (OSError, AttributeError) as e:
        raise _Failure(f"{lib.name}: cannot load {lib.sgemm} from {lib.path}: {e}") from e
    _handles[lib.path] = handle
    _write_slots(target)
    if not _matmul_ok():
        _write_slots(now)
        raise _Failure(f"{lib.name} ({lib.path}) gave a wrong matmul result: not used")


def _set_threads(lib: Library, n: int | None) -> None:
    if n and lib.set_threads and lib.path in _handles and hasattr(_handles[lib.path], lib.set_threads):
        fn = getattr(_handles[lib.path], lib.set_threads)
        fn.argtypes = [ctypes.c_int]
        fn(n)


def set_threads(n: int) -> None:
    """Use ``n`` threads in the library serving MLX's sgemm (where it can be told: OpenBLAS, MKL)."""
    global current
    if n < 1:
        raise ValueError(f"BLAS threads must be >= 1, got {n}")
    if _library is not None and _library.set_threads:
        _set_threads(_library, n)
        current = Choice(current.name, current.path, n, current.gflops if n == current.threads else None,
                         current.note)


def _threads_override() -> int | None:
    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        log.warning("transcriber: %s=%r is not a positive whole number: ignored", THREADS_ENV, text)
        return None
    return int(text)


def threads() -> int | None:
    """The thread count of the library serving MLX's sgemm, as the library reports it."""
    lib = _library
    if lib is None or not lib.get_threads or not hasattr(_handles.get(lib.path), lib.get_threads):
        return None
    return int(getattr(_handles[lib.path], lib.get_threads)())


# -- measuring --------------------------------------------------------------------------------------

def measure(budget_s: float = 0.15) -> float:
    """GFLOP/s of MLX float32 matmul now, over Whisper-like shapes (best of repeated runs within
    ``budget_s`` per shape, at least one run: the slow reference BLAS takes ~1 s a run)."""
    import mlx.core as mx

    flops = seconds = 0.0
    for shape_a, shape_b in _SHAPES:
        a = mx.random.normal(shape_a, stream=mx.cpu)
        b = mx.random.normal(shape_b, stream=mx.cpu)
        mx.eval(a, b)
        best, spent, runs = float("inf"), 0.0, 0
        while runs == 0 or (spent < budget_s and runs < 20):
            start = time.perf_counter()
            mx.eval(mx.matmul(a, b, stream=mx.cpu))
            took = time.perf_counter() - start
            best, spent, runs = min(best, took), spent + took, runs + 1
        n = 1
        for d in shape_a:
            n *= d
        flops += 2.0 * n * shape_b[-1]
        seconds += best
    return flops / seconds / 1e9


def _thread_options() -> list[int]:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return sorted({n for n in (1, 2, cpus) if n <= cpus})


def _worker(spec_json: str) -> None:
    """Probe subprocess: bind one library, print {"gflops": {threads: GFLOP/s}} or {"error"}."""
    spec = json.loads(spec_json)
    lib = Library(**spec["library"])
    import mlx.core  # noqa: F401  (loads libmlx.so, whose slot we rewrite)

    try:
        _bind(lib)
    except _Failure as e:
        print(json.dumps({"error": str(e)}))
        return
    result: dict[str, float] = {}
    options = spec["threads"] or [0]
    for _ in range(2 if len(options) > 1 else 1):  # interleaved rounds, best of each: load shifts
        for n in options:
            _set_threads(lib, n)
            result[str(n)] = max(result.get(str(n), 0.0), round(measure(), 2))
    print(json.dumps({"gflops": result}))


def _pick_threads(gflops: dict[str, float]) -> tuple[int, float]:
    """(threads, GFLOP/s) from one library's measurements: the fewest threads unless more are
    clearly (25%) faster. Extra BLAS threads help little on Whisper's small matrices, and a
    threaded OpenBLAS slows down sharply when the machine is busy; one thread degrades gently."""
    chosen = None
    for n, g in sorted(((int(n), g) for n, g in gflops.items())):
        if chosen is None or g > 1.25 * chosen[1]:
            chosen = (n, g)
    return chosen


# The probe subprocess loads this file by path: importing the transcriber package would apply
# (and maybe probe) again. sys.path[0] ('' for -c) is dropped so the cwd cannot shadow modules.
_WORKER = ("import sys, importlib.util as u; sys.path.pop(0); "
           "s = u.spec_from_file_location('_transcriber_blas_probe', sys.argv[1]); "
           "m = sys.modules[s.name] = u.module_from_spec(s); s.loader.exec_module(m); "
           "m._worker(sys.argv[2])")


def _probe(libraries: list[Library]) -> dict:
    """Measure each candidate in its own subprocess; returns {"measured", "choice"}."""
    measured, best = {}, None
    for lib in libraries:
        threads = _thread_options() if lib.set_threads else []
        spec = json.dumps({"library": asdict(lib), "threads": threads})
        try:
            proc = subprocess.run([sys.executable, "-c", _WORKER, os.path.abspath(__file__), spec],
                                  capture_output=True, text=True, timeout=120)
            lines = proc.stdout.strip().splitlines()
            result = json.loads(lines[-1]) if proc.returncode == 0 and lines else {
                "error": f"probe exited with status {proc.returncode}: "
                         f"{(proc.stderr.strip().splitlines() or [''])[-1]}"}
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            result = {"error": f"probe failed: {e}"}
        measured[lib.name] = result
        if result.get("gflops"):
            n, gflops = _pick_threads(result["gflops"])
            if best is None or gflops > best[2]:
                best = (lib, n or None, gflops)
    choice = None
    if best:
        choice = {"library": asdict(best[0]), "threads": best[1], "gflops": best[2]}
    return {"measured": measured, "choice": choice}


# -- candidates, cache, apply -----------------------------------------------------------------------

def _candidates(names: list[str]) -> tuple[list[Library], dict[str, str]]:
    """The named libraries that are installed, and why the others are not candidates."""
    found, missing = [], {}
    for name in names:
        if name == BUNDLED:
            found.append(Library(BUNDLED, None))
        elif name == "scipy-openblas32":
            # The folder scipy_openblas32.get_lib_dir() returns, found without importing the
            # package: its import reads package metadata, ~20 ms on every start.
            spec = importlib.util.find_spec("scipy_openblas32")
            if spec is None or not spec.submodule_search_locations:
                missing[name] = "not installed (pip install scipy-openblas32)"
                continue
            lib_dir = os.path.join(list(spec.submodule_search_locations)[0], "lib")
            hits = sorted(glob.glob(os.path.join(lib_dir, "libscipy_openblas*.so*")))
            if not hits:
                missing[name] = f"no library in {lib_dir}"
                continue
            found.append(Library(name, hits[0], "scipy_cblas_sgemm", "scipy_openblas_set_num_threads",
                                 "scipy_openblas_get_num_threads", _file_version(hits[0])))
        elif name == "system-openblas":
            hits = [h for p in _SYSTEM_OPENBLAS for h in sorted(glob.glob(p))]
            if hits:
                found.append(Library(name, hits[0], "cblas_sgemm", "openblas_set_num_threads",
                                     "openblas_get_num_threads", _file_version(hits[0])))
        elif name == "mkl":  # the `mkl` wheel puts its libraries in <prefix>/lib
            hits = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
            if hits:
                found.append(Library(name, hits[0], "cblas_sgemm", "MKL_Set_Num_Threads",
                                     "MKL_Get_Max_Threads", _file_version(hits[0]), rtld_global=True))
    return found, missing


def _file_version(path: str) -> str:
    """Identifies a library file for the cache key: its real name and size."""
    real = os.path.realpath(path)
    return f"{os.path.basename(real)}:{os.path.getsize(real)}"


def cpu_model() -> str:
    """The CPU model from /proc/cpuinfo (x86: "model name"; Arm: implementer and part)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields.get("model name") or " ".join(
        fields.get(k, "") for k in ("CPU implementer", "CPU part")).strip() or platform.processor()


def _cache_path(names: list[str], libraries: list[Library]) -> str:
    import mlx.core as mx

    from .cachedir import cache_root

    key = {"format": CACHE_FORMAT, "cpu": cpu_model(), "cpus": _thread_options()[-1],
           "machine": platform.machine(), "mlx": mx.__version__, "names": names,
           "libraries": {lib.name: lib.version for lib in libraries}}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return str(cache_root() / "blas" / f"{digest}.json")


def _probed(names: list[str], libraries: list[Library], reprobe: bool) -> dict:
    """The probe result for these candidates on this machine: cached, else measured now."""
    global cache_file
    path = _cache_path(names, libraries)
    if not reprobe:
        try:
            with open(path) as f:
                cache_file = path
                return json.load(f)
        except (OSError, ValueError):
            pass
    log.info("measuring BLAS libraries for MLX (once per machine): %s",
             ", ".join(lib.name for lib in libraries))
    result = _probe(libraries)
    if not result["choice"]:
        return result  # nothing worked, perhaps only this time: not worth remembering
    try:  # atomically: a concurrent first run must never read half a file
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        os.replace(tmp, path)
        cache_file = path
    except OSError as e:
        log.debug("cannot cache the BLAS probe in %s: %s", path, e)
    return result


def _library_from_path(path: str) -> Library:
    """TRANSCRIBER_BLAS=/path: a library exporting cblas_sgemm (or scipy-openblas's prefixed one)."""
    try:
        handle = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        raise _Failure(f"{ENV}={path}: cannot load it: {e}") from e
    for prefix in ("", "scipy_"):
        if hasattr(handle, f"{prefix}cblas_sgemm"):
            _handles[path] = handle
            setter = next((s for s in (f"{prefix}openblas_set_num_threads", "MKL_Set_Num_Threads")
                           if hasattr(handle, s)), None)
            getter = next((s for s in (f"{prefix}openblas_get_num_threads", "MKL_Get_Max_Threads")
                           if hasattr(handle, s)), None)
            return Library("path", path, f"{prefix}cblas_sgemm", setter, getter)
    raise _Failure(f"{ENV}={path}: exports no cblas_sgemm")


def _decide(setting: str, reprobe: bool) -> tuple[Library, int | None, float | None, str | None]:
    """(library, threads, measured GFLOP/s, note) for a TRANSCRIBER_BLAS value."""
    if "/" in setting:
        return _library_from_path(setting), None, None, None
    names = [n.strip().lower() for n in setting.split(",") if n.strip()] or list(NAMES)
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise _Failure(f"{ENV}: unknown name {', '.join(unknown)} (known: none, {', '.join(NAMES)}, or a path)")
    libraries, missing = _candidates(names)
    bundled = Library(BUNDLED, None)
    if all(lib.name == BUNDLED for lib in libraries):
        why = "; ".join(f"{n}: {reason}" for n, reason in missing.items())
        return bundled, None, None, (f"no faster BLAS found ({why})" if why else None)
    result = _probed(names, libraries, reprobe)
    choice = result.get("choice")
    if not choice:
        raise _Failure("the BLAS probe measured nothing")
    # The cache is per machine, not per environment: take the chosen library from this
    # environment's candidates (same name and file version, by the cache key), never a path another
    # virtualenv held when it measured.
    lib = next((c for c in libraries if c.name == choice["library"]["name"]), Library(**choice["library"]))
    note = None
    if lib.name == BUNDLED:  # every faster candidate failed (or was slower): say why
        errors = [f"{n}: {r['error']}" for n, r in result["measured"].items() if "error" in r]
        note = "; ".join(errors) or None
    return lib, choice["threads"], choice["gflops"], note


# numpy's own OpenBLAS (the wheel's copy in numpy.libs; symbols suffixed for 64-bit ints)
_NUMPY_BLAS = ("libscipy_openblas*.so*", "libopenblas*.so*")
_NUMPY_SET_THREADS = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads")


def numpy_one_thread() -> bool:
    """Run numpy's own OpenBLAS on one thread (True when it was found and told). Its products
    here are small (the streaming log-mel's (100, 201) x (201, 80) per second of audio), and
    its threads fought the BLAS serving MLX for the two cores: that product took ~8-16 ms
    instead of ~0.1 ms on one thread. No threadpoolctl: the library numpy loaded is opened
    again (the same handle) and told through its own setter."""
    import numpy as np

    folder = os.path.dirname(os.path.dirname(np.__file__))
    for pattern in _NUMPY_BLAS:
        for path in glob.glob(os.path.join(folder, "numpy.libs", pattern)):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            setter = next((getattr(lib, n) for n in _NUMPY_SET_THREADS if hasattr(lib, n)), None)
            if setter is not None:
                setter.argtypes = [ctypes.c_int]
                setter(1)
                return True
    return False


def apply(setting: str | None = None, *, reprobe: bool = False) -> Choice:
    """Bind MLX's sgemm to the fastest BLAS measured on this machine (see the module docstring).
    ``setting`` defaults to $TRANSCRIBER_BLAS. Call it after ``import mlx.core`` and before any
    matmul (``transcriber/__init__.py`` does). Never raises: failures leave MLX on its bundled
    BLAS with one logged note. Returns (and stores in ``current``) what serves MLX now."""
    global current, loaded_path, _library
    if not sys.platform.startswith("linux"):
        current, loaded_path = Choice("platform"), None
        return current
    numpy_one_thread()
    setting = (os.environ.get(ENV, "") if setting is None else setting).strip()
    import mlx.core  # noqa: F401

    preloaded = _preloaded()
    if preloaded:  # e.g. LD_PRELOAD=libopenblas.so: someone chose already; not ours to undo
        log.info("MLX's sgemm is already served by %s: left alone", preloaded)
        current, loaded_path, _library = Choice("preloaded", preloaded), preloaded, None
        return current
    note = None
    try:
        if setting.lower() == "none":
            lib, n, gflops = Library(BUNDLED, None), None, None
            if _original is not None:  # undo an earlier apply in this process
                _bind(lib)
        else:
            lib, n, gflops, note = _decide(setting, reprobe)
            override = _threads_override()
            if override and override != n:  # the probe's GFLOP/s were for its own thread count
                n, gflops = override, None
            _bind(lib)
            _set_threads(lib, n)
    except Exception as e:  # noqa: BLE001 - never let a BLAS choice break the import
        note = str(e) if isinstance(e, _Failure) else f"{type(e).__name__}: {e}"
        lib, n, gflops = Library(BUNDLED, None), None, None
        if _original is not None:
            try:
                _write_slots(_original)
            except Exception:  # noqa: BLE001
                pass
    if note:
        log.warning("transcriber: BLAS: %s; MLX keeps its bundled BLAS (slow)", note)
    current, loaded_path, _library = Choice(lib.name, lib.path, n, gflops, note), lib.path, lib
    return current


_gemv: tuple[str | None, Callable | None] = (None, None)  # (library path, its checked matvec)


def host_matvec() -> Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None:
    """``f(a, x, out)``: ``out = a @ x`` for a C-contiguous float32 matrix (M, K) and vectors
    (K,), (M,), by the sgemv of the library serving MLX's sgemm; None when MLX is on its own BLAS.

    Why: MLX runs a (1, K) x (K, M) product as an sgemm, which packs the whole (K, M) operand
    first. For the decoder's vocabulary projection (384 x 51864, 80 MB, once per token) that is
    twice the memory traffic of a matrix-vector product: measured on a 2-core Xeon, a tiny.en
    decode step took 11.0 ms with MLX's product and 9.2 ms with this one. The same library (so
    the same thread pool: two OpenBLAS pools spin against each other on 2 cores) and a check
    against numpy on first use; any problem gives None, and MLX does the product."""
    global _gemv
    import numpy as np

    path = loaded_path
    if path is None or _library is None or path not in _handles:
        return None
    if _gemv[0] == path:
        return _gemv[1]
    _gemv = (path, None)
    try:
        fn = getattr(_handles[path], _library.sgemm.replace("sgemm", "sgemv"))
    except AttributeError:
        return None
    fn.restype = None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_void_p,
                   ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    row_major, no_trans = 101, 111  # CblasRowMajor, CblasNoTrans

    def matvec(a: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
        assert a.dtype == x.dtype == out.dtype == np.float32 and a.flags.c_contiguous
        assert x.flags.c_contiguous and out.flags.c_contiguous and out.shape == a.shape[:1] == (len(out),)
        m, k = a.shape
        fn(row_major, no_trans, m, k, 1.0, a.ctypes.data, k, x.ctypes.data, 1, 0.0, out.ctypes.data, 1)

    rng = np.random.default_rng(11)
    a, x = rng.standard_normal((97, 45), dtype=np.float32), rng.standard_normal(45, dtype=np.float32)
    out = np.empty(97, np.float32)
    matvec(a, x, out)
    if not np.allclose(out, a.astype(np.float64) @ x, rtol=1e-4, atol=1e-4):
        log.warning("transcriber: BLAS: %s: sgemv gave a wrong result: not used", path)
        return None
    _gemv = (path, matvec)
    return matvec


def _preloaded() -> str | None:
    """The library serving MLX's sgemm before we ever touched the slot, when it is not the
    bundled BLAS libmlx.so was linked against; None otherwise (or when there is no slot)."""
    if _original is not None:
        return None
    try:
        owner, bundled = _owner(_read_slot()), _site().bundled
    except _Failure:
        return None  # apply's _bind reports it
    return owner if owner and os.path.basename(owner) not in bundled else None


def describe() -> str:
    """One line for users: which BLAS serves MLX's CPU matmuls."""
    if current.name == "platform":
        return "BLAS: the platform's own (Accelerate on macOS)"
    if current.path is None:
        why = current.note or ("TRANSCRIBER_BLAS=none" if os.environ.get(ENV, "").lower() == "none" else "")
        return (f"BLAS: MLX's bundled reference BLAS (slow{': ' + why if why else ''}); "
                "`transcribe doctor` says more")
    detail = [f"{current.threads} thread{'s' if current.threads != 1 else ''}" if current.threads else "",
              f"{current.gflops:.0f} GFLOP/s measured" if current.gflops else ""]
    extra = ", ".join(d for d in detail if d)
    return f"BLAS: {current.name} ({current.path}){', ' + extra if extra else ''}"


def probe_results() -> dict | None:
    """The cached probe result in use ({"measured", "choice"}), if any."""
    if not cache_file:
        return None
    try:
        with open(cache_file) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
