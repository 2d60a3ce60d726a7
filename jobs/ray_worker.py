"""A model worker on a Ray cluster: loads the model once, streams back the steps of the files it is
handed. Plain Python: jobs/ray_runner.py makes it a Ray actor (this module never imports Ray).

A worker never touches the job database. For each file the driver (jobs/ray_runner.py) calls the
generator ``transcribe(spec, path, state, position, checkpoint_seconds)``, and Ray streams back,
one object per item, as they are made:

1. ``Started``: the engine is ready (built once per job spec, the model loaded once per process);
2. a ``transcriber.Step`` per engine step: the words and segments committed since the last one and
   the position, so the driver's bar moves with the audio; the resumable engine state only on the
   steps the driver is to commit (``CheckpointClock``, the runner's own rule), so a 1 s streaming
   step does not ship the session's audio buffer across the cluster every second.

The generator ending is the end of the file. An error (unreadable media, a bad option for the
model) ends it too, and reaches the driver as the job's error. The media is read by path: the
driver and every worker must see the same files at the same paths.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Optional, Union

from transcriber import Step, TranscriberError, blas, settings

from .engines import EngineCache
from .attempt import build_engine
from .lease import CheckpointClock, worker_name
from .spec import JobSpec


# Test-only: "SIGNAL@NAME:N" (e.g. "SIGSTOP@talk.flac:3"): a worker decoding the file named NAME
# from its start sends itself SIGNAL at its Nth step, before yielding it; a resumed run never
# does, so the job can be resumed after the test kills the stopped worker.
SIGNAL_HOOK_ENV = "TRANSCRIBER_TEST_WORKER_SIGNAL_AT"


def _signal_hook(name: str, n: int) -> None:
    signame, _, at = (settings.get(SIGNAL_HOOK_ENV) or "").partition("@")
    if at and at == f"{name}:{n}":
        os.kill(os.getpid(), signal.Signals[signame])


class ClusterError(TranscriberError):
    """Ray could not be started or joined, or no worker is left (one line for the CLI)."""


@dataclass(frozen=True)
class Started:
    """The first item of a stream: who decodes the file, with which model."""

    worker: str  # host:pid of the worker process
    model: str
    node: str = ""  # the id of the cluster node it runs on ("" when it does not know)


class Worker:
    """One model worker (a Ray actor): engines built on first use, kept for the process."""

    def __init__(self, blas_threads: Optional[int] = None):
        if blas_threads:
            blas.set_threads(blas_threads)  # several workers share a node's cores
        self.engines = EngineCache()
        self.name = worker_name()

    def identity(self) -> tuple[str, str]:
        """(``host:pid``, node id); answered once the worker is up (again, after a restart)."""
        return self.name, self.node()

    def node(self) -> str:
        """The id of the cluster node this worker runs on: "" here; jobs/ray_runner.py's actor
        class, which may import Ray, knows it."""
        return ""

    def transcribe(self, spec: dict, path: str, state: Optional[dict], position: float,
                   checkpoint_seconds: float) -> Iterator[Union[Started, Step]]:
        """The file's steps from ``state`` (None: the start), ``position`` seconds in."""
        engine = build_engine(self.engines, JobSpec.from_dict(spec))
        yield Started(self.name, engine.model_name, self.node())
        clock = CheckpointClock(position, checkpoint_seconds)
        fresh, name = state is None, Path(path).name
        with contextlib.closing(engine.steps(path, state)) as steps:  # closing kills ffmpeg
            for n, step in enumerate(steps, 1):
                if fresh:
                    _signal_hook(name, n)
                yield step if clock.due(step.position) else replace(step, state=None)
