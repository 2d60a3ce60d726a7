"""Decoding options: frozen, checked once. The CLI maps its flags onto these in one place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

TASKS = ("transcribe", "translate")

# Upper bounds that no user needs to exceed, so that no flag can make a run arbitrarily costly:
# time and memory grow in proportion to the beams (or samples) decoded side by side, and
# accuracy stops improving past 5-10 (openai/whisper's default is 5); --beam-size 1000 took
# 196 s and 1.9 GB for a 5 s clip. Patience multiplies the finished beams searched for.
MAX_BEAM_SIZE = 16
MAX_BEST_OF = 16
MAX_PATIENCE = 10.0


@dataclass(frozen=True)
class DecodingOptions:
    """How one 30 s window is decoded (see ``DecodingTask``)."""

    task: str = "transcribe"
    language: Optional[str] = None  # None: detect (multilingual models)
    temperature: float = 0.0
    sample_len: Optional[int] = None  # max tokens to sample; None: half the text context
    best_of: Optional[int] = None  # independent samples when temperature > 0
    beam_size: Optional[int] = None  # beams when temperature == 0; None or 1: greedy
    patience: Optional[float] = None  # beam search patience (arXiv:2204.05424)
    length_penalty: Optional[float] = None  # None: length norm; else Google NMT alpha
    prompt: Optional[Union[str, tuple[int, ...]]] = None  # previous text, as context
    prefix: Optional[Union[str, tuple[int, ...]]] = None  # forced start of this window
    suppress_tokens: Optional[str] = "-1"  # comma-separated ids; "-1": the non-speech set
    suppress_blank: bool = True
    without_timestamps: bool = False
    max_initial_timestamp: Optional[float] = 1.0

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, not {self.task!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, not {self.temperature}")
        if self.beam_size is not None and not 1 <= self.beam_size <= MAX_BEAM_SIZE:
            raise ValueError(f"beam_size must be in 1..{MAX_BEAM_SIZE}, not {self.beam_size}")
        if self.best_of is not None and not 1 <= self.best_of <= MAX_BEST_OF:
            raise ValueError(f"best_of must be in 1..{MAX_BEST_OF}, not {self.best_of}")
        if self.beam_size is not None and self.beam_size > 1 and self.best_of is not None and self.best_of > 1:
            raise ValueError("beam_size and best_of cannot be used together")
        if self.temperature == 0 and self.best_of not in (None, 1):
            raise ValueError("best_of needs a temperature > 0")
        if self.patience is not None and (self.beam_size is None or not 0 < self.patience <= MAX_PATIENCE):
            raise ValueError(f"patience needs beam_size, and must be in (0, {MAX_PATIENCE:g}]")
        if self.length_penalty is not None and not 0 <= self.length_penalty <= 1:
            raise ValueError(f"length_penalty must be in [0, 1], not {self.length_penalty}")
        if self.sample_len is not None and self.sample_len < 1:
            raise ValueError(f"sample_len must be >= 1, not {self.sample_len}")

    @property
    def n_group(self) -> int:
        """Sequences decoded side by side for one window."""
        if self.beam_size and self.beam_size > 1 and self.temperature == 0:
            return self.beam_size
        if self.best_of and self.temperature > 0:
            return self.best_of
        return 1
