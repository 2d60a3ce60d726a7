"""Outputs belong to one input, and are written only where its job may write: a hand-made or
edited subtitle is never overwritten without --force, two inputs never write one file, a job row
edited to point elsewhere writes nothing there, --force replaces a dangling link, a full disk
leaves the outputs whole and the words kept.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

import transcriber.app.cli.main
import transcriber.app.run.engines
from transcriber.app.run.engines import EngineCache
from transcriber.app.run.enqueue import request_for
from transcriber.app.run.outputs import file_signature
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.sqlite_store import SqliteJobStore
from transcriber import Step

from ..conftest import JFK, PRESS_YARD
from ..app.test_jobs_runner import ScriptedEngine
from .helpers import intact, invoke, leftovers, lines, media_folder, no_traceback, use_engine


def test_stale_part_files_are_removed_by_the_next_run(tmp_path, media, monkeypatch):
    """What a kill between writing and renaming leaves (today's temporary names and the old
    ``.talk.srt.XXXXXXXX.part``) is removed once it is a minute old; a fresh one (another
    writer's, maybe) and files that are not ours stay."""
    from transcriber.subtitles.files import temp_prefix
    old = [tmp_path / ".talk.srt.ab12cd34.part", tmp_path / f"{temp_prefix('talk.json')}zz9_abcd.part"]
    fresh = tmp_path / f"{temp_prefix('talk.srt')}fresh123.part"
    other = tmp_path / ".download.part"
    for path in (*old, fresh, other):
        path.write_text("partial")
    for path in (*old, other):
        os.utime(path, (time.time() - 3600,) * 2)
    use_engine(monkeypatch, ScriptedEngine(n=4))
    assert invoke("--db", str(tmp_path / "jobs.db"), str(media), "-f", "srt,json", "-q").exit_code == 0
    assert [p.exists() for p in (*old, fresh, other)] == [False, False, True, True]


def test_a_full_disk_fails_the_outputs_whole_and_keeps_the_words(tmp_path, tiny_fs, monkeypatch):
    """Outputs into a full filesystem: one line naming the file and "No space left on device",
    exit 1, no partial output; the job is failed with that error, its words kept, so once there is
    room ``retry`` writes the outputs without decoding again."""
    mount, fill = tiny_fs
    media = tmp_path / "talk.flac"
    shutil.copy(PRESS_YARD, media)
    db = tmp_path / "jobs.db"
    engine = ScriptedEngine(n=4)
    use_engine(monkeypatch, engine)
    filler = fill()
    result = invoke("--db", str(db), str(media), "-o", str(mount), "-f", "srt,json", "-q")
    no_traceback(result)
    assert result.exit_code == 1
    assert lines(result) == [f"error: {media}: cannot write {mount}/talk.srt: No space left on device",
                             "0 done, 0 skipped, 1 failed"]
    assert sorted(p.name for p in mount.iterdir()) == ["filler"]
    row = intact(db, media)
    assert row["status"] == "failed" and row["words_complete"] == 1 and "No space left" in row["last_error"]

    filler.unlink()
    again = invoke("--db", str(db), "retry", "--failed", "-q")
    assert again.exit_code == 0, again.output
    assert len(engine.started_from) == 1  # the stored words, not a second decoding
    assert json.loads((mount / "talk.json").read_text())["segments"] and leftovers(mount) == []


def two_talks(tmp_path: Path) -> tuple[Path, Path]:
    """a/talk.flac and b/talk.flac: two recordings with one name."""
    a, b = tmp_path / "a" / "talk.flac", tmp_path / "b" / "talk.flac"
    for path, source in ((a, JFK), (b, PRESS_YARD)):
        path.parent.mkdir()
        shutil.copy(source, path)
    return a, b


@pytest.mark.parametrize("form", ["files", "folders"])
def test_two_inputs_that_would_write_one_output_are_a_usage_error(tmp_path, monkeypatch, form):
    """``a/talk.flac b/talk.flac -o out/`` (or ``a/ b/ -o out/``): both would write out/talk.srt.
    Refused before anything is queued (exit 2), naming both; nothing written."""
    a, b = two_talks(tmp_path)
    use_engine(monkeypatch, ScriptedEngine(n=4))
    db, out = tmp_path / "jobs.db", tmp_path / "out"
    paths = [str(a), str(b)] if form == "files" else [str(a.parent), str(b.parent)]
    result = invoke("--db", str(db), *paths, "-o", str(out))
    no_traceback(result)
    assert result.exit_code == 2
    assert f"{paths[0] if form == 'files' else a} and {paths[1] if form == 'files' else b} would both write " \
           f"{out / 'talk.srt'}" in result.stderr
    assert not out.exists()
    with SqliteJobStore(db) as store:
        assert store.jobs() == []


def test_separate_runs_into_one_folder_never_overwrite_another_files_transcript(tmp_path, monkeypatch):
    """a into out/, then b into out/: b is skipped, saying whose out/talk.json is; a rerun of a
    is a plain skip, and the file still holds a's words."""
    a, b = two_talks(tmp_path)
    db, out = tmp_path / "jobs.db", tmp_path / "out"
    use_engine(monkeypatch, ScriptedEngine(n=4))
    assert invoke("--db", str(db), str(a), "-o", str(out), "-f", "json", "-q").exit_code == 0
    words = (out / "talk.json").read_text()
    use_engine(monkeypatch, ScriptedEngine(n=6))
    second = invoke("--db", str(db), str(b), "-o", str(out), "-f", "json", "-q")
    assert second.exit_code == 0, second.output
    assert lines(second) == ["0 done, 1 skipped, 0 failed",
                             f"skipped: {b}: {out / 'talk.json'} holds the transcript of another file ({a}); "
                             f"--force replaces it"]
    assert (out / "talk.json").read_text() == words
    again = invoke("--db", str(db), str(a), "-o", str(out), "-f", "json", "-q")
    assert lines(again) == ["0 done, 1 skipped, 0 failed"]
    assert (out / "talk.json").read_text() == words


def test_a_hand_made_subtitle_survives_a_run(tmp_path, monkeypatch):
    """talk.srt made by hand beside talk.flac: the run skips the file with the reason, the
    subtitle untouched (a new job transcribes first: an srt of no record that holds what it
    would write is a lost database's, and adopted; this one does not); --force replaces it, and
    from then on it is the job's."""
    media = tmp_path / "talk.flac"
    shutil.copy(PRESS_YARD, media)
    mine = "1\n00:00:00,000 --> 00:00:01,000\nmy own words\n"
    (tmp_path / "talk.srt").write_text(mine)
    engine = ScriptedEngine(n=4)
    use_engine(monkeypatch, engine)
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), str(media), "-q")
    assert result.exit_code == 0, result.output
    assert lines(result) == ["0 done, 1 skipped, 0 failed",
                             f"skipped: {media}: {tmp_path / 'talk.srt'} exists and was not written by "
                             f"transcribe; --force replaces it"]
    assert (tmp_path / "talk.srt").read_text() == mine and engine.started_from == [None]
    forced = invoke("--db", str(db), str(media), "-q", "--force")
    assert lines(forced) == ["1 done, 0 skipped, 0 failed"]
    assert "w1" in (tmp_path / "talk.srt").read_text()
    assert lines(invoke("--db", str(db), str(media), "-q", "--max-line-chars", "30")) == [
        "1 done, 0 skipped, 0 failed"]  # its own output now: rewritten with the new layout


