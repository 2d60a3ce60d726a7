"""Scoring: the text normaliser, word error rate and character error rate used by tests and
benchmarks.

``normalize(text)`` (English, the default) makes a reference and a hypothesis comparable
whatever their conventions:
LibriSpeech references are upper case without punctuation, LJSpeech references spell numbers
out ("In eighteen thirteen"), Whisper writes digits and punctuation. Rules, in order:

- Unicode compatibility forms folded (NFKC), curly quotes made straight, hyphens and dashes
  become spaces ("twenty-five" -> "twenty five"), lower case.
- Titles: "Mr", "Mrs", "Dr" (with or without the period) -> "mister", "missus", "doctor";
  "per cent" -> "percent"; "&" -> "and".
- Numbers are spelled out in English words:
  * a 4-digit number from 1100 to 2099 (no thousands separator, no decimals, no currency, not
    a percentage or ordinal) reads as a year: 1813 -> "eighteen thirteen", 1900 -> "nineteen
    hundred", 1905 -> "nineteen oh five", 2024 -> "twenty twenty four", but 2000-2009 read
    as cardinals ("two thousand five"). So "1500 people" reads "fifteen hundred people";
  * other integers are cardinals without "and": 125 -> "one hundred twenty five";
    "1,000,000" -> "one million"; a number with leading zeros reads digit by digit ("007");
  * ordinals: 1st -> "first", 22nd -> "twenty second"; plurals: 1990s -> "nineteen nineties";
  * decimals: 3.14 -> "three point one four"; percentages: 5% -> "five percent";
  * currency ($, £, €): $5 -> "five dollars", $1 -> "one dollar", $5.50 -> "five dollars
    fifty cents", $2 million -> "two million dollars".
- Apostrophes are dropped ("don't" -> "dont"), diacritics removed ("café" -> "cafe"), any
  other punctuation becomes a space, whitespace is collapsed.
- "and" between a scale word and a number word is dropped on both sides ("one hundred and
  twenty" -> "one hundred twenty"), since references differ on it.

``normalize(text, language)`` for any other language keeps only what every language shares:
case and punctuation. NFKC, curly quotes made straight, hyphens and dashes become spaces ("Merk-
und Denkwürdiges" -> "merk und denkwürdiges"), case folded (``str.casefold``: "Straße" ->
"strasse"), apostrophes dropped, any other punctuation or symbol (Unicode categories P and S)
becomes a space, whitespace collapsed. Letters keep their diacritics ("ä" is not "a" in German)
and combining marks stay (they are parts of letters in Devanagari or Thai); numbers are left as
they are written. Russian (and Belarusian, Ukrainian) also fold "ё" into "е", which most
references do not write.

``cer`` scores the languages written without spaces between words (Chinese, Japanese, Thai...),
where a word error rate would count whole sentences: the edit distance over characters after
``normalize``, spaces left out.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import unicodedata
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
         "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINALS = {"one": "first", "two": "second", "three": "third", "five": "fifth",
             "eight": "eighth", "nine": "ninth", "twelve": "twelfth"}
_CURRENCIES = {"$": ("dollar", "dollars", "cent", "cents"),
               "£": ("pound", "pounds", "penny", "pence"),
               "€": ("euro", "euros", "cent", "cents")}


def cardinal(n: int) -> str:
    """125 -> "one hundred twenty five" (no "and"); beyond trillions, digit by digit."""
    if n < 0:
        return "minus " + cardinal(-n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (" " + _ONES[ones] if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return _ONES[hundreds] + " hundred" + (" " + cardinal(rest) if rest else "")
    if n >= 1000 * _SCALES[0][0]:
        return digits(str(n))
    for scale, name in _SCALES:
        if n >= scale:
            high, rest = divmod(n, scale)
            return cardinal(high) + " " + name + (" " + cardinal(rest) if rest else "")
    raise AssertionError("unreachable")


def year(n: int) -> str:
    """1813 -> "eighteen thirteen", 1900 -> "nineteen hundred", 1905 -> "nineteen oh five"."""
    if 2000 <= n <= 2009:
        return cardinal(n)
    high, low = divmod(n, 100)
    if low == 0:
        return cardinal(high) + " hundred"
    if low < 10:
        return cardinal(high) + " oh " + cardinal(low)
    return cardinal(high) + " " + cardinal(low)


def digits(s: str) -> str:
    """"007" -> "zero zero seven"."""
    return " ".join(_ONES[int(c)] for c in s)


def ordinal(words: str) -> str:
    """"twenty one" -> "twenty first"."""
    head, _, last = words.rpartition(" ")
    if last in _ORDINALS:
        last = _ORDINALS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return f"{head} {last}" if head else last


def plural(words: str) -> str:
    """"nineteen ninety" -> "nineteen nineties"."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    return words + ("es" if words.endswith("x") else "s")


