"""The in-process runner: claim a job, run its engine here, one ``Attempt`` per claim.

For each job it claims (a lease in the store, kept alive by a ``Heartbeat`` thread: jobs/lease.py)
it runs an ``Attempt`` (jobs/attempt.py: check the file, resume from the last checkpoint,
checkpoint as it goes, write the outputs) with the engine's steps decoded in this process, and
books its end in the ``Ledger`` (the same code as the Ray runner's, jobs/ray_runner.py). With
``batch_files`` > 1 and an engine that can (``Engine.batch``: one-shot), several files of one
spec are decoded side by side (``SideBySide``), each still its own attempt.

A crash between any two steps is safe: the next runner resumes from the last checkpoint (or, if
the words were complete, only rewrites the outputs).

SIGINT/SIGTERM (``StopFlag``, jobs/signals.py) stop the runner after the current job's next
checkpoint; the job goes back to the queue and resumes from there next time.
"""

from __future__ import annotations

import contextlib
from typing import Optional

from transcriber import Step, start_reader

from .attempt import DEFAULT_MAX_ATTEMPTS, Attempt, Ledger, RunResult, build_engine
from .engines import EngineCache
from .lease import DEFAULT_CHECKPOINT_SECONDS, DEFAULT_LEASE_SECONDS, CheckpointClock, Heartbeat, owner_is_dead, worker_name
from .progress import Reporter
from .signals import STOP_GRACE_SECONDS, StopFlag, Stopped, at_point
from .spec import JobSpec
from .store import Job, JobStore

# what jobs/cli.py and jobs/watch.py take from here: a run's settings, its result and its stop
__all__ = ["DEFAULT_CHECKPOINT_SECONDS", "DEFAULT_LEASE_SECONDS", "DEFAULT_MAX_ATTEMPTS", "STOP_GRACE_SECONDS",
           "RunResult", "Runner", "StopFlag", "owner_is_dead"]


class Runner:
    """Runs jobs one at a time in this process (jobs/ray_runner.py: on a Ray cluster)."""

    def __init__(self, store: JobStore, *, engines: Optional[EngineCache] = None,
                 reporter: Optional[Reporter] = None, stop: Optional[StopFlag] = None,
                 owner: Optional[str] = None, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS, batch_files: int = 1):
        self.ledger = Ledger(store, reporter=reporter, stop=stop, owner=owner, max_attempts=max_attempts,
                             checkpoint_seconds=checkpoint_seconds, lease_seconds=lease_seconds)
        self.store, self.reporter, self.stop = store, self.ledger.reporter, self.ledger.stop
        self.batch_files = batch_files  # files decoded side by side, where the engine can (one-shot)
        self.engines = engines or EngineCache()
        start_reader()  # the attempts' reads of their files: the reader boots now, not at the first read

    def run(self, ids, result: Optional[RunResult] = None) -> RunResult:
        """Run the jobs among ``ids`` that are queued (or stalled) until none is left, or a stop."""
        ids = list(ids)
        result = result or RunResult()
        ledger = self.ledger
        while not self.stop.requested:
            self.store.expire_dead_leases(owner_is_dead)
            job = ledger.claim(ids)
            if job is None:
                break
            side_by_side = self._side_by_side(job, ids, result)
            if side_by_side is None:
                self._process(job, result)
            else:
                side_by_side.run(job)
        if self.stop.requested:
            result.stopped = self.stop.signum
        return result

    def _process(self, job: Job, result: RunResult) -> None:
        attempt = Attempt(self.ledger, job, worker_name())
        try:
            with Heartbeat(self.store, job.id, self.ledger.owner, self.ledger.lease_seconds):
                self._decode_here(attempt)
        except BaseException as e:
            self.ledger.settle(attempt, result, e)
        else:
            self.ledger.settle(attempt, result)

    def _decode_here(self, attempt: Attempt) -> None:
        """The attempt, with its engine run in this process, checkpointing as the steps come."""
        resume = attempt.begin()
        if resume is not None:
            engine = build_engine(self.engines, attempt.spec)
            attempt.model = engine.model_name
            if self.stop.requested:  # asked while the model was loading: nothing new to commit
                raise Stopped
            clock = CheckpointClock(resume.position, self.ledger.checkpoint_seconds)
            with contextlib.closing(engine.steps(attempt.path, resume.state)) as steps:  # closing kills ffmpeg
                for n, step in enumerate(steps, 1):
                    self.take_step(attempt, clock, n, step)
            attempt.complete()
        attempt.finish()

    def take_step(self, attempt: Attempt, clock: CheckpointClock, n: int, step: Step) -> None:
        """The ``n``th engine step of an attempt in this process: checkpoint it when due, and
        at once when a stop was asked (then stop)."""
        at_point(f"step:{n}")
        commit = clock.due(step.position) or self.stop.requested
        attempt.add(step, commit)
        if commit and self.stop.requested:
            raise Stopped

    def _side_by_side(self, job: Job, ids: list[int], result: RunResult) -> Optional["SideBySide"]:
        """Files decoded side by side from ``job`` on, when asked to and its engine can (a job
        whose words are complete needs no engine: ``_process`` writes its outputs)."""
        if self.batch_files < 2 or job.words_complete:
            return None
        try:
            engine = build_engine(self.engines, JobSpec.from_dict(job.spec))
        except Exception:  # noqa: BLE001 - _process builds it again and books the failure
            return None
        batch = engine.side_by_side(self.batch_files)
        return None if batch is None else SideBySide(self, engine.model_name, batch, ids, result)


