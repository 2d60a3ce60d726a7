"""The command line's flags: decorators that hand a command its flags as one object each.

- ``spec_options``: what to do with each file, one ``spec`` (a JobSpec). Its decoding flags are
  made from the library's options classes (``transcriber.option_table``) and its output flags
  (cue layout, each format's own) from ``transcriber.output_option_table``, so an option is
  declared once, in the library; the library checks the values, and an error names the flag
  (``OptionError.named``).
- ``runner_options``: how jobs run, one ``runner`` (RunnerSettings), with --db and --quiet.
- ``ray_options``: --ray and its flags, one ``ray`` (RaySettings or None).

Light to import, as transcriber/app/cli/main.py is: defaults and help texts that live in heavy modules (the
runner, the store, the list of formats) are read when they are shown or used.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Optional

import click

from transcriber import (DEFAULT_MODE, DEFAULT_MODEL, FOLLOWABLE, MODES, OptionError, check_model_options, mode_default,
                         option_table, output_option_table)

from transcriber.app.store.spec import JobSpec


def formats() -> dict:
    from transcriber import FORMATS  # the writers

    return FORMATS


def parse_formats(ctx, param, value) -> tuple[str, ...]:
    """``-f srt,vtt``, ``-f srt -f vtt`` (the flag given again adds, not replaces) -> ('srt', 'vtt')."""
    given = ",".join((value,) if isinstance(value, str) else value)
    chosen = tuple(dict.fromkeys(f.strip().lower() for f in given.split(",") if f.strip()))
    unknown = [f for f in chosen if f not in formats()]
    if unknown or not chosen:
        raise click.BadParameter(f"unknown format {', '.join(unknown) or given!r}; choose from {', '.join(formats())}")
    return chosen


def _later(module: str, name: str):
    """A Click default read from ``transcriber.app.<module>`` when it is used or shown (see LazyHelp)."""
    def default():
        import importlib

        return getattr(importlib.import_module(f"transcriber.app.{module}"), name)
    return default


class LazyHelp(click.Option):
    """An option whose help text (``help_text()``) and shown default (a ``_later``) are made
    when they are shown: they read modules (the runner, the store, the list of formats) that
    ``transcribe --help`` need not load."""

    def __init__(self, *args, help_text=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.help_text = help_text

    def get_help_record(self, ctx):
        if self.help_text:
            self.help = self.help_text()
        if callable(self.default):  # shown as the value it reads
            self.default = self.default()
        return super().get_help_record(ctx)


def db_option(f):
    f = click.option("--db-timeout", type=click.FloatRange(min=0), default=_later("store.jobstore", "DEFAULT_TIMEOUT"),
                     envvar="TRANSCRIBER_DB_TIMEOUT", show_envvar=True, show_default=True, cls=LazyHelp,
                     help="Seconds to wait for a job database locked by another process, then "
                          "give up with an error.")(f)
    return click.option("--db", type=click.Path(dir_okay=False, path_type=Path), envvar="TRANSCRIBER_DB",
                        show_envvar=True, cls=LazyHelp,
                        help_text=lambda: f"Job database (default: {_later('store.jobstore', 'default_path')()()}).")(f)


def quiet_option(f):
    return click.option("-q", "--quiet", is_flag=True, help="No progress bars nor per-file lines.")(f)


@dataclass(frozen=True)
class RunnerSettings:
    """The flags of ``runner_options``: how jobs are run (transcriber/app/run/local.py)."""

    max_attempts: int
    checkpoint_seconds: float
    lease_seconds: float
    batch_files: int  # files decoded side by side (one-shot mode)
    threads: Optional[int] = None  # BLAS threads of this process (None: the measured choice)


def runner_options(f):
    """Flags for whatever runs jobs (run, retry, watch), handed to the command as one
    ``runner`` (RunnerSettings), and the database and quiet flags."""

    @functools.wraps(f)
    def command(max_attempts, checkpoint_seconds, lease_seconds, batch_files, threads, **kwargs):
        settings = RunnerSettings(max_attempts, checkpoint_seconds, lease_seconds, batch_files, threads)
        return f(runner=settings, **kwargs)

    for decorator in reversed([
        click.option("--max-attempts", type=click.IntRange(min=1), default=_later("run.local", "DEFAULT_MAX_ATTEMPTS"),
                     show_default=True, cls=LazyHelp, help="Give a file up after this many failed attempts."),
        click.option("--checkpoint-seconds", type=click.FloatRange(min=0), default=_later("run.local", "DEFAULT_CHECKPOINT_SECONDS"),
                     show_default=True, cls=LazyHelp, help="Save progress every this many seconds of audio (one-shot: "
                                             "every 30 s window)."),
        click.option("--lease-seconds", type=click.FloatRange(min=1), default=_later("run.local", "DEFAULT_LEASE_SECONDS"),
                     hidden=True, help="How long a silent runner keeps its job."),
        click.option("--batch-files", type=click.IntRange(min=1), default=1, show_default=True,
                     help="One-shot mode: decode up to N files side by side, their windows sharing each "
                          "decoder step (the same words; on 2 CPU cores two at a time took 0.95x the time "
                          "of one after another, four 1.01x). Streaming and --ray take one file at a time."),
        click.option("--threads", type=click.IntRange(min=1), default=None,
                     help="Threads of MLX's matrix products (its BLAS) and of the native encoder and "
                          "prompt passes in this process (as $TRANSCRIBER_BLAS_THREADS). [default: the BLAS "
                          "count measured fastest here; the encoder on every core]"),
        db_option, quiet_option]):
        command = decorator(command)
    return command


RAY_INSTALL = "pip install 'transcriber[ray]'"


@dataclass(frozen=True)
class RaySettings:
    """``--ray`` and the flags that go with it (transcriber/app/run/ray_runner.py)."""

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
        click.option("--worker-timeout", type=click.FloatRange(min=1), default=_later("store.lease", "DEFAULT_WORKER_TIMEOUT"),
                     show_default=True, cls=LazyHelp,
                     help="Ray: seconds without progress after which a worker is taken for dead (killed, "
                          "its file resumed on another)."),
    ]):
        command = decorator(command)
    return command


def _shown(value) -> str:
    return ",".join(f"{v:g}" for v in value) if isinstance(value, tuple) else f"{value:g}" \
        if isinstance(value, float) else str(value)


def _option_help(option, modes: tuple[str, ...]) -> str:
    """An engine option's help: its own text, the modes that take it (when not all), and each
    mode's default (when it has one to show)."""
    text = option.help
    if len(modes) < len(MODES):
        text += f" Only with --mode {' or '.join(modes)}."
    defaults = [mode_default(mode, option.name) for mode in modes]
    if "[default:" in text or any(v is None or isinstance(v, bool) for v in defaults):
        return text  # the text says it (greedy, detect...)
    shown = dict(zip(modes, map(_shown, defaults)))
    same = len(set(shown.values())) == 1
    return text + "  [default: " + (shown[modes[0]] if same else "; ".join(f"{m} {v}" for m, v in shown.items())) + "]"


