"""Peer worker: whisper.cpp (pywhispercpp's wheel) on a ggml file written by bench/kernels/ggml_convert.py.

Run with bench/.venvs/whispercpp/bin/python (see bench/setup_peers.sh); job and result as in
_worker_common.py. Job fields: "model_path" (the ggml file), "ffmpeg" (the binary that decodes
each file to 16 kHz mono float32, inside the timed span as our decode and faster-whisper's are),
"params" (whisper.cpp decode parameters over its defaults, e.g. {"no_context": false}),
"language" (default "en"), "detail" (each result is {"text", "language", "language_probability":
null, "words"}: the words of each segment, [start, end, text, null], spread over the segment's
span in proportion to their length, since the wheel's defaults give segment times only).
``word_timestamps`` turns on whisper.cpp's token timestamps.
Greedy with whisper.cpp's own temperature fallback, as the wheel sets it up.
"""
import subprocess
from importlib.metadata import version

import numpy as np
from pywhispercpp.model import Model

from _worker_common import run

JOB: dict = {}


def load(job):
    JOB.update(job)
    return Model(job["model_path"], n_threads=job["threads"], print_progress=False,
                 redirect_whispercpp_logs_to=None, **job.get("params", {}))


def decode(path):
    pcm = subprocess.run([JOB["ffmpeg"], "-nostdin", "-v", "error", "-i", path, "-f", "f32le", "-ac", "1",
                          "-ar", "16000", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(pcm, np.float32).copy()


def transcribe(model, path, word_timestamps):
    segments = model.transcribe(decode(path), language=JOB.get("language", "en"), token_timestamps=word_timestamps)
    text = "".join(s.text for s in segments).strip()
    if JOB.get("detail"):
        return {"text": text, "language": JOB.get("language", "en"), "language_probability": None,
                "words": [w for s in segments for w in spread(s.t0 / 100, s.t1 / 100, s.text)]}
    return text


def spread(start, end, text):
    """[start, end, word, None] of each word of a segment, its span shared by characters."""
    words = text.split()
    total, out, t = sum(len(w) for w in words) or 1, [], start
    for w in words:
        step = (end - start) * len(w) / total
        out.append([t, t + step, w, None])
        t += step
    return out


def info():
    return f"pywhispercpp {version('pywhispercpp')}; over its defaults: {JOB.get('params') or 'nothing'}"


if __name__ == "__main__":
    run(load, transcribe, info)
