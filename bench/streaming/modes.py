"""Streaming vs one-shot on the same recordings: RTF, WER, and how late words come out.

    .venv/bin/python -m bench.streaming modes                # long_en, chunks 0.5 / 1 / 2 s
    .venv/bin/python -m bench.streaming modes --subset short_en,long_en --chunks 1
    .venv/bin/python -m bench.streaming modes --set audio_trim_len=none --set beam_size=2

RTF is processing time / audio duration (model loaded and warmed up first; audio decoding by
ffmpeg included, as in real use). WER is pooled over the files (``evalkit.scoring``).
Lag is ``emitted_at - end`` of every streamed word: how long after a word was spoken it was
committed, in source time (processing time not included). Prints a markdown table.

The recordings: ``$TRANSCRIBER_TEST_DATA``, else ``../shared/data`` beside the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import numpy as np  # noqa: E402

import transcriber  # noqa: E402
from evalkit.scoring import wer  # noqa: E402
from transcriber import StreamingOptions, stream  # noqa: E402

DATA = Path(os.environ.get("TRANSCRIBER_TEST_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data")


def manifest(subsets: list[str]) -> list[dict]:
    rows = [json.loads(line) for line in (DATA / "manifest.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["subset"] in subsets and r["reference_quality"] in ("exact", "exact-ish")]


def parse_value(field_type, text: str):
    if text.lower() in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def run_oneshot(model, rows):
    hyps, seconds = [], 0.0
    for r in rows:
        t0 = time.perf_counter()
        hyps.append(transcriber.transcribe(DATA / r["file"], model=model).text)
        seconds += time.perf_counter() - t0
    return hyps, seconds


def run_stream(model, rows, options):
    hyps, lags, seconds = [], [], 0.0
    for r in rows:
        t0 = time.perf_counter()
        words = list(stream(DATA / r["file"], model, options=options))
        seconds += time.perf_counter() - t0
        hyps.append("".join(w.text for w in words))
        lags += [w.emitted_at - w.end for w in words]
    return hyps, lags, seconds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subset", default="long_en", help="comma-separated manifest subsets")
    ap.add_argument("--chunks", default="0.5,1,2", help="comma-separated chunk seconds")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="a StreamingOptions field (repeatable)")
    ap.add_argument("--no-oneshot", action="store_true")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--show", action="store_true", help="print the streamed text")
    args = ap.parse_args(argv)

    rows = manifest(args.subset.split(","))
    refs = [r["text"] for r in rows]
    duration = sum(r["duration_s"] for r in rows)
    overrides = {}
    names = {f.name: f.type for f in fields(StreamingOptions)}
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in names:
            ap.error(f"unknown StreamingOptions field {key!r}")
        overrides[key] = parse_value(names[key], value)
    model = transcriber.load_model(args.model)
    list(stream(DATA / rows[0]["file"], model, options=StreamingOptions(**overrides)))  # warm up

    results = []
    if not args.no_oneshot:
        hyps, seconds = run_oneshot(model, rows)
        results.append({"mode": "one-shot", "chunk_s": None, "rtf": seconds / duration, "wer": wer(refs, hyps),
                        "lag_mean": None, "lag_p90": None})
    for chunk in [float(c) for c in args.chunks.split(",")]:
        options = replace(StreamingOptions(**overrides), chunk_seconds=chunk)
        hyps, lags, seconds = run_stream(model, rows, options)
        if args.show:
            for h in hyps:
                print(h.strip(), "\n")
        results.append({"mode": "stream", "chunk_s": chunk, "rtf": seconds / duration, "wer": wer(refs, hyps),
                        "lag_mean": float(np.mean(lags)) if lags else None,
                        "lag_p90": float(np.percentile(lags, 90)) if lags else None})

    print(f"\n{len(rows)} file(s) of {args.subset}, {duration:.1f} s of audio, model {args.model}, "
          f"options {overrides or 'default'}\n")
    print("| mode | chunk (s) | RTF | WER | mean lag (s) | p90 lag (s) |")
    print("|---|---|---|---|---|---|")
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    for r in results:
        print(f"| {r['mode']} | {fmt(r['chunk_s'], 'g')} | {r['rtf']:.3f} | {100 * r['wer']:.2f}% | "
              f"{fmt(r['lag_mean'], '.2f')} | {fmt(r['lag_p90'], '.2f')} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"subset": args.subset, "options": overrides, "results": results},
                                              indent=1))


if __name__ == "__main__":
    main()
