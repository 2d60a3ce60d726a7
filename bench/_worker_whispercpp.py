"""Peer worker: whisper.cpp (pywhispercpp's wheel) on a ggml file written by bench/ggml_convert.py.

Run with bench/.venvs/whispercpp/bin/python (see bench/setup_peers.sh); job and result as in
_worker_common.py. Job fields: "model_path" (the ggml file), "ffmpeg" (the binary that decodes
each file to 16 kHz mono float32, inside the timed span as our decode and faster-whisper's are),
"params" (whisper.cpp decode parameters over its defaults, e.g. {"no_context": false}),
"language" (default "en"). ``word_timestamps`` turns on whisper.cpp's token timestamps.
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
    return "".join(s.text for s in segments).strip()


def info():
    return f"pywhispercpp {version('pywhispercpp')}; over its defaults: {JOB.get('params') or 'nothing'}"


if __name__ == "__main__":
    run(load, transcribe, info)
