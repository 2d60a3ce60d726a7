"""The podcast table: readings between music and silence (evalkit.podcast), scored per system.

    bench/setup_peers.sh                                   # once: bench/.venvs/faster-whisper
    .venv/bin/python -m bench.peers podcast                # FULL layout (~6.5 min), tiny.en
    .venv/bin/python -m bench.peers podcast --layout short --systems oneshot,stream
    .venv/bin/python -m bench.peers podcast --layout long --systems oneshot,oneshot-vad,stream,stream-vad

Systems: ours one-shot, ours streaming (1 s chunks), faster-whisper (int8, the same tiny.en
weights: bench/peers/compare_faster_whisper.py's peer) without and with its Silero VAD
(``vad_filter``); ours with ``--vad`` (Silero VAD: only speech decoded); ours with the
reference's speech regions as the spans (``*-oracle``: no detector pass; what a perfect
detector would save). ``--layout long`` is the
20-minute file, half not speech, that the VAD is measured on. Each runs in its own fresh interpreter (bench/_worker_*.py), word timestamps on.
The recordings: --data, else $TRANSCRIBER_TEST_DATA, else ../shared/data. Prints a markdown table;
columns are explained in evalkit/podcast.py.
"""
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # bench/: the workers, .venvs
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
from bench.peers.compare_faster_whisper import PEER_PY, run_worker  # noqa: E402
from evalkit import podcast  # noqa: E402
from transcriber.transcript.types import Word  # noqa: E402

OURS_PY = ROOT / ".venv" / "bin" / "python"
LAYOUTS = {"full": podcast.FULL, "short": podcast.SHORT, "long": podcast.LONG}
# name -> (interpreter, worker, job fields)
SYSTEMS = {
    "oneshot": ("ours one-shot", OURS_PY, "_worker_ours.py", {"mode": "oneshot"}),
    "stream": ("ours streaming (1 s chunks)", OURS_PY, "_worker_ours.py", {"mode": "stream", "chunk_seconds": 1.0}),
    "oneshot-vad": ("ours one-shot --vad", OURS_PY, "_worker_ours.py", {"mode": "oneshot", "vad": True}),
    "stream-vad": ("ours streaming --vad", OURS_PY, "_worker_ours.py",
                   {"mode": "stream", "chunk_seconds": 1.0, "vad": True}),
    # the floor of any detector: the reference's speech regions (0.4 s of padding, as the VAD's) given
    # in place of the detector's spans, and no detector pass
    "oneshot-oracle": ("ours one-shot, spans from the reference", OURS_PY, "_worker_ours.py",
                       {"mode": "oneshot", "vad": True, "oracle": True}),
    "stream-oracle": ("ours streaming, spans from the reference", OURS_PY, "_worker_ours.py",
                      {"mode": "stream", "chunk_seconds": 1.0, "vad": True, "oracle": True}),
    "fw": ("faster-whisper int8", PEER_PY, "_worker_peer.py", {"compute_type": "int8"}),
    "fw-vad": ("faster-whisper int8 + vad_filter", PEER_PY, "_worker_peer.py",
               {"compute_type": "int8", "vad_filter": True}),
}


def reference_spans(cast, pad: float = 0.4) -> list[list[float]]:
    """The podcast's speech regions, ``pad`` seconds wider each side (the VAD pads its spans so)."""
    return [[max(0.0, r.start - pad), min(cast.duration, r.end + pad)] for r in cast.speech]


def table(rows, duration: float) -> str:
    out = ["| system | WER % | worst reading WER % | words in music/silence | cues wholly in it | "
           "worst cue intrusion s | words lost at music edges | sentence ends (ref) | past end | RTF | CPU s |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, card, (seconds, cpu) in rows:
        if card is None:
            out.append(f"| {name} | failed: {seconds} ||||||||||")
            continue
        written, reference = card.sentence_ends
        out.append(f"| {name} | {100 * card.wer:.2f} | {100 * card.worst_reading_wer:.1f} | "
                   f"{len(card.words_in_nonspeech)} | {card.cues_in_nonspeech} | {card.cue_intrusion:.2f} | "
                   f"{card.lost_at_boundaries} | {written} ({reference}) | {card.past_end} | "
                   f"{seconds / duration:.3f} | {cpu:.1f} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layout", choices=sorted(LAYOUTS), default="full")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    ap.add_argument("--model", default="tiny.en", help="our model (the peer uses its tiny.en folder)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", type=Path,
                    default=Path(os.environ.get("TRANSCRIBER_TEST_DATA") or ROOT.parent / "shared" / "data"))
    ap.add_argument("--json", type=Path, help="also write every system's words here")
    ap.add_argument("--show", action="store_true", help="print the words each system put in music or silence")
    args = ap.parse_args()

    layout = LAYOUTS[args.layout]
    cast = podcast.build_podcast(args.data, layout)
    rows, raw = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        path = cast.write_wav(Path(tmp) / "podcast.wav")
        print(f"podcast: {cast.duration:.1f} s, {len(cast.speech)} readings, {args.threads} threads, "
              f"load {os.getloadavg()[0]:.2f}", file=sys.stderr)
        for key in args.systems.split(","):
            name, python, worker, fields = SYSTEMS[key]
            if fields.get("oracle"):
                fields = {**fields, "speech_spans": reference_spans(cast)}
            job = {"files": [str(path)], "threads": args.threads, "word_timestamps": True, "warmup": False,
                   "detail": True, "words": True, "model": args.model, "compute_type": None, **fields}
            t0 = time.perf_counter()
            res = run_worker(python, worker, job, args.threads, timeout=3600)
            print(f"  {name}: {time.perf_counter() - t0:.1f} s wall", file=sys.stderr)
            if "error" in res:
                rows.append((name, None, (res["error"][:100], None)))
                continue
            words = [Word(float(a), float(b), t, float(p)) for a, b, t, p in res["hyps"][0]["words"]]
            card = podcast.score(cast, words)
            rows.append((name, card, (res["transcribe_s"], res["cpu_s"])))  # CPU s: the process's, load or not
            raw[name] = res["hyps"][0]
            if args.show:
                print(f"{name}: in music/silence: " + ", ".join(f"{w.text.strip()!r}@{w.start:.1f}"
                                                                for w in card.words_in_nonspeech), file=sys.stderr)
    print(f"podcast ({args.layout}): {cast.duration:.1f} s, {len(cast.speech)} readings; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}\n")
    print(table(rows, cast.duration))
    if args.json:
        args.json.write_text(json.dumps({"regions": [r.__dict__ for r in cast.regions], "systems": raw}, indent=1))


if __name__ == "__main__":
    main()
