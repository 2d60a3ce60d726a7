"""Accuracy on the dev set, both modes: WER, word start error, and every word's times saved.

    .venv/bin/python -m bench.peers dev-set --out before.json    # run, print a table, save words
    .venv/bin/python -m bench.peers dev-set --compare before.json after.json
    .venv/bin/python -m bench.peers dev-set --beam 5 --out beam5.json   # beam search in both modes
    .venv/bin/python -m bench.peers dev-set --modes oneshot --batch-files 2 --out b2.json
    .venv/bin/python -m bench.peers dev-set --model base --modes stream --out base.json

The dev set is the ``short_en`` + ``long_en`` recordings with an exact or exact-ish reference
(``$TRANSCRIBER_TEST_DATA``, else ``../shared/data``). Uses only the package's public API
(``transcriber.transcribe``, ``transcriber.stream``, ``OneShotEngine.side_by_side`` for
``--batch-files``: files side by side as ``transcribe --batch-files`` runs them), so the same script measures any two
revisions of the code; ``--compare`` says how far their words and word times moved.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# evalkit (the scoring) from this checkout; last on the path, so that $PYTHONPATH still picks the
# transcriber measured
sys.path.append(str(ROOT))
DATA = Path(os.environ.get("TRANSCRIBER_TEST_DATA") or ROOT.parent / "shared" / "data")


def rows(subsets=("short_en", "long_en")) -> list[dict]:
    lines = (DATA / "manifest.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines if line.strip()]
    return [e for e in entries if e["subset"] in subsets and e["reference_quality"] in ("exact", "exact-ish")]


def side_by_side(engine, paths: list[Path], width: int) -> list[list]:
    """Every file's words from ``engine.side_by_side(width)``: ``width`` files decoded side by side."""
    batch, waiting, words = engine.side_by_side(width), list(enumerate(paths)), [[] for _ in paths]
    while waiting and len(batch) < width:
        batch.add(*waiting.pop(0))
    for key, event in batch.events():
        if isinstance(event, Exception):
            raise event
        if event is not None:
            words[key] += event.words
        elif waiting:
            batch.add(*waiting.pop(0))
    return words


def decode_all(mode: str, model, paths: list[Path], beam: int | None, width: int) -> list[list]:
    import transcriber

    if mode == "oneshot" and width > 1:
        options = transcriber.TranscribeOptions(decoding=transcriber.DecodingOptions(beam_size=beam))
        return side_by_side(transcriber.OneShotEngine(model, options), paths, width)
    if mode == "oneshot":
        return [transcriber.transcribe(p, model, beam_size=beam).words for p in paths]
    options = transcriber.StreamingOptions(**({"beam_size": beam} if beam else {}))
    return [list(transcriber.stream(p, model, options=options)) for p in paths]


def run(modes: list[str], beam: int | None = None, width: int = 1, model_name: str = "tiny.en") -> dict:
    import transcriber
    from evalkit.scoring import error_quantiles, wer, word_start_errors

    model = transcriber.load_model(model_name)
    entries = rows()
    audio = sum(e["duration_s"] for e in entries)
    transcriber.transcribe(DATA / entries[0]["file"], model)  # warm up
    out = {"files": [e["file"] for e in entries], "modes": {}, "beam": beam, "batch_files": width,
           "model": model_name}
    for mode in modes:
        t0 = time.perf_counter()
        got = decode_all(mode, model, [DATA / e["file"] for e in entries], beam, width)
        seconds = time.perf_counter() - t0
        words = {e["file"]: [[w.text, round(w.start, 3), round(w.end, 3)] for w in ws]
                 for e, ws in zip(entries, got)}
        hyps = ["".join(w[0] for w in words[e["file"]]) for e in entries]
        errors = []
        for e in entries:
            if e.get("word_alignment"):
                ref = json.loads((DATA / e["word_alignment"]).read_text())["words"]
                errors += word_start_errors([(w["word"], w["start"]) for w in ref],
                                            [(w[0], w[1]) for w in words[e["file"]]])
        median, p90 = error_quantiles(errors) if errors else (None, None)
        out["modes"][mode] = {"wer": wer([e["text"] for e in entries], hyps), "rtf": seconds / audio,
                              "start_error_median": median, "start_error_p90": p90,
                              "n_timed": len(errors), "words": words}
    return out


def table(result: dict, label: str = "") -> str:
    lines = ["| run | mode | WER % | word start error median (s) | p90 (s) | RTF |", "|---|---|---:|---:|---:|---:|"]
    for mode, r in result["modes"].items():
        p90 = r.get("start_error_p90")  # not in results saved before it was added
        lines.append(f"| {label} | {mode} | {100 * r['wer']:.2f} | {r['start_error_median']:.3f} | "
                     f"{'' if p90 is None else f'{p90:.3f}'} | {r['rtf']:.3f} |")
    return "\n".join(lines)


def compare(a: dict, b: dict) -> str:
    """Per mode: files whose text differs, and how far the times of identical words moved."""
    lines = ["| mode | WER % before | after | files with other words | max start shift, same words (s) |",
             "|---|---:|---:|---:|---:|"]
    for mode in a["modes"]:
        if mode not in b["modes"]:
            continue
        wa, wb = a["modes"][mode]["words"], b["modes"][mode]["words"]
        changed, shift = 0, 0.0
        for f in wa:
            ta, tb = [w[0] for w in wa[f]], [w[0] for w in wb.get(f, [])]
            if ta != tb:
                changed += 1
                continue
            shift = max([shift] + [abs(x[1] - y[1]) for x, y in zip(wa[f], wb[f])])
        lines.append(f"| {mode} | {100 * a['modes'][mode]['wer']:.2f} | {100 * b['modes'][mode]['wer']:.2f} | "
                     f"{changed}/{len(wa)} | {shift:.3f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="oneshot,stream")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--out", type=Path, help="save the results (with every word) here")
    ap.add_argument("--beam", type=int, help="beam size in both modes (default: greedy)")
    ap.add_argument("--batch-files", type=int, default=1, help="one-shot: this many files side by side")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args(argv)
    if args.compare:
        a, b = (json.loads(p.read_text()) for p in args.compare)
        print(table(a, args.compare[0].stem))
        print(table(b, args.compare[1].stem).split("\n", 2)[2])
        print()
        print(compare(a, b))
        return
    if not (DATA / "manifest.jsonl").is_file():
        sys.exit(f"no recordings at {DATA}: set TRANSCRIBER_TEST_DATA")
    result = run(args.modes.split(","), args.beam, args.batch_files, args.model)
    print(table(result))
    if args.out:
        args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
