"""The ``transcribe`` command.

    transcribe talk.mp3                       # talk.srt next to it
    transcribe podcasts/ --format srt,vtt,json --output-dir subs/
    transcribe status
    transcribe watch incoming/

A Click group whose default command takes the paths, so ``transcribe PATH...`` works and
subcommands (``status``, ``retry``, ``watch``) live beside it. Commands stay thin: flags become a
``JobSpec`` and settings (jobs/flags.py: the decoding flags come from the library's options
classes), files become jobs in the store (jobs/store.py, all the SQL), and the runner
(jobs/runner.py) does the work.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Optional

import click

from transcriber import FOLLOW_MODES, RunFault, start_reader

from .flags import (FOLLOW_HELP, LazyHelp, RaySettings, RunnerSettings, db_option, follow_options, quiet_option,
                    ray_options, runner_options, spec_options)

if TYPE_CHECKING:
    from .batch import Batch
    from .progress import Reporter
    from .runner import StopFlag
    from .store import Job, JobStore

# This module is light to import: ``transcribe --version`` and ``--help`` load no numpy, MLX,
# tokenizer nor SQLite (issue 18: <= 0.3 s). The modules that do are imported where a command
# needs them; a default that lives in one of them is read when it is shown or used (_later).

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
        if not args:  # `transcribe` alone: the help, not "Missing argument"
            click.echo(ctx.get_help())
            ctx.exit(0)
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
        except Exception as e:  # the database, the model, Ray: one line
            if not isinstance(e, one_line_errors()):
                raise
            click.echo(f"error: {e}", err=True)
            sys.exit(1)


def one_line_errors() -> tuple[type, ...]:
    """The errors told in one line: the database's, the model's and, once Ray's module is
    imported (a --ray run), the cluster's. Not imported to be checked: Ray's module costs a
    second of imports to a command that never uses it."""
    errors: list[type] = [RunFault]
    for module, name in (("jobs.store", "StoreError"), ("jobs.ray_worker", "ClusterError")):
        if module in sys.modules:
            errors.append(getattr(sys.modules[module], name))
    return tuple(errors)


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
    from transcriber import settings

    try:  # every TRANSCRIBER_* variable, before any work: a bad value is a usage error
        settings.check_all()
    except settings.SettingError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)


def open_store(db: Optional[Path], timeout: Optional[float] = None) -> JobStore:
    from tqdm import tqdm

    from .store import DEFAULT_TIMEOUT, JobStore, StoreError, default_path

    timeout = DEFAULT_TIMEOUT if timeout is None else timeout

    def waiting(message: str) -> None:
        tqdm.write(message, file=sys.stderr)  # between progress bars, if any

    try:
        store = JobStore(db or default_path(), timeout=timeout, on_wait=waiting)
    except StoreError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    # closed when the command ends, however it ends: a database lost mid-run (DatabaseGone) is
    # left without a checkpoint into whatever is at its path
    click.get_current_context().call_on_close(store.close)
    return store


@contextlib.contextmanager
def runners(store: JobStore, reporter: Reporter, ray: Optional[RaySettings], files: Optional[int],
            settings: RunnerSettings):
    """Yields ``make(stop) -> runner``: the in-process Runner, or with ``ray`` a RayRunner. Ray is
    joined (or started) here, before the caller installs its StopFlag (``ray.init`` sets its own
    SIGTERM handler), and its workers (and a local instance) are stopped on the way out.
    ``files``: how many files the batch has (None: watch mode), at most one worker each."""
    from .engines import EngineCache
    from .runner import Runner

    common = dict(reporter=reporter, max_attempts=settings.max_attempts,
                  checkpoint_seconds=settings.checkpoint_seconds, lease_seconds=settings.lease_seconds)
    if ray is None:
        if settings.threads:
            from transcriber import blas

            blas.set_threads(settings.threads)
            if blas.threads() != settings.threads:  # MLX's own BLAS, or one that cannot be told
                reporter.info(f"note: --threads {settings.threads} has no effect: {blas.describe()}")
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


@contextlib.contextmanager
def stopped_exits(message: str):
    """SIGTERM or Ctrl-C in the block (before anything is queued: nothing to checkpoint) prints
    ``message`` and exits 128 + the signal at once; the file-system calls it waits on are made
    by the reader process (jobs/discover.py), so a hung mount does not keep the command alive."""
    caught: list[int] = []

    def handle(signum, frame):
        caught.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    except KeyboardInterrupt:
        click.echo(message, err=True)
        sys.exit(128 + (caught[0] if caught else signal.SIGINT))
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_flag(reporter, ray: Optional[RaySettings]) -> StopFlag:
    """The run's StopFlag. In this process a stop acts within STOP_GRACE_SECONDS (the step in
    flight dropped); Ray workers checkpoint on their own, so a Ray run waits for them."""
    from .runner import STOP_GRACE_SECONDS, StopFlag

    return StopFlag(stop_message([reporter]), grace=None if ray else STOP_GRACE_SECONDS)


def run_batch(store: JobStore, batch: Batch, quiet: bool, settings: RunnerSettings,
              ray: Optional[RaySettings] = None) -> None:
    """Run a batch's jobs (in this process, or on Ray), print the summary, exit with its status."""
    from .batch import summary
    from .progress import Reporter, printable
    from .runner import RunResult

    result = RunResult()
    if batch.to_run:
        from transcriber import blas, kernels_note  # its probe, numpy's matmul: only for a run that decodes

        if not quiet and sys.platform.startswith("linux") and not blas.loaded_path:
            click.echo(f"note: {blas.describe()}", err=True)
        kernels = None if quiet else kernels_note()
        if kernels:
            click.echo(kernels, err=True)
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


