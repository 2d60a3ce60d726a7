"""The multilingual ``base`` model end to end on the non-English recordings, both modes (issue 9):
language detection, German WER against faster-whisper's on the same weights, Russian text,
Chinese words and subtitles, translation into English.

faster-whisper is not a test dependency: ``bench/peers/multilingual.py`` measures it (same base
CTranslate2 weights, greedy, language detected, float32) and the bounds below come from that
measurement.
"""

from __future__ import annotations

import json
import shutil

import pytest
import srt
from click.testing import CliRunner

from transcriber.app.cli.main import main
from transcriber import Transcript, assemble, engine_options, make_engine, probe
from evalkit.scoring import cer, normalize, wer, word_errors
from transcriber.transcript.text import NO_SPACE_LANGUAGES

from tests.conftest import JFK, audio_path, ffmpeg, manifest

MODES = ("oneshot", "stream")
LANGUAGES = {"librivox_de.flac": "de", "ru_deepspeech_smoke.flac": "ru", "zh_speech_recognition.flac": "zh",
             "fr_speech_recognition.flac": "fr", "es_qwen_audio.flac": "es"}

# faster-whisper 1.2.1 (ctranslate2 4.8.5, float32, greedy, language detected) on the base
# weights, measured by bench/peers/multilingual.py on 2026-11-30: librivox_de WER 16.67% after
# normalize(..., "de"). "Within 1 point" of it:
FASTER_WHISPER_DE_WER = 0.1667
DE_WER_BOUND = FASTER_WHISPER_DE_WER + 0.01
# Same run: faster-whisper's Russian text, normalised. Like ours (both modes, greedy or beam
# 5), it drops the reference's "был" (reference: "бедняга ребят на его месте должен был быть
# я"): no system on these weights gives the exact reference.
FASTER_WHISPER_RU = "бедняга ребят на его месте должен быть я"


def run(model, mode: str, path, **flags) -> Transcript:
    """A file through an engine of ``mode`` (the job runner's loop, without the store)."""
    engine = make_engine(mode, model, engine_options(mode, **flags))
    segments, language, probability = [], None, None
    for step in engine.steps(path):
        segments += step.segments
        language, probability = step.language, step.language_probability
    return assemble(segments, language, probe(path), model.name, probability, flags.get("task", "transcribe"))


@pytest.fixture(scope="session")
def transcribed(base_model, data_dir):
    """transcribed(name, mode): the file's Transcript with the language detected, made once."""
    done: dict[tuple[str, str], Transcript] = {}

    def get(name: str, mode: str) -> Transcript:
        if (name, mode) not in done:
            done[name, mode] = run(base_model, mode, audio_path(name))
        return done[name, mode]
    return get


def reference(name: str) -> str:
    entry, = [e for e in manifest() if e["file"].endswith("/" + name)]
    return entry["text"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(LANGUAGES))
def test_language_is_detected_in_both_modes(transcribed, name, mode):
    t = transcribed(name, mode)
    assert t.language == LANGUAGES[name]
    assert t.language_probability > 0.9  # measured 0.98-1.00; faster-whisper 0.98-1.00
    assert t.text


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_german_wer_within_a_point_of_faster_whisper(transcribed, mode):
    t = transcribed("librivox_de.flac", mode)
    assert wer(reference("librivox_de.flac"), t.text, "de") <= DE_WER_BOUND
    # the reading starts on its first word: streaming used to drop the first 8 s, where base's
    # no-speech probability on short buffers is 0.8-0.95
    assert normalize(t.words[0].text, "de") == "hans"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LANGUAGES))
