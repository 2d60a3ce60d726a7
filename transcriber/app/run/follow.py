"""``transcribe follow``: a recording transcribed as it is made, as a job.

    transcribe follow meeting.wav -f srt,vtt          # a file still being written
    ffmpeg -i rec.flac -f wav - | transcribe follow - -o out/ --name rec
    transcribe follow http://radio.example/live.mp3 --jsonl -

The source is read by ``transcriber.LiveSource`` (by position, so the final outputs are those
of ``transcribe FILE --mode stream`` on the finished file) and decoded by the streaming engine.
It is a job like any other (``status`` shows it as ``following``, with its position), with two
differences from ``run``'s:

- it is marked ``following`` (a column of the store), and its content key is a hash of its
  first seconds of audio (``LiveSource.key``): the file grows, so its size and mtime name
  nothing, but the same recording followed again after a kill has the same key, and resumes
  from its last checkpoint;
- the outputs are rewritten (atomically) as words are committed, at most every
  ``update_seconds``, and ``--jsonl`` prints each committed word as it comes.

Ctrl-C (or SIGTERM) ends the source where it is: the audio received is decoded to its end, the
outputs are final and the job is done; a second Ctrl-C quits at once (the job resumes from its
last checkpoint).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Optional

import click

from transcriber import FOLLOW_MODES, AudioError, LiveSource, ReadTimeout, Step, bounded, probe, words_segment

from transcriber.app.run.attempt import Attempt, RunResult, build_engine
from transcriber.app.run.discover import output_stem, resolved, resolved_place
from transcriber.app.store.domain import BUSY, FAILED_BEFORE, REFUSED, SKIP, Request
from transcriber.app.run.engines import EngineCache
from transcriber.app.run.enqueue import OutputsSeen
from transcriber.app.cli.flags import FollowSettings
from transcriber.app.store.lease import owner_is_dead, worker_name
from transcriber.app.cli.progress import Reporter
from transcriber.app.run.local import Runner
from transcriber.app.run.signals import StopFlag
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.jobstore import JobStore

def outputs_stem(source: str, kind: str, output_dir: Optional[Path], name: Optional[str]) -> Optional[Path]:
    """Where the outputs go, without extension: ``--name`` (in --output-dir, else here), else
    for a file None (its name as ``run`` names it: read with its path, ``place_of``), else the
    URL's last part."""
    if name is not None:
        if not name or "/" in name or name in (".", ".."):
            raise click.UsageError(f"--name takes a file name without folder, got {name!r}")
        return (output_dir or Path(".")) / name
    if kind == "file":
        return None
    if kind == "stdin":
        raise click.UsageError("name the outputs of standard input with --name")
    last = Path(source.split("?")[0].rstrip("/").rpartition("/")[2].rpartition(":")[2]).stem
    if not last:
        raise click.UsageError(f"name the outputs of {source} with --name")
    return (output_dir or Path(".")) / last


def follow_command(store: JobStore, source: str, spec: JobSpec, output_dir: Optional[Path],
                   settings: FollowSettings, quiet: bool) -> int:
    """``transcribe follow``: the exit status (0 done, 1 failed, 128 + the signal that ended it)."""
    if spec.mode not in FOLLOW_MODES:
        raise click.UsageError(f"follow decodes with the streaming engine: --mode {spec.mode} cannot be used")
    live = LiveSource(source, settings.live_options())
    if spec.output("speakers") and live.kind != "file":  # the pass reads the finished recording again
        raise click.UsageError(f"--speakers reads the finished recording's file: {live.name} is not one")
    stem = outputs_stem(source, live.kind, output_dir, settings.name)
    reporter = Reporter(quiet=quiet)

    def on_request(signum: int) -> None:
        reporter.error("stopping: the audio received is transcribed to its end (Ctrl-C again to quit at once)")
        live.end()

    stop = StopFlag(on_request, grace=None)
    # one attempt: nothing in this command would make another (a live source is read once), so a
    # failure the next follow may get past (a hung mount) is told and ends it, the job resumable
    runner = Runner(store, engines=EngineCache(), reporter=reporter, stop=stop, max_attempts=1,
                    checkpoint_seconds=settings.checkpoint_seconds)
    with contextlib.suppress(Exception):  # the model loads while the first seconds are written
        runner.engines.get(spec)  # (a failure is the job's, booked when it runs: the cache keeps it)
    with contextlib.ExitStack() as stack:
        stack.callback(reporter.close)
        stack.enter_context(stop)
        result = follow_source(runner, live, stem, spec, settings, output_dir=output_dir)
    if result is None or result.failed or result.lost:
        return 1
    return 128 + stop.signum if stop.signum else 0


