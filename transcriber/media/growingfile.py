"""A file followed while it is written (``transcriber.media.follow``'s "file" kind): what it holds, told
from its first bytes, and its bytes handed to ffmpeg as they come.

- ``check_followable``: whether a growing file can be decoded while it is written, and how it
  is fed ("pcm", "wav", "flac", "fine"); a plain MP4 cannot (its index comes after the audio).
- ``Feeder``: a thread copying the file's new bytes into ffmpeg's stdin, ``tail -f`` style,
  until it has not grown for ``idle_seconds`` and no process holds it open for writing
  (``held_for_writing``: Linux's /proc, the processes this user may look at).
- ``WavFeed``: what of a WAV ffmpeg is given (its samples in Matroska blocks, or the WAV with
  its header's stale data size zeroed); a FLAC goes through ``transcriber.media.flacogg`` instead.

Every read of the file is ``bounded`` (made by the reader child): a file on a hung mount fails
with a ``ReadTimeout``, and no thread of ours waits on it.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from typing import Optional, Union

import numpy as np

from transcriber.media import ffmpegtool
from transcriber.deadline.bounded import ReadTimeout, bounded
from transcriber.errors import AudioError
from transcriber.media.flacogg import FlacToOgg
from transcriber.media import FOLLOWABLE
from transcriber.media.pcmmkv import PcmToMatroska

_READ_BYTES = 1 << 16  # read from the file at a time


class Feeder(threading.Thread):
    """Copies a growing file into ffmpeg's stdin as it grows, ``tail -f`` style, and closes
    it once the file has not grown for ``idle_seconds`` (or on ``stop``). ``error``: why the
    file could not be followed, if it could not (a ``ReadTimeout`` as it was raised: a file on a
    hung mount). Its reads are ``bounded`` (made by the reader child): a thread of ours stuck on
    a hung mount would keep the process from exiting."""

    def __init__(self, path: str, pipe, idle_seconds: float, poll_seconds: float,
                 transform: Union["WavFeed", FlacToOgg]):
        super().__init__(name=f"follow-{os.path.basename(path)}", daemon=True)
        self.path, self.pipe = path, pipe
        self.idle_seconds, self.poll_seconds = idle_seconds, poll_seconds
        self.error: Union[str, ReadTimeout, None] = None
        self._stopping = threading.Event()
        self._transform = transform  # what of the file's bytes ffmpeg is given

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        try:
            self._copy()
            self.pipe.write(self._transform.end())  # what it held for more (a FLAC's last frame)
            self.pipe.flush()
        except BrokenPipeError:
            pass  # ffmpeg ended on its own: the container's end (or an error it reports)
        except ReadTimeout as e:
            self.error = e
        except OSError as e:
            self.error = e.strerror or str(e)
        finally:
            try:
                self.pipe.close()
            except OSError:
                pass

    def _copy(self) -> None:
        fed, last_growth = 0, time.monotonic()
        while not self._stopping.is_set():
            # idle from when the file was looked at, not from when the answer came: on a loaded
            # machine a read that found nothing new may be answered after the file grew again
            looked = time.monotonic()
            data, size = bounded(read_at, self.path, fed, _READ_BYTES)
            if data:
                self.pipe.write(self._transform.feed(data))
                self.pipe.flush()
                fed += len(data)
                last_growth = time.monotonic()
                continue
            if size < fed:
                self.error = f"the file shrank while being followed ({size} bytes, {fed} read)"
                return
            if looked - last_growth >= self.idle_seconds and not bounded(held_for_writing, self.path):
                if not fed:
                    self.error = f"nothing was written to it in {self.idle_seconds:g} s"
                return
            self._stopping.wait(self.poll_seconds)


def held_for_writing(path: str) -> bool:
    """A process holds ``path`` open for writing (``/proc/PID/fdinfo``'s flags: write-only or
    read-write), among those /proc shows this user: a recorder still at it, however long it
    stalls. Its idle time alone ended a follow whose writer a busy machine held back longer
    than ``--idle-seconds``, and the transcript lost its last words (57 of the replay's 59).
    False where there is no /proc (macOS: the idle time decides). The descriptors are matched by
    the path /proc gives them (``readlink``), which touches no other file system: a stat of each
    would hang on another process's file on a hung mount."""
    try:
        real = os.path.realpath(path)
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") != real:
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                    flags = next(int(line.split()[1], 8) for line in info if line.startswith("flags:"))
            except (OSError, StopIteration, ValueError, IndexError):
                continue
            if flags & (os.O_WRONLY | os.O_RDWR):
                return True
    return False


def read_at(path: str, offset: int, size: int) -> tuple[bytes, int]:
    """Up to ``size`` bytes of ``path`` from ``offset``, and the file's size now."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size), os.fstat(f.fileno()).st_size


class WavFeed:
    """What of a growing file goes to ffmpeg: its bytes, but for a WAV's header and samples.

    - A WAV of PCM samples (integer of 8, 16, 24 or 32 bits, float of 32 or 64; little-endian
      RIFF) is given to ffmpeg as float samples in Matroska (``transcriber.media.pcmmkv``), the samples
      of each read a block: ffmpeg decodes a block as soon as it is read, where it gives a WAV's
      samples out only in whole packets (ffmpeg 5.x: of 1024 bytes at least). Integer
      samples are converted as ffmpeg converts them (``x / 2**(bits - 1)``, so the 16 kHz mono
      samples out are the same); as a WAV, ffmpeg would read the first 64 KiB of an integer PCM
      WAV before it gave out a sample (it looks for S/PDIF data in it): 2 s of 16 kHz mono.
    - Any other WAV (compressed, more than 2 channels with a speaker layout, big-endian RIFX)
      passes as it is, but for its header's data size: 0, 0xFFFFFFFF or stale while the file is
      written, and through a pipe ffmpeg would stop at a stale one, so ffmpeg is given 0 ("to the
      end of the file").

    Bytes of any other file pass as they are; so do those of a WAV whose header cannot be read
    within ``LOOK`` bytes. ``kind(head)`` tells from a file's start which of the two ffmpeg
    will be given.
    """

    LOOK = 4096  # a header's chunks before "data" fit in this
    # the sample types of integer PCM, by bits (24: three bytes, unpacked by hand)
    INTEGER = {8: np.dtype(np.uint8), 16: np.dtype("<i2"), 24: None, 32: np.dtype("<i4")}
    FLOAT = (32, 64)

    def __init__(self):
        self.head = b""  # the start of the file, until the header is read
        self.passing = False  # the rest passes as it is
        self.mkv: Optional[PcmToMatroska] = None  # the samples go to ffmpeg in Matroska blocks
        self.bits = 0  # of a sample in the file
        self.integer = False  # integer samples, converted to float32
        self.rest = b""  # bytes of a sample of every channel not complete yet

    @classmethod
    def kind(cls, head: bytes) -> str:
        """"pcm" (fed as Matroska), "wav" (fed as a WAV), or "wait" (the header is not all in
        ``head``, the file's first bytes, yet) for a file that starts as a WAV."""
        header = _wav_header(head)
        if header is None:
            return "wait" if len(head) < cls.LOOK else "wav"
        return "pcm" if cls._framed(head, header[2]) else "wav"

    @classmethod
    def _framed(cls, head: bytes, fmt: tuple[int, int, int, int]) -> bool:
        tag, channels, rate, bits = fmt
        pcm = tag == 1 and bits in cls.INTEGER or tag == 3 and bits in cls.FLOAT
        return head[:4] == b"RIFF" and pcm and channels > 0 and rate > 0

    def feed(self, data: bytes) -> bytes:
        """The bytes to give ffmpeg for ``data``, the file's next bytes (b"": not yet)."""
        if self.passing:
            return data
        if self.mkv is not None:
            return self._samples(data)
        self.head += data
        if len(self.head) < 12:
            return b""  # too short to tell yet
        if self.head[:4] not in (b"RIFF", b"RIFX") or self.head[8:12] != b"WAVE":
            return self._pass(self.head)
        header = _wav_header(self.head)
        if header is None:
            return self._pass(self.head) if len(self.head) >= self.LOOK else b""
        start, size_field, fmt = header
        head, samples = self.head[:start], self.head[start:]
        if self._framed(head, fmt):
            tag, channels, rate, self.bits = fmt
            self.integer, self.head = tag == 1, b""
            self.mkv = PcmToMatroska(rate, channels, 32 if self.integer else self.bits)
            return self.mkv.header() + self._samples(samples)
        return self._pass(head[:size_field] + struct.pack("<I", 0) + head[size_field + 4:] + samples)

    def end(self) -> bytes:
        """At the end of the file: nothing more (a sample not complete is dropped)."""
        return b""

    def _pass(self, data: bytes) -> bytes:
        self.passing, self.head = True, b""
        return data

    def _samples(self, data: bytes) -> bytes:
        """A Matroska block of the whole samples (of every channel) in ``data``, after those held."""
        data = self.rest + data
        width = self.bits // 8
        frame = width * self.mkv.channels
        whole = len(data) // frame * frame
        self.rest = data[whole:]
        if not self.integer:
            return self.mkv.feed(data[:whole])
        raw = np.frombuffer(data, dtype=np.uint8, count=whole)
        if self.bits == 24:  # little-endian 3-byte samples, sign-extended through the top byte
            x = raw.reshape(-1, 3).astype(np.int32)
            ints = (x[:, 0] | x[:, 1] << 8 | x[:, 2] << 16) << 8 >> 8
        else:
            ints = raw.view(self.INTEGER[self.bits])
        if self.bits == 8:  # unsigned, 128 is 0
            ints = ints.astype(np.int16) - 128
        scale = np.float32(2.0 ** -(self.bits - 1))
        return self.mkv.feed((ints.astype(np.float32) * scale).astype("<f4").tobytes())


def _wav_header(head: bytes) -> Optional[tuple[int, int, tuple[int, int, int, int]]]:
    """``(start of the samples, offset of the data size, (format tag, channels, rate, bits))``
    of a WAV header, None if its "fmt " and "data" chunks are not both within ``head``. An
    extensible header's tag is its format's (1: PCM), when it has 1 channel or 2 as left and
    right (what a plain header says)."""
    pos, fmt = 12, None
    unpack = "<" if head[:4] == b"RIFF" else ">"
    while pos + 8 <= len(head):
        chunk, size = head[pos:pos + 4], struct.unpack(unpack + "I", head[pos + 4:pos + 8])[0]
        if chunk == b"fmt " and size >= 16 and pos + 8 + size <= len(head):
            tag, channels, rate, _, _, bits = struct.unpack(unpack + "HHIIHH", head[pos + 8:pos + 24])
            if tag == 0xFFFE and size >= 40:  # WAVE_FORMAT_EXTENSIBLE: the format is its GUID's start
                mask, tag = struct.unpack(unpack + "IH", head[pos + 28:pos + 34])
                if channels > 2 or channels == 2 and mask not in (0, 3):
                    tag = 0xFFFE  # a speaker layout a plain header cannot say: left as it is
            fmt = (tag, channels, rate, bits)
        if chunk == b"data":
            return (pos + 8, pos + 4, fmt) if fmt is not None else None
        pos += 8 + size + (size & 1)
    return None


def check_followable(path: str, idle_seconds: float, poll_seconds: float) -> str:
    """AudioError for a file that does not exist, is not a file, or cannot be decoded while it
    is written (a plain MP4: its index comes after the audio); else its ``_mp4_layout`` ("wait":
    too little written yet to tell, after ``idle_seconds``)."""
    deadline = time.monotonic() + idle_seconds
    try:
        while True:
            layout = bounded(_layout, path)
            if layout != "wait" or time.monotonic() >= deadline:
                break
            time.sleep(poll_seconds)
    except ReadTimeout:
        raise
    except OSError as e:
        raise AudioError(ffmpegtool.message(path, e.strerror or str(e))) from e
    if layout in ("no such file", "not a file"):
        raise AudioError(ffmpegtool.message(path, layout))
    if layout == "plain":
        raise AudioError(ffmpegtool.message(path, "a plain MP4 (ISO/QuickTime) file cannot be followed while it is written: "
                                        "its index (the moov atom) comes after the audio, written when the "
                                        f"recording stops; record one of {FOLLOWABLE} to follow it, or "
                                        "transcribe the file once it is finished"))
    return layout


def _layout(path: str) -> str:
    """``_mp4_layout``'s answer for a file; "no such file" or "not a file" for anything else."""
    if not os.path.isfile(path):
        return "not a file" if os.path.exists(path) else "no such file"
    return _mp4_layout(path)


def _mp4_layout(path: str) -> str:
    """"plain" for an MP4 whose audio (mdat) comes before its index, "pcm" for a WAV of PCM
    samples and "wav" for another WAV (``WavFeed.kind``), "flac" for a FLAC, "fine" for a
    fragmented (or fast-start) MP4 or any other container, "wait" when too little is written to
    tell."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        first = f.read(12)
        if len(first) < 12:
            return "wait"
        if first[:4] in (b"RIFF", b"RIFX") and first[8:12] == b"WAVE":
            return WavFeed.kind(first + f.read(WavFeed.LOOK - 12))
        if first[:4] == b"fLaC":
            return "flac"
        if first[4:8] != b"ftyp":
            return "fine"
        pos = 0
        while pos + 8 <= size:
            f.seek(pos)
            box_size, box = struct.unpack(">I4s", f.read(8))
            if box in (b"moov", b"moof"):
                return "fine"
            if box == b"mdat":
                return "plain"
            if box_size == 1:  # a 64-bit size follows
                extended = f.read(8)
                if len(extended) < 8:
                    return "wait"
                box_size = struct.unpack(">Q", extended)[0]
            if box_size < 8:
                return "plain"  # size 0: runs to the end of the file, so nothing after it yet
            pos += box_size
        return "wait"
