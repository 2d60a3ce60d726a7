"""Streaming's punctuation and words over a wider set than the one podcast: every long English
reading with a punctuated reference, and the podcast's readings, each after a music intro and
after silence, plus the full podcast layout (evalkit.podcast builds and scores them all).

    .venv/bin/python -m bench.peers punct-eval                         # default options
    .venv/bin/python -m bench.peers punct-eval --set punctuated_prompt=true --json out.json
    .venv/bin/python -m bench.peers punct-eval --layouts lj-music,full

Per layout: word errors / reference words, sentence ends written / in the reference, words in
music or silence, reference words lost next to music, mean emission lag (``emitted_at - end``,
source time). One streaming run per layout (``StreamingEngine`` over the layout written as
16-bit WAV, as bench/peers/podcast.py feeds it). Totals are over the layouts other than ``full``
(its readings are the same recordings again), and the full layout is shown apart. Words do
not depend on machine load; the lag is source time, so neither does it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import fields
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/
sys.path.insert(0, str(BENCH.parent))
import numpy as np  # noqa: E402

import transcriber  # noqa: E402
from bench.streaming.modes import parse_value  # noqa: E402
from evalkit import podcast  # noqa: E402
from evalkit.podcast import Music, Silence  # noqa: E402
from transcriber import StreamingEngine, StreamingOptions  # noqa: E402

LONG = ("ljspeech_LJ001-0001_0032_concat.flac", "osr_us_000_0034_harvard.flac")
# the podcast's other readings (evalkit.podcast.FULL), each short
SHORTS = ("librivox_sas01_0880.flac", "librivox_sas01_0890.flac", "librivox_sas01_0930.flac",
          "sr_one_two_three.flac", "ljspeech_LJ002-0020.flac", "ljspeech_LJ002-0035.flac", "jfk.flac")


def _after(intro, readings, gap) -> tuple:
    """``intro`` before the first reading and ``gap`` (a function of the reading's index)
    before each later one; 2 s of silence at the end."""
    pieces = [intro]
    for i, name in enumerate(readings):
        if i:
            pieces.append(gap(i))
        pieces.append(name)
    return tuple(pieces) + (Silence(2.0),)


LAYOUTS = {
    "lj-music": _after(Music(0.0, 15.0), LONG[:1], None),
    "lj-silence": _after(Silence(3.0), LONG[:1], None),
    "harvard-music": _after(Music(15.0, 15.0), LONG[1:], None),
    "harvard-silence": _after(Silence(3.0), LONG[1:], None),
    # music slices from different places of the recording, so each intro differs
    "shorts-music": _after(Music(0.0, 8.0), SHORTS, lambda i: Music(8.0 * i, 8.0)),
    "shorts-silence": _after(Silence(3.0), SHORTS, lambda i: Silence(3.0)),
    "full": podcast.FULL,
}


def run_layout(model, options: StreamingOptions, layout, data: Path, tmp: Path) -> dict:
    cast = podcast.build_podcast(data, layout)
    path = cast.write_wav(tmp / "layout.wav")
    words = [w for step in StreamingEngine(model, options).steps(path) for w in step.words]
    card = podcast.score(cast, words)
    written, reference = card.sentence_ends
    return {"errors": sum(r.errors for r in card.readings), "ref_words": sum(r.ref_words for r in card.readings),
            "ends": written, "ref_ends": reference, "in_nonspeech": len(card.words_in_nonspeech),
            "lost": card.lost_at_boundaries, "lags": [w.emitted_at - w.end for w in words],
            "readings": [[r.name, r.errors, r.ref_words, *r.sentence_ends] for r in card.readings],
            "text": "".join(w.text for w in words)}


def row(name: str, r: dict) -> str:
    lag = float(np.mean(r["lags"])) if r["lags"] else float("nan")
    return (f"| {name} | {r['errors']} / {r['ref_words']} | {100 * r['errors'] / max(1, r['ref_words']):.2f} | "
            f"{r['ends']} / {r['ref_ends']} | {r['in_nonspeech']} | {r['lost']} | {lag:.2f} |")


def total(results: dict) -> dict:
    parts = [r for name, r in results.items() if name != "full"]
    return {k: (sum((r[k] for r in parts), []) if k == "lags" else sum(r[k] for r in parts))
            for k in ("errors", "ref_words", "ends", "ref_ends", "in_nonspeech", "lost", "lags")}


def parse_overrides(ap, items: list[str]) -> dict:
    names = {f.name for f in fields(StreamingOptions)}
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in names:
            ap.error(f"unknown StreamingOptions field {key!r}")
        lowered = value.lower()
        out[key] = lowered == "true" if lowered in ("true", "false") else parse_value(None, value)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help=f"comma-separated, of {', '.join(LAYOUTS)}")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="a StreamingOptions field")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--data", type=Path,
                    default=Path(os.environ.get("TRANSCRIBER_TEST_DATA") or BENCH.parents[1] / "shared" / "data"))
    ap.add_argument("--json", type=Path, help="also write every layout's result (and text) here")
    args = ap.parse_args(argv)
    names = args.layouts.split(",")
    unknown = [n for n in names if n not in LAYOUTS]
    if unknown:
        ap.error(f"unknown layout(s): {', '.join(unknown)}")
    overrides = parse_overrides(ap, args.set)
    options = StreamingOptions(**{"language": "en", **overrides})
    model = transcriber.load_model(args.model)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            results[name] = run_layout(model, options, LAYOUTS[name], args.data, Path(tmp))
            print(row(name, results[name]), file=sys.stderr, flush=True)
    print(f"\nmodel {args.model}, options {overrides or 'default'}; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}\n")
    print("| layout | errors / words | WER % | sentence ends / ref | words in music/silence | lost at music edges "
          "| mean lag s |\n|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        if name != "full":
            print(row(name, results[name]))
    if len(results) > ("full" in results):
        print(row("**total (without full)**", total(results)))
    if "full" in results:
        print(row("full podcast", results["full"]))
    if args.json:
        args.json.write_text(json.dumps({"options": overrides, "results": results}, indent=1))


if __name__ == "__main__":
    main()
