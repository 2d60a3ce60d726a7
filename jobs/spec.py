"""What a job is asked to do: the one place CLI flags become library options.

A ``JobSpec`` is stored with every job (as JSON), so any runner (a second ``transcribe``, ``retry``,
``watch``) runs a job with the options it was enqueued with, not with its own flags.

The engine options are data (``options``: option name -> value, only those given), which the
library validates for the mode (``transcriber.engine_options``): a new option needs nothing here.
A job stored before (its options as flat fields: ``beam_size``, ``chunk_seconds``...) still reads.

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
from typing import Any, Optional

from transcriber import DEFAULT_MODE, DEFAULT_MODEL, engine_options, fingerprint_data, mode_default, option_table

# Bump when the meaning of stored words or engine states changes for the same options (a
# decoding fix that should redo finished files): every fingerprint changes with it.
# 2: one engine protocol (streaming checkpoints hold sentence segments and the open one).
FINGERPRINT_VERSION = 2

# the JobSpec fields that are CueOptions fields of the same name (and CLI flags: --max-line-chars)
CUE_FIELDS = ("max_line_chars", "max_lines", "max_cps", "min_duration", "max_duration")
# CueOptions' defaults (cues.py, which imports the tokenizer: not loaded for --help); a test
# checks that they agree
CUE_DEFAULTS = {"max_line_chars": None, "max_lines": 2, "max_cps": None, "min_duration": 5 / 6,
                "max_duration": 7.0}


@dataclass(frozen=True)
class JobSpec:
    """The user's choices for one job (CLI flags, stored as plain data)."""

    model: str = DEFAULT_MODEL
    mode: str = DEFAULT_MODE
    # the engine options given, as sorted (name, value) pairs (a dict is taken too); the others
    # are the mode's defaults
    options: tuple[tuple[str, Any], ...] = ()
    formats: tuple[str, ...] = ("srt",)
    live: bool = False  # rewrite the outputs at every checkpoint (a growing SRT can be followed)
    # outputs only: the cue layout (CueOptions) and per-format choices (OutputOptions).
    # max_line_chars and max_cps None: the rule of the transcript's language (CueOptions)
    max_line_chars: Optional[int] = CUE_DEFAULTS["max_line_chars"]
    max_lines: int = CUE_DEFAULTS["max_lines"]
    max_cps: Optional[float] = CUE_DEFAULTS["max_cps"]
    min_duration: float = CUE_DEFAULTS["min_duration"]
    max_duration: float = CUE_DEFAULTS["max_duration"]
    vtt_karaoke: bool = False
    json_cues: bool = False
    highlight_words: bool = False  # SRT: the spoken word underlined; ASS: karaoke tags
    # outputs named talk.en.srt (the language before the extension, as media servers read it)
    tag_language: bool = False

    def __post_init__(self):
        object.__setattr__(self, "formats", tuple(self.formats))
        given = {name: tuple(v) if isinstance(v, list) else v for name, v in dict(self.options).items()}
        # what the mode's default is anyway is left out: one spec, one stored form (an old job's
        # task "transcribe" and a new job's nothing are the same job)
        object.__setattr__(self, "options", tuple(sorted(
            (name, value) for name, value in given.items()
            if value is not None and not _is_default(self.mode, name, value))))
        # ValueError (OptionError naming the option) now, at the command line, not in the runner
        self.engine_options()
        self.output_options()

    def option(self, name: str):
        """An engine option's value as given (None: the mode's default)."""
        return dict(self.options).get(name)

    @property
    def language(self) -> Optional[str]:
        return self.option("language")

    @property
    def task(self) -> str:
        return self.option("task") or "transcribe"

    def engine_options(self):
        """The library options of this spec's mode (OptionError on bad values or an option the
        mode does not take)."""
        return engine_options(self.mode, dict(self.options))

    def output_options(self):
        """How the words become files (ValueError from CueOptions on bad values)."""
        from transcriber import CueOptions, OutputOptions  # cues and writers: loaded when needed

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
        d["options"] = {name: list(v) if isinstance(v, tuple) else v for name, v in self.options}
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
        from transcriber import FORMATS

        stem = self.named_stem(stem, language)
        return [stem + FORMATS[fmt][0] for fmt in self.formats]

    def named_stem(self, stem: str, language: Optional[str]) -> str:
        """``stem``, or with ``tag_language`` ``stem.LANG`` (see ``output_paths``)."""
        return f"{stem}.{language or 'und'}" if self.tag_language else stem

    @classmethod
    def from_dict(cls, d: dict) -> "JobSpec":
        """The spec of ``to_dict``, or of a job stored before ``options`` (its engine options as
        flat fields: language, task, beam_size, chunk_seconds...)."""
        known = {f.name for f in dataclasses.fields(cls)}
        flat = {k: v for k, v in d.items() if k in option_table() and k not in known}
        options = {**flat, **(d.get("options") or {})}
        fields = {k: (tuple(v) if k == "formats" else v) for k, v in d.items() if k in known and k != "options"}
        return cls(**fields, options=options)


def _is_default(mode: str, name: str, value) -> bool:
    try:
        return mode_default(mode, name) == value
    except (KeyError, ValueError):  # not an option of the mode: engine_options says so
        return False


@functools.lru_cache(maxsize=64)
def _fingerprint(spec: JobSpec) -> str:
    words = {"version": FINGERPRINT_VERSION, "model": spec.model, "mode": spec.mode,
             "options": fingerprint_data(spec.engine_options())}
    text = json.dumps(words, sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _stored(spec: JobSpec) -> dict:
    return spec.to_dict()
