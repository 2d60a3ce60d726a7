"""Our micro figures for the bench table: a decoder step (1 and 4 rows) and a 30 s encoder window.

Run with the repository's .venv/bin/python; job on stdin {"model": "tiny.en", "steps": 40}
(and "encoder": false to skip the encoder window), one JSON line out: {"step_ms": {"1": {"wall",
"cpu"}, "4": ...}, "encoder_s": {"wall", "cpu"} (or null), "step_mb": the MB a 1-row step reads
(null when MLX's ops serve), "kernels": the doctor's line, "blas", "cpu"}. Medians over the
steps (and 5 encoder runs).
The rows of a 4-row step share one window, as beams do (decoding.loop.expand).
TRANSCRIBER_KERNELS in the environment decides which ops serve, as everywhere.
"""
import json
import os
import sys
import time

sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # repo root
import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

import transcriber  # noqa: E402
from transcriber import native  # noqa: E402
from transcriber.model.state import DecoderState  # noqa: E402
from transcriber.backend import inference_for  # noqa: E402


def _median(values):
    return sorted(values)[len(values) // 2]


def _clocked(fn):
    """(wall s, CPU s) of fn()."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def step_ms(model, base, rows: int, steps: int) -> dict:
    """Median wall and CPU ms of a greedy step for ``rows`` rows over one window."""
    share = lambda a: mx.broadcast_to(a, (rows, *a.shape[1:]))  # noqa: E731
    state = DecoderState([(share(k), share(v)) for k, v in base.cross_kv], [None] * len(base.self_kv))
    multi = model.dims.is_multilingual  # <|startoftranscript|><|notimestamps|>
    inference = inference_for(model)
    logits, state, _ = inference.decode(mx.array([[50258, 50363] if multi else [50257, 50362]] * rows), state)
    token = mx.array(np.array(logits[:, -1]).argmax(-1)[:, None])
    walls, cpus = [], []
    for _ in range(steps):
        w, c = time.perf_counter(), time.process_time()
        logits, state, _ = inference.decode(token, state)
        last = np.array(logits[:, -1], dtype=np.float32)  # evaluates MLX's logits
        walls.append((time.perf_counter() - w) * 1e3)
        cpus.append((time.process_time() - c) * 1e3)
        token = mx.array(last.argmax(-1)[:, None])
    return {"wall": _median(walls), "cpu": _median(cpus)}


def step_mb(model, features) -> float | None:
    """MB a 1-row native step reads at least: the packed layer weights and projection, the
    window's cross-attention keys and values as the step reads them (bf16 or float32); the
    short self-attention cache, biases and norms left out. None when the native step does not serve."""
    step = getattr(inference_for(model), "step", None)
    if step is None:
        return None
    weights = sum(w.data.nbytes for w in step.step_weights)  # the layers' linears and the projection
    layers, positions, width = len(step.packed), features.shape[1], features.shape[2]
    cross = 2 * layers * positions * width * (2 if step.cross is not None else 4)
    return (weights + cross) / 1e6


def main():
    job = json.load(sys.stdin)
    model = transcriber.load_model(job.get("model", "tiny.en"))
    mel = mx.array(np.random.default_rng(0).standard_normal((1, 3000, model.dims.n_mels), dtype=np.float32))
    inference = inference_for(model)
    features = inference.encode(mel)
    mx.eval(features)
    runs = [_clocked(lambda: mx.eval(inference.encode(mel))) for _ in range(5 if job.get("encoder", True) else 0)]
    base = inference.start(features)
    steps = job.get("steps", 40)
    result = {"step_ms": {str(r): step_ms(model, base, r, steps) for r in (1, 4)},
              "encoder_s": {"wall": _median([r[0] for r in runs]), "cpu": _median([r[1] for r in runs])} if runs else None,
              "step_mb": step_mb(model, features),
              "kernels": native.status().line(), "blas": transcriber.blas.describe(),
              "cpu": transcriber.blas.cpu_model()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
