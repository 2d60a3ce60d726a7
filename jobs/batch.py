"""A command's batch: files -> jobs in the store, and the summary of what became of them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from transcriber import bounded_each

from .discover import content_key, output_stem, resolved, resolved_place
from .attempt import RunResult, with_path
from .lease import owner_is_dead
from .spec import JobSpec
from .store import BUSY, FAILED_BEFORE, NEW, REDO, REFUSED, SKIP, Job, JobStore, OutputRecord, Request, refusal


@dataclass
class Batch:
    """The jobs one command asked for."""

    to_run: list[int] = field(default_factory=list)
    skipped: list[Job] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, reason), found before running
    busy: list[Job] = field(default_factory=list)  # being run by another runner
    refused: list[tuple[str, str]] = field(default_factory=list)  # (path, why): outputs not ours to replace

    def add(self, job: Job, action: str) -> None:
        if action == SKIP:
            self.skipped.append(job)
        elif action == BUSY:
            self.busy.append(job)
        elif action == FAILED_BEFORE:
            self.failed.append((job.path, f"{job.last_error} (failed before; unchanged since)"))
        elif job.id not in self.to_run:
            self.to_run.append(job.id)


def request_for(source: Path, root: Optional[Path], output_dir: Optional[Path], spec: JobSpec) -> Request:
    """OSError if the file cannot be read, ValueError if its name cannot be stored."""
    path = resolved(source)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("the file name is not valid UTF-8; rename it") from None
    stem = output_stem(source, root, output_dir)
    return Request(path=path, content_key=content_key(path), fingerprint=spec.fingerprint(),
                   spec=spec.stored(), output_stem=resolved_place(stem))


class NameClash(ValueError):
    """Two inputs of one command would write the same output file: a usage error, before
    anything is queued."""


def check_clashes(requests: Iterable[tuple[str, Request]], spec: JobSpec) -> None:
    """NameClash naming both inputs (as given) when two requests would write one file."""
    owner: dict[str, str] = {}
    for given, request in requests:
        for path in spec.output_names(request.output_stem, spec.named_language()):
            if path in owner:
                raise NameClash(f"{owner[path]} and {given} would both write {path}: transcribe them into "
                                f"different --output-dir folders, or name their common folder (its "
                                f"subfolders are mirrored under --output-dir)")
            owner[path] = given


def refusals(store: JobStore, request: Request, spec: JobSpec, job: Optional[Job] = None,
             records: Optional[dict[str, OutputRecord]] = None) -> Optional[str]:
    """Why this request must not write its outputs: one of them exists and was not written by
    this tool for this file and place, or changed since (None: free to write). ``job``: the
    request's job, if it has one; ``records``: the store's output records, read once for a
    whole batch (else read for these paths)."""
    names = spec.output_names(request.output_stem, spec.named_language())
    present = [name for name in names if os.path.lexists(name)]
    if not present:
        return None
    records = store.output_records(present) if records is None else records
    listed = job.outputs if job else ()
    reasons = (refusal(Path(p), records.get(p), request.path, request.output_stem, listed) for p in present)
    return next(filter(None, reasons), None)


def enqueue_files(store: JobStore, files: Iterable[tuple[Path, Optional[Path]]], spec: JobSpec,
                  output_dir: Optional[Path], force: bool = False, batch: Optional[Batch] = None) -> Batch:
    """Queue the files; NameClash before anything is queued when two would write one output.
    An output this tool did not write (or that changed since) is reported as a skip with the
    reason, unless ``force``: then the job takes it over and replaces it."""
    batch = batch or Batch()
    store.expire_dead_leases(owner_is_dead)  # a killed runner's jobs are resumed, not "busy"
    requests, files = [], list(files)
    # every file's stat and content key read in a child process (bounded_each) with a bound per
    # file: a file on a hung mount fails alone (ReadTimeout), the others are queued
    made = bounded_each(lambda file: request_for(*file, output_dir, spec), files, path_of=lambda file: file[0])
    for (source, _), request in zip(files, made):
        if isinstance(request, OSError):
            batch.failed.append((str(source), f"cannot read {str(source)!r}: {request.strerror or request}"))
        elif isinstance(request, ValueError):
            batch.failed.append((str(source), str(request)))  # printed escaped (progress.printable)
        elif isinstance(request, Exception):
            raise request
        else:
            requests.append((str(source), request))
    check_clashes(requests, spec)
    given = {request.path: name for name, request in requests}
    records = store.output_records()

    def vet(request: Request, job: Optional[Job]) -> Optional[str]:
        why = refusals(store, request, spec, job, records)
        if why:
            batch.refused.append((given[request.path], why))
        return why

    for job, action in store.enqueue_many([r for _, r in requests], force=force, vet=None if force else vet):
        if action == REFUSED:
            continue
        if force and action in (NEW, REDO):  # what it replaces is the job's now
            store.record_outputs(job.id, [str(p) for p in spec.output_paths(job.output_stem, spec.named_language())
                                          if p.exists()])
        batch.add(job, action)
    return batch


def summary(batch: Batch, result: RunResult) -> tuple[list[str], int]:
    """The closing lines of a run and its exit status: 1 if any file failed, 128 + the signal
    if a signal stopped it, else 0."""
    failed = len(batch.failed) + len(result.failed)
    parts = [f"{len(result.done)} done", f"{len(batch.skipped) + len(batch.refused)} skipped", f"{failed} failed"]
    if batch.busy or result.lost:
        parts.append(f"{len(batch.busy) + len(result.lost)} left to another runner")
    lines = [", ".join(parts)]
    # the runner printed its failures as they happened ("error: ..."): only those found before
    # running (missing, unreadable, failed before) are told here, so each error shows once
    lines += [f"skipped: {path}: {reason}" for path, reason in batch.refused]
    lines += [f"failed: {with_path(path, reason)}" for path, reason in batch.failed]
    if result.stopped is not None:
        lines.append("stopped: unfinished files stay queued; run the same command again to resume")
    code = 1 if failed else (128 + result.stopped if result.stopped is not None else 0)
    return lines, code
