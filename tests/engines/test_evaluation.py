"""The scoring normaliser and WER."""

from __future__ import annotations

import math

import pytest

from evalkit.scoring import (cardinal, cer, characters, edit_distance, normalize, ordinal,
                             wer, word_errors, year)


@pytest.mark.parametrize("text, expected", [
    # LJSpeech spells numbers out; Whisper writes digits: both must meet
    ("In 1813, 125 people came.", "in eighteen thirteen one hundred twenty five people came"),
    ("In eighteen thirteen", "in eighteen thirteen"),
    ("2024", "twenty twenty four"),
    ("1900", "nineteen hundred"),
    ("2000", "two thousand"),
    ("2005", "two thousand five"),
    ("1905", "nineteen oh five"),
    ("1099 and 2100", "one thousand ninety nine and two thousand one hundred"),
    ("1,813 votes", "one thousand eight hundred thirteen votes"),
    ("1,000,000", "one million"),
    ("12345", "twelve thousand three hundred forty five"),
    ("0 and 007", "zero and zero zero seven"),
    ("1st 2nd 3rd 4th 21st 100th 12th", "first second third fourth twenty first one hundredth "
                                        "twelfth"),
    ("3.14", "three point one four"),
    ("50%", "fifty percent"),
    ("2.5 per cent", "two point five percent"),
    ("$5", "five dollars"),
    ("$1", "one dollar"),
    ("$5.50", "five dollars fifty cents"),
    ("$0.99", "ninety nine cents"),
    ("$2 million", "two million dollars"),
    ("£1.5 billion", "one point five billion pounds"),
    ("the 1990s and '80s", "the nineteen nineties and eighties"),
    ("10:30", "ten thirty"),
    # titles
    ("Mr. Smith, Mrs Jones and Dr. Who", "mister smith missus jones and doctor who"),
    ("MISTER QUILTER", "mister quilter"),
    # punctuation, case, apostrophes, hyphens, whitespace
    ("Hello, World!  How are   you?", "hello world how are you"),
    ("I don't know; it’s twenty-five.", "i dont know its twenty five"),
    ("well-known — really", "well known really"),
    ("Fish & chips", "fish and chips"),
    ("Café \"quoted\" (aside)", "cafe quoted aside"),
    ("one hundred and twenty five", "one hundred twenty five"),
    ("1900 and 2000", "nineteen hundred and two thousand"),
    ("", ""),
    ("  ...  ", ""),
])
def test_normalize(text, expected):
    assert normalize(text) == expected


def test_librispeech_reference_matches_whisper_style():
    ref = "MISTER QUILTER IS THE APOSTLE OF THE MIDDLE CLASSES AND WE ARE GLAD TO WELCOME HIS GOSPEL"
    hyp = " Mr. Quilter is the apostle of the middle classes, and we are glad to welcome his gospel."
    assert normalize(ref) == normalize(hyp)
    assert word_errors(ref, hyp) == (0, 17)


def test_ljspeech_reference_matches_digits():
    ref = "in eighteen thirteen, the one hundred and twenty five prisoners"
    hyp = "In 1813 the 125 prisoners"
    assert word_errors(ref, hyp) == (0, 9)


def test_number_words():
    assert cardinal(0) == "zero"
    assert cardinal(90) == "ninety"
    assert cardinal(101) == "one hundred one"
    assert cardinal(2_000_017) == "two million seventeen"
    assert year(1813) == "eighteen thirteen" and year(2010) == "twenty ten"
    assert ordinal("twenty") == "twentieth" and ordinal("one hundred five") == "one hundred fifth"


def test_edit_distance():
    assert edit_distance([], []) == 0
    assert edit_distance(["a"], []) == 1
    assert edit_distance([], ["a", "b"]) == 2
    assert edit_distance("a b c".split(), "a b c".split()) == 0
    assert edit_distance("a b c".split(), "a x c".split()) == 1  # substitution
    assert edit_distance("a b c".split(), "a c".split()) == 1    # deletion
    assert edit_distance("a b c".split(), "a b b c".split()) == 1  # insertion
    assert edit_distance("kitten sat".split(), "sat kitten".split()) == 2
    assert edit_distance(list("kitten"), list("sitting")) == 3


def test_word_errors_normalises_first():
    assert word_errors("The cat sat on the mat.", "the cat sat on mat") == (1, 6)
    assert word_errors("HELLO WORLD", "Hello, world!") == (0, 2)


