"""The job database in hostile or careless hands: a SQLite file that is not ours (tables,
application_id, user_version) refused untouched; a database locked by another process; its disk
full; its folder unusable; the file deleted, truncated or replaced while a run writes to it (the
run stops within one checkpoint, one line, exit 1, nothing written into the new file); and what
a lost database's run finished, adopted by the next one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from transcriber.app.run.enqueue import request_for
from transcriber.app.store.migrations import APPLICATION_ID
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.sqlite_store import SqliteJobStore

from ..conftest import PRESS_YARD
from ..app.test_jobs_runner import ScriptedEngine
from .helpers import cli, intact, invoke, lines, no_traceback, read_only, use_engine, words_of


def locked_line(db: Path, waited: str) -> str:
    """The one line a command prints when the job database stayed locked too long."""
    return f"error: the job database {db} is locked by another process (waited {waited} s; see --db-timeout)"


@pytest.fixture
def locked(tmp_path):
    """A job database (created) and a function that locks it from another connection."""
    db = tmp_path / "jobs.db"
    SqliteJobStore(db).close()
    conns = []

    def lock():
        conn = sqlite3.connect(db, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        conns.append(conn)

    def unlock():
        while conns:
            conns.pop().rollback()

    yield db, lock, unlock
    unlock()


# (``status`` only reads: in WAL mode a writer's lock never blocks it)
@pytest.mark.parametrize("command", [["run", "{media}"], ["run", "--force", "{media}"], ["retry", "{media}"]])
def test_a_database_locked_before_the_run_is_one_line_and_exit_1(locked, media, command):
    db, lock, unlock = locked
    with SqliteJobStore(db) as store:  # a job to retry
        store.enqueue(request_for(media, None, None, JobSpec()))
    lock()
    args = [a.replace("{media}", str(media)) for a in command]
    result = invoke(*args, "--db", str(db), "--db-timeout", "0.3")
    no_traceback(result)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [locked_line(db, "0.3")]
    assert not media.with_suffix(".srt").exists()
    unlock()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()


def test_a_long_wait_is_told_once_and_the_env_var_sets_the_timeout(locked, media, monkeypatch):
    db, lock, unlock = locked
    lock()
    monkeypatch.setenv("TRANSCRIBER_DB_TIMEOUT", "3.4")
    result = invoke("--db", str(db), str(media))
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"waiting for the job database {db}, locked by another process", locked_line(db, "3.4")]


def test_a_database_locked_mid_run_stops_with_one_line_and_resumes(locked, media, monkeypatch):
    db, lock, unlock = locked

    def lock_at_6(i):
        if i == 6:
            lock()

    engine = ScriptedEngine(lock_at_6)
    use_engine(monkeypatch, engine)
    args = ("--db", str(db), "--db-timeout", "0.3", str(media), "-f", "json", "--checkpoint-seconds", "1", "-q")
    result = invoke(*args)
    no_traceback(result)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [locked_line(db, "0.3")]
    assert not media.with_suffix(".json").exists()
    unlock()
    row = intact(db, media)
    assert row["status"] == "running"  # its runner is gone: resumed from its checkpoint next time
    with SqliteJobStore(db) as store:  # as the next process sees it (here, the runner's pid still lives)
        store.expire_dead_leases(lambda owner: True)
    again = ScriptedEngine()
    use_engine(monkeypatch, again)
    assert invoke(*args).exit_code == 0
    assert again.started_from == [{"i": 4}]
    assert words_of(media) == [f" w{i}" for i in range(1, 11)]
    assert intact(db, media)["status"] == "done"


@pytest.mark.parametrize("fault", ["under a file", "read-only"])
def test_an_unusable_database_folder_is_one_line_saying_what_to_do(tmp_path, media, fault):
    """--db in a folder that cannot be made (under a file) or written: one line naming the
    database and its folder and what to do, exit 1, nothing written."""
    folder = tmp_path / "a-file" / "db" if fault == "under a file" else tmp_path / "db"
    if fault == "under a file":
        folder.parent.write_text("")
    else:
        folder.mkdir()
    db = folder / "jobs.db"
    with read_only(folder) if fault == "read-only" else contextlib.nullcontext():
        result = cli("--db", str(db), str(media), "-q")
    why = "Not a directory" if fault == "under a file" else "its folder is read-only"
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        f"error: cannot open job database {db} ({why}): make its folder {folder} writable, or put it elsewhere "
        f"with --db or $TRANSCRIBER_DB"]
    assert not db.exists() and not media.with_suffix(".srt").exists()


def newer_database(db: Path, media: Path) -> None:
    """A database a later version migrated: a migration this one does not know, a new column."""
    with SqliteJobStore(db) as store:
        from transcriber.app.run.enqueue import request_for
        from transcriber.app.store.spec import JobSpec

        store.enqueue(request_for(media, None, None, JobSpec()))
        store.db.execute("ALTER TABLE jobs ADD COLUMN m099_thing TEXT")
        store.db["_sqlite_migrations"].insert({"migration_set": "transcriber.jobs", "name": "m099_future",
                                               "applied_at": "2099-01-01 00:00:00"})


def other_programs_database(db: Path, media: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, command TEXT, cron TEXT)")
    conn.execute("INSERT INTO jobs (command, cron) VALUES ('backup', '0 3 * * *')")
    conn.commit()
    conn.close()


def garbage(db: Path, media: Path) -> None:
    db.write_bytes(b"this is not a database\n" * 200)


@pytest.mark.parametrize("make, message", [
    (garbage, "error: cannot open job database {db}: file is not a database"),
    (newer_database, "error: the job database {db} was written by a newer version of transcriber "
                     "(migration m099_future); upgrade transcriber, or use another --db"),
    (other_programs_database, "error: the job database {db} is not one of transcriber's: it holds other tables "
                              "(jobs); use another --db"),
], ids=["garbage", "newer version", "another program's"])
@pytest.mark.parametrize("command", ["run", "status"])
def test_a_database_that_is_not_ours_is_refused_untouched(tmp_path, make, message, command):
    media = tmp_path / "talk.flac"
    shutil.copy(PRESS_YARD, media)
    db = tmp_path / "jobs.db"
    make(db, media)
    before = db.read_bytes()
    result = invoke("--db", str(db), *([str(media)] if command == "run" else ["status"]))
    no_traceback(result)
    assert result.exit_code == 1
    assert lines(result) == [message.format(db=db)]
    assert db.read_bytes() == before and not media.with_suffix(".srt").exists()


def test_a_folder_as_the_database_is_a_usage_error(tmp_path):
    result = invoke("--db", str(tmp_path), "status")
    no_traceback(result)
    assert result.exit_code == 2 and "is a directory" in result.output


@pytest.mark.parametrize("when", ["before the run", "mid-run"])
def test_a_database_on_a_full_disk_stops_with_one_line(tmp_path, tiny_fs, monkeypatch, when):
    """The job database's disk fills up before the run, or between two checkpoints: one line
    naming the database, exit 1, no output; once there is room the job resumes and is done."""
    mount, fill = tiny_fs
    media = tmp_path / "talk.flac"
    shutil.copy(PRESS_YARD, media)
    db = mount / "jobs.db"
    SqliteJobStore(db).close()
    filled = []

    def fill_at_3(i):
        if i == 3 and not filled:  # once: the rerun resumes before step 3
            filled.append(fill())

    use_engine(monkeypatch, ScriptedEngine(fill_at_3 if when == "mid-run" else None, n=6))
    if when == "before the run":
        filled.append(fill())
    args = ("--db", str(db), str(media), "-f", "json", "--checkpoint-seconds", "0.5", "-q")
    result = invoke(*args)
    no_traceback(result)
    assert result.exit_code == 1
    (line,) = lines(result)  # SQLite's words depend on which write hit the wall
    assert re.fullmatch(rf"error: (cannot open job database|the job database) {re.escape(str(db))}: "
                        r"(database or disk is full|disk I/O error \(its disk is full\))", line), line
    assert not media.with_suffix(".json").exists()
    filled[0].unlink()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with SqliteJobStore(db) as store:  # as the next process sees it (here, the runner's pid still lives)
        store.expire_dead_leases(lambda owner: True)
    again = invoke(*args)
    assert again.exit_code == 0, again.output
    assert [w["word"] for s in json.loads(media.with_suffix(".json").read_text())["segments"]
            for w in s["words"]] == [f" w{i}" for i in range(1, 7)]


def two_files(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a.flac", "b.flac"):
        shutil.copy(PRESS_YARD, folder / name)
    return folder / "a.flac", folder / "b.flac"


def another_programs_db(path: Path) -> bytes:
    """A SQLite file of another program (its own table, a row), closed; its bytes."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    conn.execute("INSERT INTO notes (text) VALUES ('mine')")
    conn.commit()
    conn.close()
    return path.read_bytes()