def test_an_output_edited_since_is_not_overwritten_by_new_settings(tmp_path, monkeypatch):
    """A done file whose srt the user corrected: a run with another layout (which would rewrite
    it) skips it, saying it changed; the correction stays."""
    media = tmp_path / "talk.flac"
    shutil.copy(PRESS_YARD, media)
    use_engine(monkeypatch, ScriptedEngine(n=4))
    db = tmp_path / "jobs.db"
    assert invoke("--db", str(db), str(media), "-q").exit_code == 0
    srt = tmp_path / "talk.srt"
    srt.write_text(srt.read_text().replace("w1", "corrected"))
    result = invoke("--db", str(db), str(media), "-q", "--max-line-chars", "30")
    assert lines(result) == ["0 done, 1 skipped, 0 failed",
                             f"skipped: {media}: {srt} was changed since transcribe wrote it; --force replaces it"]
    assert "corrected" in srt.read_text()


def test_an_input_that_would_be_its_own_output_is_kept(tmp_path, monkeypatch):
    """subtitles.srt named as the input: its srt output is itself, never written over."""
    path = tmp_path / "subtitles.srt"
    path.write_text("1\n00:00:00,000 --> 00:00:01,000\nhello\n")
    before = path.read_bytes()
    use_engine(monkeypatch, ScriptedEngine(n=4))
    result = invoke("--db", str(tmp_path / "jobs.db"), str(path), "-q")
    assert result.exit_code == 0 and "skipped: " in result.stderr
    assert path.read_bytes() == before