def _from_text(option):
    def parse(ctx, param, value):
        if value is None or not isinstance(value, str):
            return value
        try:
            return option.from_text(value)
        except OptionError as e:
            raise click.UsageError(e.named(flag_of)) from None
    return parse


def engine_flags() -> list:
    """One Click option per engine option of any mode (``transcriber.option_table``: the options
    classes own their name, help, bounds and flag). None: not given, the mode's default."""
    flags = []
    for name, (option, modes) in option_table().items():
        names = [*([option.short] if option.short else []), option.flag]
        common = dict(default=None, help=_option_help(option, modes))
        if option.type is bool:
            flags.append(click.option(f"{option.flag}/--no-{option.flag[2:]}", name, **common))
        elif option.choices:
            flags.append(click.option(*names, name, type=click.Choice(option.choices), **common))
        else:  # parsed and checked by the option itself, so the message is the library's
            flags.append(click.option(*names, name, metavar=option.metavar or option.type.__name__.upper(),
                                      callback=_from_text(option), **common))
    return flags


def output_flags() -> list:
    """One Click option per output option (``transcriber.output_option_table``: the cue layout's
    and each format's own, with their name, help and bounds). None: not given, the default.
    Numbers are read by Click's types and checked by the library (make_spec names the flag)."""
    flags = []
    for name, (option, _, default) in output_option_table().items():
        if option.type is bool:
            flags.append(click.option(option.flag, name, is_flag=True, help=option.help))
            continue
        if option.choices:  # the flag alone is its first choice: --embed is --embed copy
            flags.append(click.option(option.flag, name, type=click.Choice(option.choices), is_flag=False,
                                      flag_value=option.choices[0], default=None, help=option.help))
            continue
        shown = "" if "[default" in option.help or default is None else f"  [default: {default}]"
        flags.append(click.option(option.flag, name, type=option.type, default=None, help=option.help + shown))
    return flags


