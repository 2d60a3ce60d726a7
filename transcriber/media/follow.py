"""Following a source as it is made: a growing file, standard input, or any ffmpeg input.

    source = LiveSource("meeting.wav", FollowOptions(idle_seconds=10))
    for offset, samples in source.chunks(chunk_seconds=1.0):   # as the audio is written
        ...

One ffmpeg process decodes the source to 16 kHz mono float32, read from its stdout in chunks of
exactly ``chunk_seconds`` (fewer only at the end), as ``transcriber.media.audio.iter_audio`` reads a
finished file: the audio is consumed by its position, never by when it arrived, so the
streaming engine gives the words of a replay of the finished file.

- A growing file is read the way ``tail -f`` reads it, by a thread that feeds the new bytes
  to ffmpeg's stdin; the file has ended when it has not grown for ``idle_seconds`` (then ffmpeg's
  stdin is closed and it decodes the rest), or when ffmpeg ends on its own (the container said
  so). A WAV of PCM samples is handed to ffmpeg as float32 samples in Matroska, each write a
  block (``transcriber.media.growingfile.WavFeed``): its header's data size is 0, stale or 0xFFFFFFFF while it is written
  (through a pipe ffmpeg stops at a stale size), ffmpeg holds the first 64 KiB of an integer PCM
  WAV back, and it gives a WAV's samples out only in whole packets.
  A plain MP4 keeps its index (moov) after the audio, written when the recording stops: it is
  refused at once, naming the container (fragmented MP4 can be followed).
- ``-``: standard input, until EOF.
- anything else ffmpeg opens (a URL; a capture device with ``input_format``, such as
  ``alsa``, ``pulse`` or ``lavfi``): ended by ffmpeg, or by ``idle_seconds`` without audio; one
  that yields no audio within ``idle_seconds`` of its start is an ``AudioError``.

``end()`` (Ctrl-C) ends the source where it is: what ffmpeg was given is decoded, then the
iteration ends as at the end of the file. A live source is read once.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import re
import select
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import numpy as np

from transcriber.media import audio as audio_io
from transcriber.media import ffmpegtool
from transcriber.deadline.bounded import ReadTimeout, bounded
from transcriber.constants import SAMPLE_RATE
from transcriber.errors import AudioError
from transcriber.media.flacogg import FlacToOgg
from transcriber.media.growingfile import Feeder, WavFeed, check_followable


STDIN = "-"
# The audio that names a followed source (``LiveSource.key``). Nothing is decoded before it is
# read, so it is no longer than the streaming session's first pass (2 s).
KEY_SECONDS = 2.0
# bytes of a packet of a WAV ffmpeg reads as a WAV (one the feeder cannot hand it as Matroska:
# compressed, big-endian, more than 2 channels with a speaker layout; see ``_command``), where
# its ffmpeg accepts so few (``wav_packet``). ffmpeg's CPU for 600 s of 16 kHz mono float32: 5.3 s
# at 128 bytes (0.9% of a core in real time), 3.0 s at 256
WAV_PACKET = 128


@dataclass(frozen=True)
class FollowOptions:
    """How a live source is read."""

    idle_seconds: float = 10.0  # a file that has not grown this long (an input silent this long) has ended
    poll_seconds: float = 0.1  # how often a growing file is looked at
    input_format: Optional[str] = None  # ffmpeg's -f for the input (a capture device: alsa, pulse, lavfi...)

    def __post_init__(self):
        if not self.idle_seconds > 0:
            raise ValueError(f"idle_seconds must be > 0, got {self.idle_seconds!r}")
        if not 0 < self.poll_seconds <= self.idle_seconds:
            raise ValueError(f"poll_seconds must be in (0, idle_seconds], got {self.poll_seconds!r}")


def kind_of(source: str, input_format: Optional[str] = None) -> str:
    """``"stdin"``, ``"file"`` (a path, followed as it grows) or ``"ffmpeg"`` (a URL or a
    device, opened by ffmpeg itself)."""
    if source == STDIN:
        return "stdin"
    if input_format or "://" in source or (":" in source and not bounded(os.path.exists, source)):
        return "ffmpeg"
    return "file"


class LiveSource:
    """A source followed as it is made (see the module docstring)."""

    def __init__(self, source: str, options: FollowOptions = FollowOptions()):
        self.source, self.options = source, options
        self.kind = kind_of(source, options.input_format)
        self.name = "standard input" if self.kind == "stdin" else source
        self._proc: Optional[subprocess.Popen] = None
        self._feeder: Optional[Feeder] = None
        self._pcm: Optional[_Pcm] = None
        self._head = np.zeros(0, dtype=np.float32)  # read ahead (key, language), served first
        self._served = 0  # samples handed out or dropped so far
        self._layout: Optional[str] = None  # a file's: "pcm", "wav", "flac" (fed as made, see _command)
        self.warnings: tuple[str, ...] = ()
        # called (in the reading thread) every 0.1 s while the source has no new audio: a
        # follow job writes its outputs then when they are due, not only after a step
        self.on_wait: Callable[[], None] = lambda: None

    # -- setup -------------------------------------------------------------------------------------

    def open(self) -> "LiveSource":
        """Start ffmpeg (and the feeder of a growing file). AudioError: a file that is missing
        or cannot be followed (plain MP4), ffmpeg that cannot run."""
        if self._proc is not None:
            return self
        self._layout = check_followable(self.source, self.options.idle_seconds, self.options.poll_seconds) if self.kind == "file" else None
        stdin = {"file": subprocess.PIPE, "stdin": None, "ffmpeg": subprocess.DEVNULL}[self.kind]
        try:
            # its own session: Ctrl-C is ours to handle (end the source), not ffmpeg's to die of
            self._proc = subprocess.Popen(self._command(), stdin=stdin, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            raise AudioError(ffmpegtool.message(self.name, f"cannot run ffmpeg: {e}")) from e
        self._stderr = ffmpegtool.Stderr(self.name)
        self._drain = threading.Thread(target=self._stderr.drain, args=(self._proc.stderr,), daemon=True)
        self._drain.start()
        if self.kind == "file":
            self._feeder = Feeder(self.source, self._proc.stdin, self.options.idle_seconds, self.options.poll_seconds,
                                  FlacToOgg() if self._layout == "flac" else WavFeed())
            self._feeder.start()
        silence_limit = self.options.idle_seconds if self.kind == "ffmpeg" else None
        self._pcm = _Pcm(self._proc.stdout, silence_limit, lambda: self.on_wait())
        return self

    def _command(self) -> list[str]:
        binary = ffmpegtool.ffmpeg_binary()
        if self.kind == "ffmpeg":
            fmt = ["-f", self.options.input_format] if self.options.input_format else []
            source = [*fmt, "-i", self.source]
        else:
            # A PCM WAV is fed as Matroska (``WavFeed``): each write is a block, a packet that
            # ffmpeg decodes as soon as it is read. Any other WAV is read as a WAV, in small
            # packets: the demuxer waits to fill one (4 KiB by default), so that the end of each
            # write would wait for the next one, and with it the chunk that ends there (1024-byte
            # packets held back the last 256 bytes of each 1 s write of 16 kHz mono: 1 s late).
            # A FLAC is fed as Ogg FLAC (transcriber.media.flacogg): ffmpeg's FLAC parser holds 10 frames.
            packet = wav_packet(binary) if self._layout == "wav" else None
            fmt = {"wav": ["-f", "wav", *(["-max_size", str(packet)] if packet else [])],
                   "pcm": ["-f", "matroska"], "flac": ["-f", "ogg"]}.get(self._layout, [])
            source = [*fmt, "-i", "pipe:0"]
        # a small probe: the first samples come out as soon as the container says what it holds,
        # not after the 5 s of audio ffmpeg analyses by default
        return [binary, "-nostdin", "-hide_banner", "-v", "error", "-probesize", "32768",
                "-analyzeduration", "0", *source, "-map", "0:a:0", "-f", "f32le", "-ac", "1",
                "-ar", str(SAMPLE_RATE), "-flush_packets", "1", "pipe:1"]

    # -- reading -----------------------------------------------------------------------------------

    def key(self) -> str:
        """A name of this recording: a hash of its first ``KEY_SECONDS`` of audio (less if it
        is shorter), read ahead and kept for the chunks. The same file followed again (after a
        kill) has the same key; another recording at the same path has another."""
        head = self._read_ahead(round(KEY_SECONDS * SAMPLE_RATE))
        if not head.size:
            try:
                self._finish()
                raise AudioError(ffmpegtool.message(self.name, "no audio"))
            finally:
                self.close()
        return hashlib.sha256(head.tobytes()).hexdigest()[:16]

    def head(self, seconds: float) -> np.ndarray:
        """The first ``seconds`` (language detection), kept for the chunks."""
        return self._read_ahead(round(seconds * SAMPLE_RATE)).copy()

    def _read_ahead(self, n: int) -> np.ndarray:
        self.open()
        if self._head.size < n:
            more = self._pcm.read(n - self._head.size)
            self._head = np.concatenate([self._head, more])
        return self._head[:n]

    def chunks(self, chunk_seconds: float, start: float = 0.0) -> "LiveStream":
        """``(sample_offset, samples)`` chunks of ``round(chunk_seconds * 16000)`` samples (a
        shorter last one) from ``start`` (seconds of the source): the samples before it are
        decoded and dropped, so a resumed follow sees what the first one saw."""
        if not chunk_seconds > 0:
            raise ValueError(f"chunk_seconds must be > 0, got {chunk_seconds!r}")
        return LiveStream(self, self._chunks(max(1, round(chunk_seconds * SAMPLE_RATE)), round(start * SAMPLE_RATE)))

    def _chunks(self, size: int, first: int) -> Iterator[tuple[int, np.ndarray]]:
        self.open()
        try:
            self._drop(first)
            while True:
                samples = self._take(size)
                if samples.size:
                    yield self._served - samples.size, samples
                if samples.size < size:
                    break
            self._finish()
        finally:
            self.close()

    def _take(self, n: int) -> np.ndarray:
        """Up to ``n`` samples (fewer only at the end): the read-ahead first, then the pipe."""
        head, self._head = self._head[:n], self._head[n:]
        rest = self._pcm.read(n - head.size) if head.size < n else head[:0]
        out = np.concatenate([head, rest]) if head.size else rest
        self._served += out.size
        return out

    def _drop(self, n: int) -> None:
        while self._served < n:
            if not self._take(min(n - self._served, 30 * SAMPLE_RATE)).size:
                return

    @property
    def position(self) -> float:
        """Seconds of the source handed out so far."""
        return self._served / SAMPLE_RATE

    def check_track(self, track) -> None:
        """A live source is read as one stream of its first audio track (the CLI refuses
        ``--audio-track`` with ``follow``; this is the library's own guard)."""
        if track is not None:
            raise AudioError(f"{self.name}: a followed source is read from its first audio track; "
                             f"audio track {track} cannot be chosen")

    def start_offset(self) -> float:
        """Where the audio's first sample lies on the media's timeline (s), as for a finished file
        (``transcriber.engines.engine.OnTimeline`` asks once the first audio is out, so the container's
        head is written): a growing file's container, as ffprobe reads it now; 0.0 for a WAV or
        FLAC (no timeline), standard input or another ffmpeg input (none to ask), or a file the
        probe cannot read yet."""
        if self.kind != "file" or self._layout in ("pcm", "wav", "flac"):
            return 0.0
        try:
            return bounded(audio_io.start_offset, self.source, what="its probe got no answer")
        except (AudioError, ReadTimeout):
            return 0.0

    def _finish(self) -> None:
        """The audio has ended: ffmpeg's status and messages decide whether it ended well."""
        if self._pcm.timed_out:
            self._proc.kill()  # a stalled input: what it gave is the stream
        self._proc.wait()
        self._drain.join(timeout=5)
        self._raise_if_failed()
        if self._stderr.count:
            self.warnings = (self._stderr.warning(),)

    def _raise_if_failed(self) -> None:
        if self._feeder is not None and isinstance(self._feeder.error, ReadTimeout):
            raise self._feeder.error
        if self._feeder is not None and self._feeder.error:
            raise AudioError(ffmpegtool.message(self.name, self._feeder.error))
        if self._pcm is not None and self._pcm.timed_out and not self._pcm.got:
            raise AudioError(ffmpegtool.message(self.name, f"no audio after {self.options.idle_seconds:g} s"))
        code = self._proc.poll()
        ended_by_us = self._ended or (self._pcm is not None and self._pcm.timed_out)
        if code not in (None, 0) and not ended_by_us:
            reason = _once(ffmpegtool.reason("\n".join(self._stderr.tail), self.name))
            raise AudioError(ffmpegtool.message(self.name, reason or f"ffmpeg exited with status {code}"))

    _ended = False

    def end(self) -> None:
        """End the source now (Ctrl-C): ffmpeg decodes what it was given, then the chunks end."""
        self._ended = True
        if self._feeder is not None:
            self._feeder.stop()
        elif self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()  # ffmpeg flushes what it decoded on SIGTERM

    def close(self) -> None:
        """Stop reading: ffmpeg and the feeder are stopped and reaped."""
        if self._feeder is not None:
            self._feeder.stop()
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            self._proc.stdout.close()
        if self._feeder is not None:
            self._feeder.join(timeout=5)


def _once(reason: str) -> str:
    """ffmpeg's two last lines, without one that only repeats the other ("Connection to
    tcp://host:9 failed: Connection refused; Connection refused")."""
    parts = reason.split("; ")
    def repeated(i: int) -> bool:
        return any(j != i and parts[i] in q and (len(q) > len(parts[i]) or j < i) for j, q in enumerate(parts))

    return "; ".join(p for i, p in enumerate(parts) if not repeated(i))


@functools.lru_cache(maxsize=None)
def wav_packet(binary: str) -> Optional[int]:
    """The ``-max_size`` to give ``binary``'s WAV demuxer: ``WAV_PACKET``, or the least it accepts
    where that is more (ffmpeg 5.x refuses below 1024); None if it has no such option (or its
    help cannot be read). Asked once per binary: ``ffmpeg -h demuxer=wav``."""
    try:
        r = subprocess.run([binary, "-hide_banner", "-h", "demuxer=wav"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, errors="replace", timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"^\s*-max_size\s.*\(from (-?[\d.e+]+) to", r.stdout, re.MULTILINE)
    return max(WAV_PACKET, math.ceil(float(found.group(1)))) if found else None


class LiveStream:
    """What ``LiveSource.iter_audio`` returns: an iterator of chunks, like ``AudioStream``."""

    def __init__(self, source: LiveSource, chunks: Iterator[tuple[int, np.ndarray]]):
        self._source, self._chunks = source, chunks

    def __iter__(self) -> "LiveStream":
        return self

    def __next__(self) -> tuple[int, np.ndarray]:
        return next(self._chunks)

    @property
    def warnings(self) -> tuple[str, ...]:
        return self._source.warnings

    def close(self) -> None:
        self._chunks.close()
        self._source.close()


class _Pcm:
    """ffmpeg's stdout as float32 samples. ``silence_limit``: seconds without a byte after
    which the input is taken to have ended (``timed_out``); None: wait as long as it takes.
    ``on_wait()`` is called every ``WAIT_POLL`` seconds while no byte comes."""

    WAIT_POLL = 0.1

    def __init__(self, pipe, silence_limit: Optional[float], on_wait: Callable[[], None]):
        self.fd, self.silence_limit, self.on_wait = pipe.fileno(), silence_limit, on_wait
        self.pending = b""  # bytes of a sample not complete yet
        self.got = 0  # bytes read so far
        self.timed_out = self.eof = False

    def read(self, n: int) -> np.ndarray:
        """``n`` samples, fewer only at the end of the stream; in [-1, 1]."""
        buf = bytearray(self.pending)
        want = 4 * n
        while len(buf) < want and not self.eof:
            if not self._wait():
                self.timed_out = self.eof = True
                break
            data = os.read(self.fd, want - len(buf))
            self.eof = not data
            buf += data
            self.got += len(data)
        whole = len(buf) // 4 * 4
        self.pending = bytes(buf[whole:])
        samples = np.frombuffer(bytes(buf[:whole]), dtype=np.float32).copy()
        np.clip(samples, -1.0, 1.0, out=samples)  # lossy decoders overshoot a little
        return samples

    def _wait(self) -> bool:
        """Until there are bytes to read (True), or ``silence_limit`` has passed without (False)."""
        deadline = None if self.silence_limit is None else time.monotonic() + self.silence_limit
        while True:
            wait = self.WAIT_POLL if deadline is None else min(self.WAIT_POLL, deadline - time.monotonic())
            if wait <= 0:
                return False
            if select.select([self.fd], [], [], wait)[0]:
                return True
            self.on_wait()
