"""The job store: what the commands and runners ask of the place jobs are kept (``JobStore``),
and the one function that opens it (``connect``).

Callers type against the ``JobStore`` protocol and speak in transcriber/app/store/domain.py's types; the rules
the store applies are transcriber/app/store/policy.py's. The store itself is SQLite (transcriber/app/store/sqlite_store.py, its
schema in transcriber/app/store/migrations.py): another database would be another class with these methods,
opened by ``connect``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Optional, Protocol, Sequence

from transcriber import Segment
from transcriber.app import settings

from transcriber.app.store.domain import DEFAULT_TIMEOUT, Job, OutputRecord, Request, Resume, Vet


def default_path() -> Path:
    """``$TRANSCRIBER_DB`` is handled by the CLI; this is the user data directory's file."""
    return settings.data_folder() / "transcriber" / "jobs.db"


def connect(path: Path, timeout: float = DEFAULT_TIMEOUT,
            on_wait: Optional[Callable[[str], None]] = None) -> JobStore:
    """The job store at ``path`` (SQLite), made or migrated to this version (StoreError, one
    line, when it cannot be). ``timeout``: seconds to wait for another process's lock (then
    DatabaseLocked); ``on_wait(message)`` is told when a wait lasts more than a few seconds."""
    from transcriber.app.store.sqlite_store import SqliteJobStore  # SQLite: loaded only by a command that opens the store

    return SqliteJobStore(path, timeout=timeout, on_wait=on_wait)


class JobStore(Protocol):
    """Jobs, their checkpoints and the outputs written for them; safe to share between
    processes. Every write a runner makes for a job is fenced on its lease: LeaseLost once
    another runner took the job over. StoreError (one line) when the store cannot be used."""

    def close(self) -> None: ...
    def __enter__(self) -> JobStore: ...
    def __exit__(self, *exc) -> None: ...

    def reopen(self) -> JobStore:
        """Another connection to the very same store, for another thread (a lease's heartbeat);
        DatabaseGone if the store was lost since."""

    # --- reading
    def get(self, job_id: int) -> Optional[Job]: ...

    def by_path(self, path: str) -> Optional[Job]:
        """The file's job (the latest one, when it was sent to several output folders)."""

    def jobs(self, statuses: Optional[Iterable[str]] = None, ids: Optional[Iterable[int]] = None) -> list[Job]: ...

    def each_job(self) -> Iterable[Job]:
        """Every job, in id order, read as it is consumed (flat memory for any number of jobs)."""

    def checkpoints(self, job_id: int) -> list[dict]:
        """The checkpoint rows of a job, in order, without their (large) payloads."""

    def resume_point(self, job_id: int) -> Resume: ...

    # --- the outputs this tool wrote
    def output_records(self, paths: Optional[Iterable[str]] = None) -> dict[str, OutputRecord]: ...
    def outputs_for(self, requests: Sequence[Request]) -> dict[tuple[str, str], list[str]]: ...
    def expect_outputs(self, job_id: int, paths: Iterable[str]) -> None: ...
    def record_outputs(self, job_id: int, paths: Iterable[str]) -> None: ...

    # --- enqueueing (what was done: transcriber/app/store/domain.py's actions, decided by transcriber/app/store/policy.py)
    def enqueue(self, request: Request, force: bool = False,
                outputs_present: Callable[[Iterable[str]], bool] = ...) -> tuple[Job, str]:
        """Queue a file unless it is done with the same content and options; (the job, what was
        done). A new or redone job takes the request's ``following`` (``Job.following``)."""

    def enqueue_many(self, requests: Sequence[Request], force: bool = False,
                     outputs_present: Callable[[Iterable[str]], bool] = ...,
                     vet: Optional[Vet] = None) -> list[tuple[Optional[Job], str]]: ...

    def retry(self, job_ids: Iterable[int]) -> list[tuple[Job, str]]: ...

    # --- running: leases
    def claim(self, owner: str, ids: Iterable[int], lease_seconds: float,
              spec: Optional[dict] = None) -> Optional[Job]: ...

    def heartbeat(self, job_id: int, owner: str, lease_seconds: float) -> bool: ...
    def expire_dead_leases(self, is_dead: Callable[[str], bool]) -> list[int]: ...

    # --- running: progress
    def start(self, job_id: int, owner: str, content_key: str, duration: Optional[float],
              worker: Optional[str] = None) -> None: ...

    def set_worker(self, job_id: int, owner: str, worker: str) -> None: ...

    def adopt_content(self, job_id: int, owner: str, content_key: str) -> None:
        """The job's file now holds ``content_key``'s content by the job's own doing (its
        subtitles embedded in place): its words stay, and the next run sees it unchanged."""

    def checkpoint(self, job_id: int, owner: str, segments: Sequence[Segment], state: Optional[dict],
                   position: float, language: Optional[str], model: Optional[str], lease_seconds: float,
                   complete: bool = False, language_probability: Optional[float] = None,
                   warnings: Sequence[str] = ()) -> int: ...

    def finish(self, job_id: int, owner: str, outputs: Sequence[str]) -> None: ...
    def release(self, job_id: int, owner: str) -> None: ...
    def fail(self, job_id: int, owner: str, error: str, retryable: bool, max_attempts: int) -> str: ...
