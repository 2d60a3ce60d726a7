"""Language: detection in both modes with the real multilingual ``base`` model (from PyPI, in
the test extras) on real recordings, and the English-only model's refusals."""

from __future__ import annotations

import pytest

import transcriber
from transcriber import OneShotEngine, StreamingEngine, StreamingOptions, TranscribeOptions
from transcriber.engines.context import WhisperContext

from tests.conftest import JFK, audio_path


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


def test_the_detected_language_and_its_probability_reach_json_db_and_status(base_model, tmp_path):
    import json
    import shutil

    from click.testing import CliRunner

    from transcriber.app.cli.main import main
    from transcriber.app.store.sqlite_store import SqliteJobStore

    media = tmp_path / "ru.flac"
    shutil.copy(audio_path("ru_deepspeech_smoke.flac"), media)
    db = tmp_path / "jobs.db"
    for mode in ("oneshot", "stream"):
        result = CliRunner().invoke(main, [str(media), "--model", "base", "--mode", mode, "-f", "json",
                                           "--db", str(db), "-q"])
        assert result.exit_code == 0, result.output
        data = json.loads(media.with_suffix(".json").read_text())
        assert data["language"] == "ru" and data["language_probability"] > 0.9, mode
        with SqliteJobStore(db) as store:
            job = store.jobs()[0]
            assert job.language == "ru" and job.language_probability > 0.9
        status = CliRunner().invoke(main, ["status", "--db", str(db)])
        assert "ru (0.9" in status.output
    english = CliRunner().invoke(main, [str(JFK), "-f", "json", "-o", str(tmp_path / "out"), "--db", str(db), "-q"])
    assert english.exit_code == 0
    assert "language_probability" not in json.loads((tmp_path / "out" / "jfk.json").read_text())  # given, not detected


@pytest.mark.parametrize("flags, says", [(["--language", "de"], "language 'de' needs a multilingual model"),
                                         (["--task", "translate"], "--task translate needs a multilingual model")])
def test_english_only_model_given_another_language_is_a_usage_error(model, tmp_path, flags, says):
    """Refused on the command line (exit 2, naming the model), before any job is queued: not
    one failed job per file."""
    from click.testing import CliRunner

    from transcriber.app.cli.main import main

    db = tmp_path / "jobs.db"
    result = CliRunner().invoke(main, [str(JFK), "--model", "tiny.en", "--db", str(db), *flags])
    assert result.exit_code == 2, result.output
    assert "model tiny.en is English-only" in result.output and says in result.output
    assert "Traceback" not in result.output and not db.exists()
    assert not list(tmp_path.glob("jfk*"))


def test_multilingual_model_takes_the_same_flags(base_model):
    transcriber.check_model_options("base", language="de", task="translate")  # no error
