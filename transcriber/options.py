"""What makes an options field an option, and the options both modes share.

An ``Option`` is declared once (its name, type, bounds, help text; its flag is ``--`` + the name
with dashes) and attached to a dataclass field of each options class that takes it:

    beam_size: Optional[int] = BEAM_SIZE.field(None)  # None: greedy

The options classes (``DecodingOptions``/``TranscribeOptions`` for one-shot, ``StreamingOptions``)
check their fields through ``check_fields``; ``transcriber.engines.modes`` builds them from plain data
(``{"beam_size": 5}``) and refuses an option the mode does not have; the CLI makes one flag per
option and names the flag in every error (``OptionError.named``), with no table of its own.
The output options are Options too: the cue layout's (``CueOptions``, transcriber/subtitles/cues.py) and
each output format's own (``OutputOptions``, listed by ``subtitles.formats.output_option_table``).

Light on purpose (no numpy, no MLX): ``transcribe --help`` imports it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

TASKS = ("transcribe", "translate")
# Upper bounds that no user needs to exceed, so that no flag can make a run arbitrarily costly:
# time and memory grow in proportion to the beams (or samples) decoded side by side, and
# accuracy stops improving past 5-10 (openai/whisper's default is 5); --beam-size 1000 took
# 196 s and 1.9 GB for a 5 s clip.
MAX_BEAM_SIZE = 16
MAX_PROMPT_CHARS = 2000  # a prompt keeps at most half the text context (223 tokens) anyway


class OptionError(ValueError):
    """A bad option value. ``template`` names options as ``{key}`` fields of ``names`` (key ->
    option name), so the library's message says ``beam_size`` and the CLI's ``--beam-size``."""

    def __init__(self, template: str, names: dict[str, str], **values):
        self.template, self.names, self.values = template, dict(names), values
        self.owner = ""
        super().__init__(self.named(lambda name: name))

    def of(self, owner: str) -> "OptionError":
        """This error with the library's message naming each option as ``owner.name``
        (``CueOptions.max_cps``); ``named`` (the CLI's flags) is unchanged."""
        self.owner = owner
        self.args = (self.named(lambda name: f"{owner}.{name}"),)
        return self

    def named(self, name_of: Callable[[str], str]) -> str:
        """The message with every option called ``name_of(option name)``."""
        return self.template.format(**{k: name_of(v) for k, v in self.names.items()}, **self.values)

    def __reduce__(self):  # picklable (a Ray worker's error comes back to the driver)
        return _rebuild, (self.template, self.names, self.values, self.owner)


def _rebuild(template: str, names: dict, values: dict, owner: str = "") -> OptionError:
    error = OptionError(template, names, **values)
    return error.of(owner) if owner else error


_KINDS = {tuple: "comma-separated numbers", float: "a number", int: "a whole number", bool: "true or false",
          str: "text"}


def _floats(text: str) -> tuple[float, ...]:
    """"0,0.2,0.4" -> (0.0, 0.2, 0.4)."""
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"must be comma-separated numbers, not {text!r}") from None