class UncheckedPath(click.Path):
    """A click.Path that does not stat() the path (a stat on a hung mount waits forever)."""

    def convert(self, value, param, ctx):
        return self.coerce_path_result(value)


@main.command("run", help="Transcribe media files and folders (the default command).\n" + EXAMPLES)
# unchecked: an unreadable file fails as a job of the batch (one line), not the whole command,
# and a path on a hung mount is checked with a bound (jobs/discover.py), not by click's stat()
@click.argument("paths", nargs=-1, required=True, type=UncheckedPath(path_type=Path))
@spec_options
@click.option("--force", is_flag=True, help="Redo files that are already done, and replace outputs this tool "
                                            "did not write (or that changed since), which are otherwise kept.")
@runner_options
@ray_options
def run(paths, spec, output_dir, force, runner, db, db_timeout, quiet, ray):
    start_reader("jobs.discover")  # the walk's and the enqueue's reads: it boots while this process imports
    from .batch import Batch, NameClash, enqueue_files
    from .discover import discover, has_audio
    from .progress import printable
    from .store import FAILED

    store = open_store(db, db_timeout)

    def is_media(path: Path, key: str) -> bool:
        # an unknown extension is probed by ffmpeg once; a file that is already a job was media
        try:
            job = store.by_path(key)
        except UnicodeEncodeError:  # not a UTF-8 name: it fails at enqueue, with a reason
            job = None
        return (job is not None and job.status != FAILED) or has_audio(path)

    with stopped_exits("interrupted while listing the inputs: nothing was queued"):
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


def shown_statuses() -> tuple[str, ...]:
    """The statuses ``status`` shows: the store's, then following, stalled and gone."""
    from .store import FOLLOWING, GONE, STALLED, STATUSES

    return (*STATUSES, FOLLOWING, STALLED, GONE)


def _statuses(ctx, param, values: tuple[str, ...]) -> tuple[str, ...]:
    # checked here, not by a click.Choice, which would load the store (SQLite) for --help
    unknown = [v for v in values if v not in shown_statuses()]
    if unknown:
        raise click.BadParameter(f"{unknown[0]!r} is not one of {', '.join(shown_statuses())}")
    return values


def shown_status(job: Job, now: float, exists: Optional[bool] = None) -> str:
    """The one status ``status`` shows, in its table, count line and JSON alike: ``stalled`` for
    a running job whose runner is gone (dead, or its lease expired), ``gone`` for a job not done
    whose input no longer exists, ``following`` for a running followed source, else the stored one.
    ``exists``: whether the job's file exists, if known (else looked at now, with the bound on
    reads; a file that does not answer is taken to exist)."""
    return _gone_or(job, _runner_status(job, now), exists)


