"""Transcripts from the engines' segments, and the transforms between them: the place a stage
that changes words after decoding goes (speaker labels, say), one function each.

    transcript = assemble(segments, language, duration)   # the steps' segments -> Transcript

``assemble`` runs the transforms every transcript gets: a punctuation-only word joined to the
word before it (``attach_punctuation``), then times made safe for the writers (``tidy``).
``label_speakers`` is the speaker stage: speaker turns (from any diarizer) onto the words.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Hashable, Optional, Sequence

from transcriber.transcript.text import is_attached_mark
from transcriber.transcript.types import Segment, Transcript, Word


def tidy(segments: list[Segment], duration: float) -> list[Segment]:
    """Make times safe for writers: inside [0, duration], words non-decreasing and
    non-overlapping, segments bounded by their words."""
    out, prev_end = [], 0.0
    for seg in segments:
        words = []
        for w in seg.words:
            start = min(max(w.start, prev_end), duration)
            end = min(max(w.end, start), duration)
            words.append(replace(w, start=start, end=end))
            prev_end = end
        if words:
            seg = replace(seg, start=words[0].start, end=words[-1].end, words=tuple(words))
        else:
            start = min(max(seg.start, prev_end), duration)
            seg = replace(seg, start=start, end=min(max(seg.end, start), duration))
            prev_end = seg.end
        out.append(seg)
    return out


def attach_punctuation(segments: list[Segment], language: Optional[str] = None) -> list[Segment]:
    """Each punctuation-only word joined to the word before it (in its segment, else the last
    word of the segment before), keeping that word's times; segments left without words go."""
    out: list[Segment] = []
    for seg in segments:
        words: list[Word] = []
        for w in seg.words:
            if not is_attached_mark(w.text, language):
                words.append(w)
            elif words:
                words[-1] = replace(words[-1], text=words[-1].text + w.text.strip())
            elif out and out[-1].words:
                last = out[-1]
                merged = last.words[:-1] + (replace(last.words[-1], text=last.words[-1].text + w.text.strip()),)
                out[-1] = replace(last, words=merged, text="".join(x.text for x in merged))
        if not seg.words:
            out.append(seg)
        elif words:
            changed = len(words) != len(seg.words) or any(a is not b for a, b in zip(words, seg.words))
            out.append(replace(seg, words=tuple(words), text="".join(x.text for x in words)) if changed else seg)
    return out


def assemble(segments, language: Optional[str], duration: Optional[float], model: str = "",
             language_probability: Optional[float] = None, task: str = "transcribe",
             offset: float = 0.0) -> Transcript:
    """The transcript of a file from the segments of all its steps. ``duration`` 0 or None
    (unknown from the container): the end of the last segment. ``task``: "translate" when the
    text is the English translation of ``language``. ``offset``: the steps' (``Step.offset``),
    said by the transcript."""
    segments = attach_punctuation(list(segments), language)
    if not duration or duration <= 0:
        duration = max([0.0] + [s.end for s in segments])
    return Transcript(language=language or "en", duration=duration, segments=tuple(tidy(segments, duration)),
                      model=model, language_probability=language_probability, task=task, offset=offset)


# --- speaker labels -----------------------------------------------------------------------

# A word that no turn overlaps (a diarizer's turns miss short words and word edges) takes the
# nearest turn within this many seconds; farther from every turn it stays unlabelled (None).
SPEAKER_REACH = 1.0


class _Turns:
    """Speaker turns (start, end, label), sorted by start, with the running maximum of their
    ends: the turns near a time are found by bisection, without a pass over all of them."""

    def __init__(self, turns: Sequence[tuple[float, float, Hashable]]):
        self.turns = sorted(((float(s), float(e), label) for s, e, label in turns if float(e) >= float(s)),
                            key=lambda t: (t[0], t[1]))
        self.starts = [t[0] for t in self.turns]
        self.max_ends, reach = [], float("-inf")
        for _, end, _ in self.turns:
            reach = max(reach, end)
            self.max_ends.append(reach)

    def speaker(self, start: float, end: float) -> Optional[Hashable]:
        """The label of the turn that overlaps [start, end] most; with no overlap, of the
        nearest turn within SPEAKER_REACH; else None. Ties: the turn that starts first."""
        k = bisect.bisect_right(self.starts, end + SPEAKER_REACH) - 1
        best, best_key = None, None
        while k >= 0 and self.max_ends[k] >= start - SPEAKER_REACH:
            t_start, t_end, label = self.turns[k]
            overlap = min(end, t_end) - max(start, t_start)
            distance = max(t_start - end, start - t_end, 0.0)
            key = (overlap if overlap > 0 else 0.0, -distance, -k)
            if distance <= SPEAKER_REACH and (best_key is None or key > best_key):
                best, best_key = label, key
            k -= 1
        return best


def _split_by_speaker(seg: Segment) -> list[Segment]:
    """The segment as runs of one speaker's words (itself when it has one speaker). Each piece
    keeps the window's scores (as whisper's segments of one window share them) and takes its
    own words' text, times and tokens."""
    runs: list[list[Word]] = []
    for w in seg.words:
        if runs and runs[-1][-1].speaker == w.speaker:
            runs[-1].append(w)
        else:
            runs.append([w])
    if len(runs) <= 1:
        return [replace(seg, speaker=runs[0][0].speaker if runs else seg.speaker)]
    return [replace(seg, start=run[0].start, end=run[-1].end, text="".join(w.text for w in run), words=tuple(run),
                    tokens=tuple(t for w in run for t in w.tokens), speaker=run[0].speaker) for run in runs]


def label_speakers(transcript: Transcript, turns: Sequence[tuple[float, float, Hashable]]) -> Transcript:
    """The transcript with a speaker on every word and segment, from speaker turns ``(start,
    end, label)`` (seconds on the transcript's timeline; they may overlap; any labels).

    A word takes the speaker of the turn over most of it (``_Turns.speaker``: else the nearest
    within SPEAKER_REACH, else None). Labels are renamed "Speaker 1", "Speaker 2"... in order
    of first speech. A segment whose words change speaker is split where they change, so each
    segment has one speaker, its words'; a segment without words takes the turn over most of it.
    """
    found = _Turns(turns)
    raw = [[found.speaker(w.start, w.end) for w in seg.words] or [found.speaker(seg.start, seg.end)]
           for seg in transcript.segments]
    names: dict[Hashable, str] = {}
    for labels in raw:
        for label in labels:
            if label is not None and label not in names:
                names[label] = f"Speaker {len(names) + 1}"
    segments: list[Segment] = []
    for seg, labels in zip(transcript.segments, raw):
        if not seg.words:
            segments.append(replace(seg, speaker=names.get(labels[0])))
            continue
        words = tuple(replace(w, speaker=names.get(label)) for w, label in zip(seg.words, labels))
        segments.extend(_split_by_speaker(replace(seg, words=words)))
    return replace(transcript, segments=tuple(segments))
