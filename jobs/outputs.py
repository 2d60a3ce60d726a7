"""Where a job's outputs may be written: only inside its output folder, never over a file that
is the user's. The checks an attempt (jobs/attempt.py) makes before it writes, and the errors
that say why it did not.

Every read here is the reader child's, with the bound (``transcriber.bounded``): an output
folder on a hung mount is one line (``OutputsHung``, retried), not a hung run.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from transcriber import ReadTimeout, TranscriberError, bounded

from .discover import first_sweep, present_outputs
from .store import Job, JobStore, refusal


class OutputConflict(TranscriberError):
    """An output file is the user's (not written by this job, or changed since): not replaced.
    The job is given back with its words (no attempt counted), and the file is a skip."""

    def __init__(self, why: str):
        super().__init__(f"not written: {why}")
        self.why = why


class OutputOutside(TranscriberError):
    """An output path outside the job's output folder (its row edited): not written."""


class OutputsHung(TranscriberError):
    """The outputs' folder did not answer in time (a hung mount): retried, as a ReadTimeout is."""

    retryable = True


def check_place(job: Job, paths: list[Path]) -> None:
    """OutputOutside unless every output lies in the job's output folder (the one its command
    named, else its input's), symbolic links and ``..`` resolved: a job's row edited to point
    elsewhere writes nothing there. The folder is resolved by the reader child, with the bound
    (an output folder on a hung mount)."""
    allowed = job.output_root or os.path.dirname(job.path)
    try:
        real = bounded(_real_paths, [allowed, *(str(p.parent) for p in paths)], path=allowed)
    except ReadTimeout as e:
        raise OutputsHung(f"cannot check the outputs in {allowed!r}: {e.strerror}") from None
    for path, folder in zip(paths, real[1:]):
        if os.path.commonpath([real[0], folder]) != real[0]:
            raise OutputOutside(f"not written: {path} is outside the job's output folder {allowed}")


def check_ours(store: JobStore, job: Job, paths: list[Path], would_write: dict[str, str]) -> None:
    """OutputConflict when an output exists that this job did not write, or that changed since
    (a hand-made subtitle, another file's transcript): the user's, left as it is; one of no
    record that holds exactly what the job would write (``would_write``: SHA-256 by path) is the
    job's, written by a run whose database was lost.
    Also removes the temporary files a killed writer left in the outputs' folder."""
    folder = paths[0].parent
    try:
        present = bounded(present_outputs, paths, folder if first_sweep(folder) else None, path=folder)
        records = store.output_records([str(p) for p in present]) if present else {}
        for path in present:
            why = bounded(refusal, path, records.get(str(path)), job.path, job.output_stem,
                          job.outputs, None, would_write.get(str(path)))
            if why:
                raise OutputConflict(why)
    except ReadTimeout as e:  # not the input's fault: said of the outputs' folder
        raise OutputsHung(f"cannot check the outputs in {str(folder)!r}: {e.strerror}") from None


@contextlib.contextmanager
def outputs_answer(paths: list[str]):
    """A ReadTimeout of the outputs just written, read back, told as theirs (OutputsHung)."""
    try:
        yield
    except ReadTimeout as e:
        raise OutputsHung(f"cannot check the outputs in {os.path.dirname(paths[0])!r}: {e.strerror}") from None


def _real_paths(paths: list[str]) -> list[str]:
    """Each path with its symbolic links and ``..`` resolved (for the reader child)."""
    return [os.path.realpath(p) for p in paths]
