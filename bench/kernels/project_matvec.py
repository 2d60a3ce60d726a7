"""The decoder's float32 vocabulary projection at 1-2 rows (``TextDecoder.project``), three ways
side by side in one process, interleaved: the sgemv of the BLAS serving MLX (what serves today),
the native kernels' small-row linear on a float32-packed copy of the weight, and MLX's product.

    .venv/bin/python -m bench.kernels project-matvec [--model tiny.en] [--reps 40] [--threads 1]

Prints the median ms per call of each and the ratios, the extra memory the packed copy takes,
and the largest difference from numpy's float64 product. --threads sets both libraries' threads.
Measured 2026-12-02 (AMD EPYC Zen 4, 2 cores, shared: load 7.5-7.7; tiny.en, 1 thread): sgemv
12.0 / 23.5 ms at 1 / 2 rows, native f32 3.5 / 3.5 ms, MLX 20.0 / 21.1 ms. The sgemv stays (the
packed copy is 76 MiB; see transcriber/native/blas/matvec.py).
"""
import argparse
import os
import sys
import time

sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

import transcriber  # noqa: E402
from transcriber import native  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    decoder = transcriber.load_model(args.model).decoder
    ops = native.ops()
    if ops is None or transcriber.blas.host_matvec() is None:
        sys.exit(f"needs both: {native.status().line()}; {transcriber.blas.describe()}")
    transcriber.blas.set_threads(args.threads)
    ops.kernels.set_threads(args.threads)
    weight = np.array(decoder.token_embedding.weight, copy=False)  # (V, D) float32
    packed = ops.kernels.pack(weight, "f32")
    print(f"{args.model}: weight {weight.shape}, {transcriber.blas.describe()}, {native.status().isa}, "
          f"{args.threads} thread(s); packed f32 copy {packed.data.nbytes / 2**20:.0f} MiB extra")
    for rows in (1, 2):
        h = mx.random.normal((1, rows, weight.shape[1]), key=mx.random.key(rows))
        mx.eval(h)
        flat = np.array(h.reshape(rows, -1), dtype=np.float32)
        ways = {"blas sgemv": lambda: decoder.project(h, transcriber.blas.host_matvec()),
                "native linear f32": lambda: ops.kernels.linear(flat, packed),
                "mlx matmul": lambda: np.array(h @ decoder.output_weight())}
        times = {name: [] for name in ways}
        for _ in range(args.reps):  # interleaved: the machine's load changes from call to call
            for name, fn in ways.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        want = flat.astype(np.float64) @ weight.astype(np.float64).T
        base = sorted(times["blas sgemv"])[args.reps // 2]
        for name, fn in ways.items():
            ms = sorted(times[name])[args.reps // 2]
            err = np.abs(np.asarray(fn()).reshape(rows, -1) - want).max()
            print(f"  rows {rows}: {name:18s} {ms * 1e3:7.2f} ms  x{ms / base:.2f}  max |diff| {err:.1e}")


if __name__ == "__main__":
    main()
