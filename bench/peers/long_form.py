"""Ours, faster-whisper int8 and whisper.cpp on the same tiny.en weights, per file and pooled.

    bench/setup_peers.sh                                     # once: both peers, our ggml file
    .venv/bin/python -m bench.peers long-form                # dev set's English readings
    .venv/bin/python -m bench.peers long-form --context      # + whisper.cpp with its previous text
    .venv/bin/python -m bench.peers long-form --json /tmp/lf.json  # the hypotheses too

One run, one table: for each file of the dev set's English readings (``short_en`` and
``long_en`` with an ``exact`` or ``exact-ish`` reference), its WER under every system and
each system's time over faster-whisper int8's on that file; then the pooled WER and the total
time ratio. Systems, each in its own interpreter (bench/_worker_*.py), in turns, greedy:

- ours one-shot and ours streaming (1 s chunks), word timestamps on;
- faster-whisper int8 (the CTranslate2 model of the PyPI package we also read), word timestamps on;
- whisper.cpp, pywhispercpp's wheel, on that model written in whisper.cpp's ggml layout by
  bench/kernels/ggml_convert.py, with the wheel's defaults: greedy with its temperature fallback,
  ``no_context`` (each 30 s window decoded without the text before it), no token timestamps.

Times are the minimum over ``--repeat`` runs of each file's transcription (model load
excluded); WER after transcriber's evaluation normalizer.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/: the workers, .venvs
sys.path.insert(0, str(BENCH.parent))
from bench.peers.compare_faster_whisper import OURS_PY, PEER_PY, load_manifest, run_worker  # noqa: E402
from evalkit.scoring import normalize, word_errors  # noqa: E402

WCPP_PY = BENCH / ".venvs" / "whispercpp" / "bin" / "python"
GGML = BENCH / ".venvs" / "ggml-tiny.en.bin"
BASE = "faster-whisper int8"


def systems(args, ffmpeg: str) -> list[tuple[str, Path, str, dict]]:
    found = [("ours one-shot", OURS_PY, "_worker_ours.py", {"mode": "oneshot"})]
    if not args.no_stream:
        found.append(("ours streaming", OURS_PY, "_worker_ours.py", {"mode": "stream"}))
    found.append((BASE, PEER_PY, "_worker_peer.py", {"compute_type": "int8"}))
    wcpp = {"model_path": str(args.ggml), "ffmpeg": ffmpeg, "word_timestamps": False}
    found.append(("whisper.cpp", WCPP_PY, "_worker_whispercpp.py", wcpp))
    if args.context:
        found.append(("whisper.cpp, context", WCPP_PY, "_worker_whispercpp.py",
                      {**wcpp, "params": {"no_context": False}}))
    return found


def run_all(args, entries, ffmpeg) -> dict:
    job = {"files": [str(args.data / e["file"]) for e in entries], "threads": args.threads,
           "word_timestamps": True, "warmup": True, "model": "tiny.en", "compute_type": None}
    runs: dict[str, list] = {}
    for r in range(args.repeat):
        for name, python, worker, fields in systems(args, ffmpeg):
            res = run_worker(python, worker, {**job, **fields}, args.threads, args.timeout)
            runs.setdefault(name, []).append(res)
            took = res["error"] if "error" in res else f"{res['transcribe_s']:.1f} s"
            print(f"  run {r + 1}/{args.repeat} {name}: {took}", file=sys.stderr)
    return runs


def summarize(runs: dict, entries: list[dict]) -> dict:
    """Per system: per-file (errors, words, seconds) and its info, or its error."""
    refs = [normalize(e["text"]) for e in entries]
    out = {}
    for name, results in runs.items():
        ok = [r for r in results if "error" not in r]
        if not ok:
            out[name] = {"error": results[-1]["error"]}
            continue
        seconds = [min(r["file_s"][i] for r in ok) for i in range(len(entries))]
        errors = [word_errors(ref, normalize(hyp)) for ref, hyp in zip(refs, ok[0]["hyps"])]
        out[name] = {"seconds": seconds, "errors": errors, "hyps": ok[0]["hyps"], "info": ok[0]["info"]}
    return out


def print_table(summary: dict, entries: list[dict]) -> None:
    names = [n for n in summary if "error" not in summary[n]]
    base = summary.get(BASE, {}).get("seconds")
    head = " | ".join(f"{n} WER % | {n} time / fw" for n in names)
    print(f"| file | s | {head} |")
    print("|---|---:|" + "---:|---:|" * len(names))
    for i, e in enumerate(entries):
        cells = []
        for n in names:
            err, words = summary[n]["errors"][i]
            ratio = summary[n]["seconds"][i] / base[i] if base else float("nan")
            cells.append(f"{100 * err / max(words, 1):.2f} | {ratio:.2f}")
        print(f"| {Path(e['file']).name} | {e['duration_s']:.0f} | {' | '.join(cells)} |")
    cells = []
    for n in names:
        err = sum(e for e, _ in summary[n]["errors"])
        words = sum(w for _, w in summary[n]["errors"])
        ratio = sum(summary[n]["seconds"]) / sum(base) if base else float("nan")
        cells.append(f"**{100 * err / max(words, 1):.2f}** | **{ratio:.2f}**")
    print(f"| **pooled** | {sum(e['duration_s'] for e in entries):.0f} | {' | '.join(cells)} |")
    for n, s in summary.items():
        print(f"- {n}: {s.get('error') or s['info']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path,
                    default=Path(os.environ.get("TRANSCRIBER_TEST_DATA") or BENCH.parent.parent / "shared" / "data"))
    ap.add_argument("--subsets", default="short_en,long_en")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="runs per system; each file's minimum is kept")
    ap.add_argument("--no-stream", action="store_true", help="skip our streaming row")
    ap.add_argument("--context", action="store_true", help="also whisper.cpp with no_context off")
    ap.add_argument("--ggml", type=Path, default=GGML, help="the ggml file (bench/kernels/ggml_convert.py)")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--json", type=Path, help="also write the hypotheses and figures here")
    args = ap.parse_args()
    for need in (PEER_PY, WCPP_PY, args.ggml):
        if not need.exists():
            sys.exit(f"{need} is missing: run bench/setup_peers.sh first")
    from transcriber.media.ffmpegtool import ffmpeg_binary
    from transcriber.native.blas.probe import cpu_model

    entries = load_manifest(args.data, args.subsets.split(","))
    runs = run_all(args, entries, shutil.which("ffmpeg") or ffmpeg_binary())
    summary = summarize(runs, entries)
    print(f"tiny.en, {len(entries)} files ({args.subsets}), CPU {cpu_model()}, {os.cpu_count()} cores, "
          f"{args.threads} threads, repeat {args.repeat} (per-file minimum), load {os.getloadavg()[0]:.2f}\n")
    print_table(summary, entries)
    if args.json:
        args.json.write_text(json.dumps({"files": [e["file"] for e in entries], "systems": summary}, indent=1))


if __name__ == "__main__":
    main()
