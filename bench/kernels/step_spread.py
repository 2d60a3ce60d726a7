"""The decoder step, before vs after, over fresh processes: is a step target met or not?

The same code's step differs by up to ~40% from one process to the next here, so one
process's median decides nothing. This runs bench/kernels/_worker_micro.py in --processes fresh
interpreters per side, the sides alternated (A B B A ...) so load drifts hit both, and prints
per side the per-process medians (wall and CPU ms, 1 and 4 rows), their median and spread,
and the 4-row / 1-row ratio. Beside them: the bytes a step reads, this machine's
read bandwidth on one core and on two (measured here, before and after) and the step's floor
(bytes / bandwidth) on each: the step runs on two threads where two cores are free.

    .venv/bin/python -m bench.kernels step-spread           # before = main, after = this checkout
    .venv/bin/python -m bench.kernels step-spread --before HEAD~3 --processes 8 --steps 200
    .venv/bin/python -m bench.kernels step-spread --after-env TRANSCRIBER_KERNEL_WEIGHTS=int8   # a setting, after only

The before is ``git archive REF`` of this repository, unpacked in a temporary directory with
its native kernels built there (transcriber/native/build.py); both sides run with this
checkout's interpreter, each its own tree's code (the tree's root comes first on sys.path).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET_MS, TARGET_RATIO = 4.0, 1.5  # issue 21: a tiny.en step <= 4 ms, 4 rows <= 1.5x 1 row


def read_gbs(gib: float = 1.0, repeat: int = 3, threads: int = 1) -> float:
    """Read bandwidth of ``threads`` cores, GB/s: the best of ``repeat`` maxima over a ``gib``
    GiB array, each thread its own slice at once (numpy lets the GIL go in a reduction). (A
    float32 sum is no measure here: numpy's pairwise sum runs at ~8 GB/s, compute-bound; a
    uint64 max reads at ~90% of a hand-written AVX-512 read loop.)"""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    a = np.ones(int(gib * (1 << 30)) // 8, np.uint64)
    slices = np.array_split(a, threads)
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeat):
            t = time.perf_counter()
            list(pool.map(np.max, slices))
            best = min(best, time.perf_counter() - t)
    return a.nbytes / best / 1e9


def unpack(ref: str, into: Path) -> Path:
    """``git archive ref`` of this repository unpacked into ``into``, its kernels built."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    build = subprocess.run([sys.executable, str(into / "transcriber/native/build.py")], capture_output=True, text=True)
    if build.returncode != 0:
        sys.exit(f"building the kernels of {ref} failed: {build.stderr.strip()[-500:]}")
    return into


def micro(tree: Path, job: dict, env: dict | None = None) -> dict:
    """One fresh process of tree's bench/kernels/_worker_micro.py (bench/_worker_micro.py in a
    tree from before bench/ had families) (``env`` added to its environment) -> its JSON, plus
    the load then."""
    load = os.getloadavg()[0]
    worker = tree / "bench/kernels/_worker_micro.py"
    if not worker.exists():
        worker = tree / "bench/_worker_micro.py"
    proc = subprocess.run([sys.executable, str(worker)], input=json.dumps(job),
                          capture_output=True, text=True, cwd=tree, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        sys.exit(f"{tree}: worker exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["load"] = load
    return out


def summary(runs: list[dict], rows: str, clock: str) -> str:
    """'median (min-max, spread %)' of the per-process medians."""
    v = [r["step_ms"][rows][clock] for r in runs]
    med = statistics.median(v)
    return f"{med:5.2f} ({min(v):.2f}-{max(v):.2f}, {100 * (max(v) - min(v)) / med:3.0f}%)"


def ratio(runs: list[dict], clock: str) -> float:
    return statistics.median(r["step_ms"]["4"][clock] / r["step_ms"]["1"][clock] for r in runs)


def report(sides: dict, bandwidth: dict[int, list[float]]) -> None:
    print(f"\n{'side':8s} {'1 row wall ms':>26s} {'1 row CPU ms':>26s} {'4 rows wall ms':>26s} {'4 rows CPU ms':>26s}"
          f"  4/1 wall  4/1 CPU  load")
    for name, runs in sides.items():
        loads = [r["load"] for r in runs]
        print(f"{name:8s} {summary(runs, '1', 'wall'):>26s} {summary(runs, '1', 'cpu'):>26s} "
              f"{summary(runs, '4', 'wall'):>26s} {summary(runs, '4', 'cpu'):>26s}  {ratio(runs, 'wall'):8.2f} "
              f"{ratio(runs, 'cpu'):8.2f}  {min(loads):.1f}-{max(loads):.1f}")
        walls = " ".join(f"{r['step_ms']['1']['wall']:.2f}" for r in runs)
        print(f"{'':8s} 1 row wall per process: {walls}")
    for cores, measured in sorted(bandwidth.items()):
        best = max(measured)
        print(f"\nread bandwidth, {cores} core(s): {' / '.join(f'{b:.1f}' for b in measured)} GB/s (before / after the runs)")
        for name, runs in sides.items():  # the sides may read different bytes (int8 weights)
            mb = next((r["step_mb"] for r in runs if r.get("step_mb")), None)
            if mb:
                print(f"{name}: a 1-row step reads {mb:.1f} MB: floor {mb / best:.2f} ms at {best:.1f} GB/s on {cores}")
    print(f"targets: 1 row <= {TARGET_MS} ms, 4 rows <= {TARGET_RATIO}x 1 row (medians of the process medians)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default="main", help="git ref of the before code (default main)")
    ap.add_argument("--processes", type=int, default=8, help="fresh processes per side")
    ap.add_argument("--steps", type=int, default=200, help="steps per process (the median is taken)")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--json", type=Path, help="also write every process's figures here")
    ap.add_argument("--after-env", action="append", default=[], metavar="NAME=VALUE",
                    help="a variable set for the after side only (repeatable): a setting the before lacks")
    args = ap.parse_args()
    after_env = dict(item.split("=", 1) for item in args.after_env)
    job = {"model": args.model, "steps": args.steps, "encoder": False}
    bandwidth = {n: [read_gbs(threads=n)] for n in (1, 2)}  # the step runs on up to two threads
    with tempfile.TemporaryDirectory(prefix="step_spread_") as tmp:
        trees = {f"before ({args.before})": unpack(args.before, Path(tmp)), "after": ROOT}
        sides: dict[str, list[dict]] = {name: [] for name in trees}
        for i in range(args.processes):
            order = list(trees) if i % 2 == 0 else list(trees)[::-1]  # A B, B A, ...
            for name in order:
                sides[name].append(micro(trees[name], job, after_env if name == "after" else None))
                r = sides[name][-1]
                print(f"{i + 1}/{args.processes} {name}: {r['step_ms']['1']['wall']:.2f} / {r['step_ms']['4']['wall']:.2f}"
                      f" ms wall, load {r['load']:.1f}", file=sys.stderr)
    for n, measured in bandwidth.items():
        measured.append(read_gbs(threads=n))
    report(sides, bandwidth)
    if args.json:
        args.json.write_text(json.dumps({"sides": sides, "bandwidth_gbs": bandwidth}, indent=1))


if __name__ == "__main__":
    main()
