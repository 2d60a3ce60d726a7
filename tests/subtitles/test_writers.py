"""Writers: the formats parse back with independent readers; atomic writes never leave junk."""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pysubs2
import pytest
import srt
import webvtt

from transcriber import assemble
from transcriber.subtitles import files
from transcriber.subtitles.cues import CueOptions, transcript_cues
from transcriber.errors import OutputError
from transcriber.transcript.types import Segment, Transcript, Word
from transcriber.subtitles.files import write_atomic, write_outputs
from transcriber.subtitles.formats import (FORMATS, OutputOptions, vtt_timestamp, write_json, write_srt, write_txt,
                                           write_vtt)

TIMING = re.compile(r"^(\d{2,}):(\d{2}):(\d{2})\.(\d{3}) --> (\d{2,}):(\d{2}):(\d{2})\.(\d{3})$")
INLINE = re.compile(r"<(\d{2,}):(\d{2}):(\d{2})\.(\d{3})>")


def segment(start: float, tokens: list[str], step: float = 0.4) -> Segment:
    words = tuple(Word(start=round(start + i * step, 3), end=round(start + i * step + 0.3, 3),
                       text=" " + t, probability=0.75) for i, t in enumerate(tokens))
    return Segment(start=words[0].start, end=words[-1].end,
                   text="".join(w.text for w in words), words=words)


@pytest.fixture
def transcript() -> Transcript:
    return Transcript(language="en", duration=30.0, model="tiny.en", segments=(
        segment(0.5, "Hello there, this is a test of the subtitle writers.".split()),
        segment(5.0, "Fish & chips <b>are</b> served at 5 > 4 o'clock.".split()),
        segment(9.0, ("And now a much longer sentence that will certainly not fit on "
                      "a single line of forty two characters, let alone one cue.").split()),
    ))


def spoken(transcript: Transcript) -> list[str]:
    return [w.text.strip() for w in transcript.words]


def seconds(*parts: str) -> float:
    h, m, s, ms = (int(p) for p in parts)
    return h * 3600 + m * 60 + s + ms / 1000


# --- SRT ----------------------------------------------------------------------------------

def test_srt_parses_back(transcript):
    text = write_srt(transcript)
    subs = list(srt.parse(text))
    assert [s.index for s in subs] == list(range(1, len(subs) + 1))
    assert " ".join(s.content for s in subs).split() == spoken(transcript)
    assert re.search(r"^00:00:00,500 --> ", text, re.MULTILINE)
    for a, b in zip(subs, subs[1:]):
        assert a.start < a.end <= b.start
    # SRT has no escaping; pysubs2, like players, reads <b>...</b> as bold
    events = pysubs2.SSAFile.from_string(text, format_="srt")
    assert " ".join(e.plaintext for e in events).split() == \
        [re.sub(r"</?b>", "", w) for w in spoken(transcript)]


def test_srt_matches_cues(transcript):
    cues = transcript_cues(transcript)
    subs = list(srt.parse(write_srt(transcript)))
    assert [s.content for s in subs] == [c.text for c in cues]
    assert [s.start.total_seconds() for s in subs] == pytest.approx(
        [round(c.start, 3) for c in cues])


def test_srt_respects_cue_options(transcript):
    subs = list(srt.parse(write_srt(transcript, CueOptions(max_line_chars=20, max_lines=1))))
    assert all(len(line) <= 20 for s in subs for line in s.content.split("\n"))
    assert all("\n" not in s.content for s in subs)


# --- WebVTT -------------------------------------------------------------------------------

def test_vtt_parses_back(transcript):
    text = write_vtt(transcript)
    assert text.startswith("WEBVTT\n\n")
    captions = webvtt.from_string(text).captions
    assert " ".join(html.unescape(c.text) for c in captions).split() == spoken(transcript)
    events = pysubs2.SSAFile.from_string(text, format_="vtt")
    assert " ".join(html.unescape(e.plaintext) for e in events).split() == spoken(transcript)
    assert len(events) == len(captions) == len(transcript_cues(transcript))


