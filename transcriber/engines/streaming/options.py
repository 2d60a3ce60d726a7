"""Streaming options: frozen, checked once (ValueError with a clear message). The fields that
are options carry their ``Option`` (transcriber/options.py): the ones both modes take, declared
there, and streaming's own below. Light (no numpy, no MLX).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Optional, Union

from transcriber.constants import CHUNK_LENGTH, TIME_PRECISION
from transcriber.options import (AUDIO_TRACK, BEAM_SIZE, INITIAL_PROMPT, LANGUAGE, LOGPROB_THRESHOLD, NO_SPEECH_CERTAIN,
                                 NO_SPEECH_THRESHOLD, TASK, VAD, Option, OptionError, check_fields)

if TYPE_CHECKING:
    from transcriber.engines.nonspeech import NoSpeechRule

MAX_WINDOW_SECONDS = float(CHUNK_LENGTH)  # the encoder's 1500 positions
# Below these, cost grows without bound for nothing: every chunk is one more decoder pass (0.01 s
# chunks would be 100 passes per second of audio), and a window under 1 s holds too little
# speech to decode. Above them the encoder has no room (30 s is its whole window).
MIN_CHUNK_SECONDS = 0.1
MIN_WINDOW_SECONDS = 1.0
AUTO = "auto"
# (audio_trim_len, audio_keep_len) that "auto" means, by whether the text is English transcribed
# (True) or another language or a translation (False): see StreamingOptions.audio_trim_len.
AUTO_WINDOW = {True: (8.0, 5.0), False: (15.0, None)}

CHUNK_SECONDS = Option("chunk_seconds", "Seconds of audio fed to the decoder per step.", float,
                       low=MIN_CHUNK_SECONDS, high=MAX_WINDOW_SECONDS, example="2")
FRAME_THRESHOLD = Option("frame_threshold", "Stop a step when attention comes this many 20 ms frames near the "
                                            "end of the audio.", int, low=0, example="20")
PUNCTUATED_PROMPT = Option("punctuated_prompt", "Cut a prompt whose text has run on without punctuation back to "
                                                "its last sentence end (more sentence ends after music, a few "
                                                "more word errors).", bool, example="true", added_later=True)
AUDIO_MAX_LEN = Option("audio_max_len", "Seconds of audio the decoder sees at most.", float,
                       low=MIN_WINDOW_SECONDS, high=MAX_WINDOW_SECONDS, example="20")


@dataclass(frozen=True)
class StreamingOptions:
    """How audio is replayed through the AlignAtt streaming decoder.

    Frames are encoder positions (20 ms). Defaults follow SimulStreaming where it has one.
    """

    chunk_seconds: float = CHUNK_SECONDS.field(1.0)  # audio handed to the session per step when replaying a file
    frame_threshold: int = FRAME_THRESHOLD.field(25)  # stop a token attending within this many frames of the audio end
    # Attention jumping back further than this (1 s) discards the pass: on short windows a loop
    # re-reading committed audio jumps further back, speech's normal jitter far less. SimulStreaming
    # uses 200 (4 s), too far to catch it. Measured: docs/decoding.md#the-streaming-window.
    rewind_threshold: int = 50
    audio_max_len: float = AUDIO_MAX_LEN.field(30.0)  # the audio buffer never grows past this (seconds)
    # Past audio_trim_len seconds (if under audio_max_len) the buffer drops the audio of committed
    # text, preferably whole sentences, down to at least audio_keep_len seconds (None: half the
    # trim length); the text goes into the prompt. None: keep audio to audio_max_len. "auto":
    # AUTO_WINDOW's choice for the text. The encoder is most of a pass, so a shorter window is
    # faster: English keeps its accuracy with 8 / 5 s, another language or a translation needs
    # 15 s. Measured: docs/decoding.md#the-streaming-window (python -m bench.streaming modes).
    audio_trim_len: Union[float, str, None] = AUTO
    audio_keep_len: Optional[float] = None
    max_context_tokens: int = 96  # committed text kept as prompt (<|startofprev|> ...)
    # A prompt that runs on without punctuation is cut back to its last sentence end
    # (streaming/words.py ``punctuated_context``): more sentence ends, a few more word errors. Off:
    # the default keeps sentence marks by itself (``policy.decide``).
    # Measured: docs/decoding.md#decoding-options (python -m bench.peers podcast; bench.streaming modes).
    punctuated_prompt: bool = PUNCTUATED_PROMPT.field(False)
    # prompt text at the start; scrolls out as text comes (was init_prompt: fingerprinted so)
    initial_prompt: Optional[str] = INITIAL_PROMPT.field(None, fingerprinted_as="init_prompt")
    static_init_prompt: Optional[str] = None  # prompt text always kept (names, terms)
    # None: greedy, as in one-shot (1 too); fingerprinted as 1, the default it had before
    beam_size: Optional[int] = BEAM_SIZE.field(None, default_fingerprinted_as=1)
    language: Optional[str] = LANGUAGE.field(None)  # None: English for .en models, detected for multilingual
    task: str = TASK.field("transcribe")
    max_tokens_per_second: float = 12.0  # token budget per second of undecoded audio (loops)
    # A pass is no speech (commits nothing; before any committed word the buffer keeps only its
    # end) when <|nospeech|> is above no_speech_threshold and its text is unlikely (mean token
    # log probability under logprob_threshold), or <|nospeech|> is above no_speech_certain
    # (then it is not even decoded): openai/whisper's rule, as one-shot mode has it. The
    # no-speech probability alone is not enough: the multilingual model gives it high to clear
    # speech (measured: docs/decoding.md#the-non-speech-rules-measurements).
    no_speech_threshold: Optional[float] = NO_SPEECH_THRESHOLD.field(0.6)
    logprob_threshold: Optional[float] = LOGPROB_THRESHOLD.field(-1.0)
    no_speech_certain: Optional[float] = NO_SPEECH_CERTAIN.field(0.9)
    language_detect_seconds: float = 2.0  # audio needed before detecting the language
    audio_track: Union[int, str, None] = AUDIO_TRACK.field(None)  # None: the first audio stream
    vad: bool = VAD.field(False)  # decode only the speech spans (transcriber/engines/vad.py)

    def __post_init__(self):
        def check(ok: bool, message: str):
            if not ok:
                raise ValueError(message)

        check_fields(self)
        check(self.rewind_threshold >= 0, f"rewind_threshold must be >= 0, not {self.rewind_threshold}")
        if self.chunk_seconds > self.audio_max_len:
            raise OptionError("{a} ({x:g}) must not exceed {b} ({y:g})", {"a": CHUNK_SECONDS.name,
                              "b": AUDIO_MAX_LEN.name}, x=self.chunk_seconds, y=self.audio_max_len)
        if self.frame_threshold * TIME_PRECISION >= self.audio_max_len:
            raise OptionError("{a} ({x} frames) must be shorter than {b}", {"a": FRAME_THRESHOLD.name,
                              "b": AUDIO_MAX_LEN.name}, x=self.frame_threshold)
        trim = self.audio_trim_len
        check(trim is None or trim == AUTO or (isinstance(trim, (int, float)) and trim > 0),
              f"audio_trim_len must be None, {AUTO!r} or > 0, not {trim!r}")
        check(self.audio_keep_len is None or trim in (None, AUTO) or 0 < self.audio_keep_len < trim,
              f"audio_keep_len must be None or between 0 and audio_trim_len ({self.audio_trim_len}), "
              f"not {self.audio_keep_len}")
        check(self.max_context_tokens >= 0, f"max_context_tokens must be >= 0, not {self.max_context_tokens}")
        check(self.max_tokens_per_second > 0,
              f"max_tokens_per_second must be > 0, not {self.max_tokens_per_second}")
        check(self.language_detect_seconds >= 0,
              f"language_detect_seconds must be >= 0, not {self.language_detect_seconds}")

    def window(self, english: bool) -> tuple[Optional[float], Optional[float]]:
        """(audio_trim_len, audio_keep_len) in seconds: "auto" resolved for English transcribed
        (``english``) or another language or a translation."""
        if self.audio_trim_len == AUTO:
            trim, keep = AUTO_WINDOW[english]
            mine = self.audio_keep_len
            return trim, mine if mine is not None and mine < trim else keep
        return self.audio_trim_len, self.audio_keep_len

    @property
    def no_speech(self) -> NoSpeechRule:
        """The no-speech rule of these options (``nonspeech.NoSpeechRule``)."""
        from transcriber.engines.nonspeech import NoSpeechRule  # numpy: not at import (the CLI's --help reads these options)

        return NoSpeechRule(self.no_speech_threshold, self.logprob_threshold, self.no_speech_certain)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "StreamingOptions":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