def test_run_and_watch_give_a_shared_stem_the_same_names(tmp_path):
    """talk.wav beside talk.flac: each keeps its extension (talk.wav.srt, talk.flac.srt), whether
    named alone, with the other, or found by watch (which asks request_for for one file)."""
    from transcriber.app.run.enqueue import request_for
    from transcriber.app.store.spec import JobSpec
    for name in ("talk.flac", "talk.wav"):
        shutil.copy(PRESS_YARD, tmp_path / name)
    spec = JobSpec()
    stems = {name: request_for(tmp_path / name, tmp_path, None, spec).output_stem for name in ("talk.flac", "talk.wav")}
    assert stems == {"talk.flac": str(tmp_path / "talk.flac"), "talk.wav": str(tmp_path / "talk.wav")}
    assert request_for(tmp_path / "talk.wav", None, None, spec).output_stem == stems["talk.wav"]
    (tmp_path / "talk.wav").unlink()
    assert request_for(tmp_path / "talk.flac", None, None, spec).output_stem == str(tmp_path / "talk")


def test_language_tagged_output_names(tmp_path, monkeypatch):
    """--tag-language: talk.en.srt and talk.en.json (the language the engine reported)."""
    media = tmp_path / "talk.flac"
    shutil.copy(PRESS_YARD, media)
    use_engine(monkeypatch, ScriptedEngine(n=4))
    result = invoke("--db", str(tmp_path / "jobs.db"), str(media), "-f", "srt,json", "--tag-language", "-q")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.glob("talk*")) == ["talk.en.json", "talk.en.srt", "talk.flac"]


class SpokenEngine(ScriptedEngine):
    """A ScriptedEngine whose words are in ``language`` (a translation's in English)."""

    def __init__(self, language: str, task: str):
        super().__init__(n=4)
        self.language = "en" if task == "translate" else language

    def steps(self, path, state):
        for step in super().steps(path, state):
            yield Step(step.words, step.segments, step.state, step.position, self.language)


def test_a_translation_leaves_the_russian_transcript_beside_it(tmp_path, monkeypatch):
    """x.ru.srt from a Russian run, then ``--task translate`` (both ``--tag-language``): the
    translation is x.en.srt, written beside it; the Russian subtitle is as it was."""
    import transcriber.app.run.engines
    from transcriber.app.run.engines import EngineCache

    media = tmp_path / "x.flac"
    shutil.copy(PRESS_YARD, media)
    monkeypatch.setattr(transcriber.app.run.engines, "EngineCache",
                        lambda: EngineCache(lambda spec: SpokenEngine("ru", spec.task)))
    db = tmp_path / "jobs.db"
    first = invoke("--db", str(db), str(media), "--model", "base", "--language", "ru", "--tag-language", "-q")
    assert first.exit_code == 0, first.output
    russian = (tmp_path / "x.ru.srt").read_text()
    second = invoke("--db", str(db), str(media), "--model", "base", "--task", "translate", "--tag-language", "-q")
    assert second.exit_code == 0, second.output
    assert lines(second) == ["1 done, 0 skipped, 0 failed"]
    assert sorted(p.name for p in tmp_path.glob("x.*")) == ["x.en.srt", "x.flac", "x.ru.srt"]
    assert (tmp_path / "x.ru.srt").read_text() == russian


