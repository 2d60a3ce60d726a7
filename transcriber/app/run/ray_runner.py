"""The job runner on a Ray cluster (``transcribe --ray``): the driver owns the store, workers decode.

    driver (this process): the SQLite job store, claims, checkpoints, outputs, progress bars
      -> N Ray actors (transcriber/app/run/ray_worker.py), one model each, loaded once:
         worker.transcribe(...) is a Ray generator, one item per engine step, streamed back

The driver does with each job exactly what the in-process runner does (``Attempt`` in
transcriber/app/run/attempt.py: check the file, resume from the last checkpoint, commit each checkpoint in one
transaction, write the outputs atomically, mark it done), except that the engine's steps come from
a worker instead of a loop in this process. One thread, one event loop: ``ray.wait`` over the
streams in flight, each item handled as it arrives.

Faults:

- a worker process that dies (kill -9, out of memory, a crash in the decode) ends its stream with
  an error: the job is queued again and resumes from its last committed checkpoint on the next
  free worker; Ray restarts the dead actor (``max_restarts=-1``). A file whose worker dies a
  second time is failed, with that reason, and the batch goes on;
- a worker silent for ``worker_timeout`` seconds (no item: hung, or stopped) is killed and
  treated the same;
- a worker whose node died with it (its raylet gone: the machine, the node's agent, a drain) is
  not the file's fault: the job is queued again with no attempt counted, one line names the node,
  and the run goes on on the other nodes (Ray restarts the actor on one that has room). Ray's
  own verdict on a node comes late (after its health checks miss a few beats, ~15 s by default)
  and a worker's death reads the same either way (``ActorUnavailableError``), so the driver asks
  the node itself (``node_gone``): marked dead, preempted, or a raylet that refuses connections;
- a file a worker cannot read fails that job only, with the worker's error (ffmpeg's message);
- the driver killed: its leases are seen dead by the next run, which resumes every file from its
  checkpoint, as with the in-process runner. Its actors die with it (Ray ends the actors of a
  driver that is gone).

This module imports Ray: transcriber/app/cli/main.py imports it only for ``--ray``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Optional

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

from transcriber import TranscriberError
from transcriber.app import settings

from transcriber.app.cli.progress import Reporter
from transcriber.app.run.ray_worker import ClusterError, Started, Worker
from transcriber.app.run.attempt import DEFAULT_MAX_ATTEMPTS, Attempt, EnvironmentFault, Ledger, RunResult
from transcriber.app.store.lease import DEFAULT_CHECKPOINT_SECONDS, DEFAULT_LEASE_SECONDS, DEFAULT_WORKER_TIMEOUT, owner_is_dead
from transcriber.app.run.signals import StopFlag, Stopped
from transcriber.app.store.jobstore import JobStore

LOCAL_OBJECT_STORE_BYTES = 200 * 2**20  # items are small (a step; a state of a few MB at most)
START_SECONDS = 120.0  # a worker (re)starting (a process, imports; maybe a node to come up) gets this long
CONNECT_SECONDS = 10.0  # a cluster's head that does not accept a connection in this long is not there
NODE_CHECK_SECONDS = 2.0  # a node's raylet that does not accept a connection in this long is gone
WAIT_SECONDS = 1.0  # the event loop wakes up at least this often (hang checks, Ctrl-C)
DEATHS_ALLOWED = 1  # a file whose worker dies once more than this is failed


class WorkerDied(TranscriberError):
    """The worker decoding a job died or hung. ``retryable``: the job is queued again (resuming
    from its checkpoint), unless this file already cost a worker before."""

    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


class NodeLost(EnvironmentFault):
    """The node of the worker decoding a job died with it."""


class RayWorker(Worker):
    """The worker as a Ray actor: it also knows the id of its node."""

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()


def connect(address: str) -> tuple[bool, str]:
    """Start a local Ray instance (``address`` "local") or join a cluster ("auto", HOST:PORT);
    (whether this call started Ray, a line saying what). Ray already initialized in this
    process (a test, a notebook) is used as it is."""
    if ray.is_initialized():
        return False, "ray: using the Ray instance of this process"
    options = dict(logging_level=logging.ERROR, log_to_driver=False, include_dashboard=False)
    if address == "local":
        options.update(num_cpus=os.cpu_count(), object_store_memory=LOCAL_OBJECT_STORE_BYTES)
    unreachable = _unreachable(address)
    if unreachable:  # Ray itself would retry for many minutes
        raise ClusterError(f"cannot join the Ray cluster at {address}: {unreachable}")
    start = time.monotonic()
    try:
        ray.init(address=address, **options)
    except Exception as e:  # ConnectionError, ValueError, RuntimeError... from a bad address
        where = "start a local Ray instance" if address == "local" else f"join the Ray cluster at {address}"
        raise ClusterError(f"cannot {where}: {' '.join(str(e).split()) or type(e).__name__}") from e
    took = time.monotonic() - start
    cpus = int(ray.cluster_resources().get("CPU", 0))
    what = "started a local Ray instance" if address == "local" else f"joined the Ray cluster at {address}"
    return True, f"ray: {what} ({cpus} CPUs) in {took:.1f} s"


def _unreachable(address: str, timeout: float = CONNECT_SECONDS) -> Optional[str]:
    """Why nothing answers at HOST:PORT (None: something does, or not that form of address)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        return e.strerror or str(e) or type(e).__name__
    return None


