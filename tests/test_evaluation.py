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
