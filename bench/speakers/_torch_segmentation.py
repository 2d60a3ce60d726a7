"""The torch side of check_segmentation.py, run by the reference environment's interpreter
(torch + pyannote.audio: ../venv-senko, bench/README.md), never imported by the project or its tests:

    VENV/bin/python bench/speakers/_torch_segmentation.py pytorch_model.bin windows.npy scores.npy

pyannote.audio's own model class (``Model.from_pretrained`` on the checkpoint file) scores the
windows ([batch, 160000] float32, 16 kHz) on CPU; prints one JSON line: the seconds it took
(best of ``--repeat`` runs, after one warm-up), the torch version, the threads.
"""

import argparse
import json
import time

import numpy as np
import torch
from pyannote.audio import Model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("windows")
    parser.add_argument("scores")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = Model.from_pretrained(args.checkpoint).eval()
    windows = torch.from_numpy(np.load(args.windows))[:, None]  # [batch, channel, samples]
    best = float("inf")
    with torch.inference_mode():
        scores = model(windows[:1])  # warm-up
        for _ in range(args.repeat):
            start = time.perf_counter()
            scores = model(windows)
            best = min(best, time.perf_counter() - start)
    np.save(args.scores, scores.numpy().astype(np.float32))
    print(json.dumps({"seconds": best, "torch": torch.__version__, "threads": args.threads,
                      "model": type(model).__module__ + "." + type(model).__name__}))


if __name__ == "__main__":
    main()
