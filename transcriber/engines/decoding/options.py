"""One-shot options: ``DecodingOptions`` (one 30 s window) inside ``TranscribeOptions`` (the
walk over a file). Frozen, checked once; the fields that are options carry their ``Option``
(transcriber/options.py), which the CLI makes its flags from. Light (no numpy, no MLX).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Union

from transcriber.options import (AUDIO_TRACK, BEAM_SIZE, INITIAL_PROMPT, LANGUAGE, LOGPROB_THRESHOLD, MAX_BEAM_SIZE,
                                 NO_SPEECH_CERTAIN, NO_SPEECH_THRESHOLD, TASK, TASKS, VAD, Option, OptionError,
                                 check_fields)

if TYPE_CHECKING:
    from transcriber.engines.nonspeech import NoSpeechRule

__all__ = ["DecodingOptions", "TranscribeOptions", "MAX_BEAM_SIZE", "MAX_BEST_OF", "MAX_PATIENCE", "TASKS"]

# Upper bounds (see transcriber/options.py for beam_size's): patience multiplies the finished
# beams searched for; each sample of best_of is one more sequence decoded side by side.
MAX_BEST_OF = 16
MAX_PATIENCE = 10.0
MAX_TEMPERATURES = 10  # each fallback temperature decodes best_of samples of the window again


@dataclass(frozen=True)
class DecodingOptions:
    """How one 30 s window is decoded (see ``DecodingTask``)."""

    task: str = TASK.field("transcribe")
    language: Optional[str] = LANGUAGE.field(None)  # None: detect (multilingual models)
    temperature: float = 0.0
    sample_len: Optional[int] = None  # max tokens to sample; None: half the text context
    best_of: Optional[int] = None  # independent samples when temperature > 0
    beam_size: Optional[int] = BEAM_SIZE.field(None)  # beams when temperature == 0; None: greedy (1 too)
    patience: Optional[float] = None  # beam search patience (arXiv:2204.05424)
    length_penalty: Optional[float] = None  # None: length norm; else Google NMT alpha
    prompt: Optional[Union[str, tuple[int, ...]]] = None  # previous text, as context
    prefix: Optional[Union[str, tuple[int, ...]]] = None  # forced start of this window
    suppress_tokens: Optional[str] = "-1"  # comma-separated ids; "-1": the non-speech set
    suppress_blank: bool = True
    without_timestamps: bool = False
    max_initial_timestamp: Optional[float] = 1.0

    def __post_init__(self):
        check_fields(self)
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, not {self.temperature}")
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


TEMPERATURE = Option("temperature", "The fallback schedule: a window is decoded at the first temperature, then "
                                    "at the next ones while its text is too repetitive or unlikely "
                                    "(comma-separated; 0 alone: never sample).", tuple, low=0, high=2,
                     metavar="T[,T...]", example="0,0.4,0.8")
CONDITION_ON_PREVIOUS_TEXT = Option("condition_on_previous_text", "Decode each window after the text of the one "
                                                                  "before (--no-...: each on its own, which stops "
                                                                  "a repetition from carrying on, at some cost in "
                                                                  "consistency).", bool, example="false")
CLIP_TIMESTAMPS = Option("clip_timestamps", "Transcribe only these spans: start,end,start,end,... in seconds of "
                                            "the audio track, from its first sample (a last start without an "
                                            "end runs to the end of the file).", tuple,
                         low=0, metavar="S,E[,S,E...]", example="0,5", added_later=True)


@dataclass(frozen=True)
class TranscribeOptions:
    """The long-form loop around ``DecodingOptions`` (openai/whisper's defaults)."""

    decoding: DecodingOptions = field(default_factory=DecodingOptions)
    temperatures: tuple[float, ...] = TEMPERATURE.field((0.0, 0.2, 0.4, 0.6, 0.8, 1.0))
    best_of: int = 5  # samples per window when falling back to temperature > 0
    compression_ratio_threshold: Optional[float] = 2.4
    logprob_threshold: Optional[float] = LOGPROB_THRESHOLD.field(-1.0)
    no_speech_threshold: Optional[float] = NO_SPEECH_THRESHOLD.field(0.6)
    # Above this no-speech probability a window is skipped even when its text looks confident:
    # on silence and room noise tiny.en writes a confident " you" (no-speech 0.92-0.98, while
    # every speech window of the test recordings stays below 0.25).
    no_speech_certain: Optional[float] = NO_SPEECH_CERTAIN.field(0.9)
    condition_on_previous_text: bool = CONDITION_ON_PREVIOUS_TEXT.field(True)
    initial_prompt: Optional[str] = INITIAL_PROMPT.field(None)
    word_timestamps: bool = True
    audio_track: Union[int, str, None] = AUDIO_TRACK.field(None)  # None: the first audio stream
    clip_timestamps: Optional[tuple[float, ...]] = CLIP_TIMESTAMPS.field(None)  # seconds, see clips()
    vad: bool = VAD.field(False)  # decode only the speech spans (transcriber/engines/vad.py)

    def __post_init__(self):
        check_fields(self)
        if len(self.temperatures) > MAX_TEMPERATURES:
            raise OptionError("{name} takes at most {most} values", {"name": TEMPERATURE.name},
                              most=MAX_TEMPERATURES)
        if not 1 <= self.best_of <= MAX_BEST_OF:  # bounded like beam_size: see options.py
            raise ValueError(f"best_of must be in 1..{MAX_BEST_OF}, not {self.best_of}")
        clips = self.clip_timestamps or ()
        if any(b <= a for a, b in zip(clips, clips[1:])):
            raise OptionError("{name} must be increasing times (start,end,start,end...), not {value}",
                              {"name": CLIP_TIMESTAMPS.name}, value=",".join(f"{t:g}" for t in clips))
        if clips and self.vad:  # clip times are the file's; the engine hears the speech spans joined
            raise OptionError("{name} and {other} do not go together: choose the spans, or let the detector",
                              {"name": CLIP_TIMESTAMPS.name, "other": VAD.name})

    def clips(self) -> list[tuple[float, Optional[float]]]:
        """The spans to transcribe, (start, end) in seconds; end None: the end of the file. The
        whole file without clip_timestamps."""
        times = list(self.clip_timestamps or (0.0,))
        if len(times) % 2:
            times.append(None)
        return list(zip(times[::2], times[1::2]))

    @property
    def no_speech(self) -> NoSpeechRule:
        """The no-speech rule of these options (``nonspeech.NoSpeechRule``)."""
        from transcriber.engines.nonspeech import NoSpeechRule  # numpy: not at import (the CLI's --help reads these options)

        return NoSpeechRule(self.no_speech_threshold, self.logprob_threshold, self.no_speech_certain)
