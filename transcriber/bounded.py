"""Calls that touch a file, with a deadline.

A file on a hung network mount (an NFS server gone, a FUSE daemon stuck) blocks ``open``,
``stat``, ``read`` and a folder's listing in the kernel for as long as the mount is hung. Once
a FUSE daemon has taken the request, no signal ends that wait, not even SIGKILL (the kernel's
``request_wait_answer`` then waits uninterruptibly; NFS hard mounts wait killably). So such a
call runs elsewhere and its caller waits only ``read_seconds()``: then it gets ``ReadTimeout``
(an OSError, so every "cannot read" path takes it, and an AudioError: the file's failure, told
in one line), naming the file and what did not answer, and goes on.

- ``bounded``: one call, made by the reader child (``Reader``): a process forked once that
  answers calls over a pipe, so a call costs a round trip (~0.1-0.3 ms), not a fork (~49 ms for
  a process with a model loaded). A reader that does not answer in time is killed and never
  waited for; the next call gets a new one. The job's reads of its file (``Attempt``'s content
  keys, the probe's stat) and of its outputs' folder use it.
- ``bounded_each``: many calls in one forked child. The walks, the watch scans and the
  enqueue's content keys use it: one child for a whole batch.

Either way no thread of this process waits on a file: a thread stuck so would keep the whole
process from exiting (its other threads gone, it stays a zombie) until the mount answers.
The caller's wait is a select(): SIGTERM and Ctrl-C still reach it at once. Where there is no
fork (not POSIX), the calls run in daemon threads instead.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import pickle
import select
import signal
import threading
import time
from typing import Callable, Iterable, Optional, TypeVar, Union

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


def bounded(call: Callable[..., T], *args, path=None, what: str = READ) -> T:
    """``call(*args)`` (which touches ``path``, else ``args[0]``), made by the reader child, or
    ReadTimeout after ``read_seconds()``. ``call`` and ``args`` pickle (a module's function:
    ``os.stat``, ``content_key``), and so should its result; an exception it raises is raised
    here. The cost is a round trip on a pipe (see ``Reader``), not a fork."""
    path = args[0] if path is None and args else path
    if _direct:  # in a child of ours already: the bound is the parent's
        return call(*args)
    if not hasattr(os, "fork"):
        return _bounded_thread(call, args, path, what)
    seconds, request = read_seconds(), pickle.dumps((call, args))
    for tries in (1, 2):
        reader = _take_reader()
        try:
            ok, value = reader.call(request, seconds)
        except _ReaderGone:  # killed from outside (the OOM killer...): once more, in a new child
            if tries == 2:
                raise OSError(errno.EIO, "the reader process ended", str(path)) from None
            continue
        except _ReaderStuck:
            raise timeout_error(path, what, seconds) from None
        _idle.append(reader)
        if not ok:
            raise value
        return value
    raise AssertionError("unreachable")


def start_reader() -> None:
    """Fork the reader child now, if there is none: before a model is loaded, the fork is cheap
    (its cost grows with the process's memory: ~49 ms with a model loaded)."""
    if hasattr(os, "fork") and not _direct and not _idle:
        _idle.append(Reader())


class _ReaderGone(Exception):
    """The reader child ended (killed from outside): its call may be made again, elsewhere."""


class _ReaderStuck(Exception):
    """The reader child did not answer in time: abandoned (killed, never waited for)."""


class Reader:
    """A child forked once that makes calls for this process, one at a time, on two pipes
    (length-prefixed pickles): ``call`` costs a round trip (~0.1 ms), where a fork per call of a
    process with a model loaded costs ~49 ms. One that does not answer in time is killed and left
    to its wait in the kernel (it ends when the mount answers); the next call gets a new one. So
    no thread of this process ever waits on a file, and the process can exit while a mount hangs.
    The child ignores SIGINT/SIGTERM (a Ctrl-C reaches the whole process group: the stop is
    this process's to handle) and ends when this process closes its pipe (exits, even by kill -9)."""

    def __init__(self):
        requests, self._requests = os.pipe()
        self._answers, answers = os.pipe()
        self.owner = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.close(self._requests)
                os.close(self._answers)
                _become_child()
                _answer(requests, answers)
            finally:
                os._exit(0)
        os.close(requests)
        os.close(answers)

    def call(self, request: bytes, seconds: float) -> tuple[bool, object]:
        """For a pickled ``(call, args)``: (True, the result) or (False, the exception raised);
        _ReaderStuck after ``seconds`` without an answer, _ReaderGone if the child ended: this
        reader is then closed."""
        try:
            _write(self._requests, request)
            answer = _read(self._answers, seconds)
        except BrokenPipeError:
            answer = b""
        except BaseException:  # a Ctrl-C during the wait: the answer would come out of turn
            self.abandon()
            raise
        if answer is None:
            self.abandon()
            raise _ReaderStuck
        if not answer:
            self.abandon()
            raise _ReaderGone
        try:
            return pickle.loads(answer)
        except Exception as e:  # an exception whose class does not unpickle: told as what it was
            return False, OSError(errno.EIO, f"the reader's answer: {e!r}")

    def abandon(self) -> None:
        """Kill the child and forget it: never waited for (it may be stuck in the kernel)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        for fd in (self._requests, self._answers):
            with contextlib.suppress(OSError):
                os.close(fd)
        _orphans.append(self.pid)


# The readers free to take: one, unless two threads read at once (each call takes one: a
# thread never waits for another's call).
_idle: list[Reader] = []
_direct = False  # True in our children: a call there is made as is (the parent bounds it)


def _take_reader() -> Reader:
    _reap()
    while _idle:
        with contextlib.suppress(IndexError):  # another thread took the last one meanwhile
            reader = _idle.pop()
            if reader.owner == os.getpid():
                return reader
    return Reader()


def _forget_readers() -> None:
    """In a forked child: the parent's readers are not ours (their pipes are the parent's)."""
    _idle.clear()
    _orphans.clear()
    _stuck.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_readers)


def _become_child() -> None:
    """What a child of ours does first: its stdio on /dev/null (a child stuck on a mount must
    not hold the parent's pipes open), the objects inherited never collected (a finalizer could
    close a descriptor the child reuses), calls made as is."""
    global _direct
    for sig in (signal.SIGINT, signal.SIGTERM):  # a Ctrl-C reaches the process group: the parent's to handle
        signal.signal(sig, signal.SIG_IGN)
    _direct = True
    gc.freeze()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)


def _answer(requests: int, answers: int) -> None:
    """The reader child's loop: each request ``(call, args)`` answered ``(ok, value)``."""
    while True:
        data = _read(requests, None)
        if not data:
            return  # the parent closed its end: it has exited
        try:
            call, args = pickle.loads(data)
            answer = (True, call(*args))
        except Exception as e:  # the call's own failure, raised in the parent
            answer = (False, e)
        _write(answers, pickle.dumps((answer[0], _portable(answer[1]))))


