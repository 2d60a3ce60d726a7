"""Self-attention keys and values that grow in place, one token at a time.

The MLX decoder appends a token's key and value with ``mx.concatenate``: a copy of the whole
cache and an MLX dispatch per layer and step (a fifth of a native step). Here each layer's
cache lives in an MLX buffer with room to spare, (B, H, capacity, D/H); a step writes the new
position into it and hands out the slice ``[:, :, :T+1]`` as the state's cache, so states stay
plain MLX arrays (``DecoderState.select``, ``truncate`` and ``stack`` work on them as before).

Why this is safe: a position is written once and never again. A buffer is extended only from
the slice that ends at its fill mark; any other cache (a truncated, reordered or older state)
is copied into a new buffer first. So no array anyone holds ever sees a value change.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

import mlx.core as mx
import numpy as np

from transcriber.native import aligned

ROOM = 64  # positions added when a buffer is full (a 30 s window is ~100-200 tokens)
# Slices remembered per layer: a key and a value slice for each of a few live states (a decode
# and the state it may rewind to). A forgotten one only costs a copy; a remembered one keeps its
# buffer alive, so not more (512 in all kept ~190 MB of abandoned streaming passes).
TRACKED_PER_LAYER = 8
LINE_FLOATS = aligned.LINE // 4  # the slack that lets a buffer start on a line


@dataclass
class _Buffer:
    array: mx.array  # (B, H, capacity, D/H), evaluated
    host: np.ndarray  # a writable numpy view of its memory
    fill: int  # positions written


class GrowingCache:
    """``past(entry)`` -> the cached positions to attend over; ``extend(entry, new)`` -> the
    next cache (an MLX array). One per DecoderStep."""

    def __init__(self, layers: int = 4) -> None:
        self._known: OrderedDict[int, tuple[mx.array, _Buffer]] = OrderedDict()
        self._limit = TRACKED_PER_LAYER * layers
        # two threads extending one state would both claim its next position: one at a time
        self._lock = threading.Lock()

    def _buffer(self, entry: Optional[mx.array]) -> Optional[_Buffer]:
        hit = None if entry is None else self._known.get(id(entry))
        if hit is None or hit[0] is not entry or hit[1].fill != entry.shape[2]:
            return None
        return hit[1]

    def past(self, entry: Optional[mx.array]) -> Optional[np.ndarray]:
        """(B, H, T, D/H) float32 with a unit last stride: a view when tracked, else the
        evaluated array (copied only if its last axis is strided)."""
        if entry is None:
            return None
        buf = self._buffer(entry)
        if buf is not None:
            return buf.host[:, :, :buf.fill]
        a = np.asarray(entry)
        return a if a.dtype == np.float32 and a.strides[-1] == 4 else np.ascontiguousarray(a, np.float32)

    def extend(self, entry: Optional[mx.array], new: np.ndarray) -> mx.array:
        """The cache after one more position: new (B, H, D/H) appended to entry (B, H, T, D/H)."""
        t = 0 if entry is None else entry.shape[2]
        with self._lock:
            buf = self._buffer(entry)
            if buf is None or buf.host.shape[2] == t:
                buf = self._fresh(entry, new.shape, t)
            buf.host[:, :, t] = new
            buf.fill = t + 1
            out = buf.array[:, :, : t + 1]
            if entry is not None:
                self._known.pop(id(entry), None)
            self._known[id(out)] = (out, buf)
            while len(self._known) > self._limit:
                self._known.popitem(last=False)
        return out

    def start(self, data: np.ndarray) -> mx.array:
        """A cache of data (B, H, T, D/H) (a prompt pass's keys or values), in a buffer with room
        for the steps that extend it in place."""
        with self._lock:
            b, h, t, dh = data.shape
            buf = self._allocate((b, h, t + 1 + ROOM, dh))
            buf.host[:, :, :t] = data
            buf.fill = t
            out = buf.array[:, :, :t]
            self._known[id(out)] = (out, buf)
            while len(self._known) > self._limit:
                self._known.popitem(last=False)
        return out

    def _fresh(self, entry: Optional[mx.array], shape: tuple, t: int) -> _Buffer:
        b, h, dh = shape
        buf = self._allocate((b, h, t + 1 + ROOM, dh))
        if t:
            buf.host[:, :, :t] = self.past(entry)
        buf.fill = t
        return buf

    def _allocate(self, shape: tuple) -> _Buffer:
        """An evaluated MLX buffer of zeros (B, H, capacity, D/H) and its writable numpy view,
        starting on a 64-byte line: MLX's own buffers start 24 bytes into one, so every
        vector of a position (D/H floats) would span two lines. A slice of a slightly larger
        MLX buffer (a view of it, no copy) gives the alignment."""
        count = int(np.prod(shape))
        flat = mx.array(np.zeros(count + LINE_FLOATS, np.float32))
        mx.eval(flat)
        skew = -np.asarray(flat).ctypes.data % aligned.LINE // 4
        array = flat[skew:skew + count].reshape(shape)
        mx.eval(array)
        host = np.asarray(array)
        if (not host.flags.writeable or host.ctypes.data != np.asarray(array).ctypes.data
                or host.ctypes.data != np.asarray(flat).ctypes.data + 4 * skew):
            raise RuntimeError("MLX did not expose its buffer to numpy")
        return _Buffer(array, host, 0)
