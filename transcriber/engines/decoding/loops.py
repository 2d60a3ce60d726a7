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
from typing import Optional, Sequence

import numpy as np

from transcriber.constants import TIME_PRECISION
from transcriber.engines.nonspeech import FRAME, GATE
from transcriber.transcript.types import compression_ratio

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


def judge(tokens, tokenizer, loud: np.ndarray, audio_seconds: float,
          said_before: Sequence[str] = ()) -> tuple[list[tuple[int, int]], Optional[int]]:
    """The looping parts of a window's tokens (text and timestamps): the token ranges (first,
    stop) of the segments that say again what the window said before them, or what its prompt
    said (``said_before``: the prompt's words), where the audio does not hold them; and the
    first token of a segment that loops inside itself (the tail from there loops; None)."""
    said, unheld = list(said_before), []
    for first, stop, start, end in segments(tokens, tokenizer.timestamp_begin, tokenizer.eot):
        text_tokens = [t for t in tokens[first:stop] if t < tokenizer.eot]
        text = tokenizer.decode(text_tokens)
        words = _words(text)
        if GATE.repeats(text, len(words)):
            return unheld, first
        repeat = len(words) >= MIN_REPEAT_WORDS and _contains(said, words)
        if repeat and not (end == end and held_by_audio(start, end, len(text_tokens), loud, audio_seconds)):
            unheld.append((first, stop))
        else:
            said += words
    return unheld, None


def prompt_words(prompt: Sequence[int], tokenizer) -> list[str]:
    return _words(tokenizer.decode([t for t in prompt if t < tokenizer.eot]))


def _contains(said: list[str], words: list[str]) -> bool:
    """``words`` (or its first MIN_REPEAT_WORDS or more) were said already, in a row."""
    n = min(len(words), max(MIN_REPEAT_WORDS, len(words) // 2))
    head = words[:n]
    return any(said[i:i + n] == head for i in range(len(said) - n + 1))


def loops(result, tokenizer, loud: np.ndarray, audio_seconds: float, said_before: Sequence[str] = ()) -> bool:
    """The window's text (a ``DecodingResult``) loops beyond what the audio holds: a run of a
    word or phrase past speech's (anywhere in it), or a segment saying again what the window
    or its prompt said, where the audio does not hold it (``judge``). The zlib ratio alone no
    longer decides: speech said twice compresses like a loop. A short line after 4-7 s of
    leading silence read " 8. The Press Yard<|7.00|><|8.00|> 8. The Press Yard<|10.00|>" over
    5.6 s of audio: written twice, the second copy squeezed into its last frame; a line after
    20 s of quiet read the line before it again first, over the quiet (the prompt's words)."""
    if _RUNS_ONLY.repeats(result.text, len(result.text.split())):
        return True
    unheld, tail = judge(result.tokens, tokenizer, loud, audio_seconds, said_before)
    return bool(unheld) or tail is not None


def cut(result, tokenizer, loud: np.ndarray, audio_seconds: float, said_before: Sequence[str] = ()):
    """``result`` without its looping parts (``judge``): its unheld repeats taken out, its tail
    cut from a segment that loops inside itself, ending on the last kept segment's end
    timestamp twice (so the walk resumes there and reads the cut audio again). None when
    nothing is left, or nothing was cut."""
    unheld, tail = judge(result.tokens, tokenizer, loud, audio_seconds, said_before)
    if not unheld and tail is None:
        return None
    dropped = set()
    for first, stop in unheld:  # the segment with its own timestamps
        dropped |= set(range(first - 1 if first and result.tokens[first - 1] >= tokenizer.timestamp_begin
                             else first, stop + 1))
    keep = [i for i in range(len(result.tokens) if tail is None else tail) if i not in dropped]
    tokens = [result.tokens[i] for i in keep]
    logprobs = [result.token_logprobs[i] if i < len(result.token_logprobs) else 0.0 for i in keep]
    while len(tokens) >= 2 and tokens[-1] >= tokenizer.timestamp_begin and tokens[-2] >= tokenizer.timestamp_begin:
        tokens.pop()  # a dropped segment's or the tail's own start timestamp
        logprobs.pop()
    if not any(t < tokenizer.eot for t in tokens):
        return None
    if tokens[-1] >= tokenizer.timestamp_begin and (tail is not None or keep[-1] < len(result.tokens) - 1):
        tokens.append(tokens[-1])
        logprobs.append(0.0)
    text = tokenizer.decode([t for t in tokens if t < tokenizer.eot])
    kept = [p for t, p in zip(tokens, logprobs) if t < tokenizer.eot]
    return replace(result, tokens=tuple(tokens), text=text, token_logprobs=tuple(logprobs),
                   avg_logprob=float(np.mean(kept)) if kept else result.avg_logprob,
                   compression_ratio=compression_ratio(text))
