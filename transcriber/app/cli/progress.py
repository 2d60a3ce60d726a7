"""What a run shows while it works, on stderr: bars on a terminal, plain lines elsewhere.

On a terminal: one bar for the batch (files done of the files to run; the audio time processed
and the time left in its postfix) and one for each file in flight (seconds of audio): one at a
time in this process, one per worker on Ray. Messages go through ``tqdm.write`` so they never
tear a bar. On a pipe or in a file: no bar, no ``\r`` nor cursor move, only lines: the per-job
``done`` line, and for a long file a line every ``PLAIN_EVERY`` seconds saying how far it is.

The time left counts audio seconds, not files: the audio still to do (the rest of the files in
flight, and for each file not started yet the mean length of those seen) at the rate audio has
been done so far, so one long file does not freeze the estimate. ``quiet`` drops the bars, the
progress lines and the per-job ``done`` lines; errors are always shown.
"""

from __future__ import annotations

import sys
import time
from typing import Optional

import click
from tqdm import tqdm


def printable(text: str) -> str:
    """``text`` with whatever would break a terminal line escaped: control characters (a
    newline in a file name) as ``\\n``, ``\\x1b``..., the undecodable bytes of a name that is
    not UTF-8 as ``\\xe9``. Text without them comes back as it is."""
    if text.isprintable():
        return text
    out = []
    for c in text:
        if c.isprintable():
            out.append(c)
        elif 0xDC80 <= ord(c) <= 0xDCFF:  # a byte os.fsdecode could not decode (surrogateescape)
            out.append(f"\\x{ord(c) - 0xDC00:02x}")
        else:
            out.append(repr(c)[1:-1])
    return "".join(out)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


PLAIN_EVERY = 30.0  # seconds between two progress lines of a file, when not on a terminal


class FileBar:
    """One file in flight: its bar (None when quiet or not on a terminal) and how much of its
    audio is counted."""

    def __init__(self, bar: Optional[tqdm], initial: float, line: int, name: str = "",
                 total: Optional[float] = None):
        self.bar, self.line, self.name, self.total = bar, line, name, total
        self.counted = initial  # seconds of this file already in the batch's audio total
        self.said = time.monotonic()  # when its last plain progress line was written (or it started)


class Reporter:
    """The runner's view of the terminal (see ``Runner``): it calls these methods. ``plain``:
    lines only, no bars (None: when stderr is not a terminal)."""

    def __init__(self, total_files: int = 0, quiet: bool = False, plain: Optional[bool] = None):
        self.quiet = quiet
        self.plain = (not sys.stderr.isatty()) if plain is None else plain
        self.audio_done = 0.0  # seconds of audio decoded in this run
        self.total_files, self.files_done = total_files, 0
        self.lengths: list[float] = []  # the durations of the files started, for the estimate
        self.began = time.monotonic()
        self.batch: Optional[tqdm] = None
        self.files: list[FileBar] = []  # in flight, in the order they started
        if not quiet and not self.plain and total_files > 1:
            self.batch = tqdm(total=total_files, desc="files", unit="file", position=0, leave=False,
                              dynamic_ncols=True, file=sys.stderr,
                              bar_format="{desc}: {n_fmt}/{total_fmt}|{bar}| [{elapsed}{postfix}]")
            self._postfix()

    def add_files(self, n: int) -> None:
        """More jobs joined the batch (watch mode)."""
        self.total_files += n
        if self.batch is not None:
            self.batch.total += n
            self.batch.refresh()

    def seconds_left(self) -> Optional[float]:
        """Wall seconds the batch still needs at the audio rate so far (None: no rate yet)."""
        elapsed = time.monotonic() - self.began
        if self.audio_done <= 0 or elapsed <= 0 or not self.lengths:
            return None
        in_flight = sum(max(0.0, f.total - f.counted) for f in self.files if f.total)
        waiting = max(0, self.total_files - self.files_done - len(self.files))
        audio_left = in_flight + waiting * sum(self.lengths) / len(self.lengths)
        return audio_left * elapsed / self.audio_done

    def _estimate(self) -> str:
        left = self.seconds_left()
        return f"audio {_duration(self.audio_done)}" + ("" if left is None else f", {_duration(left)} left")

    def _postfix(self) -> None:
        if self.batch is not None:
            self.batch.set_postfix_str(self._estimate(), refresh=True)

    def _free_line(self) -> int:
        """The first terminal line under the batch bar that no file's bar holds."""
        taken = {f.line for f in self.files}
        line = 1 if self.batch is not None else 0
        while line in taken:
            line += 1
        return line

    def start(self, name: str, total: Optional[float], initial: float) -> FileBar:
        """A job starts (or resumes at ``initial`` seconds); its handle for ``update``/``end``."""
        bar, line = None, self._free_line()
        if total:
            self.lengths.append(total)
        if not self.quiet and not self.plain:
            shown = round(total, 1) if total else None
            bar = tqdm(total=shown, initial=round(min(initial, shown or initial), 1), desc=printable(name)[:40],
                       unit="s", leave=False, dynamic_ncols=True, file=sys.stderr, position=line,
                       bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total_fmt} s [{elapsed}<{remaining}]")
        file = FileBar(bar, initial, line, name, total)
        self.files.append(file)
        return file

    def update(self, file: FileBar, seconds: float) -> None:
        """That job has done ``seconds`` of audio."""
        if file.bar is not None:
            target = min(seconds, file.bar.total) if file.bar.total else seconds
            file.bar.update(max(0.0, target - file.bar.n))
        if seconds > file.counted:
            self.audio_done += seconds - file.counted
            file.counted = seconds
            self._postfix()
        if self.plain and not self.quiet and time.monotonic() - file.said >= PLAIN_EVERY:
            file.said = time.monotonic()
            of = f" of {_duration(file.total)} ({100 * seconds / file.total:.0f}%)" if file.total else ""
            batch = f"; batch: {self.files_done} of {self.total_files} files" if self.total_files > 1 else ""
            self.write(f"{file.name}: {_duration(seconds)}{of}{batch}, {self._estimate()}")

    def end(self, file: Optional[FileBar], counts_as_file: bool = True) -> None:
        """That job's attempt is over (``file`` None: it ended before it started); the batch
        counts it unless it is queued again."""
        if file is not None and file in self.files:
            self.files.remove(file)
            if file.bar is not None:
                file.bar.close()
        if counts_as_file:
            self.files_done += 1
            if self.batch is not None:
                self.batch.update(1)
                self._postfix()

    def info(self, message: str) -> None:
        if not self.quiet:
            self.write(message)

    def error(self, message: str) -> None:
        self.write(message)

    def write(self, message: str) -> None:
        message = printable(message)  # one line, whatever a file name holds
        if self.batch is not None or any(f.bar is not None for f in self.files):
            tqdm.write(message, file=sys.stderr)
        else:
            click.echo(message, err=True)

    def close(self) -> None:
        for file in list(self.files):
            self.end(file, counts_as_file=False)
        if self.batch is not None:
            self.batch.close()
            self.batch = None
