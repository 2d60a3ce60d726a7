"""libmlx.so's ``cblas_sgemm`` slot: found in the ELF file, rewritten in this process, checked.

libmlx.so calls ``cblas_sgemm`` through slots of its global offset table (GOT). ``bind`` points
them at another library's sgemm. Guards, so that nothing ever computes a wrong result: the slots
are only rewritten while they point into the ``libblas*`` that libmlx.so was linked against
(else someone else already chose, or MLX changed how it links BLAS); after writing them, a small
matmul (plain, transposed, batched) is compared with numpy, and the old pointer is put back if it
differs. Every problem is a ``Failure``.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
from dataclasses import dataclass

from transcriber.native.blas.libraries import Failure, Library

handles: dict[str, ctypes.CDLL] = {}  # libraries we bound: kept loaded while the slot may use them
original: int | None = None  # the slot's value before we first wrote it

# e_machine -> relocation types that fill a GOT slot with a symbol's address (JUMP_SLOT, GLOB_DAT)
_SLOT_RELOCS = {62: (7, 6), 183: (1026, 1025)}  # x86_64, aarch64
_RELA = 24  # sizeof(Elf64_Rela), also sizeof(Elf64_Sym)


# -- the ELF file ------------------------------------------------------------------------------------

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
        raise Failure(f"{os.path.basename(path)} has no dynamic section")
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
            raise Failure(f"{os.path.basename(path)} is not a 64-bit little-endian ELF")
        machine, = struct.unpack_from("<H", m, 18)
        if machine not in _SLOT_RELOCS:
            raise Failure(f"unsupported architecture (ELF machine {machine})")
        loads, dynamic, relro = _segments(m, path)

        def at(vaddr: int) -> int:  # virtual address -> file offset
            for va, off, size in loads:
                if va <= vaddr < va + size:
                    return off + vaddr - va
            raise Failure(f"{os.path.basename(path)}: address {vaddr:#x} is in no segment")

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


# -- the slots in this process -----------------------------------------------------------------------

class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


class _LinkMap(ctypes.Structure):
    _fields_ = [("l_addr", ctypes.c_size_t), ("l_name", ctypes.c_char_p)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
_libc.dlinfo.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]


def owner(address: int | None) -> str | None:
    """The file of the loaded object that contains ``address`` (dladdr), or None."""
    info = _DlInfo()
    if not address or not _libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.fsdecode(info.dli_fname)


def libmlx_path() -> str:
    """Where libmlx.so is (a seam for tests)."""
    import mlx.core as mx

    return os.path.join(os.path.dirname(mx.__file__), "lib", "libmlx.so")


@dataclass(frozen=True)
class _Site:
    """libmlx.so's sgemm slots in this process."""

    addresses: tuple[int, ...]
    relro: tuple[int, int] | None  # absolute
    bundled: tuple[str, ...]  # basenames of the BLAS libmlx.so was linked against


_site_cache: _Site | None = None


def site() -> _Site:
    """libmlx.so's slots, found once per process."""
    global _site_cache
    if _site_cache is None:
        path = libmlx_path()
        if not os.path.isfile(path):
            raise Failure(f"no {os.path.basename(path)} next to mlx.core (unknown MLX layout)")
        slots = _elf_slots(path)
        if not slots.offsets:
            raise Failure(f"{os.path.basename(path)} has no cblas_sgemm slot (unknown MLX layout)")
        # The load base: RTLD_DI_LINKMAP of the already-loaded libmlx.so (dlopen only finds it).
        link = ctypes.POINTER(_LinkMap)()
        if _libc.dlinfo(ctypes.CDLL(path)._handle, 2, ctypes.byref(link)) != 0:
            raise Failure(f"cannot find where {os.path.basename(path)} is loaded")
        base = link.contents.l_addr
        relro = (base + slots.relro[0], slots.relro[1]) if slots.relro else None
        _site_cache = _Site(tuple(base + o for o in slots.offsets), relro,
                            tuple(n for n in slots.needed if n.startswith("libblas")))
    return _site_cache


def read() -> int:
    """The address the (first) slot holds now."""
    return ctypes.c_void_p.from_address(site().addresses[0]).value or 0


def write(value: int) -> None:
    """Every slot := ``value``, lifting RELRO's read-only protection for the write."""
    found, page = site(), mmap.PAGESIZE
    for address in found.addresses:
        protected = found.relro and found.relro[0] <= address < found.relro[0] + found.relro[1]
        start = address & ~(page - 1)
        if protected and _libc.mprotect(start, page, 3) != 0:  # PROT_READ | PROT_WRITE
            raise Failure(f"mprotect failed: {os.strerror(ctypes.get_errno())}")
        ctypes.c_void_p.from_address(address).value = value
        if protected:
            _libc.mprotect(start, page, 1)  # back to PROT_READ, as the loader left it


def served_by() -> str | None:
    """The file of the library whose code MLX's sgemm slot points at now (dladdr on the slot,
    not our bookkeeping), or None where there is no such slot."""
    try:
        return owner(read())
    except Failure:
        return None


def preloaded() -> str | None:
    """The library serving MLX's sgemm before we ever touched the slot, when it is not the
    bundled BLAS libmlx.so was linked against; None otherwise (or when there is no slot)."""
    if original is not None:
        return None
    try:
        serving, bundled = owner(read()), site().bundled
    except Failure:
        return None  # apply's bind reports it
    return serving if serving and os.path.basename(serving) not in bundled else None


# -- binding -----------------------------------------------------------------------------------------

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


def symbol_address(handle: ctypes.CDLL, symbol: str) -> int:
    """The address of ``symbol`` in a loaded library (a seam for tests)."""
    return ctypes.cast(getattr(handle, symbol), ctypes.c_void_p).value


def bind(lib: Library) -> None:
    """Point MLX's sgemm slot at ``lib`` (the bundled BLAS: back to the original), then check a
    matmul; on any problem restore the previous pointer and raise Failure."""
    global original
    found, now = site(), read()
    if original is None:
        serving = owner(now)
        if not serving or os.path.basename(serving) not in found.bundled:
            raise Failure(f"MLX's sgemm is served by {serving or 'an unknown object'}, not by its "
                          f"bundled {', '.join(found.bundled) or 'libblas'}: left alone")
        original = now
    if lib.path is None:
        write(original)
        return
    try:
        handle = handles.get(lib.path) or ctypes.CDLL(
            lib.path, mode=ctypes.RTLD_GLOBAL if lib.rtld_global else ctypes.RTLD_LOCAL)
        target = symbol_address(handle, lib.sgemm)
    except (OSError, AttributeError) as e:
        raise Failure(f"{lib.name}: cannot load {lib.sgemm} from {lib.path}: {e}") from e
    handles[lib.path] = handle
    write(target)
    if not _matmul_ok():
        write(now)
        raise Failure(f"{lib.name} ({lib.path}) gave a wrong matmul result: not used")


def restore() -> None:
    """Put the bundled BLAS back if we ever moved it (after a failure: never raises)."""
    if original is not None:
        try:
            write(original)
        except Exception:  # noqa: BLE001 - the caller is already reporting a failure
            pass
