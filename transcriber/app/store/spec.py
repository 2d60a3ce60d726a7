"""What a job is asked to do: the one place CLI flags become library options.

A ``JobSpec`` is stored with every job (as JSON), so any runner (a second ``transcribe``, ``retry``,
``watch``) runs a job with the options it was enqueued with, not with its own flags.

The engine options are data (``options``: option name -> value, only those given), which the
library validates for the mode (``transcriber.engine_options``): a new option needs nothing here.
A job stored before (its options as flat fields: ``beam_size``, ``chunk_seconds``...) still reads.

Two hashes of it matter:
- ``fingerprint``: everything that changes the *words* (model, mode, the resolved library
  options). A done job whose fingerprint differs is redone from scratch.
- the output settings (formats, live outputs, the output options: cue layout, karaoke, JSON
  cues... as ``transcriber.output_option_table`` declares them) are not in it:
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

from transcriber import (DEFAULT_MODE, DEFAULT_MODEL, engine_options, fingerprint_data, mode_default, option_table,
                         output_option_table)

# Bump when the meaning of stored words or engine states changes for the same options (a
# decoding fix that should redo finished files): every fingerprint changes with it.
# 2: one engine protocol (streaming checkpoints hold sentence segments and the open one).
FINGERPRINT_VERSION = 2


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
    # the output options given (the cue layout, each format's own: ``output_option_table``), as
    # sorted (name, value) pairs (a dict is taken too); the others are their defaults. Stored
    # as flat fields, every one of them (``to_dict``): max_lines, vtt_karaoke...
    outputs: tuple[tuple[str, Any], ...] = ()
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
        defaults = _output_defaults()
        object.__setattr__(self, "outputs", tuple(sorted(
            (name, value) for name, value in dict(self.outputs).items()
            if value is not None and not (name in defaults and _same(defaults[name], value)))))
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

    def output(self, name: str):
        """An output option's value as given (None: its default)."""
        return dict(self.outputs).get(name)

    def output_options(self):
        """How the words become files (OptionError, naming the option, on bad values)."""
        from transcriber import OutputOptions

        unknown = [name for name, _ in self.outputs if name not in output_option_table()]
        if unknown:
            raise ValueError(f"unknown output option {unknown[0]!r}")
        return OutputOptions.named(dict(self.outputs))

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
        del d["outputs"]
        return {**d, **_output_defaults(), **dict(self.outputs)}

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
        return [stem + FORMATS[fmt].extension for fmt in self.formats]

    def named_stem(self, stem: str, language: Optional[str]) -> str:
        """``stem``, or with ``tag_language`` ``stem.LANG`` (see ``output_paths``)."""
        return f"{stem}.{language or 'und'}" if self.tag_language else stem

    @classmethod
    def from_dict(cls, d: dict) -> "JobSpec":
        """The spec of ``to_dict`` (its output options as flat fields), or of a job stored before
        ``options`` (its engine options as flat fields too: language, task, beam_size...)."""
        known = {f.name for f in dataclasses.fields(cls)} - {"options", "outputs"}
        flat = {k: v for k, v in d.items() if k in option_table() and k not in known}
        options = {**flat, **(d.get("options") or {})}
        outputs = {k: v for k, v in d.items() if k in output_option_table()}
        fields = {k: (tuple(v) if k == "formats" else v) for k, v in d.items() if k in known}
        return cls(**fields, options=options, outputs=outputs)


def _is_default(mode: str, name: str, value) -> bool:
    try:
        return mode_default(mode, name) == value
    except (KeyError, ValueError):  # not an option of the mode: engine_options says so
        return False


def _output_defaults() -> dict:
    return {name: default for name, (_, _, default) in output_option_table().items()}


def _same(default, value) -> bool:
    """A given output value that is its option's default (2 and 2.0 alike; True is not 1)."""
    return default == value and isinstance(default, bool) == isinstance(value, bool)


@functools.lru_cache(maxsize=64)
def _fingerprint(spec: JobSpec) -> str:
    words = {"version": FINGERPRINT_VERSION, "model": spec.model, "mode": spec.mode,
             "options": fingerprint_data(spec.engine_options())}
    text = json.dumps(words, sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=64)
def _stored(spec: JobSpec) -> dict:
    return spec.to_dict()
