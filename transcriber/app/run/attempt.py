"""One attempt at one job, and the ledger that books how attempts end: the life of an attempt,
written once for every runner (in this process and side by side: transcriber/app/run/local.py; on Ray workers
that stream their steps back: transcriber/app/run/ray_runner.py; a live source: transcriber/app/run/follow.py). Each runner
only supplies the engine's steps, pulled (``consume``) or pushed as they come (``take``, ``end``).

An ``Attempt``, from ``start`` (its lease kept alive by a heartbeat) to ``end`` (booked):

1. checks the file: content key (a file changed since it was queued drops its old words) and
   duration (``probe``: an unreadable file fails here, before any model is loaded);
2. unless its words are complete, takes the engine's steps from the last checkpoint's state,
   committing new segments + the engine state when told to (every ``checkpoint_seconds`` of
   audio), each checkpoint one transaction; nothing is committed twice, so no word is lost or
   repeated across a crash;
3. writes the outputs atomically from the committed words, then marks the job done.

At each step it checks for a stop (SIGINT/SIGTERM: the step is committed at once and the job
given back, ``Stopped``); a lease lost to another runner is found by the store at the next
commit (``LeaseLost``). How either ends the attempt is decided in one place, ``Ledger.settle``.

What the engine's last steps report about the audio (``Step.warnings``: ffmpeg's errors on a file
it still decoded in full) is kept on the job with its words, and told on the job's ``done:`` line.

The ``Ledger`` books each attempt's end (``settle``): done, failed (queued again until it has
failed ``max_attempts`` times, except for an unreadable input, which no retry can fix), given
back after a stop or after a fault of the environment (``EnvironmentFault``: a Ray node that
died under it; no attempt counted), or lost to another runner.
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Optional

import transcriber
from transcriber import AudioError, OutputError, ReadTimeout, RunFault, Segment, TranscriberError, bounded, no_space
from transcriber.app import settings

if TYPE_CHECKING:
    from transcriber import Step

from transcriber.app.run.discover import content_key
from transcriber.app.store.domain import FAILED, NO_SPEECH, Job, LeaseLost, Resume, StoreError, owner_id
from transcriber.app.run.engines import EngineCache
from transcriber.app.store.lease import DEFAULT_CHECKPOINT_SECONDS, DEFAULT_LEASE_SECONDS, CheckpointClock, Heartbeat
from transcriber.app.run.outputs import OutputConflict, OutputOutside, check_ours, check_place, outputs_answer
from transcriber.app.cli.progress import FileBar, Reporter
from transcriber.app.run.signals import StopFlag, Stopped, at_point
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.jobstore import JobStore

DEFAULT_MAX_ATTEMPTS = 3


@dataclass
class RunResult:
    done: list[Job] = field(default_factory=list)
    failed: list[tuple[Job, str]] = field(default_factory=list)
    lost: list[Job] = field(default_factory=list)  # taken over by another runner
    refused: list[tuple[str, str]] = field(default_factory=list)  # (path, why): an output found the user's
    stopped: Optional[int] = None  # the signal that stopped the run


class SourceChanged(TranscriberError):
    """The input was rewritten mid-run. Not retried as is: the job keeps the key it started
    with, so the next enqueue (a rerun, or watch once the file is stable again) sees new
    content and redoes it from scratch, its old words dropped."""


class EnvironmentFault(TranscriberError):
    """The attempt was cut short by the environment, not by the file (a Ray node died under it):
    the job goes back to the queue with its last checkpoint, no attempt counted, and the line
    that says so is a warning."""


class SetupError(TranscriberError):
    """The engine cannot be built for this job's options (model missing, bad language...)."""


# The input itself is bad (unreadable, no audio, a bad option for this model): retrying cannot
# help until the file or the options change.
NOT_RETRIED = (AudioError, SetupError, SourceChanged, OutputConflict, OutputOutside)


def build_engine(engines: EngineCache, spec: JobSpec):
    """The job's engine; a model that cannot load is a ModelError (the whole batch stops),
    options this model cannot take are the job's own failure (``SetupError``)."""
    try:
        return engines.get(spec)
    except RunFault:
        raise
    except (TranscriberError, ValueError) as e:
        raise SetupError(str(e)) from e


