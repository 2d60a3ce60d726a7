"""A model worker on a Ray cluster: loads the model once, streams back the steps of the files it is
handed. Plain Python: transcriber/app/run/ray_runner.py makes it a Ray actor (this module never imports Ray).

A worker never touches the job database. For each file the driver (transcriber/app/run/ray_runner.py) calls the
generator ``transcribe(spec, path, state, position, checkpoint_seconds)``, and Ray streams back,
one object per item, as they are made:

1. ``Started``: the engine is ready (built once per job spec, the model loaded once per process);
2. a ``transcriber.Step`` per engine step: the words and segments committed since the last one and
   the position, so the driver's bar moves with the audio; the resumable engine state only on the
   steps the driver is to commit (``commit_marked``: the clock of every attempt, transcriber/app/run/attempt.py),
   so a 1 s streaming step does not ship the session's audio buffer across the cluster every
   second.

The generator ending is the end of the file. An error (unreadable media, a bad option for the
model) ends it too, and reaches the driver as the job's error. The media is read by path: the
driver and every worker must see the same files at the same paths.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Union

from transcriber import Step, TranscriberError, blas

from transcriber.app.run.attempt import build_engine, commit_marked
from transcriber.app.run.engines import EngineCache
from transcriber.app.store.lease import worker_name
from transcriber.app.run.signals import at_point
from transcriber.app.store.spec import JobSpec


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
        """The id of the cluster node this worker runs on: "" here; transcriber/app/run/ray_runner.py's actor
        class, which may import Ray, knows it."""
        return ""

    def transcribe(self, spec: dict, path: str, state: Optional[dict], position: float,
                   checkpoint_seconds: float) -> Iterator[Union[Started, Step]]:
        """The file's steps from ``state`` (None: the start), ``position`` seconds in."""
        engine = build_engine(self.engines, JobSpec.from_dict(spec))
        yield Started(self.name, engine.model_name, self.node())
        fresh, name = state is None, Path(path).name
        with contextlib.closing(engine.steps(path, state)) as steps:  # closing kills ffmpeg
            for n, step in enumerate(commit_marked(steps, position, checkpoint_seconds), 1):
                if fresh:  # a named point of a decode from the file's start (transcriber/app/run/signals.py)
                    at_point(f"worker-step:{name}:{n}")
                yield step
