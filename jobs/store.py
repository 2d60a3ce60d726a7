"""The job store: every file is a job in SQLite (through sqlite-utils). All SQL lives here.

Tables (see the migrations below):

- ``jobs``: one row per input file (its resolved path is unique): content key, options
  fingerprint and spec, status (queued/running/done/failed), progress and duration in seconds,
  runs (times claimed), errors (runs that ended in an error), the last error, warnings (what
  the decoder reported about media it still read in full), output paths, the lease (owner +
  expiry), the worker (``host:pid`` of the process decoding it) and times (unix seconds).
- ``checkpoints``: what a job has committed so far, appended in order: the segments (with their
  words) new since the previous checkpoint, the audio position, and the engine state to resume
  from (only the latest row keeps its state; older ones are cleared to save space). Appending
  the new words, not rewriting all of them, keeps a checkpoint O(new words) on a long file.

Concurrency: several processes share one database file (WAL, a busy timeout). Every write
transaction starts with a write statement (or is a single statement), so it takes SQLite's write
lock at once and waits for it, instead of failing with SQLITE_BUSY when it would have to upgrade
a stale read snapshot. A runner owns a job through a lease: ``claim`` is one UPDATE, so two
runners never take the same job; every write a runner makes for a job is fenced on
``lease_owner``, so a runner whose lease was taken over (it stalled, or it was thought dead) can
no longer write anything for that job (``LeaseLost``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
import socket
import sqlite3
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from transcriber import Segment, Word, bounded

from .discover import FileSignature, file_signature, file_signatures, output_states, unchanged

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
STATUSES = (QUEUED, RUNNING, DONE, FAILED)
# What ``transcribe status`` shows besides: a running job whose runner is gone, a job not done
# whose input file is gone (deleted or renamed)
STALLED, GONE = "stalled", "gone"
FOLLOWING = "following"  # a running job whose source is followed as it is made (jobs/follow.py)
FOLLOW_KEY = "follow:"  # the content keys of followed jobs start with it

# What ``enqueue``/``retry`` did with a path or job.
NEW = "new"  # first time seen: queued
REDO = "redo"  # content, options changed or --force: queued from scratch, old words dropped
RESUME = "resume"  # queued again with its checkpoint (interrupted, stalled or a transient failure)
OUTPUTS = "outputs"  # done, only the output settings changed or outputs are missing: rewrite them
SKIP = "skip"  # done with the same content and options, outputs present
FAILED_BEFORE = "failed"  # failed on its input (unreadable media); retried when the file changes
BUSY = "busy"  # running under another runner's live lease
REFUSED = "refused"  # would replace an output that is not its own (enqueue_many's ``vet``): left as it was
_WRITTEN = (NEW, REDO, RESUME, OUTPUTS)  # the actions that change the job's row

migrations = Migrations("transcriber.jobs")
APPLICATION_ID = 0x74726E73  # "trns": SQLite's application_id of a job database (m009)


@migrations()
def m001_jobs(db: Database) -> None:
    db["jobs"].create({
        "id": int, "path": str, "content_key": str, "fingerprint": str, "spec": str,
        "output_stem": str, "status": str, "progress": float, "duration": float,
        "words_complete": int, "language": str, "model": str,
        "runs": int, "errors": int, "last_error": str, "retryable": int, "outputs": str,
        "lease_owner": str, "lease_expires": float,
        "created_at": float, "queued_at": float, "started_at": float, "updated_at": float,
        "finished_at": float,
    }, pk="id", not_null={"path", "content_key", "fingerprint", "spec", "output_stem", "status"},
        defaults={"status": QUEUED, "progress": 0.0, "words_complete": 0, "runs": 0, "errors": 0,
                  "retryable": 1, "outputs": "[]"})
    db["jobs"].create_index(["path"], unique=True)
    db["jobs"].create_index(["status"])


@migrations()
def m002_checkpoints(db: Database) -> None:
    db["checkpoints"].create({
        "job_id": int, "seq": int, "position": float, "segments": str, "state": str,
        "owner": str, "created_at": float,
    }, pk=("job_id", "seq"), foreign_keys=[("job_id", "jobs", "id")], not_null={"segments"})


@migrations()
def m003_language_probability(db: Database) -> None:
    """How sure the model was of the language it detected (NULL when the language was given)."""
    db["jobs"].add_column("language_probability", float)


@migrations()
def m004_worker(db: Database) -> None:
    """The process that decodes (or last decoded) the job: ``host:pid`` of the runner itself, or
    of the Ray worker it handed the job to (NULL before any attempt)."""
    db["jobs"].add_column("worker", str)


@migrations()
def m005_warnings(db: Database) -> None:
    """What the decoder reported about a file it still read in full (ffmpeg's errors on a
    damaged frame): a JSON list of one-line messages; NULL when there was nothing to say."""
    db["jobs"].add_column("warnings", str)


@migrations()
def m006_outputs(db: Database) -> None:
    """The files this tool wrote, as it wrote them (size, mtime, SHA-256), and for which job: a
    subtitle file that is not in here, or that changed since, is the user's, never overwritten
    without --force."""
    db["outputs"].create({"path": str, "job_id": int, "size": int, "mtime_ns": int, "sha256": str,
                          "written_at": float}, pk="path", not_null={"job_id", "sha256"})


@migrations()
def m007_job_is_file_and_place(db: Database) -> None:
    """A job is a file and the place its outputs go (``output_stem``): the same file transcribed
    into another folder is another job, so a one-off run elsewhere never touches a done one."""
    db.execute("DROP INDEX IF EXISTS idx_jobs_path")
    db["jobs"].create_index(["path", "output_stem"], unique=True)


@migrations()
def m008_kept_words(db: Database) -> None:
    """The words of a done job being redone with other options (and what they were made with),
    kept until the redo is done: a redo that fails gives the job back its last good words."""
    db["kept"].create({"job_id": int, "fingerprint": str, "content_key": str, "job": str, "segments": str},
                      pk="job_id", not_null={"job", "segments"})


@migrations()
def m009_application_id(db: Database) -> None:
    """The file says it is ours (SQLite's ``application_id`` in its header): a SQLite file that
    is not, another program's, is refused untouched (``JobStore._refuse_others``)."""
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")


@migrations()
def m010_output_root(db: Database) -> None:
    """The folder the command named for the job's outputs (``-o``, a followed source's stem's
    folder); NULL: the input's own folder. Every output is checked to lie inside it when it is
    written (jobs/attempt.py), so an edited ``output_stem`` cannot steer a write elsewhere. Jobs
    of before: the folder their stem is in, where it is not the input's."""
    db["jobs"].add_column("output_root", str)
    for row in list(db.query("SELECT id, path, output_stem FROM jobs")):
        folder = os.path.dirname(row["output_stem"])
        if folder != os.path.dirname(row["path"]):
            db.execute("UPDATE jobs SET output_root = ? WHERE id = ?", [folder, row["id"]])


# the columns of a done job that its words were made with, kept with them (``kept``)
KEPT_COLUMNS = ("content_key", "fingerprint", "spec", "progress", "duration", "language", "language_probability",
                "model", "worker", "warnings", "outputs", "finished_at")


class StoreError(Exception):
    """The database cannot be opened or used (one line, for the CLI)."""


class DatabaseLocked(StoreError):
    """Another process held the database's lock for longer than the store's timeout."""


class NewerDatabase(StoreError):
    """The database was migrated by a newer version of this program."""


class DatabaseGone(StoreError):
    """The database file a command opened was deleted, truncated or replaced under it: the
    command stops, and writes nothing more, to it or to the file now at its path."""


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


ENQUEUE_BATCH = 500  # files queued per transaction
PENDING = ""  # the signature of an output being written (expect_outputs)
DEFAULT_TIMEOUT = 30.0  # seconds a statement waits for another process's lock
NOTICE_AFTER = 3.0  # a wait this long is told to the user (``on_wait``), once per wait


class _Database(Database):
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
        self.identity: Optional[FileIdentity] = None  # set once the file is open (JobStore)
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
        try:
            return super().execute(sql, parameters)
        except sqlite3.OperationalError as e:
            if not _is_locked(e):
                _raise_if_unusable(self.path, e)
                raise
        rest = self.timeout - self.first_wait
        if rest > 0:
            if self.on_wait:
                self.on_wait(f"waiting for the job database {self.path}, locked by another process")
            self._busy_ms(rest)
            try:
                return super().execute(sql, parameters)
            except sqlite3.OperationalError as e:
                if not _is_locked(e):
                    _raise_if_unusable(self.path, e)
                    raise
            finally:
                self._busy_ms(self.first_wait)
        raise DatabaseLocked(f"the job database {self.path} is locked by another process "
                             f"(waited {self.timeout:g} s; see --db-timeout)") from None

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


class LeaseLost(Exception):
    """This runner no longer owns the job: another runner took it over."""


def default_path() -> Path:
    """``$TRANSCRIBER_DB`` is handled by the CLI; this is the user data directory's file."""
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "transcriber" / "jobs.db"


def segments_to_json(segments: Sequence[Segment]) -> str:
    # Full precision (not Segment.to_dict, which rounds for the JSON timeline): a resumed job's
    # words must be bit-for-bit those of an uninterrupted run.
    return json.dumps([asdict(s) for s in segments], ensure_ascii=False)


def segments_from_json(text: str) -> list[Segment]:
    return [Segment(**{**d, "words": tuple(Word(**w) for w in d["words"])}) for d in json.loads(text)]


@functools.lru_cache(maxsize=64)
def _parsed_spec(text: str) -> dict:
    """A spec's JSON, parsed once: the 10,000 jobs of a folder share one (status, a rerun)."""
    return json.loads(text)


def _json_tuple(text: Optional[str]) -> tuple:
    return () if not text or text == "[]" else tuple(json.loads(text))


_FLOAT_COLUMNS = ("progress", "duration", "lease_expires", "created_at", "queued_at", "started_at",
                  "updated_at", "finished_at")


@dataclass(frozen=True)
class Job:
    """A row of ``jobs``, typed."""

    id: int
    path: str
    content_key: str
    fingerprint: str
    spec: dict
    output_stem: str
    status: str
    progress: float = 0.0
    duration: Optional[float] = None
    words_complete: bool = False
    language: Optional[str] = None
    model: Optional[str] = None
    language_probability: Optional[float] = None
    worker: Optional[str] = None  # host:pid of the process that decodes (or last decoded) it
    output_root: Optional[str] = None  # the folder its outputs must be in (None: the input's)
    warnings: tuple[str, ...] = ()
    runs: int = 0
    errors: int = 0
    last_error: Optional[str] = None
    retryable: bool = True
    outputs: tuple[str, ...] = ()
    lease_owner: Optional[str] = None
    lease_expires: Optional[float] = None
    created_at: Optional[float] = None
    queued_at: Optional[float] = None
    started_at: Optional[float] = None
    updated_at: Optional[float] = None
    finished_at: Optional[float] = None

    @classmethod
    def from_row(cls, row: dict) -> "Job":
        d = dict(row)
        d["spec"] = dict(_parsed_spec(d["spec"]))  # a copy: each job's own dict (its values are not changed)
        d["outputs"] = _json_tuple(d["outputs"])
        d["warnings"] = _json_tuple(d["warnings"])
        d["words_complete"] = bool(d["words_complete"])
        d["retryable"] = bool(d["retryable"])
        for name in _FLOAT_COLUMNS:  # UPDATE ... RETURNING can hand back a whole REAL as an int
            if d[name] is not None:
                d[name] = float(d[name])
        return cls(**d)

    def stalled(self, now: Optional[float] = None) -> bool:
        """Running, but its runner's lease has expired (the runner died or hung)."""
        return self.status == RUNNING and (self.lease_expires or 0) < (now or time.time())

    def to_dict(self, status: Optional[str] = None) -> dict:
        """The job as plain data; ``status``: the one shown (``stalled``, ``gone``: see
        jobs/cli.py's ``shown_status``), with ``stalled`` true exactly when it says so."""
        d = {name: getattr(self, name) for name in _FIELDS}  # not asdict: a deep copy per job
        d["outputs"] = list(self.outputs)
        d["warnings"] = list(self.warnings)
        d["status"] = status or self.status
        d["stalled"] = d["status"] == STALLED if status else self.stalled()
        return d


_FIELDS = [f.name for f in dataclasses.fields(Job)]


@dataclass(frozen=True)
class Resume:
    """What a job has committed: where its engine continues from."""

    segments: list[Segment] = field(default_factory=list)
    state: Optional[dict] = None  # the engine's state after the last committed segment
    position: float = 0.0  # seconds of audio done
    checkpoints: int = 0


@dataclass(frozen=True)
class OutputRecord:
    """A file this tool wrote: for which job, and what it held then."""

    path: str
    job_id: int
    signature: FileSignature
    job_path: Optional[str]  # the job's input and output stem (None: the job was deleted)
    job_stem: Optional[str]


def refusal(path: Path, record: Optional[OutputRecord], job_path: str, job_stem: str,
            listed: Iterable[str] = (), changed: Optional[bool] = None,
            would_write: Optional[str] = None) -> Optional[str]:
    """Why the job of (``job_path``, ``job_stem``) must not replace ``path``, an existing file
    (``record``: what this tool wrote there, if anything); None when it may. ``listed``: the
    job's own list of outputs, which vouches for a file written before outputs were recorded
    (a database of an older version). ``changed``: whether the file differs from ``record``,
    if known (read before: ``output_states``); else the file is read now. ``would_write``: the
    SHA-256 of what the job is about to write there: a file of no record that holds exactly that
    is taken as the job's (written by a run whose database was lost)."""
    if record is None and str(path) in listed:
        return None
    if record is None and would_write is not None and _holds(path, would_write):
        return None
    if record is None:
        return f"{path} exists and was not written by transcribe; --force replaces it"
    if (record.job_path, record.job_stem) != (job_path, job_stem):
        return f"{path} holds the transcript of another file ({record.job_path}); --force replaces it"
    if changed is None:
        changed = record.signature.sha256 != PENDING and not unchanged(path, record.signature)
    if changed:
        return f"{path} was changed since transcribe wrote it; --force replaces it"
    return None


def _holds(path: Path, sha256: str) -> bool:
    try:
        return file_signature(path).sha256 == sha256
    except OSError:
        return False


# Asked by enqueue_many before a file is queued to write outputs: a reason not to, or None.
Vet = Callable[["Request", Optional[Job]], Optional[str]]


@dataclass(frozen=True)
class Request:
    """Asking for one file to be transcribed."""

    path: str  # resolved absolute path: the job's identity
    content_key: str
    fingerprint: str
    spec: dict
    output_stem: str
    output_root: Optional[str] = None  # the output folder the command named (-o); None: the input's


def _all_exist(paths: Iterable[str]) -> bool:
    """Whether every one of these outputs exists: asked of the reader child, with the bound on
    reads (the CLI's enqueues read them before, all at once: jobs/batch.py's ``OutputsSeen``)."""
    paths = [str(p) for p in paths]
    states = bounded(output_states, [(p, None) for p in paths], path=paths[0]) if paths else []
    return bool(paths) and all(exists for _, exists, _ in states)


def owner_id() -> str:
    """``host:pid:nonce``: names a runner, and lets one on the same host see that it died."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


class JobStore:
    """Jobs and checkpoints in one SQLite file; safe to share between processes."""

    def __init__(self, path, timeout: float = DEFAULT_TIMEOUT,
                 on_wait: Optional[Callable[[str], None]] = None, same_as: Optional[FileIdentity] = None):
        """``timeout``: seconds to wait for another process's lock (then DatabaseLocked);
        ``on_wait(message)`` is told once per wait that lasts more than NOTICE_AFTER seconds;
        ``same_as``: the file another store of this run opened (a heartbeat's connection), which
        this one must be, checked before it connects (DatabaseGone, nothing opened, if not)."""
        self.path = Path(path)
        self.timeout = timeout
        if same_as is not None and (lost := same_as.lost()):
            raise same_as.gone(lost)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=min(timeout, NOTICE_AFTER))
            self.db = _Database(conn, self.path, timeout, on_wait)
            self._refuse_others()  # before the first write: a database not ours is left as it was
            self.db.enable_wal()  # readers never block the runner's checkpoints, nor it them
            self._migrate()
            self.db.identity = same_as or FileIdentity(self.path)  # each write checks it from now on
            self.db.verify()  # (a heartbeat's: replaced while it connected)
        except StoreError:
            raise
        except OSError as e:  # its folder: not a folder, not writable...
            raise self._unusable_folder(e.strerror or str(e)) from e
        except sqlite3.Error as e:
            if not os.access(self.path.parent, os.W_OK | os.X_OK):  # SQLite makes its -wal, -shm files there
                raise self._unusable_folder("its folder is read-only") from e
            raise StoreError(f"cannot open job database {self.path}: {e}") from e

    def _unusable_folder(self, why: str) -> StoreError:
        return StoreError(f"cannot open job database {self.path} ({why}): make its folder {self.path.parent} "
                          f"writable, or put it elsewhere with --db or $TRANSCRIBER_DB")

    def _migrate(self) -> None:
        if not migrations.pending(self.db):
            return
        # Two runners started together on a new database: the first one creates the tables, the
        # second waits for the write lock and then finds nothing pending. (Migrations.apply's
        # own transactions nest inside this one as savepoints.)
        self.db.execute("BEGIN IMMEDIATE")
        try:
            migrations.apply(self.db)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.rollback()
            raise

    def _refuse_others(self) -> None:
        """Refuse, untouched, a database this version must not write: one of another program
        (tables, but none of our migrations), or one a newer version has migrated (it may hold
        what this one would misread or destroy)."""
        # One read transaction, one snapshot: a runner started at the same moment may be
        # creating the tables and their migration rows (one transaction) between two reads.
        self.db.execute("BEGIN")
        try:
            applied = [m.name for m in migrations.applied(self.db)]
            tables = self.db.table_names()
        finally:
            self.db.execute("COMMIT")
        if not applied and tables:
            raise StoreError(f"the job database {self.path} is not one of transcriber's: it holds other "
                             f"tables ({', '.join(tables[:3])}); use another --db")
        marks = {name: self.db.execute(f"PRAGMA {name}").fetchone()[0] for name in ("application_id", "user_version")}
        if marks["application_id"] not in (0, APPLICATION_ID) or (not applied and marks["user_version"]):
            name, value = next((n, v) for n, v in marks.items() if v)
            raise StoreError(f"the job database {self.path} is not one of transcriber's: another program "
                             f"marked it as its own ({name} {value}); use another --db")
        known = {m.name for m in migrations.pending(Database(memory=True))}  # all of this version's
        unknown = [name for name in applied if name not in known]
        if unknown:
            raise NewerDatabase(f"the job database {self.path} was written by a newer version of transcriber "
                                f"(migration {unknown[0]}); upgrade transcriber, or use another --db")

    def close(self) -> None:
        self.db.found_lost()  # a lost file: nothing checkpointed into it on the way out
        self.db.close()

    def __enter__(self) -> "JobStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- reading -------------------------------------------------------------------------

    def get(self, job_id: int) -> Optional[Job]:
        rows = list(self.db.query("SELECT * FROM jobs WHERE id = ?", [job_id]))
        return Job.from_row(rows[0]) if rows else None

    def by_path(self, path: str) -> Optional[Job]:
        """The file's job (the latest one, when it was sent to several output folders)."""
        rows = list(self.db.query("SELECT * FROM jobs WHERE path = ? ORDER BY updated_at DESC, id DESC LIMIT 1",
                                  [path]))
        return Job.from_row(rows[0]) if rows else None

    def output_records(self, paths: Optional[Iterable[str]] = None) -> dict[str, OutputRecord]:
        """The files this tool wrote (among ``paths``; all of them if None), by path."""
        sql = ("SELECT o.path, o.job_id, o.size, o.mtime_ns, o.sha256, j.path AS job_path, j.output_stem "
               "FROM outputs o LEFT JOIN jobs j ON j.id = o.job_id")
        params: list = []
        if paths is not None:
            sql += " WHERE o.path IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(list(paths)))
        return {r["path"]: OutputRecord(r["path"], r["job_id"], FileSignature(r["size"], r["mtime_ns"], r["sha256"]),
                                        r["job_path"], r["output_stem"])
                for r in self.db.query(sql, params)}

    def expect_outputs(self, job_id: int, paths: Iterable[str]) -> None:
        """The job is about to write these files (found free, or its own): recorded first, with
        no signature yet, so that a kill between the write and ``finish`` leaves them the job's."""
        now = time.time()
        with self.db.atomic():
            for path in paths:
                self._put_output(str(path), job_id, FileSignature(-1, -1, PENDING), now)

    def record_outputs(self, job_id: int, paths: Iterable[str]) -> None:
        """Files written for a job (or, with --force, taken over by it): recorded as they are now.
        ReadTimeout if they do not answer (read before the transaction: see ``signed``)."""
        signed = self.signed(paths)
        with self.db.atomic():
            self._record_outputs(job_id, signed, time.time())

    @staticmethod
    def signed(paths: Iterable[str]) -> dict[str, FileSignature]:
        """The files' signatures (those gone left out: nothing of the user's to protect there),
        read by the reader child with the bound on reads (ReadTimeout: an outputs' folder on a
        hung mount), never by this process, nor while a transaction holds the database."""
        paths = [str(p) for p in paths]
        return bounded(file_signatures, paths, path=os.path.dirname(paths[0])) if paths else {}

    def _record_outputs(self, job_id: int, signed: dict[str, FileSignature], now: float) -> None:
        for path, sig in signed.items():
            self._put_output(path, job_id, sig, now)

    def _put_output(self, path: str, job_id: int, sig: FileSignature, now: float) -> None:
        self.db.execute("INSERT OR REPLACE INTO outputs (path, job_id, size, mtime_ns, sha256, written_at) "
                        "VALUES (?, ?, ?, ?, ?, ?)", [path, job_id, sig.size, sig.mtime_ns, sig.sha256, now])

    def jobs(self, statuses: Optional[Iterable[str]] = None, ids: Optional[Iterable[int]] = None) -> list[Job]:
        where, params = [], []
        if statuses:
            where.append("status IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(statuses)))
        if ids is not None:
            where.append("id IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(ids)))
        sql = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        return [Job.from_row(r) for r in self.db.query(sql, params)]

    def each_job(self) -> Iterable[Job]:
        """Every job, in id order, read as it is consumed (flat memory for any number of jobs)."""
        return map(Job.from_row, self.db.query("SELECT * FROM jobs ORDER BY id"))

    def checkpoints(self, job_id: int) -> list[dict]:
        """The checkpoint rows of a job, in order, without their (large) payloads."""
        return list(self.db.query(
            "SELECT job_id, seq, position, owner, created_at, state IS NOT NULL AS has_state, "
            "json_array_length(segments) AS n_segments FROM checkpoints WHERE job_id = ? ORDER BY seq",
            [job_id]))

    def resume_point(self, job_id: int) -> Resume:
        rows = list(self.db.query(
            "SELECT position, segments, state FROM checkpoints WHERE job_id = ? ORDER BY seq", [job_id]))
        if not rows:
            return Resume()
        segments = [s for r in rows for s in segments_from_json(r["segments"])]
        last = rows[-1]
        state = json.loads(last["state"]) if last["state"] is not None else None
        return Resume(segments, state, last["position"], len(rows))

    # --- enqueueing ----------------------------------------------------------------------

    def enqueue(self, request: Request, force: bool = False,
                outputs_present: Callable[[Iterable[str]], bool] = _all_exist) -> tuple[Job, str]:
        """Queue a file unless it is done with the same content and options; what was done."""
        return self.enqueue_many([request], force, outputs_present)[0]

    def enqueue_many(self, requests: Sequence[Request], force: bool = False,
                     outputs_present: Callable[[Iterable[str]], bool] = _all_exist,
                     vet: Optional[Vet] = None) -> list[tuple[Optional[Job], str]]:
        """``enqueue`` for many files, in transactions of ``ENQUEUE_BATCH``: each holds the write
        lock from its start, so two processes enqueueing the same folder agree on every job,
        and 10,000 files cost a few commits, not 10,000.

        ``vet(request, job)`` (job: the existing one, or None) is asked before a file would be
        queued to write its outputs; a reason means REFUSED: nothing is written for it (the job
        stays as it was; None in its place when there was none)."""
        out: list[tuple[Optional[Job], str]] = []
        for i in range(0, len(requests), ENQUEUE_BATCH):
            out += self._enqueue_batch(requests[i:i + ENQUEUE_BATCH], force, outputs_present, vet)
        return out

    def _enqueue_batch(self, requests: Sequence[Request], force: bool,
                       outputs_present: Callable[[Iterable[str]], bool],
                       vet: Optional[Vet]) -> list[tuple[Optional[Job], str]]:
        now = time.time()
        done: dict[tuple[str, str], tuple[Optional[Job], str]] = {}  # (path, output_stem) -> (job, action)
        specs: dict[int, str] = {}  # the JSON of each spec dict, made once (a batch shares one)
        with self._write_transaction():
            existing = self._by_identity(requests)
            for request in requests:
                key = (request.path, request.output_stem)
                if key not in done:
                    if id(request.spec) not in specs:
                        specs[id(request.spec)] = json.dumps(request.spec, sort_keys=True)
                    done[key] = self._enqueue_one(request, existing.get(key), specs[id(request.spec)], force,
                                                  outputs_present, vet, now)
            changed = [job.id for job, action in done.values() if action in _WRITTEN]
            fresh = {j.id: j for j in self.jobs(ids=changed)} if changed else {}
        return [(fresh.get(job.id, job) if job else None, action) for job, action in done.values()]

    def _enqueue_one(self, request: Request, job: Optional[Job], spec: str, force: bool,
                     outputs_present: Callable[[Iterable[str]], bool], vet: Optional[Vet],
                     now: float) -> tuple[Optional[Job], str]:
        """One file of ``_enqueue_batch`` (inside its transaction): (the job as read, the action)."""
        if job is None:
            if vet is not None and vet(request, None):
                return None, REFUSED
            cursor = self.db.execute(
                "INSERT INTO jobs (path, content_key, fingerprint, spec, output_stem, output_root, status, "
                "created_at, queued_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [request.path, request.content_key, request.fingerprint, spec, request.output_stem,
                 request.output_root, QUEUED, now, now, now])
            return Job(cursor.lastrowid, request.path, request.content_key, request.fingerprint, request.spec,
                       request.output_stem, QUEUED, output_root=request.output_root), NEW
        action = self._decide(job, request, force, outputs_present, now)
        if action == REDO and not force and self._restore_kept(job.id, now, (request.content_key, request.fingerprint)):
            job = self.get(job.id)  # the redo of other options never finished: back to the words of these
            action = self._decide(job, request, force, outputs_present, now)
        if action in (REDO, RESUME, OUTPUTS) and vet is not None and vet(request, job):
            return job, REFUSED
        if action == REDO:
            self._keep(job, request.content_key)
            self._reset(job.id, request.content_key, request.fingerprint, spec, request.output_stem, now)
        elif action in (RESUME, OUTPUTS):
            self.db.execute(
                "UPDATE jobs SET status = ?, spec = ?, errors = CASE WHEN status = ? "
                "THEN 0 ELSE errors END, lease_owner = NULL, lease_expires = NULL, queued_at = ?, "
                "updated_at = ? WHERE id = ?",
                [QUEUED, spec, FAILED, now, now, job.id])
        return job, action

    def outputs_for(self, requests: Sequence[Request]) -> dict[tuple[str, str], list[str]]:
        """The outputs of these requests' jobs that exist, by (path, output_stem), in one query."""
        return {(r["path"], r["output_stem"]): json.loads(r["outputs"])
                for r in self._identified(requests, "path, output_stem, outputs")}

    def _by_identity(self, requests: Sequence[Request]) -> dict[tuple[str, str], Job]:
        """The jobs of these (path, output_stem) pairs that exist, in one query."""
        return {(j.path, j.output_stem): j for j in map(Job.from_row, self._identified(requests, "*"))}

    def _identified(self, requests: Sequence[Request], columns: str) -> Iterable[dict]:
        pairs = json.dumps([[r.path, r.output_stem] for r in requests])
        return self.db.query(
            f"SELECT {columns} FROM jobs WHERE (path, output_stem) IN (SELECT json_extract(value, '$[0]'), "
            "json_extract(value, '$[1]') FROM json_each(?))", [pairs])

    @contextlib.contextmanager
    def _write_transaction(self):
        """A transaction that takes the write lock at its start (waiting for it as every
        statement does), so nothing it read can go stale before it writes."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.conn.rollback()
            raise
        self.db.execute("COMMIT")

    @staticmethod
    def _decide(job: Job, request: Request, force: bool,
                outputs_present: Callable[[Iterable[str]], bool], now: float) -> str:
        if job.status == RUNNING and not job.stalled(now):
            return BUSY
        if force or job.content_key != request.content_key or job.fingerprint != request.fingerprint:
            return REDO
        same_outputs = job.spec == request.spec  # (dicts: no JSON made per job)
        if job.status == DONE:
            return SKIP if same_outputs and outputs_present(job.outputs) else OUTPUTS
        if job.status == FAILED and not job.retryable:
            return FAILED_BEFORE
        return RESUME  # queued, stalled, or failed for a reason that may have gone away

    def _reset(self, job_id: int, content_key: str, fingerprint: str, spec: str, output_stem: str,
               now: float) -> None:
        self.db.execute(
            "UPDATE jobs SET status = ?, content_key = ?, fingerprint = ?, spec = ?, output_stem = ?, "
            "progress = 0, duration = NULL, words_complete = 0, language = NULL, language_probability = NULL, "
            "model = NULL, worker = NULL, warnings = NULL, "
            "errors = 0, last_error = NULL, retryable = 1, outputs = '[]', lease_owner = NULL, "
            "lease_expires = NULL, queued_at = ?, updated_at = ?, finished_at = NULL WHERE id = ?",
            [QUEUED, content_key, fingerprint, spec, output_stem, now, now, job_id])
        self.db.execute("DELETE FROM checkpoints WHERE job_id = ?", [job_id])

    def _keep(self, job: Job, content_key: str) -> None:
        """Before a done job is redone on the same content (other options, --force): keep its
        words and the columns they go with, until the redo is done (``_restore_kept``)."""
        if job.status != DONE or not job.words_complete or job.content_key != content_key:
            self.db.execute("DELETE FROM kept WHERE job_id = ?", [job.id])  # older words of other content
            return
        row = next(self.db.query(f"SELECT {', '.join(KEPT_COLUMNS)} FROM jobs WHERE id = ?", [job.id]))
        segments = segments_to_json(self.resume_point(job.id).segments)
        self.db.execute("INSERT OR REPLACE INTO kept (job_id, fingerprint, content_key, job, segments) "
                        "VALUES (?, ?, ?, ?, ?)", [job.id, job.fingerprint, job.content_key, json.dumps(row), segments])

    def _restore_kept(self, job_id: int, now: float, identity: Optional[tuple[str, str]] = None) -> bool:
        """Give the job back the done words ``_keep`` kept (``identity``: only those made from
        this (content key, fingerprint)); whether there were any. Inside a transaction."""
        kept = next(self.db.query("SELECT * FROM kept WHERE job_id = ?", [job_id]), None)
        if kept is None or (identity is not None and identity != (kept["content_key"], kept["fingerprint"])):
            return False
        columns = json.loads(kept["job"])
        self.db.execute(
            f"UPDATE jobs SET {', '.join(f'{c} = ?' for c in columns)}, status = ?, words_complete = 1, errors = 0, "
            "last_error = NULL, retryable = 1, lease_owner = NULL, lease_expires = NULL, updated_at = ? WHERE id = ?",
            [*columns.values(), DONE, now, job_id])
        self.db.execute("DELETE FROM checkpoints WHERE job_id = ?", [job_id])
        self.db["checkpoints"].insert({"job_id": job_id, "seq": 1, "position": columns["progress"] or 0.0,
                                       "segments": kept["segments"], "state": None, "owner": "", "created_at": now})
        self.db.execute("DELETE FROM kept WHERE job_id = ?", [job_id])
        return True

    def retry(self, job_ids: Iterable[int]) -> list[tuple[Job, str]]:
        """Queue jobs again by hand: failed or stalled ones resume from their checkpoint with a
        fresh count of attempts, done ones are redone from scratch."""
        out = []
        now = time.time()
        for job_id in job_ids:
            with self.db.atomic():
                self.db.execute("UPDATE jobs SET updated_at = updated_at WHERE id = ?", [job_id])  # lock
                job = self.get(job_id)
                if job is None:
                    continue
                if job.status == RUNNING and not job.stalled(now):
                    action = BUSY
                elif job.status == DONE:
                    action = REDO
                    self._reset(job.id, job.content_key, job.fingerprint, json.dumps(job.spec, sort_keys=True),
                                job.output_stem, now)
                else:
                    action = RESUME
                    self.db.execute(
                        "UPDATE jobs SET status = ?, errors = 0, retryable = 1, lease_owner = NULL, "
                        "lease_expires = NULL, queued_at = ?, updated_at = ? WHERE id = ?",
                        [QUEUED, now, now, job.id])
            out.append((self.get(job_id), action))
        return out

    # --- running: leases ------------------------------------------------------------------

    def claim(self, owner: str, ids: Iterable[int], lease_seconds: float,
              spec: Optional[dict] = None) -> Optional[Job]:
        """Take the next queued (or stalled) job among ``ids`` for ``owner``, atomically; with
        ``spec``, only a job of that spec (files decoded side by side share one engine).

        One statement: SQLite runs it under its write lock, so two runners never get the same
        job. Jobs that failed less often go first, so a job being retried waits behind fresh ones.
        """
        now = time.time()
        same_spec = "" if spec is None else "AND spec = :spec "
        with self.db.atomic():
            rows = list(self.db.query(
                "UPDATE jobs SET status = :running, lease_owner = :owner, lease_expires = :expires, "
                "runs = runs + 1, started_at = :now, updated_at = :now "
                "WHERE id = (SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids)) "
                "AND (status = :queued OR (status = :running AND coalesce(lease_expires, 0) < :now)) "
                f"{same_spec}ORDER BY errors, id LIMIT 1) RETURNING *",
                {"running": RUNNING, "queued": QUEUED, "owner": owner, "expires": now + lease_seconds,
                 "now": now, "ids": json.dumps(list(ids)), "spec": json.dumps(spec, sort_keys=True)}))
        return Job.from_row(rows[0]) if rows else None

    def heartbeat(self, job_id: int, owner: str, lease_seconds: float) -> bool:
        """Extend the lease; False if this owner has lost it."""
        now = time.time()
        cursor = self.db.execute(
            "UPDATE jobs SET lease_expires = ? WHERE id = ? AND lease_owner = ? AND status = ?",
            [now + lease_seconds, job_id, owner, RUNNING])
        return cursor.rowcount == 1

    def expire_dead_leases(self, is_dead: Callable[[str], bool]) -> list[int]:
        """Expire at once the leases whose owner ``is_dead`` says is gone (a runner on this
        host that was killed), instead of waiting for them to time out."""
        expired = []
        for row in list(self.db.query("SELECT id, lease_owner FROM jobs WHERE status = ? AND "
                                      "coalesce(lease_expires, 0) >= ?", [RUNNING, time.time()])):
            if row["lease_owner"] and is_dead(row["lease_owner"]):
                cursor = self.db.execute(
                    "UPDATE jobs SET lease_expires = 0 WHERE id = ? AND lease_owner = ? AND status = ?",
                    [row["id"], row["lease_owner"], RUNNING])
                if cursor.rowcount:
                    expired.append(row["id"])
        return expired

    def _fenced(self, job_id: int, owner: str, sets: str, params: Sequence[Any]) -> None:
        """``UPDATE jobs SET <sets>`` for a job this owner holds; LeaseLost otherwise."""
        cursor = self.db.execute(f"UPDATE jobs SET {sets} WHERE id = ? AND lease_owner = ? AND status = ?",
                                 [*params, job_id, owner, RUNNING])
        if cursor.rowcount != 1:
            raise LeaseLost(f"job {job_id} is no longer held by {owner}")

    # --- running: progress ----------------------------------------------------------------

    def start(self, job_id: int, owner: str, content_key: str, duration: Optional[float],
              worker: Optional[str] = None) -> None:
        """Record what the runner found at the start: the duration, the process that will
        decode the file (``worker``), and if the file changed since it was queued, a new content
        key (its old words are dropped)."""
        now = time.time()
        with self.db.atomic():
            self._fenced(job_id, owner, "duration = ?, worker = ?, updated_at = ?", [duration, worker, now])
            cursor = self.db.execute(
                "UPDATE jobs SET content_key = ?, progress = 0, words_complete = 0, warnings = NULL "
                "WHERE id = ? AND content_key != ?", [content_key, job_id, content_key])
            if cursor.rowcount:
                self.db.execute("DELETE FROM checkpoints WHERE job_id = ?", [job_id])
                self.db.execute("DELETE FROM kept WHERE job_id = ?", [job_id])  # words of what the file was

    def set_worker(self, job_id: int, owner: str, worker: str) -> None:
        """The job moved to another process (a Ray worker restarted elsewhere)."""
        self._fenced(job_id, owner, "worker = ?, updated_at = ?", [worker, time.time()])

    def checkpoint(self, job_id: int, owner: str, segments: Sequence[Segment], state: Optional[dict],
                   position: float, language: Optional[str], model: Optional[str], lease_seconds: float,
                   complete: bool = False, language_probability: Optional[float] = None,
                   warnings: Sequence[str] = ()) -> int:
        """Commit new segments and the engine state after them, in one transaction; the
        checkpoint's number. ``state=None`` with ``complete`` only marks the words complete.
        ``warnings``: the decoder's, kept on the job (none: those kept stay)."""
        now = time.time()
        with self.db.atomic():
            self._fenced(job_id, owner, "progress = max(progress, ?), language = coalesce(?, language), "
                         "language_probability = coalesce(?, language_probability), "
                         "model = coalesce(?, model), warnings = coalesce(?, warnings), words_complete = ?, "
                         "lease_expires = ?, updated_at = ?",
                         [position, language, language_probability, model,
                          json.dumps(list(warnings), ensure_ascii=False) if warnings else None, int(complete),
                          now + lease_seconds, now])
            seq = self.db.execute("SELECT coalesce(max(seq), 0) FROM checkpoints WHERE job_id = ?",
                                  [job_id]).fetchone()[0]
            if state is None and not segments:
                return seq
            seq += 1
            self.db["checkpoints"].insert({
                "job_id": job_id, "seq": seq, "position": position, "segments": segments_to_json(segments),
                "state": json.dumps(state) if state is not None else None, "owner": owner, "created_at": now})
            self.db.execute("UPDATE checkpoints SET state = NULL WHERE job_id = ? AND seq < ? "
                            "AND state IS NOT NULL", [job_id, seq])
        return seq

    def finish(self, job_id: int, owner: str, outputs: Sequence[str]) -> None:
        """The job is done: its outputs, as they are now (``outputs`` records them), are its."""
        now, signed = time.time(), self.signed(outputs)
        with self.db.atomic():
            self._fenced(job_id, owner, "status = ?, outputs = ?, progress = coalesce(nullif(duration, 0), "
                         "progress), last_error = NULL, lease_owner = NULL, "
                         "lease_expires = NULL, updated_at = ?, finished_at = ?",
                         [DONE, json.dumps([str(p) for p in outputs]), now, now])
            self._record_outputs(job_id, signed, now)
            self.db.execute("DELETE FROM kept WHERE job_id = ?", [job_id])  # the redo is done: its words hold

    def release(self, job_id: int, owner: str) -> None:
        """Give a job back to the queue (stopped by a signal); its checkpoint stays."""
        now = time.time()
        with self.db.atomic():
            self._fenced(job_id, owner, "status = ?, lease_owner = NULL, lease_expires = NULL, updated_at = ?",
                         [QUEUED, now])

    def fail(self, job_id: int, owner: str, error: str, retryable: bool, max_attempts: int) -> str:
        """Record a failed attempt; the job is queued again while it has attempts left and the
        error may go away, else failed. Returns the new status: ``failed`` also for a redo that
        gave up, whose job is done again with its last good words (``_restore_kept``)."""
        now = time.time()
        with self.db.atomic():
            self._fenced(
                job_id, owner,
                "errors = errors + 1, last_error = ?, retryable = ?, "
                "status = CASE WHEN ? AND errors + 1 < ? THEN ? ELSE ? END, "
                "lease_owner = NULL, lease_expires = NULL, updated_at = ?, "
                "finished_at = CASE WHEN ? AND errors + 1 < ? THEN finished_at ELSE ? END",
                [error, int(retryable), int(retryable), max_attempts, QUEUED, FAILED, now,
                 int(retryable), max_attempts, now])
            status = self.get(job_id).status
            if status == FAILED:
                self._restore_kept(job_id, now)
        return status
