"""Calls that touch a file, with a deadline.

A file on a hung network mount (an NFS server gone, a FUSE daemon stuck) blocks ``open``,
``stat``, ``read`` and a folder's listing in the kernel for as long as the mount is hung. Once
a FUSE daemon has taken the request, no signal ends that wait, not even SIGKILL (the kernel's
``request_wait_answer`` then waits uninterruptibly; NFS hard mounts wait killably). So such a
call runs elsewhere and its caller waits only ``read_seconds()``: then it gets ``ReadTimeout``
(an OSError, so every "cannot read" path takes it, and an AudioError: the file's failure, told
in one line), naming the file and what did not answer, and goes on.

- ``bounded``: one call, made by the reader (``Reader``): a process started once that answers
  calls over a pipe, so a call costs a round trip (~0.1 ms), not a new process. A reader that
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
import select
import signal
import sys
import threading
import time
from typing import Callable, Iterable, Optional, TypeVar, Union

from . import settings
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
    seconds = settings.get(READ_SECONDS_ENV)  # checked: finite, > 0 (a bad value is a SettingError)
    return READ_SECONDS if seconds is None else seconds


def timeout_error(path, what: str, seconds: float) -> ReadTimeout:
    """The ReadTimeout for ``what`` ("a read got no answer", "ffmpeg gave no audio") on ``path``."""
    return ReadTimeout(errno.ETIMEDOUT, f"{what} for {seconds:g} s (a hung network mount?)",
                       str(path))


def bounded(call: Callable[..., T], *args, path=None, what: str = READ) -> T:
    """``call(*args)`` (which touches ``path``, else ``args[0]``), made by the reader, or
    ReadTimeout after ``read_seconds()``. ``call`` and ``args`` pickle (a module's function:
    ``os.stat``, ``content_key``), and so should its result; an exception it raises is raised
    here. The cost is a round trip on a pipe (see ``Reader``), not a new process."""
    path = args[0] if path is None and args else path
    if _direct:  # in the reader already: the bound is the caller's
        return call(*args)
    if not SPAWN:
        return _bounded_thread(call, args, path, what)
    seconds, request = read_seconds(), pickle.dumps((CALL, _here(), call, args))
    for tries in (1, 2):
        reader = _take_reader()
        try:
            ok, value = reader.call(request, seconds)
        except _ReaderGone:  # killed from outside (the OOM killer...): once more, in a new reader
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


def start_reader(*modules: str) -> None:
    """Start the reader now, if there is none, and have it import ``modules`` (those of the
    calls to come: "jobs.batch"): it boots (~40 ms: an interpreter) and imports them (~0.2 s)
    while this process goes on, not during the first calls."""
    if SPAWN and not _direct and not _idle:
        reader = Reader()
        if modules:
            reader.ask(pickle.dumps((CALL, _here(), _import_all, (modules,))))
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


SPAWN = hasattr(os, "posix_spawn") and bool(sys.executable)  # (an embedded interpreter has none)
# a request: (CALL, the caller's working folder, call, args) or (EACH, that folder, call, items):
# a relative path means the same there (the reader lives on while its caller changes folders)
CALL, EACH = "call", "each"
TAKEN, END = b"t", b"e"  # the reader's messages besides pickles: a request read, a batch answered
# How long a request may take to be read, before its bound starts: unpickling it imports the
# modules of its call in the reader (once per reader: local code, ~0.2 s at most).
TAKE_SECONDS = 60.0
# The reader: a fresh interpreter with this process's import path (as its arguments), then
# _serve's loop on its stdin and stdout.
SERVE = "import sys; sys.path[:] = sys.argv[1:]; from transcriber.bounded import _serve; _serve()"


class _ReaderGone(Exception):
    """The reader ended (killed from outside): its call may be made again, elsewhere."""


class _ReaderStuck(Exception):
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
        _ReaderStuck after ``seconds`` without an answer, _ReaderGone if the reader ended: it is
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
        except (_ReaderStuck, _ReaderGone, InterruptedError):
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
                raise _ReaderGone
            self._next(TAKE_SECONDS)
            self._owed -= 1
        try:
            _write(self._requests, request)
        except BrokenPipeError:
            raise _ReaderGone from None
        if self._next(TAKE_SECONDS) != TAKEN:
            raise _ReaderGone

    def _next(self, seconds: float, stopped: Callable[[], bool] = lambda: False) -> bytes:
        """The reader's next message; _ReaderStuck when ``seconds`` pass without it,
        InterruptedError once ``stopped()`` (asked every POLL_SECONDS), _ReaderGone at its end.
        The wait is a select(): a signal's handler runs at once."""
        deadline = time.monotonic() + seconds
        while len(self._buffer) < 8 or len(self._buffer) < 8 + int.from_bytes(self._buffer[:8], "little"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise _ReaderStuck
            if stopped():
                raise InterruptedError
            if select.select([self._answers], [], [], min(left, POLL_SECONDS))[0]:
                chunk = os.read(self._answers, 1 << 20)
                if not chunk:
                    raise _ReaderGone
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
        while _alive(self.pid):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                _orphans.append(self.pid)
                return
            time.sleep(0.001)

    def abandon(self) -> None:
        """Kill the reader and forget it: never waited for (it may be stuck in the kernel)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        for fd in (self._requests, self._answers):
            with contextlib.suppress(OSError):
                os.close(fd)
        _orphans.append(self.pid)


# The readers free to take: one, unless two threads read at once (each call takes one: a
# thread never waits for another's call).
_idle: list[Reader] = []
_direct = False  # True in the reader: a call there is made as is (the caller bounds it)


def _take_reader() -> Reader:
    _reap()
    while _idle:
        with contextlib.suppress(IndexError):  # another thread took the last one meanwhile
            reader = _idle.pop()
            if reader.owner == os.getpid():
                return reader
    return Reader()


def _forget_readers() -> None:
    """In a forked child (multiprocessing, Ray...): the parent's readers are not ours (their
    pipes are the parent's)."""
    _idle.clear()
    _orphans.clear()
    _stuck.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_readers)

