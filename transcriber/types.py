"""Result types shared by every module: words, segments, transcripts.

Times are seconds of the source file (float) everywhere. Word text keeps Whisper's leading
space (" hello"), so joining the words of a segment gives its text exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Word:
    start: float
    end: float
    text: str
    probability: float
    emitted_at: Optional[float] = None  # streaming only: source time at which it was committed

    def to_dict(self) -> dict:
        d = {"word": self.text, "start": round(self.start, 3), "end": round(self.end, 3),
             "probability": round(self.probability, 4)}
        if self.emitted_at is not None:
            d["emitted_at"] = round(self.emitted_at, 3)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Word":
        return cls(start=float(d["start"]), end=float(d["end"]), text=d["word"],
                   probability=float(d.get("probability", 1.0)),
                   emitted_at=d.get("emitted_at"))


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    text: str
    words: tuple[Word, ...] = ()
    # decoding diagnostics (one-shot); not part of the JSON timeline
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0
    compression_ratio: float = 0.0
    temperature: float = 0.0

    def to_dict(self) -> dict:
        return {"start": round(self.start, 3), "end": round(self.end, 3), "text": self.text,
                "words": [w.to_dict() for w in self.words]}

    @classmethod
    def from_dict(cls, d: dict) -> "Segment":
        return cls(start=float(d["start"]), end=float(d["end"]), text=d["text"],
                   words=tuple(Word.from_dict(w) for w in d.get("words", [])))


@dataclass(frozen=True)
class Transcript:
    language: str
    duration: float
    segments: tuple[Segment, ...] = ()
    model: str = ""
    language_probability: Optional[float] = None  # detected languages only: the model's confidence
    task: str = "transcribe"  # "translate": the text is English, whatever language was spoken

    @property
    def text_language(self) -> str:
        """The language the text is written in: the spoken one, or English for a translation."""
        return "en" if self.task == "translate" else self.language

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments).strip()

    @property
    def words(self) -> list[Word]:
        return [w for s in self.segments for w in s.words]

    def to_dict(self) -> dict:
        d = {"language": self.language}
        if self.language_probability is not None:
            d["language_probability"] = round(self.language_probability, 4)
        if self.task != "transcribe":
            d["task"] = self.task
        return {**d, "duration": round(self.duration, 3), "model": self.model,
                "segments": [s.to_dict() for s in self.segments]}

    @classmethod
    def from_dict(cls, d: dict) -> "Transcript":
        return cls(language=d["language"], duration=float(d["duration"]),
                   model=d.get("model", ""), language_probability=d.get("language_probability"),
                   task=d.get("task", "transcribe"),
                   segments=tuple(Segment.from_dict(s) for s in d.get("segments", [])))
