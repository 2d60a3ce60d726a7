"""What a streaming session knows besides its model and options, as plain data: ``SessionState``
and its dict for a checkpoint (``to_dict``/``from_dict``: JSON-able values and numpy arrays;
``streaming.engine.pack_state`` stores them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from transcriber.engines.streaming.melbuffer import MelBuffer
from transcriber.engines.streaming.words import CommittedWord


@dataclass
class SessionState:
    """A stream's buffer, prompt, committed words and the judgements made so far."""

    buffer: MelBuffer
    language: Optional[str]
    prompt: list[int] = field(default_factory=list)  # prompt text tokens (static prompt apart); dict key "context"
    words: list[CommittedWord] = field(default_factory=list)  # committed words still in the buffer
    last_frame: Optional[int] = None  # stream frame the last committed token attended
    last_end: float = 0.0  # end of the last emitted word, seconds of the source
    finished: bool = False
    last_sound: Optional[int] = None  # stream frame just after the last loud audio (GATE)
    backwards_until: Optional[int] = None  # stream frame where the audio last judged backwards ends
    caption_end: Optional[float] = None  # end of the last sound caption written over the audio, seconds
    # The samples after the last committed word (the guard reads a stretch of them again):
    # ``audio`` from stream sample ``audio_start`` on.
    audio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    audio_start: int = 0
    closed_at: Optional[int] = None  # ``last_sound`` when the pause after it was closed (``_close``)

    def keep_audio_from(self, sample: int) -> None:
        """Forget the samples before stream sample ``sample``."""
        cut = sample - self.audio_start
        if cut > 0:
            self.audio, self.audio_start = self.audio[cut:], self.audio_start + cut

    def to_dict(self) -> dict:
        return {
            "language": self.language,
            "context": list(self.prompt),
            "words": [w.to_dict() for w in self.words],
            "last_frame": self.last_frame,
            "last_end": self.last_end,
            "finished": self.finished,
            "last_sound": self.last_sound,
            "backwards_until": self.backwards_until,
            "caption_end": self.caption_end,
            "audio": self.audio.copy(),
            "audio_start": self.audio_start,
            "closed_at": self.closed_at,
            "buffer": self.buffer.state(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "SessionState":
        buffer = MelBuffer.from_state(d["buffer"])
        # a state saved before the silence gate: take its buffer for sound, so none of it is dropped
        sound = d["last_sound"] if "last_sound" in d else buffer.end
        return cls(
            buffer=buffer,
            language=d["language"],
            prompt=[int(t) for t in d["context"]],
            words=[CommittedWord.from_dict(w) for w in d["words"]],
            last_frame=_int(d["last_frame"]),
            last_end=float(d["last_end"]),
            finished=bool(d["finished"]),
            last_sound=_int(sound),
            backwards_until=_int(d.get("backwards_until")),  # (a state saved before the rule has none)
            caption_end=None if d.get("caption_end") is None else float(d["caption_end"]),  # (nor a caption)
            # (a state saved before the guard: no samples, its buffer's audio is not read again)
            audio=np.asarray(d.get("audio", np.zeros(0)), dtype=np.float32).reshape(-1),
            audio_start=int(d.get("audio_start", buffer.received)),
            closed_at=_int(d.get("closed_at")),
        )


def _int(value) -> Optional[int]:
    return None if value is None else int(value)