@dataclass(frozen=True)
class Option:
    """One option: a field of one or more options classes, and one command-line flag."""

    name: str
    help: str
    type: type = str  # str, int, float, bool, or tuple (of floats)
    low: Optional[float] = None  # bounds, inclusive
    high: Optional[float] = None
    low_open: bool = False  # low itself is out of bounds ("must be > 0")
    # Out of bounds, the message names the bound crossed ("must be at most 200", "must be > 0",
    # "must be an integer >= 1") instead of the range ("must be in [1, 16]"): the cue options'
    # messages, as they were before those options were Options.
    one_bound_messages: bool = False
    choices: tuple = ()
    parse: Optional[Callable[[str], Any]] = None  # the flag's text -> value (ValueError), else type
    validate: Optional[Callable[[Any], None]] = None  # replaces the type and bounds check
    metavar: Optional[str] = None
    short: str = ""  # a one-letter flag too ("-l")
    example: str = ""  # a valid flag value (tests, README)
    # None is a value too (the library's API, not a flag): the rule it bounds is off, as
    # openai/whisper's thresholds take None
    none_turns_off: bool = False
    # A rule of the library that the command line leaves at its default: no flag.
    library_only: bool = False
    # Added after fingerprint version 2: counted in a job's fingerprint only when set, so jobs
    # done before the option existed are not redone (see fingerprint_data).
    added_later: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def field(self, default=dataclasses.MISSING, fingerprinted_as: str = "",
              default_fingerprinted_as=dataclasses.MISSING, **kwargs) -> Any:
        """A dataclass field carrying this option (``default_factory`` as for ``field``).
        ``fingerprinted_as``: the field's name before it was renamed, which the fingerprints of
        jobs already stored hash (a clearer name must not redo every finished job).
        ``default_fingerprinted_as``: the value those fingerprints hash for the field's default,
        where the default was spelled otherwise before (streaming's greedy ``beam_size`` was 1)."""
        metadata = {"option": self}
        if fingerprinted_as:
            metadata["fingerprinted_as"] = fingerprinted_as
        if default_fingerprinted_as is not dataclasses.MISSING:
            metadata["default_fingerprinted_as"] = default_fingerprinted_as
        return dataclasses.field(default=default, metadata=metadata, **kwargs)

    def from_text(self, text: str) -> Any:
        """The value a flag's text gives (OptionError when it is not one)."""
        try:
            if self.parse:
                return self.parse(text)
            return _floats(text) if self.type is tuple else self.type(text)
        except ValueError as e:
            problem = str(e).replace("{", "{{").replace("}", "}}") if self.parse else f"must be {_KINDS.get(self.type, self.type.__name__)}, not {{text!r}}"
            raise OptionError("{name} " + problem, {"name": self.name}, text=text) from None

    def check(self, value) -> None:
        """OptionError unless ``value`` (not None) is of the type, in the bounds and choices."""
        if self.validate:
            return self.validate(value)
        if not self._typed(value):
            self._fail("must be {kind}, not {value!r}", value)
        numbers = value if isinstance(value, tuple) else (value,)
        if self.type in (int, float, tuple):
            outside = [v for v in numbers if not self._within(v)]
            if outside:
                problem = self._crossed(outside[0]) if self.one_bound_messages else f"must be {self._bounds()}"
                self._fail(problem + ", not {value!r}", value)
        if self.choices and value not in self.choices:
            self._fail(f"must be one of {', '.join(map(str, self.choices))}, not {{value!r}}", value)

    def _typed(self, value) -> bool:
        if self.type is tuple:
            return isinstance(value, tuple) and bool(value) and all(_number(v) for v in value)
        if self.type is float:
            return _number(value)
        if self.type is int:
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, self.type)

    def _within(self, v) -> bool:
        return math.isfinite(v) and self._above_low(v) and (self.high is None or v <= self.high)

    def _above_low(self, v) -> bool:
        return self.low is None or v > self.low or (v == self.low and not self.low_open)

    def _bounds(self) -> str:
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
        return self._low_bound() if self.low is not None else f"<= {self.high:g}"

    def _low_bound(self) -> str:
        return f"{'>' if self.low_open else '>='} {self.low:g}"

    def _crossed(self, v) -> str:
        """What ``one_bound_messages`` says of ``v``, a number outside the bounds."""
        if not math.isfinite(v):
            return "must be a finite number"
        if not self._above_low(v):
            return f"must be {'an integer ' if self.type is int else ''}{self._low_bound()}"
        return f"must be at most {self.high:g}"

    def _fail(self, problem: str, value) -> None:
        kind = _KINDS.get(self.type, self.type.__name__)
        raise OptionError("{name} " + problem, {"name": self.name}, kind=kind, value=value)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def options_of(cls) -> dict[str, tuple[Option, tuple[str, ...]]]:
    """The options of an options class: option name -> (Option, attribute path). A field whose
    default is itself an options class (``TranscribeOptions.decoding``) lends it its options."""
    found = {}
    for f in dataclasses.fields(cls):
        option = f.metadata.get("option")
        if option is not None:
            found[option.name] = (option, (f.name,))
        elif f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
            for name, (inner, path) in options_of(f.default_factory).items():
                found.setdefault(name, (inner, (f.name, *path)))
    return found


def check_fields(obj, qualified: bool = False) -> None:
    """Check every option field of a frozen options object (lists become tuples first). None
    is a value only where it is the field's default (detect the language...) or turns a rule
    off (a threshold). ``qualified``: the library's message names the option with its class
    (``CueOptions.max_cps``; see ``OptionError.of``)."""
    try:
        _check_fields(obj)
    except OptionError as e:
        if qualified:
            raise e.of(type(obj).__name__) from None
        raise


def _check_fields(obj) -> None:
    for f in dataclasses.fields(obj):
        option = f.metadata.get("option")
        if option is None:
            continue
        value = getattr(obj, f.name)
        if isinstance(value, list):
            value = tuple(value)
            object.__setattr__(obj, f.name, value)
        if value is None and (f.default is None or option.none_turns_off):
            continue
        option.check(value)


