"""Stopping a run: SIGINT/SIGTERM as a ``StopFlag`` the attempts check at each step, and the
named points of an attempt (``at_point``) that a test may act on.

A first signal asks for a stop: the job in hand is checkpointed at its next step and given back
(``Stopped``). A second Ctrl-C stops at once, and so does a step that has not reached its
checkpoint ``STOP_GRACE_SECONDS`` after the first (its work is dropped: the job resumes from the
checkpoint before it).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Optional

# The audit event (``sys.audit``) of each named point of an attempt: "step:N" (the engine has
# yielded its Nth step to this process, not yet checkpointed), "checkpoint:N" (right after the
# job's checkpoint number N was committed), "outputs" (the outputs written, the job not yet
# marked done) and, on a Ray worker decoding a file from its start, "worker-step:NAME:N".
POINT_EVENT = "jobs.point"

# After a stop is asked, how long the step being decoded may take to reach its checkpoint; past
# that it is dropped (the job resumes from its last checkpoint), so a stop acts within 2 s even
# in a long one-shot window or a slow model load.
STOP_GRACE_SECONDS = 1.5


def at_point(point: str) -> None:
    """Tell who observes the named points of an attempt that this one is reached (an audit
    event, ``POINT_EVENT``). Nothing observes them in production; the test suite's fault
    injection does (tests/faults/sitecustomize.py: kill or signal this process right there)."""
    sys.audit(POINT_EVENT, point)


class Stopped(Exception):
    """A stop was requested; the job was checkpointed and is given back."""


class StopFlag:
    """SIGINT/SIGTERM request a stop (the runner checks it at each step and checkpoints there);
    a second SIGINT raises KeyboardInterrupt at once, and so does the end of ``grace`` seconds
    after the first request (None: wait for the checkpoint however long). Handlers are
    installed only in the main thread."""

    def __init__(self, on_request=None, grace: Optional[float] = None):
        self.signum: Optional[int] = None
        self.on_request = on_request
        self.grace = grace
        self._previous: dict[int, object] = {}
        self._timer: Optional[threading.Timer] = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def request(self, signum: int = signal.SIGTERM) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        if first and self.on_request:
            self.on_request(signum)
        if first and self.grace is not None and self._previous:
            # a real SIGINT to the main thread: a blocking call there (a sleep, a read) is cut short
            main = threading.main_thread().ident
            self._timer = threading.Timer(self.grace, signal.pthread_kill, [main, signal.SIGINT])
            self._timer.daemon = True
            self._timer.start()

    def _handle(self, signum, frame) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.request(signum)

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake up as soon as a stop is requested."""
        deadline = time.monotonic() + seconds
        while not self.requested and time.monotonic() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def __enter__(self) -> "StopFlag":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