def test_vtt_timing_lines_always_have_hours(transcript):
    timings = [line for line in write_vtt(transcript).splitlines() if "-->" in line]
    assert timings and all(TIMING.match(line) for line in timings)
    assert timings[0].startswith("00:00:00.500 --> ")
    assert vtt_timestamp(3723.5) == "01:02:03.500"
    assert vtt_timestamp(0.0) == "00:00:00.000"
    assert vtt_timestamp(59.9996) == "00:01:00.000"


def test_vtt_escapes_markup(transcript):
    text = write_vtt(transcript)
    assert "Fish &amp; chips &lt;b&gt;are&lt;/b&gt;" in text
    assert "5 &gt; 4" in text
    body = "\n".join(text.splitlines()[1:])
    assert "<" not in body and " & " not in body
    # SRT has no escaping: the text is as spoken
    assert "Fish & chips <b>are</b>" in write_srt(transcript)


def test_vtt_karaoke(transcript):
    text = write_vtt(transcript, karaoke=True)
    cues = transcript_cues(transcript)
    blocks = text.strip().split("\n\n")[1:]
    assert len(blocks) == len(cues)
    for block, cue in zip(blocks, cues):
        timing, *lines = block.split("\n")
        m = TIMING.match(timing)
        start, end = seconds(*m.groups()[:4]), seconds(*m.groups()[4:])
        stamps = [seconds(*g) for g in INLINE.findall("\n".join(lines))]
        assert len(stamps) == len(cue.words) - 1  # one before each word after the first
        assert stamps == sorted(stamps)
        assert all(start <= s <= end for s in stamps)
        assert stamps == pytest.approx([round(w.start, 3) for w in cue.words[1:]])
        assert [INLINE.sub("", line) for line in lines] == \
            [html.escape(line, quote=False) for line in cue.lines]
    captions = webvtt.from_string(text).captions
    assert " ".join(html.unescape(c.text) for c in captions).split() == spoken(transcript)


# --- JSON and text ------------------------------------------------------------------------

def test_json_round_trip(transcript):
    data = json.loads(write_json(transcript))
    assert set(data) == {"text", "language", "duration", "model", "segments"}
    assert data["segments"][0]["words"][0] == {"word": " Hello", "start": 0.5, "end": 0.8,
                                               "probability": 0.75}
    assert Transcript.from_dict(data) == transcript


def test_json_with_cues(transcript):
    data = json.loads(write_json(transcript, include_cues=True))
    cues = transcript_cues(transcript)
    assert [c["text"] for c in data["cues"]] == [c.text for c in cues]
    assert Transcript.from_dict(data) == transcript


def test_txt_one_line_per_segment(transcript):
    lines = write_txt(transcript).splitlines()
    assert lines == [s.text.strip() for s in transcript.segments]


def test_tsv_is_openai_whisper_s(transcript):
    """openai/whisper's WriteTSV: a start/end/text header, then one row per segment with text,
    times in integer milliseconds, whitespace (tabs too) collapsed to one space."""
    t = Transcript(language="en", duration=10.0, segments=(
        Segment(start=1.0, end=3.2574, text=" Words\twere not timed."), Segment(start=4.0, end=6.0, text=" "),
        Segment(start=6.0005, end=7.0, text=" Still fine."),
    ))
    assert FORMATS["tsv"].render(t, OutputOptions()) == \
        "start\tend\ttext\n1000\t3257\tWords were not timed.\n6000\t7000\tStill fine.\n"
    assert FORMATS["tsv"].extension == ".tsv" and FORMATS["tsv"].options == ()


def test_segments_without_words():
    t = Transcript(language="en", duration=10.0, segments=(
        Segment(start=1.0, end=3.0, text=" Words were not timed."),
        Segment(start=4.0, end=6.0, text=" Still fine."),
    ))
    subs = list(srt.parse(write_srt(t)))
    assert [s.content for s in subs] == ["Words were not timed.", "Still fine."]
    assert subs[0].start.total_seconds() == 1.0
    assert write_txt(t) == "Words were not timed.\nStill fine.\n"


