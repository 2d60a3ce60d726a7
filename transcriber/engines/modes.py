"""The decoding modes by name: the one place that knows there are two.

    options = engine_options("stream", {"language": None, "chunk_seconds": 1.0})   # data -> options
    engine = make_engine("stream", model, options)                                 # -> an Engine

Each mode's options class owns its options (transcriber/options.py): ``engine_options`` builds
it from plain data and refuses an option the mode does not take, naming the option and the
mode. The CLI's ``--mode`` choices are ``MODES`` and its decoding flags ``option_table()``.
Light (no numpy, no MLX): the engines are imported when one is made.
"""

from __future__ import annotations

import functools
import importlib
from typing import Mapping

from transcriber.engines.decoding.options import TranscribeOptions
from transcriber.options import Option, OptionError, build, options_of
from transcriber.engines.streaming.options import StreamingOptions

# mode -> (options class, "module:engine class")
_REGISTRY = {
    "oneshot": (TranscribeOptions, "transcriber.engines.oneshot:OneShotEngine"),
    "stream": (StreamingOptions, "transcriber.engines.streaming.engine:StreamingEngine"),
}
MODES = tuple(_REGISTRY)
# One-shot is the default for complete files: on the podcast (bench/peers/podcast.py) and the dev set
# (bench/streaming/modes.py) its subtitles are as good or better (streaming keeps about half the
# sentence ends of long readings), at about a third of streaming's time. Streaming stays for
# --mode stream and live input (StreamingSession). The figures are in docs/decoding.md and docs/speed.md.
DEFAULT_MODE = "oneshot"
FOLLOW_MODES = ("stream",)  # the modes that decode a live source: streaming commits words as audio comes


def _entry(mode: str):
    if mode not in _REGISTRY:
        raise OptionError("unknown {mode} {value!r}; choose from {modes}", {"mode": "mode"}, value=mode,
                          modes=", ".join(MODES))
    return _REGISTRY[mode]


def options_class(mode: str) -> type:
    return _entry(mode)[0]


def option_table() -> dict[str, tuple[Option, tuple[str, ...]]]:
    """Every option of any mode: name -> (Option, the modes that take it), in declaration order."""
    table: dict[str, tuple[Option, tuple[str, ...]]] = {}
    for mode, (cls, _) in _REGISTRY.items():
        for name, (option, _path) in options_of(cls).items():
            known, modes = table.get(name, (option, ()))
            table[name] = (known, (*modes, mode))
    return table


@functools.lru_cache(maxsize=None)
def mode_default(mode: str, name: str):
    """The value option ``name`` has in ``mode``'s default options (KeyError: not one of its)."""
    value = options_class(mode)()
    for attribute in options_of(options_class(mode))[name][1]:
        value = getattr(value, attribute)
    return value


def engine_options(mode: str, given: Mapping | None = None, **more):
    """The options of ``mode`` for the options given by name (``given`` and keywords; None
    values: the mode's default). OptionError for a bad value, or an option the mode does not
    take (named with the modes that take it)."""
    given = {k: v for k, v in {**(given or {}), **more}.items() if v is not None}
    cls = options_class(mode)
    own = options_of(cls)
    for name in given:
        if name not in own:
            takes = option_table().get(name, (None, ()))[1]
            raise OptionError("{name} does not apply to {mode} {value} (only to {other})",
                              {"name": name, "mode": "mode"}, value=mode,
                              other=", ".join(takes) if takes else "no mode")
    return build(cls, given)


def make_engine(mode: str, model, options=None):
    """An engine of ``mode`` for a loaded model (default options when None)."""
    options_cls, where = _entry(mode)
    module, name = where.split(":")
    engine_class = getattr(importlib.import_module(module), name)
    from transcriber.engines.engine import OnTimeline  # (its times on the media's timeline: the audio track's start)

    engine = engine_class(model, options if options is not None else options_cls())
    if engine.options.vad:
        from transcriber.engines.vad import SpeechOnly  # (only the speech spans decoded)

        engine = SpeechOnly(engine)
    return OnTimeline(engine)