def _write(fd: int, data: bytes) -> None:
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:
        view = view[os.write(fd, view):]


def _read(fd: int, seconds: Optional[float]) -> Optional[bytes]:
    """One length-prefixed message from ``fd``: b"" at its end, None when ``seconds`` (None:
    no bound) passed without it. The wait is a select(): a signal's handler runs at once."""
    deadline = None if seconds is None else time.monotonic() + seconds
    buffer, size = b"", None
    while size is None or len(buffer) < 8 + size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b""
        buffer += chunk
        if size is None and len(buffer) >= 8:
            size = int.from_bytes(buffer[:8], "little")
    return buffer[8:8 + size]


def _bounded_thread(call: Callable[..., T], args: tuple, path, what: str) -> T:
    """``bounded`` where there is no fork: the call in a daemon thread (one stuck there keeps
    the process from exiting until the mount answers)."""
    seconds = read_seconds()
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
    """``call(item)`` for each item, in order, in one child process (not one per item: a folder
    of 10,000 files costs no more); each result (picklable), or the exception it raised. An item
    that makes no progress for ``read_seconds()`` gets a ReadTimeout; the items after it go on in
    a new child. The child stuck on it is killed and never waited for (a wait stuck in the kernel
    ends only when the mount answers), so this process can still exit: a thread of its own stuck
    so would keep it from exiting (the leader stays a zombie until every thread is gone).

    ``key_of(item)`` names an item's call ("the scan of FOLDER", the folder of a path): while
    the child stuck on an earlier call with that key has not ended, the call is not made again
    (the item gets a ReadTimeout at once), so that a loop over a hung folder keeps one stuck
    child, not one per turn, and 10,000 paths in a hung folder cost one bound, not 10,000.
    ``stopped`` is
    asked every POLL_SECONDS (a StopFlag's: a stop acts at once even with the bound far off);
    once true, the items not done get an InterruptedError. Where there is no fork (not POSIX),
    the calls run in a thread instead."""
    items, seconds = list(items), read_seconds()
    _reap()
    keys = [key_of(item) for item in items] if key_of is not None else [None] * len(items)
    stuck = {key for key in keys if key is not None and _still_stuck(key)}
    pending = [i for i, key in enumerate(keys) if key not in stuck]  # the others get a ReadTimeout at once
    results: list = [timeout_error(path_of(item), what, seconds) for item in items]
    run_rest = _in_child if hasattr(os, "fork") else _in_thread
    while pending and not stopped():
        done: list = []
        left = run_rest(call, [items[i] for i in pending], done, seconds, stopped)
        for i, result in zip(pending, done):
            results[i] = result
        pending = pending[len(done):]
        if left is not None:
            _orphans.append(left)
        if pending and not stopped():  # that item hung (or its child died): it keeps its ReadTimeout
            key = keys[pending.pop(0)]
            if key is not None and left is not None:
                _stuck[key] = left
                pending = [i for i in pending if keys[i] != key]  # the same key: a ReadTimeout at once
    for i in pending:
        results[i] = InterruptedError(errno.EINTR, "stopped", str(path_of(items[i])))
    return results