def test_empty_transcript():
    for t in (Transcript(language="en", duration=12.0),
              Transcript(language="en", duration=12.0,
                         segments=(Segment(start=0.0, end=1.0, text=""),))):
        assert write_srt(t) == ""
        assert write_vtt(t) == "WEBVTT\n"
        assert webvtt.from_string(write_vtt(t)).captions == []
        assert write_txt(t) == ""
        assert Transcript.from_dict(json.loads(write_json(t, include_cues=True))) == t
        assert json.loads(write_json(t, include_cues=True))["cues"] == []


def test_formats_registry(transcript):
    assert set(FORMATS) == {"srt", "vtt", "json", "txt", "tsv", "ass", "rttm"}
    for name, fmt in FORMATS.items():
        assert fmt.extension == "." + name
        if name == "rttm":  # speaker turns: refused for a transcript without speakers (test_speaker_formats)
            with pytest.raises(ValueError, match="--speakers"):
                fmt.render(transcript, OutputOptions())
            continue
        assert isinstance(fmt.render(transcript, OutputOptions()), str)


# --- atomic writes ------------------------------------------------------------------------

def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".part")]


def test_write_atomic_writes_and_replaces(tmp_path):
    target = tmp_path / "out.srt"
    write_atomic(target, "first\n")
    write_atomic(target, "second é\n")
    assert target.read_text(encoding="utf-8") == "second é\n"
    assert leftovers(tmp_path) == []
    umask = os.umask(0o022)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_write_atomic_missing_directory(tmp_path):
    target = tmp_path / "missing" / "out.srt"
    with pytest.raises(OutputError) as info:
        write_atomic(target, "text")
    assert str(target) in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value.__cause__, OSError)
    assert not target.exists()


def test_write_atomic_permission_denied(tmp_path, monkeypatch):
    # what an unwritable directory gives, also when the tests run as root
    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(files.tempfile, "NamedTemporaryFile", denied)
    with pytest.raises(OutputError, match=r"cannot write .*out\.srt: Permission denied"):
        write_atomic(tmp_path / "out.srt", "text")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_write_atomic_failure_leaves_nothing(tmp_path, monkeypatch, failing):
    target = tmp_path / "out.vtt"
    target.write_text("old complete file")

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, failing, boom)
    with pytest.raises(OutputError, match=r"out\.vtt: No space left on device") as info:
        write_atomic(target, "new text")
    monkeypatch.undo()
    assert info.value.__cause__ is not None
    assert target.read_text() == "old complete file"
    assert leftovers(tmp_path) == []


def test_write_atomic_unencodable_text(tmp_path):
    with pytest.raises(OutputError):
        write_atomic(tmp_path / "out.txt", "bad \ud800 surrogate")
    assert list(tmp_path.iterdir()) == []


def test_write_outputs(transcript, tmp_path):
    paths = write_outputs(transcript, tmp_path / "sub" / "talk.v2", ["srt", "vtt", "json", "txt",
                                                                     "srt"])
    assert [p.name for p in paths] == ["talk.v2.srt", "talk.v2.vtt", "talk.v2.json",
                                       "talk.v2.txt"]
    assert paths[0].read_text(encoding="utf-8") == write_srt(transcript)
    assert leftovers(tmp_path / "sub") == []


def test_write_outputs_options(transcript, tmp_path):
    """OutputOptions reach every format; a bare CueOptions is the layout alone."""
    cues = CueOptions(max_line_chars=20, max_lines=1)
    options = OutputOptions(cues=cues, vtt_karaoke=True, json_cues=True)
    srt_path, vtt_path, json_path = write_outputs(transcript, tmp_path / "a", ["srt", "vtt", "json"],
                                                  options)
    assert srt_path.read_text(encoding="utf-8") == write_srt(transcript, cues)
    assert vtt_path.read_text(encoding="utf-8") == write_vtt(transcript, cues, karaoke=True)
    assert INLINE.search(vtt_path.read_text(encoding="utf-8"))
    data = json.loads(json_path.read_text(encoding="utf-8"))
    assert [c["text"] for c in data["cues"]] == [c.text for c in transcript_cues(transcript, cues)]
    plain = write_outputs(transcript, tmp_path / "b", ["vtt", "json"], cues)
    assert not INLINE.search(plain[0].read_text(encoding="utf-8"))
    assert "cues" not in json.loads(plain[1].read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match="vtt_karaoke"):
        OutputOptions(vtt_karaoke="yes")


