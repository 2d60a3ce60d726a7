"""The output formats and progress of issue 19 through the real CLI and the real tiny.en model:
``--highlight-words`` in SRT (the spoken word underlined) and ASS (karaoke tags), TSV and ASS
files, and progress on a pipe as plain lines (no ``\\r``, no cursor move)."""

from __future__ import annotations

import re

import pytest

from transcriber.app.cli import progress
from transcriber.app.cli.progress import Reporter

from tests.conftest import EXAMPLES, JFK, ffmpeg
from tests.app.test_jobs_e2e import transcribe

PRESS_YARD = EXAMPLES / "ljspeech press yard.flac"


@pytest.fixture(scope="module")
def piped_run(tmp_path_factory):
    """Both examples, srt + tsv + ass with --highlight-words, stderr a pipe."""
    tmp = tmp_path_factory.mktemp("formats")
    run = transcribe(JFK, PRESS_YARD, "-f", "srt,tsv,ass", "--highlight-words", "-o", tmp / "out",
                     db=tmp / "jobs.db")
    assert run.returncode == 0, run.stderr
    return tmp / "out", run


@pytest.mark.slow
def test_piped_progress_is_plain_lines(piped_run):
    _, run = piped_run
    assert "\r" not in run.stderr and "\x1b[" not in run.stderr  # no bar, no cursor move
    done = [line for line in run.stderr.splitlines() if line.startswith("done: ")]
    assert len(done) == 2, run.stderr


@pytest.mark.slow
def test_highlighted_srt_underlines_one_word_per_cue_in_time_order(piped_run):
    out, _ = piped_run
    blocks = (out / "jfk.srt").read_text().strip().split("\n\n")
    underlined = [re.findall(r"<u>(.*?)</u>", block) for block in blocks]
    assert all(len(u) <= 1 for u in underlined)
    words = [re.sub(r"[^\w ]", "", u[0]).lower() for u in underlined if u]  # the model may leave out commas
    assert " ".join(words).startswith("and so my fellow americans ask not")
    starts = [block.splitlines()[1].split(" --> ")[0] for block in blocks]
    assert starts == sorted(starts)


@pytest.mark.slow
def test_tsv_is_whisper_s_milliseconds_and_text(piped_run):
    out, _ = piped_run
    rows = (out / "jfk.tsv").read_text().splitlines()
    assert rows[0] == "start\tend\ttext"
    cells = [row.split("\t") for row in rows[1:]]
    assert cells and all(len(c) == 3 and c[0].isdigit() and c[1].isdigit() and int(c[0]) <= int(c[1])
                         for c in cells)
    assert "fellow Americans" in " ".join(c[2] for c in cells)
    assert int(cells[-1][1]) <= 11_100  # milliseconds of an 11 s file


@pytest.mark.slow
def test_ass_has_its_header_styles_and_centisecond_karaoke(piped_run, tmp_path):
    out, _ = piped_run
    text = (out / "ljspeech press yard.ass").read_text()
    assert text.startswith("[Script Info]\n") and "\n[V4+ Styles]\n" in text and "\n[Events]\n" in text
    events = [line for line in text.splitlines() if line.startswith("Dialogue: ")]
    assert events and all(re.match(r"Dialogue: 0,\d:\d\d:\d\d\.\d\d,\d:\d\d:\d\d\.\d\d,Default,", e) for e in events)
    assert all("{\\k" in e for e in events)
    # ffmpeg's own ASS reader takes it: its words come back as SubRip
    ffmpeg("-i", str(out / "jfk.ass"), str(tmp_path / "back.srt"))
    assert "fellow Americans" in (tmp_path / "back.srt").read_text()


def test_highlight_words_without_srt_or_ass_is_a_usage_error(tmp_path):
    run = transcribe(JFK, "-f", "vtt", "--highlight-words", "-o", tmp_path / "out", db=tmp_path / "jobs.db")
    assert run.returncode == 2 and "--highlight-words needs the srt or ass format" in run.stderr
    assert not (tmp_path / "jobs.db").exists()


def test_plain_progress_says_how_far_a_long_file_is_and_the_time_left_in_audio(monkeypatch, capsys):
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    reporter = Reporter(total_files=3, plain=True)
    first = reporter.start("long.flac", 600.0, 0.0)
    reporter.update(first, 150.0)
    lines = capsys.readouterr().err.splitlines()
    assert lines and lines[-1].startswith("long.flac: 2:30 of 10:00 (25%); batch: 0 of 3 files, audio 2:30")
    # left: 450 s of this file and two files of its mean length (600 s), at the rate so far
    elapsed_per_audio = (reporter.seconds_left() or 0) / (450 + 2 * 600)
    assert reporter.seconds_left() is not None and elapsed_per_audio > 0
    assert reporter.batch is None and first.bar is None  # no bar at all
