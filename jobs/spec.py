"""What a job is asked to do: the one place CLI flags become library options.

A ``JobSpec`` is stored with every job (as JSON), so any runner (a second ``transcribe``, ``retry``,
``watch``) runs a job with the options it was enqueued with, not with its own flags.

Two hashes of it matter:
- ``fingerprint``: everything that changes the *words* (model, mode, the resolved library
  options). A done job whose fingerprint differs is redone from scratch.
- the output settings (formats, live outputs, cue layout, karaoke, JSON cues) are not in it:
  changing only those rewrites the outputs from the stored words, without the model (the store
  sees the same fingerprint with a different spec).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Optional

from transcriber.cues import CueOptions
from transcriber.decoding.options import DecodingOptions
from transcriber.model.loader import DEFAULT_MODEL
from transcriber.streaming import StreamingOptions
from transcriber.transcribe import TranscribeOptions
from transcriber.writers import OutputOptions

# Bump when the meaning of stored words changes for the same options (a decoding fix that
# should redo finished files): every fingerprint changes with it.
FINGERPRINT_VERSION = 1
# The default decoding mode: see the README for why.
DEFAULT_MODE = "stream"

_CUES = CueOptions()
# the JobSpec fields that are CueOptions fields of the same name (and CLI flags: --max-line-chars)
CUE_FIELDS = ("max_line_chars", "max_lines", "max_cps", "min_duration", "max_duration")


@dataclass(frozen=True)
class JobSpec:
    """The user's choices for one job (CLI flags, stored as plain data)."""

    model: str = DEFAULT_MODEL
    mode: str = DEFAULT_MODE
    language: Optional[str] = None
    task: str = "transcribe"
    beam_size: Optional[int] = None
    # streaming mode (StreamingOptions)
    chunk_seconds: float = 1.0
    frame_threshold: int = 25
    audio_max_len: float = 30.0
    formats: tuple[str, ...] = ("srt",)
    live: bool = False  # rewrite the outputs at every checkpoint (a growing SRT can be followed)
    # outputs only: the cue layout (CueOptions) and per-format choices (OutputOptions)
    max_line_chars: int = _CUES.max_line_chars
    max_lines: int = _CUES.max_lines
    max_cps: float = _CUES.max_cps
    min_duration: float = _CUES.min_duration
    max_duration: float = _CUES.max_duration
    vtt_karaoke: bool = False
    json_cues: bool = False

    def __post_init__(self):
        object.__setattr__(self, "formats", tuple(self.formats))
        # ValueError now, at the command line, not in the runner
        self.transcribe_options()
        self.streaming_options()
        self.output_options()

    def transcribe_options(self) -> TranscribeOptions:
        """The library options for this spec (ValueError on bad combinations)."""
        decoding = DecodingOptions(task=self.task, language=self.language, beam_size=self.beam_size)
        return TranscribeOptions(decoding=decoding, word_timestamps=True)

    def streaming_options(self) -> StreamingOptions:
        """The streaming session's options (ValueError on bad values)."""
        return StreamingOptions(chunk_seconds=self.chunk_seconds, frame_threshold=self.frame_threshold,
                                audio_max_len=self.audio_max_len, beam_size=self.beam_size or 1,
                                language=self.language, task=self.task)

    def output_options(self) -> OutputOptions:
        """How the words become files (ValueError from CueOptions on bad values)."""
        cues = CueOptions(**{name: getattr(self, name) for name in CUE_FIELDS})
        return OutputOptions(cues=cues, vtt_karaoke=self.vtt_karaoke, json_cues=self.json_cues)

    def fingerprint(self) -> str:
        """A short hash of everything that changes the words.

        Taken over the *resolved* library options, so a changed library default redoes jobs as
        surely as a changed flag does.
        """
        options = self.streaming_options() if self.mode == "stream" else self.transcribe_options()
        words = {"version": FINGERPRINT_VERSION, "model": self.model, "mode": self.mode,
                 "options": dataclasses.asdict(options)}
        text = json.dumps(words, sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["formats"] = list(self.formats)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "JobSpec":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: (tuple(v) if k == "formats" else v) for k, v in d.items() if k in known})
