"""Watch mode: enqueue media that appears (or changes) in a folder once it stops growing.

Polling, not inotify: it works the same on network mounts and every OS, and a scan of a folder
is cheap next to transcribing. A file is taken when its size and mtime have not changed for
``stable_seconds`` (a file still being copied or recorded is left alone), it is not empty, and
its name is not a temporary one (``.part``, ``.crdownload``, dot-files...). With ``--follow``, a
file seen growing is followed as it is written instead (``transcribe follow``).

A scan (the listing and a stat per file) is made by the reader process with the bound on reads
(``bounded_each``): a folder on a hung mount is reported once, and looked at again at each scan
while the watch goes on; the reader stuck on it is the only one (no new scan of that folder
starts before it ends, when the mount answers). The same holds for each file's content key.
"""

from __future__ import annotations

import functools
import os
import stat
import time
from pathlib import Path
from typing import Callable, Optional

from transcriber import ReadTimeout, bounded, bounded_each

from transcriber.app.run.discover import LISTING, has_audio, identify, looks_like_media, temporary_name
from transcriber.app.store.domain import BUSY, FAILED_BEFORE, REFUSED, SKIP
from transcriber.app.run.enqueue import OutputsSeen, request_of
from transcriber.app.run.follow import FollowSettings, follow_file
from transcriber.app.cli.progress import Reporter
from transcriber.app.run.local import RunResult, Runner, StopFlag
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.jobstore import JobStore

Signature = tuple[int, int]  # (size, mtime_ns)


class StableFiles:
    """Tracks the files under ``root``; ``scan`` returns those that became ready to take."""

    def __init__(self, root: Path, stable_seconds: float, check: Callable[[Path], bool] = has_audio,
                 stopped: Callable[[], bool] = lambda: False):
        self.root, self.stable_seconds, self.check, self.stopped = root, stable_seconds, check, stopped
        self.seen: dict[Path, tuple[Signature, float]] = {}  # signature, when first seen with it
        self.taken: dict[Path, Signature] = {}  # signature when last enqueued
        self._media: dict[tuple[Path, Signature], bool] = {}  # probe results for unknown extensions
        self.growing: list[Path] = []  # media files that grew since the scan before (``scan`` sets it)
        self.unfollowable: set[Path] = set()  # files whose follow failed: transcribed once stable

    def scan(self, now: Optional[float] = None) -> list[Path]:
        """The files that became ready; OSError (a ReadTimeout: a hung mount) if the folder could
        not be listed, the state left as it was."""
        (listed,) = bounded_each(_regular_files, [str(self.root)], what=LISTING,
                                 key_of=lambda root: f"the scan of {root}", stopped=self.stopped)
        if isinstance(listed, Exception):
            raise listed
        now = time.monotonic() if now is None else now
        current: dict[Path, tuple[Signature, float]] = {}
        ready, self.growing = [], []
        for name, signature in listed:
            path = Path(name)
            previous = self.seen.get(path)
            since = previous[1] if previous and previous[0] == signature else now
            current[path] = (signature, since)
            if (previous and previous[0] != signature and self.taken.get(path) != signature
                    and path not in self.unfollowable and self._is_media(path, signature)):
                self.growing.append(path)
            if (signature[0] > 0 and now - since >= self.stable_seconds
                    and self.taken.get(path) != signature and self._is_media(path, signature)):
                ready.append(path)
        self.seen = current
        return ready

    def _is_media(self, path: Path, signature: Signature) -> bool:
        key = (path, signature)
        if key not in self._media:
            self._media[key] = looks_like_media(path, self.check)
        return self._media[key]

    def mark_taken(self, path: Path) -> None:
        if path in self.seen:
            self.taken[path] = self.seen[path][0]

    def mark_unfollowable(self, path: Path) -> None:
        """Its follow failed (the job says why): not followed again as it grows; once it is
        stable, it is transcribed as any file is (its job is then that one's)."""
        self.unfollowable.add(path)

    def mark_followed(self, path: Path) -> None:
        """Followed to its end: taken as it is now (not transcribed again once it settles)."""
        try:
            st = bounded(os.stat, path)  # the reader's, with the bound: a hung mount
        except OSError:
            return
        self.seen[path] = ((st.st_size, st.st_mtime_ns), time.monotonic())
        self.taken[path] = self.seen[path][0]


