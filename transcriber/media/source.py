"""``AudioSource``: what an engine reads, whatever the audio comes from.

    source = as_source("talk.mkv", track=None)        # a media file's audio track (MediaFile)
    for sample_offset, samples in source.chunks(30.0, start=12.5):
        ...                                            # 16 kHz mono float32, in order
    source.head(30.0)                                  # the first 30 s (language detection)
    source.start_offset()                              # sample 0 on the media's timeline (s)

An engine reads audio only through these three calls: it never runs a decoder on a path
itself. A media file is a ``MediaFile`` (audio.py over ffmpeg); a recording still being
written is a ``LiveSource`` (follow.py), read by position all the same. A stage that changes
what the engines hear (a voice-activity detector that keeps only speech, say) is another
``AudioSource`` wrapped around one of these.

``chunks`` returns an iterator of ``(sample_offset, samples)``: every chunk exactly
``chunk_seconds`` long but the last; the offset counts samples from the source's first,
so ``start=12.5`` first yields offset 200000. Its ``warnings`` (known once it has been read to
its end) are what the decoder reported about audio it still decoded in full, and ``close()``
stops the decoder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, Protocol, Union

import numpy as np

from transcriber.media import audio

Track = Union[int, str, None]


class Chunks(Protocol):
    warnings: tuple[str, ...]

    def __iter__(self) -> Iterator[tuple[int, np.ndarray]]: ...

    def close(self) -> None: ...


class AudioSource(Protocol):
    name: str

    def chunks(self, chunk_seconds: float, start: float = 0.0) -> Chunks: ...

    def head(self, seconds: float) -> np.ndarray: ...

    def start_offset(self) -> float: ...


@dataclass(frozen=True)
class MediaFile:
    """One audio track of a media file ffmpeg can read (``track``: its number among the file's
    audio streams, or its language; None: the default one)."""

    path: Union[str, os.PathLike]
    track: Track = None

    @property
    def name(self) -> str:
        return os.fspath(self.path)

    def chunks(self, chunk_seconds: float, start: float = 0.0) -> "audio.AudioStream":
        return audio.iter_audio(self.path, chunk_seconds=chunk_seconds, start=start, track=self.track)

    def head(self, seconds: float) -> np.ndarray:
        return audio.load_audio(self.path, duration=seconds, track=self.track)

    def start_offset(self) -> float:
        return audio.start_offset(self.path, self.track)


def as_source(source, track: Track = None) -> AudioSource:
    """``source`` as an ``AudioSource``: a path is that file's ``track``; a source is itself
    (one that cannot choose a track says so: ``check_track``)."""
    if not hasattr(source, "chunks"):
        return MediaFile(source, track)
    check = getattr(source, "check_track", None)
    if check is not None:
        check(track)
    return source
