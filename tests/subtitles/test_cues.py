"""Cue layout: properties over random word timelines, plus hand examples."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transcriber.subtitles.cues import (LANGUAGE_RULES, TIME_RESOLUTION, Cue, CueOptions, language_defaults, layout_cues,
                                        segment_words, transcript_cues)
from transcriber.subtitles.lines import break_lines, line_layout, line_words
from transcriber.transcript.types import Segment, Transcript, Word

EPS = 1e-6
FUNCTION_WORDS = {"the", "a", "an", "to", "of", "and", "in", "at", "for"}


def words_of(text: str, start: float = 0.0, step: float = 0.3, pauses: dict | None = None):
    """Words evenly spaced ``step`` apart; ``pauses[i]`` adds silence before word i."""
    words, t = [], start
    for i, token in enumerate(text.split()):
        t += (pauses or {}).get(i, 0.0)
        words.append(Word(start=t, end=t + step * 0.9, text=" " + token, probability=0.9))
        t += step
    return words


# --- random timelines ---------------------------------------------------------------------

_letters = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABC", min_size=1, max_size=10)
_long = st.text(alphabet="xyz", min_size=30, max_size=70)
_punct = st.sampled_from(["", "", "", "", ",", ".", "?", "!", ";", "...", ":"])
_token = st.one_of(
    st.builds(lambda w, p: w + p, _letters, _punct),
    st.builds(lambda w, p: w + p, _long, _punct),
    st.sampled_from(["the", "a", "of", "and", "to", "Mr.", "I"]),
    st.just(""),  # an empty word must not break anything
)
_gap = st.one_of(st.just(0.0), st.floats(0, 0.4), st.floats(0.8, 3.0), st.floats(7, 12),
                 st.floats(-0.3, 0))  # negative: the word overlaps the one before
_duration = st.one_of(st.just(0.0), st.floats(0.01, 1.2), st.floats(6, 12))


@st.composite
def timelines(draw, max_words=60):
    n = draw(st.integers(0, max_words))
    words, end, start = [], draw(st.floats(0, 5)), 0.0
    for _ in range(n):
        start = max(start, end + draw(_gap))  # starts never decrease
        end = start + draw(_duration)
        words.append(Word(start=start, end=end, text=" " + draw(_token), probability=0.5))
    return words


@st.composite
def cue_options(draw):
    min_duration = draw(st.floats(0, 2))
    return CueOptions(max_line_chars=draw(st.integers(8, 60)), max_lines=draw(st.integers(1, 3)),
                      max_cps=draw(st.floats(5, 30)), min_duration=min_duration,
                      max_duration=draw(st.floats(max(min_duration, 0.5), 10)),
                      min_gap=draw(st.floats(0, 0.3)), close_gap=draw(st.floats(0, 1)),
                      linger=draw(st.floats(0, 1.5)), pause_split=draw(st.floats(0.3, 3)),
                      max_delay=draw(st.one_of(st.just(0.0), st.floats(0, 3))))


def token(word: Word) -> str:
    return " ".join(word.text.split())


def check_cues(words: list[Word], cues: list[Cue], o: CueOptions, language: str | None = None) -> None:
    o = o.for_language(language)  # the widths and speeds the layout used where o gives none
    spaced = language not in ("zh", "ja", "th", "lo", "my", "yue")
    if not any(token(w) for w in words):
        assert cues == []  # nothing to show
        return
    # every word exactly once, in order (identity, not just equality)
    flat = [w for c in cues for w in c.words]
    assert len(flat) == len(words) and all(a is b for a, b in zip(flat, words))
    for i, c in enumerate(cues):
        tokens = [token(w) for w in c.words if token(w)]
        assert tokens, "a cue without text"
        spoken = [w for w in c.words if token(w)]
        # the text is the words' text, nothing lost or added
        if spaced:
            assert " ".join(c.lines) == " ".join(tokens)
        else:  # joined without spaces, but a word that brings its own keeps it
            assert "".join(c.lines).replace(" ", "") == "".join(tokens).replace(" ", "")
            assert all(line == line.strip() for line in c.lines)
        assert c.text == "\n".join(c.lines)
        # line count and width; an over-long word alone on its line is the one exception
        assert len(c.lines) <= o.max_lines or any(len(t) > o.max_line_chars for t in tokens)
        for line in c.lines:
            assert line, "an empty line"
            assert len(line) <= o.max_line_chars or line in tokens, line
        # a multi-word cue spans at most max_duration of speech
        if len(spoken) > 1:
            assert max(w.end for w in spoken) - spoken[0].start <= o.max_duration + EPS
        # timing (words without text take no part in it)
        first, last = spoken[0].start, max(spoken[0].start, max(w.end for w in spoken))
        assert c.start >= first - EPS, "shown before its first word"
        assert c.end > c.start
        assert c.end - c.start <= o.max_duration + EPS
        assert c.end - c.start >= o.min_visible - EPS
        nxt = cues[i + 1] if i + 1 < len(cues) else None
        squeezed = nxt is not None and abs(nxt.start - o.min_gap - c.end) < EPS
        if nxt is not None:
            assert nxt.start >= c.end + o.min_gap - EPS, "cues overlap or gap too small"
        if not squeezed:
            assert c.end - c.start >= o.min_duration - EPS
            assert c.end >= min(last, c.start + o.max_duration) - EPS
        need = max(o.min_duration, len(" ".join(c.lines)) / o.max_cps, o.min_visible)
        assert c.end <= max(last + o.linger, c.start + need) + o.close_gap + TIME_RESOLUTION + EPS
        # later than its first word only because the cue before needed the time, and by at
        # most max_delay unless that cue was already squeezed to its shortest
        if c.start > first + EPS:
            prev = cues[i - 1]
            assert i > 0 and c.start == pytest.approx(prev.end + o.min_gap)
            assert c.start <= first + o.max_delay + EPS \
                or prev.end - prev.start == pytest.approx(o.min_visible)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timelines())
def test_layout_properties_default_options(words):
    o = CueOptions()
    check_cues(words, layout_cues(words, o), o)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timelines(max_words=40), cue_options())
def test_layout_properties_random_options(words, o):
    check_cues(words, layout_cues(words, o), o)


@settings(max_examples=100, deadline=None)
@given(timelines(max_words=30))
def test_line_words_follow_lines(words):
    for c in layout_cues(words):
        groups = line_words(c)
        assert [w for g in groups for w in g] == list(c.words)
        for line, group in zip(c.lines, groups):
            assert line == " ".join(token(w) for w in group if token(w))


# --- scripts without spaces ----------------------------------------------------------------

_han = st.text(alphabet="的一是不了人我在有他这为之大来以个中上们自己脚", min_size=1, max_size=2)
_cjk_token = st.one_of(_han, _han, _han, st.builds(lambda w, p: w + p, _han, st.sampled_from("，。？！、")),
                       st.sampled_from([" OK", " iPhone", " 2024"]))  # Latin words bring a space


@st.composite
def cjk_timelines(draw, max_words=80):
    n = draw(st.integers(0, max_words))
    words, end, start = [], draw(st.floats(0, 5)), 0.0
    for _ in range(n):
        start = max(start, end + draw(_gap))
        end = start + draw(_duration)
        words.append(Word(start=start, end=end, text=draw(_cjk_token), probability=0.5))
    return words


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cjk_timelines(), st.sampled_from(["zh", "ja", "th", "yue"]))
def test_layout_properties_without_spaces(words, language):
    check_cues(words, layout_cues(words, language=language), CueOptions(), language)


@settings(max_examples=100, deadline=None)
@given(cjk_timelines(max_words=40))
def test_line_layout_follows_lines_without_spaces(words):
    for c in layout_cues(words, language="zh"):
        groups = line_layout(c)
        assert [w for g in groups for _, w in g] == list(c.words)
        for line, group in zip(c.lines, groups):
            assert line == "".join(sep + token(w) for sep, w in group if token(w))


def han_words(text: str, start: float = 0.0, step: float = 0.25) -> list[Word]:
    """One word per character (as Whisper splits Chinese), ``step`` seconds apart."""
    return [Word(start + i * step, start + i * step + step * 0.9, ch, 0.9) for i, ch in enumerate(text)]


def test_language_rules_fill_what_is_not_given():
    assert (CueOptions().for_language("zh").max_line_chars, CueOptions().for_language("zh").max_cps) == (16, 9)
    assert (CueOptions().for_language("ja").max_line_chars, CueOptions().for_language("ja").max_cps) == (13, 4)
    assert (CueOptions().for_language("th").max_line_chars, CueOptions().for_language("th").max_cps) == (35, 17)
    for language in ("en", "de", "ar", None):
        assert (CueOptions().for_language(language).max_line_chars,
                CueOptions().for_language(language).max_cps) == (42, 17)
    given = CueOptions(max_line_chars=30).for_language("zh")
    assert (given.max_line_chars, given.max_cps) == (30, 9)  # a given value always wins
    assert CueOptions(max_cps=20.0).for_language("ja").max_cps == 20
    assert language_defaults("max_line_chars").startswith("42; zh 16")
    assert set(LANGUAGE_RULES) >= {"zh", "ja", "th"}


def test_chinese_lines_of_16_characters_without_spaces():
    text = "今天我们一起去公园散步然后在湖边吃午饭下午再去看一场电影晚上回家做饭"  # 34 characters
    cues = layout_cues(han_words(text, step=0.2), language="zh")
    assert len(cues) == 2  # 2 lines of 16 hold 32 at most
    assert "".join("".join(c.lines) for c in cues) == text
    for c in cues:
        assert all(len(line) <= 16 and " " not in line for line in c.lines)
        # 9 characters a second: each cue stays up long enough to be read
        assert c.end - c.start >= len("".join(c.lines)) / 9 - EPS
    cue, = layout_cues(han_words(text[:27], step=0.2), language="zh")  # 27 fit in one cue
    assert max(len(line) for line in cue.lines) == 14  # balanced 13 + 14: Chinese is not held to 13


def test_japanese_lines_of_13_characters():
    text = "今日はとても良い天気なので公園へ散歩に行きました"  # 24 characters
    cues = layout_cues(han_words(text, step=0.3), language="ja")
    assert "".join("".join(c.lines) for c in cues) == text
    assert all(len(line) <= 13 for c in cues for line in c.lines)
    # 4 characters a second: a two-line cue of 24 characters needs 6 s
    assert all(c.end - c.start >= min(len("".join(c.lines)) / 4, 7.0) - EPS for c in cues)


def test_chinese_splits_at_full_width_sentence_ends():
    words = han_words("你好。", step=0.3) + han_words("今天天气很好。", start=3.0, step=0.3)
    assert [c.text for c in layout_cues(words, language="zh")] == ["你好。", "今天天气很好。"]


def test_latin_words_keep_their_space_in_chinese():
    words = han_words("我用") + [Word(0.5, 0.9, " iPhone", 0.9)] + han_words("拍照", start=1.0)
    cue, = layout_cues(words, language="zh")
    assert cue.text == "我用 iPhone拍照"


def test_a_flag_overrides_the_language_rule():
    text = "今天我们一起去公园散步然后在湖边吃午饭"
    cues = layout_cues(han_words(text, step=0.2), CueOptions(max_line_chars=8), language="zh")
    assert all(len(line) <= 8 for c in cues for line in c.lines)


def test_a_translation_is_laid_out_as_english():
    # spoken Chinese, English text: English rules (42 characters, spaces), not Chinese ones
    words = words_of("I went to the park with my friends and we had lunch by the lake.", step=0.2)
    zh = Transcript(language="zh", duration=20.0, task="translate",
                    segments=(Segment(0.0, words[-1].end, "".join(w.text for w in words), tuple(words)),))
    assert zh.text_language == "en"
    assert [c.text for c in transcript_cues(zh)] == [c.text for c in layout_cues(words, end_time=20.0)]
    assert any(len(line) > 16 for c in transcript_cues(zh) for line in c.lines)


# --- hand examples ------------------------------------------------------------------------

def test_no_words_no_cues():
    assert layout_cues([]) == []
    assert layout_cues([Word(0.0, 1.0, " ", 1.0)]) == []


def test_words_without_text_ride_along():
    words = [Word(0.0, 0.1, "", 1.0)] + words_of("Hi there.", start=1.0) \
        + [Word(9.0, 20.0, " ", 1.0)]
    cue, = layout_cues(words)
    assert cue.words == tuple(words) and cue.text == "Hi there."
    assert cue.start == 1.0


def test_split_at_sentence_end():
    cues = layout_cues(words_of("Hello there, my friend. How are you today?"))
    assert [c.text for c in cues] == ["Hello there, my friend.", "How are you today?"]


def test_clause_split_preferred_over_anywhere():
    text = ("When we finally reached the top of the mountain after many hours, "
            "we sat down on the rocks and looked at the valley below us")
    cues = layout_cues(words_of(text, step=0.25))
    assert len(cues) == 2
    assert cues[0].text.replace("\n", " ").endswith("many hours,")


def test_long_pause_splits():
    cues = layout_cues(words_of("I think we should go now", pauses={3: 1.5}))
    assert [c.text for c in cues] == ["I think we", "should go now"]


def test_quick_short_sentences_are_joined():
    # each sentence alone would get far less than min_duration before the next one
    cues = layout_cues(words_of("Yes. No. Maybe.", step=0.2))
    assert [c.text for c in cues] == ["Yes. No. Maybe."]


def test_article_not_left_at_line_end():
    tokens = "He walked slowly over to the window and looked out at the rain".split()
    lines = break_lines(tokens, CueOptions())
    assert len(lines) == 2
    # the most balanced break would be after "the"; it moves to before "and"
    assert lines == ("He walked slowly over to the window", "and looked out at the rain")
    assert lines[0].split()[-1].lower() not in FUNCTION_WORDS


def test_balanced_lines():
    tokens = "one two three four five six seven eight nine ten eleven twelve".split()
    lines = break_lines(tokens, CueOptions(max_line_chars=42))
    assert len(lines) == 2
    assert abs(len(lines[0]) - len(lines[1])) <= 8


def test_bottom_heavy_on_ties():
    lines = break_lines("aaaa bbbb cccc dddd eeee".split(), CueOptions(max_line_chars=15))
    assert lines == ("aaaa bbbb", "cccc dddd eeee")


def test_one_line_when_it_fits():
    assert break_lines(["Short", "and", "sweet."], CueOptions()) == ("Short and sweet.",)


def test_long_word_alone_on_its_line():
    long = "x" * 50
    cues = layout_cues(words_of(f"see {long} here"))
    lines = [line for c in cues for line in c.lines]
    assert long in lines
    assert all(len(line) <= 42 for line in lines if line != long)


def test_duration_extended_into_free_time():
    cues = layout_cues([Word(1.0, 1.1, " Hi.", 1.0), Word(5.0, 5.2, " Bye.", 1.0)])
    assert cues[0].start == 1.0
    assert cues[0].end == pytest.approx(1.0 + 5 / 6)
    assert cues[1].end == pytest.approx(5.0 + 5 / 6)


def test_small_gap_closed_to_min_gap():
    words = words_of("First sentence here.") + words_of("Second one.", start=1.55)
    cues = layout_cues(words)
    assert len(cues) == 2
    assert cues[1].start - cues[0].end == pytest.approx(2 / 24)


def test_linger_after_last_word():
    words = words_of("This sentence is long enough to be read in time.", step=0.4)
    cue, = layout_cues(words)
    assert cue.end == pytest.approx(words[-1].end + 0.5)


def test_fast_speech_borrows_time_from_the_next_cue():
    # 15 words in 1.5 s, and the next sentence at 2 s: the first cue needs 77 / 17 = 4.5 s,
    # so the second one starts late, but by no more than max_delay
    first = words_of("These words are spoken far too quickly for anyone to read them at "
                     "that speed.", step=0.1)
    second = words_of("Then a pause.", start=2.0)
    cues = layout_cues(first + second)
    assert [c.text.replace("\n", " ") for c in cues] == [
        "These words are spoken far too quickly for anyone to read them at that speed.",
        "Then a pause."]
    a, b = cues
    assert a.start == first[0].start
    assert b.start == pytest.approx(second[0].start + 2.0)  # max_delay
    assert b.start - a.end == pytest.approx(2 / 24)
    undelayed = layout_cues(first + second, CueOptions(max_delay=0))
    assert undelayed[1].start == second[0].start
    assert undelayed[0].end == pytest.approx(second[0].start - 2 / 24)


def test_lingering_never_delays_the_next_cue():
    # each cue has time enough to be read before the next first word; the 0.5 s linger would
    # run into the next cue, so it is cut there instead of pushing the next cue back
    words = words_of("Short one here.", step=0.5) + words_of("And another.", start=1.6, step=0.5)
    a, b = layout_cues(words, CueOptions(min_duration=0.5))
    assert b.start == words[3].start
    assert a.end == pytest.approx(b.start - 2 / 24)


def test_max_duration_splits_slow_speech():
    cues = layout_cues(words_of("so very slow speech goes on and on", step=1.5))
    assert len(cues) > 1
    assert all(c.end - c.start <= 7.0 + EPS for c in cues)


def test_end_time_caps_the_last_cue():
    cue, = layout_cues([Word(10.0, 10.1, " Hi", 1.0)], end_time=10.4)
    assert cue.end == pytest.approx(10.4)


def test_dense_words_never_overlap():
    words = [Word(1.0, 1.0, f" w{i}.", 1.0) for i in range(30)]
    cues = layout_cues(words)
    for a, b in zip(cues, cues[1:]):
        assert b.start >= a.end + 2 / 24 - EPS


def test_segment_without_words_gives_pseudo_words():
    seg = Segment(start=2.0, end=4.0, text=" ab abcd ab")
    words = segment_words(seg)
    assert [w.text for w in words] == [" ab", " abcd", " ab"]
    assert words[0].start == 2.0 and words[-1].end == pytest.approx(4.0)
    assert words[1].start == pytest.approx(2.5) and words[1].end == pytest.approx(3.5)
    cues = transcript_cues(Transcript(language="en", duration=10.0, segments=(seg,)))
    assert [c.text for c in cues] == ["ab abcd ab"]


def test_cue_to_dict():
    cue, = layout_cues(words_of("Hello world."))
    d = cue.to_dict()
    assert d["text"] == "Hello world." and d["start"] == 0.0
    assert [w["word"] for w in d["words"]] == [" Hello", " world."]


@pytest.mark.parametrize("kwargs", [
    {"max_line_chars": 0}, {"max_lines": 0}, {"max_lines": 1.5}, {"max_cps": 0},
    {"min_duration": -1}, {"max_duration": 0}, {"min_duration": 8.0, "max_duration": 7.0},
    {"min_gap": -0.1}, {"close_gap": math.nan}, {"linger": -1}, {"pause_split": 0},
    {"max_delay": -0.5},
    {"max_line_chars": True},
    {"min_duration": None}, {"max_lines": None},  # only the width and speed may be left to the language
])
def test_options_are_checked(kwargs):
    with pytest.raises(ValueError, match="CueOptions"):
        CueOptions(**kwargs)