class SideBySide:
    """A first job and the next queued jobs of the same spec, up to the batch's width at a
    time, their windows decoded together (``Engine.batch``). Each job is its own ``Attempt``
    with its own heartbeat, checkpoints and outcome, exactly as ``Runner._process`` runs it."""

    def __init__(self, runner: Runner, model: str, batch, ids: list[int], result: RunResult):
        self.runner, self.ledger, self.model, self.batch = runner, runner.ledger, model, batch
        self.ids, self.result = ids, result
        self.width = runner.batch_files
        self.live: dict[Attempt, tuple[contextlib.ExitStack, CheckpointClock]] = {}
        self.steps: dict[Attempt, int] = {}  # engine steps taken so far in this process, per attempt

    def run(self, first: Job) -> None:
        try:
            self._start(first)
            self._fill(first.spec)
            for attempt, event in self.batch.events():
                if attempt in self.live and self._take(attempt, event):
                    self._fill(first.spec)
        finally:  # a fatal error (the database, the model, a second Ctrl-C): give the others back
            self.batch.close()
            for attempt in list(self.live):
                with contextlib.suppress(BaseException):
                    self._end(attempt, Stopped())

    def _fill(self, spec: dict) -> None:
        """More jobs of the same spec, while there is room and no stop."""
        ledger = self.ledger
        while not ledger.stop.requested and len(self.batch) < self.width:
            job = ledger.claim(self.ids, spec)
            if job is None:
                return
            self._start(job)

    def _start(self, job: Job) -> None:
        """Begin the job's attempt and add it to the batch (or, words complete, finish it here)."""
        attempt, stack = Attempt(self.ledger, job, worker_name()), contextlib.ExitStack()
        try:
            stack.enter_context(Heartbeat(self.ledger.store, job.id, self.ledger.owner,
                                          self.ledger.lease_seconds))
            resume = attempt.begin()
            if resume is not None:
                attempt.model = self.model
                self.batch.add(attempt, attempt.path, resume.state)
                self.live[attempt] = (stack, CheckpointClock(resume.position, self.ledger.checkpoint_seconds))
                return
            attempt.finish()  # the words were complete: only the outputs were left
        except BaseException as e:
            stack.close()
            self.ledger.settle(attempt, self.result, e)
            return
        stack.close()
        self.ledger.settle(attempt, self.result)

    def _take(self, attempt: Attempt, event) -> bool:
        """One event of the batch for ``attempt``: a Step, None (its file is done) or the
        exception that ended it. Whether the attempt ended (room for another job)."""
        try:
            if isinstance(event, BaseException):
                raise event
            if event is not None:
                self.steps[attempt] = n = self.steps.get(attempt, 0) + 1
                self.runner.take_step(attempt, self.live[attempt][1], n, event)
                return False
            attempt.complete()
            attempt.finish()
        except BaseException as e:
            self._end(attempt, e)
        else:
            self._end(attempt)
        return True

    def _end(self, attempt: Attempt, error: Optional[BaseException] = None) -> None:
        stack = self.live.pop(attempt)[0]
        self.steps.pop(attempt, None)
        self.batch.drop(attempt)
        stack.close()
        self.ledger.settle(attempt, self.result, error)
