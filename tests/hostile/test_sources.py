"""The inputs a careless user or an attacker can name: odd file names (shell and SQL-like,
escapes, newlines), names that are not UTF-8, symbolic link loops and dangling links, files that
are not media (a pickle named .mp3...), folders, FIFOs, sockets and devices, files we may not
read, and files rewritten or deleted while their job runs.

Each case: the exit status, one line naming the file and the cause, no partial output, the job
database intact.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from transcriber.app.run.enqueue import request_for
from transcriber.app.cli.progress import printable
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.sqlite_store import SqliteJobStore
from transcriber import Segment, Step, Word

from ..conftest import JFK, PRESS_YARD, damaged_flac, ffmpeg
from ..app.test_jobs_runner import ScriptedEngine
from .helpers import cli, intact, invoke, leftovers, lines, no_traceback, use_engine, words_of


def test_a_file_rewritten_mid_run_fails_and_is_redone_from_scratch(tmp_path, media, monkeypatch):
    db = tmp_path / "jobs.db"
    args = ("--db", str(db), str(media), "-f", "json", "--checkpoint-seconds", "1", "-q")

    def rewrite_at_6(i):  # after the first checkpoint (1.0 s), before the second
        if i == 6:
            shutil.copy(PRESS_YARD, media)

    use_engine(monkeypatch, ScriptedEngine(rewrite_at_6))
    first = invoke(*args)
    no_traceback(first)
    assert first.exit_code == 1
    errors = [line for line in first.stderr.splitlines() if "changed" in line]
    assert errors == [f"error: {media.resolve()}: file changed while being transcribed"]
    assert "0 done, 0 skipped, 1 failed" in first.stderr
    assert not media.with_suffix(".json").exists()  # no output spliced from two recordings
    row = intact(db, media)
    assert row["status"] == "failed" and "file changed" in row["last_error"]

    second_engine = NewRecording()
    use_engine(monkeypatch, second_engine)
    second = invoke(*args)
    assert second.exit_code == 0, second.output
    assert second_engine.started_from == [None]  # from scratch, not from the old checkpoint
    assert words_of(media) == [" Eight.", " The", " press", " yard."]  # none of the old words
    row = intact(db, media)
    assert row["status"] == "done" and row["errors"] == 0


class NewRecording(ScriptedEngine):
    """What the rewritten file says, one word a step (PRESS_YARD: 1.6 s)."""

    def steps(self, path, state):
        self.started_from.append(state)
        for i, text in enumerate([" Eight.", " The", " press", " yard."][state["i"] if state else 0:]):
            word = Word(i * 0.4, i * 0.4 + 0.3, text, 0.9)
            yield Step((word,), (Segment(word.start, word.end, text, (word,)),), {"i": i + 1}, (i + 1) * 0.4, "en")


def test_a_file_deleted_mid_run_finishes_from_what_was_opened(tmp_path, media, monkeypatch):
    db = tmp_path / "jobs.db"

    def delete_at_6(i):
        if i == 6:
            media.unlink()

    use_engine(monkeypatch, ScriptedEngine(delete_at_6))
    result = invoke("--db", str(db), str(media), "-f", "json", "--checkpoint-seconds", "1", "-q")
    assert result.exit_code == 0, result.output
    assert words_of(media) == [f" w{i}" for i in range(1, 11)]
    assert intact(db, media)["status"] == "done"


def test_no_media_names_the_folder(tmp_path):
    folder = tmp_path / "nothing here"
    folder.mkdir()
    (folder / "notes.txt").write_text("hi")
    result = invoke("--db", str(tmp_path / "jobs.db"), str(folder))
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"error: no media files found in {folder}"]


@pytest.mark.parametrize("mode", ["oneshot", "stream"])
def test_ffmpeg_errors_on_a_file_it_decodes_are_kept_on_the_job_as_a_warning(tmp_path, monkeypatch, mode):
    """20 KB of garbage in a FLAC: transcribed (done, exit 0), and ffmpeg's complaint is told in
    the run's line for the file, by ``status`` and ``status --json``: a count and the first
    message, not pages of stderr. The real model: the warning comes from decoding the audio."""
    monkeypatch.delenv("TRANSCRIBER_DB", raising=False)
    media = damaged_flac(tmp_path / "damaged.flac")
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), str(media), "--mode", mode, "-f", "json")
    assert result.exit_code == 0, result.output
    done = [line[line.index("done: "):] for line in result.stderr.splitlines() if "done: " in line]
    warning = re.search(r"\(warning: (ffmpeg reported \d+ error messages? while decoding, the first: [^()]+)\)$",
                        done[0])
    assert len(done) == 1 and warning, result.stderr
    assert len(warning.group(1)) < 200
    assert words_of(media)  # the speech that survived is there

    row = intact(db, media)
    assert row["status"] == "done" and json.loads(row["warnings"]) == [warning.group(1)]
    table = invoke("--db", str(db), "status").stdout.splitlines()
    assert table[0].split()[-1] == "NOTE" and table[1].endswith(f"warning: {warning.group(1)}")
    (job,) = json.loads(invoke("--db", str(db), "status", "--json").stdout)
    assert job["warnings"] == [warning.group(1)]

    if mode == "oneshot":  # (the store's part, the same for both modes: once is enough)
        shutil.copy(PRESS_YARD, media)  # repaired: redone from scratch, its old warning dropped
        assert invoke("--db", str(db), str(media), "--mode", mode, "-f", "json", "-q").exit_code == 0
        assert intact(db, media)["warnings"] is None
        assert json.loads(invoke("--db", str(db), "status", "--json").stdout)[0]["warnings"] == []


@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_a_fifo_socket_or_device_named_is_refused_at_once(tmp_path, kind):
    """Never opened (a FIFO nobody writes would block the content key's open() forever): one
    line naming it, exit 1, within seconds."""
    if kind == "fifo":
        path = tmp_path / "pipe.wav"
        os.mkfifo(path)
        what = "a named pipe (FIFO)"
    elif kind == "socket":
        path = tmp_path / "sock.wav"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        what = "a socket"
    else:
        path, what = Path("/dev/zero"), "a character device"
    result = cli("--db", str(tmp_path / "jobs.db"), str(path), "-q", timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        "0 done, 0 skipped, 1 failed",
        f"failed: {path}: {what}, not a file: refused (only regular files are transcribed)"]


def test_a_queued_file_deleted_since_is_gone_in_every_view(tmp_path, media):
    """Queued, then deleted: ``gone`` in the table, the count line and --json; ``-s gone`` finds it."""
    db = tmp_path / "jobs.db"
    with SqliteJobStore(db) as store:
        store.enqueue(request_for(media, None, None, JobSpec()))
    media.unlink()
    table = invoke("status", "--db", str(db)).stdout.splitlines()
    assert table[1].split()[1] == "gone" and table[-1] == "1 gone"
    (job,) = json.loads(invoke("status", "--db", str(db), "--json").stdout)
    assert job["status"] == "gone" and job["stalled"] is False
    assert invoke("status", "--db", str(db), "-s", "gone").stdout.splitlines()[-1] == "1 gone"


def test_a_name_of_241_bytes_and_more_gets_its_outputs(tmp_path, monkeypatch):
    """A 250-byte name (255 is the usual limit): its outputs (249 bytes) fit, and so must the
    atomic writer's temporary names."""
    media = tmp_path / ("x" * 245 + ".flac")
    shutil.copy(PRESS_YARD, media)
    use_engine(monkeypatch, ScriptedEngine(n=4))
    result = invoke("--db", str(tmp_path / "jobs.db"), str(media), "-f", "srt,json", "-q")
    assert result.exit_code == 0, result.output
    assert sorted(p.suffix for p in tmp_path.glob("x*")) == [".flac", ".json", ".srt"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


NAMES = ["with space.flac", "new\nline.flac", "tab\tand \x1b[31mescape.flac", "it's \"quoted\".flac",
         "$(touch pwned).flac", "`touch pwned`.flac", "-dash.flac", "; rm -rf x #.flac",
         "star*?[ab].flac", "ünïcødé 日本.flac"]


@pytest.mark.parametrize("name", NAMES, ids=repr)
def test_odd_file_names_are_transcribed_like_any_other(tmp_path, monkeypatch, name):
    """Named on the command line (relative, after ``--``, from the folder it is in): transcribed
    by the real model, outputs beside it, one line telling so (a newline in the name escaped),
    and no shell ever ran what the name holds."""
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(PRESS_YARD, folder / name)
    monkeypatch.chdir(folder)
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), "--mode", "oneshot", "-f", "srt,json", "--", name)
    no_traceback(result)
    assert result.exit_code == 0, result.output
    stem = folder / Path(name).stem
    outputs = [stem.with_name(stem.name + ext) for ext in (".srt", ".json")]
    assert lines(result) == [f"done: {printable(str(folder / name))} -> {printable(', '.join(map(str, outputs)))}",
                             "1 done, 0 skipped, 0 failed"]
    words = [w["word"] for s in json.loads(outputs[1].read_text())["segments"] for w in s["words"]]
    assert "press" in "".join(words).lower()
    assert sorted(p.name for p in folder.iterdir()) == sorted([name] + [p.name for p in outputs])
    assert not (folder / "pwned").exists() and not (tmp_path / "pwned").exists()
    assert intact(db, folder / name)["status"] == "done"


