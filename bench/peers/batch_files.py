"""One-shot over a folder: files one after another against files side by side (``--batch-files``).

    .venv/bin/python -m bench.peers batch-files                 # short_en + long_en, widths 2 and 4
    .venv/bin/python -m bench.peers batch-files --copies 4 --subset long_en --widths 4
    .venv/bin/python -m bench.peers batch-files --subset long_en --widths 2 --vad   # with --vad

The files of the chosen subsets (``--copies N``: each N times, a folder of equal files) are
transcribed by ``OneShotEngine`` one after another, then side by side at each width
(``Engine.side_by_side``, what ``transcribe --batch-files`` runs; ``--vad``: each file's speech
spans, its detector pass when it joins), in one process with the model
warmed up. Prints a markdown table: wall time, its ratio to one after another, RTF, WER, and
whether every file got the same words as one after another.

The recordings: ``$TRANSCRIBER_TEST_DATA``, else ``../shared/data`` beside the repository.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository
from bench.streaming.modes import DATA, manifest  # noqa: E402  (also puts the repository on sys.path)

import transcriber  # noqa: E402
from transcriber import engine_options, make_engine  # noqa: E402
from evalkit.scoring import wer  # noqa: E402


def one_after_another(engine, files):
    return [[w.text for s in engine.steps(f) for w in s.words] for f in files]


def side_by_side(engine, files, width):
    batch, waiting, words = engine.side_by_side(width), list(enumerate(files)), [[] for _ in files]
    while waiting and len(batch) < width:
        key, path = waiting.pop(0)
        batch.add(key, path)
    for key, event in batch.events():
        if isinstance(event, Exception):
            raise event
        if event is not None:
            words[key] += [w.text for w in event.words]
        elif waiting:
            key, path = waiting.pop(0)
            batch.add(key, path)
    return words


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subset", default="short_en,long_en", help="comma-separated manifest subsets")
    ap.add_argument("--copies", type=int, default=1, help="each file this many times")
    ap.add_argument("--widths", default="2,4", help="comma-separated --batch-files values")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--vad", action="store_true", help="decode only the speech Silero VAD finds")
    args = ap.parse_args(argv)

    rows = manifest(args.subset.split(",")) * args.copies
    files = [DATA / r["file"] for r in rows]
    refs = [r["text"] for r in rows]
    duration = sum(r["duration_s"] for r in rows)
    engine = make_engine("oneshot", transcriber.load_model(args.model),
                         engine_options("oneshot", {"vad": True} if args.vad else {}))
    list(engine.steps(files[0]))  # warm up

    t0 = time.perf_counter()
    alone = one_after_another(engine, files)
    base = time.perf_counter() - t0
    table = [("one after another", base, alone)]
    for width in [int(w) for w in args.widths.split(",")]:
        t0 = time.perf_counter()
        words = side_by_side(engine, files, width)
        table.append((f"side by side, {width} files", time.perf_counter() - t0, words))

    print(f"\n{len(files)} file(s) ({args.subset} x {args.copies}), {duration:.1f} s of audio, model {args.model}"
          f"{', --vad' if args.vad else ''}, "
          f"{transcriber.blas.describe()}\n")
    print("| one-shot | wall s | / one after another | RTF | WER % | same words |")
    print("|---|---:|---:|---:|---:|---|")
    for name, seconds, words in table:
        hyps = ["".join(w).strip() for w in words]
        same = sum(a == b for a, b in zip(words, alone))
        print(f"| {name} | {seconds:.2f} | {seconds / base:.2f} | {seconds / duration:.3f} | "
              f"{100 * wer(refs, hyps):.2f} | {same}/{len(files)} |")


if __name__ == "__main__":
    main()
