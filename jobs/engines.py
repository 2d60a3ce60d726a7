"""Engines: what turns a file into committed segments, resumable from plain-data state.

The runner knows only this interface::

    engine.run(path, state) -> iterator of Step(segments, state, position, language)

- ``segments``: segments (with their words) committed by this step, never repeated by a later
  step or by a run resumed from this step's state;
- ``state``: plain JSON data; ``run(path, state)`` continues right after this step;
- ``position``: seconds of audio done, for progress bars and checkpoint spacing.

The runner checkpoints every ``checkpoint_seconds`` of audio (default 10), at a step boundary:
any step's state is a valid resume point. Engines step at their natural unit:

- one-shot: one step per 30 s window (the unit of its seek loop; a window cannot be split, so
  one-shot checkpoints every window, whatever ``checkpoint_seconds`` says);
- streaming: one step per replayed chunk (``--chunk-seconds``), with the session state from
  ``StreamingSession.state()`` (packed to bytes, base64 in the JSON), restored with
  ``StreamingSession.restore``; the words committed by a chunk become one segment, and the
  runner's final transcript regroups all words into sentences (``words_to_transcript``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Protocol

import transcriber
from transcriber import audio as audio_io
from transcriber.streaming import StreamingSession, pack_state, unpack_state
from transcriber.transcribe import FRAMES_PER_SECOND, SeekState, Transcriber
from transcriber.types import Segment, Word

from .spec import JobSpec


@dataclass(frozen=True)
class Step:
    segments: list[Segment]
    state: dict
    position: float
    language: str


class Engine(Protocol):
    model_name: str

    def run(self, path: Path, state: Optional[dict]) -> Iterator[Step]: ...


class OneShotEngine:
    """``Transcriber.windows``: one step per 30 s window, resumed from its ``SeekState``."""

    def __init__(self, transcriber_: Transcriber):
        self.transcriber = transcriber_
        self.model_name = transcriber_.model.name

    @classmethod
    def create(cls, spec: JobSpec) -> "OneShotEngine":
        return cls(Transcriber(transcriber.load_model(spec.model), spec.transcribe_options()))

    def run(self, path: Path, state: Optional[dict]) -> Iterator[Step]:
        seek = SeekState.from_dict(state) if state else None
        for segments, after, language in self.transcriber.windows(path, seek):
            yield Step(list(segments), after.to_dict(), after.seek / FRAMES_PER_SECOND, language)


class StreamingEngine:
    """``StreamingSession`` fed chunk by chunk: one step per chunk, resumable mid-file."""

    def __init__(self, model, options):
        self.model, self.options = model, options
        self.model_name = model.name

    @classmethod
    def create(cls, spec: JobSpec) -> "StreamingEngine":
        return cls(transcriber.load_model(spec.model), spec.streaming_options())

    def run(self, path: Path, state: Optional[dict]) -> Iterator[Step]:
        if state:
            session = StreamingSession.restore(self.model, self.options,
                                               unpack_state(base64.b64decode(state["session"])))
        else:
            session = StreamingSession(self.model, self.options)
        if session.finished:
            return
        start = session.audio_offset / audio_io.SAMPLE_RATE
        for _, samples in audio_io.iter_audio(path, chunk_seconds=self.options.chunk_seconds, start=start):
            session.insert_audio(samples)
            yield self._step(session, session.process())
        yield self._step(session, session.finish())

    def _step(self, session: StreamingSession, words: list[Word]) -> Step:
        segments = [Segment(words[0].start, words[-1].end, "".join(w.text for w in words), tuple(words))] if words else []
        state = {"session": base64.b64encode(pack_state(session.state())).decode("ascii")}
        return Step(segments, state, session.time, session.language or "en")


# mode name -> engine constructor; the CLI's --mode choices come from here.
ENGINES: dict[str, Callable[[JobSpec], Engine]] = {"oneshot": OneShotEngine.create, "stream": StreamingEngine.create}


class EngineCache:
    """Engines built on first use and kept for the process: the model is loaded only when a job
    really needs decoding (a rerun that only skips never loads it)."""

    def __init__(self, engines: dict[str, Callable[[JobSpec], Engine]] = ENGINES):
        self.engines = engines
        self._built: dict[str, Engine | Exception] = {}

    def get(self, spec: JobSpec) -> Engine:
        key = spec.fingerprint()
        if key not in self._built:
            try:
                if spec.mode not in self.engines:
                    raise ValueError(f"unknown mode {spec.mode!r}; choose from {', '.join(self.engines)}")
                self._built[key] = self.engines[spec.mode](spec)
            except Exception as e:  # a model that cannot load fails every job: try it once
                self._built[key] = e
        built = self._built[key]
        if isinstance(built, Exception):
            raise built
        return built
