"""The encoder's GEMM: integer products (int16 pairs, vpmaddwd) against the FMA route (issue 30).

One process, one path (``--path``, default avx2: the avx2 library forced on any x86 CPU), the
two routes alternated call by call at tiny.en's (or ``--model base``'s) encoder shapes, M
rows (1500: a 30 s window); CPU time per call (the process's: every thread's), min and median
of ``--repeat`` calls, as GFLOP/s (2 M N K / time). Also each route's relative RMS error against a float64 product
of the unrounded operands, on random inputs shaped like the encoder's.

    PYTHONPATH=. python -m bench.kernels igemm-speed [--path avx2] [--threads 1] [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

SHAPES = {"tiny.en": [(384, 384), (384, 1536), (1536, 384), (1152, 384), (240, 384)],
          "base": [(512, 512), (512, 2048), (2048, 512), (1536, 512)]}  # (K, N)


def cpu_seconds(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def relative_rms(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.sqrt(np.mean((got - want) ** 2)) / np.sqrt(np.mean(want ** 2)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", default="avx2")
    ap.add_argument("--model", default="tiny.en", choices=sorted(SHAPES))
    ap.add_argument("--rows", type=int, default=1500)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--levels", default="127", help="weight levels of the integer route, comma-separated")
    args = ap.parse_args()
    os.environ["TRANSCRIBER_KERNELS"] = args.path
    from transcriber.native import loader
    from transcriber.native.kernels import Kernels

    loaded = loader.load()
    assert loaded.path == args.path, loaded.reason
    k = Kernels(loaded.lib, loaded.path)  # no vdpbf16ps: the FMA route
    rng = np.random.default_rng(30)
    levels = [int(v) for v in args.levels.split(",")]
    print(f"path {args.path}, {args.threads} thread(s), M = {args.rows}, min / median of {args.repeat}, "
          f"load {os.getloadavg()[0]:.1f}")
    print("| M x K x N | FMA GFLOP/s | " + " | ".join(f"int, levels {v} GFLOP/s | speed-up" for v in levels)
          + " | FMA rel. RMS | " + " | ".join(f"int {v} rel. RMS" for v in levels) + " |")
    for kk, n in SHAPES[args.model]:
        a = rng.standard_normal((args.rows, kk), dtype=np.float32)
        a[:, ::37] *= 8  # a few outsize channels, as layer-normed activations have
        w = (rng.standard_normal((n, kk)) / np.sqrt(kk)).astype(np.float32)
        want = a.astype(np.float64) @ w.astype(np.float64).T
        routes = [("fma", k.gemm_pack(w))] + [(f"int{v}", k.igemm_pack(w, v)) for v in levels]
        times = {name: [] for name, _ in routes}
        errors = {name: relative_rms(k.gemm(a, pw, threads=args.threads, dot=False), want) for name, pw in routes}
        for _ in range(args.repeat):
            for name, pw in routes:
                times[name].append(cpu_seconds(lambda: k.gemm(a, pw, threads=args.threads, dot=False)))
        flop = 2.0 * args.rows * kk * n
        gf = {name: (flop / min(t) / 1e9, flop / statistics.median(t) / 1e9) for name, t in times.items()}
        cells = [f"{gf['fma'][0]:.0f} / {gf['fma'][1]:.0f}"]
        for v in levels:
            g = gf[f"int{v}"]
            cells += [f"{g[0]:.0f} / {g[1]:.0f}", f"{g[0] / gf['fma'][0]:.2f}"]
        cells += [f"{errors['fma']:.5f}"] + [f"{errors[f'int{v}']:.5f}" for v in levels]
        print(f"| {args.rows} x {kk} x {n} | " + " | ".join(cells) + " |")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
