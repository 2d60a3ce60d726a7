"""Recall and timing scores of issue 48's evaluation (``bench/peers/recall.py``), and its stress sets.

Everything here is plain data in, numbers out, so it is unit-tested without a model
(tests/engines/test_evaluation.py). A hypothesis is a list of timed words ``(start, end, text)``.

- ``lost_pieces``: the rule of ``../shared/tools/lost.py``: a piece of a segments file with at
  least 3 reference words is lost when fewer than ``LOST_SHARE`` (30%) of its reference-word
  count of hypothesis words have their middle inside the piece.
- ``words_kept``: reference words the hypothesis keeps (edit alignment: reference words not
  deleted; a substituted word counts as kept, a missing one does not).
- Stress sets, built at run time from the evaluation recordings (``build_*``): each returns a
  ``Stress`` (samples at 16 kHz, the pieces of speech placed in it, and the reference text).
  The builders are deterministic (fixed layouts, seeded noise).
- ``first_word_offsets``: a piece's first reference word against the hypothesis word that says
  it, for the held-out word-start figures; ``split_half``: the deterministic A/B split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from evalkit.podcast import align
from evalkit.scoring import normalize

SR = 16000
LOST_SHARE = 0.3  # ../shared/tools/lost.py's --min-share default
LOST_MIN_WORDS = 3  # lost.py skips pieces of fewer reference words
TOLERANCE = 0.5  # s: a word this close to a piece still belongs to it (its own pause)

Words = Sequence[tuple[float, float, str]]


@dataclass(frozen=True)
class Piece:
    start: float
    end: float
    text: str


@dataclass
class Stress:
    """One built recording: ``pieces`` are where its speech lies (seconds), ``delay`` the audio
    stream's start offset a container will carry (0 when none)."""

    name: str
    kind: str
    samples: np.ndarray
    pieces: list[Piece] = field(default_factory=list)
    delay: float = 0.0
    container: Optional[str] = None  # "mkv" / "mp4": written with a video track, audio delayed

    @property
    def text(self) -> str:
        return " ".join(p.text for p in self.pieces)

    @property
    def duration(self) -> float:
        return len(self.samples) / SR + self.delay


def pieces_of(segments: dict | list) -> list[Piece]:
    """The pieces of a segments file (``{"segments": [...]}`` or a bare list), as lost.py reads them."""
    if isinstance(segments, dict):
        segments = [x for v in segments.values() if isinstance(v, list) for x in v
                    if isinstance(x, dict) and {"start", "end", "text"} <= set(x)]
    return [Piece(float(p["start"]), float(p["end"]), p["text"]) for p in segments]


def _mids(words: Words) -> np.ndarray:
    return np.array([(s + e) / 2 for s, e, _ in words], dtype=np.float64)


def lost_pieces(pieces: Sequence[Piece], words: Words, share: float = LOST_SHARE) -> tuple[list[Piece], int]:
    """(the lost pieces, how many pieces were judged): lost.py's rule, word middles in [start, end]."""
    mids = _mids(words)
    lost, judged = [], 0
    for p in pieces:
        ref = len(p.text.split())
        if ref < LOST_MIN_WORDS:
            continue
        judged += 1
        got = int(((mids >= p.start) & (mids <= p.end)).sum())
        if got < share * ref:
            lost.append(p)
    return lost, judged


def line_kept(piece: Piece, words: Words, share: float = LOST_SHARE) -> bool:
    """A short line is kept when at least ``share`` of its reference words (at least one) come
    back with their middle inside it (``TOLERANCE`` either side): lost.py's rule, for lines of
    any length."""
    mids = _mids(words)
    got = int(((mids >= piece.start - TOLERANCE) & (mids <= piece.end + TOLERANCE)).sum())
    return got >= max(1, share * len(normalize(piece.text).split()))


def words_outside(pieces: Sequence[Piece], words: Words, tolerance: float = TOLERANCE) -> int:
    """Words whose middle lies further than ``tolerance`` from every piece: text over silence,
    noise, or a line written twice somewhere else."""
    return sum(not any(p.start - tolerance <= m <= p.end + tolerance for p in pieces) for m in _mids(words))


def words_kept(reference: str, hypothesis: str) -> tuple[int, int]:
    """(reference words kept, reference words) after ``normalize``: those the edit alignment
    does not delete."""
    ref, hyp = normalize(reference).split(), normalize(hypothesis).split()
    _, deleted = align(ref, hyp)
    return len(ref) - len(deleted), len(ref)


def first_word_offsets(pieces: Sequence[tuple[float, str]], words: Words, reach: float = 1.5) -> list[float]:
    """Signed start error (hypothesis minus reference, s) of each piece's first word: ``pieces``
    are (reference start of the first word, the piece's text). The hypothesis word is the first
    of those starting within ``reach`` of it whose normalized text begins as the reference's
    first word does (a missing or misheard first word is left out, as word_start_offsets does)."""
    out = []
    for start, text in pieces:
        ref = normalize(text).split()
        if not ref:
            continue
        for s, _, t in words:
            if abs(s - start) <= reach and normalize(t).split()[:1] == ref[:1]:
                out.append(s - start)
                break
    return out


