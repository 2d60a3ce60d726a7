"""The test suite's fault injection, run at the start of every Python process that has this
folder on its PYTHONPATH (``tests.faults.environment``): the CLI run as a subprocess, and the Ray
workers of a Ray instance started with it. Product code only names its points (``at_point`` in
transcriber/app/run/signals.py, an audit event); this hook acts on them, as the test's environment says:

- ``TRANSCRIBER_TEST_KILL_AT=POINT``: SIGKILL this process at POINT ("checkpoint:N", right after
  the job's checkpoint N was committed; "step:N", the Nth engine step taken, not yet
  committed; "outputs", the outputs written, the job not yet marked done);
- ``TRANSCRIBER_TEST_SIGNAL_AT=SIGNAL@POINT`` (e.g. "SIGTERM@step:1", "SIGSTOP@step:1"): send
  this process SIGNAL there: a stop or an outside kill mid-work, without a race;
- ``TRANSCRIBER_TEST_WORKER_SIGNAL_AT=SIGNAL@NAME:N`` (e.g. "SIGSTOP@talk.flac:3"): a Ray worker
  decoding the file named NAME from its start sends itself SIGNAL at its Nth step, before
  yielding it; a resumed decode never does, so the job can be resumed after the test kills the
  stopped worker.

The variables are read at each point, not at start: a Ray worker gets them from its runtime
environment.
"""

import os
import signal
import sys

POINT_EVENT = "jobs.point"  # transcriber.app.run.signals.POINT_EVENT (not imported: this runs before any import)


def _signal_at(variable: str, point: str) -> None:
    name, _, at = os.environ.get(variable, "").partition("@")
    if at and at == point:
        os.kill(os.getpid(), signal.Signals[name])  # a Python handler runs before this returns


def _at_point(event: str, args: tuple) -> None:
    if event != POINT_EVENT:
        return
    (point,) = args
    if os.environ.get("TRANSCRIBER_TEST_KILL_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)
    _signal_at("TRANSCRIBER_TEST_SIGNAL_AT", point)
    if point.startswith("worker-step:"):
        _signal_at("TRANSCRIBER_TEST_WORKER_SIGNAL_AT", point[len("worker-step:"):])


sys.addaudithook(_at_point)
