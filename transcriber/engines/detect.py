"""The spoken language of a recording, from its first 30 s: what ``/detect-language`` answers.

The same detection a decode makes at its start (``WhisperContext.detect_language``: the
language tokens' probabilities after <|startoftranscript|>), without decoding. An English-only
model knows one language: English, with certainty.
"""

from __future__ import annotations

from transcriber.media.audio import load_audio
from transcriber.constants import CHUNK_LENGTH
from transcriber.engines.context import WhisperContext
from transcriber.model.whisper import Whisper


def detect_language(source, model: Whisper) -> tuple[str, float]:
    """(language code, its probability) of the first 30 s of ``source`` (a media path);
    AudioError for a file that is not media or has no audio."""
    samples = load_audio(source, duration=CHUNK_LENGTH)
    if not model.is_multilingual:
        return "en", 1.0
    context = WhisperContext(model)
    base, _ = context.encode_window(samples)
    code, probability, _ = context.detect_language(base)
    return code, probability
