"""Host buffers for what the kernels stream: packed weights, bf16 keys/values, caches.

numpy's own buffers start wherever malloc puts them: 16 bytes into a cache line is common (the
40 MB bf16 projection started at 16 mod 64), so every 64-byte vector load of a packed block
spans two lines; and numpy asks for transparent huge pages only for the whole 4 KiB pages
inside its block, so the head and tail of a large buffer stay on 4 KiB pages. ``empty``
gives arrays that start on a cache line, and large ones on a 2 MiB boundary with
``MADV_HUGEPAGE`` over all of it (the step reads ~40 MB a token through the TLB).
Measured on the projection alone (docs/speed.md): 64-byte alignment ~3%, whole huge pages
~5%: small, but never a loss, and the same placement in every process.
"""

from __future__ import annotations

import mmap

import numpy as np

LINE = 64  # bytes: a cache line, and one AVX-512 load
HUGE = 2 << 20  # bytes: an x86_64 / aarch64 (4 KiB granule) transparent huge page
HUGE_FROM = 4 << 20  # buffers this large get their own huge-page mapping (numpy's own threshold)


def empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype`` whose data starts on a
    64-byte line; from 4 MiB on, in its own anonymous mapping aligned to 2 MiB and advised as
    huge pages (where the kernel offers them)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    if nbytes >= HUGE_FROM:
        return _huge(nbytes).view(dtype)[:count].reshape(shape)
    raw = np.empty(nbytes + LINE, np.uint8)
    start = -raw.ctypes.data % LINE
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _huge(nbytes: int) -> np.ndarray:
    """nbytes (uint8) at a 2 MiB boundary of a fresh anonymous mapping; the mapping lives as
    long as the array (its base). Untouched pages of the slack cost no memory."""
    length = -(-nbytes // HUGE) * HUGE
    region = mmap.mmap(-1, length + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(region, np.uint8)
    start = -raw.ctypes.data % HUGE
    if hasattr(mmap, "MADV_HUGEPAGE"):  # Linux; elsewhere the alignment alone
        region.madvise(mmap.MADV_HUGEPAGE, start, length)
    return raw[start:start + nbytes]


def zeros(shape, dtype) -> np.ndarray:
    """``empty`` filled with zeros."""
    a = empty(shape, dtype)
    a.fill(0)
    return a
