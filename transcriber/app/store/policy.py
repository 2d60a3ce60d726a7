"""The job store's rules, as pure functions of what the caller found: what an enqueue does with
a file that already has a job (``decide``), what a retry does (``retry_action``), whether a job
may replace an existing output file (``refusal``), and the status ``transcribe status`` shows
(stalled, following: ``runner_status``; gone: ``gone_or``).

No SQL, no file reads, no clock: the facts come in as arguments (whether a file exists, whether
it changed since this tool wrote it, whether the lease owner is dead), gathered by the callers
(transcriber/app/run/outputs.py and transcriber/app/run/discover.py read files, transcriber/app/store/lease.py judges owners, the store
reads rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Optional

from transcriber.app.store.domain import (BUSY, DONE, FAILED, FAILED_BEFORE, FOLLOWING, GONE, NO_SPEECH, OUTPUTS, QUEUED, REDO,
                                          RESUME, RUNNING, SKIP, STALLED, STATUSES, Job, OutputRecord, Request)


def decide(job: Job, request: Request, force: bool, outputs_present: Callable[[Iterable[str]], bool],
           now: float) -> str:
    """What an enqueue does with ``request`` for a file that already has ``job``: BUSY, REDO,
    SKIP, OUTPUTS, FAILED_BEFORE or RESUME. ``outputs_present(paths)``: whether a done job's
    outputs are all there."""
    if job.status == RUNNING and not job.stalled(now):
        return BUSY
    if force or job.content_key != request.content_key or job.fingerprint != request.fingerprint:
        return REDO
    same_outputs = job.spec == request.spec  # (dicts: no JSON made per job)
    if job.status == DONE:
        # a file without speech, only subtitles asked for: no file was written, none is missing
        present = outputs_present(job.outputs) or (not job.outputs and NO_SPEECH in job.warnings)
        return SKIP if same_outputs and present else OUTPUTS
    if job.status == FAILED and not job.retryable:
        return FAILED_BEFORE
    return RESUME  # queued, stalled, or failed for a reason that may have gone away


def retry_action(job: Job, now: float) -> str:
    """What ``retry`` does with a job: BUSY under a live lease, REDO (from scratch) a done one,
    else RESUME from its checkpoint."""
    if job.status == RUNNING and not job.stalled(now):
        return BUSY
    return REDO if job.status == DONE else RESUME


def refusal(path: Path, record: Optional[OutputRecord], job_path: str, job_stem: str,
            listed: Iterable[str] = (), changed: bool = False, holds_would_write: bool = False) -> Optional[str]:
    """Why the job of (``job_path``, ``job_stem``) must not replace ``path``, an existing file
    (``record``: what this tool wrote there, if anything); None when it may. ``listed``: the
    job's own list of outputs, which vouches for a file written before outputs were recorded
    (a database of an older version). ``changed``: the file differs from ``record``.
    ``holds_would_write``: the file holds exactly what the job is about to write there: one of
    no record is then taken as the job's (written by a run whose database was lost).
    (transcriber/app/run/outputs.py's ``output_refusal`` reads those facts from the file.)"""
    if record is None and str(path) in listed:
        return None
    if record is None and holds_would_write:
        return None
    if record is None:
        return f"{path} exists and was not written by transcribe; --force replaces it"
    if (record.job_path, record.job_stem) != (job_path, job_stem):
        return f"{path} holds the transcript of another file ({record.job_path}); --force replaces it"
    if changed:
        return f"{path} was changed since transcribe wrote it; --force replaces it"
    return None


def shown_statuses() -> tuple[str, ...]:
    """The statuses ``status`` shows: the store's, then following, stalled and gone."""
    return (*STATUSES, FOLLOWING, STALLED, GONE)


def runner_status(job: Job, now: float, is_dead: Callable[[str], bool]) -> str:
    """The status shown before looking at the job's file: ``stalled`` for a running job whose
    runner is gone (its lease expired, or ``is_dead(lease_owner)``: asked only of a running
    job's live lease), ``following`` for a running followed source, else the stored one."""
    status = job.status
    if status == RUNNING and (job.stalled(now) or (job.lease_owner and is_dead(job.lease_owner))):
        status = STALLED
    if status == RUNNING and job.following:
        status = FOLLOWING
    return status


def looks_at_file(status: str) -> bool:
    """Whether a job shown with this status is shown ``gone`` when its file is (``gone_or``)."""
    return status in (QUEUED, STALLED, FAILED)


def gone_or(status: str, exists: Optional[bool]) -> str:
    """``gone`` for a job of a status that says its file should be there and it is not
    (``exists`` False; None: not known), else ``status``."""
    return GONE if looks_at_file(status) and exists is False else status