def test_a_name_that_is_not_utf8_is_refused_with_a_reason(tmp_path):
    """It cannot be stored in the database (UTF-8 text): one line with its bytes escaped, exit 1;
    the other file of the folder is done."""
    folder = tmp_path / "in"
    folder.mkdir()
    bad = folder / os.fsdecode(b"caf\xe9 \xff.flac")
    shutil.copy(PRESS_YARD, bad)
    shutil.copy(PRESS_YARD, folder / "good.flac")
    db = tmp_path / "jobs.db"
    engine = ScriptedEngine(n=4)
    for args in ([str(bad)], [str(folder)]):
        with pytest.MonkeyPatch.context() as m:
            use_engine(m, engine)
            result = invoke("--db", str(db), *args, "-f", "json", "-q")
        no_traceback(result)
        assert result.exit_code == 1
        assert lines(result)[-1] == (f"failed: {folder}/caf\\xe9 \\xff.flac: the file name is not valid UTF-8; "
                                     "rename it")
        assert len(lines(result)) == 2
    assert (folder / "good.json").exists() and not list(folder.glob("caf*.json"))
    with SqliteJobStore(db) as store:
        assert [Path(j.path).name for j in store.jobs()] == ["good.flac"]


def test_symlink_loops_and_dangling_links_in_a_folder(tmp_path, monkeypatch):
    """A link to itself, two links to each other, a link to a file that is gone: each named with
    its cause, exit 1; links to folders (``.``, ``..``) are not followed, so the walk ends and the
    good file is done once; a folder named like media is a folder."""
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(PRESS_YARD, folder / "good.flac")
    (folder / "self.flac").symlink_to("self.flac")
    (folder / "a.mp3").symlink_to("b.mp3")
    (folder / "b.mp3").symlink_to("a.mp3")
    (folder / "dangling.wav").symlink_to("gone.wav")
    (folder / "notes.txt").symlink_to("gone.txt")  # not a media name: not ours to report
    (folder / "here").symlink_to(".")
    (folder / "up").symlink_to("..")
    (folder / "fake.mp3").mkdir()
    engine = ScriptedEngine(n=4)
    use_engine(monkeypatch, engine)
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), str(folder), "-f", "json", "-q")
    no_traceback(result)
    assert result.exit_code == 1
    loop = "Too many levels of symbolic links"
    assert lines(result) == [
        "1 done, 0 skipped, 4 failed",
        f"failed: {folder}/a.mp3: symbolic link to b.mp3: {loop}",
        f"failed: {folder}/b.mp3: symbolic link to a.mp3: {loop}",
        f"failed: {folder}/dangling.wav: symbolic link to gone.wav: No such file or directory",
        f"failed: {folder}/self.flac: symbolic link to self.flac: {loop}"]
    assert len(engine.started_from) == 1 and (folder / "good.json").exists()
    assert intact(db, folder / "good.flac")["status"] == "done"
    named = invoke("--db", str(db), str(folder / "dangling.wav"), "-q")  # named: the same line
    assert named.exit_code == 1 and lines(named)[-1] == (
        f"failed: {folder}/dangling.wav: symbolic link to gone.wav: No such file or directory")


