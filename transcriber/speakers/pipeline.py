"""Who speaks when in a whole recording: ``diarize(samples)`` -> speaker turns.

pyannote's SpeakerDiarization pipeline, step by step, on our MLX ports:

1. segmentation-3.0 over sliding 10 s windows (``STEP`` apart, ``ONCE_STEP`` from ONCE_FROM_S of
   recording on; the last one ends at the end,
   zero-padded when the recording is shorter), its powerset output made hard: each frame's
   most likely class says which of the window's 3 local speakers are active (overlap kept);
2. each local speaker's speech in a window (from ONCE_FROM_S on, only in the window's own part:
   ``own_parts``) cut into pieces where it pauses PAUSE_S or more
   (both sides keeping PIECE_S of speech), a piece cut again into equal chunks of about
   CHUNK_S, and a CAM++ embedding per chunk ("piece" below) from the frames where that speaker
   speaks alone (all its frames when that is under ``MIN_EMBED_S``); a piece under
   ``MIN_EMBED_S`` does not take part in the clustering but is given the nearest cluster
   afterwards, as pyannote does with its too-short speakers;
3. clustering.py: those embeddings clustered across the file (threshold, or the count given);
4. each window's local activity renamed to the global speakers (where two local speakers of
   one window landed in one cluster and speak at once, the later one's frames go to its next
   best cluster: one voice is not heard twice at once) and overlap-added over the file's frame
   grid; per frame, the speaker count the segmentation says (its local counts averaged over the
   windows that see the frame, rounded half up: with few windows a frame one of two windows
   hears speech in is speech) picks the most active speakers;
5. each speaker's speech widened by PAD_S each side into silence (``widen``), then runs of
   active frames -> (start, end, label) turns, labels ``0, 1, ...`` in order of first speech;
   two speakers may be active at once.

Where we depart from pyannote: the step is 5 s, not 1 s (each window costs; pooled meeting DER
measured 0.305 at 1 s, 0.273 at 2.5 s, 0.290 at 5 s with the same misses, ~0.19, at each step,
one embedding per window; with the 1.5 s pieces, count given / not, 0.263 / 0.253 at 5 s and
0.297 / 0.266 at 10 s, windows side by side, half the models' work, readers 0.055 and 0.071);
the embedding is of the speaker's filterbank frames picked out of one filterbank of the whole
recording (senko's way), not of the window's audio with the other speakers masked out in the
model's pooling (pyannote's way); a local speaker is embedded per piece of about 1.5 s, not
once per window: the segmentation model now and then gives two voices one local speaker in a
window (two readers alternating: a third of the windows, across the pause between them; an AMI
excerpt's two speakers in most windows), and one embedding of both made the quieter one's
speech the other's. Measured (bench/speakers/der.py, threshold calibrated each time): readers'
confusion 0.074 per window, 0.011 cut at pauses, 0.001 in 1.5 s chunks; meetings (all 11,
count given / not) 0.353 / 0.314 per window, 0.263 / 0.253 in chunks. The cost: CAM++ embeds
all the speech each window hears (twice over at a 5 s step) instead of at most 3 s per local
speaker and window, about twice the filterbank frames on the bench sets, and several pieces a
second of speech go to the clustering. From ONCE_FROM_S (60 s) on, each window embeds only
its own part (``own_parts``: the frames nearer its centre than any other window's, two
neighbours' parts meeting at the quietest frame within CUT_S of the midpoint), each second of
speech once; a local speaker's speech outside its window's own part is named by the window that
owns those frames (scores and counts still averaged over the windows that see a frame). On the
10-minute two-reader recording (2-core Xeon, load 1.5-2.0, the stages timed twice per process,
main's code and this back to back): CAM++'s frames 84,967 -> 43,062, CPU 21.2-24.2 s -> 14.6-15.7
s, wall 12.2-13.8 s -> 8.4-9.0 s. Shorter recordings embed all each window hears: with own parts
everywhere the meetings (30 s, 5 windows) measured 0.314 / 0.276 count given / not, against
0.277 / 0.266, the held-out half 0.356 / 0.361 against 0.338 / 0.365 (half the pieces make the
tree's cut at a given count erratic: clustering only the own parts' pieces of all of them took
trn06 0.157 -> 0.309, trn09 0.182 -> 0.295, count given); the readers (150-165 s) 0.014 against
0.011. The 60 s was chosen knowing the meetings fall under it: their figures test the other path;
the 11 joined in one 341 s recording (der --joined) 0.361 / 0.426 once, 0.372 / 0.456 all
(reversed: 0.379 / 0.514, 0.388 / 0.484). Parts meeting at the midpoint (CUT_S 0) cut a reader's
speech, and a 0.4 s piece became a speaker of its own with the count given (readers 0.154);
docs/speed.md lists what else was tried. Those recordings' windows are then 7.5 s apart
(``ONCE_STEP``): each second is embedded once whatever the step, and the segmentation's third
less work took the 10-minute pass from 15.1 to 12.9 s with the test suite running beside; the
readers 0.014 -> 0.013, the joined meetings (count given / not) 0.361 / 0.426 -> 0.355 / 0.500 in
name order, 0.379 / 0.514 -> 0.381 / 0.465 reversed. Clustering is average linkage on cosine distance, a
window's local speakers free to join one cluster (then their activities are merged, but not
where they overlap, above), instead of pyannote's centroid linkage plus its reassignment of
small clusters and the Hungarian assignment per window. Turns are widened PAD_S (0.30 s) into
silence, which pyannote does not do (fitted with bench/speakers/der.py --pads; those numbers were
at 0.05 s): the meetings all 11 0.282 / 0.271, their held-out half 0.348 / 0.375 (0.314 / 0.343
at 0.05 s), the readers 0.009 (0.055), the held-out readers' recordings 0.005. (Before the once path
the rule chose 0.25 s: the readers 0.011, held out 0.006; the once path's readers at 0.25 s
0.013, held out 0.009.)
The frame times are the segmentation's (16.875 ms apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from transcriber.native.blas import bind_once
from transcriber.speakers import clustering
from transcriber.speakers.campplus import CAMPPlus
from transcriber.speakers.cores import Run, alone, on_cores, settle
from transcriber.speakers.fbank import FRAME_SHIFT, fbank
from transcriber.speakers.segmentation import (
    FRAME_STEP, SAMPLE_RATE, WINDOW_SAMPLES, Segmentation, num_frames, powerset_to_speakers)
from transcriber.speakers.weights import speaker_weights

STEP = 5.0  # seconds between window starts
MIN_EMBED_S = 0.4  # shortest speech a piece needs to take part in the clustering
MAX_EMBED_S = 3.0  # the most of a piece's speech embedded (CAM++'s cost is per frame; chunks are shorter)
MIN_FRAMES = 10  # filterbank frames (0.1 s) a piece needs to be kept at all
PAUSE_S = 0.6  # a local speaker's pause this long may cut its speech into pieces embedded apart
PIECE_S = 1.5  # ... when the pieces on both sides have this much speech
CHUNK_S = 1.5  # a longer piece is cut in equal chunks of about this length, each embedded
LENGTH_STEP = 20  # embedded frames rounded down to a multiple of this: CAM++ runs pieces of one length together
# A turn widened by this much each side into silence: the segmentation ends speech at its last
# voiced frame, a reference's turn often later. Fitted on the meetings' fit half and one of the
# three readers' recordings together (bench/speakers/der.py --pads: the least pad within 0.005 of
# the best sum of their DERs; the meetings alone prefer 0.05, the readers' pieces keep 0.3-0.55 s
# of near-silence at each end), the rest held out. 0.25 before the readers took the path that
# embeds each second once (ONCE_FROM_S, ONCE_STEP); refitted by the same rule then: 0.30.
PAD_S = 0.30
# Recordings this long or longer: each window embeds only its own part (``own_parts``), each
# second of speech once, not twice; shorter ones embed all each window hears (see the docstring).
ONCE_FROM_S = 60.0
ONCE_STEP = 7.5  # ... and their windows are this far apart (shorter ones: STEP; see the docstring)
CUT_S = 1.0  # two windows' own parts meet within this of the midpoint between their centres ...
QUIET_S = 0.3  # ... where the fewest local speakers of both speak over this long
FIRST_CENTRE = 495  # sample at the centre of a window's first frame
FRAME_SAMPLES = 270  # samples between segmentation frames


@dataclass
class Local:
    """The segmentation's view: window starts (samples) and hard local activity [windows,
    frames, 3]."""

    starts: np.ndarray
    activity: np.ndarray


@dataclass
class Piece:
    """A stretch of one local speaker's speech in one window: segmentation frames
    [span[0], span[1]) of the window, and the filterbank frames embedded for it."""

    window: int
    speaker: int
    span: tuple[int, int]
    frames: np.ndarray


def window_starts(n_samples: int, step: float = STEP) -> np.ndarray:
    """Start sample of every window: ``step`` apart, the last ending at the end (a window
    under 0.5 s after the one before it replaces that one)."""
    hop = int(round(step * SAMPLE_RATE))
    last = max(0, n_samples - WINDOW_SAMPLES)
    starts = list(range(0, last + 1, hop))
    if last - starts[-1] > SAMPLE_RATE // 2:
        starts.append(last)
    else:  # a window a few samples on would see nothing new: the last one moves to the end
        starts[-1] = last
    return np.array(starts, dtype=np.int64)


def segment(model: Segmentation, samples: np.ndarray, step: float = STEP, run: Run = alone) -> Local:
    """Step 1: the hard local activity of every window (``run``: cores.py's, the windows in parts
    side by side)."""
    starts = window_starts(len(samples), step)
    padded = np.zeros(max(len(samples), WINDOW_SAMPLES), dtype=np.float32)
    padded[:len(samples)] = samples
    windows = np.stack([padded[s:s + WINDOW_SAMPLES] for s in starts])
    return Local(starts, powerset_to_speakers(np.concatenate(run(model.scores, windows))))


def own_parts(local: Local) -> np.ndarray:
    """[windows, 2]: the frames [first, end) of each window whose speech it alone embeds. Two
    neighbouring windows' parts meet at the quietest frame (the fewest local speakers of both,
    over QUIET_S) within CUT_S of the midpoint between their centres, the nearest to it among
    equals: a cut inside a local speaker's speech leaves a short piece on each side, whose
    embeddings stray (a 0.4 s one made a speaker of its own). The first window's part from its
    start, the last one's to its end."""
    frames = local.activity.shape[1]
    first = np.round(local.starts / FRAME_SAMPLES).astype(np.int64)
    cuts = [first[w + 1] + _meeting(local.activity[w], local.activity[w + 1], first[w + 1] - first[w])
            for w in range(len(first) - 1)]
    lo = np.concatenate([[0], cuts]).astype(np.int64) - first
    hi = np.concatenate([cuts, [first[-1] + frames]]).astype(np.int64) - first
    return np.stack([np.clip(lo, 0, frames), np.clip(hi, 0, frames)], axis=1)