def test_streaming_within_a_point_of_oneshot(transcribed, name):
    """Issue 17: on every non-English recording streaming's error rate (CER where words are not
    spaced) is within 1 point of one-shot's; where the reference is not to be trusted, its text
    agrees with one-shot's (measured: French identical, Spanish one word of 12)."""
    entry, = [e for e in manifest() if e["file"].endswith("/" + name)]
    language = LANGUAGES[name]
    score = cer if language in NO_SPACE_LANGUAGES else wer
    oneshot, streamed = transcribed(name, "oneshot").text, transcribed(name, "stream").text
    if entry["reference_quality"] in ("exact", "exact-ish"):
        assert score(entry["text"], streamed, language) <= score(entry["text"], oneshot, language) + 0.01
    else:
        assert score(oneshot, streamed, language) <= 0.1, (oneshot, streamed)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_russian_text(transcribed, mode):
    t = transcribed("ru_deepspeech_smoke.flac", mode)
    assert normalize(t.text, "ru") == FASTER_WHISPER_RU
    assert word_errors(reference("ru_deepspeech_smoke.flac"), t.text, "ru") == (1, 9)  # "был" missing


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_french_text(transcribed, mode):
    # the reference is uncertain ("et c'est" / "essaye" / "si"), the rest is not: streaming
    # once looped " C C C ..." over its first second
    assert "la dictée numéro" in normalize(transcribed("fr_speech_recognition.flac", mode).text, "fr")


@pytest.mark.slow
def test_a_mark_at_the_end_of_a_pass_waits_for_the_words_after_it(transcribed):
    """The clip's first pass (2 s) ends its text "numéro." while the speaker goes on "un": a
    mark the text ends on at the end of the audio is not committed until a later pass judges
    the token after it (it used to give "numéro. 1")."""
    text = transcribed("fr_speech_recognition.flac", "stream").text
    assert "numéro 1" in text or "numéro un" in text, text


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_chinese_words_split_on_characters(transcribed, mode):
    t = transcribed("zh_speech_recognition.flac", mode)
    words = t.words
    # split on Unicode characters as Whisper does for zh: a word is one token's characters
    # ("自己" is one token), with no spaces; together they are the text
    assert "".join(w.text for w in words) == t.text == "".join(s.text for s in t.segments).strip()
    assert len(words) >= 4 and all(1 <= len(w.text) <= 2 and not w.text.isspace() for w in words)
    assert t.text.endswith("自己的腳") or t.text.endswith("自己的脚")  # traditional or simplified
    # times from the alignment heads: inside the clip, in order, each word its own start
    starts = [w.start for w in words]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert all(0.0 <= w.start < w.end <= t.duration for w in words)


