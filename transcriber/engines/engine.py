"""The seam between the library and whatever runs it: one resumable engine protocol.

    engine = make_engine("stream", model, options)        # or "oneshot" (engines/modes.py)
    for step in engine.steps(source, state=None):         # an AudioSource, or a media path
        step.words      # words committed since the last step (time order, never repeated)
        step.segments   # segments closed by this step: together they are the transcript
        step.state      # plain JSON data: engine.steps(source, step.state) continues right after
        step.position   # seconds of the source decoded so far
        step.language   # the language being transcribed
        step.offset     # where the audio's first sample lies on the media's timeline (s): its
                        # words, segments and position include it (``OnTimeline``)
        step.warnings   # what the media's decoder reported about audio it read in full
                        # (ffmpeg's errors on a damaged frame): known once the audio has been
                        # read to its end, so carried by the last steps; () for a clean file

Both modes implement it: one-shot steps once per 30 s window (its seek loop's state), streaming
once per replayed chunk (the session's state, and the words of the segment still open).
``transcriber.transcribe`` and ``transcriber.stream`` are short loops over it, and so is the job
runner, which checkpoints whatever a step hands it and knows no mode. ``assemble``
(transcript/transforms.py) turns the segments of every step into a ``Transcript``, the same way
for both modes.

An engine reads audio only through an ``AudioSource`` (media/source.py: ``chunks``, ``head``,
``start_offset``); a media path is taken as that file's ``audio_track`` (``as_source``). A stage
that changes what the engines hear is a source wrapped around another, not a change here.

Engines count time from the first sample ffmpeg decodes; ``OnTimeline`` (what ``make_engine``
returns) moves their steps onto the media's timeline, for both modes in one place: a video whose
audio track starts 4 s late has its first word near 4 s.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, replace
from typing import Iterator, Optional, Protocol, Union

from transcriber.transcript.text import ends_sentence
from transcriber.transcript.transforms import assemble
from transcriber.transcript.types import Segment, Transcript, Word, words_segment

SEGMENT_PAUSE = 1.0  # seconds of silence between streamed words that start a new segment
SEGMENT_MAX_SECONDS = 30.0  # a streamed segment closes before it gets longer than this


@dataclass(frozen=True)
class Step:
    words: tuple[Word, ...]
    segments: tuple[Segment, ...]
    state: dict
    position: float
    language: str
    language_probability: Optional[float] = None  # when the language was detected, not given
    warnings: tuple[str, ...] = ()  # the audio stream's warnings (transcriber.media.audio.AudioStream)
    offset: float = 0.0  # seconds on the media's timeline of the audio's first sample (OnTimeline)


class SideBySide(Protocol):
    """Files decoded side by side (``Engine.side_by_side``), each file keyed by the caller:

        files.add(key, path, state)        # at most ``width`` files; also between events
        for key, event in files.events():  # a Step, None (the file is done) or the exception
            ...                            # that ended it; files.drop(key) stops a file
    """

    def __len__(self) -> int: ...

    def add(self, key, source, state: Optional[dict] = None) -> None: ...

    def drop(self, key) -> None: ...

    def events(self) -> Iterator[tuple[object, Union[Step, None, Exception]]]: ...

    def close(self) -> None: ...


class Engine(Protocol):
    model_name: str

    def steps(self, source, state: Optional[dict] = None) -> Iterator[Step]:
        """Decode ``source`` (an ``AudioSource``, or a media path: ``as_source``) from ``state``
        (None: the start)."""
        ...

    def side_by_side(self, width: int) -> Optional[SideBySide]:
        """Up to ``width`` files decoded side by side, each given the steps ``steps`` would
        give it; None when this engine decodes one file at a time (then use ``steps``)."""
        ...


# The key of a step's state that records the offset its words were moved by: a resumed job keeps
# the offset its first steps had (and its words in the store). A state without it is an
# offset of 0 (a file whose audio starts at 0, or a job checkpointed before offsets were applied).
_OFFSET_KEY = "timeline_offset"


class Wrapped:
    """An engine around ``engine``: what it does not define is the inner engine's."""

    def __init__(self, engine):
        self.engine = engine

    def __getattr__(self, name):
        if name == "engine":  # (not set yet: an instance being unpickled)
            raise AttributeError(name)
        return getattr(self.engine, name)