def _meeting(before: np.ndarray, after: np.ndarray, hop: int) -> int:
    """The frame of window ``after`` (``hop`` frames after window ``before``) where its own part
    begins."""
    frames = len(before)
    middle = (hop + frames) // 2 - hop
    if hop >= frames:
        return max(0, middle)
    both = before[hop:].sum(axis=1) + after[:frames - hop].sum(axis=1)
    busy = np.convolve(both, np.ones(max(1, int(round(QUIET_S / FRAME_STEP)))), mode="same")
    reach = int(round(CUT_S / FRAME_STEP))
    near = np.arange(max(0, middle - reach), min(len(both), middle + reach + 1))
    return int(near[np.lexsort((np.abs(near - middle), busy[near]))[0]])


def split_at_pauses(mask: np.ndarray, gap: int, least: int) -> list[tuple[int, int]]:
    """[(first, end)] frame spans of a local speaker's 0/1 activity: its speech cut where it
    pauses ``gap`` frames or more; a span of under ``least`` active frames joins the nearer
    neighbour (a short piece's embedding is too noisy to stand alone)."""
    on = np.flatnonzero(mask)
    if len(on) == 0:
        return []
    cuts = np.flatnonzero(np.diff(on) >= gap)
    spans = [[int(a), int(b) + 1] for a, b in zip(np.concatenate([[on[0]], on[cuts + 1]]),
                                                   np.concatenate([on[cuts], [on[-1]]]))]
    while len(spans) > 1:
        sizes = [int(mask[a:b].sum()) for a, b in spans]
        i = int(np.argmin(sizes))
        if sizes[i] >= least:
            break
        j = 1 if i == 0 else i - 1 if i == len(spans) - 1 or \
            spans[i][0] - spans[i - 1][1] <= spans[i + 1][0] - spans[i][1] else i + 1
        lo, hi = min(i, j), max(i, j)
        spans[lo:hi + 1] = [[spans[lo][0], spans[hi][1]]]
    return [(a, b) for a, b in spans]


