"""Replaying a media file through a streaming session, and words back into a ``Transcript``."""

from __future__ import annotations

import io
import json
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

from .. import audio as audio_io
from ..mel import SAMPLE_RATE
from ..model.whisper import Whisper
from ..timing import SENTENCE_ENDS
from ..transcribe import tidy
from ..types import Segment, Transcript, Word
from .options import StreamingOptions
from .session import StreamingSession

SEGMENT_PAUSE = 1.0  # seconds of silence between words that start a new segment
SEGMENT_MAX_SECONDS = 30.0


def stream(path, model: Whisper, options: StreamingOptions = StreamingOptions(), *,
           start_state: Optional[dict] = None,
           on_checkpoint: Optional[Callable[[dict], None]] = None,
           checkpoint_seconds: float = 10.0,
           on_progress: Optional[Callable[[float], None]] = None) -> Iterator[Word]:
    """Replay ``path`` chunk by chunk (``options.chunk_seconds``) through a streaming session;
    yields each word as it is committed.

    start_state: a ``session.state()`` saved earlier: the replay resumes at its
    ``audio_offset`` (the words it had committed are not yielded again).
    on_checkpoint(state): called every ``checkpoint_seconds`` of audio, after the words committed
    up to that state were yielded, and once more at the end (a finished state).
    on_progress(seconds): source time replayed so far, after every chunk.
    """
    if start_state is not None:
        session = StreamingSession.restore(model, options, start_state)
    else:
        session = StreamingSession(model, options)
    yield from replay(session, path, on_checkpoint=on_checkpoint, checkpoint_seconds=checkpoint_seconds,
                      on_progress=on_progress)


def replay(session: StreamingSession, path, *, on_checkpoint: Optional[Callable[[dict], None]] = None,
           checkpoint_seconds: float = 10.0,
           on_progress: Optional[Callable[[float], None]] = None) -> Iterator[Word]:
    """``stream`` with a session of the caller's (new, or restored): the file is read from the
    session's ``audio_offset`` on."""
    if session.finished:
        return
    start = session.audio_offset / SAMPLE_RATE
    last_checkpoint = session.time
    for _, samples in audio_io.iter_audio(path, chunk_seconds=session.options.chunk_seconds, start=start):
        session.insert_audio(samples)
        yield from session.process()
        if on_progress:
            on_progress(session.time)
        if on_checkpoint and session.time - last_checkpoint >= checkpoint_seconds:
            on_checkpoint(session.state())
            last_checkpoint = session.time
    yield from session.finish()
    if on_checkpoint:
        on_checkpoint(session.state())


def words_to_transcript(words: Iterable[Word], *, language: str = "en", duration: float = 0.0,
                        model: str = "", pause: float = SEGMENT_PAUSE,
                        max_seconds: float = SEGMENT_MAX_SECONDS) -> Transcript:
    """Group words into segments (a new one after a sentence end, a pause of ``pause`` seconds,
    or ``max_seconds``), so the one-shot writers and cue layout apply."""
    words = list(words)
    if duration <= 0:
        duration = max([0.0] + [w.end for w in words])
    segments: list[Segment] = []
    current: list[Word] = []

    def close():
        if current:
            segments.append(Segment(current[0].start, current[-1].end, "".join(w.text for w in current),
                                    tuple(current)))
            current.clear()

    for w in words:
        if current and (w.start - current[-1].end >= pause or w.end - current[0].start > max_seconds):
            close()
        current.append(w)
        if w.text.rstrip().endswith(tuple(SENTENCE_ENDS)):
            close()
    close()
    return Transcript(language=language, duration=duration, segments=tuple(tidy(segments, duration)),
                      model=model)


def transcribe_stream(path, model: Whisper, options: StreamingOptions = StreamingOptions(),
                      **kwargs) -> Transcript:
    """Stream a whole file and return its ``Transcript`` (segments from ``words_to_transcript``)."""
    session = StreamingSession(model, options)
    words = list(replay(session, path, **kwargs))
    return words_to_transcript(words, language=session.language or "", duration=audio_io.probe(path),
                               model=model.name)


def pack_state(state: dict) -> bytes:
    """A session state as bytes (npz: its arrays, plus JSON for the rest; no pickle)."""
    arrays: dict[str, np.ndarray] = {}

    def strip(value, path):
        if isinstance(value, np.ndarray):
            arrays[path] = value
            return {"__array__": path}
        if isinstance(value, dict):
            return {k: strip(v, f"{path}.{k}") for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [strip(v, f"{path}.{i}") for i, v in enumerate(value)]
        return value

    doc = strip(state, "state")
    out = io.BytesIO()
    np.savez(out, __json__=np.frombuffer(json.dumps(doc).encode("utf-8"), dtype=np.uint8), **arrays)
    return out.getvalue()


def unpack_state(data: bytes) -> dict:
    """Inverse of ``pack_state``."""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        doc = json.loads(npz["__json__"].tobytes().decode("utf-8"))
        arrays = {k: npz[k] for k in npz.files if k != "__json__"}

    def fill(value):
        if isinstance(value, dict):
            if set(value) == {"__array__"}:
                return arrays[value["__array__"]]
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    return fill(doc)