def _gone_or(job: Job, status: str, exists: Optional[bool]) -> str:
    """``gone`` for a job of a status that says its file should be there and is not, else ``status``."""
    from .store import FAILED, GONE, QUEUED, STALLED

    if status not in (QUEUED, STALLED, FAILED):
        return status
    if exists is None:
        from transcriber import ReadTimeout, bounded

        with contextlib.suppress(ReadTimeout):
            exists = bounded(os.path.lexists, job.path)
    return GONE if exists is False else status


LOOK_CHUNK = 1000  # jobs whose files one request to the reader looks at (``shown_jobs``)


def _runner_status(job: Job, now: float) -> str:
    """``shown_status`` without the look at the file: stalled, following, else as stored."""
    from .runner import owner_is_dead
    from .store import FOLLOW_KEY, FOLLOWING, RUNNING, STALLED

    status = job.status
    if status == RUNNING and (job.stalled(now) or (job.lease_owner and owner_is_dead(job.lease_owner))):
        status = STALLED
    if status == RUNNING and job.content_key.startswith(FOLLOW_KEY):
        status = FOLLOWING
    return status


def shown_jobs(jobs: Iterable[Job], now: float, warn: Callable[[str], None]) -> Iterator[tuple[Job, str]]:
    """Each job with its ``shown_status``, read as consumed (flat memory). Whether the files of
    the jobs not done still exist is looked at LOOK_CHUNK jobs at a time, by the reader with the
    bound on reads (``bounded_each``), by folder: a folder that does not answer costs one bound,
    is told once to ``warn``, and its jobs are shown as stored."""
    from transcriber import ReadTimeout, bounded_each

    from .discover import STAT
    from .store import FAILED, QUEUED, STALLED

    jobs, told = iter(jobs), set()
    while chunk := list(itertools.islice(jobs, LOOK_CHUNK)):
        statuses = [_runner_status(job, now) for job in chunk]
        looked = [job.path for job, status in zip(chunk, statuses) if status in (QUEUED, STALLED, FAILED)]
        found = dict(zip(looked, bounded_each(os.path.lexists, looked, what=STAT, key_of=os.path.dirname)))
        for job, status in zip(chunk, statuses):
            exists = found.get(job.path, True)
            if isinstance(exists, ReadTimeout):
                if os.path.dirname(job.path) not in told:
                    told.add(os.path.dirname(job.path))
                    warn(f"warning: cannot tell whether {job.path} still exists: {exists.strerror}")
                exists = True
            yield job, _gone_or(job, status, exists)


def _note(job: Job) -> str:
    """The error of a failed (or retrying) job; the warnings of a done one."""
    from .store import FAILED

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
    from .progress import printable

    header = ("ID", "STATUS", "PROGRESS", "RUNS", "LANGUAGE", "WORKER", "UPDATED", "FILE", "NOTE")
    rows = [(str(j.id), shown, f"{_clock(j.progress)}/{_clock(j.duration)}", str(j.runs),
             _language(j), j.worker or "-", _when(j.updated_at), printable(j.path), printable(_note(j)))
            for j, shown in jobs]
    return "\n".join(_table(header, rows))


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
@click.option("-s", "--status", "statuses", multiple=True, callback=_statuses, metavar="STATUS",
              cls=LazyHelp, help_text=lambda: f"Only jobs with this status (repeatable): {', '.join(shown_statuses())}.")
@db_option
def status(as_json, statuses, db, db_timeout):
    from .progress import printable

    store = open_store(db, db_timeout)
    warnings = []

    def warn(line: str) -> None:  # a file that did not answer: shown as stored, and exit 1
        warnings.append(line)
        click.echo(printable(line), err=True)

    shown = shown_jobs(store.each_job(), time.time(), warn)
    shown = ((j, s) for j, s in shown if s in statuses) if statuses else shown
    if as_json:
        write_json_array(j.to_dict(s) for j, s in shown)
    else:
        show_table(list(shown), statuses)
    sys.exit(1 if warnings else 0)


def show_table(jobs: list[tuple[Job, str]], statuses: tuple[str, ...]) -> None:
    """``status``'s table of (job, its shown status) pairs and its count line."""
    if not jobs:
        click.echo("no jobs" + (f" with status {', '.join(statuses)}" if statuses else ""))
        return
    click.echo(status_table(jobs))
    counts = Counter(s for _, s in jobs)
    click.echo(", ".join(f"{counts[s]} {s}" for s in shown_statuses() if counts[s]))


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
    from .batch import Batch
    from .runner import owner_is_dead
    from .store import FAILED

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