def spec_options(f):
    """Flags that say what to do with each file (run, watch), handed to the command as one
    ``spec`` (a JobSpec): the command never sees them one by one."""

    @functools.wraps(f)
    def command(**kwargs):
        options = {name: kwargs.pop(name) for name in option_table()}
        outputs = {name: kwargs.pop(name) for name in output_option_table()}
        fields = {name: kwargs.pop(name) for name in SPEC_FIELDS}
        spec = make_spec(options, outputs, fields)
        check_contradictions(spec, kwargs)
        try:  # an unknown model or language, an English-only model asked for German: before any job is queued
            check_model_options(spec.model, language=spec.language, task=spec.task)
        except ValueError as e:
            raise click.UsageError(str(e)) from e
        return f(spec=spec, **kwargs)

    for decorator in reversed(_spec_flags()):
        command = decorator(command)
    return command


def _spec_flags() -> list:
    """The Click options of spec_options, in the order --help shows them."""
    return [
        click.option("-f", "--format", "formats", multiple=True, default=["srt"], show_default=True,
                     callback=parse_formats, cls=LazyHelp,
                     help_text=lambda: f"Output formats, comma-separated or the flag again: {', '.join(formats())}."),
        click.option("-o", "--output-dir", type=click.Path(file_okay=False, path_type=Path),
                     help="Write outputs here (mirroring subfolders) instead of next to each input."),
        click.option("-m", "--model", default=DEFAULT_MODEL, show_default=True,
                     help="Model name (see `transcribe models`) or a model folder: CTranslate2, "
                          "Hugging Face transformers or MLX layout."),
        click.option("--mode", type=click.Choice(list(MODES)), default=DEFAULT_MODE, show_default=True,
                     help="stream: AlignAtt over the audio replayed chunk by chunk; "
                          "oneshot: 30 s windows with timestamp rules."),
        # decoding: the options classes' own flags; their values are checked by the library
        # (which bounds every flag's cost), and make_spec names the flag in its error
        *engine_flags(),
        click.option("--live", is_flag=True,
                     help="Rewrite the outputs at every checkpoint, so a growing SRT can be followed."),
        # Cue layout and output details: they change the files, never the words, so changing
        # them rewrites a done file's outputs from its stored words, without the model.
        *output_flags(),
        click.option("--tag-language", is_flag=True,
                     help="Name the outputs with their language code before the extension: talk.en.srt, "
                          "talk.de.vtt (what Jellyfin, Plex, Kodi and VLC read as the subtitle's language; "
                          "'und' when no language was found)."),
    ]


# the JobSpec fields spec_options takes from flags of the same name (the engine options come
# from option_table, the output options from output_option_table)
SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(JobSpec) if f.name not in ("options", "outputs"))


def flag_of(name: str) -> str:
    """The flag of an option or JobSpec field: --beam-size for beam_size."""
    for table in (option_table(), output_option_table()):
        if name in table:
            return table[name][0].flag
    return "--" + name.replace("_", "-")


def check_contradictions(spec: JobSpec, others: dict) -> None:
    """A usage error for flags that contradict each other (a decoding flag the mode does not
    take was refused by the library already)."""
    for name, (_, fmts, _) in output_option_table().items():  # a format's own option, without the format
        if fmts and spec.output(name) and not set(fmts) & set(spec.formats):
            raise click.UsageError(f"{flag_of(name)} needs the {' or '.join(fmts)} format (-f {fmts[0]})")
    if "rttm" in spec.formats and not spec.output("speakers"):
        raise click.UsageError("-f rttm writes who speaks when: it needs --speakers")
    if others.get("ray_address") is not None and others.get("batch_files", 1) > 1:
        raise click.UsageError("--batch-files and --ray contradict: Ray workers take one file at a time")
    if others.get("ray_address") is not None and others.get("threads") is not None:
        raise click.UsageError("--threads and --ray contradict: Ray workers take --worker-threads")


