"""What a run shows while it works: tqdm bars and one line per finished job, on stderr.

One bar for the batch (files done of the files to run, audio time processed in its postfix) and
one for each file in flight (seconds of audio): one at a time in this process, one per worker on
Ray. Messages go through ``tqdm.write`` so they never tear a bar. ``quiet`` drops the bars and
the per-job ``done`` lines; errors are always shown.
"""

from __future__ import annotations

import sys
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


class FileBar:
    """One file in flight: its bar (None when quiet) and how much of its audio is counted."""

    def __init__(self, bar: Optional[tqdm], initial: float, line: int):
        self.bar, self.line = bar, line
        self.counted = initial  # seconds of this file already in the batch's audio total


class Reporter:
    """The runner's view of the terminal (see ``Runner``): it calls these methods."""

    def __init__(self, total_files: int = 0, quiet: bool = False):
        self.quiet = quiet
        self.audio_done = 0.0
        self.batch: Optional[tqdm] = None
        self.files: list[FileBar] = []  # in flight, in the order they started
        if not quiet and total_files > 1:
            self.batch = tqdm(total=total_files, desc="files", unit="file", position=0, leave=False,
                              dynamic_ncols=True, file=sys.stderr)
            self._postfix()

    def add_files(self, n: int) -> None:
        """More jobs joined the batch (watch mode)."""
        if self.batch is not None:
            self.batch.total += n
            self.batch.refresh()

    def _postfix(self) -> None:
        if self.batch is not None:
            self.batch.set_postfix_str(f"audio {_duration(self.audio_done)}", refresh=True)

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
        if not self.quiet:
            total = round(total, 1) if total else None
            bar = tqdm(total=total, initial=round(min(initial, total or initial), 1), desc=printable(name)[:40],
                       unit="s", leave=False, dynamic_ncols=True, file=sys.stderr, position=line,
                       bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total_fmt} s [{elapsed}<{remaining}]")
        file = FileBar(bar, initial, line)
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

    def end(self, file: Optional[FileBar], counts_as_file: bool = True) -> None:
        """That job's attempt is over (``file`` None: it ended before it started); the batch bar
        counts it unless it is queued again."""
        if file is not None and file in self.files:
            self.files.remove(file)
            if file.bar is not None:
                file.bar.close()
        if counts_as_file and self.batch is not None:
            self.batch.update(1)

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
