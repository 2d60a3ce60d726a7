"""The streaming engine: a media file replayed chunk by chunk through a streaming session.

``StreamingEngine.steps`` yields one ``Step`` per chunk (``options.chunk_seconds``) of a media
path or of a ``transcriber.media.follow.LiveSource`` (a file still being written, a pipe): the words
the chunk committed, the segments they closed (``SegmentGrouper``), and a state that resumes
the replay exactly: the session's state (``pack_state``: its arrays as npz, base64 in the JSON)
and the words of the segment still open.
"""

from __future__ import annotations

import base64
import io
import json
from dataclasses import replace
from typing import Iterator, Optional

import numpy as np

from transcriber.constants import N_SAMPLES, SAMPLE_RATE
from transcriber.engines.context import WhisperContext
from transcriber.engines.engine import SegmentGrouper, Step
from transcriber.media.source import as_source
from transcriber.model.whisper import Whisper
from transcriber.engines.streaming.options import StreamingOptions
from transcriber.engines.streaming.session import StreamingSession


class StreamingEngine:
    """Replays files through ``StreamingSession``s of one model and set of options."""

    def __init__(self, model: Whisper, options: StreamingOptions = StreamingOptions()):
        self.model, self.options = model, options
        self.model_name = model.name
        self.context = WhisperContext(model, options.task, options.language)

    def side_by_side(self, width: int) -> None:
        """Streaming replays one file at a time (``Engine.side_by_side``)."""
        return None

    def steps(self, source, state: Optional[dict] = None) -> Iterator[Step]:
        if state:
            session = StreamingSession.restore(self.model, self.options,
                                               unpack_state(base64.b64decode(state["session"])))
            grouper = SegmentGrouper.from_list(state["open"])
            probability = state.get("language_probability")
        else:
            language, probability = self._language(source)
            session = StreamingSession(self.model, replace(self.options, language=language))
            grouper = SegmentGrouper()
        if session.finished:
            return
        start = session.audio_offset / SAMPLE_RATE
        audio = as_source(source, self.options.audio_track).chunks(self.options.chunk_seconds, start)
        full = max(1, round(self.options.chunk_seconds * SAMPLE_RATE))
        for _, samples in audio:
            session.insert_audio(samples)
            # A shorter chunk is the source's last (``iter_audio``): finish() decodes it in one
            # pass, where a pass here would encode the same audio once more.
            words = session.process() if len(samples) == full else []
            yield self._step(session, grouper, words, grouper.add(words), probability)
        words = session.finish()
        yield self._step(session, grouper, words, grouper.add(words) + grouper.flush(), probability,
                         audio.warnings)

    def _language(self, source) -> tuple[Optional[str], Optional[float]]:
        """The language given (probability None), else (multilingual model) detected up front
        from the first 30 s, as one-shot mode does from its first window."""
        if self.context.language is not None:
            return self.context.language, None
        samples = as_source(source, self.options.audio_track).head(N_SAMPLES / SAMPLE_RATE)
        if len(samples) == 0:
            return None, None
        language, probability, _ = self.context.detect_language(self.context.encode_window(samples)[0])
        return language, probability

    @staticmethod
    def _step(session: StreamingSession, grouper: SegmentGrouper, words, segments,
              probability: Optional[float], warnings: tuple[str, ...] = ()) -> Step:
        state = {"session": base64.b64encode(pack_state(session.state())).decode("ascii"),
                 "open": grouper.to_list(), "language_probability": probability}
        return Step(tuple(words), tuple(segments), state, session.time, session.language or "en", probability,
                    warnings)


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
