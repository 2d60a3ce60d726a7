"""Result types shared by every module: words, segments, transcripts.

Times are seconds of the source file (float) everywhere. Word text keeps Whisper's leading
space (" hello"), so joining the words of a segment gives its text exactly.

``speaker`` (on words and segments): who said it, "Speaker 1", "Speaker 2"... as
``transforms.label_speakers`` names them; None when the transcript is not labelled. The JSON
says it only when it is set, so an unlabelled transcript's JSON is as it was.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Word:
    start: float
    end: float
    text: str
    probability: float
    emitted_at: Optional[float] = None  # streaming only: source time at which it was committed
    # how it was decoded (for whisper's segment fields; not in the word's JSON, not compared):
    # its text tokens, their summed log probability and the no-speech probability of the pass
    # that committed it (streaming)
    tokens: tuple[int, ...] = field(default=(), compare=False)
    logprob: Optional[float] = field(default=None, compare=False)
    no_speech_prob: Optional[float] = field(default=None, compare=False)
    speaker: Optional[str] = None  # who said it (transforms.label_speakers); None: not labelled

    def __post_init__(self):
        if not isinstance(self.tokens, tuple):  # a checkpoint's JSON list
            object.__setattr__(self, "tokens", tuple(int(t) for t in self.tokens))

    def to_dict(self) -> dict:
        d = {"word": self.text, "start": round(self.start, 3), "end": round(self.end, 3),
             "probability": round(self.probability, 4)}
        if self.emitted_at is not None:
            d["emitted_at"] = round(self.emitted_at, 3)
        if self.speaker is not None:
            d["speaker"] = self.speaker
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Word":
        return cls(start=float(d["start"]), end=float(d["end"]), text=d["word"],
                   probability=float(d.get("probability", 1.0)),
                   emitted_at=d.get("emitted_at"), speaker=d.get("speaker"))


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    text: str
    words: tuple[Word, ...] = ()
    # openai-whisper's segment fields, as the JSON gives them (docs/formats.md, "JSON schema"): one-shot,
    # the decoding of the segment's window; streaming, what its words' passes give (words_segment)
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0
    compression_ratio: float = 0.0
    temperature: float = 0.0
    tokens: tuple[int, ...] = ()  # one-shot: the window's tokens of this segment, timestamps included
    seek: int = 0  # mel frames (10 ms): where the window decoded started
    speaker: Optional[str] = None  # the speaker of its words (transforms.label_speakers); None: not labelled

    def __post_init__(self):
        if not isinstance(self.tokens, tuple):  # a checkpoint's JSON list
            object.__setattr__(self, "tokens", tuple(int(t) for t in self.tokens))

    def to_dict(self, id: int = 0) -> dict:
        """openai-whisper's segment (``id`` its index in the transcript), keys and types as its
        ``transcribe`` gives them with ``word_timestamps=True``; ``speaker`` before the words
        when it is set."""
        d = {"id": int(id), "seek": int(self.seek), "start": round(self.start, 3), "end": round(self.end, 3),
                "text": self.text, "tokens": [int(t) for t in self.tokens],
                "temperature": round(float(self.temperature), 2), "avg_logprob": round(float(self.avg_logprob), 4),
                "compression_ratio": round(float(self.compression_ratio), 4),
                "no_speech_prob": round(float(self.no_speech_prob), 4)}
        if self.speaker is not None:
            d["speaker"] = self.speaker
        d["words"] = [w.to_dict() for w in self.words]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Segment":
        """A segment of ``to_dict``, or of a JSON written before whisper's fields (defaults)."""
        return cls(start=float(d["start"]), end=float(d["end"]), text=d["text"],
                   words=tuple(Word.from_dict(w) for w in d.get("words", [])),
                   avg_logprob=float(d.get("avg_logprob", 0.0)), no_speech_prob=float(d.get("no_speech_prob", 0.0)),
                   compression_ratio=float(d.get("compression_ratio", 0.0)),
                   temperature=float(d.get("temperature", 0.0)), tokens=tuple(d.get("tokens", ())),
                   seek=int(d.get("seek", 0)), speaker=d.get("speaker"))


@dataclass(frozen=True)
class Transcript:
    language: str
    duration: float
    segments: tuple[Segment, ...] = ()
    model: str = ""
    language_probability: Optional[float] = None  # detected languages only: the model's confidence
    task: str = "transcribe"  # "translate": the text is English, whatever language was spoken
    # seconds on the media's timeline of the audio's first sample, included in every time above
    # (the audio track of a video starts late: transcriber.engines.engine.OnTimeline)
    offset: float = 0.0

    @property
    def text_language(self) -> str:
        """The language the text is written in: the spoken one, or English for a translation."""
        return "en" if self.task == "translate" else self.language

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments).strip()

    @property
    def has_speech(self) -> bool:
        """Whether any text was heard: without it, no subtitle file is written (subtitles/files.py)."""
        return bool(self.text)

    @property
    def words(self) -> list[Word]:
        return [w for s in self.segments for w in s.words]

    def to_dict(self) -> dict:
        d = {"language": self.language}
        if self.language_probability is not None:
            d["language_probability"] = round(self.language_probability, 4)
        if self.task != "transcribe":
            d["task"] = self.task
        d["duration"] = round(self.duration, 3)
        if self.offset:  # (said only when there is one: the JSON of other files stays as it was)
            d["offset"] = round(self.offset, 3)
        return {"text": "".join(s.text for s in self.segments), **d, "model": self.model,
                "segments": [s.to_dict(i) for i, s in enumerate(self.segments)]}

    @classmethod
    def from_dict(cls, d: dict) -> "Transcript":
        return cls(language=d["language"], duration=float(d["duration"]),
                   model=d.get("model", ""), language_probability=d.get("language_probability"),
                   task=d.get("task", "transcribe"), offset=float(d.get("offset", 0.0)),
                   segments=tuple(Segment.from_dict(s) for s in d.get("segments", [])))


def compression_ratio(text: str) -> float:
    """How much zlib shrinks the text (whisper's ``compression_ratio``): repetitive
    (hallucinated) text compresses well."""
    raw = text.encode("utf-8")
    return len(raw) / len(zlib.compress(raw)) if raw else 0.0


def words_segment(words: tuple[Word, ...]) -> Segment:
    """A segment of words that came without one (streaming, follow), whisper's fields from what
    the words carry: their tokens; the mean log probability of those tokens; the highest
    no-speech probability of the passes that committed them; the compression ratio of the
    segment's text; temperature 0 (streaming decodes greedily, without fallback); ``seek``, the
    frame where the segment starts (no window: the streaming buffer slides)."""
    text = "".join(w.text for w in words)
    tokens = tuple(t for w in words for t in w.tokens)
    logprobs = [w.logprob for w in words if w.logprob is not None]
    no_speech = [w.no_speech_prob for w in words if w.no_speech_prob is not None]
    return Segment(words[0].start, words[-1].end, text, words,
                   avg_logprob=sum(logprobs) / len(tokens) if tokens and logprobs else 0.0,
                   no_speech_prob=max(no_speech, default=0.0), compression_ratio=compression_ratio(text),
                   tokens=tokens, seek=math.floor(words[0].start * 100))
