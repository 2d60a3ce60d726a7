"""Who holds a job, and for how long: lease owners, the heartbeat that keeps a lease alive, the
/proc check that sees a dead owner of this host, and the clock that says when to checkpoint.

A runner claims a job with a lease in the store (transcriber/app/store/jobstore.py); a ``Heartbeat`` thread renews
it while the job runs, so a slow model load never lets it expire under a live runner. Both the
heartbeat and the clock are made by the attempt (transcriber/app/run/attempt.py), the one place an attempt's
life is written, for every runner. A lease
whose owner process is gone (``owner_is_dead``) is expired at once by the next run; one of
another host expires by time only.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Callable

DEFAULT_LEASE_SECONDS = 60.0  # a runner that stops heartbeating loses its job after this long
DEFAULT_CHECKPOINT_SECONDS = 10.0
DEFAULT_WORKER_TIMEOUT = 300.0  # seconds without an item from a Ray worker (a model load included): dead


def worker_name() -> str:
    """``host:pid``: the process that decodes a job, as ``transcribe status`` shows it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_is_dead(owner: str) -> bool:
    """A lease owner (``host:pid:nonce``) that is a process of this host that no longer runs.
    Other hosts' runners are never judged: their leases expire by time."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False  # this process (another Runner in it): alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a killed process its parent has not reaped yet is a zombie: dead all the same
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


class Heartbeat:
    """Keeps a job's lease alive from a thread of its own, so a long window or a slow model load
    never lets it expire under a live runner: ``renew()`` every ``every`` seconds until ``stop``,
    or until it says the lease is lost (False) or fails (a busy database: the next checkpoint's
    own fence decides). It knows no database: ``renew`` does (transcriber/app/run/attempt.py)."""

    def __init__(self, renew: Callable[[], bool], every: float, name: str = "heartbeat"):
        self.renew, self.every = renew, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.every):
                if not self.renew():
                    return
        except Exception:  # noqa: BLE001 - see the class
            pass

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class CheckpointClock:
    """When a decoding commits: after every ``every`` seconds of audio since the last commit.
    The one rule, whether the engine runs in the runner's process or on a Ray worker."""

    def __init__(self, position: float, every: float):
        self.last, self.every = position, every

    def due(self, position: float) -> bool:
        if position - self.last >= self.every:
            self.last = position
            return True
        return False
