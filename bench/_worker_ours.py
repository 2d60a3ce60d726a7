"""Our worker: transcriber (MLX Whisper, float32 on the CPU) in the job's "mode": "oneshot"
(default) or "stream" (AlignAtt replay, "chunk_seconds", default 1).

Run with the repository's .venv/bin/python; job and result as in _worker_common.py
("compute_type" is ignored). Optional job fields: "model" (default tiny.en), "language"
(default "en"; null: detect), "detail" (each result is {"text", "language",
"language_probability"} instead of the text), "vad" (decode only the speech Silero VAD finds), "speech_spans"
(with "vad": [start, end] seconds decoded instead of the detector's spans, which is not run),
"words" (with "detail": each result also has
"words", [start, end, text, probability] of every word, and "rereads": each stretch the guard
read alone, with its scores, for bench/peers/reread_corner.py).
"""
import logging
import os
import sys

sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repo root
import transcriber  # noqa: E402  (binds MLX to the fastest BLAS measured here)
import mlx.core as mx  # noqa: E402
from transcriber.constants import SAMPLE_RATE  # noqa: E402

from _worker_common import run  # noqa: E402

JOB: dict = {}


def load(job):
    JOB.update(job)
    if job.get("speech_spans"):
        given_spans(job["speech_spans"])
    return transcriber.load_model(job.get("model", "tiny.en"))


def given_spans(seconds):
    """--vad decodes these spans (seconds) of every file: the detector is not run."""
    import transcriber.engines.vad as engine_vad
    from transcriber.media.audio import load_audio
    from transcriber.media.vad import Heard

    def detect(source, **_):  # (the file read once, served from memory to the decode, as the detector's pass does)
        samples = load_audio(source.path)
        spans = [(round(a * SAMPLE_RATE), min(len(samples), round(b * SAMPLE_RATE))) for a, b in seconds]
        return spans, len(samples), Heard(source, samples)

    engine_vad.detect = detect


class Rereads(logging.Handler):
    """The guard's readings of stretches alone (``transcriber.guard``'s records), per file."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.found = []

    def emit(self, record):
        if hasattr(record, "reread"):
            self.found.append(record.reread)


def transcribe(model, path, word_timestamps):
    rereads = Rereads()
    log = logging.getLogger("transcriber.guard")
    log.setLevel(logging.DEBUG)
    log.addHandler(rereads)
    try:
        out = _transcribe(model, path, word_timestamps)
    finally:
        log.removeHandler(rereads)
    if JOB.get("detail"):
        out["rereads"] = rereads.found
    return out


def _transcribe(model, path, word_timestamps):
    language = JOB.get("language", "en")
    if JOB.get("mode") == "stream":
        options = transcriber.StreamingOptions(chunk_seconds=JOB.get("chunk_seconds", 1.0), language=language,
                                               vad=JOB.get("vad", False))
        words, detected, probability = [], language, None
        # on the media's timeline, as the CLI's (make_engine: OnTimeline, a late audio track)
        for step in transcriber.make_engine("stream", model, options).steps(path):
            words += step.words
            detected, probability = step.language, step.language_probability
        text = "".join(w.text for w in words).strip()
    else:
        t = transcriber.transcribe(path, model=model, language=language, beam_size=None,
                                   word_timestamps=word_timestamps, vad=JOB.get("vad", False))
        text, detected, probability, words = t.text.strip(), t.language, t.language_probability, t.words
    if JOB.get("detail"):
        detail = {"text": text, "language": detected, "language_probability": probability}
        if JOB.get("words"):
            detail["words"] = [[w.start, w.end, w.text, w.probability] for w in words]
        return detail
    return text


def info():
    from transcriber import native

    return (f"mlx {mx.__version__}; {transcriber.blas.describe()}; {native.status().line()}; "
            f"CPU {transcriber.blas.cpu_model()}")


if __name__ == "__main__":
    run(load, transcribe, info)
