"""The runner: claim a job, resume it from its checkpoint, checkpoint as it goes, write outputs.

For each job it claims (a lease in the store, kept alive by a heartbeat thread):

1. check the file: content key (a file changed since it was queued drops its old words) and
   duration (``probe``: an unreadable file fails here, before any model is loaded);
2. unless its words are complete, run its engine from the last checkpoint's state, committing
   new segments + the engine state every ``checkpoint_seconds`` of audio, each checkpoint one
   transaction; nothing is committed twice, so no word is lost or repeated across a crash;
3. write the outputs atomically from the committed words, then mark the job done.

These steps are an ``Attempt``'s, and how an attempt ends is booked by ``Runner.settle``: the
same code whether the engine runs in this process (``Runner``) or on a Ray worker that streams
its steps back (``RayRunner``, jobs/ray_runner.py).

What the engine's last steps report about the audio (``Step.warnings``: ffmpeg's errors on a file
it still decoded in full) is kept on the job with its words, and told on the job's ``done:`` line.

A crash between any two steps is safe: the next runner resumes from the last checkpoint (or, if
the words were complete, only rewrites the outputs). A failure is recorded with its error; the
job is queued again until it has failed ``max_attempts`` times, except for an unreadable input,
which no retry can fix (it is retried when the file changes, or by ``transcribe retry``).

SIGINT/SIGTERM (``StopFlag``) stop the runner after the current job's next checkpoint; the job
goes back to the queue and resumes from there next time. A second Ctrl-C stops at once, and so
does a step that has not reached its checkpoint STOP_GRACE_SECONDS after the first (its work is
dropped: the job resumes from the checkpoint before it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from transcriber import AudioError, ModelError, Segment, Step, TranscriberError, assemble, probe, write_outputs

from .discover import content_key, remove_stale_temporaries
from .engines import EngineCache
from .progress import FileBar, Reporter
from .spec import JobSpec
from .store import FAILED, Job, JobStore, LeaseLost, Resume, StoreError, owner_id, refusal

DEFAULT_LEASE_SECONDS = 60.0  # a runner that stops heartbeating loses its job after this long
DEFAULT_CHECKPOINT_SECONDS = 10.0
DEFAULT_MAX_ATTEMPTS = 3

# Test-only: make this process SIGKILL itself at a precise point, to test crash recovery
# deterministically: "checkpoint:N" (right after committing a job's checkpoint number N),
# "step:N" (the engine has yielded its Nth step in this process, decoded but not yet
# checkpointed) or "outputs" (after writing the outputs, before marking the job done).
KILL_HOOK_ENV = "TRANSCRIBER_TEST_KILL_AT"
# Test-only, likewise: "SIGNAL@POINT" (e.g. "SIGTERM@step:1", "SIGSTOP@step:1") sends this
# process that signal at such a point: a stop or an outside kill mid-work, without a race.
SIGNAL_HOOK_ENV = "TRANSCRIBER_TEST_SIGNAL_AT"


def _kill_hook(point: str) -> None:
    if os.environ.get(KILL_HOOK_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
    name, _, at = os.environ.get(SIGNAL_HOOK_ENV, "").partition("@")
    if at == point:
        os.kill(os.getpid(), signal.Signals[name])  # a Python handler runs before this returns


class Stopped(Exception):
    """A stop was requested; the job was checkpointed and is given back."""


# After a stop is asked, how long the step being decoded may take to reach its checkpoint; past
# that it is dropped (the job resumes from its last checkpoint), so a stop acts within 2 s even
# in a long one-shot window or a slow model load.
STOP_GRACE_SECONDS = 1.5


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
    """Keeps a job's lease alive from a thread (its own connection), so a long window or a slow
    model load never lets the lease expire under a live runner."""

    def __init__(self, store_path: Path, job_id: int, owner: str, lease_seconds: float):
        self.args = (store_path, job_id, owner, lease_seconds)
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{job_id}", daemon=True)

    def _run(self) -> None:
        store_path, job_id, owner, lease_seconds = self.args
        try:
            with JobStore(store_path) as store:
                while not self._stop.wait(lease_seconds / 4):
                    if not store.heartbeat(job_id, owner, lease_seconds):
                        self.lost = True
                        return
        except Exception:  # a busy database: the next checkpoint's own fence decides
            pass

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@dataclass
class RunResult:
    done: list[Job] = field(default_factory=list)
    failed: list[tuple[Job, str]] = field(default_factory=list)
    lost: list[Job] = field(default_factory=list)  # taken over by another runner
    stopped: Optional[int] = None  # the signal that stopped the run


def worker_name() -> str:
    """``host:pid``: the process that decodes a job, as ``transcribe status`` shows it."""
    return f"{socket.gethostname()}:{os.getpid()}"


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

    def mark(self, position: float) -> None:
        """A commit was made now for another reason (a stop)."""
        self.last = position


def build_engine(engines: EngineCache, spec: JobSpec):
    """The job's engine; a model that cannot load is a ModelError (the whole batch stops),
    options this model cannot take are the job's own failure (``_SetupError``)."""
    try:
        return engines.get(spec)
    except ModelError:
        raise
    except (TranscriberError, ValueError) as e:
        raise _SetupError(str(e)) from e


