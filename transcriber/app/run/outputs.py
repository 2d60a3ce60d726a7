"""A job's output files: what is already there, and where a job may write.

- The files there, read for the store and the attempts: what a file holds (``FileSignature``),
  whether it changed since this tool wrote it, the facts the output-ownership rule needs
  (``output_refusal``; the rule itself is transcriber/app/store/policy.py's ``refusal``), and the sweep of the
  temporaries a killed writer left.
- The checks an attempt (transcriber/app/run/attempt.py) makes before it writes (``check_place``: only inside
  its output folder; ``check_ours``: never over a file that is the user's), and the errors that
  say why it did not.

Each read here is made by the reader process with the bound on reads (``transcriber.deadline.bounded``):
an outputs' folder on a hung mount costs one bound, never a hung command.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

from transcriber import FORMATS, ReadTimeout, TranscriberError, bounded

from transcriber.app.store.domain import PENDING, FileSignature, Job, OutputRecord
from transcriber.app.store.policy import refusal

if TYPE_CHECKING:
    from transcriber.app.store.jobstore import JobStore

# The temporary files of transcriber's atomic writer (subtitles/files.py's temp_prefix): ``.NAME-HASH6.XXXXXXXX.part``,
# and before it ``.FULL-NAME.XXXXXXXX.part`` of an output name. A kill between writing one and
# renaming it leaves it behind; one older than STALE_SECONDS is no live writer's (a write takes
# well under a second), and the next run over that folder removes it.
_EXTENSIONS = "|".join(sorted(fmt.extension[1:] for fmt in FORMATS.values()))  # the registry's
_OUR_TEMPORARY = re.compile(r"\..{1,32}-[0-9a-f]{6}\.[a-z0-9_]{8}\.part|\..+\.(" + _EXTENSIONS + r")\.[a-z0-9_]{8}\.part",
                            re.DOTALL)
STALE_SECONDS = 60.0
_swept: set[str] = set()  # folders this process has swept already


def first_sweep(folder: Path) -> bool:
    """Whether ``folder`` is to be swept of stale temporaries now: once per process and folder."""
    if str(folder) in _swept:
        return False
    _swept.add(str(folder))
    return True


def remove_stale_temporaries(folder: Path, now: Optional[float] = None) -> list[Path]:
    """Remove the atomic writer's temporary files a kill left in ``folder``; the paths removed."""
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        if not _OUR_TEMPORARY.fullmatch(entry.name):
            continue
        try:
            if entry.is_file(follow_symlinks=False) and now - entry.stat().st_mtime > STALE_SECONDS:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def present_outputs(paths: list[Path], sweep: Optional[Path] = None) -> list[Path]:
    """The paths that exist (a dangling link too), once ``sweep`` (a folder, if given) is rid
    of its stale temporaries: the reads before writing outputs, in one call for the reader
    process (``transcriber.deadline.bounded``)."""
    if sweep is not None:
        remove_stale_temporaries(sweep)
    return [p for p in paths if os.path.lexists(p)]


