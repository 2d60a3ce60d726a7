"""How a command runs its jobs: the runner it makes (in this process, or Ray's with ``--ray``),
the stop that Ctrl-C and SIGTERM ask for, and the summary and exit status at the end. Used by
transcriber/app/cli/main.py's ``run``, ``retry`` and ``watch``.

Light to import, as transcriber/app/cli/main.py is: the runner, Ray and the progress bars are imported where
they are used.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
from typing import TYPE_CHECKING, Optional

import click

from transcriber.app.cli.flags import RaySettings, RunnerSettings

if TYPE_CHECKING:
    from transcriber.app.run.enqueue import CommandJobs
    from transcriber.app.cli.progress import Reporter
    from transcriber.app.run.local import StopFlag
    from transcriber.app.store.jobstore import JobStore


@contextlib.contextmanager
def runners(store: JobStore, reporter: Reporter, ray: Optional[RaySettings], files: Optional[int],
            settings: RunnerSettings):
    """Yields ``make(stop) -> runner``: the in-process Runner, or with ``ray`` a RayRunner. Ray is
    joined (or started) here, before the caller installs its StopFlag (``ray.init`` sets its own
    SIGTERM handler), and its workers (and a local instance) are stopped on the way out.
    ``files``: how many files the batch has (None: watch mode), at most one worker each."""
    from transcriber.app.run.engines import EngineCache
    from transcriber.app.run.local import Runner

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
    from transcriber.app.run import ray_runner  # imports Ray: only here, with --ray

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
    by the reader process (transcriber/app/run/discover.py), so a hung mount does not keep the command alive.
    Both signals get this handler, as the run's ``StopFlag`` does: a command started where Ctrl-C
    is ignored (a background job of a script) still stops on SIGINT while it lists, as it does later."""
    caught: list[int] = []

    def handle(signum, frame):
        caught.append(signum)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except KeyboardInterrupt:
        click.echo(message, err=True)
        sys.exit(128 + (caught[0] if caught else signal.SIGINT))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_flag(reporter, ray: Optional[RaySettings]) -> StopFlag:
    """The run's StopFlag. In this process a stop acts within STOP_GRACE_SECONDS (the step in
    flight dropped); Ray workers checkpoint on their own, so a Ray run waits for them."""
    from transcriber.app.run.local import STOP_GRACE_SECONDS, StopFlag

    return StopFlag(stop_message([reporter]), grace=None if ray else STOP_GRACE_SECONDS)


def run_jobs(store: JobStore, jobs: CommandJobs, quiet: bool, settings: RunnerSettings,
              ray: Optional[RaySettings] = None) -> None:
    """Run a command's jobs (in this process, or on Ray), print the summary, exit with its status."""
    from transcriber.app.cli.progress import Reporter, printable
    from transcriber.app.cli.report import summary
    from transcriber.app.run.local import RunResult

    result = RunResult()
    if jobs.to_run:
        from transcriber import blas, kernels_note  # its probe, numpy's matmul: only for a run that decodes

        blas.bind_once()  # as loading the model will: the note says what the run will use
        if not quiet and sys.platform.startswith("linux") and not blas.loaded_path:
            click.echo(f"note: {blas.describe()}", err=True)
        kernels = None if quiet else kernels_note()
        if kernels:
            click.echo(kernels, err=True)
        reporter = Reporter(total_files=len(jobs.to_run), quiet=quiet)
        stop = stop_flag(reporter, ray)
        with closing_on_interrupt(reporter, "interrupted: unfinished files stay queued; run again to resume", stop):
            with runners(store, reporter, ray, len(jobs.to_run), settings) as make:
                with stop:
                    make(stop).run(jobs.to_run, result)
    lines, code = summary(jobs, result)
    for line in lines:
        click.echo(printable(line), err=True)
    sys.exit(code)