def test_write_outputs_render_error_writes_nothing(transcript, tmp_path, monkeypatch):
    def broken(t, o):
        raise RuntimeError("render bug")

    monkeypatch.setitem(FORMATS, "vtt", FORMATS["vtt"]._replace(render=broken))
    with pytest.raises(OutputError, match="talk.vtt") as info:
        write_outputs(transcript, tmp_path / "talk", ["srt", "vtt"])
    assert isinstance(info.value.__cause__, RuntimeError)
    assert list(tmp_path.iterdir()) == []


def test_write_outputs_unknown_format(transcript, tmp_path):
    with pytest.raises(ValueError, match="'doc'"):
        write_outputs(transcript, tmp_path / "talk", ["srt", "doc"])
    assert list(tmp_path.iterdir()) == []


# --- right-to-left scripts -----------------------------------------------------------------

RTL = {  # real sentences, with the marks that tend to get lost: vowel points, ZWNJ, own digits
    "ar": "السَّلَامُ عَلَيْكُمْ، أهلاً بكم في نشرة الأخبار. كيف حالكم اليوم؟",
    "he": "שָׁלוֹם לכולם, ברוכים הבאים לתוכנית שלנו. מה שלומכם היום?",
    "fa": "می‌خواهم امروز ساعت ۱۰ به کتاب‌خانه بروم، تو هم می‌آیی؟",
}


@pytest.mark.parametrize("language", list(RTL))
def test_right_to_left_text_is_kept_intact(language, tmp_path):
    text = RTL[language]
    tokens = text.split(" ")
    words = tuple(Word(0.5 + 0.4 * i, 0.8 + 0.4 * i, " " + t, 0.9) for i, t in enumerate(tokens))
    t = Transcript(language=language, duration=10.0,
                   segments=(Segment(words[0].start, words[-1].end, "".join(w.text for w in words), words),))
    paths = write_outputs(t, tmp_path / "rtl", ["srt", "vtt", "json"], OutputOptions(vtt_karaoke=False))
    srt_text, vtt_text, json_text = (p.read_text(encoding="utf-8") for p in paths)
    subs = list(srt.parse(srt_text))
    cues = webvtt.from_string(vtt_text)
    for got in (" ".join(s.content.replace("\n", " ") for s in subs),
                " ".join(c.text.replace("\n", " ") for c in cues)):
        # the same characters in the same (logical) order: nothing reordered, normalised,
        # dropped (vowel points, U+200C) or added (no direction marks)
        assert got == text
    assert json.loads(json_text)["segments"][0]["text"].strip() == text
    karaoke = write_vtt(t, karaoke=True)
    assert INLINE.sub("", karaoke).count("\u200c") == text.count("\u200c")
    assert all(token in INLINE.sub("", karaoke) for token in tokens)


def test_a_translation_says_so_in_the_json():
    t = Transcript(language="de", duration=1.0, task="translate",
                   segments=(Segment(0.0, 0.5, " Hello.", (Word(0.0, 0.5, " Hello.", 0.9),)),))
    data = json.loads(write_json(t))
    assert (data["language"], data["task"]) == ("de", "translate")
    assert Transcript.from_dict(data).task == "translate"
    assert "task" not in json.loads(write_json(Transcript(language="de", duration=1.0)))


# --- punctuation as Whisper writes it ---------------------------------------------------------

SPACE_BEFORE_MARK = re.compile(r"\s[.,;:!?]")


def streamed_words() -> list[Word]:
    """Words as streaming commits them: a mark may come as a word of its own, with or without
    Whisper's space, even after a pause (so alone at the start of a segment)."""
    texts = [(" He", 0.0), (" could", 0.3), (" wait", 0.6), (" no", 0.9), (" longer", 1.2), (" .", 2.6),
             (" In", 4.0), (" 1813", 4.3), (" ,", 4.6), (" 8", 4.9), (" the", 5.2), (" Press", 5.5),
             (" Yard", 5.8), (" missiles", 6.1), (" ,", 6.4), (",", 6.5), (" soldiers", 6.7), ("!", 7.0)]
    return [Word(t, t + 0.25, text, 0.9) for text, t in texts]


