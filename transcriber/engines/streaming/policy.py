"""The AlignAtt policy: where the newest token looks in the audio, and whether to keep it.

Pure numpy, no model: the session feeds it the alignment heads' cross-attention, and tests feed
it synthetic attention.

Frames here (a token's frame, ``frame_threshold``) are encoder positions (20 ms each) counted
from the start of the audio buffer; ``n_positions`` is how many the buffer has (10 ms mel frames
are ``n_frames`` elsewhere, one-shot's and the mel buffer's).

Shapes: H alignment heads, T token rows (oldest first, the newest token's row last), S frames.
A token's row is the attention of the decoder position that *predicted* it (the row of the
token before it), as in openai/whisper's DTW alignment: so a token's frame is known as soon as
it is sampled, without another decoder pass.
"""

from __future__ import annotations

import numpy as np

from transcriber.constants import MEDIAN_FILTER_WIDTH
from transcriber.engines.decoding.ending import Ending
from transcriber.engines.timing import median_filter

LAST_CHUNK_THRESHOLD = 4  # frames: how close to the end the last token may look on the last chunk
# Standardising divides by the spread across tokens. Where every token's weight is tiny the
# spread is tiny too, and any difference would look as large as a real peak (with few tokens, a
# z-score is bounded by sqrt(T - 1) and a mere rank order reaches it). Spreads under this
# fraction of uniform attention (1 / frames) are treated as this floor.
STD_FLOOR = 0.1


def _restrict(attention: np.ndarray, n_positions: int | None) -> np.ndarray:
    """Softmax over the first ``n_positions`` positions only: cut and renormalise. (..., S) -> (..., n)."""
    a = np.asarray(attention, dtype=np.float64)
    if n_positions is not None and n_positions < a.shape[-1]:
        a = a[..., :n_positions]
        a = a / np.maximum(a.sum(axis=-1, keepdims=True), 1e-10)
    return a


def token_scores(attention: np.ndarray, n_positions: int | None = None) -> np.ndarray:
    """Per-frame alignment score of the newest token, (n_positions,).

    attention: (H, T, S) softmax weights of the alignment heads, newest row last.
    Each head's weights are standardised per frame across the T tokens (frames every token looks
    at, like the first frame, stop standing out; see ``STD_FLOOR``), the newest row is median filtered along frames
    (width 7), and the heads are averaged. With a single row the scores are all zero.
    """
    a = _restrict(attention, n_positions)
    if a.ndim != 3:
        raise ValueError(f"attention must be (heads, tokens, frames), got shape {a.shape}")
    mean = a.mean(axis=1)
    std = a.std(axis=1)
    newest = (a[:, -1, :] - mean) / np.maximum(std, STD_FLOOR / a.shape[-1])
    return median_filter(newest, MEDIAN_FILTER_WIDTH).mean(axis=0)


def most_attended_frame(attention: np.ndarray, n_positions: int | None = None) -> int:
    """The frame the newest token attends to most (see ``token_scores``)."""
    return int(np.argmax(token_scores(attention, n_positions)))


class AttentionTracker:
    """``most_attended_frame`` for a growing stack of rows, without keeping the stack.

    Holds running sums over rows per (batch row, head, frame), so a decoding step costs O(H * S)
    instead of O(H * T * S). Beam search reorders the batch with ``select``.
    """

    def __init__(self, rows: np.ndarray, n_positions: int | None = None):
        """rows: (B, H, T, S) attention of the prompt rows, T >= 1."""
        a = _restrict(rows, n_positions)
        self.n_positions = n_positions
        self.count = a.shape[2]
        self.sum = a.sum(axis=2)  # (B, H, n)
        self.sum_sq = np.square(a).sum(axis=2)
        self.last = a[:, :, -1, :]

    def push(self, row: np.ndarray) -> None:
        """Add one row per batch entry: row (B, H, S)."""
        a = _restrict(row, self.n_positions)
        self.count += 1
        self.sum = self.sum + a
        self.sum_sq = self.sum_sq + np.square(a)
        self.last = a

    def select(self, sources: np.ndarray) -> None:
        """Batch row i continues previous row ``sources[i]`` (beam search)."""
        self.sum, self.sum_sq, self.last = self.sum[sources], self.sum_sq[sources], self.last[sources]

    def frame(self, batch_row: int = 0) -> int:
        """Most attended frame of the newest row of one batch entry."""
        mean = self.sum[batch_row] / self.count
        var = np.maximum(self.sum_sq[batch_row] / self.count - np.square(mean), 0.0)
        newest = (self.last[batch_row] - mean) / np.maximum(np.sqrt(var), STD_FLOOR / mean.shape[-1])
        return int(np.argmax(median_filter(newest, MEDIAN_FILTER_WIDTH).mean(axis=0)))


def decide(frame: int, n_positions: int, last_frame: int | None, *, frame_threshold: int,
           rewind_threshold: int, is_last: bool = False, after_special: bool = False,
           mark: bool = False) -> Ending:
    """Keep the newest token (``Ending.CONTINUE``), stop before it (``STOP``: drop it, wait for
    more audio), or rewind (``REWIND``: drop what this pass decoded).

    frame: the token's most attended frame; n_positions: encoder positions of audio available; last_frame: the
    frame of the last token kept (None: none yet). Rewind when attention jumps back by more than
    ``rewind_threshold`` frames (not on the last chunk, and not right after a special token,
    where attention has no meaningful previous position). Stop when the token looks within
    ``frame_threshold`` frames of the end of the audio (``LAST_CHUNK_THRESHOLD`` on the last
    chunk): its sound may continue past what we have, so it is not emitted.

    A sentence or clause mark (``mark``) after a kept word is kept, whatever it attends: it has
    no sound of its own, and it looks at the pause or the next word's onset, at the end of the
    audio more often than not. Judged there, the mark was dropped while its word was kept; the
    unpunctuated prefix then primed the later passes to stay unpunctuated (music + the
    LJSpeech reading: 4 of its 13 sentence ends; 13 of 13 kept this way). The token after it
    is judged as usual.
    """
    if mark and not after_special:
        return Ending.CONTINUE
    if (not is_last and not after_special and last_frame is not None
            and last_frame - frame > rewind_threshold):
        return Ending.REWIND
    threshold = LAST_CHUNK_THRESHOLD if is_last else frame_threshold
    if n_positions - frame <= threshold:
        return Ending.STOP
    return Ending.CONTINUE