def build(cls, given: dict):
    """An options object of ``cls`` from option values by name (every name one of ``cls``'s)."""
    table = options_of(cls)
    fields: dict = {}
    nested: dict[str, dict] = {}  # an inner options class's fields (TranscribeOptions.decoding)
    for name, value in given.items():
        path = table[name][1]
        value = tuple(value) if isinstance(value, list) else value
        if len(path) > 1:
            nested.setdefault(path[0], {})[path[1]] = value
        else:
            fields[path[0]] = value
    for f in dataclasses.fields(cls):
        if f.name in nested:
            fields[f.name] = f.default_factory(**nested[f.name])
    return cls(**fields)


def fingerprint_data(options) -> dict:
    """``dataclasses.asdict(options)`` without the ``added_later`` options at their defaults:
    what a job's fingerprint hashes (an option added later changes it only when set). A renamed
    field, or a default spelled otherwise before, is hashed as it was (``Option.field``)."""
    out = {}
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        option = f.metadata.get("option")
        if option is not None and option.added_later and value == f.default:
            continue
        if "default_fingerprinted_as" in f.metadata and value == f.default:
            value = f.metadata["default_fingerprinted_as"]
        name = f.metadata.get("fingerprinted_as") or f.name
        out[name] = fingerprint_data(value) if dataclasses.is_dataclass(value) else value
    return out


def _audio_track(text: str):
    """"2" -> 2 (the second audio stream); "ger" -> "ger" (the first tagged with that language)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if not re.fullmatch(r"[A-Za-z]{2,3}(-[A-Za-z0-9]+)?", text):
        raise ValueError(f"takes an audio track number (1: the first) or a language tag "
                         f"such as eng or ger, not {text!r}")
    return text.lower()


def check_audio_track(value) -> None:
    """OptionError unless ``value`` is None, a track number >= 1 or a language tag."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, str)) or (isinstance(value, int) and value < 1):
        raise OptionError("{name} must be a track number >= 1 or a language tag, not {value!r}",
                          {"name": AUDIO_TRACK.name}, value=value)
    if isinstance(value, str):
        try:
            _audio_track(value)
        except ValueError as e:
            raise OptionError("{name} " + str(e), {"name": AUDIO_TRACK.name}) from None


# -- the options both modes take (each mode's class attaches them to its fields) -----------------

TASK = Option("task", "translate: English text of speech in any language (multilingual models such as base; "
                      "English-only models refuse it).", choices=TASKS, example="transcribe")
LANGUAGE = Option("language", "Spoken language code (default: detect; 'en' for .en models).", short="-l",
                  metavar="CODE", example="en")
# Greedy is beam_size None in both modes (as openai/whisper has it); 1, a beam of one, is greedy too.
BEAM_SIZE = Option("beam_size", "Beam search width (default: greedy): wider costs time and memory in "
                                "proportion, for no gain past 5-10.", int, low=1, high=MAX_BEAM_SIZE, example="2")
INITIAL_PROMPT = Option("initial_prompt", "Text the decoder reads before the first words, as if it had been said: "
                                          "names and terms spelled as you want them (\"Kubernetes, Dr. Nguyen.\"). "
                                          "Later text takes its place.", metavar="TEXT", example="A talk.")
NO_SPEECH_THRESHOLD = Option("no_speech_threshold", "Audio whose no-speech probability is above this, and whose "
                                                    "text is unlikely (--logprob-threshold), is taken for silence.",
                             float, low=0, high=1, example="0.6", none_turns_off=True)
LOGPROB_THRESHOLD = Option("logprob_threshold", "Text whose mean token log probability is under this is unlikely: "
                                                "decoded again hotter (one-shot) or, with --no-speech-threshold, "
                                                "taken for silence.", float, high=0, example="-1",
                           none_turns_off=True)
NO_SPEECH_CERTAIN = Option("no_speech_certain", "Above this no-speech probability audio is silence, however "
                                                "likely its text.", float, low=0, high=1, example="0.9",
                           none_turns_off=True)
VAD = Option("vad", "Decode only the speech a voice-activity detector (Silero VAD) finds: music, silence and "
                    "noise are skipped, not decoded, and the words keep the file's times.", bool, example="true",
             added_later=True)
AUDIO_TRACK = Option("audio_track", "The audio track to transcribe: its number (1: the first audio track) or "
                                    "its language tag (eng, ger...: the first track with that tag). "
                                    "[default: the first]", parse=_audio_track, validate=check_audio_track, metavar="N|LANG", example="1",
                     added_later=True)
