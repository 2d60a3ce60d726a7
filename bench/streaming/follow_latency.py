"""How late the words of a recording being made reach the subtitles on disk (issue 20, item 5).

    .venv/bin/python -m bench.streaming follow-latency                # examples/jfk.flac, WAV, 1 s chunks
    .venv/bin/python -m bench.streaming follow-latency RECORDING --format flac --update-seconds 2

A writer appends the recording to a growing file in real time, in pieces of ``--piece-seconds``
(a WAV through Python's ``wave``, whose header is patched after every piece; a FLAC through an
ffmpeg encoder fed at that pace), while ``transcribe follow`` runs on it. Every 50 ms the SRT
file is read; the k-th word of the final transcript is on disk once the SRT holds k words.

- on-disk lag of a word: when it was first in the SRT file - when the piece holding its end was
  written (wall clock);
- emission lag: ``emitted_at - end`` of each word (``--jsonl``), in seconds of audio, as
  bench/streaming/modes.py reports it for replay.

Targets: on-disk lag <= --update-seconds + 2 s, mean emission lag <= 1.5 s at 1 s chunks.
Prints one markdown row with the load average: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import wave
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import numpy as np  # noqa: E402

from transcriber.media.audio import load_audio  # noqa: E402
from transcriber.media.ffmpegtool import ffmpeg_binary  # noqa: E402

SAMPLE_RATE = 16000


class GrowingWriter(threading.Thread):
    """Writes ``samples`` (float32, 16 kHz mono) to ``path`` (.wav or .flac) in pieces of
    ``piece_seconds``, one every ``piece_seconds / speed`` of wall clock. ``written[i]``: when
    piece i was on disk (time.monotonic). A FLAC's encoder: ``encoder`` (an ffmpeg), else the
    one the library uses."""

    def __init__(self, samples: np.ndarray, path: Path, piece_seconds: float = 1.0, speed: float = 1.0,
                 encoder: str | None = None):
        super().__init__(daemon=True)
        self.encoder = encoder
        self.pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
        self.path, self.piece, self.speed = Path(path), round(piece_seconds * SAMPLE_RATE), speed
        self.written: list[float] = []

    def run(self) -> None:
        if self.path.suffix == ".wav":
            with open(self.path, "wb") as f, wave.open(f, "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(SAMPLE_RATE)
                self._pieces(lambda data: (w.writeframes(data), f.flush()))
        else:
            cmd = [self.encoder or ffmpeg_binary(), "-v", "error", "-y", "-f", "s16le", "-ar", str(SAMPLE_RATE), "-ac", "1",
                   "-i", "pipe:0", "-flush_packets", "1", str(self.path)]
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE)
            self._pieces(lambda data: (proc.stdin.write(data), proc.stdin.flush()))
            proc.stdin.close()
            proc.wait()

    def _pieces(self, write) -> None:
        start = time.monotonic()
        for i, at in enumerate(range(0, len(self.pcm), self.piece)):
            time.sleep(max(0.0, start + i * self.piece / SAMPLE_RATE / self.speed - time.monotonic()))
            write(self.pcm[at:at + self.piece].tobytes())
            self.written.append(time.monotonic())

    def written_at(self, t: float) -> float:
        """When the audio at ``t`` seconds was on disk."""
        return self.written[min(len(self.written) - 1, int(t * SAMPLE_RATE // self.piece))]


def srt_words(path: Path) -> int:
    """How many words the SRT file holds now (0 if it is not there yet)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return 0
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.strip().isdigit() and "-->" not in ln]
    return sum(len(ln.split()) for ln in lines)


