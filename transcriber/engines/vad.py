"""``--vad``: an engine that decodes only the speech a voice-activity detector finds.

    engine = SpeechOnly(OneShotEngine(model, options))     # make_engine does, when options.vad
    for step in engine.steps("podcast.mp3"): ...           # times on the file's timeline

The detector (transcriber/media/vad.py, Silero VAD) reads the file once (and keeps its audio, up
to an hour of it, so the decode reads memory, not the file again); the engine then decodes a
``SpeechSource`` (the speech spans joined end to end), and every time of its steps is put back
on the file's timeline through the spans: a word by the span its middle belongs to, kept inside
it (the joined audio has 2 s of silence between two spans, each span owning the half next to it:
a last word whose timing runs on into the pause, or a first word timed early in it, stays with
its own speech), the position past the last span is the file's end. The spans travel in the step's state, so a resumed job decodes the same audio and
never runs the detector again.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Iterator, Optional, Union

from transcriber.constants import SAMPLE_RATE
from transcriber.engines.engine import Step, Wrapped
from transcriber.media.source import as_source
from transcriber.media.vad import KEEP_SECONDS, SpanMap, SpeechSource, detect
from transcriber.transcript.types import Segment, Word

_KEY = "speech_spans"
_FRAME = 0.01


class SpeechOnly(Wrapped):
    """``engine`` run on the speech spans of each file it is handed."""

    def steps(self, source, state: Optional[dict] = None) -> Iterator[Step]:
        spans, total, heard, inner = _spans(source, state, self.engine)
        timeline = _timeline(spans, total)
        step = None
        with contextlib.closing(self.engine.steps(SpeechSource(heard, spans), inner)) as steps:
            for step in steps:
                yield _on_file(step, *timeline)
        if step is None and not spans:  # nothing to decode (one-shot gives no step then): the file is done
            yield _no_speech(self.engine, timeline)

    def side_by_side(self, width: int) -> Optional["_SpeechSideBySide"]:
        files = self.engine.side_by_side(width)
        return None if files is None else _SpeechSideBySide(self.engine, files, width)


class _SpeechSideBySide:
    """Files decoded side by side (``Engine.side_by_side``), each on its speech spans: a file's
    detector pass runs when it is added (the others' decoding waits meanwhile: ~2 s for 20
    minutes), its steps come back on its own timeline. Of the audio the passes read, each file
    keeps a ``width``-th of what one file alone keeps (a longer file is read again by its decode):
    the batch holds no more than one file does."""

    def __init__(self, engine, files, width: int):
        self.engine, self.files, self.keep_seconds = engine, files, KEEP_SECONDS / width
        self.timelines: dict = {}  # key -> its ``_timeline``
        self.empty: list = []  # the keys of files without speech: one step each, then their end

    def __len__(self) -> int:
        return len(self.files) + len(self.empty)

    def add(self, key, source, state: Optional[dict] = None) -> None:
        if key in self.timelines:
            raise ValueError(f"cannot add {key!r}: decoded already")
        spans, total, heard, inner = _spans(source, state, self.engine, self.keep_seconds)
        if spans:
            self.files.add(key, SpeechSource(heard, spans), inner)
        else:
            self.empty.append(key)
        self.timelines[key] = _timeline(spans, total)

    def drop(self, key) -> None:
        self.files.drop(key)
        self.timelines.pop(key, None)
        if key in self.empty:
            self.empty.remove(key)

    def events(self) -> Iterator[tuple[object, Union[Step, None, Exception]]]:
        while True:
            yield from self._no_speech()
            if not len(self.files):
                return
            for key, event in self.files.events():  # (files added meanwhile are walked too)
                if isinstance(event, Step):
                    event = _on_file(event, *self.timelines[key])
                elif key in self.timelines:
                    del self.timelines[key]
                yield key, event
                yield from self._no_speech()

    def _no_speech(self):
        while self.empty:
            key = self.empty.pop(0)
            yield key, _no_speech(self.engine, self.timelines.pop(key))
            yield key, None

    def close(self) -> None:
        self.files.close()
        self.timelines.clear()
        self.empty.clear()


def _spans(source, state: Optional[dict], engine, keep_seconds: float = KEEP_SECONDS):
    """(spans, the file's samples, what the decode reads: the detector's kept audio or the file,
    the inner engine's state) of a file, from ``state`` when it has them (a resumed job: no
    detector pass), else by the detector's pass."""
    source = as_source(source, getattr(engine.options, "audio_track", None))
    if state and _KEY in state:
        return [tuple(s) for s in state[_KEY]["spans"]], state[_KEY]["samples"], source, state["engine"]
    spans, total, heard = detect(source, keep_seconds=keep_seconds)
    return spans, total, heard or source, state


def _timeline(spans, total: int) -> tuple[SpanMap, int, dict]:
    """What puts a file's steps on its timeline (``_on_file``'s arguments): its spans' map, its
    samples, and the spans as its steps' state carries them."""
    return SpanMap(spans), total, {_KEY: {"spans": [list(s) for s in spans], "samples": total}}


def _no_speech(engine, timeline: tuple[SpanMap, int, dict]) -> Step:
    """The one step of a file the detector heard no speech in: it is done, with no word."""
    _, total, known = timeline
    language = getattr(getattr(engine, "context", None), "language", None) or "en"
    return Step((), (), {**known, "engine": None}, total / SAMPLE_RATE, language)


def _on_file(step: Step, timeline: SpanMap, total: int, spans_state: dict) -> Step:
    """``step`` with its times on the file's timeline and the spans in its state."""
    joined_end = timeline.length / SAMPLE_RATE - _FRAME  # (one-shot's position is whole 10 ms frames)
    position = total / SAMPLE_RATE if step.position >= joined_end else timeline.to_source(step.position)
    state = None if step.state is None else {**spans_state, "engine": step.state}
    return replace(step, words=tuple(_word(w, timeline) for w in step.words),
                   segments=tuple(_segment(s, timeline) for s in step.segments), state=state, position=position)


def _word(word: Word, timeline: SpanMap) -> Word:
    span = timeline.span_at((word.start + word.end) / 2)
    emitted = None if word.emitted_at is None else timeline.to_source(word.emitted_at)
    return replace(word, start=timeline.to_source(word.start, span=span), end=timeline.to_source(word.end, span=span),
                   emitted_at=emitted)


def _segment(segment: Segment, timeline: SpanMap) -> Segment:
    words = tuple(_word(w, timeline) for w in segment.words)
    start, end = timeline.to_source(segment.start), timeline.to_source(segment.end)
    if words:
        start, end = min(start, words[0].start), max(end, words[-1].end)
    return replace(segment, start=start, end=max(start, end), words=words)