def chunks(spans: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """Each span cut into equal parts of about ``size`` frames (one voice turn in a local
    speaker's speech without a pause is found only by embedding its parts apart)."""
    out = []
    for a, b in spans:
        edges = np.linspace(a, b, max(1, int(round((b - a) / size))) + 1).astype(int)
        out += [(int(x), int(y)) for x, y in zip(edges[:-1], edges[1:])]
    return out


def speaker_pieces(local: Local, n_fbank: int, own: Optional[np.ndarray] = None) -> list[Piece]:
    """Step 2's selection: every local speaker's speech in every window (only in its ``own``
    part, ``own_parts``, when given), cut at its pauses (``split_at_pauses``), each piece with
    the filterbank frames to embed: its frames alone when they reach MIN_EMBED_S, else all of
    them; at most MAX_EMBED_S (its longest runs)."""
    if own is None:
        own = np.array([[0, local.activity.shape[1]]] * len(local.starts))
    pieces = []
    least = int(MIN_EMBED_S * SAMPLE_RATE / FRAME_SHIFT)
    most = int(MAX_EMBED_S * SAMPLE_RATE / FRAME_SHIFT)
    gap, shortest = int(round(PAUSE_S / FRAME_STEP)), int(round(PIECE_S / FRAME_STEP))
    size = int(round(CHUNK_S / FRAME_STEP))
    for w, (start, (lo, hi)) in enumerate(zip(local.starts, own)):
        act = local.activity[w]
        alone = act * (act.sum(axis=1, keepdims=True) == 1)
        for k in range(act.shape[1]):
            for a, b in chunks(split_at_pauses(_within(act[:, k], lo, hi), gap, shortest), size):
                frames = _fbank_frames(_within(alone[:, k], a, b), int(start), n_fbank)
                if len(frames) < least:
                    frames = _fbank_frames(_within(act[:, k], a, b), int(start), n_fbank)
                if len(frames) >= MIN_FRAMES:
                    pieces.append(Piece(w, k, (a, b), longest_runs(frames, _rounded(len(frames), most))))
    return pieces


def _rounded(n: int, most: int) -> int:
    """How many of a piece's ``n`` frames to embed: at most ``most``, rounded down to a multiple
    of LENGTH_STEP (under LENGTH_STEP: all). Pieces of one length share CAM++ runs; 1.5 s
    chunks of every length one by one took twice as long as the model's work."""
    return min(most, n if n < LENGTH_STEP else n // LENGTH_STEP * LENGTH_STEP)


def _within(mask: np.ndarray, first: int, end: int) -> np.ndarray:
    """``mask`` with everything outside frames [first, end) off."""
    out = np.zeros_like(mask)
    out[first:end] = mask[first:end]
    return out


def longest_runs(frames: np.ndarray, most: int) -> np.ndarray:
    """At most ``most`` of the sorted frame indices: whole runs of consecutive ones, longest
    first (the last one cut), back in time order."""
    if len(frames) <= most:
        return frames
    runs = np.split(frames, np.flatnonzero(np.diff(frames) > 1) + 1)
    kept, total = [], 0
    for run in sorted(runs, key=len, reverse=True):
        kept.append(run[:most - total])
        total += len(kept[-1])
        if total >= most:
            break
    return np.sort(np.concatenate(kept))


def _fbank_frames(mask: np.ndarray, start: int, n_fbank: int) -> np.ndarray:
    """Filterbank frames (10 ms) whose centre lies in an active segmentation frame of the
    window starting at sample ``start``."""
    first = start // FRAME_SHIFT
    index = np.arange(first, min(n_fbank, first + WINDOW_SAMPLES // FRAME_SHIFT + 1))
    centres = index * FRAME_SHIFT + 200 - start - FIRST_CENTRE + FRAME_SAMPLES / 2
    seg_index = np.floor(centres / FRAME_SAMPLES).astype(np.int64)
    inside = (seg_index >= 0) & (seg_index < len(mask))
    return index[inside][mask[seg_index[inside]] > 0]


def embed(model: CAMPPlus, samples: np.ndarray, pieces: list[Piece], run: Run = alone) -> np.ndarray:
    """Step 2: a CAM++ embedding of each piece's frames, mean-normalised (``run``: as ``segment``'s)."""
    bank = fbank(samples)
    inputs = []
    for piece in pieces:
        chunk = bank[piece.frames]
        inputs.append(chunk - chunk.mean(axis=0, keepdims=True))
    return np.concatenate(run(model.embed, inputs)) if inputs else np.zeros((0, 192), np.float32)


def reconstruct(local: Local, pieces: list[Piece], labels: np.ndarray, second: np.ndarray,
                n_samples: int) -> np.ndarray:
    """Step 4: [file frames, speakers] 0/1 activity of the global speakers. ``second``: each
    piece's next best cluster, taken where the piece overlaps a window-mate of its own cluster."""
    n_speakers = int(labels.max()) + 1 if len(labels) else 0
    total = num_frames(max(n_samples, WINDOW_SAMPLES))
    frames = local.activity.shape[1]
    score = np.zeros((total, max(n_speakers, 1)), np.float32)
    count = np.zeros(total, np.float32)
    seen = np.zeros(total, np.float32)
    by_window: dict[int, list[int]] = {}
    for i, piece in enumerate(pieces):
        by_window.setdefault(piece.window, []).append(i)
    for w, start in enumerate(local.starts):
        first = int(round(start / FRAME_SAMPLES))
        n = min(frames, total - first)
        mine = by_window.get(w, [])
        score[first:first + n] += _window_speakers(local.activity[w, :n], [pieces[i] for i in mine], labels[mine],
                                                   second[mine], score.shape[1])
        count[first:first + n] += local.activity[w, :n].sum(axis=1)
        seen[first:first + n] += 1
    return _top_speakers(score / np.maximum(seen, 1)[:, None], np.floor(count / np.maximum(seen, 1) + 0.5))


def _window_speakers(activity: np.ndarray, pieces: list[Piece], labels: np.ndarray, second: np.ndarray,
                     n_speakers: int) -> np.ndarray:
    """One window's local activity [frames, 3] renamed to the global speakers [frames,
    n_speakers]: a piece's frames go to its cluster; where two local speakers of one cluster
    speak at once, the later piece's frames go to its next best cluster (a voice is heard once at
    a time: pyannote keeps window-mates in different clusters altogether)."""
    mapped = np.zeros((len(activity), n_speakers), np.float32)
    owner = np.full((len(activity), n_speakers), -1)
    for piece, label, other in zip(pieces, labels, second):
        a, b = piece.span
        own = np.zeros(len(activity), dtype=bool)
        own[a:b] = activity[a:b, piece.speaker] > 0
        clash = own & (owner[:, label] >= 0) & (owner[:, label] != piece.speaker)
        if other >= 0:
            mapped[clash, other] = 1
            own &= ~clash
        mapped[own, label] = 1
        owner[own, label] = piece.speaker
    return mapped


def _top_speakers(score: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Per frame, the ``count`` speakers of highest score (and a score above 0)."""
    order = np.argsort(-score, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(score.shape[1])[None, :].repeat(len(score), 0), axis=1)
    return ((rank < count[:, None]) & (score > 0)).astype(np.int8)


def widen(active: np.ndarray, frames: int) -> np.ndarray:
    """``active`` [frames, speakers] with each speaker's speech widened by ``frames`` each
    side into frames where nobody speaks (never over another speaker)."""
    if frames <= 0 or active.size == 0:
        return active
    silent = active.sum(axis=1) == 0
    out = active.copy()
    for shift in range(1, frames + 1):
        grown = np.zeros_like(active)
        grown[shift:] |= active[:-shift]
        grown[:-shift] |= active[shift:]
        out |= grown * silent[:, None].astype(active.dtype)
    return out


def to_turns(active: np.ndarray, n_samples: int) -> list[tuple[float, float, int]]:
    """Step 5: runs of active frames -> (start s, end s, label) turns sorted by start, labels
    renumbered in order of first speech. A frame covers FRAME_STEP around its centre."""
    duration = n_samples / SAMPLE_RATE
    turns = []
    for speaker in range(active.shape[1]):
        edges = np.flatnonzero(np.diff(np.concatenate([[0], active[:, speaker], [0]])))
        for a, b in zip(edges[::2], edges[1::2]):
            start = (FIRST_CENTRE / SAMPLE_RATE) + (a - 0.5) * FRAME_STEP
            end = (FIRST_CENTRE / SAMPLE_RATE) + (b - 0.5) * FRAME_STEP
            if min(end, duration) > max(start, 0.0):
                turns.append((max(start, 0.0), min(end, duration), speaker))
    turns.sort()
    order: dict[int, int] = {}
    for _, _, speaker in turns:
        order.setdefault(speaker, len(order))
    return [(round(float(s), 3), round(float(e), 3), order[k]) for s, e, k in turns]


class Diarizer:
    """The two models, loaded once; ``diarize`` per recording."""

    def __init__(self, segmentation: Segmentation, embedding: CAMPPlus, step: float = STEP,
                 threshold: float = clustering.THRESHOLD, pad: float = PAD_S, once_from: float = ONCE_FROM_S,
                 once_step: float = ONCE_STEP):
        self.segmentation, self.embedding = segmentation, embedding
        self.step, self.threshold, self.pad, self.once_from = step, threshold, pad, once_from
        self.once_step = once_step
        settle(segmentation, embedding)  # (their weights computed here: the parts run on other threads)

    @classmethod
    def from_weights(cls, weights, **options) -> "Diarizer":
        """From ``weights.speaker_weights()`` (its .segmentation and .embedding paths). MLX's
        matmuls are bound to the fast BLAS first, as loading a Whisper model does: a process that
        diarizes without one would run them on MLX's own sgemm, several times slower."""
        bind_once()
        return cls(Segmentation.from_weights(weights.segmentation), CAMPPlus.from_weights(weights.embedding), **options)

    def diarize(self, samples: np.ndarray, num_speakers: Optional[int] = None,
                min_speakers: Optional[int] = None, max_speakers: Optional[int] = None) -> list:
        """(start s, end s, label) speaker turns of 16 kHz mono samples, overlap allowed."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        if len(samples) == 0:
            return []
        return self.finish(self.prepare(samples), num_speakers, min_speakers, max_speakers)

    def prepare(self, samples: np.ndarray) -> "Prepared":
        """Steps 1 and 2, the models' part: what clustering needs (on every core: cores.py)."""
        with on_cores() as run:
            once = len(samples) >= self.once_from * SAMPLE_RATE
            local = segment(self.segmentation, samples, self.once_step if once else self.step, run)
            own = own_parts(local) if once else None
            pieces = speaker_pieces(local, max(0, 1 + (len(samples) - 400) // FRAME_SHIFT), own)
            return Prepared(local, pieces, embed(self.embedding, samples, pieces, run), len(samples))

    def finish(self, prepared: "Prepared", num_speakers: Optional[int] = None, min_speakers: Optional[int] = None,
               max_speakers: Optional[int] = None, threshold: Optional[float] = None,
               pad: Optional[float] = None) -> list:
        """Steps 3 to 5: cluster, reconstruct, turns (the benchmark varies the threshold and pad)."""
        sizes = np.array([len(piece.frames) for piece in prepared.pieces], dtype=np.int64)
        long = sizes >= int(MIN_EMBED_S * SAMPLE_RATE / FRAME_SHIFT)
        labels = clustering.cluster_then_assign(
            prepared.embeddings, long, self.threshold if threshold is None else threshold,
            num_speakers, min_speakers, max_speakers)
        second = clustering.runners_up(prepared.embeddings, labels)
        active = reconstruct(prepared.local, prepared.pieces, labels, second, prepared.n_samples)
        pad = self.pad if pad is None else pad
        return to_turns(widen(active, int(round(pad / FRAME_STEP))), prepared.n_samples)


@dataclass
class Prepared:
    """One recording's segmentation, its speakers' pieces and their embeddings."""

    local: Local
    pieces: list
    embeddings: np.ndarray
    n_samples: int


def diarize(samples: np.ndarray, num_speakers: Optional[int] = None, min_speakers: Optional[int] = None,
            max_speakers: Optional[int] = None) -> list:
    """Speaker turns of 16 kHz mono samples with the pulled weights (``Diarizer.diarize``)."""
    return Diarizer.from_weights(speaker_weights()).diarize(samples, num_speakers, min_speakers, max_speakers)
