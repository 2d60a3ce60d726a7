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
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from transcriber import DEFAULT_MODE, DEFAULT_MODEL, FORMATS, CueOptions, OutputOptions, engine_options

# Bump when the meaning of stored words or engine states changes for the same options (a
# decoding fix that should redo finished files): every fingerprint changes with it.
# 2: one engine protocol (streaming checkpoints hold sentence segments and the open one).
FINGERPRINT_VERSION = 2

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
    # streaming mode only; None: the library's default (StreamingOptions)
    chunk_seconds: Optional[float] = None
    frame_threshold: Optional[int] = None
    audio_max_len: Optional[float] = None
    formats: tuple[str, ...] = ("srt",)
    live: bool = False  # rewrite the outputs at every checkpoint (a growing SRT can be followed)
    # outputs only: the cue layout (CueOptions) and per-format choices (OutputOptions).
    # max_line_chars and max_cps None: the rule of the transcript's language (CueOptions)
    max_line_chars: Optional[int] = _CUES.max_line_chars
    max_lines: int = _CUES.max_lines
    max_cps: Optional[float] = _CUES.max_cps
    min_duration: float = _CUES.min_duration
    max_duration: float = _CUES.max_duration
    vtt_karaoke: bool = False
    json_cues: bool = False
    highlight_words: bool = False  # SRT: the spoken word underlined; ASS: karaoke tags
    # outputs named talk.en.srt (the language before the extension, as media servers read it)
    tag_language: bool = False

    def __post_init__(self):
        object.__setattr__(self, "formats", tuple(self.formats))
        # ValueError now, at the command line, not in the runner
        self.engine_options()
        self.output_options()

    def engine_options(self):
        """The library options of this spec's mode (ValueError on bad values or combinations)."""
        return engine_options(self.mode, language=self.language, task=self.task, beam_size=self.beam_size,
                              chunk_seconds=self.chunk_seconds, frame_threshold=self.frame_threshold,
                              audio_max_len=self.audio_max_len)

    def output_options(self) -> OutputOptions:
        """How the words become files (ValueError from CueOptions on bad values)."""
        cues = CueOptions(**{name: getattr(self, name) for name in CUE_FIELDS})
        return OutputOptions(cues=cues, vtt_karaoke=self.vtt_karaoke, json_cues=self.json_cues,
                             highlight_words=self.highlight_words)

    def fingerprint(self) -> str:
        """A short hash of everything that changes the words.

        Taken over the *resolved* library options, so a changed library default redoes jobs as
        surely as a changed flag does. Computed once per spec (a batch of 10,000 files has one).
        """
        return _fingerprint(self)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["formats"] = list(self.formats)
        return d

    def stored(self) -> dict:
        """``to_dict``, made once per spec and shared: not to be modified."""
        return _stored(self)

    def named_language(self) -> Optional[str]:
        """The language the outputs' names carry when it is known before decoding (given, or
        English for a translation); None when it will be detected."""
        return "en" if self.task == "translate" else self.language

    def output_paths(self, stem: str, language: Optional[str]) -> list[Path]:
        """The files a job with this spec writes: ``stem`` + each format's extension, with
        ``tag_language`` the ``language`` code before it (``talk.en.srt``; ``und`` when no
        language is known). Without ``tag_language`` the language plays no part."""
        return [Path(name) for name in self.output_names(stem, language)]

    def output_names(self, stem: str, language: Optional[str]) -> list[str]:
        """``output_paths`` as strings (no Path made: a batch of 10,000 files asks for each)."""
        stem = self.named_stem(stem, language)
        return [stem + FORMATS[fmt][0] for fmt in self.formats]

    def named_stem(self, stem: str, language: Optional[str]) -> str:
        """``stem``, or with ``tag_language`` ``stem.LANG`` (see ``output_paths``)."""
        return f"{stem}.{language or 'und'}" if self.tag_language else stem

    @classmethod
    def from_dict(cls, d: dict) -> "JobSpec":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: (tuple(v) if k == "formats" else v) for k, v in d.items() if k in known})


@functools.lru_cache(maxsize=64)
def _fingerprint(spec: JobSpec) -> str:
    words = {"version": FINGERPRINT_VERSION, "model": spec.model, "mode": spec.mode,
             "options": dataclasses.asdict(spec.engine_options())}
    text = json.dumps(words, sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _stored(spec: JobSpec) -> dict:
    return spec.to_dict()
