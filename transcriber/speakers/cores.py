"""The speaker pass's model work on every core the BLAS would use, a part on each.

    with on_cores() as run:
        parts = run(model.scores, windows)    # [scores of the first rows, of the next, ...]

The segmentation's windows and CAM++'s pieces are independent of each other, so their lists
are cut in as many contiguous parts as the BLAS has threads, each part run on a thread of its
own with its own MLX CPU stream (MLX lets go of the GIL while it computes: two threads of
matmuls took 2.7 s where one thread did the same work in 5.3 s), and the BLAS each of them calls
on one thread. Why not the BLAS's own threads: OpenBLAS's threads wait for one another spinning,
and two pools of two (MLX's BLAS and numpy's) on two cores, or any other load, leave them
spinning. Measured on a 10-minute two-reader recording (2-core Xeon, the test suite running
beside: load 2-3): two BLAS threads 55-57 s, one 26-41 s, two parts side by side on one BLAS
thread each 15.7-16.7 s (CPU 25.9 s; peak 590 MB against 449 MB: both parts' temporaries at
once). The BLAS gets its threads back after the pass; numpy's own BLAS stays on one thread (as
streaming's already does, ``numpy_one_thread``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Sequence

import mlx.core as mx

from transcriber.native import blas

Run = Callable[[Callable, Sequence], list]

_local = threading.local()
_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}
_lock = threading.Lock()


def alone(fn: Callable, items: Sequence) -> list:
    """``fn`` on all ``items`` at once, here: one part."""
    return [fn(items)]


@contextlib.contextmanager
def on_cores() -> Iterator[Run]:
    """A ``run(fn, items)`` giving ``[fn(part) for part in parts of items]``, the parts side by
    side on the cores the BLAS uses (one part when it uses one), with the BLAS on one thread
    until the block ends."""
    workers = max(1, blas.threads() or 1)
    if workers == 1:
        yield alone
        return
    blas.set_threads(1)
    blas.numpy_one_thread()
    try:
        yield lambda fn, items: _side_by_side(fn, items, workers)
    finally:
        blas.set_threads(workers)


def settle(*models) -> None:
    """Compute every MLX array the models hold now, on this thread: a lazy one (a weight still
    to be transposed, read from its file) cannot be computed on another thread's stream."""
    found: list = []

    def walk(value) -> None:
        if isinstance(value, mx.array):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            walk(vars(value))

    for model in models:
        walk(model)
    mx.eval(found)


def _side_by_side(fn: Callable, items: Sequence, workers: int) -> list:
    if len(items) < 2:
        return [fn(items)]
    size = -(-len(items) // workers)
    parts = [items[first:first + size] for first in range(0, len(items), size)]
    pool = _pool(workers)
    return [future.result() for future in [pool.submit(_in_stream, fn, part) for part in parts]]


def _pool(workers: int) -> ThreadPoolExecutor:
    """One pool per size for the process (its threads and their streams made once; a forked
    child, which has none of its parent's threads, makes its own)."""
    key = (os.getpid(), workers)
    with _lock:
        if key not in _pools:
            _pools[key] = ThreadPoolExecutor(workers, thread_name_prefix="speakers", initializer=_new_stream)
        return _pools[key]


def _new_stream() -> None:
    _local.stream = mx.new_stream(mx.cpu)


def _in_stream(fn: Callable, part: Sequence):
    with mx.stream(_local.stream):
        return fn(part)