def make_spec(options: dict, outputs: dict, fields: dict) -> JobSpec:
    """The JobSpec for these flags; a bad value is a usage error naming the flag."""
    try:
        return JobSpec(**{**fields, "model": str(fields["model"])}, options=options, outputs=outputs)
    except OptionError as e:  # an engine or output option: the library names it, we give its flag
        raise click.UsageError(e.named(flag_of)) from e


@dataclass(frozen=True)
class FollowSettings:
    """The flags of ``follow_options``."""

    idle_seconds: float = 10.0
    update_seconds: float = 2.0
    input_format: Optional[str] = None
    name: Optional[str] = None  # the outputs' name (stdin, a URL); default: the file's
    force: bool = False
    checkpoint_seconds: float = 10.0  # as the runner's DEFAULT_CHECKPOINT_SECONDS
    jsonl: Optional[IO[str]] = None  # where each committed word goes, one JSON line each

    def live_options(self):
        """The library's ``FollowOptions`` for these flags."""
        from transcriber import FollowOptions

        return FollowOptions(idle_seconds=self.idle_seconds, input_format=self.input_format)


def follow_options(f):
    """follow's own flags, handed to the command as one ``settings`` (FollowSettings)."""

    @functools.wraps(f)
    def command(idle_seconds, update_seconds, input_format, name, force, checkpoint_seconds, jsonl, **kwargs):
        return f(settings=FollowSettings(idle_seconds, update_seconds, input_format, name, force,
                                         checkpoint_seconds, jsonl), **kwargs)

    for decorator in reversed([
        click.option("--idle-seconds", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
                     help="A file has ended when it has not grown for this long and no process holds it "
                          "open for writing (Linux) (a URL or device: no audio for this long; one that "
                          "gives none this long after its start fails)."),
        click.option("--update-seconds", type=click.FloatRange(min=0), default=2.0, show_default=True,
                     help="Rewrite the outputs at most this often while words are committed."),
        click.option("--input-format", default=None,
                     help="ffmpeg's input format (-f) for SOURCE: a capture device (alsa, pulse, v4l2, "
                          "lavfi...) or a stream ffmpeg cannot guess."),
        click.option("--name", default=None,
                     help="The outputs' name, without extension (needed for '-'; default: the file's "
                          "or the URL's)."),
        click.option("--force", is_flag=True,
                     help="Follow again from the start, replacing the outputs (a done job, outputs not "
                          "written by transcribe)."),
        click.option("--checkpoint-seconds", type=click.FloatRange(min=0), default=_later("run.local", "DEFAULT_CHECKPOINT_SECONDS"), cls=LazyHelp,
                     show_default=True, help="Save the session every this many seconds of audio."),
        click.option("--jsonl", type=click.File("w", lazy=False), default=None, metavar="FILE",
                     help="Write each committed word as one JSON line to FILE ('-': standard output)."),
    ]):
        command = decorator(command)
    return command


FOLLOW_HELP = f"""Transcribe a recording as it is made, keeping its subtitles current on disk.
SOURCE is a file still being written (read as it grows, until it has not grown for
--idle-seconds), '-' (standard input, until EOF), or anything ffmpeg opens: a URL, or a capture
device with --input-format. Files that can be followed: {FOLLOWABLE} (a plain MP4 keeps its
index at its end and cannot). The outputs are rewritten as words are committed; once the source
has ended they are those of `transcribe FILE --mode stream` on the finished file. A followed
file is a job (`status` shows it as following); after a kill the same command resumes it.
Ctrl-C ends the source where it is, with the outputs written.

\b
Examples:
  transcribe follow meeting.wav -f srt,vtt
  ffmpeg -i talk.flac -f wav - | transcribe follow - -o subs/ --name talk
  transcribe follow http://radio.example/live.mp3 --jsonl - -l en
  transcribe follow default --input-format pulse --name mic -o live/
"""