def not_media(folder: Path) -> dict[str, Path]:
    # (subtitles.vtt: a subtitles.srt given as the input would be its own output, which is kept:
    # see test_an_input_that_would_be_its_own_output_is_kept)
    made = {name: folder / name for name in ("empty.flac", "notes.txt", "cover.png", "subtitles.vtt",
                                             "pickle.mp3", "cut.flac")}
    made["empty.flac"].write_bytes(b"")
    made["notes.txt"].write_text("shopping list\n" * 100)
    ffmpeg("-f", "lavfi", "-i", "color=c=red:s=32x32:d=1", "-frames:v", "1", str(made["cover.png"]))
    made["subtitles.vtt"].write_text("WEBVTT\n\n00:00:00.000 --> 00:00:01.000\nhello\n")
    made["pickle.mp3"].write_bytes(pickle.dumps({"not": "audio"}))
    made["cut.flac"].write_bytes(JFK.read_bytes()[:50_000])
    return made


@pytest.mark.parametrize("name, cause", [
    ("empty.flac", "file is empty"),
    ("notes.txt", "no audio stream"),  # ffmpeg reads text as ANSI art: a video
    ("cover.png", "no audio stream"),
    ("subtitles.vtt", "no audio stream"),
    # ffmpeg 9.0's words, and Debian 12's 5.1's
    ("pickle.mp3", ("Invalid data found when processing input", "Failed to read frame size")),
    ("cut.flac", "truncated: decoded"),
])
def test_a_file_that_is_not_media_named_explicitly_fails_with_its_cause(tmp_path, name, cause):
    """Named on the command line, whatever its extension, a file is tried: ffmpeg's verdict in
    one line naming it, exit 1, the job failed with that error (not retried), no outputs. The
    real model, for the cut file is only found out while decoding."""
    folder = tmp_path / "in"
    folder.mkdir()
    path = not_media(folder)[name]
    before = sorted(p.name for p in folder.iterdir())
    db = tmp_path / "jobs.db"
    result = invoke("--db", str(db), str(path), "--mode", "oneshot", "-f", "srt,json", "-q")
    no_traceback(result)
    assert result.exit_code == 1
    (error, summary) = lines(result)
    cause = next((c for c in ((cause,) if isinstance(cause, str) else cause) if c in error), None)
    assert error.startswith(f"error: cannot read audio from {str(path)!r}: ") and cause, error
    assert summary == "0 done, 0 skipped, 1 failed"
    row = intact(db, path)
    assert row["status"] == "failed" and cause in row["last_error"] and row["runs"] == 1
    assert sorted(p.name for p in folder.iterdir()) == before and leftovers(folder) == []


