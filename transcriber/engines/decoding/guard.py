"""The guard that makes "no speech lost" a property of the engine: a voiced stretch of a window
(one-shot) or a pass (streaming) that got no words is decoded again on its own.

A 30 s window reads what it hears first and may end its text there: every 30 s block of
jfk.flac (11 s), silence, then "Eight. The press yard." at +15 s, and one-shot's windows ended
after jfk with a single timestamp, the walk went on a whole window, and none of the 40 lines
was written. Whatever the decoder's reason, a stretch of sound it gave no word is read again,
alone, and what that reading yields goes through the same non-speech rules as any other text.

Pure numpy over the window's 20 ms frame levels (``NonSpeechGate.frame_levels``).
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np

from transcriber.engines.nonspeech import GATE

log = logging.getLogger("transcriber.guard")  # each reading of a stretch, with its scores
FRAME_S = 0.02  # seconds of one level frame
MIN_STRETCH_S = 1.0  # a voiced stretch this long that got no word is decoded again
BRIDGE_S = 0.6  # quieter gaps this short inside a stretch do not end it (pauses between words: " one, two,
# three" counted with 0.5 s between its words is one line, not three stretches under MIN_STRETCH_S)
# A frame is voiced when it is above silence and within this many dB of the window's loudest
# 20 ms frame: quiet background noise between the lines is not a stretch of its own.
BELOW_PEAK_DB = 35.0
PAD_S = 0.3  # audio kept either side of a stretch re-read (the onset and the end of its words)
# A stretch (padded) this share of the window's audio or more is what the window itself decoded
# (a window of music, of one long voice): reading it alone again adds nothing.
MAX_SHARE = 0.8
# ... and this many dB above the window's noise floor (its FLOOR_PERCENTILE level): a line in
# white noise at -50 dBFS (the silence threshold itself) made every frame of the noise "voiced",
# one stretch as long as the window, and the line was never read again.
ABOVE_FLOOR_DB = 10.0
FLOOR_PERCENTILE = 10


def voiced(levels: np.ndarray) -> np.ndarray:
    """(F,) bool: the 20 ms frames of ``levels`` (F,) (dBFS) that are voiced."""
    if not len(levels):
        return np.zeros(0, dtype=bool)
    floor = float(np.percentile(levels, FLOOR_PERCENTILE)) + ABOVE_FLOOR_DB
    return levels >= max(GATE.silence_db, float(np.max(levels)) - BELOW_PEAK_DB, floor)


def runs(loud: np.ndarray) -> list[tuple[int, int]]:
    """The runs of voiced frames in ``loud`` (F,) bool, gaps under BRIDGE_S bridged: (first
    frame, end frame) pairs."""
    idx = np.flatnonzero(loud)
    if not len(idx):
        return []
    bridge = round(BRIDGE_S / FRAME_S)
    breaks = np.flatnonzero(np.diff(idx) > bridge)
    starts = np.concatenate([[idx[0]], idx[breaks + 1]])
    ends = np.concatenate([idx[breaks], [idx[-1]]]) + 1
    return [(int(a), int(b)) for a, b in zip(starts, ends)]


def stretches(loud: np.ndarray) -> list[tuple[int, int]]:
    """``runs`` at least MIN_STRETCH_S long."""
    return [(a, b) for a, b in runs(loud) if (b - a) * FRAME_S >= MIN_STRETCH_S]


def cut_by_the_end(levels: np.ndarray, after: float = 0.0) -> Optional[float]:
    """Where (seconds into the window) a voiced run starts that the window's end cuts (it
    reaches the last BRIDGE_S), when it starts in the window's second half and after ``after``
    (seconds: the window's last word), less PAD_S; else None. A window that wrote nothing of
    it goes on from there, not from its end: a line in noise after 30 s of it began 0.34 s
    before a window's end, that window was judged no speech, the next one began inside "one"
    of "one two three" and was judged no speech too, and the line was lost (base)."""
    found = [(a, b) for a, b in runs(voiced(levels)) if b >= len(levels) - round(BRIDGE_S / FRAME_S)]
    if not found:
        return None
    start = found[-1][0] * FRAME_S
    return start - PAD_S if start >= max(len(levels) * FRAME_S / 2, after) else None


def unheard(levels: np.ndarray, words: Sequence[tuple[float, float]], offset: float,
            until: float, window_seconds: Optional[float] = None) -> list[tuple[float, float]]:
    """The voiced stretches of a window (``levels``: (F,) dBFS of its 20 ms frames, the first at
    ``offset`` seconds) that end by ``until`` (where the walk goes on: the rest is read by the
    next window) and that no word of ``words`` ((start, end) seconds) touches: (start, end)
    seconds of the audio to read again, padded by PAD_S within the window and its words.
    ``window_seconds``: the audio the decoder saw (MAX_SHARE), when ``levels`` is only a part
    of it (streaming: the buffer after its committed words)."""
    loud = voiced(levels)
    seen = len(levels) * FRAME_S if window_seconds is None else window_seconds
    out = []
    for a, b in stretches(loud):
        start, end = offset + a * FRAME_S, offset + b * FRAME_S
        if end > until + BRIDGE_S or (b - a) * FRAME_S + 2 * PAD_S >= MAX_SHARE * seen:
            continue
        if any(w_start < end and w_end > start for w_start, w_end in words):
            continue
        before = max([w_end for _, w_end in words if w_end <= start] + [offset])
        after = min([w_start for w_start, _ in words if w_start >= end] + [offset + len(levels) * FRAME_S])
        out.append((max(start - PAD_S, before), min(end + PAD_S, after)))
    return out


SQUEEZED_RUN = 3  # words in a row this many or more, each under SQUEEZED_S long
SQUEEZED_S = 0.02


def squeezed(words: Sequence[tuple[float, float]]) -> Optional[float]:
    """Where the first run of SQUEEZED_RUN words or more, each under SQUEEZED_S long, starts
    (seconds), else None. DTW could not place them: tiny.en's window over 131-161 s of the
    LJSpeech reading put 30 words at 148.0 s, the audio of 152-161 s then had no word, and
    reading it again wrote those words a second time (WER 3.8 -> 7.8%). The text is there,
    mistimed: the stretches after such a run are not read again."""
    run = 0
    for i, (start, end) in enumerate(words):
        run = run + 1 if end - start < SQUEEZED_S else 0
        if run >= SQUEEZED_RUN:
            return words[i - run + 1][0]
    return None