class Ledger:
    """What the attempts of one run share (the store, the reporter, the stop flag, this runner's
    lease owner and its settings) and where each attempt's end is booked (``settle``)."""

    def __init__(self, store: JobStore, *, reporter: Optional[Reporter] = None, stop: Optional[StopFlag] = None,
                 owner: Optional[str] = None, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS):
        self.store = store
        self.reporter = reporter or Reporter(quiet=True)
        self.stop = stop or StopFlag()
        self.owner = owner or owner_id()
        self.max_attempts = max_attempts
        self.checkpoint_seconds = checkpoint_seconds
        self.lease_seconds = lease_seconds
        self.held_back: set[int] = set()  # jobs given back that this run takes no more (a user's output)

    def claim(self, ids: list[int], spec: Optional[dict] = None) -> Optional[Job]:
        """The next job among ``ids`` for this runner (the store's ``claim``), but those held back."""
        return self.store.claim(self.owner, [i for i in ids if i not in self.held_back], self.lease_seconds, spec)

    def attempt(self, job: Job, worker: Optional[str], result: RunResult) -> "Attempt":
        """An attempt at ``job`` (claimed), decoded by ``worker`` (``host:pid``), its end booked in
        ``result``; ``with ledger.attempt(...) as a:`` runs it, or ``start()`` ... ``end()``."""
        return Attempt(self, job, worker, result)

    def settle(self, attempt: "Attempt", result: RunResult, error: Optional[BaseException] = None) -> None:
        """Book how an attempt ended (``error`` None: done) in the store and ``result``: done,
        failed (and maybe queued again), given back, or lost to another runner; close its bar.
        Re-raises what ends the whole run: the database, the model, a second Ctrl-C."""
        final = True  # the batch bar counts files, not attempts: False when the job is queued again
        try:
            if error is None:
                result.done.append(self.store.get(attempt.job.id))
            else:
                final = self._book_error(attempt.job, error, result)
        finally:  # a model error is re-raised and its job given back: not counted either
            self.reporter.end(attempt.bar, counts_as_file=final and not isinstance(error, RunFault))
        if error is None:
            warned = "".join(f" (warning: {w})" for w in result.done[-1].warnings)
            written = ", ".join(attempt.outputs) or "no file"  # (no speech, and only subtitles asked for)
            self.reporter.info(f"done: {attempt.job.path} -> {written}{warned}")

    def _book_error(self, job: Job, error: BaseException, result: RunResult) -> bool:
        """Book an attempt that ended on ``error``; whether the job is over (False: it is given
        back or queued again). Re-raises what ends the whole run."""
        if isinstance(error, Stopped):
            with contextlib.suppress(LeaseLost):
                self.store.release(job.id, self.owner)
            return False
        if isinstance(error, EnvironmentFault):
            with contextlib.suppress(LeaseLost):
                self.store.release(job.id, self.owner)
            self.reporter.error(f"warning: {with_path(job.path, one_line(error))}")
            return False
        if isinstance(error, OutputConflict):  # the user's file: a skip, as at enqueue
            with contextlib.suppress(LeaseLost):
                self.store.release(job.id, self.owner)
            result.refused.append((job.path, error.why))
            self.held_back.add(job.id)
            return True
        if isinstance(error, LeaseLost):
            result.lost.append(job)
            self.reporter.error(f"warning: {job.path}: taken over by another runner")
            return True
        if isinstance(error, StoreError):
            # the database (locked too long), not the file: the command reports it and stops;
            # the job keeps its last checkpoint and is resumed once its lease is seen dead
            raise error
        if not isinstance(error, (RunFault, OutputError)) and no_space(error):  # a full temporary folder
            # (not the outputs' disk: that is the job's, told on its file and retried)
            error = RunFault(f"no space left on a disk this run writes to ({tempfile.gettempdir()} for "
                             f"temporary files): {one_line(error)}")
        if isinstance(error, RunFault) or not isinstance(error, Exception) or (
                self.stop.requested and isinstance(error, TranscriberError)):
            # a model that cannot load fails every job alike: the job goes back untouched (no
            # attempt counted) and the command stops with one line. Ctrl-C twice, or ffmpeg
            # killed by the same Ctrl-C (it shares our process group): an interruption, not a
            # failure of the file
            with contextlib.suppress(Exception):
                self.store.release(job.id, self.owner)
            if isinstance(error, RunFault) or not isinstance(error, Exception):
                raise error
            return True
        if settings.get("TRANSCRIBER_DEBUG") and not isinstance(error, TranscriberError):
            raise error
        return self._fail(job, error, result)

    def _fail(self, job: Job, error: Exception, result: RunResult) -> bool:
        """Record the failed attempt; whether the job is over (False: it is queued again)."""
        message = one_line(error)
        # An error may say itself whether a retry can help (``retryable``: a Ray worker that
        # died on this file once may be retried, not twice).
        retryable = getattr(error, "retryable", not isinstance(error, NOT_RETRIED))
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


