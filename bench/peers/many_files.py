"""10,000 files at a glance: how long the job runner's bookkeeping takes on a big folder.

    .venv/bin/python -m bench.peers many-files             # 10,000 files, this checkout
    .venv/bin/python -m bench.peers many-files --files 2000
    .venv/bin/python -m bench.peers many-files --code /tmp/old   # another checkout's code (BEFORE figures)

Builds a folder of ``--files`` tiny WAV clips (0.3 s each, hard links of one file: the job
runner's cost is per name, not per byte), then times, each in a fresh process as a user runs it:

- ``enqueue``: the 10,000 new files discovered and queued in a new database (``discover`` +
  ``enqueue_files``, in process: a real run would go on to decode them);
- ``rerun skip``: ``transcribe FOLDER`` when every file is done (marked done through the store
  API, with a subtitle written for each, so no clip is decoded): the whole command, wall;
- ``status``, ``status --json`` (wall, peak RSS, bytes written), ``--version`` and ``--help``.

Each command runs ``--repeat`` times; the table gives the best and the median wall time and the
best CPU time (user + system: the figure to compare on a shared machine).
``--code`` runs another checkout's ``transcriber`` (``python -m transcriber.app``) with this interpreter (its
dependencies must be the same), so BEFORE and AFTER are measured side by side on one machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# CPU: this process's and its children's (the walk and the content keys are read in child processes)
ENQUEUE = """
import resource, sys, time
from pathlib import Path
from transcriber.app.run.discover import discover
from transcriber.app.run.enqueue import enqueue_files
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.sqlite_store import SqliteJobStore
store = SqliteJobStore(sys.argv[1])
def cpu():
    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
t, before = time.perf_counter(), cpu()
files, missing = discover([Path(sys.argv[2])])
batch = enqueue_files(store, files, JobSpec(), None)
import transcriber.deadline.bounded as reader  # the reader process's CPU counted too (where it is one: closed and reaped)
getattr(reader, "_close_readers", lambda: None)()
print(f"{time.perf_counter() - t:.3f} {cpu() - before:.3f} {len(batch.to_run)}")
"""

# every job claimed and finished through the store, with its subtitle written: "done"
MARK_DONE = """
import sys
from pathlib import Path
from transcriber.app.store.sqlite_store import SqliteJobStore
store = SqliteJobStore(sys.argv[1])
ids = [j.id for j in store.jobs()]
for job_id in ids:
    job = store.claim("bench:0:0", [job_id], 600)
    srt = Path(job.output_stem + ".srt")
    srt.write_text("1\\n00:00:00,000 --> 00:00:00,300\\nhi\\n\\n")
    store.finish(job.id, "bench:0:0", [str(srt)])
print(len(ids))
"""


def make_clip(path: Path, seconds: float = 0.3, rate: int = 16000) -> None:
    """A quiet 440 Hz tone, 16-bit mono: a valid WAV ffmpeg reads."""
    import math
    frames = b"".join(struct.pack("<h", int(800 * math.sin(2 * math.pi * 440 * i / rate)))
                      for i in range(int(seconds * rate)))
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames)


def build_folder(folder: Path, n: int) -> None:
    """``n`` clips in folders of 1,000 (``d00/clip00000.wav``...), hard links of one clip."""
    clip = folder.parent / "clip.wav"
    make_clip(clip)
    for i in range(n):
        sub = folder / f"d{i // 1000:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        target = sub / f"clip{i:05d}.wav"
        try:
            os.link(clip, target)
        except OSError:  # a filesystem without hard links
            shutil.copy(clip, target)


def run(env: dict, code: Path, *args: str) -> tuple[float, float, int, int, str]:
    """(wall seconds, CPU seconds (user + system), peak RSS KiB, bytes on stdout, stdout) of one
    command, which must succeed. CPU time is the figure to compare on a shared machine: wall
    time there counts the other processes' turns too."""
    with tempfile.TemporaryFile() as out:
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *args], cwd=code, env=env, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        if proc.returncode != 0:
            sys.exit(f"{' '.join(args[:3])}... exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        out.seek(0)
        text = out.read()
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, len(text), text.decode(errors="replace")


def timed(label: str, repeat: int, env: dict, code: Path, *args: str) -> dict:
    runs = [run(env, code, *args) for _ in range(repeat)]
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    return {"what": label, "best": min(walls), "median": statistics.median(walls), "cpu": min(cpus),
            "bytes": runs[0][3], "rss_mb": max(r[2] for r in runs) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose transcriber/ runs")
    parser.add_argument("--keep", type=Path, default=None, help="build the folder here and keep it")
    args = parser.parse_args()
    code = args.code.resolve()
    work = args.keep or Path(tempfile.mkdtemp(prefix="many-files-"))
    work.mkdir(parents=True, exist_ok=True)
    folder, db = work / "in", work / "jobs.db"
    env = {**os.environ, "PYTHONPATH": str(code), "TRANSCRIBER_DB": str(db)}
    env.pop("TRANSCRIBER_DEBUG", None)
    try:
        if not folder.exists():
            build_folder(folder, args.files)
        rows = []
        walls, cpus = [], []
        for _ in range(args.repeat):
            for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
                p.unlink(missing_ok=True)
            out = run(env, code, "-c", ENQUEUE, str(db), str(folder))[-1]
            seconds, cpu, queued = out.split()
            assert int(queued) == args.files, out
            walls.append(float(seconds))
            cpus.append(float(cpu))
        rows.append({"what": f"enqueue {args.files} new (in process)", "best": min(walls),
                     "median": statistics.median(walls), "cpu": min(cpus), "bytes": 0, "rss_mb": 0.0})
        run(env, code, "-c", MARK_DONE, str(db))
        rows.append(timed(f"rerun, {args.files} done: transcribe FOLDER", args.repeat, env, code,
                          "-m", "transcriber.app", str(folder), "-q"))
        rows.append(timed("status", args.repeat, env, code, "-m", "transcriber.app", "status"))
        rows.append(timed("status --json", args.repeat, env, code, "-m", "transcriber.app", "status", "--json"))
        rows.append(timed("--version", args.repeat, env, code, "-m", "transcriber.app", "--version"))
        rows.append(timed("--help", args.repeat, env, code, "-m", "transcriber.app", "--help"))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"code: {code}; {args.files} files; load average {os.getloadavg()[0]:.2f}")
    print("| what | wall best s | wall median s | CPU best s | stdout | peak RSS |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['what']} | {r['best']:.3f} | {r['median']:.3f} | {r['cpu']:.3f} | {r['bytes'] / 1e6:.1f} MB | "
              f"{r['rss_mb']:.0f} MB |")


if __name__ == "__main__":
    main()
