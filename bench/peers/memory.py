"""Peak memory on a long file, both modes: is it flat?

    .venv/bin/python -m bench.peers memory                 # a 2-hour file, both modes
    .venv/bin/python -m bench.peers memory --hours 0.5 --modes stream

The long file is built here by looping the ``long_en`` recordings (``$TRANSCRIBER_TEST_DATA``,
else ``../shared/data``) with ffmpeg into a FLAC under the temp folder. Each mode runs in a
fresh process through the job-runner's path (``engine.steps``, words kept as the runner would
hand them to the store); a thread samples the process's resident memory every second. Prints
the peak and the resident memory after each tenth of the audio: a flat row means memory does
not grow with the file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("TRANSCRIBER_TEST_DATA") or ROOT.parent / "shared" / "data")

WORKER = r"""
import json, sys, threading, time
import transcriber

def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

path, mode, duration = sys.argv[1], sys.argv[2], float(sys.argv[3])
peak = [0.0]
def sample():
    while True:
        peak[0] = max(peak[0], rss_mb())
        time.sleep(1.0)
threading.Thread(target=sample, daemon=True).start()
engine = transcriber.make_engine(mode, transcriber.load_model("tiny.en"))
segments, marks, t0 = [], [], time.perf_counter()
for step in engine.steps(path):
    segments += step.segments
    while len(marks) < 10 and step.position >= duration * (len(marks) + 1) / 10 - 1.0:  # 1 s: the last chunk
        marks.append(round(rss_mb()))
peak[0] = max(peak[0], rss_mb())
print(json.dumps({"seconds": time.perf_counter() - t0, "peak_mb": peak[0], "marks": marks,
                  "words": sum(len(s.words) for s in segments)}))
"""


def build(hours: float, out: Path) -> float:
    """Loop the long_en recordings into ``out``; returns its duration in seconds."""
    from transcriber.media.audio import probe
    from transcriber.media.ffmpegtool import ffmpeg_binary

    rows = [json.loads(line) for line in (DATA / "manifest.jsonl").read_text().splitlines() if line.strip()]
    files = [DATA / r["file"] for r in rows if r["subset"] == "long_en"]
    total = sum(probe(f) for f in files)
    loops = max(1, round(hours * 3600 / total))
    listing = out.with_suffix(".txt")
    listing.write_text("".join(f"file '{f}'\n" for _ in range(loops) for f in files))
    subprocess.run([ffmpeg_binary(), "-nostdin", "-v", "error", "-y", "-f", "concat", "-safe", "0",
                    "-i", str(listing), "-ac", "1", "-ar", "16000", str(out)], check=True)
    return probe(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--modes", default="oneshot,stream")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "long.flac"
        duration = build(args.hours, path)
        print(f"{duration / 3600:.2f} h of audio ({path.stat().st_size / 2**20:.0f} MB FLAC)\n")
        print("| mode | RTF | words | peak RSS MB | RSS after each tenth of the audio (MB) |")
        print("|---|---:|---:|---:|---|")
        for mode in args.modes.split(","):
            out = subprocess.run([sys.executable, "-c", WORKER, str(path), mode, str(duration)],
                                 capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
            if out.returncode:
                print(f"| {mode} | failed: {out.stderr.strip().splitlines()[-1:]} | | | |")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {mode} | {r['seconds'] / duration:.3f} | {r['words']} | {r['peak_mb']:.0f} | "
                  f"{' '.join(str(m) for m in r['marks'])} |", flush=True)


if __name__ == "__main__":
    main()