CLOSE_SECONDS = 1.0


@atexit.register
def _close_readers() -> None:
    """At exit, the idle readers closed and reaped (not left to end after this process)."""
    while _idle:
        reader = _idle.pop()
        if reader.owner == os.getpid():
            reader.close()


def _serve() -> None:
    """The reader's loop (started by ``Reader``): each request read, told TAKEN, answered. Its
    pipes are moved off stdin and stdout, which become /dev/null (a call that prints cannot
    break the messages); SIGINT and SIGTERM are ignored (the stop is the caller's to handle)."""
    global _direct
    _direct = True
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


def _bounded_thread(call: Callable[..., T], args: tuple, path, what: str) -> T:
    """``bounded`` where there is no posix_spawn: the call in a daemon thread (one stuck there keeps
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
    """``call(item)`` for each item, in order, made by the reader in one request (not one per
    item: a folder of 10,000 files costs one round trip); each result (picklable), or the
    exception it raised. ``call`` and the items pickle. An item that makes no progress for
    ``read_seconds()`` gets a ReadTimeout; the items after it go on in a new reader. The reader
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
    items, seconds = list(items), read_seconds()
    if _direct:  # in the reader already: the bound is the caller's
        return [_call_or_error(call, item) for item in items]
    _reap()
    keys = [key_of(item) for item in items] if key_of is not None else [None] * len(items)
    stuck = {key for key in keys if key is not None and _still_stuck(key)}
    pending = [i for i, key in enumerate(keys) if key not in stuck]  # the others get a ReadTimeout at once
    results: list = [timeout_error(path_of(item), what, seconds) for item in items]
    run_rest = _in_reader if SPAWN else _in_thread
    while pending and not stopped():
        done: list = []
        left = run_rest(call, [items[i] for i in pending], done, seconds, stopped)
        for i, result in zip(pending, done):
            results[i] = result
        pending = pending[len(done):]
        if left is not None:
            _orphans.append(left)
        if pending and not stopped():  # that item hung (or its reader died): it keeps its ReadTimeout
            key = keys[pending.pop(0)]
            if key is not None and left is not None:
                _stuck[key] = left
                pending = [i for i in pending if keys[i] != key]  # the same key: a ReadTimeout at once
    for i in pending:
        results[i] = InterruptedError(errno.EINTR, "stopped", str(path_of(items[i])))
    return results


def _call_or_error(call, item):
    try:
        return call(item)
    except Exception as e:  # the item's own failure, given back as its result
        return e


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


FLUSH_SECONDS = 0.02  # how often the reader sends what it has: the caller then knows which item hangs


def _in_reader(call, items: list, results: list, seconds: float, stopped: Callable[[], bool]) -> Optional[int]:
    """Run ``call`` over ``items`` in the reader, appending to ``results`` what it sends;
    returns the pid of a reader that did not finish (killed, perhaps stuck: not waited for)."""
    request = pickle.dumps((EACH, _here(), call, items))
    reader = _take_reader()
    if reader.each(request, len(items), results, seconds, stopped):
        _idle.append(reader)
        return None
    return reader.pid  # abandoned


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
            out.append(_call_or_error(call, item))
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
        out.append(_call_or_error(call, item))
