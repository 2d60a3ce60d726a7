"""A doubted streaming pass read again as one-shot reads a window (``OneShotReading``).

A pass's own scores do not tell speech from non-speech (tiny.en): a pass after a pause in the
Apollo 11 radio (speech through noise) scored (no-speech 0.45, log probability -1.37), over
clicks (0.58, -1.81), over babble of reversed voices (0.53, -0.75), over beeps (0.71, -0.82);
their one-shot windows (0.38, -0.95: kept), (0.58, -3.75 at temperature 1: unreadable), (0.53,
-0.83: a guess), (0.77, -1.23: no speech). So a pass its scores doubt (``GATE.needs_rereading``)
is read again: its buffer padded to a 30 s window and decoded with one-shot's temperature
fallback, and refused when one-shot would refuse that reading, or when the reading is a guess
that does not begin with what the pass said (``GATE.is_guessed_again``).

Two rules go further, for the multilingual base model (bench/peers/nonspeech_set.py):

- **The stream's first words are read again sooner** (``nonspeech.FIRST_WORDS_CORNER``): with
  nothing committed before them, a pass's text rests on a second or two of audio alone. Babble
  of six reversed voices (30 s, seed 1) began " Zimmer is in the middle of the river," at 2 s:
  no-speech 0.10, log probability -1.87, the very scores of the Apollo 11 radio's real " guys
  and" after a pause (0.11, -1.94), which goes on from committed words. Read again: " Sunglasses?
  Are you ready for battle?" at temperature 1 (unreadable).
- **On the last pass both readings decode the same audio** (padded to a 30 s window): two
  greedy readings of the same input that disagree are guesses, at any temperature
  (``same_audio``). Over 15 s of babble (seed 0) base's last pass wrote " Yes, I'm
  going to stop." (0.30, -1.67); read again: " If so, thank you. Yes, thank you. Wow. Thank you.
  Thank you." (0.30, -0.73, temperature 0). Before the last pass the two readings see different
  audio (the pass's buffer unpadded, or padded by 10 s), and speech may read otherwise there:
  base's first pass over a TIMIT sentence " She had a dark suit in" (2 s) read again " She had
  Jadaksew in greasy water." (0.04, -0.71): kept.
"""

from __future__ import annotations

import logging
import math
from typing import Callable, Optional

import numpy as np

from transcriber.constants import FRAMES_PER_SECOND, HOP_LENGTH, SAMPLE_RATE
from transcriber.engines.decoding import guard
from transcriber.engines.decoding.options import DecodingOptions, TranscribeOptions
from transcriber.engines.decoding.task import DecodingResult
from transcriber.model.whisper import Whisper
from transcriber.engines.nonspeech import GATE, is_sound_tag, is_vocables
from transcriber.engines.oneshot import OneShotEngine
from transcriber.model.tokenizer import Tokenizer
from transcriber.transcript.types import Word
from transcriber.engines.streaming.alignatt import PassResult

_log = logging.getLogger(__name__)


class OneShotReading:
    """A pass's buffer read again as one-shot reads a window: its first ``n_mel`` frames padded to
    a 30 s window (``encode``, the session's) and decoded with one-shot's temperature fallback.
    The one-shot engine is made on first use (only doubted passes are read again)."""

    def __init__(self, model: Whisper, task: str, encode: Callable[[int], object]):
        self._model, self._task, self._encode = model, task, encode
        self._engine: Optional[OneShotEngine] = None

    def _one_shot(self, language: Optional[str]) -> OneShotEngine:
        if self._engine is None:
            self._engine = OneShotEngine(self._model, TranscribeOptions(
                decoding=DecodingOptions(task=self._task, language=language)))
        return self._engine

    def read(self, n_mel: int, tokenizer: Tokenizer, language: Optional[str]) -> DecodingResult:
        """The reading of the buffer's first ``n_mel`` frames."""
        return self._one_shot(language).decode_with_fallback(self._encode(n_mel), [], tokenizer, n_mel)

    def unheard(self, samples: np.ndarray, offset: float, seen: float, last_end: float,
                tokenizer: Tokenizer) -> list[Word]:
        """The guard (``decoding/guard.py``): the voiced stretches of ``samples`` (the buffer
        after its committed words, from ``offset`` seconds of the source; the pass saw ``seen``
        seconds) each read alone as one-shot's guard reads one (``OneShotEngine.read_alone``),
        after ``last_end`` (the last word emitted): their words."""
        levels = GATE.frame_levels(samples)
        out: list[Word] = []
        for start, end in guard.unheard(levels, [], offset, offset + len(levels) * guard.FRAME_S, seen):
            seek = math.ceil(max(start, last_end) * FRAMES_PER_SECOND)
            clip = samples[max(0, round((seek / FRAMES_PER_SECOND - offset) * SAMPLE_RATE)):
                           max(0, round((end - offset) * SAMPLE_RATE))]
            if len(clip) < HOP_LENGTH:
                continue
            segments = self._one_shot(tokenizer.language).read_alone(clip, seek, last_end, tokenizer)
            words = [w for s in segments for w in s.words if w.start >= last_end]
            _log.debug("guard: %.2f-%.2f s read alone: %r", start, end, "".join(w.text for w in words))
            if words:
                out += words
                last_end = words[-1].end
        return out

    def refuses(self, window: DecodingResult, n_mel: int) -> bool:
        """One-shot writes nothing of this reading (no speech, no word, looping, unreadable, a
        loop heard in a sound), or it is a sound caption or vocables as a whole, or, likely no
        speech by its no-speech probability alone (where one-shot's fallback stops), an unlikely
        start, which one-shot refuses after a pause (``GATE.is_unlikely_start``): base's last
        pass over the end of a celesta piece wrote " you" (no-speech 0.85), read again " you"
        (0.85, -0.91), and agreeing kept it. (Its German " Hans Jakob Christi", 0.55, is kept.)"""
        ns, lp = window.no_speech_prob, window.avg_logprob
        return (self._engine.refuses(window, n_mel) or is_sound_tag(window.text) or is_vocables(window.text)
                or (self._engine.options.no_speech.is_likely(ns) and GATE.is_unlikely_start(ns, lp)))

    def refuses_doubted(self, result: PassResult, said: str, first: bool, is_last: bool, n_mel: int,
                        tokenizer: Tokenizer, language: Optional[str]) -> bool:
        """A pass (after a pause, or the stream's ``first``) that said ``said``, read again if its
        scores doubt it (``GATE.needs_rereading``), and refused when one-shot refuses that
        reading (``refuses``) or it is a guess that does not begin with what the pass said
        (``GATE.is_guessed_again``; on the ``is_last`` pass, the same audio): base translating
        German, the stream's first pass " Hans Jak" (0.65) read again as " Hans Jakob Christi"
        (0.55, -0.73) is speech. Only doubtful passes pay for the decode: the Apollo 11 radio's
        other passes after pauses scored no-speech 0.09-0.36, the dev set's at most 0.25."""
        mean_logprob = float(np.mean(result.logprobs)) if len(result.logprobs) else None
        if not GATE.needs_rereading(float(result.no_speech_prob), mean_logprob, first):
            return False
        window = self.read(n_mel, tokenizer, language)
        _log.debug("re-judged as one-shot: %r, no-speech %.2f, log probability %.2f at temperature %g",
                   window.text, window.no_speech_prob, window.avg_logprob, window.temperature)
        return self.refuses(window, n_mel) or GATE.is_guessed_again(
            said, window.text, window.no_speech_prob, window.avg_logprob, window.temperature, same_audio=is_last)