def measure(recording: Path, fmt: str, chunk: float, update: float, piece: float, idle: float,
            verbose: bool = False) -> dict:
    samples = load_audio(recording)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source, out = tmp / f"rec.{fmt}", tmp / "out"
        writer = GrowingWriter(samples, source, piece)
        env = {**os.environ, "TRANSCRIBER_DB": str(tmp / "jobs.db")}
        writer.start()
        while not source.exists():
            time.sleep(0.01)
        cmd = [sys.executable, "-m", "transcriber.app", "follow", str(source), "-o", str(out), "-f", "srt,json", "-q",
               "--chunk-seconds", str(chunk), "--update-seconds", str(update), "--idle-seconds", str(idle),
               "--jsonl", str(tmp / "words.jsonl")]
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
        seen: list[float] = []  # seen[k]: when the SRT first held k + 1 words
        while proc.poll() is None:
            n = srt_words(out / "rec.srt")
            seen += [time.monotonic()] * max(0, n - len(seen))
            time.sleep(0.05)
        writer.join()
        words = [json.loads(line) for line in (tmp / "words.jsonl").read_text().splitlines()]
        timeline = [w for s in json.loads((out / "rec.json").read_text())["segments"] for w in s["words"]]
    # words seen before the writer ended: the live ones (the rest came with the idle timeout)
    live = [seen[k] - writer.written_at(w["end"]) for k, w in enumerate(timeline)
            if k < len(seen) and seen[k] <= writer.written[-1] + 0.05]
    # the same from when the audio up to the word's commit (emitted_at) was written: the lag of
    # the file, pipe and outputs alone, without the policy's wait for more audio
    after = [seen[k] - writer.written_at(w["emitted_at"] - 1e-6) for k, w in enumerate(words)
             if k < len(seen) and seen[k] <= writer.written[-1] + 0.05]
    emission = [w["emitted_at"] - w["end"] for w in words]
    if verbose:
        print("word | end s | emitted at s | written at | first in the SRT | on-disk lag s")
        for k, w in enumerate(timeline):
            on_disk = seen[k] - writer.written[0] if k < len(seen) else float("nan")
            emitted = words[k]["emitted_at"] if k < len(words) else float("nan")  # (--jsonl's k-th word)
            print(f"{w['word']!r} | {w['end']:.2f} | {emitted:.2f} | "
                  f"{writer.written_at(w['end']) - writer.written[0]:.2f} | {on_disk:.2f} | "
                  f"{on_disk - writer.written_at(w['end']) + writer.written[0]:.2f}")
    return {"words": len(timeline), "live_words": len(live), "disk_mean": float(np.mean(live)) if live else None,
            "disk_max": max(live) if live else None, "after_mean": float(np.mean(after)) if after else None,
            "after_max": max(after) if after else None, "emission_mean": float(np.mean(emission)),
            "load": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recording", nargs="?", type=Path, default=ROOT / "examples" / "jfk.flac")
    parser.add_argument("--format", choices=("wav", "flac"), default="wav")
    parser.add_argument("--chunk-seconds", type=float, default=1.0)
    parser.add_argument("--update-seconds", type=float, default=2.0)
    parser.add_argument("--piece-seconds", type=float, default=1.0)
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--words", action="store_true", help="a line per word: its times and lag")
    args = parser.parse_args()
    r = measure(args.recording, args.format, args.chunk_seconds, args.update_seconds, args.piece_seconds,
                args.idle_seconds, args.words)
    cpu = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text()) if Path("/proc/cpuinfo").exists() else None
    print("| recording | format | chunk s | update s | words (live) | on-disk lag mean / max s | after commit mean / max s | "
          "emission lag mean s | load 1/5/15 | CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    disk = "-" if r["disk_mean"] is None else f"{r['disk_mean']:.2f} / {r['disk_max']:.2f}"
    after = "-" if r["after_mean"] is None else f"{r['after_mean']:.2f} / {r['after_max']:.2f}"
    print(f"| {args.recording.name} | {args.format} | {args.chunk_seconds:g} | {args.update_seconds:g} | "
          f"{r['words']} ({r['live_words']}) | {disk} | {after} | {r['emission_mean']:.2f} | "
          f"{' '.join(f'{x:.1f}' for x in r['load'])} | {cpu.group(1) if cpu else '?'} |")


if __name__ == "__main__":
    main()