def watched_folder(folder: Path) -> None:
    """click's checks of FOLDER (exists, is a folder), with the bound on reads: a folder on a
    hung mount is one line and exit 1, not a stat() that waits forever."""
    from transcriber import ReadTimeout, bounded_each

    from .discover import STAT, path_kind
    from .progress import printable

    (kind,) = bounded_each(path_kind, [folder], what=STAT)
    if isinstance(kind, ReadTimeout):
        click.echo(printable(f"error: cannot watch {folder}: {kind.strerror}"), err=True)
        sys.exit(1)
    if kind != "folder":
        what = "is a file" if kind == "file" else "does not exist"
        raise click.BadParameter(f"Directory {str(folder)!r} {what}.", param_hint="'FOLDER'")


@main.command(help="""Watch a folder: transcribe media files that appear or change in it (and its
subfolders), once their size has stopped changing for --stable-seconds. Temporary and partial
files (.part, .crdownload, dot-files...) are ignored. Stops cleanly on Ctrl-C or SIGTERM: a file
in progress is checkpointed and resumes at the next start.

\b
Examples:
  transcribe watch incoming/
  transcribe watch /srv/recordings -f srt,vtt -o /srv/subtitles
""")
@click.argument("folder", type=UncheckedPath(path_type=Path))  # checked with a bound: watched_folder
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
    start_reader("jobs.discover", "jobs.watch")
    from .flags import FollowSettings
    from .progress import Reporter
    from .store import DONE, FAILED
    from .watch import watch as watch_folder

    if follow and (ray or spec.mode not in FOLLOW_MODES):
        raise click.UsageError(f"--follow follows files in this process with --mode {FOLLOW_MODES[0]} (not with --ray)")
    watched_folder(folder)
    store = open_store(db, db_timeout)
    reporter = Reporter(quiet=quiet)
    stop = stop_flag(reporter, ray)
    with closing_on_interrupt(reporter, "interrupted: a file in progress resumes from its last checkpoint", stop):
        with runners(store, reporter, ray, None, runner) as make:
            reporter.info(f"watching {folder} (Ctrl-C to stop)")
            with stop:
                result = watch_folder(store, folder, spec, output_dir, make(stop), reporter, stop,
                                      interval=interval, stable_seconds=stable_seconds,
                                      follow=FollowSettings(idle_seconds=max(stable_seconds, 0.1),
                                                            checkpoint_seconds=runner.checkpoint_seconds) if follow else None)
    # each failure was printed as it happened (the runner's "error:" line): only the count here,
    # of files, by how each one ended (a file restarted while still being written counts once)
    ended = store.jobs(ids={j.id for j in result.done} | {j.id for j, _ in result.failed})
    done, failed = (sum(1 for j in ended if j.status == status) for status in (DONE, FAILED))
    click.echo(f"watch stopped: {done} done, {failed} failed", err=True)
    sys.exit(1 if failed else 0)  # as a run's: a file failed (its job says why)


@main.command(help=FOLLOW_HELP, context_settings={"default_map": {"mode": FOLLOW_MODES[0]}})
@click.argument("source")
@spec_options
@follow_options
@db_option
@quiet_option
def follow(source, spec, output_dir, settings, db, db_timeout, quiet):
    start_reader("jobs.follow")
    from .follow import follow_command

    sys.exit(follow_command(open_store(db, db_timeout), source, spec, output_dir, settings, quiet))


@main.command(help="""Show what this installation runs on: versions, the ffmpeg in use, which BLAS
serves MLX's matmuls (and how fast it measures now), the cache folder and the models found.""")
@click.option("--probe", is_flag=True, help="Measure the BLAS candidates again (refreshes the cached choice).")
def doctor(probe):
    from transcriber import doctor_report

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
    from transcriber import list_models

    catalog = list_models()
    click.echo(json.dumps(catalog.to_dict(), indent=2) if as_json else models_table(catalog))


from .serve.command import serve  # noqa: E402 - the HTTP service; FastAPI is imported only when it runs

main.add_command(serve)