def _regular_files(root: str) -> list[tuple[str, Signature]]:
    """Every regular file under ``root`` whose name is not a temporary one, with its signature,
    in a stable order (a FIFO, a socket... is never opened: it could block)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not temporary_name(d))
        for name in sorted(filenames):
            if temporary_name(name):
                continue
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except OSError:  # vanished between listing and stat
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((path, (st.st_size, st.st_mtime_ns)))
    return found


def watch(store: JobStore, root: Path, spec: JobSpec, output_dir: Optional[Path], runner: Runner,
          reporter: Reporter, stop: StopFlag, interval: float = 1.0, stable_seconds: float = 3.0,
          follow: Optional[FollowSettings] = None) -> RunResult:
    """Scan, enqueue what is ready, run it; until ``stop`` is requested. Returns every job run.
    With ``follow``, a file seen growing is followed at once (transcriber/app/run/follow.py), one at a time, in
    this process (``runner`` a Runner), until it has not grown for ``follow.idle_seconds``."""
    tracker = StableFiles(root, stable_seconds, stopped=lambda: stop.requested)
    result = RunResult()
    hung = False  # the last scan got no answer: told once, until the folder answers again
    while not stop.requested:
        for path in tracker.growing if follow is not None else ():
            ended = follow_file(runner, path, root, output_dir, spec, follow)
            if ended is not None and ended.failed:
                tracker.mark_unfollowable(path)  # its job failed, with the reason: not followed again
            else:
                tracker.mark_followed(path)
            if ended is not None:
                result.done += ended.done
                result.failed += ended.failed
        try:
            ready = tracker.scan()
        except OSError as e:
            if isinstance(e, ReadTimeout) and not hung:
                reporter.error(f"warning: cannot list {root}: {e.strerror}; looked at again at each scan")
            hung = hung or isinstance(e, ReadTimeout)
            stop.sleep(interval)
            continue
        if hung:
            reporter.info(f"{root} answers again")
            hung = False
        to_run = enqueue_ready(store, tracker, ready, root, output_dir, spec, reporter, stop)
        if to_run:
            reporter.add_files(len(to_run))
            told = len(result.refused)
            runner.run(to_run, result)
            for path, why in result.refused[told:]:  # an output found the user's as it was written
                reporter.error(f"skipped: {path}: {why}")
        stop.sleep(interval)
    result.stopped = stop.signum
    return result


def enqueue_ready(store: JobStore, tracker: StableFiles, ready: list[Path], root: Path,
                  output_dir: Optional[Path], spec: JobSpec, reporter: Reporter, stop: StopFlag) -> list[int]:
    """Queue the files a scan found ready; the ids to run. Their content keys are read by the
    reader with the bound, each file's once at a time (one still stuck is not read again); then
    their outputs, all at once (``OutputsSeen``)."""
    to_run, requests = [], []
    made = bounded_each(functools.partial(identify, root=root, output_dir=output_dir), ready,
                        key_of=lambda path: f"the content key of {path}", stopped=lambda: stop.requested)
    for path, identity in zip(ready, made):
        if isinstance(identity, OSError):
            continue  # vanished, unreadable or hung now: looked at again at the next scan
        if isinstance(identity, ValueError):  # a name that cannot be stored
            tracker.mark_taken(path)
            reporter.error(f"skipped: {path}: {identity}")
            continue
        if isinstance(identity, Exception):
            raise identity
        requests.append((path, request_of(identity, spec, output_dir)))
    seen = OutputsSeen(store, [request for _, request in requests], spec)  # their outputs, read at once
    for path, request in requests:
        if request.path in seen.hung:
            continue  # its outputs' folder does not answer now: looked at again at the next scan
        ((job, action),) = store.enqueue_many([request], outputs_present=seen.all_exist, vet=seen.refusal)
        if action == REFUSED:  # an output the user made (or changed): left alone until the file changes
            tracker.mark_taken(path)
            reporter.error(f"skipped: {path}: {seen.refusal(request, job)}")
            continue
        if action == BUSY:
            continue  # another runner has it: look again later (it may have changed since)
        tracker.mark_taken(path)
        if action not in (SKIP, FAILED_BEFORE):
            to_run.append(job.id)
            reporter.info(f"queued: {path}")
    return to_run
