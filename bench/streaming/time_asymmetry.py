"""Does the audio run forwards? ``nonspeech.time_asymmetry`` over speech, speech played backwards
and non-speech: the measure behind the gate's ``BACKWARDS_BELOW``.

    .venv/bin/python -m bench.streaming time-asymmetry        # 10 s windows of every recording
    .venv/bin/python -m bench.streaming time-asymmetry --seconds 3
    .venv/bin/python -m bench.streaming time-asymmetry --readings       # what the gate judges, both modes
    .venv/bin/python -m bench.streaming time-asymmetry --backwards      # words written over readings played backwards

Windows: every recording of the data (--data, else $TRANSCRIBER_TEST_DATA, else ../shared/data)
cut in windows of --seconds (half overlapping; a shorter recording whole), as it is and played
backwards; the podcast (evalkit.podcast, speech between music); bench/peers/nonspeech_set.py's classes
(the reversed voice at seeds 0, 1, 3, which pick three readings, and at three lengths) and
--recordings DIR (each WAV file there). Prints min / median / max per group.

--readings: tiny.en over the dev set's English recordings, the Apollo 11 radio, the podcast, the
reversed voice and the same readings forwards (seeds 0-4) and --recordings, one-shot and
streaming; every reading the gate judges (the model unsure of it, 2.5 s of audio or more) is
recorded with its asymmetry, and the table says, per source and mode, how many and their range.

--backwards: the words tiny.en writes, one-shot and streaming, over each English reading of the
dev set and the extra subset played backwards (whole, not looped).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench.peers.nonspeech_set import CLASSES, data_folder, recorded, synthesize, words_written, write_wav  # noqa: E402
from evalkit.podcast import FULL, build_podcast  # noqa: E402
from transcriber.engines import nonspeech  # noqa: E402
from transcriber.media.audio import load_audio  # noqa: E402
from transcriber.model.mel import log_mel_spectrogram  # noqa: E402

SR = 16000


def asymmetry(samples: np.ndarray) -> float:
    value = nonspeech.time_asymmetry(np.asarray(log_mel_spectrogram(np.asarray(samples, np.float32))))
    return float("nan") if value is None else value


def windows(x: np.ndarray, seconds: float) -> list[np.ndarray]:
    n, hop = int(seconds * SR), int(seconds * SR / 2)
    return [x] if len(x) <= n else [x[s:s + n] for s in range(0, len(x) - n + 1, hop)]


def window_groups(data: Path, seconds: float, recordings: list[Path]) -> dict[str, list[float]]:
    groups: dict[str, list[float]] = {}
    for entry in map(json.loads, (data / "manifest.jsonl").read_text().splitlines()):
        x, name = load_audio(str(data / entry["file"])), Path(entry["file"]).stem
        kind = ("no_speech" if entry["language"] == "none" else "Apollo 11 radio" if "apollo" in name
                else "English speech" if entry["language"] == "en" else "other languages")
        directions = [("", x)] if kind == "no_speech" else [(" forwards", x), (" backwards", x[::-1].copy())]
        for direction, audio in directions:
            groups.setdefault(kind + direction, []).extend(asymmetry(w) for w in windows(audio, seconds))
    groups["podcast (speech between music)"] = [asymmetry(w) for w in windows(build_podcast(data, FULL).samples, seconds)]
    for seed in (0, 1, 3):
        for length in (seconds, 20.0, 30.0):
            voice = synthesize("reversed_voice", length, data, seed)
            groups.setdefault("reversed_voice", []).append(asymmetry(voice))
            groups.setdefault("reversed_voice played forwards", []).append(asymmetry(voice[::-1].copy()))
    for name in CLASSES:
        if name != "reversed_voice":
            groups.setdefault("other synthesized non-speech", []).append(asymmetry(synthesize(name, 15.0, data, 0)))
    for path in recordings:
        groups.setdefault("--recordings", []).append(asymmetry(recorded(path, 15.0, 0)))
    return groups


def judged_readings(data: Path, recordings: list[Path], tmp: Path) -> list[tuple[str, str, int, float]]:
    """(source, mode, words written, asymmetry) for every reading the gate judges."""
    import transcriber
    from transcriber.engines.modes import make_engine

    judged: list[float] = []
    judge = nonspeech.runs_backwards

    def recording_judge(mel):
        if len(mel) >= nonspeech.MIN_JUDGED_FRAMES:
            judged.append(nonspeech.time_asymmetry(mel))
        return judge(mel)

    nonspeech.NonSpeechGate.runs_backwards = staticmethod(recording_judge)
    sources = english_readings(data)
    sources.append(("podcast", build_podcast(data, FULL).write_wav(tmp / "podcast.wav")))
    for seed, seconds in ((0, 15.0), (1, 30.0), (2, 20.0), (3, 15.0), (4, 10.0)):
        voice = synthesize("reversed_voice", seconds, data, seed)
        sources.append((f"reversed_voice {seconds:g} s seed {seed}", write_wav(tmp / f"r{seed}.wav", voice)))
        sources.append((f"  played forwards", write_wav(tmp / f"f{seed}.wav", voice[::-1].copy())))
    for path in recordings:
        for seed, seconds in ((0, 15.0), (1, 30.0)):
            sources.append((f"{path.stem} {seconds:g} s seed {seed}", write_wav(tmp / f"{path.stem}{seed}.wav",
                                                                               recorded(path, seconds, seed))))
    engines = {m: make_engine(m, transcriber.load_model("tiny.en")) for m in ("oneshot", "stream")}
    rows = []
    for name, path in sources:
        for mode, engine in engines.items():
            judged.clear()
            words = len(words_written(engine, path))
            rows.extend((name, mode, words, a) for a in judged)
            if not judged:
                rows.append((name, mode, words, float("nan")))
            print(f"  {name} {mode}: {words} words, {len(judged)} judged", file=sys.stderr, flush=True)
    return rows


def english_readings(data: Path) -> list[tuple[str, Path]]:
    entries = map(json.loads, (data / "manifest.jsonl").read_text().splitlines())
    return [(Path(e["file"]).stem, data / e["file"]) for e in entries
            if e["language"] == "en" and e["subset"] in ("short_en", "long_en", "extra")]


def backwards_words(data: Path, tmp: Path) -> None:
    import transcriber
    from transcriber.engines.modes import make_engine

    model = transcriber.load_model("tiny.en")
    engines = {m: make_engine(m, model) for m in ("oneshot", "stream")}
    print("| reading played backwards | seconds | one-shot words | stream words |")
    print("|---|---:|---:|---:|")
    for name, path in english_readings(data):
        x = load_audio(str(path))[::-1].copy()
        wav = write_wav(tmp / f"{name}.wav", x)
        counts = [str(len(words_written(engine, wav))) for engine in engines.values()]
        print(f"| {name} | {len(x) / SR:.1f} | " + " | ".join(counts) + " |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--data")
    ap.add_argument("--recordings", help="a folder of non-speech WAV files (pygame's: pygame/examples/data)")
    ap.add_argument("--readings", action="store_true", help="the readings the gate judges, both modes (tiny.en)")
    ap.add_argument("--backwards", action="store_true", help="words written over the readings played backwards")
    args = ap.parse_args()
    data = data_folder(args.data)
    recordings = sorted(Path(args.recordings).glob("*.wav")) if args.recordings else []
    if args.backwards:
        with tempfile.TemporaryDirectory() as tmp:
            backwards_words(data, Path(tmp))
        return
    if args.readings:
        with tempfile.TemporaryDirectory() as tmp:
            rows = judged_readings(data, recordings, Path(tmp))
        print("| source | mode | words written | readings judged | asymmetry min | max |")
        print("|---|---|---:|---:|---:|---:|")
        for key in dict.fromkeys((name, mode) for name, mode, _, _ in rows):
            values = [a for name, mode, _, a in rows if (name, mode) == key and a == a]
            words = next(w for name, mode, w, _ in rows if (name, mode) == key)
            span = f"{min(values):+.3f} | {max(values):+.3f}" if values else " | "
            print(f"| {key[0]} | {key[1]} | {words} | {len(values)} | {span} |")
        return
    print(f"| {args.seconds:g} s windows | n | min | median | max |")
    print("|---|---:|---:|---:|---:|")
    for group, values in window_groups(data, args.seconds, recordings).items():
        v = np.array(values)
        print(f"| {group} | {len(v)} | {np.nanmin(v):+.3f} | {np.nanmedian(v):+.3f} | {np.nanmax(v):+.3f} |", flush=True)


if __name__ == "__main__":
    main()