@pytest.mark.slow
def test_chinese_subtitles_follow_the_chinese_rules(base_model, data_dir, tmp_path):
    """The Chinese clip said 8 times (0.6 s apart, 13 s): SRT with lines of at most 16
    characters (the Netflix guide for Simplified Chinese) and no spaces, without any flag; a
    flag the user gives wins, and rewrites the file without the model."""
    clip = audio_path("zh_speech_recognition.flac")
    media = tmp_path / "zh8.flac"
    inputs = ["-f", "lavfi", "-t", "0.6", "-i", "anullsrc=r=16000:cl=mono", "-i", str(clip)]
    ffmpeg(*inputs, "-filter_complex", "[0]" + "[1][0]" * 8 + f"concat=n={17}:v=0:a=1", str(media))
    db = tmp_path / "jobs.db"
    args = [str(media), "--model", "base", "--mode", "oneshot", "-f", "srt,json", "--db", str(db), "-q"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    data = json.loads(media.with_suffix(".json").read_text(encoding="utf-8"))
    assert data["language"] == "zh"
    subtitles = list(srt.parse(media.with_suffix(".srt").read_text(encoding="utf-8")))
    lines = [line for s in subtitles for line in s.content.split("\n")]
    assert len("".join(lines)) >= 30  # most of the 8 times
    assert all(len(line) <= 16 and " " not in line for line in lines)
    for a, b in zip(subtitles, subtitles[1:]):  # 9 characters a second, where the next cue leaves room
        if (b.start - a.end).total_seconds() > 0.1:
            assert (a.end - a.start).total_seconds() >= len(a.content.replace("\n", "")) / 9
    # --max-line-chars given: it wins; the words come from the database, not the model
    result = CliRunner().invoke(main, args + ["--max-line-chars", "6"])
    assert result.exit_code == 0, result.output
    lines = [line for s in srt.parse(media.with_suffix(".srt").read_text(encoding="utf-8"))
             for line in s.content.split("\n")]
    assert all(len(line) <= 6 for line in lines)


# --- translation ---------------------------------------------------------------------------

# An English reference, written by reading the German reference of the first 29 s (the title
# page, up to "namens Melchior Sternfels von Fuchshaim"):
ENGLISH_REFERENCE = (
    "Hans Jakob Christoffel von Grimmelshausen. The adventurous Simplicissimus. Newly arranged, "
    "much improved throughout: the adventurous Simplicius Simplicissimus. That is: the detailed, "
    "uninvented and truly memorable description of the life of a simple, wondrous and strange "
    "vagabond, named Melchior Sternfels von Fuchshaim.")
# Words of it no literal translation can do without (the plain words, not the style) ...
ENGLISH_MUST = {"the", "of", "and", "that", "is", "life", "description", "named"}
# ... and German words of the original that must be gone.
GERMAN_GONE = {"der", "und", "das", "ist", "eines", "ganz", "neu", "namens", "lebensbeschreibung"}


@pytest.fixture(scope="module")
def german_opening(data_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("translate") / "de_opening.flac"
    ffmpeg("-i", str(audio_path("librivox_de.flac")), "-t", "29", str(path))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_translate_turns_german_into_english(base_model, german_opening, mode):
    t = run(base_model, mode, german_opening, task="translate")
    assert t.language == "de" and t.task == "translate" and t.text_language == "en"
    words = set(normalize(t.text).split())
    assert ENGLISH_MUST <= words, ENGLISH_MUST - words
    assert ENGLISH_MUST <= set(normalize(ENGLISH_REFERENCE).split())
    assert not words & GERMAN_GONE, words & GERMAN_GONE
    assert "grimmelshausen" in words  # names stay


def test_english_only_model_refuses_translation(tmp_path):
    media = tmp_path / "jfk.flac"
    shutil.copy(JFK, media)
    result = CliRunner().invoke(main, [str(media), "--task", "translate", "-f", "srt", "--db", str(tmp_path / "j.db"),
                                       "-q"])
    assert result.exit_code == 2  # a usage error, before any job (test_language.py has more)
    assert "model tiny.en is English-only; --task translate needs a multilingual model" in result.output
    assert not media.with_suffix(".srt").exists()


# --- words of scripts without spaces, with the real multilingual tokenizer -----------------

@pytest.mark.parametrize("language, text", [
    ("ja", "今日はとても良い天気ですね。"),
    ("th", "สวัสดีครับ วันนี้อากาศดีมาก"),
    ("zh", "我们今天去公园散步。"),
])
def test_words_are_whole_characters(base_model, language, text):
    from transcriber.model.tokenizer import load_tokenizer

    tok = load_tokenizer(base_model.info.folder, multilingual=True, language=language)
    tokens = tok.encode(text)
    words, groups = tok.split_to_word_tokens(tokens)
    assert "".join(words) == text and [t for g in groups for t in g] == tokens
    # each word is the shortest run of tokens that decodes to whole characters (Whisper's
    # split for zh, ja, th, lo, my, yue): never a broken byte, never two runs merged
    assert all("\ufffd" not in w and tok.decode(g) == w for w, g in zip(words, groups))
    assert all(len(g) == 1 or "\ufffd" in tok.decode(g[:-1]) for g in groups)
    assert len(words) > len(text.split())  # not split on spaces
    english = load_tokenizer(base_model.info.folder, multilingual=True, language=language, task="translate")
    assert english.split_to_word_tokens(tok.encode(" Nice weather."))[0] == [" Nice", " weather."]
