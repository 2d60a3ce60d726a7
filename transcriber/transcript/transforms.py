"""Transcripts from the engines' segments, and the transforms between them: the place a stage
that changes words after decoding goes (speaker labels, say), one function each.

    transcript = assemble(segments, language, duration)   # the steps' segments -> Transcript

``assemble`` runs the transforms every transcript gets: a punctuation-only word joined to the
word before it (``attach_punctuation``), then times made safe for the writers (``tidy``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

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