def tables(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    finally:
        conn.close()


def replaced(db: Path, other: Path) -> None:
    os.replace(other, db)


def deleted(db: Path, other: Path) -> None:
    db.unlink()


def truncated(db: Path, other: Path) -> None:
    os.truncate(db, 0)


@pytest.mark.parametrize("touch", [replaced, deleted, truncated], ids=lambda f: f.__name__)
def test_the_database_touched_mid_run_stops_the_run(tmp_path, monkeypatch, touch):
    """The job database replaced by another program's SQLite file (``mv other.db jobs.db``),
    deleted or truncated while the first file decodes: the run stops at its next commit with
    one line naming the database and what happened, exit 1; the second file is never started;
    nothing of ours is written into the replacing file (byte for byte, and no write-ahead log
    of ours left for its next reader to replay)."""
    a, b = two_files(tmp_path)
    db, other = tmp_path / "jobs.db", tmp_path / "other.db"
    theirs = another_programs_db(other)
    engine = ScriptedEngine(on_step=lambda i: i == 3 and touch(db, other), n=6)
    use_engine(monkeypatch, engine)
    result = invoke("--db", str(db), str(a), str(b), "-q")
    no_traceback(result)
    what = {"replaced": "replaced by another file", "deleted": "deleted", "truncated": "truncated"}[touch.__name__]
    assert result.exit_code == 1, result.output
    assert lines(result)[-1].startswith(f"error: the job database {db} was {what} while this command ran: stopped")
    assert len(engine.started_from) == 1  # b was never started
    if touch is replaced:
        assert db.read_bytes() == theirs
        assert tables(db) == ["notes"]
    elif touch is deleted:
        assert not db.exists()
    else:
        assert db.stat().st_size == 0
    use_engine(monkeypatch, ScriptedEngine(n=6))
    again = invoke("--db", str(db), str(a), str(b), "-q")  # a new database (or, replaced, refused)
    if touch is replaced:
        assert again.exit_code == 1 and "is not one of transcriber's" in again.stderr
        assert db.read_bytes() == theirs
    else:
        assert again.exit_code == 0, again.output
        assert lines(again) == ["2 done, 0 skipped, 0 failed"]


def test_a_new_database_adopts_outputs_the_job_would_write(tmp_path, monkeypatch):
    """The database lost after a run wrote a.srt: the next run, on a new database, transcribes
    a again, finds a.srt holding exactly what it would write and takes it as its own (no
    "not written by transcribe"); a hand-made b.srt is still refused, untouched."""
    a, b = two_files(tmp_path)
    db = tmp_path / "jobs.db"
    use_engine(monkeypatch, ScriptedEngine(n=4))
    assert invoke("--db", str(db), str(a), "-q").exit_code == 0
    written = a.with_suffix(".srt").read_text()
    db.unlink()
    mine = "1\n00:00:00,000 --> 00:00:01,000\nmy own words\n"
    b.with_suffix(".srt").write_text(mine)
    result = invoke("--db", str(db), str(a), str(b), "-q")
    assert result.exit_code == 0, result.output
    assert lines(result) == ["1 done, 1 skipped, 0 failed",
                             f"skipped: {b}: {b.with_suffix('.srt')} exists and was not written by transcribe; "
                             f"--force replaces it"]
    assert a.with_suffix(".srt").read_text() == written and b.with_suffix(".srt").read_text() == mine
    again = invoke("--db", str(db), str(a), str(b), "-q")
    assert lines(again)[0] == "0 done, 2 skipped, 0 failed"


@pytest.mark.parametrize("pragma", ["application_id = 1234", "user_version = 7"])
def test_a_sqlite_file_marked_by_another_program_is_refused_untouched(tmp_path, monkeypatch, pragma):
    """A SQLite file with no tables yet but another program's mark (application_id, or a
    user_version): refused with one line, its bytes unchanged, not switched to WAL."""
    db = tmp_path / "theirs.db"
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA {pragma}")
    conn.close()
    before = db.read_bytes()
    a, _ = two_files(tmp_path)
    use_engine(monkeypatch, ScriptedEngine(n=2))
    result = invoke("--db", str(db), str(a), "-q")
    no_traceback(result)
    assert result.exit_code == 1
    assert lines(result) == [f"error: the job database {db} is not one of transcriber's: another program marked "
                             f"it as its own ({pragma.replace(' = ', ' ')}); use another --db"]
    assert db.read_bytes() == before and not Path(f"{db}-wal").exists()


def test_our_database_carries_our_application_id(tmp_path):
    with SqliteJobStore(tmp_path / "jobs.db") as store:
        assert store.db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    with SqliteJobStore(tmp_path / "jobs.db"):  # and is opened again
        pass


def test_checking_the_database_file_keeps_sqlites_locks(tmp_path):
    """The identity check before each write never opens the database file: closing a descriptor
    of it would drop SQLite's POSIX locks in this process, and another process closing its
    connection would delete the write-ahead log this one still writes to (its commits lost)."""
    db = tmp_path / "jobs.db"
    with SqliteJobStore(db) as store:
        store.db.execute("CREATE TABLE t (x)")  # checked, then written
        reader = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT 1 FROM t'); c.close()"
        subprocess.run([sys.executable, "-c", reader, str(db)], check=True)  # another process, in and out
        store.db.execute("INSERT INTO t VALUES (1)")
        store.db.conn.commit()
        conn = sqlite3.connect(db)
        try:
            assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 1  # the commit is seen
        finally:
            conn.close()
