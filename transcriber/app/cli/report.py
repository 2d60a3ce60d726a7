"""What the reporting commands print: ``transcribe status``'s table, count line and JSON (each
job with the status it is shown in: transcriber/app/store/policy.py's rules, with the looks at the files they
need), ``transcribe models``' table, and the closing lines of a run (``summary``).

The click commands themselves are transcriber/app/cli/main.py's; this module is imported when one of them runs.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import time
from collections import Counter
from typing import Callable, Iterable, Iterator, Optional

import click

from transcriber import ReadTimeout, bounded, bounded_each

from transcriber.app.run.attempt import RunResult, with_path
from transcriber.app.run.discover import STAT
from transcriber.app.store.domain import DONE, FAILED, Job
from transcriber.app.run.enqueue import CommandJobs
from transcriber.app.store.lease import owner_is_dead
from transcriber.app.store.policy import gone_or, looks_at_file, runner_status, shown_statuses
from transcriber.app.cli.progress import printable

LOOK_CHUNK = 1000  # jobs whose files one request to the reader looks at (``shown_jobs``)


def shown_status(job: Job, now: float, exists: Optional[bool] = None) -> str:
    """The one status ``status`` shows, in its table, count line and JSON alike (transcriber/app/store/policy.py's
    ``runner_status`` and ``gone_or``): ``stalled``, ``following``, ``gone``, else the stored one.
    ``exists``: whether the job's file exists, if known (else looked at now, with the bound on
    reads; a file that does not answer is taken to exist)."""
    status = runner_status(job, now, owner_is_dead)
    if exists is None and looks_at_file(status):
        with contextlib.suppress(ReadTimeout):
            exists = bounded(os.path.lexists, job.path)
    return gone_or(status, exists)


def shown_jobs(jobs: Iterable[Job], now: float, warn: Callable[[str], None]) -> Iterator[tuple[Job, str]]:
    """Each job with its ``shown_status``, read as consumed (flat memory). Whether the files of
    the jobs not done still exist is looked at LOOK_CHUNK jobs at a time, by the reader with the
    bound on reads (``bounded_each``), by folder: a folder that does not answer costs one bound,
    is told once to ``warn``, and its jobs are shown as stored."""
    jobs, told = iter(jobs), set()
    while chunk := list(itertools.islice(jobs, LOOK_CHUNK)):
        statuses = [runner_status(job, now, owner_is_dead) for job in chunk]
        looked = [job.path for job, status in zip(chunk, statuses) if looks_at_file(status)]
        found = dict(zip(looked, bounded_each(os.path.lexists, looked, what=STAT, key_of=os.path.dirname)))
        for job, status in zip(chunk, statuses):
            exists = found.get(job.path, True)
            if isinstance(exists, ReadTimeout):
                if os.path.dirname(job.path) not in told:
                    told.add(os.path.dirname(job.path))
                    warn(f"warning: cannot tell whether {job.path} still exists: {exists.strerror}")
                exists = True
            yield job, gone_or(status, exists)


def _note(job: Job) -> str:
    """The error of a failed (or retrying) job; the warnings of a done one."""
    if job.status == FAILED or (job.last_error and job.status != DONE):
        prefix = "" if job.status == FAILED else f"error {job.errors}x, retrying: "
        return prefix + (job.last_error or "")
    return "; ".join(f"warning: {w}" for w in job.warnings)


def _language(job: Job) -> str:
    """"de (0.98)" when detected, "en" when given, "-" before decoding."""
    if not job.language:
        return "-"
    if job.language_probability is None:
        return job.language
    return f"{job.language} ({job.language_probability:.2f})"


def status_table(jobs: list[tuple[Job, str]]) -> str:
    """The table of (job, its shown status) pairs."""
    header = ("ID", "STATUS", "PROGRESS", "RUNS", "LANGUAGE", "WORKER", "UPDATED", "FILE", "NOTE")
    rows = [(str(j.id), shown, f"{_clock(j.progress)}/{_clock(j.duration)}", str(j.runs),
             _language(j), j.worker or "-", _when(j.updated_at), printable(j.path), printable(_note(j)))
            for j, shown in jobs]
    return "\n".join(_table(header, rows))


def show_table(jobs: list[tuple[Job, str]], statuses: tuple[str, ...]) -> None:
    """``status``'s table of (job, its shown status) pairs and its count line."""
    if not jobs:
        click.echo("no jobs" + (f" with status {', '.join(statuses)}" if statuses else ""))
        return
    click.echo(status_table(jobs))
    counts = Counter(s for _, s in jobs)
    click.echo(", ".join(f"{counts[s]} {s}" for s in shown_statuses() if counts[s]))


def write_json_array(items) -> None:
    """A JSON array written item by item: flat memory for any number of jobs."""
    out = sys.stdout
    separator = "[\n  "
    for item in items:
        out.write(separator + json.dumps(item, ensure_ascii=False))
        separator = ",\n  "
    out.write("[]\n" if separator.startswith("[") else "\n]\n")


def _when(t: Optional[float]) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _clock(seconds: Optional[float]) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _megabytes(size: Optional[int]) -> str:
    return "-" if size is None else f"{size / 1e6:.0f} MB"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns; the last one is not padded."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths)), r[-1]]).rstrip() for r in [header, *rows]]


def models_table(catalog) -> str:
    """The known models as a table, then the cache's conversions of model folders."""
    rows = []
    for m in (m for m in catalog.models if m.known):
        if not m.installed:
            cache = m.install
        elif not m.converted:
            cache = "not converted yet (done once, at first use)"
        else:
            cache = (f"converted{', checked' if m.checked else ', not checked yet'}, "
                     f"{_megabytes(m.cache_size)}: {m.cache}")
        rows.append((m.name, m.languages, "yes" if m.installed else "no", _megabytes(m.size), cache))
    lines = _table(("NAME", "LANGUAGES", "INSTALLED", "SIZE", "CACHE"), rows)
    others = [(m.name, m.languages, _megabytes(m.cache_size), f"{m.source or '?'}{'' if m.installed else ' (gone)'}")
              for m in catalog.models if not m.known]
    if others:
        lines += ["", "Converted from model folders (--model PATH):",
                  *_table(("CACHED AS", "LANGUAGES", "SIZE", "FROM"), others)]
    lines += ["", f"Cache folder: {catalog.folder} ($TRANSCRIBER_CACHE moves it)"]
    return "\n".join(lines)


def summary(jobs: CommandJobs, result: RunResult) -> tuple[list[str], int]:
    """The closing lines of a run and its exit status: 1 if any file failed, 128 + the signal
    if a signal stopped it, else 0."""
    failed = len(jobs.failed) + len(result.failed)
    refused = jobs.refused + result.refused
    parts = [f"{len(result.done)} done", f"{len(jobs.skipped) + len(refused)} skipped", f"{failed} failed"]
    if jobs.busy or result.lost:
        parts.append(f"{len(jobs.busy) + len(result.lost)} left to another runner")
    lines = [", ".join(parts)]
    # the runner printed its failures as they happened ("error: ..."): only those found before
    # running (missing, unreadable, failed before) are told here, so each error shows once
    lines += [f"skipped: {path}: {reason}" for path, reason in refused]
    lines += [f"failed: {with_path(path, reason)}" for path, reason in jobs.failed]
    if result.stopped is not None:
        lines.append("stopped: unfinished files stay queued; run the same command again to resume")
    code = 1 if failed else (128 + result.stopped if result.stopped is not None else 0)
    return lines, code
