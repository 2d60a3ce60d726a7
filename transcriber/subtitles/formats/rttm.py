"""RTTM (``.rttm``), the diarization scorers' format (NIST md-eval, pyannote.metrics, dscore): a
``SPEAKER`` line per speaker turn, made from the words' speaker labels. Only for a transcript
with speakers: without them there is nothing to write, and the renderer says how to get them."""

from __future__ import annotations

import re
from typing import Optional

from transcriber.subtitles.formats.base import Format
from transcriber.transcript.types import Transcript, Word

# Consecutive words of one speaker make one turn while the silence between them is shorter
# than this; a longer one (or another speaker, or an unlabelled word) ends the turn. Half a
# second: a pause inside a sentence stays in its turn, the gap between two sentences with a
# breath does not always (the AMI references split turns at pauses of about that length).
TURN_GAP = 0.5

NO_SPEAKERS = "rttm needs speaker labels, and this transcript has none: run with --speakers"


def _field(text: str) -> str:
    """RTTM fields are separated by whitespace: a label or file id keeps none ("Speaker_1")."""
    return re.sub(r"\s+", "_", text.strip()) or "<NA>"


def speaker_turns(transcript: Transcript) -> list[tuple[float, float, str]]:
    """(start, end, speaker) turns from the words (``TURN_GAP``); unlabelled words make none."""
    turns: list[tuple[float, float, str]] = []
    last: Optional[Word] = None
    for word in transcript.words:
        if not word.text.strip():  # no text: no part in a turn
            continue
        if word.speaker is None:  # an unlabelled word ends the turn
            last = None
            continue
        if turns and last is not None and last.speaker == word.speaker and word.start - last.end < TURN_GAP:
            turns[-1] = (turns[-1][0], max(turns[-1][1], word.end), word.speaker)
        else:
            turns.append((word.start, word.end, word.speaker))
        last = word
    return turns


def write_rttm(transcript: Transcript, file_id: str = "audio") -> str:
    """``SPEAKER <file-id> 1 <start> <duration> <NA> <NA> <speaker> <NA> <NA>``, a line per turn
    in time order, times in seconds with three decimals, spaces in names made ``_``.
    ValueError (``NO_SPEAKERS``) for a transcript with words and no speaker; a transcript
    without words (no speech) is an empty file."""
    if transcript.words and not any(w.speaker is not None for w in transcript.words):
        raise ValueError(NO_SPEAKERS)
    return "".join(f"SPEAKER {_field(file_id)} 1 {start:.3f} {max(0.0, end - start):.3f} <NA> <NA> "
                   f"{_field(speaker)} <NA> <NA>\n" for start, end, speaker in speaker_turns(transcript))


# Not offered over HTTP: serve's answers come from transcripts without speakers (until asked for).
FORMAT = Format(".rttm", lambda t, o, name="audio": write_rttm(t, name), named=True)
