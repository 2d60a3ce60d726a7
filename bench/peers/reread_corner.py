"""Fit ``nonspeech.REREAD_CORNER`` on one half of the guard's readings, report it on the other.

The guard (transcriber/engines/decoding/guard.py) reads a voiced stretch that got no word again alone;
a reading is refused as a guess when sampled, by ``GUESS_CORNERS``, or beyond REREAD_CORNER
(no-speech over, mean log probability under). This script takes the readings that
bench/peers/recall.py's runs of ours recorded (each file's "rereads") and labels each one:

- speech: at least half its words are words of the file's reference text;
- guess: any reading over a no_speech recording (the sung lyrics apart), or over speech whose
  words are not the reference's (text the audio does not hold);

splits the files in two halves (alternately, in the run's file order: A, B, A, ...), picks on
half A the corner that refuses the most guesses over no_speech recordings (words over
non-speech), then keeps the most speech, then refuses the most other guesses, then is the
loosest; and prints both halves' counts for it and for the corner in the code.

    .venv/bin/python -m bench.peers reread-corner RUN.json [RUN.json ...]
    .venv/bin/python -m bench.peers reread-corner RUN.json --synth tiny.en,base   # + bench/peers/nonspeech_set.py

``--synth`` adds the guard's readings over every class of bench/peers/nonspeech_set.py (30 s, two
seeds, both modes, decoded here), all of them guesses: the recall runs' sounds rarely give the
guard a stretch to read (it reads what a window or pass left unheard).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from evalkit.scoring import normalize  # noqa: E402
from transcriber.engines import nonspeech  # noqa: E402
from bench.peers.recall import SUNG  # noqa: E402

NO_SPEECH = tuple(round(0.05 * i, 2) for i in range(1, 20))  # the grid the corner is fitted on
LOGPROB = tuple(round(-0.05 * i, 2) for i in range(2, 41))


def label(reading: dict, entry: dict) -> str | None:
    """"speech", "guess", or None (the sung lyrics: neither)."""
    if entry["file"].rsplit("/", 1)[-1] in SUNG:
        return None
    if entry["kind"] == "nospeech":
        return "guess"
    said = normalize(reading["text"]).split()
    if not said:
        return "guess"
    text = entry.get("text") or " ".join(piece[2] for piece in entry.get("pieces") or [])  # (a stress set's)
    reference = set(normalize(text).split())
    return "speech" if sum(w in reference for w in said) >= len(said) / 2 else "guess"


def readings(paths: list[str]) -> list[dict]:
    out = []
    for path in paths:
        run = json.loads(Path(path).read_text())
        for model, systems in run["runs"].items():
            for system, result in systems.items():
                for i, (entry, hyp) in enumerate(zip(run["files"], result["hyps"])):
                    for r in (hyp.get("rereads") or []) if isinstance(hyp, dict) else []:
                        kind = label(r, entry)
                        if kind:
                            out.append({**r, "label": kind, "half": "AB"[i % 2], "model": model,
                                        "nospeech": entry["kind"] == "nospeech",
                                        "system": system, "file": entry["file"].rsplit("/", 1)[-1]})
    return out


def synthesized(models: list[str], seeds=(0, 1), seconds: float = 30.0) -> list[dict]:
    """The guard's readings over bench/peers/nonspeech_set.py's classes, as ``readings`` gives them."""
    import logging
    import tempfile

    import transcriber
    from bench.peers import nonspeech_set
    from bench.peers.nonspeech_set import write_wav
    from bench.peers.recall import DATA

    found: list[dict] = []

    class Catch(logging.Handler):
        def emit(self, record):
            if hasattr(record, "reread"):
                found.append(dict(record.reread))

    log = logging.getLogger("transcriber.guard")
    log.setLevel(logging.DEBUG)
    log.addHandler(Catch())
    out, folder = [], Path(tempfile.mkdtemp(prefix="reread-"))
    names = [(name, seed) for name in nonspeech_set.CLASSES for seed in seeds]
    halves = {name: "AB"[i % 2] for i, name in enumerate(nonspeech_set.CLASSES)}  # by class, as files
    for model_name in models:
        model = transcriber.load_model(model_name)
        for name, seed in names:
            path = write_wav(folder / f"{name}-{seed}.wav", nonspeech_set.synthesize(name, seconds, DATA, seed))
            for system, engine in (("ours one-shot", transcriber.OneShotEngine(model, transcriber.TranscribeOptions(
                    decoding=transcriber.DecodingOptions(language="en")))), ("ours streaming", transcriber.StreamingEngine(
                    model, transcriber.StreamingOptions(language="en")))):
                del found[:]
                for _ in engine.steps(str(path)):
                    pass
                out += [{**r, "label": "guess", "half": halves[name], "model": model_name, "system": system,
                         "nospeech": True, "file": path.name} for r in found]
            print(f"  {model_name} {name} seed {seed}: {len(out)} readings so far", file=sys.stderr)
    return out


def refused(r: dict, corner: tuple[float, float] | None) -> bool:
    """What ``nonspeech.is_reread_guess`` decides with ``corner`` as REREAD_CORNER (None: none)."""
    corners = nonspeech.GUESS_CORNERS + ((corner,) if corner else ())
    return r["temperature"] > 0 or nonspeech._beyond(corners, r["no_speech_prob"], r["avg_logprob"])


def counts(rs: list[dict], corner) -> str:
    speech = [r for r in rs if r["label"] == "speech"]
    guesses = [r for r in rs if r["label"] == "guess"]
    kept = sum(not refused(r, corner) for r in speech)
    stopped = sum(refused(r, corner) for r in guesses)
    return f"speech kept {kept}/{len(speech)}, guesses refused {stopped}/{len(guesses)}"


def fit(rs: list[dict]) -> tuple[float, float]:
    """The corner of the grid that ranks first (the module's docstring)."""
    best = None
    for corner in ((ns, lp) for ns in NO_SPEECH for lp in LOGPROB):
        over_nonspeech = sum(refused(r, corner) for r in rs if r["nospeech"])
        stopped = sum(refused(r, corner) for r in rs if r["label"] == "guess")
        kept = sum(not refused(r, corner) for r in rs if r["label"] == "speech")
        key = (over_nonspeech, kept, stopped, corner[0], -corner[1])
        if best is None or key > best[0]:
            best = (key, corner)
    return best[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="bench/peers/recall.py --json outputs (ours, with rereads)")
    ap.add_argument("--synth", default="", help="models to decode bench/peers/nonspeech_set.py's classes with")
    args = ap.parse_args()
    rs = readings(args.runs) + (synthesized(args.synth.split(",")) if args.synth else [])
    if not rs:
        sys.exit("no readings of the guard in these runs (ours, run with this checkout's bench/_worker_ours.py)")
    a, b = [r for r in rs if r["half"] == "A"], [r for r in rs if r["half"] == "B"]
    corner = fit(a)
    print(f"{len(rs)} readings ({len(a)} in half A, {len(b)} in half B)\n")
    print("| corner | half | all | " + " | ".join(sorted({f'{r["model"]} {r["system"]}' for r in rs})) + " |")
    groups = sorted({(r["model"], r["system"]) for r in rs})
    print("|---|---|---|" + "---|" * len(groups))
    for name, c in ((f"fitted on A {corner}", corner), (f"in the code {nonspeech.REREAD_CORNER}", nonspeech.REREAD_CORNER),
                    ("none", None)):
        for half, part in (("A", a), ("B", b)):
            cells = [counts([r for r in part if (r["model"], r["system"]) == g], c) for g in groups]
            print(f"| {name} | {half} | {counts(part, c)} | " + " | ".join(cells) + " |")
    print("\nreadings (label, half, model, system, file, no-speech, log probability, temperature, text):")
    for r in sorted(rs, key=lambda r: (r["label"], r["no_speech_prob"])):
        print(f"  {r['label']:6} {r['half']} {r['model']:7} {r['system']:18} {r['file'][:40]:40} "
              f"{r['no_speech_prob']:.2f} {r['avg_logprob']:6.2f} {r['temperature']:.1f} {r['text'][:60]!r}")


if __name__ == "__main__":
    main()
