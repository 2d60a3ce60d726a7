"""What the job store holds, as plain types: a job, a request to transcribe a file, what a job
has committed, the outputs this tool wrote, and the words for statuses and enqueue actions.

No SQL and no file reads here: the store (transcriber/app/store/jobstore.py, the protocol; transcriber/app/store/sqlite_store.py,
SQLite behind it), the policy (transcriber/app/store/policy.py) and the commands all speak in these types.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from transcriber import Segment

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
STATUSES = (QUEUED, RUNNING, DONE, FAILED)
# What ``transcribe status`` shows besides: a running job whose runner is gone, a job not done
# whose input file is gone (deleted or renamed)
STALLED, GONE = "stalled", "gone"
FOLLOWING = "following"  # a running job whose source is followed as it is made (transcriber/app/run/follow.py)

# What ``enqueue``/``retry`` did with a path or job.
NEW = "new"  # first time seen: queued
REDO = "redo"  # content, options changed or --force: queued from scratch, old words dropped
RESUME = "resume"  # queued again with its checkpoint (interrupted, stalled or a transient failure)
OUTPUTS = "outputs"  # done, only the output settings changed or outputs are missing: rewrite them
SKIP = "skip"  # done with the same content and options, outputs present
FAILED_BEFORE = "failed"  # failed on its input (unreadable media); retried when the file changes
BUSY = "busy"  # running under another runner's live lease
REFUSED = "refused"  # would replace an output that is not its own (enqueue_many's ``vet``): left as it was
DEFAULT_TIMEOUT = 30.0  # seconds the store waits for another process's lock (--db-timeout)
# The note a job without speech keeps (with the decoder's warnings): its run line and
# ``transcribe status`` say it, and it has no subtitle file (transcriber.subtitles.files.render_outputs).
NO_SPEECH = "no speech"
PENDING = ""  # the signature of an output being written (``JobStore.expect_outputs``)


@dataclass(frozen=True)
class Job:
    """One input file to transcribe into one place (``output_stem``), and where it stands."""

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
    following: bool = False  # its source is followed as it is made (transcriber/app/run/follow.py)
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

    def stalled(self, now: Optional[float] = None) -> bool:
        """Running, but its runner's lease has expired (the runner died or hung)."""
        return self.status == RUNNING and (self.lease_expires or 0) < (now or time.time())

    def to_dict(self, status: Optional[str] = None) -> dict:
        """The job as plain data; ``status``: the one shown (``stalled``, ``gone``: see
        transcriber/app/cli/report.py's ``shown_status``), with ``stalled`` true exactly when it says so."""
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
class FileSignature:
    """What an output file held when this tool wrote it: size and mtime catch a change for the
    price of a stat(); the SHA-256 of the whole (small) file decides when they differ."""

    size: int
    mtime_ns: int
    sha256: str


@dataclass(frozen=True)
class OutputRecord:
    """A file this tool wrote: for which job, and what it held then."""

    path: str
    job_id: int
    signature: FileSignature
    job_path: Optional[str]  # the job's input and output stem (None: the job was deleted)
    job_stem: Optional[str]


@dataclass(frozen=True)
class Request:
    """Asking for one file to be transcribed."""

    path: str  # resolved absolute path: the job's identity
    content_key: str
    fingerprint: str
    spec: dict
    output_stem: str
    output_root: Optional[str] = None  # the output folder the command named (-o); None: the input's
    following: bool = False  # a source followed as it is made (transcriber/app/run/follow.py), not a finished file


# Asked by an enqueue before a file is queued to write outputs: a reason not to, or None.
Vet = Callable[[Request, Optional[Job]], Optional[str]]


def owner_id() -> str:
    """``host:pid:nonce``: names a runner, and lets one on the same host see that it died."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


class StoreError(Exception):
    """The database cannot be opened or used (one line, for the CLI)."""


class DatabaseLocked(StoreError):
    """Another process held the database's lock for longer than the store's timeout."""


class NewerDatabase(StoreError):
    """The database was migrated by a newer version of this program."""


class DatabaseGone(StoreError):
    """The database file a command opened was deleted, truncated or replaced under it: the
    command stops, and writes nothing more, to it or to the file now at its path."""


class LeaseLost(Exception):
    """This runner no longer owns the job: another runner took it over."""