def test_a_folder_named_like_media_is_a_folder(tmp_path):
    folder = tmp_path / "talk.mp3"
    folder.mkdir()
    result = invoke("--db", str(tmp_path / "jobs.db"), str(folder))
    assert result.exit_code == 1 and lines(result) == [f"error: no media files found in {folder}"]


@pytest.mark.parametrize("where", ["named", "in a folder"])
def test_a_file_without_read_permission(tmp_path, where):
    """Root reads any file whatever its permissions: as root, the command runs without the
    capabilities that let it (setpriv drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH), so the
    file's mode counts as it would for anyone else. A process of its own, so the capabilities
    stay dropped."""
    secret = tmp_path / "secret.flac"
    shutil.copy(PRESS_YARD, secret)
    os.chmod(secret, 0)
    command = [sys.executable, "-m", "transcriber.app", str(secret if where == "named" else tmp_path), "-q"]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("as root, a file's permissions are ignored unless setpriv (util-linux) drops the capabilities")
        caps = "-dac_override,-dac_read_search"
        command = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *command]
    env = {k: v for k, v in os.environ.items() if k != "TRANSCRIBER_DEBUG"}
    env.update(TRANSCRIBER_DB=str(tmp_path / "jobs.db"), TRANSCRIBER_BLAS="none")  # no model: no BLAS
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        "0 done, 0 skipped, 1 failed", f"failed: cannot read {str(secret)!r}: Permission denied"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("jobs.db")) == ["secret.flac"]