POLL_SECONDS = 0.1


# key -> the child (pid) or thread still stuck on that key's last call; every child left stuck
_stuck: dict[str, Union[int, threading.Thread]] = {}
_orphans: list[Union[int, threading.Thread]] = []


def _reap() -> None:
    """Wait for the children left stuck that have ended since (the mount answered)."""
    _orphans[:] = [o for o in _orphans if (o.is_alive() if isinstance(o, threading.Thread) else _alive(o))]


def _still_stuck(key: str) -> bool:
    stuck = _stuck.get(key)
    if isinstance(stuck, threading.Thread):
        alive = stuck.is_alive()
    else:
        alive = stuck is not None and _alive(stuck)
    if not alive:
        _stuck.pop(key, None)
    return alive


def _alive(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:  # reaped already
        return False


FLUSH_SECONDS = 0.02  # how often the child sends what it has: the parent then knows which item hangs


def _in_child(call, items: list, results: list, seconds: float, stopped: Callable[[], bool]) -> Optional[int]:
    """Run ``call`` over ``items`` in a forked child, appending to ``results`` what it sends;
    returns the pid of a child that did not finish (killed, perhaps stuck: not waited for)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its stdio closed (a stuck child must not hold the parent's pipes)
        try:
            os.close(read_end)
            _become_child()
            _serve(call, items, write_end)
        finally:
            os._exit(0)
    os.close(write_end)
    before, finished = len(results), False
    try:
        finished = _receive(read_end, results, seconds, stopped) and len(results) - before == len(items)
    finally:
        os.close(read_end)
        if not finished:  # hung, stopped or interrupted: the child may be stuck in the kernel
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if finished:
        os.waitpid(pid, 0)
        return None
    return pid


def _receive(fd: int, results: list, seconds: float, stopped: Callable[[], bool]) -> bool:
    """Read the child's length-prefixed pickled batches into ``results`` until it ends (True),
    or sends nothing for ``seconds``, or ``stopped()`` (False)."""
    buffer, quiet = b"", 0.0
    while quiet < seconds:
        if stopped():
            return False
        wait = min(POLL_SECONDS, seconds - quiet)
        if not select.select([fd], [], [], wait)[0]:
            quiet += wait
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return True
        quiet, buffer = 0.0, buffer + chunk
        while len(buffer) >= 8 and len(buffer) >= 8 + (size := int.from_bytes(buffer[:8], "little")):
            results += pickle.loads(buffer[8:8 + size])
            buffer = buffer[8 + size:]
    return False


def _serve(call, items: list, fd: int) -> None:
    """The child's work: every result, sent in batches every FLUSH_SECONDS by a second thread,
    so that what was done before an item that hangs reaches the parent."""
    out: list = []
    finished = threading.Event()

    def send() -> None:
        sent = 0
        while not finished.wait(FLUSH_SECONDS) or sent < len(out):
            end = len(out)
            if end > sent:
                _write(fd, pickle.dumps([_portable(r) for r in out[sent:end]]))
                sent = end

    sender = threading.Thread(target=send)
    sender.start()
    try:
        for item in items:
            try:
                out.append(call(item))
            except Exception as e:  # the item's own failure, given back as its result
                out.append(e)
    finally:
        finished.set()
        sender.join()


def _portable(result):
    """``result`` if it pickles, else an OSError telling what it was (an exception of a library
    that does not pickle)."""
    try:
        pickle.dumps(result)
        return result
    except Exception:
        return OSError(errno.EIO, repr(result))


def _in_thread(call, items: list, results: list, seconds: float,
               stopped: Callable[[], bool]) -> Optional[threading.Thread]:
    """``_in_child`` where there is no fork: a daemon thread (left to its wait if stuck)."""
    out, cancelled = [], threading.Event()
    thread = threading.Thread(target=_each, args=(call, items, out, cancelled), daemon=True,
                              name="bounded calls")
    thread.start()
    seen, quiet = -1, 0.0
    while thread.is_alive() and quiet < seconds and not stopped():
        if len(out) != seen:  # it went on since the last look
            seen, quiet = len(out), 0.0
        thread.join(POLL_SECONDS)
        quiet += POLL_SECONDS
    cancelled.set()  # a hung thread that ever comes back stops there
    done = out[:len(out)]
    results += done
    return thread if len(done) < len(items) else None


def _each(call, items: list, out: list, cancelled: threading.Event) -> None:
    for item in items:
        if cancelled.is_set():
            return
        try:
            out.append(call(item))
        except Exception as e:  # the item's own failure, given back as its result
            out.append(e)
