"""The reader process of ``transcriber.deadline.bounded``: the child that makes the calls touching files,
and the protocol between it and the caller.

``Reader`` starts it (a fresh interpreter, posix_spawn: never a fork of a process that runs
threads) and talks to it over two pipes in length-prefixed messages: a request is a pickled
``(CALL, folder, call, args)`` or ``(EACH, folder, call, items)``; the reader answers TAKEN once
it has read it (its call's modules imported), then the result (``(ok, value)``), or for a
batch the results in lists as they come and END. ``serve`` is the child's loop. What calls to
make, how long to wait and what to do with a reader that does not answer is ``bounded``'s.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import select
import signal
import sys
import threading
import time
from typing import Callable, Union

SPAWN = hasattr(os, "posix_spawn") and bool(sys.executable)  # (an embedded interpreter has none)
# a request: (CALL, the caller's working folder, call, args) or (EACH, that folder, call, items):
# a relative path means the same there (the reader lives on while its caller changes folders)
CALL, EACH = "call", "each"
TAKEN, END = b"t", b"e"  # the reader's messages besides pickles: a request read, a batch answered
# How long a request may take to be read, before its bound starts: unpickling it imports the
# modules of its call in the reader (once per reader: local code, ~0.2 s at most).
TAKE_SECONDS = 60.0
CLOSE_SECONDS = 1.0  # an idle reader told to end ends at once; one still there after this is killed
POLL_SECONDS = 0.1  # how often a caller's wait asks whether it was stopped
FLUSH_SECONDS = 0.02  # how often the reader sends what it has: the caller then knows which item hangs
# The reader: a fresh interpreter with this process's import path (as its arguments), then
# serve's loop on its stdin and stdout.
SERVE = "import sys; sys.path[:] = sys.argv[1:]; from transcriber.deadline.readerproc import serve; serve()"

serving = False  # True in the reader: a call there is made as is (the caller bounds it)
# every reader (pid) or thread left stuck, abandoned: reaped once it has ended (``bounded._reap``)
orphans: list[Union[int, threading.Thread]] = []


class ReaderGone(Exception):
    """The reader ended (killed from outside): its call may be made again, elsewhere."""


class ReaderStuck(Exception):
    """The reader did not answer in time: abandoned (killed, never waited for)."""


class Reader:
    """A process started once that makes calls for this process, one request at a time, on two
    pipes (length-prefixed messages): a call costs a round trip (~0.1 ms). It tells when it has
    read a request (TAKEN: the modules of its call imported), then answers it: the result of a
    call, or the results of a batch as they come, then END. One that does not answer in time
    is killed and left to its wait in the kernel (it ends when the mount answers); the next call
    gets a new one. So no thread of this process ever waits on a file, and the process can exit
    while a mount hangs. The reader is in a session of its own (a Ctrl-C at the terminal is this
    process's to handle) and ends when this process closes its pipe (exits, even by kill -9)."""

    def __init__(self):
        requests, self._requests = os.pipe()
        self._answers, answers = os.pipe()
        self.owner = os.getpid()
        self._buffer = b""
        self._owed = 0  # answers to requests ``ask``ed, not read yet
        actions = [(os.POSIX_SPAWN_DUP2, requests, 0), (os.POSIX_SPAWN_DUP2, answers, 1),
                   (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)]
        try:
            self.pid = os.posix_spawn(sys.executable, [sys.executable, "-c", SERVE, *sys.path], os.environ,
                                      file_actions=actions, setsid=True)
        except BaseException:
            for fd in (self._requests, self._answers):
                os.close(fd)
            raise
        finally:
            os.close(requests)
            os.close(answers)

    def call(self, request: bytes, seconds: float) -> tuple[bool, object]:
        """For a pickled (CALL, folder, call, args): (True, the result) or (False, the exception raised);
        ReaderStuck after ``seconds`` without an answer, ReaderGone if the reader ended: it is
        then closed."""
        try:
            self._send(request)
            return self._loads(self._next(seconds))
        except BaseException:  # stuck, gone, or a Ctrl-C during the wait: its answer would come out of turn
            self.abandon()
            raise

    def each(self, request: bytes, n: int, results: list, seconds: float, stopped: Callable[[], bool]) -> bool:
        """For a pickled (EACH, folder, call, items) of ``n`` items: append each item's result (or
        exception) to ``results`` as they come; whether all came (False: one item made no
        progress for ``seconds``, or ``stopped()``, or the reader ended: it is then closed)."""
        start = len(results)
        try:
            self._send(request)
            while (answer := self._next(seconds, stopped)) != END:
                got = self._loads(answer)
                if not isinstance(got, list):  # (False, why): the request failed as a whole there
                    results += [got[1]] * (n - (len(results) - start))  # (its call or folder): each item's failure
                    break
                results += got
            return True
        except (ReaderStuck, ReaderGone, InterruptedError):
            self.abandon()
            return False
        except BaseException:
            self.abandon()
            raise

    def ask(self, request: bytes) -> None:
        """Send a (CALL, ...) request whose answer no one waits for (read before the next)."""
        with contextlib.suppress(BrokenPipeError):  # gone: the next request finds out
            _write(self._requests, request)
            self._owed += 1

    def _send(self, request: bytes) -> None:
        while self._owed:  # the answers to ``ask``: taken, then answered
            if self._next(TAKE_SECONDS) != TAKEN:
                raise ReaderGone
            self._next(TAKE_SECONDS)
            self._owed -= 1
        try:
            _write(self._requests, request)
        except BrokenPipeError:
            raise ReaderGone from None
        if self._next(TAKE_SECONDS) != TAKEN:
            raise ReaderGone

    def _next(self, seconds: float, stopped: Callable[[], bool] = lambda: False) -> bytes:
        """The reader's next message; ReaderStuck when ``seconds`` pass without it,
        InterruptedError once ``stopped()`` (asked every POLL_SECONDS), ReaderGone at its end.
        The wait is a select(): a signal's handler runs at once."""
        deadline = time.monotonic() + seconds
        while len(self._buffer) < 8 or len(self._buffer) < 8 + int.from_bytes(self._buffer[:8], "little"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReaderStuck
            if stopped():
                raise InterruptedError
            if select.select([self._answers], [], [], min(left, POLL_SECONDS))[0]:
                chunk = os.read(self._answers, 1 << 20)
                if not chunk:
                    raise ReaderGone
                self._buffer += chunk
        size = int.from_bytes(self._buffer[:8], "little")
        message, self._buffer = self._buffer[8:8 + size], self._buffer[8 + size:]
        return message

    @staticmethod
    def _loads(answer: bytes):
        try:
            return pickle.loads(answer)
        except Exception as e:  # an exception whose class does not unpickle: told as what it was
            return False, OSError(errno.EIO, f"the reader's answer: {e!r}")

    def close(self) -> None:
        """Tell the reader to end (its pipe closed) and wait for it, briefly: an idle reader ends at
        once (its time then counts among this process's children's); one that does not is killed."""
        for fd in (self._requests, self._answers):
            with contextlib.suppress(OSError):
                os.close(fd)
        deadline = time.monotonic() + CLOSE_SECONDS
        while alive(self.pid):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                orphans.append(self.pid)
                return
            time.sleep(0.001)

    def abandon(self) -> None:
        """Kill the reader and forget it: never waited for (it may be stuck in the kernel)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        for fd in (self._requests, self._answers):
            with contextlib.suppress(OSError):
                os.close(fd)
        orphans.append(self.pid)


def serve() -> None:
    """The reader's loop (started by ``Reader``): each request read, told TAKEN, answered. Its
    pipes are moved off stdin and stdout, which become /dev/null (a call that prints cannot
    break the messages); SIGINT and SIGTERM are ignored (the stop is the caller's to handle)."""
    global serving
    serving = True
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    requests, answers = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    here = None  # the caller's working folder, as last moved to
    while data := _read(requests):
        try:
            kind, folder, call, args = pickle.loads(data)
        except Exception as e:  # a call this interpreter cannot import: its failure, told
            _write(answers, TAKEN)
            _write(answers, pickle.dumps((False, _portable(e))))
            continue
        _write(answers, TAKEN)
        try:  # after TAKEN: within the bound (the folder may be on a hung mount)
            if folder not in (here, None):
                os.chdir(folder)
                here = folder
        except OSError as e:  # gone since: the request fails, each of its items with it
            _write(answers, pickle.dumps((False, e)))
            continue
        if kind == EACH:
            _answer_each(call, args, answers)
            continue
        try:
            answer = (True, call(*args))
        except Exception as e:  # the call's own failure, raised in the caller
            answer = (False, e)
        _write(answers, pickle.dumps((answer[0], _portable(answer[1]))))


def _write(fd: int, data: bytes) -> None:
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:
        view = view[os.write(fd, view):]


def _read(fd: int) -> bytes:
    """One length-prefixed message from ``fd``, waiting as long as it takes; b"" at its end."""
    buffer, size = b"", None
    while size is None or len(buffer) < 8 + size:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b""
        buffer += chunk
        if size is None and len(buffer) >= 8:
            size = int.from_bytes(buffer[:8], "little")
    return buffer[8:8 + size]


def call_or_error(call, item):
    """``call(item)``, or the exception it raised (an item's own failure, told as its result)."""
    try:
        return call(item)
    except Exception as e:  # the item's own failure, given back as its result
        return e


def alive(pid: int) -> bool:
    """Whether the child ``pid`` still runs (reaped here once it has ended)."""
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:  # reaped already
        return False


def _answer_each(call, items: list, fd: int) -> None:
    """The reader's work on a batch: every result, sent in batches every FLUSH_SECONDS by a
    second thread (so that what was done before an item that hangs reaches the caller), then END."""
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
            out.append(call_or_error(call, item))
    finally:
        finished.set()
        sender.join()
    _write(fd, END)


def _portable(result):
    """``result`` if it pickles, else an OSError telling what it was (an exception of a library
    that does not pickle)."""
    try:
        pickle.dumps(result)
        return result
    except Exception:
        return OSError(errno.EIO, repr(result))
