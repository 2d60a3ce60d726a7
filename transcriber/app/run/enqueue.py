"""Enqueueing: the files a command found become jobs in the store (``enqueue_files``), their
existing outputs checked first (``OutputsSeen``), and what became of each is sorted into the
command's ``CommandJobs`` (to run, skipped, failed, busy, refused).

(Not to be confused with files decoded side by side, ``transcriber.Engine.batch``.)"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

from transcriber import bounded_each

from transcriber.app.run.discover import STAT, identify, identify_found, unwritable
from transcriber.app.store.domain import BUSY, FAILED_BEFORE, NEW, PENDING, REDO, REFUSED, SKIP, Job, OutputRecord, Request
from transcriber.app.store.lease import owner_is_dead
from transcriber.app.run.outputs import output_states
from transcriber.app.store.policy import refusal
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.jobstore import JobStore


@dataclass
class CommandJobs:
    """The jobs one command asked for, by what became of them."""

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
    return request_of(identify(source, root, output_dir), spec, output_dir)


def request_of(identity: tuple[str, str, str], spec: JobSpec, output_dir: Optional[Path] = None) -> Request:
    """The Request of a file's ``identify`` (its path, content key and outputs' stem), its
    outputs kept inside ``output_dir`` (None: the input's folder)."""
    path, key, stem = identity
    root = None if output_dir is None else os.path.realpath(output_dir)
    if root is None and os.path.dirname(stem) != os.path.dirname(path):
        # a symbolic link named: its outputs go beside the link (the folder named), not its target's
        root = os.path.dirname(stem)
    return Request(path=path, content_key=key, fingerprint=spec.fingerprint(), spec=spec.stored(), output_stem=stem,
                   output_root=root)


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


class OutputsSeen:
    """The requests' existing outputs (which are there, which changed since this tool wrote
    them), read before the enqueue's transaction, all at once: by the reader, with the bound on
    reads (``bounded_each``), each request's outputs an item, keyed by their folder. An outputs'
    folder that does not answer costs one bound, and its requests are ``hung``: failed at
    enqueue, in one line naming it (not queued: a later run looks again)."""

    def __init__(self, store: JobStore, requests: Sequence[Request], spec: JobSpec,
                 records: Optional[dict[str, OutputRecord]] = None, adopt: bool = True):
        """``adopt``: a new job's outputs of no record are left to the attempt, which takes
        those holding exactly what it writes (False: refused here, as a followed source's are:
        its outputs are written while it is still being made)."""
        self.spec, self.adopt = spec, adopt
        listed = store.outputs_for(requests) if requests else {}
        paths = [self.names(r.output_stem) + listed.get((r.path, r.output_stem), []) for r in requests]
        self.records = store.output_records([p for ps in paths for p in ps]) if records is None else records
        items = [[(p, self._written(p)) for p in dict.fromkeys(ps)] for ps in paths]
        states = bounded_each(output_states, items, path_of=_folder, what=STAT, key_of=_folder)
        self.states: dict[str, tuple[bool, bool, bool]] = {}  # path -> output_states' (present, exists, changed)
        self.hung: dict[str, str] = {}  # request path -> why its outputs could not be checked
        for request, item, got in zip(requests, items, states):
            if isinstance(got, Exception):  # a ReadTimeout (or the reader died)
                self.hung[request.path] = f"cannot check the outputs in {_folder(item)!r}: {got.strerror or got}"
            else:
                self.states.update(zip((p for p, _ in item), got))

    def names(self, stem: str) -> list[str]:
        """The output paths of a job of this spec with this stem."""
        return self.spec.output_names(stem, self.spec.named_language())

    def exists(self, path: str) -> bool:
        return self.states.get(path, (False, False))[1]

    def dangling(self, path: str) -> bool:
        """A name that is there but leads to no file (a symbolic link to nothing)."""
        present, exists = self.states.get(path, (False, False))[:2]
        return present and not exists

    def _written(self, path: str) -> Optional[tuple]:
        """What this tool wrote at ``path``, as ``output_states`` takes it (a tuple: 10,000 of
        them pickle in a fraction of the time dataclasses take), or None."""
        sig = record.signature if (record := self.records.get(path)) is not None else None
        return (sig.size, sig.mtime_ns, sig.sha256) if sig is not None and sig.sha256 != PENDING else None

    def refusal(self, request: Request, job: Optional[Job] = None) -> Optional[str]:
        """Why this request must not write its outputs: one of them exists and was not written by
        this tool for this file and place, or changed since (None: free to write). ``job``: the
        request's job, if it has one. (A path not read before is taken as absent: the attempt
        looks again before it writes.)"""
        present = [p for p in self.names(request.output_stem) if self.states.get(p, (False,))[0]]
        if job is None and self.adopt:  # a file of no record, for a new job: whether it is what the job would write
            # is known once the job has its words (the attempt); the input itself never is
            present = [p for p in present if p in self.records or p == request.path]
        listed = job.outputs if job else ()
        reasons = (refusal(Path(p), self.records.get(p), request.path, request.output_stem, listed,
                           changed=self.states[p][2]) for p in present)
        return next(filter(None, reasons), None)

    def all_exist(self, paths: Iterable[str]) -> bool:
        """Whether each of these outputs (a done job's) exists: the store's ``outputs_present``."""
        paths = list(paths)
        return bool(paths) and all(map(self.exists, paths))


def _folder(outputs: list[tuple[str, Optional[tuple]]]) -> str:
    """The folder of a request's outputs (``output_states``' item)."""
    return os.path.dirname(outputs[0][0])


def _unwritable(requests: Sequence[Request]) -> dict[str, str]:
    """The output folders of ``requests`` that cannot be written, with why (each folder asked
    once, by the reader, with the bound: a hung one is left to the attempt to find)."""
    folders = list(dict.fromkeys(os.path.dirname(r.output_stem) for r in requests))
    found = bounded_each(unwritable, folders, what=STAT, key_of=lambda folder: folder)
    return {folder: why for folder, why in zip(folders, found) if isinstance(why, str)}


def enqueue_files(store: JobStore, files: Iterable[tuple[Path, Optional[Path]]], spec: JobSpec,
                  output_dir: Optional[Path], force: bool = False, jobs: Optional[CommandJobs] = None) -> CommandJobs:
    """Queue the files; NameClash before anything is queued when two would write one output.
    An output this tool did not write (or that changed since) is reported as a skip with the
    reason, unless ``force``: then the job takes it over and replaces it."""
    jobs = jobs or CommandJobs()
    store.expire_dead_leases(owner_is_dead)  # a killed runner's jobs are resumed, not "busy"
    requests, files = [], list(files)
    # every file's stat and content key read by the reader (bounded_each) with a bound per file:
    # a file on a hung mount fails alone (ReadTimeout), the others are queued
    # (the reader imports transcriber.app.run.discover only: the Requests are made here)
    made = bounded_each(functools.partial(identify_found, output_dir=output_dir), files, path_of=lambda file: file[0])
    for (source, _), identity in zip(files, made):
        if isinstance(identity, OSError):
            jobs.failed.append((str(source), f"cannot read {str(source)!r}: {identity.strerror or identity}"))
        elif isinstance(identity, ValueError):
            jobs.failed.append((str(source), str(identity)))  # printed escaped (progress.printable)
        elif isinstance(identity, Exception):
            raise identity
        else:
            requests.append((str(source), request_of(identity, spec, output_dir)))
    check_clashes(requests, spec)
    given = {request.path: name for name, request in requests}
    seen = OutputsSeen(store, [r for _, r in requests], spec, store.output_records())
    jobs.failed += [(given[path], why) for path, why in seen.hung.items()]
    wanted = [r for _, r in requests if r.path not in seen.hung]
    blocked = _unwritable(wanted)

    def vet(request: Request, job: Optional[Job]) -> Optional[str]:
        """Why the request is not queued: its output folder cannot be written (a failure, before
        any decode), or an output there is not ours (a refusal, unless ``force``)."""
        why = blocked.get(os.path.dirname(request.output_stem))
        if why:
            jobs.failed.append((given[request.path], why))
            return why
        why = None if force else seen.refusal(request, job)
        if why:
            jobs.refused.append((given[request.path], why))
        return why

    for job, action in store.enqueue_many(wanted, force=force, outputs_present=seen.all_exist, vet=vet):
        if action == REFUSED:
            continue
        if force and action in (NEW, REDO):  # what it replaces is the job's now
            names = seen.names(job.output_stem)
            store.record_outputs(job.id, [p for p in names if seen.exists(p)])
            store.expect_outputs(job.id, [p for p in names if seen.dangling(p)])  # a link to nothing: replaced
        jobs.add(job, action)
    return jobs