class OnTimeline(Wrapped):
    """``engine`` with its steps on the media's timeline (``Step.offset`` added to every time).

    The offset is the audio track's start (``transcriber.media.audio.start_offset``, or the source's
    own ``start_offset()``, a ``LiveSource``), asked once the first step is there (a followed
    file holds its first audio by then). Anything else is the engine's."""

    def steps(self, source, state: Optional[dict] = None) -> Iterator[Step]:
        offset, state = _unwrap(state)
        with contextlib.closing(self.engine.steps(source, state)) as steps:  # closing stops ffmpeg
            for step in steps:
                if offset is None:
                    offset = source_offset(source, self._track())
                yield on_timeline(step, offset)

    def side_by_side(self, width: int) -> Optional["_FilesOnTimeline"]:
        files = self.engine.side_by_side(width)
        return None if files is None else _FilesOnTimeline(files, self._track())

    def _track(self):
        return getattr(getattr(self.engine, "options", None), "audio_track", None)


class _FilesOnTimeline:
    """``SideBySide`` files whose steps are put on their media's timeline, as ``OnTimeline``'s."""

    def __init__(self, files: SideBySide, track):
        self.files, self.track, self.offsets = files, track, {}

    def __len__(self) -> int:
        return len(self.files)

    def add(self, key, source, state: Optional[dict] = None) -> None:
        offset, state = _unwrap(state)
        self.files.add(key, source, state)
        self.offsets[key] = (offset, source)

    def drop(self, key) -> None:
        self.files.drop(key)
        self.offsets.pop(key, None)

    def events(self) -> Iterator[tuple[object, Union[Step, None, Exception]]]:
        for key, event in self.files.events():
            if isinstance(event, Step):
                offset, source = self.offsets[key]
                if offset is None:
                    offset = source_offset(source, self.track)
                    self.offsets[key] = (offset, source)
                event = on_timeline(event, offset)
            yield key, event

    def close(self) -> None:
        self.files.close()


def source_offset(source, track=None) -> float:
    """Where the first sample decoded of ``source`` lies on its media's timeline (s)."""
    from transcriber.media.source import as_source

    return as_source(source, track).start_offset()


def _unwrap(state: Optional[dict]) -> tuple[Optional[float], Optional[dict]]:
    """(the offset a state's steps had, None for a fresh start: not known yet; the engine's own state)."""
    if state is None:
        return None, None
    if _OFFSET_KEY in state:
        return float(state[_OFFSET_KEY]), state["engine"]
    return 0.0, state


def applied_offset(state: Optional[dict]) -> float:
    """The offset of the steps a checkpointed state (``Step.state``) ended, 0.0 if it says none."""
    return _unwrap(state)[0] or 0.0


def on_timeline(step: Step, offset: float) -> Step:
    """``step`` moved ``offset`` seconds later; unchanged (the same object) for 0."""
    if not offset:
        return step
    state = None if step.state is None else {_OFFSET_KEY: offset, "engine": step.state}
    return replace(step, words=tuple(_later(w, offset) for w in step.words),
                   segments=tuple(replace(s, start=s.start + offset, end=s.end + offset,
                                          words=tuple(_later(w, offset) for w in s.words)) for s in step.segments),
                   state=state, position=step.position + offset, offset=offset)


def _later(word: Word, offset: float) -> Word:
    return replace(word, start=word.start + offset, end=word.end + offset,
                   emitted_at=None if word.emitted_at is None else word.emitted_at + offset)


class SegmentGrouper:
    """Groups words that come one by one (streaming) into segments: a new segment after a
    sentence end, a pause of ``pause`` seconds, or before one grows past ``max_seconds``.
    The open segment's words are plain data (``to_list``/``from_list``), part of a resumable state."""

    def __init__(self, words: Optional[list[Word]] = None, pause: float = SEGMENT_PAUSE,
                 max_seconds: float = SEGMENT_MAX_SECONDS):
        self.open: list[Word] = list(words or [])
        self.pause, self.max_seconds = pause, max_seconds

    def add(self, words) -> list[Segment]:
        """Take words in time order; the segments they close."""
        closed = []
        for w in words:
            if self.open and (w.start - self.open[-1].end >= self.pause
                              or w.end - self.open[0].start > self.max_seconds):
                closed.append(self._close())
            self.open.append(w)
            if ends_sentence(w.text):
                closed.append(self._close())
        return closed

    def flush(self) -> list[Segment]:
        """The open segment, closed (at the end of the audio)."""
        return [self._close()] if self.open else []

    def _close(self) -> Segment:
        words, self.open = tuple(self.open), []
        return words_segment(words)

    def to_list(self) -> list[dict]:
        return [asdict(w) for w in self.open]  # full precision: a resumed run matches exactly

    @classmethod
    def from_list(cls, items: list[dict]) -> "SegmentGrouper":
        return cls([Word(**d) for d in items])


def words_to_transcript(words, *, language: str = "en", duration: float = 0.0, model: str = "") -> Transcript:
    """A transcript of words that came without segments (``SegmentGrouper``'s rules)."""
    grouper = SegmentGrouper()
    segments = grouper.add(words) + grouper.flush()
    return assemble(segments, language, duration, model)
