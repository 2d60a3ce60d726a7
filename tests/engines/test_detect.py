"""The spoken language of a recording's first 30 s (``transcriber.engines.detect``, what ``transcribe
serve``'s /detect-language answers), with the real models: English-only tiny.en says English, the
multilingual base model tells each non-English recording of the set by its sound."""
from __future__ import annotations

import pytest

from transcriber.engines.detect import detect_language
from transcriber.errors import AudioError

from tests.conftest import JFK, manifest


def test_an_english_only_model_knows_one_language(model):
    assert detect_language(JFK, model) == ("en", 1.0)


def test_the_base_model_detects_english_and_the_other_languages(base_model, data_dir):
    assert detect_language(JFK, base_model)[0] == "en"
    others = [e for e in manifest() if e["subset"] == "non_en" and e["reference_quality"] in ("exact", "exact-ish")]
    assert others
    for entry in others:
        code, probability = detect_language(data_dir / entry["file"], base_model)
        assert (code, entry["file"]) == (entry["language"], entry["file"]) and 0.5 < probability <= 1.0


def test_a_file_that_is_not_media_is_an_audio_error(tmp_path, model):
    bad = tmp_path / "notes.mp3"
    bad.write_text("not audio")
    with pytest.raises(AudioError):
        detect_language(bad, model)