def test_no_space_before_punctuation_in_any_format():
    from transcriber.engines.engine import SegmentGrouper
    from transcriber.transcript.transforms import assemble

    grouper = SegmentGrouper()
    segments = grouper.add(streamed_words()) + grouper.flush()
    assert any(s.text.strip() == "." for s in segments)  # the case: a mark alone after a pause
    transcript = assemble(segments, "en", 10.0, "tiny.en")
    for fmt, render in ((name, f.render) for name, f in FORMATS.items() if name != "rttm"):  # rttm: no text
        for options in (OutputOptions(), OutputOptions(vtt_karaoke=True, json_cues=True)):
            text = render(transcript, options)
            body = text if fmt != "json" else " ".join(
                [s["text"] for s in json.loads(text)["segments"]]
                + [w["word"] for s in json.loads(text)["segments"] for w in s["words"]]
                + [c["text"] for c in json.loads(text).get("cues", [])])
            assert not SPACE_BEFORE_MARK.search(re.sub(r"<[^>]*>", "", body)), (fmt, body)
            assert not re.search(r"^\s*[.,;:!?]+\s*$", body, re.M), (fmt, body)  # no line of marks alone
    txt = write_txt(transcript)
    assert "longer." in txt and "1813, 8" in txt and "missiles,, soldiers!" in txt


def test_french_keeps_its_space_before_high_marks():
    from transcriber.transcript.transforms import assemble

    words = (Word(0.0, 0.3, " Vraiment", 0.9), Word(0.3, 0.5, " ?", 0.9), Word(0.6, 0.8, " Oui", 0.9),
             Word(0.8, 0.9, ",", 0.9), Word(0.9, 1.2, " merci", 0.9), Word(1.2, 1.3, " .", 0.9))
    transcript = assemble([Segment(0.0, 1.3, "".join(w.text for w in words), words)], "fr", 2.0)
    assert write_txt(transcript) == "Vraiment ? Oui, merci.\n"


def _spoken(*words):
    ws = tuple(Word(a, b, t, 0.9) for a, b, t in words)
    return assemble([Segment(ws[0].start, ws[-1].end, "".join(w.text for w in ws), ws)], "en", ws[-1].end)


def test_highlighted_srt_is_a_cue_per_word_with_the_plain_text_over_gaps():
    from transcriber.subtitles.formats import write_srt
    t = _spoken((0.0, 0.4, " Hello"), (0.5, 0.9, " there"), (0.9, 1.3, " friend."))
    subs = list(srt.parse(write_srt(t, highlight_words=True)))
    assert [s.content for s in subs] == ["<u>Hello</u> there friend.", "Hello there friend.",
                                         "Hello <u>there</u> friend.", "Hello there <u>friend.</u>"]
    assert [s.start.total_seconds() for s in subs] == [0.0, 0.4, 0.5, 0.9]
    assert subs[-1].end.total_seconds() == 1.3


def test_ass_times_are_centiseconds_and_braces_stay_text():
    from transcriber.subtitles.formats import ass_timestamp, write_ass
    assert ass_timestamp(3725.456) == "1:02:05.46" and ass_timestamp(-1) == "0:00:00.00"
    t = _spoken((0.0, 0.5, " {not"), (0.5, 1.0, " a\\N tag}"))
    event = [line for line in write_ass(t).splitlines() if line.startswith("Dialogue:")][0]
    assert event.endswith(",,\\{not a\\\u2060N tag\\}")
    karaoke = [line for line in write_ass(t, karaoke=True).splitlines() if line.startswith("Dialogue:")][0]
    assert "{\\k50}\\{not {\\k50}a" in karaoke
    parsed = pysubs2.SSAFile.from_string(write_ass(t))
    assert [(e.start, e.end) for e in parsed.events] == [(0, 1000)] and "Default" in parsed.styles