def node_gone(node_id: Optional[str], error: Optional[BaseException] = None) -> Optional[str]:
    """How the Ray node ``node_id`` is gone ("node 1a2b3c4d (10.0.0.7): its raylet does not answer
    (Connection refused)"), or None while it is there (or when this cannot be told: no node id,
    the cluster's head not answering). ``error``: the worker's death, which may say it was
    preempted."""
    if not node_id:
        return None
    try:
        info = next((n for n in ray.nodes() if n["NodeID"] == node_id), None)
    except Exception:  # the head is gone too: nothing to tell the node's death from the file's
        return None
    name = f"node {node_id[:8]}" + (f" ({info['NodeManagerAddress']})" if info else "")
    if getattr(error, "preempted", False):
        return f"{name} was preempted"
    if info is None or not info.get("Alive"):
        return f"{name} is dead"
    unreachable = _unreachable(f"{info['NodeManagerAddress']}:{info['NodeManagerPort']}", NODE_CHECK_SECONDS)
    return f"{name}: its raylet does not answer ({unreachable})" if unreachable else None


def disconnect() -> None:
    """Leave Ray (a local instance started by ``connect`` stops with it)."""
    ray.shutdown()


def default_workers(threads_per_worker: int) -> int:
    """One worker per ``threads_per_worker`` CPUs of the cluster (at least one): each worker
    reserves that many CPUs from Ray and runs its BLAS with that many threads."""
    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(1, cpus // threads_per_worker)


@dataclass
class Slot:
    """One worker actor, and the job it is decoding if any."""

    actor: object
    name: Optional[str] = None  # host:pid, once the worker has answered
    node: Optional[str] = None  # the id of its Ray node, likewise
    ready: Optional[ray.ObjectRef] = None  # the worker is (re)starting: its identity() call
    since: float = 0.0  # monotonic time of the last news: started waiting, or the last item
    attempt: Optional[Attempt] = None
    stream: Optional[object] = None  # the ObjectRefGenerator of ``transcribe``

    @property
    def idle(self) -> bool:
        return self.ready is None and self.stream is None


class RayRunner:
    """Runs jobs on Ray workers; the same ``run(ids, result)`` as ``Runner`` (transcriber/app/run/local.py),
    and a ``Ledger`` (transcriber/app/run/attempt.py) books every attempt's end, as there. The workers are
    started on the first ``run`` and kept until ``close`` (watch mode runs many batches on them)."""

    def __init__(self, store: JobStore, *, workers: int, threads_per_worker: int = 1,
                 reporter: Optional[Reporter] = None, stop: Optional[StopFlag] = None,
                 owner: Optional[str] = None, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS, worker_timeout: float = DEFAULT_WORKER_TIMEOUT):
        self.ledger = Ledger(store, reporter=reporter, stop=stop, owner=owner, max_attempts=max_attempts,
                             checkpoint_seconds=checkpoint_seconds, lease_seconds=lease_seconds)
        self.store, self.reporter, self.stop = store, self.ledger.reporter, self.ledger.stop
        self.workers, self.threads_per_worker, self.worker_timeout = workers, threads_per_worker, worker_timeout
        self.slots: list[Slot] = []
        self.drained = False
        self.deaths: dict[int, int] = {}  # job id -> workers that died on it in this run
        self.lost_nodes: list[str] = []  # the nodes that died under a job (node_gone's words)

    # --- the pool ------------------------------------------------------------------------

    def start_workers(self) -> float:
        """Start the worker actors and wait until one answers (the others join the run as they
        come up); the seconds it took."""
        start = time.monotonic()
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if self.workers * self.threads_per_worker > cpus:
            self.reporter.error(f"warning: {self.workers} workers x {self.threads_per_worker} CPUs is more than the "
                                f"{cpus} CPUs of the Ray cluster: some wait for CPUs to free up")
        remote = ray.remote(RayWorker).options(
            num_cpus=self.threads_per_worker, max_restarts=-1, max_task_retries=0,
            runtime_env={"env_vars": settings.worker_environment()})
        for _ in range(self.workers):
            slot = Slot(remote.remote(self.threads_per_worker))
            self._restarting(slot)
            self.slots.append(slot)
        while self.slots and not any(s.idle for s in self.slots):
            self._wait()
        if not self.slots:
            raise ClusterError("no Ray worker could be started")
        return time.monotonic() - start

    def _restarting(self, slot: Slot, clock: bool = True) -> None:
        """Wait for the worker to answer (it is starting, or Ray restarts it)."""
        slot.ready = slot.actor.identity.remote()
        if clock:
            slot.since = time.monotonic()

    def close(self) -> None:
        """Stop the workers (a job still in flight keeps its last checkpoint)."""
        for slot in self.slots:
            with contextlib.suppress(Exception):
                ray.kill(slot.actor, no_restart=True)
        self.slots.clear()

    # --- running -------------------------------------------------------------------------

    def run(self, ids, result: Optional[RunResult] = None) -> RunResult:
        """Run the jobs among ``ids`` that are queued (or stalled) until none is left, or a stop."""
        ids = list(ids)
        result = result or RunResult()
        if not self.slots:
            took = self.start_workers()
            self.reporter.info(f"ray: {len(self.slots)} worker{'s' if len(self.slots) != 1 else ''} "
                               f"({self.threads_per_worker} BLAS thread{'s' if self.threads_per_worker != 1 else ''}"
                               f" each), the first ready in {took:.1f} s")
        self.drained = False  # set when a claim finds nothing; cleared when a job may be queued again
        try:
            while self.slots:
                if not self.stop.requested and not self.drained:
                    self.drained = self._dispatch(ids, result)
                if not any(s.stream is not None for s in self.slots):
                    if self.drained or self.stop.requested:
                        break
                    if all(s.idle for s in self.slots):
                        continue  # every job handed out ended at once (done already, failed): more
                self._wait(result)
        except BaseException:
            self._abandon(result)
            raise
        if not self.slots:
            died = f" (died with them: {'; '.join(self.lost_nodes)})" if self.lost_nodes else ""
            raise ClusterError(f"every Ray worker is gone{died}; unfinished files stay queued")
        if self.stop.requested:
            result.stopped = self.stop.signum
        return result

    def _dispatch(self, ids: list[int], result: RunResult) -> bool:
        """Hand a job to every idle worker; True when no job is left to claim."""
        for slot in self.slots:
            if not slot.idle or self.stop.requested:
                continue
            self.store.expire_dead_leases(owner_is_dead)
            job = self.ledger.claim(ids)
            if job is None:
                return True
            slot.attempt = attempt = self.ledger.attempt(job, slot.name, result).start()
            try:
                resume = attempt.begin()
                if resume is None:  # the words are complete: only the outputs are left, written here
                    self._end(slot, result)
                    continue
                slot.stream = slot.actor.transcribe.remote(
                    attempt.spec.to_dict(), str(attempt.path), resume.state, resume.position,
                    self.ledger.checkpoint_seconds)
                slot.since = time.monotonic()
            except BaseException as e:
                self._end(slot, result, e)
        return False

    def _wait(self, result: Optional[RunResult] = None) -> None:
        """Wait (at most WAIT_SECONDS) for news from the workers, and handle all there is."""
        waitables = {id(w): (slot, w) for slot in self.slots for w in (slot.stream, slot.ready) if w is not None}
        if waitables:
            refs = [w for _, w in waitables.values()]
            ready, _ = ray.wait(refs, num_returns=1, timeout=WAIT_SECONDS)
            if ready:  # then everything else that is ready too, so that no worker waits behind another
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for w in ready:
                slot, _ = waitables[id(w)]
                if w is slot.ready:
                    self._came_up(slot)
                elif w is slot.stream:
                    self._next_item(slot, result)
        self._check_silence(result)

    def _came_up(self, slot: Slot) -> None:
        try:
            slot.name, slot.node = ray.get(slot.ready)
        except ActorUnavailableError:  # asked while Ray was restarting it: ask again
            self._restarting(slot, clock=False)
            return
        except RayActorError as e:  # dead for good (it cannot be restarted): do without it
            self._drop(slot)
            self.reporter.error(f"warning: a Ray worker is gone ({_first_line(e)}); {len(self.slots)} left")
            return
        slot.ready = None

    def _next_item(self, slot: Slot, result: RunResult) -> None:
        """The next item of the slot's stream: its attempt's next step (pushed), or its end."""
        try:
            item = ray.get(next(slot.stream))
        except RayTaskError as e:  # the worker's own error about this file
            slot.stream, item = None, e.cause if isinstance(e.cause, BaseException) else e
        except RayActorError as e:
            self._died(slot, result, "died", e)
            return
        except StopIteration as e:  # the end of the file
            slot.stream, item = None, e
        except BaseException as e:  # (a second Ctrl-C): the worker is stopped too
            item = e
        if isinstance(item, BaseException):  # booked out of the except: told without Ray's error
            self._end(slot, result, None if isinstance(item, StopIteration) else item)
            return
        slot.since = time.monotonic()
        try:
            if isinstance(item, Started):
                self._started(slot, item)
            else:  # the worker's clock said which steps are due
                slot.attempt.take(item, due=item.state is not None)
        except BaseException as e:
            self._end(slot, result, e)

    def _started(self, slot: Slot, item: Started) -> None:
        """The worker has its engine: the model, and who it is (it may have been restarted elsewhere)."""
        attempt = slot.attempt
        attempt.model, slot.node = item.model, item.node or slot.node
        if item.worker != slot.name:  # restarted elsewhere since we last heard from it
            slot.name = attempt.worker = item.worker
            self.store.set_worker(attempt.job.id, self.ledger.owner, item.worker)

    def _check_silence(self, result: Optional[RunResult]) -> None:
        now = time.monotonic()
        for slot in list(self.slots):
            if now - slot.since <= self.worker_timeout:
                continue
            if slot.stream is not None:
                with contextlib.suppress(Exception):
                    ray.kill(slot.actor, no_restart=False)  # Ray starts it again
                self._died(slot, result, f"hung (no progress for {self.worker_timeout:g} s) and was killed")
            elif slot.ready is not None and now - slot.since > max(self.worker_timeout, START_SECONDS):
                # never came (back) up: no node can take it
                self._drop(slot)
                self.reporter.error(f"warning: a Ray worker did not come (back) up within "
                                    f"{max(self.worker_timeout, START_SECONDS):g} s; {len(self.slots)} left")

    def _died(self, slot: Slot, result: RunResult, how: str, error: Optional[BaseException] = None) -> None:
        """The worker of a job died (or hung): the job is queued again from its checkpoint, or
        failed if this file already cost a worker; the worker is restarted by Ray. A worker that
        died with its node cost the file nothing: queued again, uncounted."""
        slot.stream = None
        self._restarting(slot)
        gone = node_gone(slot.node, error)
        if gone:
            self.lost_nodes.append(gone)
            self._end(slot, result, NodeLost(f"the Ray {gone}; its worker {slot.name} went with it: "
                                              "queued again from its last checkpoint"))
            return
        job = slot.attempt.job
        self.deaths[job.id] = deaths = self.deaths.get(job.id, 0) + 1
        again = deaths <= DEATHS_ALLOWED
        message = f"the Ray worker {slot.name} transcribing it {how}"
        if not again:
            message += f"; {deaths} workers died on this file: given up"
        self._end(slot, result, WorkerDied(message, retryable=again))

    def _end(self, slot: Slot, result: RunResult, error: Optional[BaseException] = None) -> None:
        """End the slot's attempt (``Attempt.end``: outputs, then booked); a worker still
        decoding a job that ended here (a stop, the file changed...) is restarted, so that it
        stops."""
        attempt, slot.attempt = slot.attempt, None
        if slot.stream is not None:
            slot.stream = None
            with contextlib.suppress(Exception):
                ray.kill(slot.actor, no_restart=False)
            self._restarting(slot)
        if attempt.end(error) is not None:
            self.drained = False  # the job may be queued again (a retry): claim again

    def _drop(self, slot: Slot) -> None:
        with contextlib.suppress(Exception):
            ray.kill(slot.actor, no_restart=True)
        self.slots.remove(slot)

    def _abandon(self, result: RunResult) -> None:
        """The run ends on an error (the database, the model, a second Ctrl-C): give every job in
        flight back to the queue, its checkpoint kept."""
        for slot in self.slots:
            if slot.attempt is not None:
                with contextlib.suppress(BaseException):
                    self._end(slot, result, Stopped())


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
