"""The temperature fallback of one 30 s window and the verdicts on its text (one-shot, and the
streaming session's re-reading of a stretch): how many tokens it may sample, when its text loops
or is unlikely, and when nothing of it is written. ``OneShotEngine`` is a ``WindowDecoder``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional, Sequence

import numpy as np

from transcriber.constants import FRAMES_PER_SECOND, SAMPLE_RATE
from transcriber.model.mel import log_mel_spectrogram
from transcriber.model.state import DecoderState
from transcriber.engines.nonspeech import FRAME, GATE
from transcriber.model.tokenizer import Tokenizer
from transcriber.engines.decoding import loops
from transcriber.engines.decoding.task import DecodingResult, DecodingTask

# Tokens a window may sample (text and timestamps) per second of its audio, on top of
# TOKEN_SLACK (the timestamps and a word): speech runs at 3-5 text tokens a second, so a decode
# past that is looping, and without the bound a short clip could loop to the token cap at every
# temperature. Measured: docs/decoding.md#the-non-speech-rules-measurements (the fallback's bounds).
MAX_TOKENS_PER_SECOND = 12
TOKEN_SLACK = 6
# A window of less audio than this that loops at the first temperature is dropped without the
# fallback: over so little audio the hotter temperatures loop too, and sampling them is costly
# (measured: docs/decoding.md#the-non-speech-rules-measurements).
FALLBACK_MIN_SECONDS = 2.0
SOUND_FRAME_S = FRAME / SAMPLE_RATE  # seconds of one ``loud`` frame (20 ms)


class WindowDecoder:
    """Needs ``model``, ``options`` (``TranscribeOptions``) and ``_no_speech`` (its ``NoSpeechRule``)."""

    def _task(self, temperature: float, prompt: list[int], tokenizer: Tokenizer, n_frames: int) -> DecodingTask:
        opts = self.options
        decoding = replace(opts.decoding, temperature=temperature, prompt=tuple(prompt) or None,
                           sample_len=self._sample_len(n_frames),
                           beam_size=opts.decoding.beam_size if temperature == 0 else None,
                           patience=opts.decoding.patience if temperature == 0 else None,
                           best_of=opts.best_of if temperature > 0 else None)
        return DecodingTask(self.model, tokenizer, decoding, self.model.info.suppress_ids,
                            rng=np.random.default_rng(0))

    def _sample_len(self, n_frames: int) -> int:
        """The most tokens a window of ``n_frames`` mel frames may sample."""
        budget = math.ceil(MAX_TOKENS_PER_SECOND * n_frames / FRAMES_PER_SECOND) + TOKEN_SLACK
        return min(self.options.decoding.sample_len or self.model.dims.n_text_ctx // 2, budget)

    def _looping(self, result: DecodingResult, n_frames: int) -> bool:
        """The decode used its whole token budget: its text stopped making progress."""
        return len(result.tokens) >= self._sample_len(n_frames)

    def _unreadable(self, result: DecodingResult, tokenizer: Optional[Tokenizer] = None,
                    loud: Optional[np.ndarray] = None, said: Sequence[str] = ()) -> bool:
        """The whole temperature fallback ran and its last text is still unlikely or still loops
        (``_repetitive``): the model could not read the window. Over non-speech this is where its
        guesses come from; the speech measured stays well inside both bounds at the last
        temperature. Speech said again compresses too: with the window's ``loud`` frames,
        repetition is judged against the audio (``_repetitive``). Measured:
        docs/decoding.md#the-non-speech-rules-measurements (the fallback's bounds)."""
        opts = self.options
        if not (len(opts.temperatures) > 1 and result.temperature == opts.temperatures[-1]):
            return False
        return self._unlikely(result) or self._repetitive(result, tokenizer, loud, said)

    def _unlikely(self, result: DecodingResult) -> bool:
        """The text's mean token log probability is under the fallback's threshold."""
        threshold = self.options.logprob_threshold
        return threshold is not None and result.avg_logprob < threshold

    def _repetitive(self, result: DecodingResult, tokenizer: Optional[Tokenizer] = None,
                    loud: Optional[np.ndarray] = None, said: Sequence[str] = ()) -> bool:
        """The text loops: it repeats a word or phrase past what speech does (``GATE.repeats``),
        or compresses past the threshold. With the window's ``loud`` frames ((F,) bool, 20 ms) a
        text that compresses so loops only where its repeats are beyond what the audio holds
        (``loops.loops``; ``said``: the prompt's words); without them (the streaming session's
        re-reading of a stretch), compressing is enough."""
        threshold = self.options.compression_ratio_threshold
        if loud is not None and tokenizer is not None:
            return loops.loops(result, tokenizer, loud, len(loud) * SOUND_FRAME_S, said)
        return ((threshold is not None and result.compression_ratio > threshold)
                or GATE.repeats(result.text, len(result.text.split())))

    def _cut_loop(self, results: list[DecodingResult], tokenizer: Tokenizer, loud: Optional[np.ndarray],
                  said: Sequence[str]) -> Optional[DecodingResult]:
        """The fallback's texts all loop: the first (coolest) one likely enough whose looping tail
        can be cut (``loops.cut``), without that tail; None if none can. The walk goes on at the
        cut, so the audio of the tail is read again by the next window: a loop costs its tail,
        never the window (speech said again is kept: docs/decoding.md#the-non-speech-rules-measurements)."""
        if loud is None:
            return None
        for result in results:
            cut = loops.cut(result, tokenizer, loud, len(loud) * SOUND_FRAME_S, said)
            if cut is not None and not self._unlikely(cut) and GATE.has_words(cut.text):
                return cut
        return None

    def decode_with_fallback(self, base: DecoderState, prompt: list[int], tokenizer: Tokenizer, n_frames: int,
                             first: Optional[DecodingResult] = None,
                             loud: Optional[np.ndarray] = None) -> DecodingResult:
        """Decode a window of ``n_frames`` mel frames at the first temperature (``first``: its
        result, already decoded elsewhere), then at the next ones while the text is too
        repetitive or too unlikely. A reading without a word (``GATE.has_words``: " ...") ends
        the fallback: the model heard nothing to write, and a hotter sample of it is a guess; no
        window of the speech measured reads without a word at any temperature (measured:
        docs/decoding.md#the-non-speech-rules-measurements). ``loud``: (F,) the window's 20 ms frames at
        ``GATE.silence_db`` or above, to judge repetition by."""
        opts = self.options
        result, tried = None, []
        said = loops.prompt_words(prompt, tokenizer) if loud is not None else ()
        for i, t in enumerate(opts.temperatures):
            if i == 0 and first is not None:
                result = first
            else:
                result = self._task(t, prompt, tokenizer, n_frames).run(base, tokenizer.language)
            tried.append(result)
            too_repetitive = self._repetitive(result, tokenizer, loud, said)
            too_unlikely = self._unlikely(result)
            looping = self._looping(result, n_frames)
            if (self._no_speech.is_likely(result.no_speech_prob) or not GATE.has_words(result.text)
                    or not (too_repetitive or too_unlikely or looping)):
                break
            if looping and n_frames < FALLBACK_MIN_SECONDS * FRAMES_PER_SECOND:
                break
        else:  # every temperature's text looped or was unlikely
            if self._repetitive(result, tokenizer, loud, said):
                return self._cut_loop(tried, tokenizer, loud, said) or result
        return result

    def refuses(self, result: DecodingResult, n_frames: int, tokenizer: Optional[Tokenizer] = None,
                loud: Optional[np.ndarray] = None, said: Sequence[str] = ()) -> bool:
        """Nothing of a window of ``n_frames`` mel frames decoded (with the fallback) as
        ``result`` is written: no speech, no word, a text still looping or unreadable at the
        last temperature, or a loop the no-speech probability ended the fallback on
        (``GATE.is_heard_loop``)."""
        return (self._no_speech.is_silence(result.no_speech_prob, result.avg_logprob) or not GATE.has_words(result.text)
                or self._looping(result, n_frames) or self._unreadable(result, tokenizer, loud, said)  # (at every temperature)
                or (self._no_speech.is_likely(result.no_speech_prob) and GATE.is_heard_loop(result.compression_ratio)))

    def _runs_backwards(self, result: DecodingResult, samples: np.ndarray, n_frames: int) -> bool:
        """A reading the model is unsure of (``GATE.is_doubtful``) of audio (``samples``, its first
        ``n_frames`` mel frames) that runs backwards (``GATE.runs_backwards``): not speech."""
        return (GATE.is_doubtful(result.no_speech_prob, result.avg_logprob) and GATE.runs_backwards(
            np.asarray(log_mel_spectrogram(samples, self.model.dims.n_mels))[:n_frames]))
