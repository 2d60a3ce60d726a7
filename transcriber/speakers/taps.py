"""A convolution's core as both speaker models run it: a sum of one matmul per tap.

    out = tap_sum(flat, offsets, weight, length)   # sum over t of flat[offsets[t]:+length] @ weight[t]

The input is read as one long list of positions (rows of ``flat``), and a tap of the kernel is
then a fixed offset into it: its input is a contiguous slice, so nothing is copied per tap (no
im2col), and the sums run in the BLAS (``mx.addmm``). The caller lays its input out so (padding,
stride planes), and reads its outputs out of the result in place (``mx.as_strided``), dropping
the positions where a slice ran into the next row or item. segmentation.py's ``conv_taps`` (over
time) and campplus.py's ``_conv`` (over rows and columns, with stride and dilation) use it;
``mx.conv1d``/``mx.conv2d`` gave the same numbers 2-8 times slower on the CPU.
"""

from __future__ import annotations

from typing import Sequence

import mlx.core as mx


def tap_sum(flat: mx.array, offsets: Sequence[int], weight: mx.array, length: int) -> mx.array:
    """(length, out): the sum over taps t of flat[offsets[t]:offsets[t] + length] @ weight[t]
    (flat: (positions, in); weight: (taps, in, out))."""
    out = flat[offsets[0]:offsets[0] + length] @ weight[0]
    for tap, offset in enumerate(offsets[1:], start=1):
        out = mx.addmm(out, flat[offset:offset + length], weight[tap])
    return out
