"""The SQLite connection of the job store: sqlite-utils' Database made safe to share between
processes and to lose.

- A lock held by another process is waited for in two stages (silently, then told to the
  user), then ``DatabaseLocked``, one line naming the file.
- A file SQLite cannot write (a full disk, an I/O error, a read-only file) is a ``StoreError``,
  one line naming it.
- The file the connection opened is checked before every write (``FileIdentity``): one deleted,
  replaced or truncated under it is ``DatabaseGone``, and nothing more is written to it, nor to
  whatever is at its path now.

The job tables and their queries are transcriber/app/store/sqlite_store.py's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Callable, Optional

from sqlite_utils import Database

from transcriber.app.store.domain import DEFAULT_TIMEOUT, DatabaseGone, DatabaseLocked, NewerDatabase, StoreError
from transcriber.app.store.migrations import APPLICATION_ID, migrations

SQLITE_HEADER = 100  # bytes: the header every SQLite database file begins with


class FileIdentity:
    """The database file a connection opened: its (device, inode), taken once SQLite has written
    its header. ``lost`` says what became of the file at ``path`` since: deleted, replaced (another
    inode, such as ``mv other.db jobs.db``) or truncated (the same inode, shorter than a header);
    None while it is the same file.

    Told by ``os.stat`` alone, never by opening the file: closing any descriptor of it would
    drop every POSIX lock this process holds on it, SQLite's included, and another process
    closing its connection would then take itself for the last one and delete the write-ahead
    log this one still writes to."""

    def __init__(self, path: Path):
        st = os.stat(path)
        self.path, self.key = path, (st.st_dev, st.st_ino)

    def lost(self) -> Optional[str]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return "deleted"
        except OSError:
            return None  # cannot tell now (permissions, a mount): SQLite's own errors tell
        if (st.st_dev, st.st_ino) != self.key:
            return "replaced by another file"
        return "truncated" if st.st_size < SQLITE_HEADER else None

    def gone(self, what: str) -> DatabaseGone:
        """One line naming the file and what happened to it."""
        return DatabaseGone(f"the job database {self.path} was {what} while this command ran: stopped, "
                            f"nothing more written to it (outputs already written stay; a new database "
                            f"adopts those whose content the job would write)")


NOTICE_AFTER = 3.0  # a wait this long is told to the user (``on_wait``), once per wait


class SharedDatabase(Database):
    """sqlite-utils' Database whose every statement waits for a lock in two stages: silently
    for ``NOTICE_AFTER`` seconds (SQLite's own busy timeout), then, after telling ``on_wait``,
    for the rest of ``timeout``; past that, ``DatabaseLocked`` (one line naming the file)
    instead of sqlite3's bare "database is locked".

    A database SQLite cannot write (a full disk, an I/O error, a read-only file) is a
    ``StoreError`` too, one line naming it.

    Retrying the statement that hit the lock is safe here: every write transaction of the store
    starts with its write statement (see the module's docstring), so a statement that found the
    database locked holds nothing that the retry would have to keep.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path, timeout: float,
                 on_wait: Optional[Callable[[str], None]]):
        super().__init__(conn, execute_plugins=False)
        self.path, self.timeout, self.on_wait = path, timeout, on_wait
        self.first_wait = min(timeout, NOTICE_AFTER)
        self._busy_ms(self.first_wait)
        self.identity: Optional[FileIdentity] = None  # set once the file is open (SqliteJobStore)
        self.lost: Optional[str] = None  # what became of the file, once a check found it lost

    def verify(self) -> None:
        """Before a write and before each commit: the file is the one this connection opened
        (``FileIdentity``); DatabaseGone, and this connection writes nothing more, if not."""
        if self.identity is None:
            return
        if self.found_lost():
            raise self.identity.gone(self.lost)

    def found_lost(self) -> bool:
        """Whether the file was lost (checked now, unless found before); the first time it is,
        this connection is made safe to leave: its transaction rolled back, and its
        write-ahead log kept out of whatever is at the path now. SQLite checkpoints the log into
        the database when its last connection closes, and a later connection to the path
        replays a log it finds there: so the log is emptied into the file this connection still
        holds (deleted or replaced: no one else's), and into a truncated file nothing is
        checkpointed (a later connection to an empty file discards the log)."""
        if self.lost or self.identity is None:
            return bool(self.lost)
        self.lost = self.identity.lost()
        if self.lost:
            with contextlib.suppress(sqlite3.Error):
                self.conn.rollback()
                if self.lost in ("deleted", "replaced by another file"):
                    self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                else:
                    _no_checkpoint_on_close(self.conn, self.path)
        return bool(self.lost)

    def _busy_ms(self, seconds: float) -> None:
        self.conn.execute(f"PRAGMA busy_timeout = {max(0, int(seconds * 1000))}")

    def execute(self, sql, parameters=None):
        word = sql.split(None, 1)[0].upper() if sql.strip() else ""
        if word == "COMMIT" or (word in _WRITES and not self.conn.in_transaction):
            self.verify()
        cursor = self._unless_locked(sql, parameters)
        if cursor is not None:
            return cursor
        rest = self.timeout - self.first_wait
        if rest > 0:
            if self.on_wait:
                self.on_wait(f"waiting for the job database {self.path}, locked by another process")
            self._busy_ms(rest)
            try:
                cursor = self._unless_locked(sql, parameters)
            finally:
                self._busy_ms(self.first_wait)
            if cursor is not None:
                return cursor
        raise DatabaseLocked(f"the job database {self.path} is locked by another process "
                             f"(waited {self.timeout:g} s; see --db-timeout)") from None

    def _unless_locked(self, sql, parameters) -> Optional[sqlite3.Cursor]:
        """The statement run, or None when another process held the lock past the busy timeout."""
        try:
            return super().execute(sql, parameters)
        except sqlite3.OperationalError as e:
            if not _is_locked(e):
                _raise_if_unusable(self.path, e)
                raise
        return None

    @contextlib.contextmanager
    def atomic(self):
        """sqlite-utils' transaction; its COMMIT (not a statement through ``execute``) can find
        the disk full too."""
        try:
            with super().atomic():
                yield self
                self.verify()  # before its COMMIT
        except sqlite3.OperationalError as e:
            _raise_if_unusable(self.path, e)
            raise


# the statements that write (or begin a transaction that will): the file is checked before them
_WRITES = {"BEGIN", "INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER"}
SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE = 1006


def _no_checkpoint_on_close(conn: sqlite3.Connection, path: Path) -> None:
    """``sqlite3_db_config(NO_CKPT_ON_CLOSE)`` on ``conn`` (Python 3.12's ``setconfig``; before it,
    through ctypes on the connection's handle, used only once SQLite confirms that the handle
    is this connection's, on ``path``)."""
    if hasattr(conn, "setconfig"):
        conn.setconfig(SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, True)
        return
    import _sqlite3
    import ctypes
    lib = ctypes.CDLL(_sqlite3.__file__)  # its symbols and those of the libsqlite3 it links
    lib.sqlite3_db_filename.restype = ctypes.c_char_p
    handle = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__)  # pysqlite_Connection.db
    name = lib.sqlite3_db_filename(handle, b"main")
    if name and os.fsdecode(name) in (os.path.abspath(path), os.path.realpath(path)):
        lib.sqlite3_db_config(handle, ctypes.c_int(SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE), ctypes.c_int(1),
                              ctypes.c_void_p(0))


