"""WebVTT (``.vtt``): cues with ``hh:mm:ss.ttt`` times, escaped as HTML-like cue text; karaoke timestamps on request."""

from __future__ import annotations

import html

from transcriber.subtitles.cues import DASH, CueOptions, transcript_cues
from transcriber.subtitles.formats.base import VTT_KARAOKE, Format, milliseconds, word_lines
from transcriber.transcript.types import Transcript, Word


def vtt_timestamp(seconds: float) -> str:
    """``hh:mm:ss.ttt``, hours always present (as WebVTT cue timings allow)."""
    ms = milliseconds(seconds)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}.{ms:03d}"


def _vtt_escape(text: str) -> str:
    # WebVTT cue text is HTML-like: & < > must be character references
    return html.escape(text, quote=False)


def _karaoke_lines(cue) -> list[str]:
    """Cue lines with an inline ``<hh:mm:ss.ttt>`` before every word after the first.

    A timestamp is kept inside the cue's own times, as WebVTT requires.
    """
    def render(n: int, token: str, word: Word) -> str:
        at = min(max(word.start, cue.start), cue.end)
        return _vtt_escape(token) if n == 0 else f"<{vtt_timestamp(at)}>{_vtt_escape(token)}"

    return word_lines(cue, render)


def _voiced(cue, lines: list[str]) -> list[str]:
    """Cue lines (escaped) in WebVTT voice spans: ``<v Speaker 1>`` before the first line (the
    span runs to the cue's end, its end tag left out as the spec allows); in a dialogue cue each
    line its own ``<v Speaker 2>- ...</v>``. The name is escaped as the spec's annotation
    (``&amp;``, ``&lt;``, ``&gt;``). Unlabelled: as they are."""
    if cue.dialogue:  # (a side without a speaker: no span)
        return [f"<v {_vtt_escape(speaker)}>{DASH}{line}</v>" if speaker is not None else DASH + line
                for speaker, line in zip(cue.speakers, lines)]
    if cue.speaker is not None and lines:
        return [f"<v {_vtt_escape(cue.speaker)}>{lines[0]}", *lines[1:]]
    return lines


def write_vtt(transcript: Transcript, cue_options: CueOptions = CueOptions(),
              karaoke: bool = False) -> str:
    """WebVTT text; with ``karaoke``, inline word timestamps; speakers as voice spans
    (``<v Speaker 1>``). Just the header for no speech."""
    blocks = ["WEBVTT\n"]
    for cue in transcript_cues(transcript, cue_options):
        if not cue.text:
            continue
        lines = _voiced(cue, _karaoke_lines(cue) if karaoke else [_vtt_escape(line) for line in cue.lines])
        timing = f"{vtt_timestamp(cue.start)} --> {vtt_timestamp(cue.end)}"
        blocks.append("\n".join([timing, *lines]) + "\n")
    return "\n".join(blocks)


FORMAT = Format(".vtt", lambda t, o: write_vtt(t, o.cues, karaoke=o.vtt_karaoke), (VTT_KARAOKE,), "text/vtt",
                http=True, subtitle=True)
