"""SubRip (``.srt``): numbered cues with ``hh:mm:ss,ttt`` times, written through the ``srt`` library."""

from __future__ import annotations

from datetime import timedelta

import srt

from transcriber.subtitles.cues import CueOptions, transcript_cues
from transcriber.subtitles.formats.base import HIGHLIGHT_WORDS, Format, milliseconds, speaker_lines, word_lines
from transcriber.transcript.types import Transcript


def _highlighted(cue) -> list[tuple[float, float, str]]:
    """(start, end, text) of one cue as openai/whisper's highlight_words shows it: a cue per
    word, that word underlined, and the plain text over the gaps between words."""
    spoken = [w for w in cue.words if w.text.strip()]
    out, last = [], cue.start
    text = _text(cue, list(cue.lines))
    for n, word in enumerate(spoken):
        start, end = min(max(word.start, last), cue.end), min(max(word.end, last), cue.end)
        if start > last:
            out.append((last, start, text))
        if end > start:  # a word of no length is never on screen alone
            lines = word_lines(cue, lambda k, token, _: f"<u>{token}</u>" if k == n else token)
            out.append((start, end, _text(cue, lines)))
            last = end
    if last < cue.end:
        out.append((last, cue.end, text))
    return out


def _text(cue, lines: list[str]) -> str:
    """A cue's text: its lines, the speaker's name before the first where a turn starts, or
    dialogue dashes (``speaker_lines``)."""
    return "\n".join(speaker_lines(cue, lines))


def write_srt(transcript: Transcript, cue_options: CueOptions = CueOptions(), highlight_words: bool = False) -> str:
    """SubRip text: cues numbered from 1, ``hh:mm:ss,ttt`` times; "" for no speech. With
    ``highlight_words`` each cue is shown once per word, the word being spoken underlined.
    Speakers: "Speaker 1: " before a cue where the speaker changes, or dialogue dashes."""
    cues = [cue for cue in transcript_cues(transcript, cue_options) if cue.text]  # no empty blocks
    timed = [piece for cue in cues for piece in _highlighted(cue)] if highlight_words else \
        [(cue.start, cue.end, _text(cue, list(cue.lines))) for cue in cues]
    subtitles = [srt.Subtitle(index=i, start=timedelta(milliseconds=milliseconds(start)),
                              end=timedelta(milliseconds=milliseconds(end)), content=text)
                 for i, (start, end, text) in enumerate(timed, start=1)]
    return srt.compose(subtitles, reindex=True, start_index=1)


FORMAT = Format(".srt", lambda t, o: write_srt(t, o.cues, highlight_words=o.highlight_words), (HIGHLIGHT_WORDS,),
                http=True, subtitle=True)
