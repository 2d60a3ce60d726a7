"""A command's batch: files -> jobs in the store, and the summary of what became of them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from .discover import content_key, output_stem
from .runner import RunResult, owner_is_dead, with_path
from .spec import JobSpec
from .store import BUSY, FAILED_BEFORE, SKIP, Job, JobStore, Request


@dataclass
class Batch:
    """The jobs one command asked for."""

    to_run: list[int] = field(default_factory=list)
    skipped: list[Job] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (path, reason), found before running
    busy: list[Job] = field(default_factory=list)  # being run by another runner

    def add(self, job: Job, action: str) -> None:
        if action == SKIP:
            self.skipped.append(job)
        elif action == BUSY:
            self.busy.append(job)
        elif action == FAILED_BEFORE:
            self.failed.append((job.path, f"{job.last_error} (failed before; unchanged since)"))
        elif job.id not in self.to_run:
            self.to_run.append(job.id)


def request_for(source: Path, root: Optional[Path], output_dir: Optional[Path], spec: JobSpec,
                keep_suffix: bool = False) -> Request:
    """OSError if the file cannot be read, ValueError if its name cannot be stored.

    ``keep_suffix``: outputs named ``talk.mp3.srt``, for when ``talk.wav`` is in the batch too.
    """
    resolved = source.resolve()
    try:
        str(resolved).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("the file name is not valid UTF-8; rename it") from None
    stem = output_stem(source, root, output_dir)
    if keep_suffix:
        stem = stem.with_name(source.name)
    return Request(path=str(resolved), content_key=content_key(resolved), fingerprint=spec.fingerprint(),
                   spec=spec.to_dict(), output_stem=str(Path(stem).resolve()))


def enqueue_files(store: JobStore, files: Iterable[tuple[Path, Optional[Path]]], spec: JobSpec,
                  output_dir: Optional[Path], force: bool = False, batch: Optional[Batch] = None) -> Batch:
    batch = batch or Batch()
    store.expire_dead_leases(owner_is_dead)  # a killed runner's jobs are resumed, not "busy"
    files = list(files)
    # talk.mp3 and talk.wav side by side would both write talk.srt: both keep their suffix
    stems = Counter(output_stem(source, root, output_dir) for source, root in files)
    for source, root in files:
        try:
            request = request_for(source, root, output_dir, spec,
                                  keep_suffix=stems[output_stem(source, root, output_dir)] > 1)
        except OSError as e:
            batch.failed.append((str(source), f"cannot read {str(source)!r}: {e.strerror or e}"))
            continue
        except ValueError as e:
            batch.failed.append((str(source), str(e)))  # printed escaped (progress.printable)
            continue
        batch.add(*store.enqueue(request, force=force))
    return batch


def summary(batch: Batch, result: RunResult) -> tuple[list[str], int]:
    """The closing lines of a run and its exit status: 1 if any file failed, 128 + the signal
    if a signal stopped it, else 0."""
    failed = len(batch.failed) + len(result.failed)
    parts = [f"{len(result.done)} done", f"{len(batch.skipped)} skipped", f"{failed} failed"]
    if batch.busy or result.lost:
        parts.append(f"{len(batch.busy) + len(result.lost)} left to another runner")
    lines = [", ".join(parts)]
    # the runner printed its failures as they happened ("error: ..."): only those found before
    # running (missing, unreadable, failed before) are told here, so each error shows once
    lines += [f"failed: {with_path(path, reason)}" for path, reason in batch.failed]
    if result.stopped is not None:
        lines.append("stopped: unfinished files stay queued; run the same command again to resume")
    code = 1 if failed else (128 + result.stopped if result.stopped is not None else 0)
    return lines, code
