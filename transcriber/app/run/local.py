"""The in-process runner: claim a job, run its engine here, one ``Attempt`` per claim.

For each job it claims (a lease in the store) it runs an ``Attempt`` (transcriber/app/run/attempt.py: keep the
lease alive, check the file, resume from the last checkpoint, checkpoint as it goes, stop when
asked, write the outputs, book the end: the same code as the Ray runner's, transcriber/app/run/ray_runner.py)
and hands it the engine's steps, decoded in this process. With ``batch_files`` > 1 and an engine
that can (``Engine.batch``: one-shot), several files of one spec are decoded side by side
(``SideBySide``), each still its own attempt.

A crash between any two steps is safe: the next runner resumes from the last checkpoint (or, if
the words were complete, only rewrites the outputs).

SIGINT/SIGTERM (``StopFlag``, transcriber/app/run/signals.py) stop the runner after the current job's next
checkpoint; the job goes back to the queue and resumes from there next time.
"""

from __future__ import annotations

import contextlib
from typing import Optional

from transcriber import start_reader

from transcriber.app.run.attempt import DEFAULT_MAX_ATTEMPTS, Attempt, Ledger, RunResult, build_engine
from transcriber.app.store.domain import Job
from transcriber.app.run.engines import EngineCache
from transcriber.app.store.lease import DEFAULT_CHECKPOINT_SECONDS, DEFAULT_LEASE_SECONDS, owner_is_dead, worker_name
from transcriber.app.cli.progress import Reporter
from transcriber.app.run.signals import STOP_GRACE_SECONDS, StopFlag, Stopped
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.jobstore import JobStore

# what transcriber/app/cli/main.py and transcriber/app/run/watch.py take from here: a run's settings, its result and its stop
__all__ = ["DEFAULT_CHECKPOINT_SECONDS", "DEFAULT_LEASE_SECONDS", "DEFAULT_MAX_ATTEMPTS", "STOP_GRACE_SECONDS",
           "RunResult", "Runner", "StopFlag", "owner_is_dead"]


class Runner:
    """Runs jobs one at a time in this process (transcriber/app/run/ray_runner.py: on a Ray cluster)."""

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
        """The job's attempt, with its engine run in this process (its steps pulled)."""
        with self.ledger.attempt(job, worker_name(), result) as attempt:
            resume = attempt.begin()
            if resume is not None:
                engine = build_engine(self.engines, attempt.spec)
                attempt.model = engine.model_name
                if self.stop.requested:  # asked while the model was loading: nothing new to commit
                    raise Stopped
                attempt.consume(engine.steps(attempt.path, resume.state))

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
    (its steps pushed as the batch's events come), with its own heartbeat, checkpoints and
    outcome, exactly as ``Runner._process`` runs it."""

    def __init__(self, runner: Runner, model: str, batch, ids: list[int], result: RunResult):
        self.ledger, self.model, self.batch = runner.ledger, model, batch
        self.ids, self.result = ids, result
        self.width = runner.batch_files
        self.live: set[Attempt] = set()  # the attempts whose file is in the batch

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
        attempt = self.ledger.attempt(job, worker_name(), self.result).start()
        try:
            resume = attempt.begin()
            if resume is not None:
                attempt.model = self.model
                self.batch.add(attempt, attempt.path, resume.state)
                self.live.add(attempt)
                return
        except BaseException as e:
            attempt.end(e)
            return
        attempt.end()  # the words were complete: only the outputs were left

    def _take(self, attempt: Attempt, event) -> bool:
        """One event of the batch for ``attempt``: a Step, None (its file is done) or the
        exception that ended it. Whether the attempt ended (room for another job)."""
        if event is None or isinstance(event, BaseException):
            self._end(attempt, event)
            return True
        try:
            attempt.take(event)
        except BaseException as e:
            self._end(attempt, e)
            return True
        return False

    def _end(self, attempt: Attempt, error: Optional[BaseException] = None) -> None:
        self.live.discard(attempt)
        self.batch.drop(attempt)
        attempt.end(error)