def test_wer_is_pooled():
    # 1 error in 3 words + 1 error in 2 words = 2 / 5, not the mean of 1/3 and 1/2
    assert wer(["a b c", "d e"], ["a x c", "d e f"]) == pytest.approx(0.4)
    assert wer("a b", "a b") == 0.0
    assert wer(["a"], ["b c d"]) == pytest.approx(3.0)


def test_wer_edge_cases():
    assert wer([], []) == 0.0
    assert wer([""], [""]) == 0.0
    assert math.isinf(wer([""], ["something"]))
    with pytest.raises(ValueError):
        wer(["a", "b"], ["a"])


# --- other languages: case and punctuation only -------------------------------------------

@pytest.mark.parametrize("text, language, expected", [
    ("Das ist: Ausführliche, unerdichtete und recht memorable Lebensbeschreibung",
     "de", "das ist ausführliche unerdichtete und recht memorable lebensbeschreibung"),
    ("was er Merk- und Denkwürdiges gesehen", "de", "was er merk und denkwürdiges gesehen"),
    ("Straße", "de", "strasse"),  # casefold: references write either
    ("Бедняга. Ребят, на его месте должен был быть я!", "ru",
     "бедняга ребят на его месте должен был быть я"),
    ("Ёлка", "ru", "елка"),
    ("et c'est la dictée numéro 1.", "fr", "et cest la dictée numéro 1"),  # diacritics and digits stay
    ("¿Qué tal? «Bien».", "es", "qué tal bien"),
    ("नमस्ते, दुनिया।", "hi", "नमस्ते दुनिया"),  # vowel signs are part of the letters
    ("砸自己的脚。", "zh", "砸自己的脚"),
])
def test_normalize_other_languages(text, language, expected):
    assert normalize(text, language) == expected


def test_english_rules_stay_the_default():
    assert normalize("In 1813, Mr. Smith") == normalize("In 1813, Mr. Smith", "en") \
        == "in eighteen thirteen mister smith"
    assert normalize("In 1813", "de") == "in 1813"  # no English number words for German


def test_wer_and_cer_for_a_language():
    ref = "бедняга ребят на его месте должен был быть я"
    assert wer(ref, "Бедняга. Ребят, на его месте должен быть я.", "ru") == pytest.approx(1 / 9)
    assert characters("砸 自己，的脚。", "zh") == list("砸自己的脚")
    assert cer("砸自己的脚", "扎自己的腳", "zh") == pytest.approx(2 / 5)
    assert cer(["砸自己的脚", "你好"], ["砸自己的脚", "你"], "zh") == pytest.approx(1 / 7)  # pooled
    assert cer("", "", "zh") == 0.0


# ---- issue 48's evaluation (evalkit.recall, bench/peers/recall.py): scores and stress sets --------------

import numpy as np  # noqa: E402

from evalkit import recall as rc  # noqa: E402


def _words(*spans, text="w"):
    return [(s, e, text) for s, e in spans]


def test_lost_piece_rule_is_lost_py_s():
    """Under 30% of a piece's reference words (by word middles) is lost; pieces of fewer than 3
    reference words are not judged (../shared/tools/lost.py)."""
    pieces = [rc.Piece(0.0, 5.0, "one two three four five six seven eight nine ten"),
              rc.Piece(5.5, 8.0, "a b c d"), rc.Piece(8.5, 9.0, "hi there")]
    # 3 of 10 words in the first piece (30%: kept), 1 of 4 in the second (25%: lost)
    words = _words((0.1, 0.3), (1.0, 1.2), (4.6, 5.0), (5.6, 5.8), (8.6, 8.8))
    lost, judged = rc.lost_pieces(pieces, words)
    assert judged == 2 and lost == [pieces[1]]
    # a word whose middle is past the piece's end is not the piece's
    lost, _ = rc.lost_pieces(pieces, _words((0.1, 0.3), (1.0, 1.2), (4.9, 5.3)))
    assert pieces[0] in lost
    assert rc.lost_pieces(pieces, [])[0] == pieces[:2]


def test_pieces_of_reads_segments_files_as_lost_py_does():
    seg = {"audio": "x", "gap_s": 0.5, "segments": [{"id": "a", "start": 0, "end": 2.5, "text": "A B C"}]}
    assert rc.pieces_of(seg) == [rc.Piece(0.0, 2.5, "A B C")]
    assert rc.pieces_of([{"start": 1, "end": 2, "text": "x"}]) == [rc.Piece(1.0, 2.0, "x")]


def test_short_lines_kept_and_words_outside():
    line = rc.Piece(20.0, 21.6, "Eight. The press yard.")
    assert rc.line_kept(line, _words((20.1, 20.4), (20.5, 20.7)))
    assert not rc.line_kept(line, _words((5.0, 5.3)))  # the line written 15 s early: lost there
    assert rc.words_outside([line], _words((5.0, 5.3), (20.1, 20.4), (21.9, 22.0))) == 1
    assert rc.words_outside([line], []) == 0


