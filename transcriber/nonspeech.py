"""What Whisper writes over music and noise, and how it is told apart from speech.

Trained on captions, Whisper names sounds ("Applause", "Music") and, over music, invents words
it is barely sure of. Measured with tiny.en on the recordings (``../shared/data``):

- Brahms' Hungarian Dance no. 5 (no speech): one-shot wrote " Harrison" (mean word probability
  0.00001) and " Applause" (0.51); streaming " The" (0.027), " End" (0.038), " APPLAUSE" (0.73);
- the dev set's speech (short_en + long_en): the lowest mean word probability of a one-shot
  segment is 0.67 (36 segments), the lowest streamed word probability above 0.1 (820 words).
- With a 10 s streaming buffer, the Brahms gave " The" (0.027), " End" (0.025), then one pass
  committing " of the end." (0.094, 0.398, 0.309: mean 0.27); over the dev set's speech, 323
  passes, the lowest mean of a pass's words is 0.36 (" A"), leaving out a pass that committed
  only a comma (0.29).

So a segment (one-shot) or word (streaming) is dropped when it is only a sound tag, or when the
model is far less sure of it than of any speech measured; and a streaming pass's words are
judged together as a one-shot segment is (their mean, punctuation aside, under 0.3). Room noise
never gets this far: the no-speech probability skips it first.

``GATE`` (a ``NonSpeechGate``) is the one object both modes ask, before and after decoding:

- silence: audio none of whose 20 ms frames reaches ``silence_db`` (RMS, dBFS) is not decoded at
  all. The loudest 20 ms frame of every speech recording of the dev set (short_en, long_en,
  non_en, extra) is at -30 dBFS or louder (the quietest, the 1 s Chinese clip: -29.9); the
  LibriVox room noise reaches -42. So -50 leaves 20 dB below the quietest speech and still
  takes digital silence and near-silence (noise under -50 dBFS) for silence. One-shot skipped
  only windows whose samples all stay under -70 dBFS; streaming encoded silence pass after pass.
- repetition: text that repeats a word or an n-gram past what speech does (``repeats``) is a
  loop, as one-shot's compression-ratio check finds per window. Streaming judges each pass with
  the words committed before it, so a loop spread over many passes ("3 3 3 ..." after "one two
  three", one or two a pass over music) is caught too.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .types import Segment, Word

# Caption words for sounds, as Whisper writes them bare once their brackets are suppressed.
SOUND_TAGS = frozenset({"applause", "music", "laughter", "laughing", "laughs", "cheering", "cheers",
                        "silence", "noise", "inaudible", "blank_audio", "no speech"})
# mean word probability of a one-shot segment (speech: >= 0.67) or of a streaming pass's words
# (speech: >= 0.36)
MIN_SEGMENT_PROBABILITY = 0.3
MIN_WORD_PROBABILITY = 0.08  # streaming: probability of a word (speech: > 0.1)
# A short text after a pause (ISOLATION seconds without speech) holding a word the model is
# barely sure of is Whisper's stock caption, not speech: " Thank you." over the end of the
# Brahms (" Thank" 0.12-0.14 in both modes, 0.01 in faster-whisper without its VAD).
ISOLATED_MAX_WORDS = 3
ISOLATED_MIN_PROBABILITY = 0.15
ISOLATION = 2.0

_NOT_LETTERS = re.compile(r"[^\w ]+")
# Sounds Whisper spells out over calls, hums and song: "Oh oh", "WOO. WOO.", "Mmm" (64 s of whale
# song: 30 "Mmm" in streaming, probabilities 0.5-0.94; a generated glide with harmonics: one-shot
# " Wooh! WOH, WOO OOH!"). Text made only of them is a sound, not speech. The cost: a line that
# is only "Oh." or "Hmm." is not subtitled (inside speech, streaming keeps them: see speech_words).
_VOCABLE = re.compile(r"(o+h*|w+h?o+[ah]*|a+h+|u+h+|u+m+|h*m+|h+m+|l+a+|n+a+|d+a+|h+a+|o+o+[hw]*)")


def is_sound_tag(text: str) -> bool:
    """" Applause.", "[MUSIC]", "(laughter)": a caption of a sound, not speech."""
    return " ".join(_NOT_LETTERS.sub(" ", text).lower().split()) in SOUND_TAGS


def is_vocables(text: str) -> bool:
    """" Oh oh!", " WOO. WOO.", " Mmm": only sounds spelled out (``_VOCABLE``), no word."""
    words = _NOT_LETTERS.sub(" ", text).lower().split()
    return bool(words) and all(_VOCABLE.fullmatch(w) for w in words)


def is_isolated_guess(words: Sequence[Word]) -> bool:
    """Words that, after a pause, are a caption rather than speech (``ISOLATED_*``)."""
    return 0 < len(words) <= ISOLATED_MAX_WORDS and min(w.probability for w in words) < ISOLATED_MIN_PROBABILITY


def is_speech_segment(segment: Segment) -> bool:
    """Keep a one-shot segment: it has words, is not a sound tag or vocables, and is not a guess."""
    if not segment.words or is_sound_tag(segment.text) or is_vocables(segment.text):
        return False
    return sum(w.probability for w in segment.words) / len(segment.words) >= MIN_SEGMENT_PROBABILITY


def is_speech_word(word: Word) -> bool:
    """Keep a streamed word: not a sound tag, and not a guess."""
    return not is_sound_tag(word.text) and word.probability >= MIN_WORD_PROBABILITY


def speech_words(words: Sequence[Word], after_speech: bool = False) -> list[Word]:
    """The words of one streaming pass that are speech: sound tags and guesses dropped, and all
    of them when the pass as a whole is a guess (mean probability of its words, punctuation
    aside, under ``MIN_SEGMENT_PROBABILITY``), or only vocables (``is_vocables``) or an isolated
    guess (``is_isolated_guess``) unless it goes on from speech (``after_speech``: "Oh," then
    "I see" in the next pass)."""
    kept = [w for w in words if is_speech_word(w)]
    if not after_speech and (is_vocables("".join(w.text for w in kept)) or is_isolated_guess(kept)):
        return []
    judged = [w.probability for w in kept if _NOT_LETTERS.sub("", w.text).strip()] or [1.0]
    return kept if sum(judged) / len(judged) >= MIN_SEGMENT_PROBABILITY else []


FRAME = 320  # samples: 20 ms at 16 kHz
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


@dataclass(frozen=True)
class NonSpeechGate:
    """What both modes treat as not speech (see the module docstring)."""

    silence_db: float = -50.0  # no 20 ms frame this loud (RMS, dBFS): silence
    max_unigram_run: int = 3  # a word more often than this in a row is a loop ("no, no, no" is speech)
    max_ngram_run: int = 2  # an n-gram (2 <= n <= max_n) repeated more often than this in a row
    max_n: int = 4
    compression_ratio: float = 2.4  # one-shot's threshold, for text of min_compressed_chars or more
    min_compressed_chars: int = 60

    def __post_init__(self):
        if not -120 < self.silence_db < 0:
            raise ValueError(f"silence_db must be in (-120, 0) dBFS, not {self.silence_db}")
        if self.max_unigram_run < 1 or self.max_ngram_run < 1 or self.max_n < 1:
            raise ValueError("repetition limits must be >= 1")

    def loud_frames(self, samples: np.ndarray) -> np.ndarray:
        """(n // FRAME,) bool: which whole 20 ms frames of ``samples`` (n,) reach ``silence_db``."""
        return self.frame_levels(samples) >= self.silence_db

    @staticmethod
    def frame_levels(samples: np.ndarray) -> np.ndarray:
        """(n // FRAME,) the RMS level (dBFS) of each whole 20 ms frame of ``samples`` (n,)."""
        n = len(samples) // FRAME
        frames = np.asarray(samples[: n * FRAME], dtype=np.float64).reshape(n, FRAME)
        return 10 * np.log10(np.maximum(np.mean(frames * frames, axis=1), 1e-20))

    def _tail_is_loud(self, samples: np.ndarray) -> bool:
        """The samples after the last whole 20 ms frame (if any) reach ``silence_db``."""
        tail = np.asarray(samples[len(samples) // FRAME * FRAME:], dtype=np.float64)
        return bool(len(tail)) and np.mean(tail * tail) >= 10 ** (self.silence_db / 10)

    def is_silent(self, samples: np.ndarray) -> bool:
        """No 20 ms frame of ``samples`` (a tail under 20 ms counts as one) is loud."""
        return not self.loud_frames(samples).any() and not self._tail_is_loud(samples)

    def last_loud(self, samples: np.ndarray) -> Optional[int]:
        """The sample just after the last loud 20 ms frame of ``samples``; None if silent."""
        loud = np.flatnonzero(self.loud_frames(samples))
        if len(loud):
            return int(loud[-1] + 1) * FRAME
        return len(samples) if self._tail_is_loud(samples) else None

    def repeats(self, text: str, new_words: int) -> bool:
        """The last ``new_words`` words of ``text`` extend a run of one word past
        ``max_unigram_run``, or of an n-gram past ``max_ngram_run``; or ``text`` compresses like
        a loop (zlib ratio over ``compression_ratio``, on long enough text)."""
        words = [w.lower() for w in _WORD.findall(text)]
        for n in range(1, self.max_n + 1):
            limit = self.max_unigram_run if n == 1 else self.max_ngram_run
            for end in range(max(n * (limit + 1), len(words) - new_words + 1), len(words) + 1):
                gram = words[end - n:end]
                runs = 1
                while end - n * (runs + 1) >= 0 and words[end - n * (runs + 1): end - n * runs] == gram:
                    runs += 1
                if runs > limit:
                    return True
        data = text.strip().encode("utf-8")
        return len(data) >= self.min_compressed_chars and len(data) / len(zlib.compress(data)) > self.compression_ratio

    is_speech_segment = staticmethod(is_speech_segment)
    is_isolated_guess = staticmethod(is_isolated_guess)
    speech_words = staticmethod(speech_words)


GATE = NonSpeechGate()


@dataclass(frozen=True)
class NoSpeechRule:
    """openai/whisper's no-speech rule, for both modes: a window (or pass) is silence when its
    no-speech probability (at <|startoftranscript|>) is over ``threshold`` and its text is
    unlikely too (mean token log probability at most ``logprob_threshold``; None: the
    probability alone decides), or when that probability is over ``certain`` whatever the text.
    Built from the mode's options (``TranscribeOptions.no_speech``, ``StreamingOptions.no_speech``)."""

    threshold: Optional[float] = 0.6
    logprob_threshold: Optional[float] = -1.0
    certain: Optional[float] = None

    @property
    def undecoded_above(self) -> Optional[float]:
        """Over this probability the text cannot save the audio, so it need not be decoded
        (``decode_loop`` then ends at once with ``Ending.NO_SPEECH``); None: always decode."""
        return self.threshold if self.logprob_threshold is None else self.certain

    def is_silence(self, no_speech_prob: float, avg_logprob: Optional[float]) -> bool:
        """The verdict on decoded audio. ``avg_logprob`` None: no text to judge (a streaming
        pass that stopped before its first token waits for more audio), so not silence unless
        the probability alone decides."""
        if self.threshold is None or no_speech_prob <= self.threshold:
            return False
        if self.certain is not None and no_speech_prob > self.certain:
            return True
        if self.logprob_threshold is None:
            return True
        return avg_logprob is not None and avg_logprob <= self.logprob_threshold