class Attempt:
    """One claim of one job, from the checks at its start to its outputs and the booking of its
    end: what a runner does with the steps of an engine, wherever the engine runs (in the
    runner's process, or on a Ray worker that streams them back). The store is only written
    here, by the runner. Pulled:

        with ledger.attempt(job, worker, result) as attempt:   # the heartbeat; at the end, settle
            resume = attempt.begin()      # None: the words are complete, only outputs are left
            if resume is not None:
                attempt.consume(engine.steps(attempt.path, resume.state))
        # leaving the block: the rest committed, the outputs written, the end booked (or the error)

    Pushed (steps that arrive as events: side by side, from Ray): ``start()``, ``begin()``,
    ``take(step)`` for each, then ``end()`` or ``end(error)``.
    """

    def __init__(self, ledger: Ledger, job: Job, worker: Optional[str], result: RunResult):
        self.ledger, self.store, self.job, self.worker, self.result = ledger, ledger.store, job, worker, result
        self.heartbeat: Optional[Heartbeat] = None  # from ``start`` to ``end``
        self.clock: Optional[CheckpointClock] = None  # set by ``begin`` when there is decoding to do
        self.taken = 0  # engine steps taken by this attempt
        self.spec = JobSpec.from_dict(job.spec)
        self.path = Path(job.path)
        self.pinned: Optional[str] = None  # the content key this attempt transcribes: see check_source
        self.bar: Optional[FileBar] = None
        self.model: Optional[str] = job.model  # the engine's model name, once known
        self.outputs: list[str] = []
        self.warnings: tuple[str, ...] = ()  # the audio's (ffmpeg's), known at its end: kept on the job
        self.duration: Optional[float] = job.duration  # seconds, probed by ``begin``
        self.committed: list[Segment] = []  # checkpointed segments (from the resume point on, all)
        self.pending: list[Segment] = []  # segments of the steps since the last checkpoint
        self.state: Optional[dict] = None  # the engine state of the last step, until committed
        self.position = 0.0  # seconds of the source decoded so far
        self.language, self.probability = job.language, job.language_probability
        self.offset = 0.0  # the steps' (Step.offset: the audio track's start on the media's timeline)

    @property
    def owner(self) -> str:
        return self.ledger.owner

    def start(self) -> "Attempt":
        """Keep the job's lease alive (a heartbeat thread) until ``end``."""
        self.heartbeat = Heartbeat(self._renew, self.ledger.lease_seconds / 4, f"heartbeat-{self.job.id}")
        self.heartbeat.start()
        return self

    def _renew(self) -> bool:
        """Extend the job's lease, from the heartbeat's thread: on a connection of its own (an
        SQLite connection serves the thread that made it) to the very file this run opened.
        False once another runner has the job."""
        with self.store.reopen() as store:
            return store.heartbeat(self.job.id, self.owner, self.ledger.lease_seconds)

    def __enter__(self) -> "Attempt":
        return self.start()

    def __exit__(self, kind, error, traceback) -> bool:
        self.end(error)
        return True  # booked; what ends the whole run is raised again by ``end``

    def begin(self) -> Optional[Resume]:
        """Check the file (content key, duration: an unreadable file fails here), record the
        start; the checkpoint to decode from, or None when the words are complete."""
        job = self.job
        try:
            key = bounded(content_key, self.path)
        except ReadTimeout:
            raise  # one line already, and retryable: the mount may come back
        except OSError as e:
            raise AudioError(f"cannot read audio from {job.path!r}: {e.strerror or e}") from e
        duration = job.duration if key == job.content_key and job.duration is not None else transcriber.probe(self.path)
        return self.resume_from(key, duration)

    def resume_from(self, key: str, duration: Optional[float]) -> Optional[Resume]:
        """``begin`` once the content key and duration (None: unknown, a source still being
        made) are known: record the start; the checkpoint to decode from, or None."""
        self.pinned = key
        self.store.start(self.job.id, self.owner, key, duration, self.worker)
        self.job = job = self.store.get(self.job.id)
        resume = self.store.resume_point(job.id)
        self.bar = self.ledger.reporter.start(self.path.name, duration, resume.position)
        self.duration, self.committed, self.position = duration, list(resume.segments), resume.position
        self.offset = transcriber.applied_offset(resume.state)
        self.language, self.probability = job.language, job.language_probability
        if job.words_complete:
            return None
        self.clock = CheckpointClock(resume.position, self.ledger.checkpoint_seconds)
        return resume

    def consume(self, steps: Iterable[Step]) -> None:
        """Take each of an engine's steps (``take``); closing them stops the decode (and its ffmpeg)."""
        with contextlib.closing(steps):
            for step in steps:
                self.take(step)

    def take(self, step: Step, due: Optional[bool] = None) -> None:
        """The engine's next step: checkpointed when due (``due``: as decided where the engine
        ran, a Ray worker; None: by this attempt's clock), and at once when a stop was asked
        (then ``Stopped``)."""
        self.taken += 1
        at_point(f"step:{self.taken}")
        if due is None:
            due = self.clock.due(step.position)
        stop = self.stops_at(step)
        self.add(step, due or stop)
        if stop:
            raise Stopped

    def stops_at(self, step: Step) -> bool:
        """Whether a stop asked ends the attempt at ``step``, once committed: when the step
        carries the engine's state (a Ray worker's carries it only on the steps due)."""
        return self.ledger.stop.requested and step.state is not None

    def end(self, error: Optional[BaseException] = None) -> Optional[BaseException]:
        """The attempt's end. With no ``error``: the rest of its words committed (when it
        decoded) and its outputs written. Then its heartbeat stopped and the end booked
        (``Ledger.settle``, which raises again what ends the whole run); the error booked."""
        if error is None:
            try:
                if self.clock is not None:
                    self.complete()
                self.finish()
            except BaseException as e:  # noqa: BLE001 - booked as the attempt's end
                error = e
        if self.heartbeat is not None:
            self.heartbeat.stop()
        self.ledger.settle(self, self.result, error)
        return error

    def add(self, step: Step, commit: bool) -> None:
        """A step of the engine; with ``commit``, checkpoint it and every step before it in one
        transaction (a step streamed from a Ray worker carries its state only then)."""
        self.pending.extend(step.segments)
        self.state, self.language, self.offset = step.state, step.language, step.offset
        if step.language_probability is not None:
            self.probability = step.language_probability
        self.warnings = step.warnings or self.warnings
        self.position = min(step.position, self.duration) if self.duration else step.position
        self.ledger.reporter.update(self.bar, self.position)
        if not commit:
            return
        self.check_source()
        seq = self.store.checkpoint(self.job.id, self.owner, self.pending, self.state, self.position, self.language,
                                    self.model, self.ledger.lease_seconds, language_probability=self.probability)
        self.committed += self.pending
        self.pending, self.state = [], None
        at_point(f"checkpoint:{seq}")
        if self.spec.live:  # recorded as the job's at once, not only when it is done
            self._record(self._write(self._transcript(self.committed)))

    def complete(self) -> None:
        """The engine reached the end of the file: commit the rest, the words are complete."""
        self.check_source()
        if not any(s.text.strip() for s in self.committed + self.pending):  # kept on the job: status says it
            self.warnings = (*self.warnings, NO_SPEECH)
        self.store.checkpoint(self.job.id, self.owner, self.pending, self.state, self.position, self.language,
                              self.model, self.ledger.lease_seconds, complete=True,
                              language_probability=self.probability, warnings=self.warnings)
        self.committed += self.pending
        self.pending = []

    def finish(self) -> list[str]:
        """Write the outputs from the committed words (atomically), then mark the job done."""
        self.check_source()
        transcript = self._labelled(self._transcript(self.committed))
        written = self._write(transcript)
        embed = self.spec.output("embed")
        if embed:
            written += self._embed(transcript, embed == "in-place")
        at_point("outputs")
        with outputs_answer(written):
            self.store.finish(self.job.id, self.owner, written)
        self.outputs = written
        return written

    def _record(self, written: list[str]) -> None:
        """The outputs just written recorded as the job's (read back with the bound)."""
        with outputs_answer(written):
            self.store.record_outputs(self.job.id, written)

    def _write(self, transcript) -> list[str]:
        """Write the outputs, each one only if it is not the user's (see ``check_ours``, transcriber/app/run/outputs.py)."""
        stem = Path(self.spec.named_stem(self.job.output_stem, transcript.text_language))
        rendered = transcriber.render_outputs(transcript, stem, self.spec.formats, self.spec.output_options())
        paths = [path for path, _ in rendered]
        check_place(self.job, paths)
        check_ours(self.store, self.job, paths,
                   {str(path): hashlib.sha256(text.encode()).hexdigest() for path, text in rendered})
        self.store.expect_outputs(self.job.id, [str(p) for p in paths])
        return [str(p) for p in transcriber.write_rendered(stem, rendered)]

    def _transcript(self, segments: list[Segment]):
        # by name when used (numpy, the writers): a rerun that only skips files never imports them
        return transcriber.assemble(segments, self.language, self.duration, self.model or "", self.probability,
                                    self.spec.task, self.offset)

    def _labelled(self, transcript):
        """``--speakers``: the speaker pass over the file's audio, once its words are complete (live
        outputs written while it is transcribed have none)."""
        speakers = self.spec.output_options().speakers
        if not speakers.speakers:
            return transcript
        return transcriber.add_speakers(transcript, self.job.path, speakers, self.spec.option("audio_track"),
                                        self.offset)

    def _embed(self, transcript, in_place: bool) -> list[str]:
        """The subtitles muxed into the video (``--embed``, transcriber/subtitles/embed.py): a copy beside
        the outputs (``NAME.subtitled.EXT``, one of them), or the video itself, whose new content
        is the job's own doing (adopted: the next run sees it unchanged, and a video that has a
        track in the language already gets no second one). A file whose container carries no
        subtitles (an audio file) is left as it is, said once."""
        video = Path(self.job.path)
        language = transcript.text_language
        embed = transcriber.embed
        try:
            embed.container(video)
        except embed.EmbedError as e:
            self.ledger.reporter.info(f"note: {e}")
            return []
        if not transcript.has_speech:  # an empty subtitle track: ffmpeg refuses the SRT ("Invalid data")
            self.ledger.reporter.info(f"note: {video}: {NO_SPEECH}, no subtitles embedded")
            return []
        text = transcriber.FORMATS["srt"].render(transcript, self.spec.output_options())
        if in_place:
            if not embed.has_track(video, language):
                embed.embed(video, text, language, in_place=True)
                self.store.adopt_content(self.job.id, self.owner, content_key(str(video)))
            return []
        stem = self.spec.named_stem(self.job.output_stem, language)
        target = Path(f"{stem}{embed.SUFFIX}{video.suffix}")
        check_place(self.job, [target])
        check_ours(self.store, self.job, [target], {})
        self.store.expect_outputs(self.job.id, [str(target)])
        return [str(embed.embed(video, text, language, target=target))]

    def check_source(self) -> None:
        """The file still holds what this attempt started on; SourceChanged if not.

        Called before every commit (checkpoint, words complete) and before writing outputs, so
        words of two different recordings are never committed nor spliced into one transcript.
        A file deleted (or unreadable) since is not a change: the decoder reads what it opened.
        One that does not answer in time (a hung mount) ends the attempt: ReadTimeout.
        """
        try:
            now = bounded(content_key, self.path)
        except ReadTimeout:
            raise
        except OSError:
            return
        if now != self.pinned:
            raise SourceChanged(f"{self.path}: file changed while being transcribed")


def commit_marked(steps: Iterable[Step], position: float, every: float) -> Iterator[Step]:
    """An engine's steps from ``position`` as a Ray worker streams them to its driver: each
    carries the engine state only when the driver is to commit it (``every`` seconds of audio,
    the clock of every attempt), so that a 1 s streaming step does not ship the session's audio
    buffer across the cluster every second."""
    clock = CheckpointClock(position, every)
    for step in steps:
        yield step if clock.due(step.position) else replace(step, state=None)


def one_line(error: BaseException) -> str:
    text = str(error) if isinstance(error, TranscriberError) else f"unexpected {type(error).__name__}: {error}"
    return " ".join(text.split()) or type(error).__name__


def with_path(path: str, message: str) -> str:
    """Library errors name the file already; others get it in front."""
    return message if path in message or repr(path) in message else f"{path}: {message}"