def test_words_kept_counts_deletions_only():
    ref = "ask not what your country can do for you " * 2
    assert rc.words_kept(ref, "Ask not what your country can do for you.") == (9, 18)
    assert rc.words_kept(ref, "ask not what your county can do for you " * 2) == (18, 18)
    assert rc.words_kept(ref, "") == (0, 18)


def test_first_word_offsets_match_the_first_word_only():
    words = [(9.0, 9.2, " So"), (10.12, 10.3, " Eight."), (10.4, 10.6, " The")]
    assert rc.first_word_offsets([(10.0, "EIGHT THE PRESS YARD")], words) == [pytest.approx(0.12)]
    assert rc.first_word_offsets([(10.0, "NINE THE PRESS YARD")], words) == []  # misheard: left out
    assert rc.first_word_offsets([(20.0, "EIGHT THE")], words) == []  # too far


def test_voice_onset_finds_the_first_voiced_frame():
    sr = rc.SR
    rng = np.random.default_rng(0)
    samples = (rng.standard_normal(3 * sr) * 1e-4).astype(np.float32)  # room noise
    samples[int(1.23 * sr):] += np.sin(np.arange(int(1.77 * sr)) * 0.1).astype(np.float32) * 0.3
    assert rc.voice_onset(samples, 0.5, 3.0) == pytest.approx(1.23, abs=0.011)
    assert rc.voice_onset(samples, 0.0, 0.01) == 0.0  # too short to say: the boundary


def test_split_and_fitted_shift():
    assert rc.split_half(["c", "a", "b", "d"]) == (["a", "c"], ["b", "d"])
    assert rc.fitted_shift([0.1, 0.2, 0.3]) == pytest.approx(-0.2)
    assert rc.quantiles([-0.3, 0.1, 0.2]) == (0.2, 0.2)
    assert all(np.isnan(rc.quantiles([])))


def test_stress_builders_place_their_pieces():
    sr = rc.SR
    line = (np.full(sr * 2, 0.1, np.float32), "A SHORT LINE")
    sparse = rc.build_sparse([line, line], [15, 30], [None, -50.0], tail=5)
    assert len(sparse.samples) == (15 + 2 + 30 + 2 + 5) * sr
    assert [(p.start, p.end) for p in sparse.pieces] == [(15.0, 17.0), (47.0, 49.0)]
    assert not sparse.samples[:15 * sr].any()  # digital silence before the first
    noise = sparse.samples[17 * sr:47 * sr]
    assert 20 * np.log10(np.sqrt(np.mean(noise ** 2))) == pytest.approx(-50, abs=0.5)

    rep = rc.build_repeated(line[0], line[1], 3, gap=0.5)
    assert len(rep.samples) == int(3 * 2.5 * sr) and rep.text == "A SHORT LINE A SHORT LINE A SHORT LINE"
    assert [p.start for p in rep.pieces] == [0.0, 2.5, 5.0]

    lead = rc.build_leading(line[0], line[1], 60, tail=3)
    assert lead.pieces == [rc.Piece(60.0, 62.0, "A SHORT LINE")] and len(lead.samples) == 65 * sr

    delayed = rc.build_delayed(line[0], line[1], 4, "mkv")
    assert delayed.pieces[0].start == 4 and delayed.duration == 6 and len(delayed.samples) == 2 * sr


def test_delayed_stress_file_carries_its_delay(tmp_path):
    """The MKV/MP4 written for the delayed set has its audio stream starting ``delay`` s late."""
    import json
    import shutil
    import subprocess

    if not (shutil.which("ffmpeg") and shutil.which("ffprobe")):
        pytest.skip("needs ffmpeg and ffprobe on PATH (the bench's stress sets write with them)")
    tone = (np.sin(np.arange(rc.SR) * 0.05) * 0.3).astype(np.float32)
    for container in ("mkv", "mp4"):
        path = rc.write_stress(rc.build_delayed(tone, "x", 4, container), tmp_path)
        probe = subprocess.run(["ffprobe", "-v", "error", "-show_streams", "-of", "json", path],
                               capture_output=True, text=True, check=True)
        audio = [s for s in json.loads(probe.stdout)["streams"] if s["codec_type"] == "audio"][0]
        assert float(audio["start_time"]) == pytest.approx(4, abs=0.1)
        assert not list(tmp_path.glob("*.wav"))  # the intermediate WAV is gone
