"""The recall gate of a decoding change (issue 48): every long_en recording, one model, the modes
asked for: pooled WER, pieces lost (a piece of ``alignments/<name>.segments.json`` with under 30%
of its reference words, as ``../shared/tools/lost.py`` counts them) and words over the
``no_speech`` recordings.

    .venv/bin/python bench/recall_gate.py --model tiny.en --out /tmp/after.json
    .venv/bin/python bench/recall_gate.py --compare /tmp/before.json /tmp/after.json

Uses only the public API (``transcriber.transcribe``, ``transcriber.stream``), so the same script
measures any revision: run it with another checkout's interpreter to get its "before".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # evalkit from this checkout; the transcriber measured comes first
DATA = Path(os.environ.get("TRANSCRIBER_TEST_DATA") or ROOT.parent / "shared" / "data")
MIN_SHARE = 0.3


def entries(subset: str) -> list[dict]:
    rows = [json.loads(line) for line in (DATA / "manifest.jsonl").read_text().splitlines() if line.strip()]
    return [e for e in rows if e["subset"] == subset]


def decode(mode: str, model, path: Path) -> list[tuple[str, float, float]]:
    import transcriber

    words = transcriber.transcribe(path, model).words if mode == "oneshot" else list(transcriber.stream(path, model))
    return [(w.text, round(w.start, 3), round(w.end, 3)) for w in words]


def lost_pieces(entry: dict, words) -> list[dict]:
    """The pieces of ``entry``'s segments file whose words (by their middles) are under MIN_SHARE
    of the piece's reference words (pieces of under 3 words are not counted, as lost.py)."""
    if not entry.get("segments_file"):
        return []
    pieces = json.loads((DATA / entry["segments_file"]).read_text())
    if isinstance(pieces, dict):
        pieces = [x for v in pieces.values() if isinstance(v, list) for x in v
                  if isinstance(x, dict) and {"start", "end", "text"} <= set(x)]
    mids = [(a + b) / 2 for _, a, b in words]
    lost = []
    for p in pieces:
        ref = len(p["text"].split())
        if ref >= 3 and sum(p["start"] <= m <= p["end"] for m in mids) < MIN_SHARE * ref:
            lost.append({"start": p["start"], "end": p["end"], "text": p["text"]})
    return lost


def run(model_name: str, modes: list[str], no_speech: bool) -> dict:
    import transcriber
    from evalkit.scoring import wer

    model = transcriber.load_model(model_name)
    out = {"model": model_name, "modes": {}}
    for mode in modes:
        t0, files = time.perf_counter(), {}
        for e in entries("long_en"):
            words = decode(mode, model, DATA / e["file"])
            hyp = "".join(w[0] for w in words)
            files[e["file"]] = {"wer": wer(e["text"], hyp), "ref": e["text"], "hyp": hyp,
                                "lost": lost_pieces(e, words), "words": words}
        over = {}
        if no_speech:
            over = {e["file"]: decode(mode, model, DATA / e["file"]) for e in entries("no_speech")}
        out["modes"][mode] = {"files": files, "pooled_wer": wer([f["ref"] for f in files.values()],
                                                                [f["hyp"] for f in files.values()]),
                              "lost": sum(len(f["lost"]) for f in files.values()),
                              "words_over_no_speech": sum(len(w) for w in over.values()),
                              "no_speech_words": {k: v for k, v in over.items() if v},
                              "seconds": time.perf_counter() - t0}
    return out


def table(result: dict, label: str = "") -> str:
    lines = ["| run | model | mode | pooled WER % | pieces lost | words over no_speech | s |",
             "|---|---|---|---:|---:|---:|---:|"]
    for mode, r in result["modes"].items():
        lines.append(f"| {label} | {result['model']} | {mode} | {100 * r['pooled_wer']:.2f} | {r['lost']} | "
                     f"{r['words_over_no_speech']} | {r['seconds']:.0f} |")
        for f, x in r["files"].items():
            lines.append(f"|  |  | {Path(f).stem} | {100 * x['wer']:.2f} | {len(x['lost'])} |  |  |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--modes", default="oneshot,stream")
    ap.add_argument("--no-speech", action="store_true", help="also count the words over no_speech files")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args(argv)
    if args.compare:
        for label, p in zip(("before", "after"), args.compare):
            print(table(json.loads(p.read_text()), label))
        return
    result = run(args.model, args.modes.split(","), args.no_speech)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    print(table(result))


if __name__ == "__main__":
    main()