def test_a_failed_one_off_run_elsewhere_leaves_the_done_job_as_it_was(tmp_path, monkeypatch):
    """Done; then once more into a folder that cannot be made (under a file): that run fails, but
    the done job (its status, its outputs) is untouched and a rerun of it is a skip."""
    media = tmp_path / "talk.flac"
    shutil.copy(PRESS_YARD, media)
    use_engine(monkeypatch, ScriptedEngine(n=4))
    db = tmp_path / "jobs.db"
    assert invoke("--db", str(db), str(media), "-f", "json", "-q").exit_code == 0
    words = media.with_suffix(".json").read_text()
    (tmp_path / "a-file").write_text("")
    failed = invoke("--db", str(db), str(media), "-f", "json", "-q", "-o", str(tmp_path / "a-file" / "out"))
    assert failed.exit_code == 1
    with SqliteJobStore(db) as store:
        first = store.jobs()[0]
        assert first.status == "done" and first.outputs == (str(media.with_suffix(".json")),)
    assert media.with_suffix(".json").read_text() == words
    assert lines(invoke("--db", str(db), str(media), "-f", "json", "-q")) == ["0 done, 1 skipped, 0 failed"]


def test_force_replaces_a_dangling_symbolic_link(tmp_path, monkeypatch):
    """talk.srt a symbolic link to nothing: refused without --force (it says to use it); with
    --force the link itself is replaced by the subtitle (nothing made where it pointed)."""
    (media,) = media_folder(tmp_path, 1)
    link = media.with_suffix(".srt")
    target = tmp_path / "nowhere" / "x.srt"
    link.symlink_to(target)
    use_engine(monkeypatch, ScriptedEngine(n=4))
    db = tmp_path / "jobs.db"
    refused = invoke("--db", str(db), str(media), "-q")
    assert lines(refused)[1].endswith("--force replaces it")
    forced = invoke("--db", str(db), str(media), "-q", "--force")
    assert forced.exit_code == 0, forced.output
    assert lines(forced) == ["1 done, 0 skipped, 0 failed"]
    assert not link.is_symlink() and "w1" in link.read_text() and not target.parent.exists()


def test_a_forged_job_row_writes_nothing_outside_its_output_folder(tmp_path, monkeypatch):
    """A failed job's ``output_stem`` edited to point outside its output folder, with an
    ``outputs`` row forged (size, mtime, SHA-256) for a file there: ``retry --failed`` creates
    nothing there and leaves the claimed file as it was; one line says why."""
    (media,) = media_folder(tmp_path, 1)
    use_engine(monkeypatch, ScriptedEngine(n=4))
    db = tmp_path / "jobs.db"
    assert invoke("--db", str(db), str(media), "-q").exit_code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / "victim.srt"
    victim.write_text("precious\n")
    sig = file_signature(victim)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE jobs SET status = 'failed', output_stem = ?", [str(elsewhere / "victim")])
    conn.execute("INSERT INTO outputs (path, job_id, size, mtime_ns, sha256, written_at) VALUES (?, 1, ?, ?, ?, 0)",
                 [str(victim), sig.size, sig.mtime_ns, sig.sha256])
    conn.commit()
    conn.close()
    result = invoke("--db", str(db), "retry", "--failed", "-q")
    no_traceback(result)
    assert result.exit_code == 1
    assert f"not written: {victim} is outside the job's output folder {media.parent}" in result.stderr
    assert victim.read_text() == "precious\n" and sorted(p.name for p in elsewhere.iterdir()) == ["victim.srt"]