def follow_source(runner: Runner, live: LiveSource, stem: Optional[Path], spec: JobSpec, settings: FollowSettings,
                  root: Optional[Path] = None, output_dir: Optional[Path] = None) -> Optional[RunResult]:
    """Follow ``live`` as a job writing ``stem``.* (None: the file's, named as ``run`` names it in
    ``output_dir``, mirroring its place under ``root``): how it ended, None when it did not run
    (told why: its path does not answer, the source gave no audio, the job is done already or
    another process has it)."""
    try:
        with contextlib.closing(live):
            identity, place = bounded(place_of, live.source, live.kind, stem, root, output_dir, path=live.source,
                                      what=PATH)  # before ffmpeg reads it: a hung mount is one line
            failure = None
            try:
                key = live.key()  # waits for the first seconds of audio (or fails)
            except ReadTimeout:
                raise
            except AudioError as e:  # (ffmpeg failed, no audio...): a failed job, never a lost file
                key, failure = UNREAD, e
            request = Request(identity, key, spec.fingerprint(), spec.stored(), place, os.path.dirname(place),
                              following=True)
            job, action = _enqueue(runner.store, request, spec, settings.force, runner.reporter)
            if action == SKIP:
                return RunResult()
            return _run(runner, job, live, settings, failure) if job else None
    except ReadTimeout as e:
        runner.reporter.error(f"error: cannot follow {live.source}: {e.strerror}")
        return None
    except AudioError as e:
        runner.reporter.error(f"error: {e}")
        return None


PATH = "its path got no answer"
UNREAD = "unread"  # the content key of a followed source whose audio could not be read


def place_of(source: str, kind: str, stem: Optional[Path], root: Optional[Path],
             output_dir: Optional[Path]) -> tuple[str, str]:
    """(the job's identity, the place of its outputs' stem) of a followed source: a file's path
    resolved, another source as it is; ``stem`` (None: the file's, named by ``output_stem``,
    which lists its folder) in its folder resolved. ``follow_source``'s reads, made by the
    reader child with the bound."""
    if stem is None:
        stem = output_stem(Path(source), root, output_dir)
    return resolved(Path(source)) if kind == "file" else source, resolved_place(stem)


def follow_file(runner: Runner, path: Path, root: Optional[Path], output_dir: Optional[Path], spec: JobSpec,
                settings: FollowSettings) -> Optional[RunResult]:
    """Follow a growing file that ``watch`` found, its outputs named as ``watch`` names them."""
    live = LiveSource(str(path), settings.live_options())
    return follow_source(runner, live, None, spec, settings, root, output_dir)


def _enqueue(store: JobStore, request: Request, spec: JobSpec, force: bool, reporter: Reporter):
    """(the job to follow, the store's action); (None, the action), told why, when there is
    nothing to do."""
    store.expire_dead_leases(owner_is_dead)  # a killed follow's job is resumed, not "busy"
    seen = OutputsSeen(store, [request], spec, adopt=False)
    if request.path in seen.hung:
        reporter.error(f"error: {request.path}: {seen.hung[request.path]}")
        return None, REFUSED
    ((job, action),) = store.enqueue_many([request], force=force, outputs_present=seen.all_exist,
                                          vet=None if force else seen.refusal)
    if action == SKIP:
        reporter.error(f"done already: {request.path} -> {', '.join(job.outputs)} (--force follows it again)")
        return None, action
    if action == BUSY:
        reporter.error(f"error: {request.path} is being followed by another process ({job.worker})")
        return None, action
    if action == REFUSED:
        reporter.error(f"error: not written: {seen.refusal(request, job)}")
        return None, action
    if action == FAILED_BEFORE:  # the source is live: try it again, from its checkpoint
        ((job, _),) = store.retry([job.id])
    if force:  # what it replaces is the job's now
        store.record_outputs(job.id, [p for p in seen.names(job.output_stem) if seen.exists(p)])
    return job, action


