"""Plain text (``.txt``, a line per segment) and openai/whisper's TSV (``.tsv``: start, end, text)."""

from __future__ import annotations

from transcriber.subtitles.formats.base import Format, milliseconds
from transcriber.transcript.text import layout_token
from transcriber.transcript.types import Transcript


def write_txt(transcript: Transcript) -> str:
    """The text, one line per segment (segments without text are left out)."""
    lines = [layout_token(s.text) for s in transcript.segments]
    lines = [line for line in lines if line]
    return "".join(line + "\n" for line in lines)


def write_tsv(transcript: Transcript) -> str:
    """Tab-separated segments as openai/whisper writes them: a ``start end text`` header, then
    start and end in integer milliseconds and the text (tabs in it made spaces)."""
    rows = ["start\tend\ttext"]
    for seg in transcript.segments:
        text = layout_token(seg.text)
        if text:
            rows.append(f"{milliseconds(seg.start)}\t{milliseconds(seg.end)}\t{text}")
    return "".join(row + "\n" for row in rows)


TXT = Format(".txt", lambda t, o: write_txt(t), http=True)
TSV = Format(".tsv", lambda t, o: write_tsv(t), http=True)
