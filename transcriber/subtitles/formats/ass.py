"""ASS (Advanced SubStation Alpha, ``.ass``): one style, a Dialogue event per cue, karaoke tags on request."""

from __future__ import annotations

from transcriber.subtitles.cues import DASH, CueOptions, transcript_cues
from transcriber.subtitles.formats.base import HIGHLIGHT_WORDS, Format, word_lines
from transcriber.transcript.types import Transcript


# ASS (Advanced SubStation Alpha, as libass, mpv, VLC and ffmpeg read it): one style, white text
# with a black outline at the bottom centre; the karaoke colour (SecondaryColour) is yellow.
ASS_HEADER = """[Script Info]
ScriptType: v4.00+
PlayResX: 384
PlayResY: 288
WrapStyle: 0
ScaledBorderAndShadow: yes

[V4+ Styles]
Format: Name, Fontname, Fontsize, PrimaryColour, SecondaryColour, OutlineColour, BackColour, Bold, Italic, \
Underline, StrikeOut, ScaleX, ScaleY, Spacing, Angle, BorderStyle, Outline, Shadow, Alignment, MarginL, MarginR, \
MarginV, Encoding
Style: Default,Arial,18,&H00FFFFFF,&H0000FFFF,&H00000000,&H80000000,0,0,0,0,100,100,0,0,1,1,0.5,2,10,10,12,1

[Events]
Format: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text
"""


def ass_timestamp(seconds: float) -> str:
    """``h:mm:ss.cc``: ASS times are in centiseconds."""
    cs = max(0, round(seconds * 100))
    hours, cs = divmod(cs, 360_000)
    minutes, cs = divmod(cs, 6000)
    secs, cs = divmod(cs, 100)
    return f"{hours}:{minutes:02d}:{secs:02d}.{cs:02d}"


def _ass_escape(text: str) -> str:
    # braces open override blocks and a backslash starts a tag (\N, \h): keep them text
    return text.replace("\\", "\\\u2060").replace("{", "\\{").replace("}", "\\}")


def _ass_karaoke(cue) -> list[str]:
    """Lines with a ``{\\kN}`` before every word: N centiseconds from that word's start to the
    next word's (the first from the cue's start), so the words fill the cue's time."""
    spoken = [w for w in cue.words if w.text.strip()]
    starts = [cue.start] + [min(max(w.start, cue.start), cue.end) for w in spoken[1:]] + [cue.end]
    lengths = [max(0, round(b * 100) - round(a * 100)) for a, b in zip(starts, starts[1:])]
    return word_lines(cue, lambda n, token, _: f"{{\\k{lengths[n]}}}{_ass_escape(token)}")


def _ass_name(cue) -> str:
    """The Dialogue event's Name field: the cue's speaker (both, joined by " & ", in a dialogue
    cue), "" when not labelled. A comma would end the field: none is kept."""
    names = dict.fromkeys(s for s in cue.speakers if s is not None)
    return " & ".join(names).replace(",", " ")


def write_ass(transcript: Transcript, cue_options: CueOptions = CueOptions(), karaoke: bool = False) -> str:
    """ASS text: the header and style, then a Dialogue event per cue (lines joined by ``\\N``);
    with ``karaoke``, a ``{\\k}`` tag before every word; the speaker in the Name field (and
    dialogue dashes in a dialogue cue). Just the header for no speech."""
    events = []
    for cue in transcript_cues(transcript, cue_options):
        if not cue.text:
            continue
        lines = _ass_karaoke(cue) if karaoke else [_ass_escape(line) for line in cue.lines]
        if cue.dialogue:
            lines = [DASH + line for line in lines]
        events.append(f"Dialogue: 0,{ass_timestamp(cue.start)},{ass_timestamp(cue.end)},Default,{_ass_name(cue)},0,0,0,,"
                      + "\\N".join(lines))
    return ASS_HEADER + "".join(event + "\n" for event in events)


FORMAT = Format(".ass", lambda t, o: write_ass(t, o.cues, karaoke=o.highlight_words), (HIGHLIGHT_WORDS,),
                subtitle=True)
