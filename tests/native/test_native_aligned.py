"""Where the buffers the decoder step streams start (transcriber/native/aligned.py): every packed
weight, the bf16 cross-attention keys/values and the growing self-attention cache on a 64-byte
line, large ones on a 2 MiB boundary; the placement changes no result."""

from __future__ import annotations

import gc

import mlx.core as mx
import numpy as np
import pytest

from transcriber import native
from transcriber.native import aligned
from transcriber.backend import inference_for
from transcriber.native.kvcache import GrowingCache


@pytest.mark.parametrize("shape,dtype", [((1,), np.uint16), ((3, 5, 7), np.float32), ((24, 192, 16), np.uint32),
                                         ((3242, 192, 16), np.uint32), ((0, 16), np.float32)])
def test_empty_starts_on_a_line_and_large_ones_on_a_huge_page(shape, dtype):
    a = aligned.empty(shape, dtype)
    assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
    assert a.size == 0 or a.ctypes.data % aligned.LINE == 0  # (an empty array has no data to place)
    if a.nbytes >= aligned.HUGE_FROM:
        assert a.ctypes.data % aligned.HUGE == 0
    values = np.arange(a.size, dtype=np.int64).astype(dtype).reshape(shape)
    a[...] = values
    gc.collect()  # the mapping lives as long as the array, not the call that made it
    np.testing.assert_array_equal(a, values)
    assert not aligned.zeros(shape, dtype).any()


def test_the_step_reads_only_aligned_buffers(model):
    """The packed weights, the projection, one window's bf16 keys/values and the cache."""
    native.reset()
    mel = mx.array(np.random.default_rng(0).standard_normal((1, 3000, 80), dtype=np.float32))
    inference = inference_for(model)
    base = inference.start(inference.encode(mel))
    step = inference.step
    assert step is not None
    logits, state, _ = inference.decode(mx.array([[50257, 50362]]), base)
    logits, state, _ = inference.decode(mx.array(np.array(logits[:, -1]).argmax(-1)[:, None]), state)
    weights = [getattr(p, f).data for p in step.packed
               for f in ("query", "key", "value", "out", "cross_query", "cross_out", "mlp1", "mlp2")]
    windows = [a for hit in step._audio.values() for a in hit[2:]]
    caches = [step.cache.past(c) for pair in state.self_kv for c in pair]
    assert windows and len(caches) == 2 * len(step.packed)
    for a in [*weights, step.projection.data, *windows, *caches]:
        assert a.ctypes.data % aligned.LINE == 0
    assert step.projection.data.ctypes.data % aligned.HUGE == 0


def test_an_aligned_cache_is_a_view_of_its_mlx_buffer():
    """Writes through the numpy view are what MLX reads (no copy made by the aligning slice)."""
    cache = GrowingCache()
    new = np.random.default_rng(2).standard_normal((3, 2, 8), dtype=np.float32)
    first = cache.extend(None, new)
    second = cache.extend(first, new + 1)
    assert cache.past(second).ctypes.data % aligned.LINE == 0
    np.testing.assert_array_equal(np.array(second)[:, :, 1], new + 1)
    np.testing.assert_array_equal(np.array(first)[:, :, 0], new)
