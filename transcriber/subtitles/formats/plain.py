"""Plain text (``.txt``, a line per segment) and openai/whisper's TSV (``.tsv``: start, end, text), each
with the speakers when the transcript has them (a name before a line where the speaker changes; a
fourth column)."""

from __future__ import annotations

from transcriber.subtitles.cues import name_prefix
from transcriber.subtitles.formats.base import Format, milliseconds
from transcriber.transcript.text import layout_token
from transcriber.transcript.types import Transcript


def write_txt(transcript: Transcript) -> str:
    """The text, one line per segment (segments without text are left out); a segment whose
    speaker is not the one of the line before starts with its name ("Speaker 2: ...")."""
    lines, speaker = [], None
    for seg in transcript.segments:
        line = layout_token(seg.text)
        if not line:
            continue
        if seg.speaker is not None and seg.speaker != speaker:
            line = name_prefix(seg.speaker) + line
        lines.append(line)
        speaker = seg.speaker
    return "".join(line + "\n" for line in lines)


def write_tsv(transcript: Transcript) -> str:
    """Tab-separated segments as openai/whisper writes them: a ``start end text`` header, then
    start and end in integer milliseconds and the text (tabs in it made spaces). A transcript
    with speakers gets a fourth column, ``speaker`` (empty for a segment without one), after
    whisper's three, so what reads those reads them still."""
    labelled = any(seg.speaker is not None for seg in transcript.segments)
    rows = ["start\tend\ttext" + ("\tspeaker" if labelled else "")]
    for seg in transcript.segments:
        text = layout_token(seg.text)
        if text:
            speaker = "\t" + layout_token(seg.speaker or "") if labelled else ""
            rows.append(f"{milliseconds(seg.start)}\t{milliseconds(seg.end)}\t{text}{speaker}")
    return "".join(row + "\n" for row in rows)


TXT = Format(".txt", lambda t, o: write_txt(t), http=True)
TSV = Format(".tsv", lambda t, o: write_tsv(t), http=True)
