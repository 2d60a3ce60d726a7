"""Calls that touch a file, with a deadline.

A file on a hung network mount (an NFS server gone, a FUSE daemon stuck) blocks ``open``,
``stat``, ``read`` and a folder's listing in the kernel for as long as the mount is hung. Once
a FUSE daemon has taken the request, no signal ends that wait, not even SIGKILL (the kernel's
``request_wait_answer`` then waits uninterruptibly; NFS hard mounts wait killably). So such a
call runs elsewhere and its caller waits only ``read_timeout()``: then it gets ``ReadTimeout``
(an OSError, so every "cannot read" path takes it, and an AudioError: the file's failure, told
in one line), naming the file and what did not answer, and goes on.

- ``bounded``: one call, made by the reader (``transcriber.deadline.readerproc``): a process started once
  that answers calls over a pipe, so a call costs a round trip (~0.1 ms), not a new process. A reader that
  does not answer in time is killed and never waited for; the next call gets a new one. The
  job's reads of its file (``Attempt``'s content keys, the probe's stat), of its outputs' folder
  and its writes there use it.
- ``bounded_each``: many calls, sent to the reader at once. The walks, the watch scans and the
  enqueue's content keys use it: one message for a whole batch, the results sent back as they
  come, so an item that hangs is known and the items after it go on in a new reader.

The reader is a fresh interpreter (posix_spawn: exec at once), not a fork of this process: this
process may run threads (a model's, tqdm's, a heartbeat), and a lock one of them held at a fork
would stay held in the child, a call there waiting on it forever: a spurious timeout. Calls and
their arguments pickle (a module's function: ``os.stat``, ``content_key``), and so do results.
Either way no thread of this process waits on a file: a thread stuck so would keep the whole
process from exiting (its other threads gone, it stays a zombie) until the mount answers.
The caller's wait is a select(): SIGTERM and Ctrl-C still reach it at once. Where there is no
posix_spawn (not POSIX), the calls run in daemon threads instead.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import importlib
import os
import pickle
import threading
from typing import Callable, Iterable, Optional, TypeVar, Union

from transcriber import settings
from transcriber.deadline import readerproc
from transcriber.errors import AudioError

READ_TIMEOUT = 120.0  # a local disk answers in milliseconds, a slow share in seconds
READ_TIMEOUT_ENV = "TRANSCRIBER_READ_TIMEOUT"  # seconds: for a share slower than that

READ = "a read got no answer"
T = TypeVar("T")
I = TypeVar("I")


class ReadTimeout(TimeoutError, AudioError):
    """A file did not answer in time: ``str(e)`` names it and what blocked (``strerror``)."""

    retryable = True  # unlike other AudioErrors: a mount may come back, a later attempt may read it

    def __str__(self) -> str:
        return f"cannot read audio from {self.filename!r}: {self.strerror}"


def read_timeout() -> float:
    """How long a wait on a file (a read, ffmpeg's output) may last: $TRANSCRIBER_READ_TIMEOUT
    (seconds, > 0), else READ_TIMEOUT."""
    seconds = settings.get(READ_TIMEOUT_ENV)  # checked: finite, > 0 (a bad value is a SettingError)
    return READ_TIMEOUT if seconds is None else seconds


def timeout_error(path, what: str, seconds: float) -> ReadTimeout:
    """The ReadTimeout for ``what`` ("a read got no answer", "ffmpeg gave no audio") on ``path``."""
    return ReadTimeout(errno.ETIMEDOUT, f"{what} for {seconds:g} s (a hung network mount?)",
                       str(path))


def bounded(call: Callable[..., T], *args, path=None, what: str = READ) -> T:
    """``call(*args)`` (which touches ``path``, else ``args[0]``), made by the reader, or
    ReadTimeout after ``read_timeout()``. ``call`` and ``args`` pickle (a module's function:
    ``os.stat``, ``content_key``), and so should its result; an exception it raises is raised
    here. The cost is a round trip on a pipe (see ``readerproc.Reader``), not a new process."""
    path = args[0] if path is None and args else path
    if readerproc.serving:  # in the reader already: the bound is the caller's
        return call(*args)
    if not readerproc.SPAWN:
        return _bounded_thread(call, args, path, what)
    seconds, request = read_timeout(), pickle.dumps((readerproc.CALL, _here(), call, args))
    for tries in (1, 2):
        reader = _take_reader()
        try:
            ok, value = reader.call(request, seconds)
        except readerproc.ReaderGone:  # killed from outside (the OOM killer...): once more, in a new reader
            if tries == 2:
                raise OSError(errno.EIO, "the reader process ended", str(path)) from None
            continue
        except readerproc.ReaderStuck:
            raise timeout_error(path, what, seconds) from None
        _idle.append(reader)
        if not ok:
            raise value
        return value
    raise AssertionError("unreachable")


def start_reader(*modules: str) -> None:
    """Start the reader now, if there is none, and have it import ``modules`` (those of the
    calls to come: "jobs.batch"): it boots (~40 ms: an interpreter) and imports them (~0.2 s)
    while this process goes on, not during the first calls."""
    if readerproc.SPAWN and not readerproc.serving and not _idle:
        reader = readerproc.Reader()
        if modules:
            reader.ask(pickle.dumps((readerproc.CALL, _here(), _import_all, (modules,))))
        _idle.append(reader)


def _here() -> Optional[str]:
    """This process's working folder; None once it is removed (the reader then stays where it
    is: only a relative path would mean another file, and here it names none)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _import_all(modules: tuple[str, ...]) -> None:
    for name in modules:
        importlib.import_module(name)


