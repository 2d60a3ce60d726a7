"""Repetition judged against the audio: a loop is text beyond what the audio holds, not speech
that repeats.

A window's text compressing like a loop (zlib ratio over the threshold) used to send it through
the temperature fallback, and a text still compressing so at the last temperature dropped the
whole window: ``examples/jfk.flac`` joined twice wrote nothing (its 22 s read right, twice, at
every temperature: ratio 2.42), three times 8 of 66 words. Here the text is cut into its
timestamped segments, and a segment that says again what the window said before it counts as
a loop only when the audio does not hold it: its time span too short for its tokens, past the
window's audio, or mostly silent. A segment that loops inside itself (a word or phrase run past
what speech does, ``NonSpeechGate.repeats``) is a loop wherever it lies. The window keeps what
comes before its first looping segment (``cut``): the tail is cut, never the window.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional

import numpy as np

from ..constants import TIME_PRECISION
from ..nonspeech import FRAME, GATE
from ..types import compression_ratio

# The time a token of speech takes at least: 12 tokens a second (speech runs at 3-5); a repeat
# squeezed under it is text the audio does not hold (the decoder looping between two timestamps).
MIN_SECONDS_PER_TOKEN = 1 / 12
# The share of a repeat's 20 ms frames that must be loud (``GATE.silence_db``) for it to be heard.
MIN_LOUD_SHARE = 0.5
MIN_REPEAT_WORDS = 3  # a repeat shorter than this is judged by the n-gram runs alone ("no, no")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_RUNS_ONLY = replace(GATE, min_compressed_chars=10 ** 9)  # NonSpeechGate.repeats without its zlib ratio


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def segments(tokens, timestamp_begin: int, eot: int) -> list[tuple[int, int, float, float]]:
    """The timestamped segments of a window's tokens: (first token, end token (exclusive), start s,
    end s), relative to the window; text outside timestamps is one segment of unknown span (nan)."""
    out, first, start = [], None, float("nan")
    for i, t in enumerate(tokens):
        if t >= timestamp_begin:
            time = (t - timestamp_begin) * TIME_PRECISION
            if first is not None and i > first:
                out.append((first, i, start, time))
                first = None
            else:
                first, start = i + 1, time
        elif first is None:
            first, start = i, float("nan")
    if first is not None and first < len(tokens):
        out.append((first, len(tokens), start, float("nan")))
    return [s for s in out if any(tokens[i] < eot for i in range(s[0], s[1]))]


def held_by_audio(start: float, end: float, n_tokens: int, loud: np.ndarray, audio_seconds: float) -> bool:
    """The audio holds a segment of ``n_tokens`` text tokens timed ``start``-``end`` (window
    seconds): long enough for them, within the window's audio, and mostly loud (``loud``: (F,) the
    window's 20 ms frames at ``GATE.silence_db`` or above)."""
    if not (end - start >= n_tokens * MIN_SECONDS_PER_TOKEN and end <= audio_seconds + 0.5):
        return False
    frames = loud[int(start / 0.02):max(int(start / 0.02) + 1, int(end / 0.02))]
    return len(frames) > 0 and float(np.mean(frames)) >= MIN_LOUD_SHARE


def loop_start(tokens, tokenizer, text_of, loud: np.ndarray, audio_seconds: float) -> Optional[int]:
    """The index of the first token of the window's looping tail (``tokens``: text and timestamps;
    ``text_of(token ids) -> str``), or None when nothing loops beyond what the audio holds."""
    said: list[str] = []
    for first, stop, start, end in segments(tokens, tokenizer.timestamp_begin, tokenizer.eot):
        text_tokens = [t for t in tokens[first:stop] if t < tokenizer.eot]
        text = text_of(text_tokens)
        words = _words(text)
        if GATE.repeats(text, len(words)):
            return first
        repeat = len(words) >= MIN_REPEAT_WORDS and _contains(said, words)
        if repeat and not (end == end and held_by_audio(start, end, len(text_tokens), loud, audio_seconds)):
            return first
        said += words
    return None


def _contains(said: list[str], words: list[str]) -> bool:
    """``words`` (or its first MIN_REPEAT_WORDS or more) were said already, in a row."""
    n = min(len(words), max(MIN_REPEAT_WORDS, len(words) // 2))
    head = words[:n]
    return any(said[i:i + n] == head for i in range(len(said) - n + 1))


def loops(result, tokenizer, loud: np.ndarray, audio_seconds: float) -> bool:
    """The window's text (a ``DecodingResult``) loops beyond what the audio holds: a run of a
    word or phrase past speech's (anywhere in it), or a segment saying again what the window
    said, where the audio does not hold it (``loop_start``). The zlib ratio alone no longer
    decides: speech said twice compresses like a loop. A short line after 4-7 s of leading
    silence read " 8. The Press Yard<|7.00|><|8.00|> 8. The Press Yard<|10.00|>" over 5.6 s of
    audio: written twice, the second copy squeezed into its last frame."""
    if _RUNS_ONLY.repeats(result.text, len(result.text.split())):
        return True
    return loop_start(result.tokens, tokenizer, tokenizer.decode, loud, audio_seconds) is not None


def cut(result, tokenizer, loud: np.ndarray, audio_seconds: float):
    """``result`` without its looping tail (``loop_start``), ending on its last kept segment's end
    timestamp twice (so the walk resumes there and reads the cut audio again); None when the
    tail is the whole text or there is no tail to cut."""
    at = loop_start(result.tokens, tokenizer, tokenizer.decode, loud, audio_seconds)
    if not at:
        return None
    tokens = list(result.tokens[:at])
    while tokens and tokens[-1] >= tokenizer.timestamp_begin and len(tokens) >= 2 \
            and tokens[-2] >= tokenizer.timestamp_begin:
        tokens.pop()  # the looping segment's own start timestamp
    if not tokens or tokens[-1] < tokenizer.timestamp_begin:
        return None
    tokens.append(tokens[-1])
    logprobs = list(result.token_logprobs[:len(tokens) - 1]) + [0.0]
    text = tokenizer.decode([t for t in tokens if t < tokenizer.eot])
    kept = [p for t, p in zip(tokens, logprobs) if t < tokenizer.eot]
    return replace(result, tokens=tuple(tokens), text=text, token_logprobs=tuple(logprobs),
                   avg_logprob=float(np.mean(kept)) if kept else result.avg_logprob,
                   compression_ratio=compression_ratio(text))