def _is_locked(error: sqlite3.OperationalError) -> bool:
    text = str(error)
    return "database is locked" in text or "database is busy" in text


# SQLite's words for a database file it cannot use whatever the statement: the disk, not the code
_UNUSABLE = ("database or disk is full", "disk I/O error", "attempt to write a readonly database",
             "unable to open database file")


def _raise_if_unusable(path: Path, error: sqlite3.OperationalError) -> None:
    """A full disk, an I/O error, a read-only file: StoreError, one line naming the database,
    for the CLI. Other errors are left to the caller (sqlite-utils catches some in its work)."""
    if any(words in str(error) for words in _UNUSABLE):
        full = ""
        with contextlib.suppress(OSError):  # SQLite says "disk I/O error" for some writes to a full disk
            if shutil.disk_usage(path.parent).free < 1 << 20 and "full" not in str(error):
                full = " (its disk is full)"
        raise StoreError(f"the job database {path}: {error}{full}") from error


def open_database(path: Path, timeout: float = DEFAULT_TIMEOUT, on_wait: Optional[Callable[[str], None]] = None,
                  same_as: Optional[FileIdentity] = None) -> SharedDatabase:
    """The job database at ``path``, made or migrated to this version's schema.

    ``timeout``: seconds to wait for another process's lock (then DatabaseLocked);
    ``on_wait(message)`` is told once per wait that lasts more than NOTICE_AFTER seconds;
    ``same_as``: the file another store of this run opened (a heartbeat's connection), which
    this one must be, checked before it connects (DatabaseGone, nothing opened, if not)."""
    if same_as is not None and (lost := same_as.lost()):
        raise same_as.gone(lost)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=min(timeout, NOTICE_AFTER))
        db = SharedDatabase(conn, path, timeout, on_wait)
        _refuse_others(db)  # before the first write: a database not ours is left as it was
        db.enable_wal()  # readers never block the runner's checkpoints, nor it them
        _migrate(db)
        db.identity = same_as or FileIdentity(path)  # each write checks it from now on
        db.verify()  # (a heartbeat's: replaced while it connected)
        return db
    except StoreError:
        raise
    except OSError as e:  # its folder: not a folder, not writable...
        raise _unusable_folder(path, e.strerror or str(e)) from e
    except sqlite3.Error as e:
        if not os.access(path.parent, os.W_OK | os.X_OK):  # SQLite makes its -wal, -shm files there
            raise _unusable_folder(path, "its folder is read-only") from e
        raise StoreError(f"cannot open job database {path}: {e}") from e