class Attempt:
    """One claim of one job, from the checks at its start to its outputs: what a runner does with
    the steps of an engine, wherever the engine runs (in the runner's process, or on a Ray worker
    that streams them back: jobs/ray_runner.py). The store is only written here, by the runner.

        resume = attempt.begin()          # None: the words are complete, only outputs are left
        attempt.add(step, commit)         # for each step (commit: checkpoint it and all before)
        attempt.complete()                # the engine ran to the end of the file
        attempt.finish()                  # outputs written atomically, job done
    """

    def __init__(self, runner: "Runner", job: Job, worker: Optional[str] = None):
        self.runner, self.store, self.job, self.worker = runner, runner.store, job, worker
        self.spec = JobSpec.from_dict(job.spec)
        self.path = Path(job.path)
        self.pinned: Optional[str] = None  # the content key this attempt transcribes: see check_source
        self.bar: Optional[FileBar] = None
        self.model: Optional[str] = job.model  # the engine's model name, once known
        self.outputs: list[str] = []
        self.warnings: tuple[str, ...] = ()  # the audio's (ffmpeg's), known at its end: kept on the job

    @property
    def owner(self) -> str:
        return self.runner.owner

    def begin(self) -> Optional[Resume]:
        """Check the file (content key, duration: an unreadable file fails here), record the
        start; the checkpoint to decode from, or None when the words are complete."""
        job = self.job
        try:
            key = content_key(self.path)
        except OSError as e:
            raise AudioError(f"cannot read audio from {job.path!r}: {e.strerror or e}") from e
        duration = job.duration if key == job.content_key and job.duration is not None else probe(self.path)
        return self.resume_from(key, duration)

    def resume_from(self, key: str, duration: Optional[float]) -> Optional[Resume]:
        """``begin`` once the content key and duration (None: unknown, a source still being
        made) are known: record the start; the checkpoint to decode from, or None."""
        self.pinned = key
        self.store.start(self.job.id, self.owner, key, duration, self.worker)
        self.job = job = self.store.get(self.job.id)
        resume = self.store.resume_point(job.id)
        self.bar = self.runner.reporter.start(self.path.name, duration, resume.position)
        self.duration = duration
        self.committed, self.pending = list(resume.segments), []
        self.state, self.position = None, resume.position
        self.language, self.probability = job.language, job.language_probability
        return None if job.words_complete else resume

    def add(self, step: Step, commit: bool) -> None:
        """A step of the engine; with ``commit``, checkpoint it and every step before it in one
        transaction (a step streamed from a Ray worker carries its state only then)."""
        self.pending.extend(step.segments)
        self.state, self.language = step.state, step.language
        if step.language_probability is not None:
            self.probability = step.language_probability
        self.warnings = step.warnings or self.warnings
        self.position = min(step.position, self.duration) if self.duration else step.position
        self.runner.reporter.update(self.bar, self.position)
        if not commit:
            return
        self.check_source()
        seq = self.store.checkpoint(self.job.id, self.owner, self.pending, self.state, self.position, self.language,
                                    self.model, self.runner.lease_seconds, language_probability=self.probability)
        self.committed += self.pending
        self.pending, self.state = [], None
        _kill_hook(f"checkpoint:{seq}")
        if self.spec.live:  # recorded as the job's at once, not only when it is done
            self.store.record_outputs(self.job.id, self._write(self.committed))

    def complete(self) -> None:
        """The engine reached the end of the file: commit the rest, the words are complete."""
        self.check_source()
        self.store.checkpoint(self.job.id, self.owner, self.pending, self.state, self.position, self.language,
                              self.model, self.runner.lease_seconds, complete=True,
                              language_probability=self.probability, warnings=self.warnings)
        self.committed += self.pending
        self.pending = []

    def finish(self) -> list[str]:
        """Write the outputs from the committed words (atomically), then mark the job done."""
        self.check_source()
        written = self._write(self.committed)
        _kill_hook("outputs")
        self.store.finish(self.job.id, self.owner, written)
        self.outputs = written
        return written

    def _write(self, segments: list[Segment]) -> list[str]:
        """Write the outputs, each one only if it is not the user's (see ``_check_ours``)."""
        transcript = assemble(segments, self.language, self.duration, self.model or "", self.probability,
                              self.spec.task)
        language = "en" if self.spec.task == "translate" else self.language
        paths = self.spec.output_paths(self.job.output_stem, language)
        self._check_ours(paths)
        self.store.expect_outputs(self.job.id, [str(p) for p in paths])
        stem = Path(self.spec.named_stem(self.job.output_stem, language))
        return [str(p) for p in write_outputs(transcript, stem, self.spec.formats, self.spec.output_options())]

    def _check_ours(self, paths: list[Path]) -> None:
        """OutputConflict when an output exists that this job did not write, or that changed
        since (a hand-made subtitle, another file's transcript): the user's, left as it is.
        Also removes the temporary files a killed writer left in the outputs' folder."""
        remove_stale_temporaries(paths[0].parent)
        present = [p for p in paths if os.path.lexists(p)]
        records = self.store.output_records([str(p) for p in present]) if present else {}
        for path in present:
            why = refusal(path, records.get(str(path)), self.job.path, self.job.output_stem, self.job.outputs)
            if why:
                raise OutputConflict(f"not written: {why}")

    def check_source(self) -> None:
        """The file still holds what this attempt started on; SourceChanged if not.

        Called before every commit (checkpoint, words complete) and before writing outputs, so
        words of two different recordings are never committed nor spliced into one transcript.
        A file deleted (or unreadable) since is not a change: the decoder reads what it opened.
        """
        try:
            now = content_key(self.path)
        except OSError:
            return
        if now != self.pinned:
            raise SourceChanged(f"{self.path}: file changed while being transcribed")


