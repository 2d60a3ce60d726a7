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
from typing import Iterator, Optional

from transcriber.constants import SAMPLE_RATE
from transcriber.engines.engine import Step, Wrapped
from transcriber.media.source import as_source
from transcriber.media.vad import SpanMap, SpeechSource, detect
from transcriber.transcript.types import Segment, Word

_KEY = "speech_spans"
_FRAME = 0.01


class SpeechOnly(Wrapped):
    """``engine`` run on the speech spans of each file it is handed."""

    def steps(self, source, state: Optional[dict] = None) -> Iterator[Step]:
        source = as_source(source, getattr(self.engine.options, "audio_track", None))
        heard = None
        if state and _KEY in state:
            spans, total, inner = [tuple(s) for s in state[_KEY]["spans"]], state[_KEY]["samples"], state["engine"]
        else:
            (spans, total, heard), inner = detect(source), state
        timeline, known = SpanMap(spans), {_KEY: {"spans": [list(s) for s in spans], "samples": total}}
        step = None
        with contextlib.closing(self.engine.steps(SpeechSource(heard or source, spans), inner)) as steps:
            for step in steps:
                yield _on_file(step, timeline, total, known)
        if step is None and not spans:  # nothing to decode (one-shot gives no step then): the file is done
            language = getattr(getattr(self.engine, "context", None), "language", None) or "en"
            yield Step((), (), {**known, "engine": None}, total / SAMPLE_RATE, language)

    def side_by_side(self, width: int):
        return None  # each file's detector pass first, then its decode: one file at a time


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