# The readers free to take: one, unless two threads read at once (each call takes one: a
# thread never waits for another's call).
_idle: list[readerproc.Reader] = []


def _take_reader() -> readerproc.Reader:
    _reap()
    while _idle:
        with contextlib.suppress(IndexError):  # another thread took the last one meanwhile
            reader = _idle.pop()
            if reader.owner == os.getpid():
                return reader
    return readerproc.Reader()


def _forget_readers() -> None:
    """In a forked child (multiprocessing, Ray...): the parent's readers are not ours (their
    pipes are the parent's)."""
    _idle.clear()
    readerproc.orphans.clear()
    _stuck.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_readers)


@atexit.register
def _close_readers() -> None:
    """At exit, the idle readers closed and reaped (not left to end after this process)."""
    while _idle:
        reader = _idle.pop()
        if reader.owner == os.getpid():
            reader.close()


def _bounded_thread(call: Callable[..., T], args: tuple, path, what: str) -> T:
    """``bounded`` where there is no posix_spawn: the call in a daemon thread (one stuck there keeps
    the process from exiting until the mount answers)."""
    seconds = read_timeout()
    out: list = []

    def run():
        try:
            out.append((True, call(*args)))
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
                 what: str = READ, key_of: Optional[Callable[[I], str]] = None,
                 stopped: Callable[[], bool] = lambda: False) -> list[Union[T, Exception]]:
    """``call(item)`` for each item, in order, made by the reader in one request (not one per
    item: a folder of 10,000 files costs one round trip); each result (picklable), or the
    exception it raised. ``call`` and the items pickle. An item that makes no progress for
    ``read_timeout()`` gets a ReadTimeout; the items after it go on in a new reader. The reader
    stuck on it is killed and never waited for (a wait stuck in the kernel ends only when the
    mount answers), so this process can still exit: a thread of its own stuck so would keep it
    from exiting (the leader stays a zombie until every thread is gone).

    ``key_of(item)`` names an item's call ("the scan of FOLDER", the folder of a path): while
    the reader stuck on an earlier call with that key has not ended, the call is not made again
    (the item gets a ReadTimeout at once), so that a loop over a hung folder keeps one stuck
    reader, not one per turn, and 10,000 paths in a hung folder cost one bound, not 10,000.
    ``stopped`` is asked every POLL_SECONDS (a StopFlag's: a stop acts at once even with the
    bound far off); once true, the items not done get an InterruptedError. Where there is no
    posix_spawn (not POSIX), the calls run in a thread instead."""
    items, seconds = list(items), read_timeout()
    if readerproc.serving:  # in the reader already: the bound is the caller's
        return [readerproc.call_or_error(call, item) for item in items]
    _reap()
    keys = [key_of(item) for item in items] if key_of is not None else [None] * len(items)
    stuck = {key for key in keys if key is not None and _still_stuck(key)}
    pending = [i for i, key in enumerate(keys) if key not in stuck]  # the others get a ReadTimeout at once
    results: list = [timeout_error(path_of(item), what, seconds) for item in items]
    run_rest = _in_reader if readerproc.SPAWN else _in_thread
    while pending and not stopped():
        done: list = []
        left = run_rest(call, [items[i] for i in pending], done, seconds, stopped)
        for i, result in zip(pending, done):
            results[i] = result
        pending = pending[len(done):]
        if left is not None:
            readerproc.orphans.append(left)
        if pending and not stopped():  # that item hung (or its reader died): it keeps its ReadTimeout
            key = keys[pending.pop(0)]
            if key is not None and left is not None:
                _stuck[key] = left
                pending = [i for i in pending if keys[i] != key]  # the same key: a ReadTimeout at once
    for i in pending:
        results[i] = InterruptedError(errno.EINTR, "stopped", str(path_of(items[i])))
    return results


