"""Issue 5 on real speech: subtitles people can read, from the long_en recordings.

The transcripts come from the session fixture ``oneshot_transcripts`` (every scored recording
transcribed once per session, shared with tests/engines/test_oneshot.py). Reading speed is measured on
the SRT file as written (whole milliseconds), the way a player or a subtitle checker sees it.
The CLI test runs ``transcribe`` in-process (Click's CliRunner) on a real SQLite file.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pysubs2
import pytest
import srt
import webvtt
from click.testing import CliRunner

from transcriber.app.cli.main import main
from transcriber.app.run.engines import EngineCache
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.sqlite_store import SqliteJobStore
from transcriber.subtitles.cues import CueOptions, transcript_cues
from transcriber.subtitles.files import write_outputs
from transcriber.subtitles.formats import OutputOptions

from tests.conftest import JFK, scored_entries

pytestmark = pytest.mark.slow

OPTIONS = CueOptions()  # the defaults: 42 characters, 2 lines, 17 characters per second
INLINE = re.compile(r"<\d{2,}:\d{2}:\d{2}\.\d{3}>")


def long_files() -> list[str]:
    files = [e["file"] for e in scored_entries(("long_en",))]
    assert len(files) >= 2
    return files


def spoken(transcript) -> list[str]:
    return [t for t in (" ".join(w.text.split()) for w in transcript.words) if t]


def flat(text: str) -> list[str]:
    return text.replace("\n", " ").split()


def vtt_times(captions) -> list[tuple[int, int]]:
    """(start, end) in milliseconds (webvtt-py's ``start_in_seconds`` is whole seconds)."""
    return [(c.start_time.in_milliseconds(), c.end_time.in_milliseconds()) for c in captions]


@pytest.fixture(scope="module")
def written(oneshot_transcripts, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """{file: (stem of srt/vtt/json with cues, stem of the karaoke vtt)}, by write_outputs."""
    folder = tmp_path_factory.mktemp("subtitles")
    stems = {}
    for i, name in enumerate(long_files()):
        plain, karaoke = folder / f"{i}-plain", folder / f"{i}-karaoke"
        write_outputs(oneshot_transcripts[name], plain, ["srt", "vtt", "json"],
                      OutputOptions(cues=OPTIONS, json_cues=True))
        write_outputs(oneshot_transcripts[name], karaoke, ["vtt"], OutputOptions(cues=OPTIONS, vtt_karaoke=True))
        stems[name] = (plain, karaoke)
    return stems


def file_of(stem: Path, ext: str) -> Path:
    return stem.with_name(stem.name + ext)


def test_long_cues_fit_lines_and_never_overlap(oneshot_transcripts):
    widest = 0
    for name in long_files():
        transcript = oneshot_transcripts[name]
        cues = transcript_cues(transcript, OPTIONS)
        assert cues, name
        assert [w for c in cues for w in c.words] == list(transcript.words)  # every word once, in order
        for cue in cues:
            assert 1 <= len(cue.lines) <= 2, cue.text
            assert all(0 < len(line) <= 42 for line in cue.lines), cue.text
            assert 0 <= cue.start < cue.end <= transcript.duration + 1e-9
            assert cue.end - cue.start <= OPTIONS.max_duration + 1e-9
        for a, b in zip(cues, cues[1:]):
            assert b.start - a.end >= OPTIONS.min_gap - 1e-9, (a.text, b.text)
        widest = max(widest, max(len(line) for c in cues for line in c.lines))
    print(f"longest line: {widest} characters")


def test_long_cues_reading_speed(written):
    total = fast = 0
    for name, (stem, _) in written.items():
        subs = list(srt.parse(file_of(stem, ".srt").read_text(encoding="utf-8")))
        cps = [len(s.content.replace("\n", " ")) / (s.end - s.start).total_seconds() for s in subs]
        over = [round(c, 2) for c in cps if c > 17]
        print(f"{name}: {len(subs)} cues, {1 - len(over) / len(subs):.1%} at <= 17 cps, over: {over}")
        total, fast = total + len(subs), fast + len(over)
        assert all(len(line) <= 42 for s in subs for line in s.content.split("\n"))
        assert all(len(s.content.split("\n")) <= 2 for s in subs)
    share = 1 - fast / total
    print(f"long_en: {total} cues, {share:.1%} at <= 17 characters per second")
    assert share >= 0.95


def test_long_outputs_parse_with_three_readers(oneshot_transcripts, written):
    for name, (stem, karaoke_stem) in written.items():
        expected = spoken(oneshot_transcripts[name])
        srt_path, vtt_path = file_of(stem, ".srt"), file_of(stem, ".vtt")

        subs = list(srt.parse(srt_path.read_text(encoding="utf-8")))
        assert [s.index for s in subs] == list(range(1, len(subs) + 1))
        assert flat(" ".join(s.content for s in subs)) == expected
        times = [(round(s.start.total_seconds() * 1000), round(s.end.total_seconds() * 1000)) for s in subs]
        assert all(a[1] <= b[0] for a, b in zip(times, times[1:]))

        captions = webvtt.read(str(vtt_path))
        assert flat(" ".join(html.unescape(c.text) for c in captions)) == expected
        assert vtt_times(captions) == times

        for path in (srt_path, vtt_path):
            events = [e for e in pysubs2.load(str(path), encoding="utf-8") if not e.is_comment]
            assert flat(" ".join(html.unescape(e.plaintext) for e in events)) == expected, path.name
            assert [(e.start, e.end) for e in events] == times, path.name

        karaoke = webvtt.read(str(file_of(karaoke_stem, ".vtt")))
        assert flat(" ".join(html.unescape(c.text) for c in karaoke)) == expected
        assert vtt_times(karaoke) == times
        assert sum(len(INLINE.findall(c.raw_text)) for c in karaoke) == len(expected) - len(karaoke)

        data = json.loads(file_of(stem, ".json").read_text(encoding="utf-8"))
        assert [c["text"] for c in data["cues"]] == [s.content for s in subs]
        assert [w["word"].strip() for c in data["cues"] for w in c["words"]] == expected


def test_cli_cue_flags_rewrite_outputs_without_decoding(tmp_path, monkeypatch):
    source = tmp_path / "jfk.flac"
    shutil.copy(JFK, source)
    db = tmp_path / "jobs.db"

    def transcribe(*flags: str):
        return CliRunner().invoke(main, ["--db", str(db), str(source), "-q", "-f", "srt,vtt,json", *flags])

    def outputs() -> tuple[list[srt.Subtitle], str, dict]:
        return (list(srt.parse((tmp_path / "jfk.srt").read_text(encoding="utf-8"))),
                (tmp_path / "jfk.vtt").read_text(encoding="utf-8"),
                json.loads((tmp_path / "jfk.json").read_text(encoding="utf-8")))

    def job():
        with SqliteJobStore(db) as store:
            return store.by_path(str(source.resolve()))

    first = transcribe()
    assert first.exit_code == 0, first.output
    subs, vtt, data = outputs()
    words = flat(" ".join(s.content for s in subs))
    assert len(words) >= 20
    lines = [line for s in subs for line in s.content.split("\n")]
    assert max(map(len, lines)) > 20 and all(len(line) <= 42 for line in lines)
    assert not INLINE.search(vtt) and "cues" not in data
    fingerprint = job().fingerprint

    # the layout flags change the outputs only: rewritten from the stored words, no model
    def no_decoding(self, spec):
        raise AssertionError("the words were decoded again")

    monkeypatch.setattr(EngineCache, "get", no_decoding)
    second = transcribe("--max-line-chars", "20", "--max-lines", "3", "--max-cps", "15",
                        "--vtt-karaoke", "--json-cues")
    assert second.exit_code == 0, second.output
    assert "1 done, 0 skipped, 0 failed" in second.stderr
    subs, vtt, data = outputs()
    assert flat(" ".join(s.content for s in subs)) == words
    assert all(len(line) <= 20 for s in subs for line in s.content.split("\n"))
    assert all(len(s.content.split("\n")) <= 3 for s in subs)
    assert INLINE.search(vtt)
    assert flat(" ".join(html.unescape(c.text) for c in webvtt.from_string(vtt).captions)) == words
    assert [c["text"] for c in data["cues"]] == [s.content for s in subs]
    stored = job()
    assert stored.fingerprint == fingerprint
    assert (stored.spec["max_line_chars"], stored.spec["vtt_karaoke"], stored.spec["json_cues"]) == (20, True, True)
    assert JobSpec.from_dict(stored.spec).fingerprint() == JobSpec().fingerprint()

    again = transcribe("--max-line-chars", "20", "--max-lines", "3", "--max-cps", "15",
                       "--vtt-karaoke", "--json-cues")
    assert again.exit_code == 0 and "0 done, 1 skipped" in again.stderr

    for flags, message in [(["--max-line-chars", "0"], "--max-line-chars must be an integer >= 1"),
                           (["--max-cps", "-3"], "--max-cps must be > 0"),
                           (["--max-lines", "two"], "'--max-lines'"),
                           (["--min-duration", "9"], "--min-duration (9.0) must not exceed --max-duration (7.0)")]:
        bad = transcribe(*flags)
        assert bad.exit_code == 2, flags
        assert message in bad.output and "Traceback" not in bad.output, bad.output
        assert isinstance(bad.exception, SystemExit)
    assert job().spec == stored.spec  # a refused command changes nothing
