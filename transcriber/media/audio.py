"""Media -> 16 kHz mono float32 PCM, through ffmpeg, as a stream of chunks.

Any file ffmpeg can read (audio or video) is decoded by one ffmpeg process whose stdout is read
chunk by chunk, so a long file never sits in memory whole. Every chunk carries its sample offset
in the source file, which is how the rest of the library keeps time in seconds of the source.
A read from an offset gives the very samples a read from the start gives there: a resumed job
sees what its first run saw (see ``_EXACT_CODECS`` for when seeking is exact, else the file is
decoded from its start up to the offset).

Failure rules (all raise ``AudioError`` with one line naming the file and ffmpeg's own cause):

- missing, empty, unreadable or non-media file, or no audio stream: found by ``probe`` before
  any chunk is given (an ffmpeg started beside the probe is stopped);
- ffmpeg exits non-zero while decoding;
- a *truncated* file. ffmpeg keeps going on a cut-off file (exit status 0), and does not always
  say so (an MP3 cut at a frame boundary prints nothing), so the rule compares the length it
  decoded with the duration the file's header promised (``probe``):

  * decoded audio ends more than ``max(1 s, 1 %)`` before the promised end: the file is short;
  * audio-only file + short: truncated, an error;
  * file with a video stream + short: an error only if ffmpeg also reported a decoding/demuxing
    error, because a container's duration is that of its longest stream and an audio track that
    simply ends before the video is legitimate;
  * duration unknown (``N/A``) or merely *estimated* from the bitrate (raw MP3 without a Xing
    header, WAV, ...): no length check; such a file cut short is indistinguishable from a
    shorter one and decodes as that;
  * errors reported but no shortfall (a damaged frame ffmpeg concealed): not an error, the
    audio is there; the stream's ``warnings`` say so (how many error messages, and the first).

  A shortfall under the tolerance (encoder padding, a slightly optimistic header) is accepted.
"""

from __future__ import annotations

import functools
import logging
import os
import select
import stat
import subprocess
import threading
import weakref
from typing import Iterator, Union

import ffmpeg
import numpy as np

from transcriber.media import ffmpegtool
from transcriber.deadline.bounded import ReadTimeout, bounded, read_timeout, timeout_error
from transcriber.constants import SAMPLE_RATE
from transcriber.errors import AudioError, ToolError
# (the probe's parsers, by their old names here too: tests reach them as audio._parse_ffprobe_json...)
from transcriber.media.mediainfo import (_MediaInfo, _parse_ffprobe_json, _probe_ffmpeg, _probe_ffprobe,  # noqa: F401
                                         _select)

_log = logging.getLogger(__name__)

_SHORT_ABS_S, _SHORT_REL = 1.0, 0.01  # truncation tolerance, see the module docstring
_SKIP_BLOCK = 30 * SAMPLE_RATE  # samples read at a time when decoding up to a resume point



def probe(path) -> float:
    """Duration in seconds of the file (its first audio stream where the tool can tell).

    Returns 0.0 when the file does not state a duration (``N/A``, e.g. some live streams or raw
    ADTS); callers treat 0.0 as "unknown". Without ffprobe the duration is the container's,
    which for a video can exceed the audio track's. Raises ``AudioError`` for a missing, empty,
    unreadable or non-media file and for a file without an audio stream.
    Seconds on the media's timeline: the end of a track that starts late (``start_offset``).
    """
    info = _probe_info(path)
    return info.duration + info.offset if info.duration else 0.0


def start_offset(path, track: Union[int, str, None] = None) -> float:
    """Where sample 0 of ``iter_audio(path, track=track)`` lies on the media's timeline (s): the
    audio stream's start past the container's (an MP4 edit list, MKV's first block), 0.0 for an
    audio file, or where only ffmpeg (no ffprobe) is there to tell."""
    return _select(os.fspath(path), _probe_info(path), track).offset


def _probe_info(path) -> _MediaInfo:
    name = os.fspath(path)
    return _probe_checked(name, _check_file(name))