def file_signature(path: Path) -> FileSignature:
    """OSError if the file cannot be read."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        digest = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 20), b""):  # (hashlib.file_digest is 3.11+)
            digest.update(block)
    return FileSignature(st.st_size, st.st_mtime_ns, digest.hexdigest())


def file_signatures(paths: list[str]) -> dict[str, FileSignature]:
    """Each file's signature, those gone (or unreadable) left out: in one call for the reader
    process (``transcriber.deadline.bounded``), so that the store never reads a file itself."""
    signed = {}
    for path in paths:
        with contextlib.suppress(OSError):
            signed[path] = file_signature(Path(path))
    return signed


def signed_files(paths: Iterable[str]) -> dict[str, FileSignature]:
    """``file_signatures``, read by the reader child with the bound on reads (ReadTimeout: an
    outputs' folder on a hung mount): never by the store's process, nor while a transaction
    holds the database."""
    paths = [str(p) for p in paths]
    return bounded(file_signatures, paths, path=os.path.dirname(paths[0])) if paths else {}


def output_states(outputs: list[tuple[str, Optional[tuple]]]) -> list[tuple[bool, bool, bool]]:
    """For each output path (with what this tool wrote there, if it did, as a FileSignature's
    fields; None otherwise, or while it is being written), ``(present, exists, changed)``: a
    file or a link of that name is there, it leads to a file, it is not what this tool wrote.
    An enqueue's reads of its outputs, made by the reader with the bound (``bounded_each``)."""
    states = []
    for path, written in outputs:
        try:
            st = os.lstat(path)
        except OSError:
            states.append((False, False, False))
            continue
        try:  # one stat() tells whether it leads to a file and, most often, that it is unchanged
            st = os.stat(path) if stat.S_ISLNK(st.st_mode) else st
        except OSError:  # a dangling link
            states.append((True, False, written is not None))
            continue
        same = written is None or (st.st_size, st.st_mtime_ns) == written[:2] or (
            st.st_size == written[0] and unchanged(Path(path), FileSignature(*written)))
        states.append((True, True, not same))
    return states


def unchanged(path: Path, written: FileSignature) -> bool:
    """The file is still what was written (False if it is gone or cannot be read)."""
    try:
        st = os.stat(path)
        if (st.st_size, st.st_mtime_ns) == (written.size, written.mtime_ns):
            return True
        return st.st_size == written.size and file_signature(path).sha256 == written.sha256
    except OSError:
        return False


def all_outputs_exist(paths: Iterable[str]) -> bool:
    """Whether every one of these outputs exists: asked of the reader child, with the bound on
    reads (the CLI's enqueues read them before, all at once: transcriber/app/run/enqueue.py's ``OutputsSeen``)."""
    paths = [str(p) for p in paths]
    states = bounded(output_states, [(p, None) for p in paths], path=paths[0]) if paths else []
    return bool(paths) and all(exists for _, exists, _ in states)


def output_refusal(path: Path, record: Optional[OutputRecord], job_path: str, job_stem: str,
                   listed: Iterable[str] = (), changed: Optional[bool] = None,
                   would_write: Optional[str] = None) -> Optional[str]:
    """transcriber/app/store/policy.py's ``refusal`` of ``path``, the facts it needs read from the file now (by
    the reader, with the bound: ``bounded``): ``changed``, whether the file differs from
    ``record``, when not known from before (``output_states``); ``would_write``, the SHA-256 of
    what the job is about to write there, whether the file holds exactly that."""
    holds = record is None and str(path) not in listed and would_write is not None and _holds(path, would_write)
    if changed is None and record is not None and (record.job_path, record.job_stem) == (job_path, job_stem):
        changed = record.signature.sha256 != PENDING and not unchanged(path, record.signature)
    return refusal(path, record, job_path, job_stem, listed, bool(changed), holds)


def _holds(path: Path, sha256: str) -> bool:
    try:
        return file_signature(path).sha256 == sha256
    except OSError:
        return False


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


def check_ours(store: "JobStore", job: Job, paths: list[Path], would_write: dict[str, str]) -> None:
    """OutputConflict when an output exists that this job did not write, or that changed since
    (a hand-made subtitle, another file's transcript): the user's, left as it is; one of no
    record that holds exactly what the job would write (``would_write``: SHA-256 by path) is the
    job's, written by a run whose database was lost.
    Also removes the temporary files a killed writer left in the outputs' folder."""
    if not paths:  # (a file without speech, only subtitle formats asked: nothing to write)
        return
    folder = paths[0].parent
    try:
        present = bounded(present_outputs, paths, folder if first_sweep(folder) else None, path=folder)
        records = store.output_records([str(p) for p in present]) if present else {}
        for path in present:
            why = bounded(output_refusal, path, records.get(str(path)), job.path, job.output_stem,
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
        raise OutputsHung(f"cannot check the outputs in {os.path.dirname(paths[0]) if paths else '?'!r}: "
                          f"{e.strerror}") from None


def _real_paths(paths: list[str]) -> list[str]:
    """Each path with its symbolic links and ``..`` resolved (for the reader child)."""
    return [os.path.realpath(p) for p in paths]
