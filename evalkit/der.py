"""Diarization error rate: frame-based (10 ms), overlap counted, pooled over a set.

The scorer of the speaker benchmark and tests, written from the usual definition (the data's
../tools/der.py is its independent twin: bench/speakers/der.py --check-against runs it):

- every speaker's turns are painted on a 10 ms grid (frame ``round(start / 0.01)`` up to, not
  including, ``round(end / 0.01)``);
- with a collar, frames within ``collar`` seconds either side of any reference turn's start or
  end are not scored (NIST's convention is 0.25 s; pyannote's benchmarks use none);
- per frame, with r reference and h hypothesis speakers: missed speech max(r - h, 0), false
  alarm max(h - r, 0), confusion min(r, h) minus the frames the mapped speakers agree on, the
  hypothesis speakers mapped one to one onto the reference speakers to agree most (exhaustive
  over permutations for a few speakers, the Hungarian method for more);
- DER = (miss + false alarm + confusion) / reference speech, all counted in frames.

``Score`` keeps the frame counts, so a set is pooled by adding scores (total errors over total
reference speech), not by averaging rates.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Hashable, Iterable, Sequence, Union

import numpy as np

STEP = 0.01  # seconds a frame


@dataclass(frozen=True)
class Score:
    """Frame counts: reference speech, missed, false alarm, confused."""

    speech: int = 0
    miss: int = 0
    false_alarm: int = 0
    confusion: int = 0

    def __add__(self, other: "Score") -> "Score":
        return Score(self.speech + other.speech, self.miss + other.miss,
                     self.false_alarm + other.false_alarm, self.confusion + other.confusion)

    @property
    def der(self) -> float:
        return (self.miss + self.false_alarm + self.confusion) / max(self.speech, 1)

    def rates(self) -> tuple[float, float, float]:
        """(miss, false alarm, confusion) as fractions of reference speech."""
        total = max(self.speech, 1)
        return self.miss / total, self.false_alarm / total, self.confusion / total


Turn = tuple[float, float, Hashable]


def read_rttm(path: Union[str, Path]) -> list[Turn]:
    """(start, end, speaker) of every SPEAKER line of an RTTM file."""
    turns = []
    for line in Path(path).read_text().splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[0] == "SPEAKER":
            start, duration = float(fields[3]), float(fields[4])
            turns.append((start, start + duration, fields[7]))
    return turns


def rttm_lines(turns: Iterable[Turn], file_id: str) -> str:
    """RTTM text of (start, end, speaker) turns."""
    return "".join(f"SPEAKER {file_id} 1 {s:.3f} {e - s:.3f} <NA> <NA> {who} <NA> <NA>\n" for s, e, who in turns)


def grid(turns: Sequence[Turn], frames: int) -> np.ndarray:
    """[speakers, frames] bool activity, speakers in sorted order of their names."""
    names = sorted({str(who) for _, _, who in turns})
    index = {name: i for i, name in enumerate(names)}
    out = np.zeros((len(names), frames), dtype=bool)
    for start, end, who in turns:
        out[index[str(who)], int(round(start / STEP)):int(round(end / STEP))] = True
    return out


def scored_frames(reference: np.ndarray, collar: float) -> np.ndarray:
    """Frames outside every reference boundary's collar."""
    keep = np.ones(reference.shape[1], dtype=bool)
    width = int(round(collar / STEP))
    if width <= 0:
        return keep
    for row in reference:
        for edge in np.flatnonzero(np.diff(np.concatenate([[0], row.astype(np.int8), [0]]))):
            keep[max(0, edge - width):edge + width] = False
    return keep


def best_agreement(agree: np.ndarray) -> int:
    """The most frames a one-to-one mapping of hypothesis (columns) onto reference (rows)
    speakers agrees on."""
    rows, cols = agree.shape
    if rows == 0 or cols == 0:
        return 0
    if cols > rows:
        agree, rows, cols = agree.T, cols, rows
    if rows > 8:  # too many permutations to try them all
        return hungarian(agree)
    return int(max(sum(agree[r, c] for c, r in enumerate(perm))
                   for perm in itertools.permutations(range(rows), cols)))


def hungarian(agree: np.ndarray) -> int:
    """The largest sum of a one-to-one pick of entries of ``agree`` (rows >= columns), by the
    Hungarian method with potentials (O(n^2 m)): each column joins in turn along the cheapest
    augmenting path."""
    cost = -np.asarray(agree, dtype=np.float64).T  # columns as the assigned side: n <= m
    n, m = cost.shape
    u, v = np.zeros(n + 1), np.zeros(m + 1)
    match, way = np.zeros(m + 1, dtype=np.int64), np.zeros(m + 1, dtype=np.int64)
    for i in range(1, n + 1):
        match[0], j0 = i, 0
        least, used = np.full(m + 1, np.inf), np.zeros(m + 1, dtype=bool)
        while match[j0] != 0:
            used[j0] = True
            i0 = match[j0]
            free = np.flatnonzero(~used[1:]) + 1
            reduced = cost[i0 - 1, free - 1] - u[i0] - v[free]
            better = reduced < least[free]
            least[free[better]], way[free[better]] = reduced[better], j0
            j1 = int(free[np.argmin(least[free])])
            delta = least[j1]
            u[match[used]] += delta
            v[used] -= delta
            least[~used] -= delta
            j0 = j1
        while j0:
            j1 = way[j0]
            match[j0], j0 = match[j1], j1
    return int(round(-sum(cost[match[j] - 1, j - 1] for j in range(1, m + 1) if match[j])))


def score(reference: Sequence[Turn], hypothesis: Sequence[Turn], duration: float = 0.0,
          collar: float = 0.0) -> Score:
    """The frame counts of one recording."""
    end = max([duration] + [e for _, e, _ in reference] + [e for _, e, _ in hypothesis])
    frames = int(round(end / STEP)) + 1
    ref, hyp = grid(reference, frames), grid(hypothesis, frames)
    keep = scored_frames(ref, collar)
    ref, hyp = ref[:, keep], hyp[:, keep]
    n_ref, n_hyp = ref.sum(axis=0), hyp.sum(axis=0)
    agree = (ref[:, None, :] & hyp[None, :, :]).sum(axis=2)
    return Score(int(n_ref.sum()), int(np.maximum(n_ref - n_hyp, 0).sum()), int(np.maximum(n_hyp - n_ref, 0).sum()),
                 int(np.minimum(n_ref, n_hyp).sum()) - best_agreement(agree))
