"""The decoding modes by name: the one place that knows there are two.

    options = engine_options("stream", language=None, chunk_seconds=1.0)   # flags -> options
    engine = make_engine("stream", model, options)                        # -> an Engine

The CLI's ``--mode`` choices are ``MODES``; everything after this point (the job runner, the
package API) sees only the ``Engine`` protocol of ``transcriber.engine``.
"""

from __future__ import annotations

from .oneshot import OneShotEngine, TranscribeOptions
from .streaming import StreamingEngine, StreamingOptions

# mode -> (engine class, options class)
_REGISTRY = {
    "oneshot": (OneShotEngine, TranscribeOptions),
    "stream": (StreamingEngine, StreamingOptions),
}
MODES = tuple(_REGISTRY)
# One-shot is the default for complete files: on the podcast (bench/podcast.py) and the dev set
# (bench/streaming.py) its subtitles are as good or better (streaming keeps about half the
# sentence ends of long readings), at about a third of streaming's time. Streaming stays for
# --mode stream and live input (StreamingSession). The figures are in the README.
DEFAULT_MODE = "oneshot"


def _entry(mode: str):
    if mode not in _REGISTRY:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    return _REGISTRY[mode]


def engine_options(mode: str, **flags):
    """The options of ``mode`` for the command-line flags (ValueError on bad values). Flags of
    the other modes are checked too, so a bad value is an error whatever the mode (the other
    mode's flags are not used)."""
    for name in MODES:
        if name != mode:
            _entry(name)[1].from_flags(**flags)
    return _entry(mode)[1].from_flags(**flags)


def make_engine(mode: str, model, options=None):
    """An engine of ``mode`` for a loaded model (default options when None)."""
    engine_class, options_class = _entry(mode)
    return engine_class(model, options if options is not None else options_class())
