"""Word-start error against the dev set's forced alignments: ours one-shot, ours streaming and
faster-whisper (int8, the same weights) in one run.

    .venv/bin/python -m bench.peers word-times            # the table: median, p90, mean signed
    .venv/bin/python -m bench.peers word-times --words    # and every matched word's offset
    .venv/bin/python -m bench.peers word-times --model base     # base, faster-whisper on base's weights

The aligned files are the dev set's (``bench/peers/dev_set.py``) with a ``word_alignment`` in the
manifest. Offsets are hypothesis minus reference (> 0: the word is shown late); median and p90
are of their absolute values (``evalkit.scoring.word_start_offsets``). faster-whisper runs
in its own interpreter (``bench/_worker_peer.py``), skipped when its venv is missing.
"""
import argparse
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/
sys.path.insert(0, str(BENCH.parent))
from bench.peers.compare_faster_whisper import PEER_PY, run_worker  # noqa: E402
from bench.peers.dev_set import DATA, decode_all, rows  # noqa: E402
from bench.peers.multilingual import base_ct2_folder  # noqa: E402


def aligned() -> list[tuple[dict, list[tuple[str, float]]]]:
    """(manifest entry, reference [(word, start)]) for each dev-set file with word alignments."""
    from evalkit.scoring import aligned_starts

    return [(e, aligned_starts(DATA / e["word_alignment"])) for e in rows() if e.get("word_alignment")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", action="store_true", help="print every matched word's offset")
    ap.add_argument("--no-peer", action="store_true", help="ours only")
    ap.add_argument("--model", default="tiny.en", help="tiny.en or base (the peer reads the same weights)")
    ap.add_argument("--peer-python", type=Path, default=PEER_PY, help="faster-whisper's interpreter")
    args = ap.parse_args(argv)
    import transcriber
    from evalkit.scoring import error_quantiles, word_start_offsets

    files = aligned()
    paths = [DATA / e["file"] for e, _ in files]
    model = transcriber.load_model(args.model)
    hyps = {mode: [[(w.text, w.start) for w in ws] for ws in decode_all(mode, model, paths, None, 1)]
            for mode in ("oneshot", "stream")}
    if not args.no_peer:
        job = {"files": [str(p) for p in paths], "compute_type": "int8", "threads": 2, "word_timestamps": True,
               "warmup": False, "detail": True, "words": True}
        with tempfile.TemporaryDirectory() as folder:
            if args.model != "tiny.en":  # the peer's default folder is tiny.en's
                job["model_dir"] = str(base_ct2_folder(Path(folder)))
            res = run_worker(args.peer_python, "_worker_peer.py", job, 2, 600)
        if "error" in res:
            print(f"faster-whisper failed: {res['error']}", file=sys.stderr)
        else:
            hyps["faster-whisper int8"] = [[(w[2], w[0]) for w in h["words"]] for h in res["hyps"]]
    print("| system | words | median abs (s) | p90 abs (s) | mean signed (s) | late |\n|---|---:|---:|---:|---:|---:|")
    for name, per_file in hyps.items():
        offsets = []
        for (e, ref), hyp in zip(files, per_file):
            got = word_start_offsets(ref, hyp)
            offsets += got
            if args.words:
                print(f"  {name} {Path(e['file']).stem}: " + " ".join(f"{x:+.2f}" for x in got), file=sys.stderr)
        median, p90 = error_quantiles(offsets)
        n = len(offsets)
        print(f"| {name} | {n} | {median:.3f} | {p90:.3f} | {sum(offsets) / n:+.3f} | {sum(x > 0 for x in offsets)}/{n} |")


if __name__ == "__main__":
    main()
