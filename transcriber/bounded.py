"""Calls that touch a file, with a deadline.

A file on a hung network mount (an NFS server gone, a FUSE daemon stuck) blocks ``open``,
``stat`` and ``read`` in the kernel for as long as the mount is hung, and no signal ends that
wait, not even SIGKILL. So such a call runs in a daemon thread and its caller waits only
``read_seconds()``: then it gets ``ReadTimeout`` (an OSError, so every "cannot read" path
takes it, and an AudioError: the file's failure, told in one line), naming the file and what did
not answer, and goes on. The thread is left to its
wait; it ends, and is gone, if the mount ever answers.

The caller's wait is a plain lock wait: SIGTERM and Ctrl-C still reach it at once.
"""

from __future__ import annotations

import errno
import os
import threading
from typing import Callable, Iterable, TypeVar, Union

from .errors import AudioError

READ_SECONDS = 120.0  # a local disk answers in milliseconds, a slow share in seconds
READ_SECONDS_ENV = "TRANSCRIBER_READ_TIMEOUT"  # seconds: for a share slower than that

READ = "a read got no answer"
T = TypeVar("T")
I = TypeVar("I")


class ReadTimeout(TimeoutError, AudioError):
    """A file did not answer in time: ``str(e)`` names it and what blocked (``strerror``)."""

    retryable = True  # unlike other AudioErrors: a mount may come back, a later attempt may read it

    def __str__(self) -> str:
        return f"cannot read audio from {self.filename!r}: {self.strerror}"


def read_seconds() -> float:
    """How long a wait on a file (a read, ffmpeg's output) may last: $TRANSCRIBER_READ_TIMEOUT
    (seconds, > 0), else READ_SECONDS."""
    try:
        seconds = float(os.environ.get(READ_SECONDS_ENV, READ_SECONDS))
    except ValueError:
        return READ_SECONDS
    return seconds if seconds > 0 else READ_SECONDS


def timeout_error(path, what: str, seconds: float) -> ReadTimeout:
    """The ReadTimeout for ``what`` ("a read got no answer", "ffmpeg gave no audio") on ``path``."""
    return ReadTimeout(errno.ETIMEDOUT, f"{what} for {seconds:g} s (a hung network mount?)",
                       str(path))


def bounded(call: Callable[[], T], path, what: str = READ) -> T:
    """``call()`` (which touches ``path``), or ReadTimeout after ``read_seconds()``."""
    seconds = read_seconds()
    out: list = []

    def run():
        try:
            out.append((True, call()))
        except BaseException as e:  # handed to the waiting caller
            out.append((False, e))

    thread = threading.Thread(target=run, daemon=True, name=f"bounded call on {path}")
    thread.start()
    thread.join(seconds)
    if not out:
        raise timeout_error(path, what, seconds)
    ok, value = out[0]
    if not ok:
        raise value
    return value


def bounded_each(call: Callable[[I], T], items: Iterable[I], path_of: Callable[[I], object] = lambda i: i,
                 what: str = READ) -> list[Union[T, Exception]]:
    """``call(item)`` for each item, in order, in one thread (not a thread per item: a folder
    of 10,000 files costs no more); each result, or the exception it raised. An item that makes
    no progress for ``read_seconds()`` (found within twice that) gets a ReadTimeout; the items
    after it go on in a new thread."""
    items, results = list(items), []
    seconds = read_seconds()
    while len(results) < len(items):
        rest, out, cancelled = items[len(results):], [], threading.Event()
        thread = threading.Thread(target=_each, args=(call, rest, out, cancelled), daemon=True,
                                  name=f"bounded calls from {path_of(rest[0])}")
        thread.start()
        seen = -1
        while thread.is_alive() and len(out) != seen:  # it went on since the last look
            seen = len(out)
            thread.join(seconds)
        cancelled.set()  # a hung thread that ever comes back stops there
        done = out[:len(out)]
        results += done
        if len(done) < len(rest):  # rest[len(done)] hung
            results.append(timeout_error(path_of(rest[len(done)]), what, seconds))
    return results


def _each(call, items: list, out: list, cancelled: threading.Event) -> None:
    for item in items:
        if cancelled.is_set():
            return
        try:
            out.append(call(item))
        except Exception as e:  # the item's own failure, given back as its result
            out.append(e)