_NUMBER = re.compile(r"""
    (?:(?P<cur>[$£€])\s?)?
    (?P<int>\d{1,3}(?:,\d{3})+|\d+)            # 1,000,000 or 1813
    (?:\.(?P<frac>\d+))?
    (?: (?P<pct>\s?%)
      | (?P<ord>st|nd|rd|th)(?![a-z])
      | (?P<plural>'?s)(?![a-z])
    )?
    (?:\s(?P<scale>thousand|million|billion|trillion)\b)?
""", re.VERBOSE)


def _integer(text: str, as_year_if_possible: bool) -> str:
    if len(text) > 1 and text.startswith("0"):
        return digits(text)
    n = int(text.replace(",", ""))
    if as_year_if_possible and "," not in text and len(text) == 4 and 1100 <= n <= 2099:
        return year(n)
    return cardinal(n)


def _money(m: re.Match) -> str:
    one, many, cent, cents = _CURRENCIES[m["cur"]]
    n = int(m["int"].replace(",", ""))
    frac, scale = m["frac"], m["scale"]
    if scale or (frac and len(frac) != 2):  # "$1.5 million", "$2.125": a plain amount
        amount = _integer(m["int"], False) + (" point " + digits(frac) if frac else "")
        return amount + (" " + scale if scale else "") + " " + many
    words = [] if n == 0 and frac else [_integer(m["int"], False), one if n == 1 else many]
    if frac and int(frac):
        words += [cardinal(int(frac)), cent if int(frac) == 1 else cents]
    return " ".join(words)


def _spell_number(m: re.Match) -> str:
    if m["cur"]:
        return f" {_money(m)} "
    if m["frac"]:
        words = _integer(m["int"], False) + " point " + digits(m["frac"])
    else:
        plain = not (m["pct"] or m["ord"] or m["scale"])
        words = _integer(m["int"], plain)
    if m["ord"] and not m["frac"]:
        words = ordinal(words)
    elif m["plural"]:
        words = plural(words)
    if m["scale"]:
        words += " " + m["scale"]
    if m["pct"]:
        words += " percent"
    return f" {words} "


_TITLES = {"mr": "mister", "mrs": "missus", "dr": "doctor"}
_SCALE_WORDS = {"hundred", "thousand", "million", "billion", "trillion"}
_NUMBER_WORDS = set(_ONES[1:]) | set(_TENS[2:])


def _drop_number_and(words: list[str]) -> list[str]:
    """"one hundred and twenty" -> "one hundred twenty": references disagree on the "and".

    Only when a number below a hundred follows, so "nineteen hundred and two thousand"
    (two numbers) keeps its "and".
    """
    kept = []
    for i, w in enumerate(words):
        if w == "and" and 0 < i < len(words) - 1 and words[i - 1] in _SCALE_WORDS:
            following = []
            for nxt in words[i + 1:]:
                if nxt not in _NUMBER_WORDS and nxt not in _SCALE_WORDS:
                    break
                following.append(nxt)
            if following and not _SCALE_WORDS.intersection(following):
                continue
        kept.append(w)
    return kept


_APOSTROPHES = re.compile(r"[‘’ʼ`´]")
_DASHES = re.compile(r"[-‐‑‒–—―]")
# letters a language's references commonly write without their diacritic
_FOLDS = {"ru": {"ё": "е"}, "be": {"ё": "е"}, "uk": {"ё": "е"}}


def normalize(text: str, language: Optional[str] = None) -> str:
    """Lower-case words without punctuation (see the module docstring): English rules (numbers
    spelled out) when ``language`` is None or "en", else case and punctuation only."""
    if language not in (None, "en"):
        return _normalize_other(text, language)
    text = unicodedata.normalize("NFKC", text)
    text = _APOSTROPHES.sub("'", text)
    text = _DASHES.sub(" ", text)
    text = text.lower()
    text = re.sub(r"\b(mrs|mr|dr)\b\.?", lambda m: _TITLES[m[1]], text)
    text = re.sub(r"\bper cent\b", "percent", text)
    text = text.replace("&", " and ")
    text = _NUMBER.sub(_spell_number, text)
    text = text.replace("'", "")
    text = "".join(c for c in unicodedata.normalize("NFKD", text)
                   if unicodedata.category(c) != "Mn")
    text = re.sub(r"[^\w\s]|_", " ", unicodedata.normalize("NFC", text))
    return " ".join(_drop_number_and(text.split()))