def _probe_checked(name: str, st: os.stat_result) -> _MediaInfo:
    """The probe of a file ``_check_file`` passed: a regular file's is kept for the process while
    its size and modification time stay (``transcribe()`` asks for the duration after the
    decode's own probe; a distribution's ffprobe takes ~50 ms to start, as long as a short
    file's whole decode). A growing file is probed again: its size moved."""
    if not stat.S_ISREG(st.st_mode):
        return _probe_media(name)
    return _probe_kept(name, (ffmpegtool.ffprobe_binary(), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=64)
def _probe_kept(name: str, identity: tuple) -> _MediaInfo:
    """``_probe_media`` per file name and identity (the prober, the file's device, inode, size
    and modification time); its failures are not kept: they raise."""
    return _probe_media(name)


def _check_file(name: str) -> os.stat_result:
    """AudioError for what ``stat`` alone tells: missing, unreadable, a directory, empty; else
    the file's stat."""
    try:
        st = bounded(os.stat, name, what="its stat() got no answer")
    except ReadTimeout:
        raise
    except OSError as e:
        raise AudioError(ffmpegtool.message(name, e.strerror or str(e))) from e
    if stat.S_ISDIR(st.st_mode):
        raise AudioError(ffmpegtool.message(name, "is a directory"))
    if st.st_size == 0:
        raise AudioError(ffmpegtool.message(name, "file is empty"))
    return st


def _probe_media(name: str) -> _MediaInfo:
    if ffmpegtool.ffprobe_binary():
        return _probe_ffprobe(name)
    return _probe_ffmpeg(name)


def iter_audio(path, chunk_seconds: float = 30.0, start: float = 0.0,
               duration: float | None = None, track: Union[int, str, None] = None) -> "AudioStream":
    """Decode ``path`` to 16 kHz mono float32 and yield it chunk by chunk.

    Yields ``(sample_offset, samples)``: ``samples`` has shape ``(n,)``, float32 in [-1, 1],
    ``n == round(chunk_seconds * SAMPLE_RATE)`` except for a shorter last chunk; the offset
    counts samples of the source file from 0, so ``start=12.5`` first yields offset 200000.
    ``duration`` (seconds) stops decoding early. ``track``: the audio stream, by number (1 = the
    first) or language tag (the first stream tagged so); None: the first. Closing the iterator kills ffmpeg.
    Every sample is the one a decode from the start gives at its offset, whatever ``start`` is
    (a resumed job relies on it): only PCM and FLAC at 16 kHz are seeked into; any other file
    is decoded from its start and the samples before ``start`` are dropped.
    Bad arguments (``ValueError``) and files ``probe`` rejects (``AudioError``) raise at the
    call; decoding failures, truncation included, raise from the iteration, after the chunks
    decoded so far (see the module docstring for the truncation rule). Once the iteration has
    ended, the stream's ``warnings`` tell what ffmpeg reported about audio it decoded in full.
    """
    if not chunk_seconds > 0:
        raise ValueError(f"chunk_seconds must be > 0, got {chunk_seconds!r}")
    if not start >= 0:
        raise ValueError(f"start must be >= 0, got {start!r}")
    if duration is not None and not duration >= 0:
        raise ValueError(f"duration must be >= 0, got {duration!r}")
    name = os.fspath(path)
    st = _check_file(name)
    early = None
    if start == 0 and track is None:
        # From the start of the first track, ffmpeg's command needs nothing the probe finds: it
        # starts now and decodes while the probe runs. A distribution's ffmpeg takes ~0.1 s to
        # start (Debian 12's loads 215 shared libraries), so a short file waited two start-ups.
        early = _start_decoder(_decode_command(name, track=0, seek=0.0, start=0.0, duration=duration))
    try:
        info = _select(name, _probe_checked(name, st), track)
    except BaseException:
        if early is not None:
            _stop(early)
        raise
    return AudioStream(name, info, max(1, round(chunk_seconds * SAMPLE_RATE)), start, duration, early)


class AudioStream:
    """What ``iter_audio`` returns: an iterator of ``(sample_offset, samples)`` chunks.

    ``warnings``: empty while the file is being read; once it has been read to its end, what
    ffmpeg reported about a file it still decoded in full (a damaged frame it concealed), as one
    short line: ``("ffmpeg reported 3 error messages while decoding, the first: invalid
    subframe padding",)``. A file decoded without a complaint leaves it empty.
    """

    def __init__(self, name: str, info: _MediaInfo, chunk_samples: int, start: float,
                 duration: float | None, started: subprocess.Popen | None = None):
        self._warnings: list[str] = []  # (a list, not the stream: the generator holds no cycle to it)
        self._chunks = _decode(name, info, chunk_samples, start, duration, self._warnings, started)
        # An ffmpeg started before the first chunk was asked for is stopped with the stream
        # even if no chunk ever is (the generator's own cleanup runs only once it has begun).
        self._unread = None if started is None else weakref.finalize(self, _stop, started)

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(self._warnings)

    def __iter__(self) -> "AudioStream":
        return self

    def __next__(self) -> tuple[int, np.ndarray]:
        if self._unread is not None:  # from here on the generator's cleanup stops ffmpeg
            self._unread.detach()
            self._unread = None
        return next(self._chunks)

    def close(self) -> None:
        """Stop decoding: ffmpeg is killed and reaped."""
        self._chunks.close()
        if self._unread is not None:
            self._unread()
            self._unread = None


# ffmpeg's -t ends at a frame of the decoder, not at a sample (5.1 ended a Vorbis decode 256
# samples short; 9.0 exactly): ffmpeg is asked for this much more, and the rest is dropped here.
# Less than a pipe's buffer (64 KiB: 1 s of float32 at 16 kHz), so ffmpeg never waits on it.
_DURATION_MARGIN_S = 0.25


def _seek(info: _MediaInfo, start: float) -> float:
    """Where ffmpeg seeks to read from ``start``. A seek into compressed or resampled audio does
    not give the samples a decode from the start gives there (see _EXACT_CODECS), and a resumed
    job must see the very samples the first run saw: such a file is decoded from its start, and
    what precedes ``start`` dropped (``_decode``). So is a track that starts late: ffmpeg's -ss
    counts on the container's timeline, ``start`` from the track's first sample."""
    return start if info.seeks_exactly and not info.offset else 0.0


def _decode_command(name: str, track: int, seek: float, start: float, duration: float | None) -> list[str]:
    """ffmpeg's command line for ``_decode``: audio track ``track`` (ffmpeg's a:N) from ``seek``
    seconds, for ``duration`` seconds after ``start`` if given."""
    source = ffmpeg.input(ffmpegtool.input_path(name), **({"ss": seek} if seek > 0 else {}))
    out_args = {"format": "f32le", "ac": 1, "ar": SAMPLE_RATE}
    if duration is not None:  # a little more than asked: _decode cuts at the exact sample
        out_args["t"] = duration + (start - seek) + _DURATION_MARGIN_S
    # Map the audio stream explicitly (the first unless another was asked for): ffmpeg's
    # default pick is the "best" one. `-v error` keeps stderr to real problems, which the
    # truncation rule relies on.
    node = source[f"a:{track}"].output("pipe:", **out_args).global_args(
        "-nostdin", "-hide_banner", "-v", "error")
    return node.compile(cmd=ffmpegtool.ffmpeg_binary())


def _start_decoder(command: list[str]) -> subprocess.Popen:
    try:
        # Its own session: a terminal's Ctrl-C goes to the job runner, which stops at its next
        # checkpoint; ffmpeg must keep feeding it until then rather than die mid-window.
        # (unbuffered: no bytes hidden in a buffer where _Output's wait cannot see them)
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, bufsize=0,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError as e:
        raise ToolError(f"ffmpeg ({command[0]}) cannot start: {e}") from e


def _stop(proc: subprocess.Popen) -> None:
    """Kill and reap an ffmpeg started for a stream never read, and close its pipes."""
    ffmpegtool.reap(proc)
    proc.stdout.close()
    proc.stderr.close()


def _decode(name: str, info: _MediaInfo, chunk_samples: int, start: float, duration: float | None,
            warnings: list[str], proc: subprocess.Popen | None) -> Iterator[tuple[int, np.ndarray]]:
    # A generator of its own, so that iter_audio checks its arguments and the file eagerly; ffmpeg
    # starts when the first chunk is asked for, unless iter_audio started it (``proc``).
    # Appends the stream's warning to ``warnings``.
    first_offset = round(start * SAMPLE_RATE)
    seek = _seek(info, start)
    skip = round(start * SAMPLE_RATE) - round(seek * SAMPLE_RATE)
    command = _decode_command(name, info.track, seek, start, duration)
    if proc is None:
        proc = _start_decoder(command)
    output, seconds = _Output(proc.stdout, name), read_timeout()
    # stderr is drained by a thread: a chatty ffmpeg blocked on a full stderr pipe would
    # otherwise never write stdout again, and we would wait on it forever.
    stderr = ffmpegtool.Stderr(name)
    drain = threading.Thread(target=stderr.drain, args=(proc.stderr,), daemon=True)
    drain.start()

    finished = False
    decoded = 0
    limit = None if duration is None else round(duration * SAMPLE_RATE)
    try:
        for samples in _chunks(output, skip, chunk_samples, limit):
            yield first_offset + decoded, samples
            decoded += samples.size
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            raise timeout_error(name, "ffmpeg hung after its last audio", seconds) from None
        drain.join(seconds)
        finished = True
    finally:
        if not finished and ffmpegtool.reap(proc):  # closed early or failed: do not leave ffmpeg running or a zombie
            drain.join(timeout=5)  # (an ffmpeg stuck on its input keeps its stderr open: not waited for)
        proc.stdout.close()

    tail = "\n".join(stderr.tail)
    if proc.returncode != 0:
        raise _decode_failed(name, command[0], proc.returncode, tail)
    _check_length(name, info, start, duration, decoded, tail)
    if stderr.count:
        warnings.append(stderr.warning())


def _chunks(output, skip: int, chunk_samples: int, limit: int | None) -> Iterator[np.ndarray]:
    """ffmpeg's samples after the first ``skip``, in chunks, at most ``limit`` of them: what
    ffmpeg gives past the limit (its -t margin) is read to its end and dropped."""
    _skip_samples(output, skip)
    given = 0
    while True:
        want = chunk_samples if limit is None else min(chunk_samples, limit - given)
        if want <= 0:
            _skip_samples(output, round(2 * _DURATION_MARGIN_S * SAMPLE_RATE) + chunk_samples)
            return
        samples = _read_samples(output, want)
        if samples.size:
            yield samples
            given += samples.size
        if samples.size < want:
            return


def _check_length(name: str, info: _MediaInfo, start: float, duration: float | None,
                  decoded: int, stderr: str) -> None:
    """Apply the truncation rule of the module docstring after a clean ffmpeg exit."""
    reason = ffmpegtool.reason(stderr, name)
    expected_end = info.duration
    if duration is not None:
        expected_end = min(expected_end, start + duration)
    decoded_end = start + decoded / SAMPLE_RATE
    tolerance = max(_SHORT_ABS_S, _SHORT_REL * expected_end)
    short = (info.duration > 0 and not info.duration_estimated
             and decoded_end < expected_end - tolerance)
    if short and (not info.has_video or reason):
        cause = f"truncated: decoded {decoded_end:.2f} s of {expected_end:.2f} s"
        raise AudioError(ffmpegtool.message(name, f"{cause} ({reason})" if reason else cause))
    if reason:  # not an error: the caller is told through AudioStream.warnings
        _log.info("%r decoded in full, but ffmpeg reported: %s", name, reason)


def load_audio(path, start: float = 0.0, duration: float | None = None,
               track: Union[int, str, None] = None) -> np.ndarray:
    """The whole file (or ``duration`` seconds from ``start``) as one float32 array ``(n,)``;
    ``track`` as for ``iter_audio``.

    For short files and tests; long files go through ``iter_audio``.
    """
    chunks = [samples for _, samples in iter_audio(path, start=start, duration=duration, track=track)]
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)


