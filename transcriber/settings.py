"""The library's ``TRANSCRIBER_*`` environment variables (the cache, reads' deadline, the BLAS and
the kernels): read here, and only here, each checked (type, bounds, no nan or inf) by ``get``.
The application declares its own (the job database, serve's tokens, debug) the same way, with
``Setting``, in transcriber/app/settings.py. A bad value is a ``SettingError`` naming the variable, the
value and what it takes; the CLI checks them all before any work (``check_all``: a usage error,
exit 2), so a job never fails on a setting and a value is never silently ignored.

The few other variables the library reads (``XDG_CACHE_HOME``) are read here too: no module of
the library reads the environment but this one (tests/test_structure.py).

No imports beyond the standard library: every module may read its settings from here.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional, Union

Value = Union[str, int, float, bool]

# the kernels' precision and op choices (transcriber/native/__init__.py): bf16, or mlx for measurements
_KERNEL_CHOICES = ("bf16", "mlx")
KERNEL_PATHS = ("avx512", "avx2", "neon", "portable")  # transcriber/native/loader.py's PATHS
# the decoder's weight precisions on the kernels, the default first (transcriber/native/decoder.py)
KERNEL_WEIGHTS = ("bf16", "f32", "int8-projection", "int8")
# the encoder's products on the kernels, the default first: bf16, int16 (integer products), mlx
KERNEL_ENCODER = ("bf16", "int16", "mlx")


class SettingError(ValueError):
    """A TRANSCRIBER_* variable holds a value it cannot take: one line naming both."""


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type = str  # str, int, float, or bool (a flag: set to anything but "" or "0")
    low: float = 0  # bounds of a number, inclusive
    high: Optional[float] = None  # None: the cores this process may use
    choices: tuple[str, ...] = ()  # the words a str setting takes (compared in lower case)
    doc: str = ""

    def value(self) -> Optional[Value]:
        """The variable's value in this process, parsed and checked; None when it is unset or
        empty (the default applies). SettingError for a value it cannot take."""
        text = os.environ.get(self.name, "")
        return self.parse(text) if text.strip() else None

    def parse(self, text: str) -> Value:
        if self.kind is bool:
            return text.strip() not in ("", "0")
        if self.kind is str:
            word = text.strip().lower()
            if self.choices and word not in self.choices:
                raise self.error(text, f"one of {', '.join(self.choices)}")
            return word if self.choices else text
        try:
            value = self.kind(text.strip())
        except ValueError:
            raise self.error(text, self._range()) from None
        if not math.isfinite(value) or value < self.low or value > self._high():
            raise self.error(text, self._range())
        return value

    def _high(self) -> float:
        return cores() if self.high is None else self.high  # None: the cores this process may use

    def _range(self) -> str:
        what = "a whole number" if self.kind is int else "a number of seconds"
        cores = " (the cores this process may use)" if self.high is None else ""
        return f"{what} from {self.low:g} to {self._high():g}{cores}"

    def error(self, text: str, takes: str) -> SettingError:
        return SettingError(f"{self.name}={text!r}: takes {takes}")


def cores() -> int:
    """The cores this process may use (its affinity where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def xdg_cache_home() -> Optional[str]:
    """$XDG_CACHE_HOME, the user's cache folder by the XDG convention (not ours to check: any
    path); None when it is unset or empty."""
    return os.environ.get("XDG_CACHE_HOME") or None


DAY = 86400.0

SETTINGS = {s.name: s for s in (
    Setting("TRANSCRIBER_CACHE", doc="the cache folder (converted models, the BLAS probe's verdict)"),
    Setting("TRANSCRIBER_READ_TIMEOUT", float, 0.001, DAY, doc="seconds a read of a file may take"),
    Setting("TRANSCRIBER_BLAS", doc="none, candidate names, or a library's path: loaded and run"),
    Setting("TRANSCRIBER_BLAS_THREADS", int, 1, None, doc="threads of the BLAS serving MLX (at most the cores)"),
    Setting("TRANSCRIBER_KERNELS", str, choices=("off", "none", "0", *KERNEL_PATHS), doc="the kernels' path"),
    Setting("TRANSCRIBER_KERNEL_THREADS", int, 1, None, doc="threads of the native kernels: the encoder's and the decoder step's"),
    Setting("TRANSCRIBER_KERNEL_WEIGHTS", str, choices=KERNEL_WEIGHTS,
            doc="the decoder's weight precision"),
    Setting("TRANSCRIBER_KERNEL_ENCODER", str, choices=KERNEL_ENCODER, doc="the encoder's ops"),
    Setting("TRANSCRIBER_KERNEL_PASS", str, choices=_KERNEL_CHOICES, doc="the decoder's multi-token passes"),
    Setting("TRANSCRIBER_KERNEL_CROSS", str, choices=_KERNEL_CHOICES, doc="the cross-attention keys and values"),
)}


def get(name: str) -> Optional[Value]:
    """The variable's value, parsed and checked; None when it is unset or empty (the default
    applies). SettingError for a value it cannot take."""
    return SETTINGS[name].value()


def check_all() -> None:
    """SettingError for the first of the library's variables set to a value it cannot take
    (the application checks its own too: transcriber/app/settings.py)."""
    for name in SETTINGS:
        get(name)