def _unusable_folder(path: Path, why: str) -> StoreError:
    return StoreError(f"cannot open job database {path} ({why}): make its folder {path.parent} "
                      f"writable, or put it elsewhere with --db or $TRANSCRIBER_DB")


def _migrate(db: SharedDatabase) -> None:
    if not migrations.pending(db):
        return
    # Two runners started together on a new database: the first one creates the tables, the
    # second waits for the write lock and then finds nothing pending. (Migrations.apply's
    # own transactions nest inside this one as savepoints.)
    db.execute("BEGIN IMMEDIATE")
    try:
        migrations.apply(db)
        db.execute("COMMIT")
    except BaseException:
        db.rollback()
        raise


def _refuse_others(db: SharedDatabase) -> None:
    """Refuse, untouched, a database this version must not write: one of another program
    (tables, but none of our migrations), or one a newer version has migrated (it may hold
    what this one would misread or destroy)."""
    # One read transaction, one snapshot: a runner started at the same moment may be
    # creating the tables and their migration rows (one transaction) between two reads.
    db.execute("BEGIN")
    try:
        applied = [m.name for m in migrations.applied(db)]
        tables = db.table_names()
    finally:
        db.execute("COMMIT")
    if not applied and tables:
        raise StoreError(f"the job database {db.path} is not one of transcriber's: it holds other "
                         f"tables ({', '.join(tables[:3])}); use another --db")
    marks = {name: db.execute(f"PRAGMA {name}").fetchone()[0] for name in ("application_id", "user_version")}
    if marks["application_id"] not in (0, APPLICATION_ID) or (not applied and marks["user_version"]):
        name, value = next((n, v) for n, v in marks.items() if v)
        raise StoreError(f"the job database {db.path} is not one of transcriber's: another program "
                         f"marked it as its own ({name} {value}); use another --db")
    known = {m.name for m in migrations.pending(Database(memory=True))}  # all of this version's
    unknown = [name for name in applied if name not in known]
    if unknown:
        raise NewerDatabase(f"the job database {db.path} was written by a newer version of transcriber "
                            f"(migration {unknown[0]}); upgrade transcriber, or use another --db")