# key -> the child (pid) or thread still stuck on that key's last call
_stuck: dict[str, Union[int, threading.Thread]] = {}


def _reap() -> None:
    """Wait for the children left stuck that have ended since (the mount answered)."""
    orphans = readerproc.orphans
    orphans[:] = [o for o in orphans if (o.is_alive() if isinstance(o, threading.Thread) else readerproc.alive(o))]


def _still_stuck(key: str) -> bool:
    stuck = _stuck.get(key)
    if isinstance(stuck, threading.Thread):
        alive = stuck.is_alive()
    else:
        alive = stuck is not None and readerproc.alive(stuck)
    if not alive:
        _stuck.pop(key, None)
    return alive


def _in_reader(call, items: list, results: list, seconds: float, stopped: Callable[[], bool]) -> Optional[int]:
    """Run ``call`` over ``items`` in the reader, appending to ``results`` what it sends;
    returns the pid of a reader that did not finish (killed, perhaps stuck: not waited for)."""
    request = pickle.dumps((readerproc.EACH, _here(), call, items))
    reader = _take_reader()
    if reader.each(request, len(items), results, seconds, stopped):
        _idle.append(reader)
        return None
    return reader.pid  # abandoned


def _in_thread(call, items: list, results: list, seconds: float,
               stopped: Callable[[], bool]) -> Optional[threading.Thread]:
    """``_in_reader`` where there is no posix_spawn: a daemon thread (left to its wait if stuck)."""
    out, cancelled = [], threading.Event()
    thread = threading.Thread(target=_each, args=(call, items, out, cancelled), daemon=True,
                              name="bounded calls")
    thread.start()
    seen, quiet = -1, 0.0
    while thread.is_alive() and quiet < seconds and not stopped():
        if len(out) != seen:  # it went on since the last look
            seen, quiet = len(out), 0.0
        thread.join(readerproc.POLL_SECONDS)
        quiet += readerproc.POLL_SECONDS
    cancelled.set()  # a hung thread that ever comes back stops there
    done = out[:len(out)]
    results += done
    return thread if len(done) < len(items) else None


def _each(call, items: list, out: list, cancelled: threading.Event) -> None:
    for item in items:
        if cancelled.is_set():
            return
        out.append(readerproc.call_or_error(call, item))