def _skip_samples(pipe, n: int) -> None:
    """Read and forget ``n`` samples (fewer at EOF), a block at a time: never all in memory."""
    while n > 0:
        got = _read_samples(pipe, min(n, _SKIP_BLOCK)).size
        if not got:
            return
        n -= got


def _read_samples(pipe, n: int) -> np.ndarray:
    """Read up to ``n`` float32 samples, fewer only at EOF; a fresh, writable array."""
    buf = np.empty(n, dtype=np.float32)
    view = memoryview(buf).cast("B")
    got = 0
    while got < len(view):  # a pipe read returns whatever is there; loop to fill the chunk
        k = pipe.readinto(view[got:])
        if not k:
            break
        got += k
    buf = buf[: got // 4]  # a trailing partial sample cannot happen with f32le; ignore it
    # Decoders of lossy formats overshoot full scale a little; the contract is [-1, 1].
    np.clip(buf, -1.0, 1.0, out=buf)
    return buf


class _Output:
    """ffmpeg's stdout, whose reads wait at most ``read_timeout()`` for a byte: ffmpeg silent that
    long is stuck on its input (a hung network mount), and the file fails (ReadTimeout)."""

    def __init__(self, pipe, name: str):
        self.pipe, self.name, self.seconds = pipe, name, read_timeout()

    def readinto(self, view) -> int:
        if not select.select([self.pipe], [], [], self.seconds)[0]:
            raise timeout_error(self.name, "ffmpeg gave no audio", self.seconds)
        return self.pipe.readinto(view)


def _decode_failed(name: str, program: str, status: int, stderr: str) -> AudioError:
    """The error of an ffmpeg that exited with ``status`` while decoding ``name``."""
    ffmpegtool.check_started(program, status, stderr)
    return AudioError(ffmpegtool.message(name, ffmpegtool.reason(stderr, name) or f"ffmpeg exited with status {status}"))