class Runner:
    """Runs jobs one at a time in this process (jobs/ray_runner.py: on a Ray cluster)."""

    def __init__(self, store: JobStore, *, engines: Optional[EngineCache] = None,
                 reporter: Optional[Reporter] = None, stop: Optional[StopFlag] = None,
                 owner: Optional[str] = None, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS, batch_files: int = 1):
        self.store = store
        self.batch_files = batch_files  # files decoded side by side, where the engine can (one-shot)
        self.engines = engines or EngineCache()
        self.reporter = reporter or Reporter(quiet=True)
        self.stop = stop or StopFlag()
        self.owner = owner or owner_id()
        self.max_attempts = max_attempts
        self.checkpoint_seconds = checkpoint_seconds
        self.lease_seconds = lease_seconds

    def run(self, ids, result: Optional[RunResult] = None) -> RunResult:
        """Run the jobs among ``ids`` that are queued (or stalled) until none is left, or a stop."""
        ids = list(ids)
        result = result or RunResult()
        while not self.stop.requested:
            self.store.expire_dead_leases(owner_is_dead)
            job = self.store.claim(self.owner, ids, self.lease_seconds)
            if job is None:
                break
            engine = self._batching_engine(job)
            if engine is None:
                self._process(job, result)
            else:
                self._process_side_by_side(engine, job, ids, result)
        if self.stop.requested:
            result.stopped = self.stop.signum
        return result

    def _process(self, job: Job, result: RunResult) -> None:
        attempt = Attempt(self, job, worker_name())
        try:
            with Heartbeat(self.store.path, job.id, self.owner, self.lease_seconds):
                self._decode_here(attempt)
        except BaseException as e:
            self.settle(attempt, result, e)
        else:
            self.settle(attempt, result)

    def _decode_here(self, attempt: Attempt) -> None:
        """The attempt, with its engine run in this process, checkpointing as the steps come."""
        resume = attempt.begin()
        if resume is not None:
            engine = build_engine(self.engines, attempt.spec)
            attempt.model = engine.model_name
            if self.stop.requested:  # asked while the model was loading: nothing new to commit
                raise Stopped
            clock = CheckpointClock(resume.position, self.checkpoint_seconds)
            with contextlib.closing(engine.steps(attempt.path, resume.state)) as steps:  # closing kills ffmpeg
                for n, step in enumerate(steps, 1):
                    self._take_step(attempt, clock, n, step)
            attempt.complete()
        attempt.finish()

    def _take_step(self, attempt: Attempt, clock: CheckpointClock, n: int, step: Step) -> None:
        """The ``n``th engine step of an attempt in this process: checkpoint it when due, and
        at once when a stop was asked (then stop)."""
        _kill_hook(f"step:{n}")
        commit = clock.due(step.position) or self.stop.requested
        attempt.add(step, commit)
        if commit and self.stop.requested:
            raise Stopped

    def _batching_engine(self, job: Job):
        """The job's engine when it can decode several files side by side and we are asked to
        (a job whose words are complete needs no engine: ``_process`` writes its outputs)."""
        if self.batch_files < 2 or job.words_complete:
            return None
        try:
            engine = build_engine(self.engines, JobSpec.from_dict(job.spec))
        except Exception:  # noqa: BLE001 - _process builds it again and books the failure
            return None
        return engine if hasattr(engine, "batch") else None

    def _process_side_by_side(self, engine, first: Job, ids: list[int], result: RunResult) -> None:
        """``first`` and the next queued jobs of the same spec, up to ``batch_files`` at a time,
        their windows decoded together (``engine.batch``). Each job is its own ``Attempt`` with
        its own lease, checkpoints and outcome, exactly as ``_process`` runs it."""
        batch = engine.batch(self.batch_files)
        live: dict[Attempt, tuple[contextlib.ExitStack, CheckpointClock, list[int]]] = {}

        def start(job: Job) -> None:
            attempt, stack = Attempt(self, job, worker_name()), contextlib.ExitStack()
            try:
                stack.enter_context(Heartbeat(self.store.path, job.id, self.owner, self.lease_seconds))
                resume = attempt.begin()
                if resume is not None:
                    attempt.model = engine.model_name
                    batch.add(attempt, attempt.path, resume.state)
                    live[attempt] = (stack, CheckpointClock(resume.position, self.checkpoint_seconds), [0])
                    return
                attempt.finish()  # the words were complete: only the outputs were left
            except BaseException as e:
                stack.close()
                self.settle(attempt, result, e)
                return
            stack.close()
            self.settle(attempt, result)

        def end(attempt: Attempt, error: Optional[BaseException] = None) -> None:
            stack = live.pop(attempt)[0]
            batch.drop(attempt)
            stack.close()
            self.settle(attempt, result, error)

        def on_step(attempt: Attempt, step: Step) -> None:
            _, clock, count = live[attempt]
            count[0] += 1
            self._take_step(attempt, clock, count[0], step)

        def fill() -> None:  # more jobs of the same spec, while there is room and no stop
            while not self.stop.requested and len(batch) < self.batch_files:
                job = self.store.claim(self.owner, ids, self.lease_seconds, spec=first.spec)
                if job is None:
                    return
                start(job)

        try:
            start(first)
            fill()
            for attempt, event in batch.events():
                if attempt not in live:
                    continue
                try:
                    if isinstance(event, BaseException):
                        raise event
                    if event is None:
                        attempt.complete()
                        attempt.finish()
                    else:
                        on_step(attempt, event)
                        continue
                except BaseException as e:
                    end(attempt, e)
                else:
                    end(attempt)
                fill()
        finally:  # a fatal error (the database, the model, a second Ctrl-C): give the others back
            batch.close()
            for attempt in list(live):
                with contextlib.suppress(BaseException):
                    end(attempt, Stopped())

    def settle(self, attempt: Attempt, result: RunResult, error: Optional[BaseException] = None) -> None:
        """Book how an attempt ended (``error`` None: done) in the store and ``result``: done,
        failed (and maybe queued again), given back, or lost to another runner; close its bar.
        Re-raises what ends the whole run: the database, the model, a second Ctrl-C."""
        job = attempt.job
        final = True  # the batch bar counts files, not attempts: False when the job is queued again
        try:
            if error is None:
                done = self.store.get(job.id)
                result.done.append(done)
            elif isinstance(error, Stopped):
                final = False
                with contextlib.suppress(LeaseLost):
                    self.store.release(job.id, self.owner)
            elif isinstance(error, LeaseLost):
                result.lost.append(job)
                self.reporter.error(f"warning: {job.path}: taken over by another runner")
            elif isinstance(error, StoreError):
                # the database (locked too long), not the file: the command reports it and stops;
                # the job keeps its last checkpoint and is resumed once its lease is seen dead
                raise error
            elif isinstance(error, ModelError):
                # a model that cannot load or is corrupt fails every job alike: give the job back
                # untouched (no attempt counted) and let the command stop with one line
                final = False
                with contextlib.suppress(Exception):
                    self.store.release(job.id, self.owner)
                raise error
            elif not isinstance(error, Exception) or (self.stop.requested and isinstance(error, TranscriberError)):
                # Ctrl-C twice, or ffmpeg killed by the same Ctrl-C (it shares our process group):
                # an interruption, not a failure of the file
                with contextlib.suppress(Exception):
                    self.store.release(job.id, self.owner)
                if not isinstance(error, Exception):
                    raise error
            elif os.environ.get("TRANSCRIBER_DEBUG") and not isinstance(error, TranscriberError):
                raise error
            else:
                final = self._fail(job, error, result)
        finally:
            self.reporter.end(attempt.bar, counts_as_file=final)
        if error is None:
            warned = "".join(f" (warning: {w})" for w in done.warnings)
            self.reporter.info(f"done: {job.path} -> {', '.join(attempt.outputs)}{warned}")

    def _fail(self, job: Job, error: Exception, result: RunResult) -> bool:
        """Record the failed attempt; whether the job is over (False: it is queued again)."""
        message = _one_line(error)
        # The input itself is bad (unreadable, no audio, a bad option for this model): retrying
        # cannot help until the file or the options change. An error may say otherwise itself
        # (``retryable``: a Ray worker that died on this file once may be retried, not twice).
        retryable = getattr(error, "retryable",
                            not isinstance(error, (AudioError, _SetupError, SourceChanged, OutputConflict)))
        try:
            status = self.store.fail(job.id, self.owner, message, retryable, self.max_attempts)
        except LeaseLost:
            result.lost.append(job)
            return True
        if status == FAILED:
            # printed here, once, even with --quiet; the summary only counts it
            result.failed.append((self.store.get(job.id), message))
            self.reporter.error(f"error: {with_path(job.path, message)}")
            return True
        self.reporter.info(f"error (will retry): {with_path(job.path, message)}")
        return False


class SourceChanged(TranscriberError):
    """The input was rewritten mid-run. Not retried as is: the job keeps the key it started
    with, so the next enqueue (a rerun, or watch once the file is stable again) sees new
    content and redoes it from scratch, its old words dropped."""


class OutputConflict(TranscriberError):
    """An output file is the user's (not written by this job, or changed since): not replaced."""


class _SetupError(TranscriberError):
    """The engine cannot be built for this job's options (model missing, bad language...)."""


def _one_line(error: BaseException) -> str:
    text = str(error) if isinstance(error, TranscriberError) else f"unexpected {type(error).__name__}: {error}"
    return " ".join(text.split()) or type(error).__name__


def with_path(path: str, message: str) -> str:
    """Library errors name the file already; others get it in front."""
    return message if path in message or repr(path) in message else f"{path}: {message}"
