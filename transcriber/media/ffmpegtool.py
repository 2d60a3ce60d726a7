"""The ffmpeg tool, as the audio readers use it: which binary (``ffmpeg_binary``,
``ffprobe_binary``), running a probe with a deadline (``run_probe``), stopping one for good
(``reap``), reading its stderr while it runs (``Stderr``), and turning what it printed into the
one-line cause of a failure (``reason``, ``message``).

Two readers start ffmpeg: ``transcriber.media.audio`` (a finished file, decoded from an offset) and
``transcriber.media.follow`` (a source followed as it is made). Both take the binary, the stderr
reader and the error messages from here, so a file that fails says so in the same words
whichever read it.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import re
import shutil
import subprocess
import threading

from transcriber.deadline.bounded import read_timeout, timeout_error
from transcriber.errors import ToolError

_REAP_SECONDS = 0.2  # a killed ffmpeg exits in milliseconds; one still there is stuck on its input
_STDERR_KEEP_LINES = 50  # a corrupt file can print an error per frame; keep only the tail
_WARNING_MAX_CHARS = 160  # the first message, as told in a warning


@functools.lru_cache(maxsize=None)
def ffmpeg_binary() -> str:
    """The ``ffmpeg`` on PATH if there is one (the user's choice wins), else imageio-ffmpeg's."""
    found = shutil.which("ffmpeg")
    if found:
        return found
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


@functools.lru_cache(maxsize=None)
def ffprobe_binary() -> str | None:
    """The ``ffprobe`` on PATH, None without one (imageio-ffmpeg has none: ffmpeg probes then)."""
    return shutil.which("ffprobe")


class Stderr:
    """ffmpeg's stderr, read by a thread while it decodes: its last lines (the cause of a
    failure), and how many meaningful messages it printed and the first (a warning)."""

    def __init__(self, name: str):
        self.paths = _paths(name)
        self.tail: collections.deque[str] = collections.deque(maxlen=_STDERR_KEEP_LINES)
        self.count = 0
        self.first = ""

    def warning(self) -> str:
        """A count and the first message, not pages of stderr (a corrupt file can print a
        message per frame)."""
        first = self.first if len(self.first) <= _WARNING_MAX_CHARS else self.first[:_WARNING_MAX_CHARS - 3] + "..."
        plural = "s" if self.count > 1 else ""
        return f"ffmpeg reported {self.count} error message{plural} while decoding, the first: {first}"

    def drain(self, pipe) -> None:
        """Read ``pipe`` (ffmpeg's stderr) to its end, then close it (a thread's target)."""
        for raw in iter(pipe.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip()
            self.tail.append(line)
            cleaned = _clean(line, self.paths)
            if cleaned:
                self.count += 1
                self.first = self.first or cleaned
        pipe.close()


def run_probe(cmd: list[str], name: str) -> subprocess.CompletedProcess:
    """Run a probe of ``name``; a probe hung on its input (a stalled network mount) fails the
    file after ``read_timeout()``, and is killed, without waiting for a process that cannot die
    (``reap``)."""
    seconds = read_timeout()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", start_new_session=True)
    except OSError as e:
        raise ToolError(f"{os.path.basename(cmd[0])} ({cmd[0]}) cannot start: {e}") from e
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        reap(proc)
        raise timeout_error(name, "probing it got no answer", seconds) from None
    except BaseException:
        reap(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def check_started(program: str, status: int, stderr: str) -> None:
    """ToolError when ``program`` exited as a program that never started does (126: not
    executable, 127: the dynamic loader could not load it, a shared library missing), not as
    ffmpeg or ffprobe refusing a file (status 1)."""
    if status in (126, 127):
        last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), f"status {status}")
        raise ToolError(f"{os.path.basename(program)} ({program}) cannot start: {last}")


def reap(proc: subprocess.Popen) -> bool:
    """Kill ``proc`` and reap it; whether it is gone. One stuck in the kernel on a hung mount (no
    signal ends that wait) is reaped by a thread once it can exit, rather than hang us too."""
    with contextlib.suppress(OSError):
        proc.kill()
    try:
        proc.wait(timeout=_REAP_SECONDS)
        return True
    except subprocess.TimeoutExpired:
        threading.Thread(target=proc.wait, daemon=True, name=f"reaper of {proc.pid}").start()
        return False


def input_path(name: str) -> str:
    """``name`` as ffmpeg's input: absolute, so that it cannot be mistaken for a protocol
    ("http:x.mp3", "pipe:...")."""
    return os.path.abspath(name)


# ffmpeg's log prefixes ("[in#0/mp3 @ 0x55...] ", "[aist#0:0/flac @ 0x...] [dec:flac @ 0x...] ")
_PREFIX_RE = re.compile(r"^\[[^\]]*\]\s*")
# Lines that only repeat the cause given on another line, or are no cause at all.
_NOISE = ("Error opening input file", "Error opening input files", "Error opening output file",
          "Error opening output files", "At least one output file must be specified",
          "Conversion failed", "Exiting normally", "Input #", "Output #", "Stream mapping",
          "Press [q]")


def _paths(name: str) -> set[str]:
    return {name, os.path.abspath(name), os.path.basename(name)}


def _clean(line: str, paths: set[str]) -> str:
    """A line of ffmpeg's stderr without log/path prefixes; "" if it tells nothing."""
    line = line.strip()
    while _PREFIX_RE.match(line):
        line = _PREFIX_RE.sub("", line, count=1)
    for p in paths:  # older ffmpeg: "<path>: Invalid data found when processing input"
        if line.startswith(p + ": "):
            line = line[len(p) + 2:]
    for lead in ("Error opening input: ", "Decoding error: ",
                 "Error submitting packet to decoder: "):
        line = line.removeprefix(lead)
    line = line.rstrip(".").strip()
    return "" if line.startswith(_NOISE) else line


def reason(stderr: str, name: str) -> str:
    """The last one or two meaningful lines of ffmpeg's stderr, without log/path prefixes."""
    paths = _paths(name)
    lines: list[str] = []
    for line in stderr.splitlines():
        line = _clean(line, paths)
        if line and line not in lines:
            lines.append(line)
    return "; ".join(lines[-2:])


def message(name: str, cause: str) -> str:
    """The one line of an AudioError: the file and the cause."""
    text = f"cannot read audio from {name!r}: {cause}"
    return " ".join(text.split())  # one line, whatever ffmpeg or the OS put in the cause
