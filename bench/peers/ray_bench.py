"""The same folder in-process and on Ray, on this machine: is `--ray` worth it on one box?

    .venv/bin/python -m bench.peers ray-bench                # short_en + long_en recordings
    .venv/bin/python -m bench.peers ray-bench --subsets short_en --also-one-worker
    .venv/bin/python -m bench.peers ray-bench --folder examples/ --mode oneshot --repeat 3

Runs ``transcribe FOLDER`` as a user would, each run in a fresh process with a fresh job
database and output folder:

- in-process: one process, its BLAS on 2 threads (``TRANSCRIBER_BLAS_THREADS=2``);
- ``--ray --workers 2 --worker-threads 1``: a local Ray instance started by the command, two
  worker processes with 1 BLAS thread each;
- with ``--also-one-worker``: ``--ray --workers 1 --worker-threads 2`` too (one worker with both
  threads: what the default of one thread per worker is chosen against).

Wall time covers the whole command (Python start-up, model load, Ray start-up for the Ray runs).
The Ray start-up cost is read from the command's own lines ("started a local Ray instance ... in
X s", "workers ..., the first ready in Y s": the time before any work can start). Audio hours per hour = the folder's audio / wall time. Runs
alternate (in-process, Ray, in-process, ...) so that a change in the machine's load hits both;
with ``--repeat`` the median is shown. The words of every run must be the same, or it says so.

The folder defaults to the recordings' short_en and long_en subsets (``--subsets``) (``$TRANSCRIBER_TEST_DATA``,
else ../shared/data), copied to a temp folder; without them, examples/.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("TRANSCRIBER_TEST_DATA") or ROOT.parent / "shared" / "data")
COMMAND = [sys.executable, "-m", "transcriber.app"]

RUNS = {
    "in-process, 1 x 2 threads": ([], {"TRANSCRIBER_BLAS_THREADS": "2"}),
    "--ray, 2 workers x 1 thread": (["--ray", "--workers", "2", "--worker-threads", "1"], {}),
}
ONE_WORKER = ("--ray, 1 worker x 2 threads", (["--ray", "--workers", "1", "--worker-threads", "2"], {}))


def default_folder(tmp: Path, subsets: list[str]) -> Path:
    manifest = DATA / "manifest.jsonl"
    if not manifest.is_file():
        return ROOT / "examples"
    folder = tmp / "media"
    for line in manifest.read_text().splitlines():
        entry = json.loads(line)
        if entry["subset"] in subsets:
            target = folder / entry["file"]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(DATA / entry["file"], target)
    return folder


def audio_seconds(folder: Path) -> tuple[int, float]:
    from transcriber.app.run.discover import discover
    from transcriber import probe

    files, _ = discover([folder])
    return len(files), sum(probe(f) for f, _ in files)


def words(out: Path) -> dict:
    result = {}
    for path in sorted(out.rglob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        result[str(path.relative_to(out))] = [(w["word"], w["start"], w["end"])
                                             for s in data["segments"] for w in s["words"]]
    return result


def run_once(folder: Path, tmp: Path, name: str, flags: list[str], env_extra: dict, mode: str) -> dict:
    work = Path(tempfile.mkdtemp(dir=tmp))
    env = {k: v for k, v in os.environ.items() if k != "TRANSCRIBER_DB"}
    command = [*COMMAND, str(folder), "--db", str(work / "jobs.db"), "-o", str(work / "out"), "-f", "json",
               "--mode", mode, *flags]
    start = time.perf_counter()
    proc = subprocess.run(command, env={**env, **env_extra}, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{name}: exit status {proc.returncode}\n{proc.stderr[-2000:]}")
    init = re.search(r"started a local Ray instance \(\d+ CPUs\) in ([\d.]+) s", proc.stderr)
    ready = re.search(r"workers? \(\d+ BLAS threads? each\), the first ready in ([\d.]+) s", proc.stderr)
    return {"wall": wall, "words": words(work / "out"),
            "ray_init": float(init.group(1)) if init else None, "workers_ready": float(ready.group(1)) if ready else None}


def load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, help="media folder (default: recordings of --subsets)")
    parser.add_argument("--subsets", default="short_en,long_en", help="recordings' subsets (default: short_en,long_en)")
    parser.add_argument("--mode", default="stream", help="decoding mode (default: stream, the CLI's default)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (the median is shown)")
    parser.add_argument("--also-one-worker", action="store_true", help="also --ray --workers 1 --worker-threads 2")
    args = parser.parse_args()
    runs = dict(RUNS)
    if args.also_one_worker:
        runs[ONE_WORKER[0]] = ONE_WORKER[1]

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        folder = args.folder or default_folder(tmp, args.subsets.split(","))
        n_files, seconds = audio_seconds(folder)
        print(f"{n_files} files, {seconds:.1f} s of audio, --mode {args.mode}, {os.cpu_count()} CPUs; "
              f"before: {load()}", flush=True)
        results: dict[str, list[dict]] = {name: [] for name in runs}
        for i in range(args.repeat):
            for name, (flags, env_extra) in runs.items():
                results[name].append(run_once(folder, tmp, name, flags, env_extra, args.mode))
                print(f"  run {i + 1} {name}: {results[name][-1]['wall']:.1f} s ({load()})", flush=True)

    reference = next(iter(results.values()))[0]["words"]
    same = all(r["words"] == reference for rs in results.values() for r in rs)
    base = statistics.median(r["wall"] for r in next(iter(results.values())))
    print()
    print("| run | wall s | wall / in-process | audio h per h | Ray start-up s (init + first worker ready) |")
    print("|---|---:|---:|---:|---:|")
    for name, rs in results.items():
        wall = statistics.median(r["wall"] for r in rs)
        startup = "-"
        if rs[0]["ray_init"] is not None:
            init = statistics.median(r["ray_init"] for r in rs)
            ready = statistics.median(r["workers_ready"] for r in rs)
            startup = f"{init + ready:.1f} ({init:.1f} + {ready:.1f})"
        print(f"| {name} | {wall:.1f} | {wall / base:.2f} | {seconds / wall:.1f} | {startup} |")
    print()
    print(f"same words in every run: {'yes' if same else 'NO'}; after: {load()}")


if __name__ == "__main__":
    main()
