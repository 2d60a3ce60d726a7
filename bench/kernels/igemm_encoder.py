"""The native encoder with integer linears (TRANSCRIBER_KERNEL_ENCODER=int16) against the bf16
one, on one path (issue 30): each one's features on examples/jfk.flac against MLX's float32
encoder (relative RMS), and a 30 s window's time, the two alternated in one process (thread
CPU time and wall, min and median of ``--repeat``).

    PYTHONPATH=. python -m bench.kernels igemm-encoder [--path avx2] [--model tiny.en] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", default="avx2")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    os.environ["TRANSCRIBER_KERNELS"] = args.path
    import mlx.core as mx

    import transcriber
    from transcriber.media.audio import load_audio
    from transcriber.model.mel import log_mel_spectrogram, pad_or_trim
    from transcriber.native import loader
    from transcriber.native.encoder import NativeEncoder
    from transcriber.native.kernels import Kernels

    loaded = loader.load()
    assert loaded.path == args.path, loaded.reason
    k = Kernels(loaded.lib, loaded.path)  # no vdpbf16ps: the FMA route where bf16
    model = transcriber.load_model(args.model)
    mel = np.asarray(log_mel_spectrogram(load_audio(str(ROOT / "examples" / "jfk.flac")), model.dims.n_mels))
    mel = mel[: mel.shape[0] // 2 * 2]
    with mx.stream(mx.cpu):
        want = np.array(model.encoder(mx.array(mel[None])))[0]
    encoders = {"bf16": NativeEncoder(k, model.encoder, args.threads),
                "int16": NativeEncoder(k, model.encoder, args.threads, integer=True)}
    print(f"{args.model}, path {args.path}, {args.threads} thread(s), load {os.getloadavg()[0]:.1f}")
    for name, enc in encoders.items():
        got = enc.window(mel)
        rms = np.sqrt(((got - want) ** 2).mean() / (want ** 2).mean())
        print(f"{name}: jfk features vs MLX float32, relative RMS {rms:.5f}, max abs {np.abs(got - want).max():.4f}")
    window = np.asarray(pad_or_trim(mx.array(mel), 3000, axis=0))
    cpu = {name: [] for name in encoders}
    wall = {name: [] for name in encoders}
    for _ in range(args.repeat):
        for name, enc in encoders.items():
            c0, w0 = time.process_time(), time.perf_counter()
            enc.window(window)
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - w0)
    for name in encoders:
        print(f"{name}: 30 s window, CPU s min {min(cpu[name]):.3f} median {statistics.median(cpu[name]):.3f}; "
              f"wall min {min(wall[name]):.3f} median {statistics.median(wall[name]):.3f}")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
