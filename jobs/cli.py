"""The ``transcribe`` command.

    transcribe talk.mp3                       # talk.srt next to it
    transcribe podcasts/ --format srt,vtt,json --output-dir subs/

A Click group whose default command takes the paths, so ``transcribe PATH...`` works and
subcommands (``status``, ``retry``, ``watch``) live beside it. Commands stay thin: options are
mapped onto the library's option dataclasses in one place (``build_options``), and the work is
done by ``transcriber``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

import transcriber
from transcriber import blas
from transcriber.cues import CueOptions
from transcriber.decoding.options import DecodingOptions
from transcriber.errors import TranscriberError
from transcriber.transcribe import TranscribeOptions
from transcriber.writers import FORMATS, write_outputs

from .discover import discover, output_stem
from .progress import FileProgress

EXAMPLES = """
\b
Examples:
  transcribe talk.mp3                          talk.srt next to talk.mp3
  transcribe podcasts/ --format srt,vtt,json   every media file in podcasts/, recursively
  transcribe a.mp4 b.wav -o subs/ -f vtt       outputs into subs/
  transcribe lecture.mkv --beam-size 5         beam search instead of greedy
"""


class DefaultGroup(click.Group):
    """A group that runs ``run`` when the first argument is not a subcommand."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["run", *args]
        elif not args:
            args = ["run"]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultGroup, help="Speech to subtitles with MLX Whisper.\n" + EXAMPLES,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="transcriber")
def main():
    pass


def parse_formats(ctx, param, value: str) -> tuple[str, ...]:
    formats = tuple(f.strip().lower() for f in value.split(",") if f.strip())
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise click.BadParameter(f"unknown format {', '.join(unknown) or value!r}; choose from {', '.join(FORMATS)}")
    return formats


def build_options(language, task, beam_size, word_timestamps=True) -> TranscribeOptions:
    """The one place CLI flags become library options (ValueError on bad combinations)."""
    decoding = DecodingOptions(task=task, language=language, beam_size=beam_size)
    return TranscribeOptions(decoding=decoding, word_timestamps=word_timestamps)


@main.command("run", help="Transcribe media files and folders (the default command).\n" + EXAMPLES)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-f", "--format", "formats", default="srt", show_default=True, callback=parse_formats,
              help=f"Comma-separated output formats: {', '.join(FORMATS)}.")
@click.option("-o", "--output-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write outputs here instead of next to each input.")
@click.option("-m", "--model", default=transcriber.DEFAULT_MODEL, show_default=True,
              help="Model name (tiny.en, base) or a model folder.")
@click.option("-l", "--language", default=None, help="Spoken language code (default: detect; 'en' for .en models).")
@click.option("--task", type=click.Choice(["transcribe", "translate"]), default="transcribe", show_default=True)
@click.option("--beam-size", type=click.IntRange(min=1), default=None, help="Beam search width (default: greedy).")
@click.option("--mode", type=click.Choice(["oneshot"]), default="oneshot", show_default=True,
              help="oneshot: 30 s windows with timestamp rules.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
def run(paths, formats, output_dir, model, language, task, beam_size, mode, quiet):
    try:
        options = build_options(language, task, beam_size)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    files, missing = discover(paths)
    failures = [(p, "no such file or folder") for p in missing]
    for path, reason in failures:
        click.echo(f"error: {path}: {reason}", err=True)
    if not files:
        if not failures:
            click.echo("error: no media files found", err=True)
        sys.exit(1)
    if not quiet and sys.platform.startswith("linux") and not blas.loaded_path:
        click.echo(f"note: {blas.describe()}", err=True)
    try:
        whisper = transcriber.load_model(model)
        runner = transcriber.Transcriber(whisper, options)
    except (TranscriberError, ValueError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    cue_options = CueOptions()
    done = 0
    for source, root in files:
        try:
            stem = output_stem(source, root, output_dir)
            with FileProgress(source, disable=quiet) as progress:
                transcript = runner.transcribe(source, on_progress=progress.update)
            written = write_outputs(transcript, stem, formats, cue_options)
            done += 1
            if not quiet:
                click.echo(f"done: {source} -> {', '.join(str(p) for p in written)}", err=True)
        except TranscriberError as e:
            failures.append((source, str(e)))
            click.echo(f"error: {e}", err=True)
        except Exception as e:  # a bug must not stop the batch; TRANSCRIBER_DEBUG=1 shows it
            if os.environ.get("TRANSCRIBER_DEBUG"):
                raise
            failures.append((source, f"{type(e).__name__}: {e}"))
            click.echo(f"error: {source}: unexpected {type(e).__name__}: {e}", err=True)
    if failures:
        click.echo(f"{done} done, {len(failures)} failed", err=True)
        sys.exit(1)