def _normalize_other(text: str, language: str) -> str:
    text = _DASHES.sub(" ", _APOSTROPHES.sub("'", unicodedata.normalize("NFKC", text)))
    text = text.casefold().replace("'", "")
    for letter, folded in _FOLDS.get(language, {}).items():
        text = text.replace(letter, folded)
    text = "".join(" " if unicodedata.category(c)[0] in "PS" else c for c in text)
    return " ".join(text.split())


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Levenshtein distance between two word lists.

    One row of the table at a time, vectorised: deletions and substitutions come from the row
    above; insertions (row[j] = min(row[j], row[j-1] + 1)) are a running minimum of
    row[k] - k, plus j. O(len(ref)) numpy steps of length len(hyp).
    """
    if not ref or not hyp:
        return len(ref) + len(hyp)
    ids: dict[str, int] = {}
    h = np.array([ids.setdefault(w, len(ids)) for w in hyp])
    index = np.arange(len(hyp) + 1)
    row = index.copy()
    for i, word in enumerate(ref, start=1):
        best = np.empty_like(row)
        best[0] = i
        best[1:] = np.minimum(row[:-1] + (h != ids.get(word, -1)), row[1:] + 1)
        row = np.minimum.accumulate(best - index) + index
    return int(row[-1])


def word_errors(ref: str, hyp: str, language: Optional[str] = None) -> tuple[int, int]:
    """(word edit distance after normalising, number of reference words)."""
    ref_words, hyp_words = normalize(ref, language).split(), normalize(hyp, language).split()
    return edit_distance(ref_words, hyp_words), len(ref_words)


def characters(text: str, language: Optional[str] = None) -> list[str]:
    """The normalised text's characters, spaces left out: the units of ``cer``."""
    return [c for c in normalize(text, language) if not c.isspace()]


def character_errors(ref: str, hyp: str, language: Optional[str] = None) -> tuple[int, int]:
    """(character edit distance after normalising, number of reference characters)."""
    ref_chars, hyp_chars = characters(ref, language), characters(hyp, language)
    return edit_distance(ref_chars, hyp_chars), len(ref_chars)


def _pooled(count, refs, hyps, language) -> float:
    refs = [refs] if isinstance(refs, str) else list(refs)
    hyps = [hyps] if isinstance(hyps, str) else list(hyps)
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    errors = units = 0
    for ref, hyp in zip(refs, hyps):
        e, n = count(ref, hyp, language)
        errors, units = errors + e, units + n
    if units == 0:
        return 0.0 if errors == 0 else math.inf
    return errors / units


def wer(refs: Union[str, Sequence[str]], hyps: Union[str, Sequence[str]],
        language: Optional[str] = None) -> float:
    """Pooled word error rate: all errors over all reference words (``normalize`` for
    ``language`` first).

    An empty reference scores 0.0 against an empty hypothesis and inf against anything else.
    """
    return _pooled(word_errors, refs, hyps, language)


def cer(refs: Union[str, Sequence[str]], hyps: Union[str, Sequence[str]],
        language: Optional[str] = None) -> float:
    """Pooled character error rate (spaces left out), as ``wer`` counts words."""
    return _pooled(character_errors, refs, hyps, language)


def word_start_offsets(reference: Sequence[tuple[str, float]], hypothesis: Sequence[tuple[str, float]]) -> list[float]:
    """Signed start error in seconds (hypothesis minus reference: > 0 is late) for each reference
    word matched to a hypothesis word.

    Both are (word, start) in time order. Words are normalised one by one and matched in order
    (difflib's longest matching blocks), so a misrecognised word is left out rather than paired
    with a neighbour. Silence markers such as ``<sil>`` are ignored.
    """
    ref = [(normalize(w), t) for w, t in reference if not w.startswith("<")]
    hyp = [(normalize(w), t) for w, t in hypothesis]
    ref = [(w, t) for w, t in ref if w]
    hyp = [(w, t) for w, t in hyp if w]
    matcher = difflib.SequenceMatcher(a=[w for w, _ in ref], b=[w for w, _ in hyp], autojunk=False)
    offsets = []
    for block in matcher.get_matching_blocks():
        for i in range(block.size):
            offsets.append(hyp[block.b + i][1] - ref[block.a + i][1])
    return offsets


def word_start_errors(reference: Sequence[tuple[str, float]], hypothesis: Sequence[tuple[str, float]]) -> list[float]:
    """|start error| in seconds for each reference word matched to a hypothesis word
    (``word_start_offsets`` without the sign)."""
    return [abs(x) for x in word_start_offsets(reference, hypothesis)]


def aligned_starts(path) -> list[tuple[str, float]]:
    """(word, start) of a forced-alignment file (``{"words": [{"word", "start", ...}]}``, as in
    the evaluation set's ``alignments/``), for ``word_start_offsets``."""
    return [(w["word"], w["start"]) for w in json.loads(Path(path).read_text())["words"]]


def error_quantiles(errors: Sequence[float]) -> tuple[float, float]:
    """(upper median, p90) of absolute errors: the sorted values at n // 2 and 0.9 (n - 1)."""
    ranked = sorted(abs(e) for e in errors)
    return ranked[len(ranked) // 2], ranked[int(0.9 * (len(ranked) - 1))]
