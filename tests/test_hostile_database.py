"""Hostile and careless hands on the job database (issue 31): the file a run opened is the one it
writes, or it stops; a SQLite file that is not ours is refused untouched; what a lost database's
run finished is adopted by the next one.

Each case asserts the exit status, the one line naming the file and what happened, and what is
on disk after: the replacing file byte for byte, the outputs written before.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from jobs.store import APPLICATION_ID, JobStore

from .conftest import PRESS_YARD
from .test_bad_input import invoke, no_traceback, use_engine
from .test_hostile_input import lines
from .test_jobs_runner import ScriptedEngine


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("TRANSCRIBER_DEBUG", "TRANSCRIBER_DB", "TRANSCRIBER_DB_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)


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
    with JobStore(tmp_path / "jobs.db") as store:
        assert store.db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    with JobStore(tmp_path / "jobs.db"):  # and is opened again
        pass
