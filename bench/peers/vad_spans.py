"""Speech spans decoded side by side: does it earn a place beside --vad?

    .venv/bin/python -m bench.peers vad-spans                      # the 21-minute podcast, tiny.en
    .venv/bin/python -m bench.peers vad-spans --widths 4,8 --reading   # and a 20-minute reading

faster-whisper's BatchedInferencePipeline cuts a file's speech (Silero VAD) into pieces of at
most 30 s and decodes them as a batch, each piece its own window with no text carried over.
Ours can do the same with what exists: the spans of ``transcriber.media.vad``, each long span
cut at its quietest 32 ms inside its last 10 s before 30 s (as Silero's max_speech_duration
does), every piece a ``SpeechSource`` of its own, decoded by one-shot's ``side_by_side`` (the
--batch-files machinery). Rows, in one process and one run: --vad (the spans joined, one file),
and the pieces side by side at each --widths; time (detector included), WER over the readings,
words over music or silence (evalkit.podcast's scorecard). The reading: the three LibriSpeech
test-other files, the LJSpeech reading and the dc_tts one joined (about 20 minutes).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import transcriber  # noqa: E402
from evalkit import podcast  # noqa: E402
from transcriber.constants import SAMPLE_RATE  # noqa: E402
from transcriber.media.audio import load_audio  # noqa: E402
from transcriber.media.silero import WINDOW, SileroVad  # noqa: E402
from transcriber.media.source import as_source  # noqa: E402
from transcriber.media.vad import SpeechSource, spans_of  # noqa: E402

PIECE = 30.0  # seconds: a piece is one window
READING = ("ls_testother_367-130732_533-1066.flac", "ljspeech_LJ001-0001_0032_concat.flac",
           "ls_testother_1688-142285_1998-15444.flac", "dctts_pm_ljsentences_LJ001-0001_LJ003-0027.flac",
           "ls_testother_2609-156975_3005-163389.flac")


def pieces(path: str) -> tuple[list[tuple[int, int]], float]:
    """The speech spans cut into pieces of at most PIECE seconds; the detector's seconds."""
    t0 = time.perf_counter()
    samples = load_audio(path)
    p, _ = SileroVad.installed().probabilities(samples)
    spans = spans_of(p, len(samples))  # (what speech_spans gives: the same probabilities)
    out, most = [], round(PIECE * SAMPLE_RATE)
    for first, end in spans:
        while end - first > most:
            lo, hi = (first + most - 10 * SAMPLE_RATE) // WINDOW, (first + most) // WINDOW
            cut = (lo + int(np.argmin(p[lo:hi]))) * WINDOW
            out.append((first, cut))
            first = cut
        out.append((first, end))
    return out, time.perf_counter() - t0


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def side_by_side(model, path: str, width: int) -> tuple[list, float, float]:
    """Every piece its own file, ``width`` side by side: (words on the file's timeline, seconds,
    CPU seconds)."""
    t0, c0 = time.perf_counter(), cpu()
    cut, _ = pieces(path)
    engine = transcriber.make_engine("oneshot", model, transcriber.engine_options("oneshot", {"language": "en"}))
    files = engine.side_by_side(width)
    source, words, waiting = as_source(path), {}, list(enumerate(cut))
    while waiting and len(files) < width:
        key, span = waiting.pop(0)
        files.add(key, SpeechSource(source, [span]), None)
    for key, event in files.events():
        if isinstance(event, Exception):
            raise event
        if event is None:
            if waiting:
                k, span = waiting.pop(0)
                files.add(k, SpeechSource(source, [span]), None)
            continue
        shift = cut[key][0] / SAMPLE_RATE
        words.setdefault(key, []).extend(replace(w, start=w.start + shift, end=w.end + shift) for w in event.words)
    files.close()
    return [w for k in sorted(words) for w in words[k]], time.perf_counter() - t0, cpu() - c0


def joined(model, path: str) -> tuple[list, float, float]:
    t0, c0 = time.perf_counter(), cpu()
    engine = transcriber.make_engine("oneshot", model, transcriber.engine_options("oneshot", {"language": "en", "vad": True}))
    words = [w for step in engine.steps(path) for w in step.words]
    return words, time.perf_counter() - t0, cpu() - c0


def row(name: str, words, seconds: float, cpu_seconds: float, cast, duration: float) -> str:
    card = podcast.score(cast, words)
    return (f"| {name} | {seconds:.1f} | {cpu_seconds:.1f} | {seconds / duration:.4f} | {100 * card.wer:.2f} | "
            f"{len(card.words_in_nonspeech)} | {card.lost_at_boundaries} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--widths", default="4,8")
    ap.add_argument("--reading", action="store_true", help="also the 20-minute reading")
    ap.add_argument("--data", type=Path,
                    default=Path(os.environ.get("TRANSCRIBER_TEST_DATA") or ROOT.parent / "shared" / "data"))
    args = ap.parse_args()
    model = transcriber.load_model(args.model)
    casts = {"podcast (21 min)": podcast.build_podcast(args.data, podcast.LONG)}
    if args.reading:
        casts["reading (20 min)"] = podcast.build_podcast(args.data, READING)
    print(f"CPU {transcriber.blas.cpu_model()}, {os.cpu_count()} cores, {args.model}, "
          f"load average {os.getloadavg()[0]:.2f}\n")
    with tempfile.TemporaryDirectory() as tmp:
        for title, cast in casts.items():
            path = str(cast.write_wav(Path(tmp) / "audio.wav"))
            cut, vad_s = pieces(path)
            print(f"### {title}: {cast.duration:.0f} s, {len(cut)} pieces, {sum(b - a for a, b in cut) / SAMPLE_RATE:.0f} s "
                  f"of speech, detector {vad_s:.1f} s\n")
            print("| system | seconds | CPU s | RTF | WER % | words in music/silence | words lost at music edges |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            print(row("--vad (spans joined, one window after another)", *joined(model, path), cast, cast.duration))
            for width in map(int, args.widths.split(",")):
                print(row(f"pieces side by side, width {width}", *side_by_side(model, path, width), cast, cast.duration))
            print()


if __name__ == "__main__":
    main()