def _run(runner: Runner, job, live: LiveSource, settings: FollowSettings,
         failure: Optional[AudioError] = None) -> Optional[RunResult]:
    """Follow the job's source; ``failure``: why its audio could not be read (the job is failed
    with it)."""
    result = RunResult()
    ledger = runner.ledger
    claimed = runner.store.claim(ledger.owner, [job.id], ledger.lease_seconds)
    if claimed is None:
        runner.reporter.error(f"error: {job.path} is being followed by another process")
        return None
    if failure is not None:
        ledger.attempt(claimed, None, result).end(failure)
        return result
    attempt = FollowAttempt(runner, claimed, result, live, settings)
    runner.reporter.info(f"following {live.name} (Ctrl-C to end it)")
    with attempt:
        attempt.run()
    return result


class FollowAttempt(Attempt):
    """An ``Attempt`` over a live source: no content key nor duration of a file that grows; the
    outputs rewritten as words are committed; each word to ``settings.jsonl``; a stop ends the
    source (its audio decoded to the end) instead of giving the job back."""

    def __init__(self, runner: Runner, job, result: RunResult, live: LiveSource, settings: FollowSettings):
        super().__init__(runner.ledger, job, worker_name(), result)
        self.engines, self.live, self.settings = runner.engines, live, settings
        self.open_words: list = []  # committed words of the segment still open
        self.last_write = -math.inf  # the first words are written at once
        self.unwritten = False  # words committed since the outputs were last written
        live.on_wait = self.update_if_due  # while the source waits for audio: words out when due

    def run(self) -> None:
        """Decode the source to its end (within ``with attempt:``, which then writes the outputs)."""
        resume = self.resume_from(self.job.content_key, None)
        if resume is not None:
            engine = build_engine(self.engines, self.spec)
            self.model = engine.model_name
            self.consume(engine.steps(self.live, resume.state))

    def complete(self) -> None:
        """The source has ended: its duration known at last, then its words complete."""
        self.duration = self._final_duration()
        self.store.start(self.job.id, self.owner, self.job.content_key, self.duration, self.worker)
        super().complete()

    def stops_at(self, step: Step) -> bool:
        """Never: a stop ends the source where it is (follow's own stop has already, watch's does
        here), and the audio received is decoded to its end, the outputs final."""
        if self.ledger.stop.requested:
            self.live.end()
        return False

    def _final_duration(self) -> float:
        """The finished file's duration as a replay of it reads it (probe), else the audio's."""
        if self.live.kind == "file":
            with contextlib.suppress(AudioError):
                return probe(self.path) or self.live.position + self.offset
        return self.live.position + self.offset  # (the audio's end on the media's timeline)

    def check_source(self) -> None:
        """Nothing to check: a followed file changes by design, and its key is its first seconds
        of audio (``LiveSource.key``), checked when it was enqueued."""

    def add(self, step: Step, commit: bool) -> None:
        super().add(step, commit)
        self.open_words += step.words
        del self.open_words[:sum(len(s.words) for s in step.segments)]  # closed now: in the segments
        self._print(step.words)
        self.unwritten = self.unwritten or bool(step.words)
        self.update_if_due()

    def update_if_due(self) -> None:
        """``update()`` if words were committed since the last one, ``update_seconds`` ago."""
        if self.unwritten and time.monotonic() - self.last_write >= self.settings.update_seconds:
            self.update()

    def update(self) -> None:
        """The outputs rewritten with every word committed so far; the job's position saved."""
        segments = self.committed + self.pending
        if self.open_words:
            words = tuple(self.open_words)
            segments = segments + [words_segment(words)]
        self._record(self._write(self._transcript(segments)))
        self.store.checkpoint(self.job.id, self.owner, [], None, self.position, self.language, self.model,
                              self.ledger.lease_seconds, language_probability=self.probability)
        self.last_write, self.unwritten = time.monotonic(), False

    def _print(self, words) -> None:
        out = self.settings.jsonl
        if out is None or not words:
            return
        try:
            for w in words:
                out.write(json.dumps(w.to_dict(), ensure_ascii=False) + "\n")
            out.flush()
        except BrokenPipeError:  # the reader went away: the job goes on, its outputs too
            self.settings = dataclasses.replace(self.settings, jsonl=None)
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
