"""Our worker: transcriber's one-shot decoder (MLX Whisper, float32 on the CPU), tiny.en.

Run with the repository's .venv/bin/python; job and result as in _worker_common.py
("compute_type" is ignored).
"""
import os
import sys

sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
import transcriber  # noqa: E402  (first: transcriber.blas must preload OpenBLAS before MLX)
import transcriber.blas  # noqa: E402
import mlx.core as mx  # noqa: E402

from _worker_common import run  # noqa: E402


def transcribe(model, path, word_timestamps):
    t = transcriber.transcribe(path, model=model, language="en", beam_size=None,
                               word_timestamps=word_timestamps)
    return t.text.strip()


def info():
    return f"mlx {mx.__version__}, BLAS preload: {transcriber.blas.loaded_path or 'none'}"


if __name__ == "__main__":
    run(lambda job: transcriber.load_model("tiny.en"), transcribe, info)