def voice_onset(samples: np.ndarray, start: float, end: float, rise_db: float = 15.0) -> float:
    """Where the voice begins in [start, end] of ``samples``: the first 10 ms frame of three in a
    row ``rise_db`` over the quietest tenth of the piece's frames. A piece's boundary is exact
    (0.5 s of digital silence joins them) but LibriSpeech and home recordings hold their own
    pause before the first word, so the boundary alone would call every word late."""
    hop = SR // 100
    seg = samples[int(start * SR):int(end * SR)]
    n = len(seg) // hop
    if n < 3:
        return start
    frames = seg[:n * hop].reshape(n, hop).astype(np.float64)
    db = 10 * np.log10(np.mean(frames ** 2, axis=1) + 1e-12)
    loud = db >= np.percentile(db, 10) + rise_db
    run = loud[:-2] & loud[1:-1] & loud[2:]
    hits = np.flatnonzero(run)
    return start + (hits[0] * hop / SR if len(hits) else 0.0)


def split_half(keys: Sequence[str]) -> tuple[list[str], list[str]]:
    """Deterministic halves: sorted, alternately A and B (0th, 2nd, ... in A)."""
    ranked = sorted(keys)
    return ranked[0::2], ranked[1::2]


def quantiles(values: Sequence[float]) -> tuple[float, float]:
    """(upper median, p90) of absolute values, as evalkit.scoring.error_quantiles; nan when empty."""
    if not values:
        return float("nan"), float("nan")
    ranked = sorted(abs(v) for v in values)
    return ranked[len(ranked) // 2], ranked[int(0.9 * (len(ranked) - 1))]


def fitted_shift(signed: Sequence[float]) -> float:
    """The constant that, added to every start, minimises the median absolute error over
    ``signed`` (hypothesis minus reference): minus their median."""
    return -float(np.median(signed)) if len(signed) else 0.0


# ---- stress sets -----------------------------------------------------------------------------

def quiet(seconds: float, level_db: Optional[float], rng: np.random.Generator) -> np.ndarray:
    """``seconds`` of digital silence (``level_db`` None) or white noise at ``level_db`` dBFS RMS."""
    n = int(round(seconds * SR))
    if level_db is None:
        return np.zeros(n, np.float32)
    return (rng.standard_normal(n) * 10 ** (level_db / 20)).astype(np.float32)


def build_sparse(lines: Sequence[tuple[np.ndarray, str]], gaps: Sequence[float],
                 levels: Sequence[Optional[float]], tail: float = 5.0, seed: int = 0) -> Stress:
    """Sparse dialogue: each line alone after ``gaps[i]`` s of near-silence or quiet noise
    (``levels[i]``: dBFS of white noise, None for digital silence, both cycled)."""
    rng = np.random.default_rng(seed)
    parts, pieces, t = [], [], 0.0
    for i, (audio, text) in enumerate(lines):
        level = levels[i % len(levels)]
        gap = quiet(gaps[i % len(gaps)], level, rng)
        parts += [gap, audio + quiet(len(audio) / SR, level, rng)[:len(audio)]]
        t += len(gap) / SR
        pieces.append(Piece(t, t + len(audio) / SR, text))
        t += len(audio) / SR
    parts.append(quiet(tail, levels[len(lines) % len(levels)], rng))
    return Stress("sparse", "sparse", np.concatenate(parts).astype(np.float32), pieces)


def build_repeated(audio: np.ndarray, text: str, times: int, gap: float = 0.5) -> Stress:
    """The same speech ``times`` times, ``gap`` s of digital silence between."""
    pad = np.zeros(int(gap * SR), np.float32)
    parts, pieces, t = [], [], 0.0
    for _ in range(times):
        parts += [audio, pad]
        pieces.append(Piece(t, t + len(audio) / SR, text))
        t += (len(audio) + len(pad)) / SR
    return Stress(f"repeat{times}", "repeated", np.concatenate(parts), pieces)


def build_leading(audio: np.ndarray, text: str, silence: float, tail: float = 3.0) -> Stress:
    """A short line after ``silence`` s of digital silence (as a padded, delayed track is)."""
    lead, end = np.zeros(int(round(silence * SR)), np.float32), np.zeros(int(tail * SR), np.float32)
    return Stress(f"lead{silence:g}", "leading", np.concatenate([lead, audio, end]),
                  [Piece(len(lead) / SR, (len(lead) + len(audio)) / SR, text)])


def build_delayed(audio: np.ndarray, text: str, delay: float, container: str) -> Stress:
    """Speech whose audio stream starts ``delay`` s after the video (ffmpeg -itsoffset): the
    samples are the speech alone; ``write_stress`` puts them in ``container`` with the delay."""
    return Stress(f"delay{delay:g}.{container}", "delayed", audio.astype(np.float32),
                  [Piece(delay, delay + len(audio) / SR, text)], delay=delay, container=container)


def write_stress(stress: Stress, folder, ffmpeg: str = "ffmpeg") -> str:
    """Write ``stress`` under ``folder``: a WAV, or for a delayed one an MKV/MP4 with a black
    video track from 0 and the audio (AAC) starting ``delay`` s later. Returns the path."""
    import subprocess
    import wave
    from pathlib import Path

    folder = Path(folder)
    wav = folder / f"{stress.name.split('.')[0]}.wav"
    pcm = (np.clip(stress.samples, -1, 1) * 32767).astype("<i2")
    with wave.open(str(wav), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(SR)
        f.writeframes(pcm.tobytes())
    if not stress.container:
        return str(wav)
    out = folder / stress.name
    video = f"color=c=black:s=64x64:r=10:d={stress.duration + 1:.2f}"
    subprocess.run([ffmpeg, "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", video,
                    "-itsoffset", f"{stress.delay:g}", "-i", str(wav), "-map", "0:v", "-map", "1:a",
                    "-c:v", "mpeg4", "-c:a", "aac", "-b:a", "96k", str(out)], check=True, capture_output=True)
    wav.unlink()
    return str(out)
