"""Word timestamps from cross-attention: DTW over the alignment heads.

After a window is decoded, its text tokens are run through the decoder once more, asking for
cross-attention. The alignment heads' weights (tokens x audio frames) are normalised per frame
across tokens, median filtered along time, averaged over heads, and a monotonic path through
them (DTW) says which audio frame each token starts at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import mlx.core as mx
import numpy as np

from transcriber.constants import FRAMES_PER_SECOND, MEDIAN_FILTER_WIDTH, TIME_PRECISION, TOKENS_PER_SECOND
from transcriber.model.state import DecoderState
from transcriber.model.whisper import Whisper
from transcriber.backend import inference_for
from transcriber.transcript.text import APPEND_PUNCTUATIONS, PREPEND_PUNCTUATIONS, SENTENCE_MARKS, ends_sentence
from transcriber.model.tokenizer import Tokenizer


@dataclass
class WordTiming:
    word: str
    tokens: list[int]
    start: float  # seconds from the window's start
    end: float
    probability: float


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Median over the last axis with reflect padding, like scipy's. x (..., N).

    Sorts the ``width`` shifted copies elementwise (an odd-even transposition network of
    min/max) rather than calling np.median on (..., N, width) windows, which was ~10x slower.
    """
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    n = x.shape[-1]
    rows = [padded[..., i: i + n] for i in range(width)]
    for phase in range(width):
        for i in range(phase % 2, width - 1, 2):
            rows[i], rows[i + 1] = np.minimum(rows[i], rows[i + 1]), np.maximum(rows[i], rows[i + 1])
    return rows[pad]


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cheapest monotonic path through ``cost`` (N tokens, M frames), from (0, 0) to the end.

    The recurrence is swept one anti-diagonal at a time, so each step is one vectorised numpy
    operation (N + M steps instead of N * M Python iterations). The sums are kept by diagonal
    (row d = i + j, column i, cells 1-based): a cell's three predecessors are then slices of
    the two diagonals before it, not gathers (a 120 x 1500 path 27 -> 12 ms). The way back
    takes the cheapest predecessor, the diagonal first, then the one above, on ties (as an
    argmin over them would). Returns (token, frame) indices.
    """
    n, m = cost.shape
    acc = np.full((n + m + 1, n + 1), np.inf)
    acc[0, 0] = 0.0
    rows = np.arange(n + 1)[None, :]
    cols = np.arange(n + m + 1)[:, None] - rows
    inside = (rows >= 1) & (cols >= 1) & (cols <= m)
    by_diagonal = np.full(acc.shape, np.inf)
    by_diagonal[inside] = cost[np.broadcast_to(rows, inside.shape)[inside] - 1, cols[inside] - 1]
    for d in range(2, n + m + 1):
        lo, hi = max(1, d - m), min(n, d - 1)
        best = np.minimum(np.minimum(acc[d - 2, lo - 1:hi], acc[d - 1, lo - 1:hi]), acc[d - 1, lo:hi + 1])
        np.add(by_diagonal[d, lo:hi + 1], best, out=acc[d, lo:hi + 1])
    i, j = n, m
    path = []
    while i > 0 and j > 0:
        path.append((i - 1, j - 1))
        diagonal, above, left = acc[i + j - 2, i - 1], acc[i + j - 1, i - 1], acc[i + j - 1, i]
        if diagonal <= above and diagonal <= left:
            i, j = i - 1, j - 1
        elif above <= left:
            i -= 1
        else:
            j -= 1
    path = np.array(path[::-1]).reshape(-1, 2)
    return path[:, 0], path[:, 1]


def attention_matrix(weights: list[mx.array], heads: np.ndarray, n_frames: int) -> np.ndarray:
    """The alignment heads' attention over the window's real audio, (T tokens, n_frames/2).

    ``weights`` per layer (1, H, T, S) are softmaxed over all S positions; restricting to the
    first ``n_frames // 2`` and renormalising equals a softmax over just those positions.
    """
    n_pos = max(1, n_frames // 2)
    stacked = mx.stack([weights[layer][0, head, :, :n_pos] for layer, head in heads.tolist()])
    w = np.array(stacked, dtype=np.float64)  # (heads, T, n_pos)
    w = w / np.maximum(w.sum(axis=-1, keepdims=True), 1e-10)
    w = (w - w.mean(axis=-2, keepdims=True)) / np.maximum(w.std(axis=-2, keepdims=True), 1e-10)
    # head by head: the filter's shifted copies of all heads at once were the one-shot peak RSS
    w = np.stack([median_filter(h, MEDIAN_FILTER_WIDTH) for h in w])
    return w.mean(axis=0)


def find_alignment(model: Whisper, tokenizer: Tokenizer, base: DecoderState, text_tokens: list[int],
                   token_probs: list[float], n_frames: int) -> list[WordTiming]:
    """Word timings for ``text_tokens`` decoded from the window in ``base`` (n_frames mel frames).

    ``token_probs`` are the tokens' probabilities from decoding, which saves this pass the
    vocabulary projection: it only needs the cross-attention.
    """
    if not text_tokens:
        return []
    sot = list(tokenizer.sot_sequence) + [tokenizer.no_timestamps]
    tokens = sot + list(text_tokens) + [tokenizer.eot]
    _, _, weights = inference_for(model).decode(mx.array([tokens]), base, want_weights=model.alignment_layers,
                                                want_logits=False)
    token_probs = np.asarray(token_probs, dtype=np.float64)

    # rows: the no-timestamps token (where the first word's start shows), then the text tokens
    matrix = attention_matrix(weights, model.alignment_heads, n_frames)[len(sot) - 1: -1]
    text_indices, time_indices = dtw(-matrix)

    words, word_tokens = tokenizer.split_to_word_tokens(list(text_tokens) + [tokenizer.eot])
    if len(word_tokens) <= 1:
        return []
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] / TOKENS_PER_SECOND
    starts = jump_times[boundaries[:-1]]
    ends = jump_times[boundaries[1:]]
    probs = [float(np.mean(token_probs[i:j])) for i, j in zip(boundaries[:-1], boundaries[1:])]
    return [WordTiming(w, t, float(s), float(e), p)
            for w, t, s, e, p in zip(words, word_tokens, starts, ends, probs)]


def merge_punctuations(alignment: list[WordTiming]) -> None:
    """Attach opening punctuation to the next word and closing punctuation to the previous."""
    i = len(alignment) - 2
    j = len(alignment) - 1
    while i >= 0:
        prev, cur = alignment[i], alignment[j]
        if prev.word.startswith(" ") and prev.word.strip() in PREPEND_PUNCTUATIONS:
            cur.word = prev.word + cur.word
            cur.tokens = prev.tokens + cur.tokens
            prev.word, prev.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(alignment):
        prev, cur = alignment[i], alignment[j]
        if not prev.word.endswith(" ") and cur.word in APPEND_PUNCTUATIONS:
            prev.word = prev.word + cur.word
            prev.tokens = prev.tokens + cur.tokens
            cur.word, cur.tokens = "", []
        else:
            i = j
        j += 1


def clamp_long_words(alignment: list[WordTiming]) -> tuple[float, float]:
    """Cap words that DTW stretched over a pause next to a sentence end (where pauses are).

    Returns (median word duration, max duration), both capped, for the segment-edge fixes.
    """
    durations = np.array([w.end - w.start for w in alignment])
    durations = durations[durations.nonzero()]
    median = min(0.7, float(np.median(durations))) if len(durations) else 0.0
    max_duration = median * 2
    if len(durations):
        for prev, w in zip(alignment, alignment[1:]):
            if w.end - w.start > max_duration:
                if w.word in SENTENCE_MARKS:
                    w.end = w.start + max_duration
                elif prev.word in SENTENCE_MARKS:
                    w.start = w.end - max_duration
    return median, max_duration


# Word-edge heuristics, after ``clamp_long_words`` and ``merge_punctuations``: for the words of
# one segment, times in seconds of the source.

# A word longer than this many times the window's longest plausible word (``clamp_long_words``)
# at a segment's edge or a sentence's was stretched by DTW over the music or silence beside it:
# on the podcast (bench/peers/podcast.py) " He" ran 18.6 s back into the music before it, " Roman."
# 4.2 s and " quickly." 5.2 s into the music or silence after them.
EDGE_STRETCH = 2.0


def fix_segment_edges(words: list[WordTiming], start: float, end: float, median: float,
                      max_duration: float, last_speech: float) -> tuple[float, float]:
    """openai/whisper's heuristics for the first and last word of a segment [start, end),
    which DTW tends to stretch over the silence around it (``last_speech``: where the speech
    before it ended). Moves the words' times; returns the segment's (start, end)."""
    first = words[0]
    if first.end - last_speech > median * 4 and (
            first.end - first.start > max_duration
            or (len(words) > 1 and words[1].end - first.start > max_duration * 2)):
        if len(words) > 1 and words[1].end - words[1].start > max_duration:
            boundary = max(words[1].end / 2, words[1].end - max_duration)
            first.end = words[1].start = boundary
        first.start = max(0.0, first.end - max_duration)
    if start < first.end and start - 0.5 > first.start:
        first.start = max(0.0, min(first.end - median, start))
    else:
        start = first.start
    last = words[-1]
    if end > last.start and end + 0.5 < last.end:
        last.end = max(last.start + median, end)
    else:
        end = last.end
    return start, end


SOUND_FRAME = 0.02  # seconds: one frame of ``nonspeech.NonSpeechGate.loud_frames`` (20 ms)
# Sound frames a word needs inside it to keep its place (40 ms: less than any word's voice).
# The podcast's " Roman." (avx2 path), stretched over the pause after its reading, held the one
# first frame of the music after the pause, and went there. 3 frames also moved words of the
# Apollo radio, whose speech is mostly under the gate's silence level, that 2 leave alone.
MIN_WORD_SOUND = 2


def snap_to_sound(words: list[WordTiming], loud: np.ndarray, offset: float, duration: float,
                  floor: float) -> None:
    """Keep a segment's words out of silence. DTW stretches a sentence's last words over the
    pause after it and can put the last one wholly inside it (on the podcast: " and" over
    1.4 s, then " Roman." at its end, 0.7 s into digital silence).

    loud: (F,) bool, whether each 20 ms frame of the window (from ``offset`` s) reaches the
    gate's silence level; music and room noise are sound, digital silence and near-silence are
    not. A word's start moves forward to the first sound inside it, its end back to the last.
    A word with no sound inside (under ``MIN_WORD_SOUND`` frames) goes to the sound on the side
    of the nearer of the words either side of it (DTW's times: speech runs on within a phrase,
    so a word belongs with its neighbour, not with whatever sound is nearest; the podcast's
    " Roman." 0.4 s before the music after the pause went into the music), else to the nearer
    sound; lasting ``duration`` (its own if longer): back to end where the sound before it
    ended (not before ``floor`` or the word before it, which ends where it starts), or forward
    to start at the onset of the sound after it (the words after it then start no earlier)."""
    sound = np.flatnonzero(loud)
    if not len(sound):
        return
    frame = lambda t: int(np.clip(round((t - offset) / SOUND_FRAME), 0, len(loud)))  # noqa: E731
    dtw_times = [(w.start, w.end) for w in words]
    for i, w in enumerate(words):
        a, b = frame(w.start), frame(w.end)
        inside = sound[(sound >= a) & (sound < max(b, a + 1))]
        if len(inside) >= min(MIN_WORD_SOUND, max(b - a, 1)):
            w.start = max(w.start, offset + inside[0] * SOUND_FRAME)
            w.end = max(w.start, min(w.end, offset + (inside[-1] + 1) * SOUND_FRAME))
            continue
        before, after = sound[sound < a], sound[sound >= b]
        length = max(w.end - w.start, duration)
        forward = _toward_next_word(dtw_times, i)
        if forward is None:  # no word nearer on either side: the nearer sound
            forward = not len(before) or (len(after) > 0 and after[0] - b < a - before[-1] - 1)
        if len(after) and (forward or not len(before)):
            w.start = offset + after[0] * SOUND_FRAME  # nearer the sound after it: its onset
            w.end = min(w.start + length, offset + len(loud) * SOUND_FRAME)  # not past the audio
            continue
        if not len(before):
            continue
        w.end = offset + (before[-1] + 1) * SOUND_FRAME
        w.start = max(floor, words[i - 1].start if i else floor, w.end - length)
        for prev in words[:i]:
            prev.end = min(prev.end, w.start)
            prev.start = min(prev.start, prev.end)
    for w, nxt in zip(words, words[1:]):  # in order again after a word moved forward
        w.end = max(w.start, min(w.end, nxt.start))
        nxt.start = max(nxt.start, w.start)


def _toward_next_word(times: list[tuple[float, float]], i: int) -> Optional[bool]:
    """Whether word ``i`` of ``times`` ((start, end) s) lies nearer the word after it (True)
    than the word before it (False); None for a segment's first or last word (its other
    neighbour is in another segment) or a tie."""
    if not 0 < i < len(times) - 1:
        return None
    gap_before, gap_after = times[i][0] - times[i - 1][1], times[i + 1][0] - times[i][1]
    return None if gap_before == gap_after else gap_after < gap_before


# Word starts from the voice's onsets. DTW's starts trail the forced alignments' (dev set, tiny.en:
# 20 of 24 words late, by 0.1 s in the median), and a first word after silence starts where the
# window does (0.2 s early). A frame ONSET_DB over the quietest tenth of the frames around is
# voice; a word whose start, moved ONSET_LEAD earlier, is quiet starts at the next voiced frame,
# at most ONSET_REACH after it. The lead is fitted to those 24 words (60-100 ms all gave a median
# of 40-50 ms, ba511a0: 110); streaming passes none (its starts are not one-signed: 13 of 24 late).
ONSET_DB = 10.0
ONSET_LEAD = 0.08
ONSET_REACH = 0.3


@dataclass(frozen=True)
class TimeOffsets:
    """How far one model's word times sit from the voice: its alignment heads attend earlier or
    later than tiny.en's, which the constants above and streaming's ``words.SHIFT`` were fitted to."""

    onset_lead: float = ONSET_LEAD  # one-shot: ``start_at_onsets``'s lead (s)
    stream_delay: float = 0.0  # streaming: seconds added to the words' times (their frames unmoved)


# base's alignment heads attend earlier than tiny.en's. On the dev set's 24 aligned words, base
# with tiny.en's offsets: one-shot median 0.130 s (p90 0.210, all but 3 early), streaming 0.210
# (0.230); faster-whisper base 0.060 (0.210). With no lead and streaming 0.18 s later: 0.060
# (0.150) and 0.030 (0.060). Beyond those words, streaming against one-shot (no lead) over
# the dev set's ~800 words: 0.12 s earlier in the median with tiny.en's offsets, 0.04 s later
# with these (tiny.en's own: 0.01). Other models take tiny.en's.
# tiny.en's streaming delay is fitted on half A of issue 48's held-out split (bench/peers/recall.py: the
# first word of every other piece of the long_en segments files, at its voice onset, and the
# forced alignments of librivox_sas01_0880 and _0930): its words started 0.030 s late in the median
# (85 words). On half B (84 words: the other pieces, librivox_sas01_0890): median 0.100 s, p90 0.319 with no
# delay; 0.080 s, 0.289 with A's -0.03 (2026-12-06, main at d24268f).
TIME_OFFSETS = {"tiny.en": TimeOffsets(stream_delay=-0.03),
                "base": TimeOffsets(onset_lead=0.0, stream_delay=0.18)}


def time_offsets(model_name: str) -> TimeOffsets:
    """The word-time offsets of the model named ``model_name`` (``TIME_OFFSETS``, else tiny.en's)."""
    return TIME_OFFSETS.get(model_name, TIME_OFFSETS["tiny.en"])


def start_at_onsets(times: list[tuple[float, float]], levels: np.ndarray, offset: float, frame_s: float,
                    floor: float = 0.0, lead: float | None = None) -> list[tuple[float, float]]:
    """Words' (start, end) with each start moved ``lead`` (default ONSET_LEAD) earlier, then, if
    it is quiet there, forward to the voice's onset: ``levels`` (F,) dB of the audio's frames of
    ``frame_s`` seconds from ``offset``. Not before ``floor`` or the word before it, not past
    the word's own end; after the start of the word before (by a frame where the word allows:
    two short words in the quiet before one onset keep their order); the word before ends where
    it starts."""
    times = [list(t) for t in times]
    lead = ONSET_LEAD if lead is None else lead
    voiced = levels >= np.percentile(levels, 10) + ONSET_DB if len(levels) else levels
    for i, w in enumerate(times):
        low = max(floor, times[i - 1][0] if i else floor, offset)
        start = max(low, min(w[0], w[0] - lead))
        a = int(round((start - offset) / frame_s))
        b = min(int(round((min(w[1], start + ONSET_REACH) - offset) / frame_s)), len(voiced))
        onset = np.flatnonzero(voiced[a:b]) if a < len(voiced) else []
        if len(onset):
            start = offset + (a + onset[0]) * frame_s
        w[0] = min(w[1], max(low, start))
        if i and w[0] <= times[i - 1][0]:  # moved onto the word before's start
            w[0] = min(w[1], times[i - 1][0] + frame_s)
        if i:
            times[i - 1][1] = min(times[i - 1][1], w[0])
    return [(float(a), float(b)) for a, b in times]


def clamp_edge_words(words: list[WordTiming], start: float, end: float,
                     max_duration: float) -> tuple[float, float]:
    """Cut a stretched word that starts a segment or a sentence from its start, one that ends a
    segment or a sentence from its end, to ``max_duration``; the segment [start, end) follows
    its words (returned)."""
    if max_duration <= 0:
        return start, end
    for i, w in enumerate(words):
        if w.end - w.start <= EDGE_STRETCH * max_duration:
            continue
        if i == len(words) - 1 or ends_sentence(w.word):
            w.end = w.start + max_duration
        elif i == 0 or ends_sentence(words[i - 1].word):
            w.start = w.end - max_duration
    return max(start, words[0].start), min(end, words[-1].end)


def text_frames(tokens: list[int], tokenizer: Tokenizer, n_frames: int) -> int:
    """The mel frames a window's text is aligned over: all of them, unless the text ends with a
    timestamp (the model's end of its last segment). Then up to that time and a second: DTW's
    path must reach its last frame, and dragged the last words to the window's end (podcast,
    "look at a<|16.40|><|16.40|>": " at" over 13 s of music, " a" at its end, and the walk went
    on from there, past "a transition between Gothic and Roman")."""
    if tokens and tokens[-1] >= tokenizer.timestamp_begin:
        spoken = round((tokens[-1] - tokenizer.timestamp_begin) * TIME_PRECISION * FRAMES_PER_SECOND)
        return min(n_frames, spoken + FRAMES_PER_SECOND)
    return n_frames
