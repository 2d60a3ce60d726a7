"""What every output format shares: ``OutputOptions`` (the cue layout and each format's own
options, declared here as ``Option``s so the command line makes its flags from them), the
``Format`` entry each format module exports, and the helpers of the subtitle formats (times in
milliseconds, a cue's lines word by word)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional

from transcriber.options import Option, build, check_fields
from transcriber.subtitles.cues import DASH, CueOptions, name_prefix
from transcriber.subtitles.lines import line_layout
from transcriber.transcript.speakers import SpeakerOptions
from transcriber.transcript.text import layout_token
from transcriber.transcript.types import Transcript, Word

# The formats' own options (each format's entry in FORMATS names those it reads).
VTT_KARAOKE = Option("vtt_karaoke", "WebVTT: an inline <hh:mm:ss.ttt> timestamp before every word.", bool)
HIGHLIGHT_WORDS = Option("highlight_words", "SRT: the word being spoken underlined; ASS: karaoke.", bool)
JSON_CUES = Option("json_cues", "JSON: the subtitle cues too, next to the word timeline.", bool)
EMBED = Option("embed", "Also write the subtitles (SRT) into a copy of the video, NAME.subtitled.EXT beside the "
               "other outputs (MKV, WebM, MP4, M4V, MOV; every stream copied, the track tagged with its "
               "language); 'in-place': into the video itself, verified before it replaces it.",
               str, choices=("copy", "in-place"), example="copy")


@dataclass(frozen=True)
class OutputOptions:
    """How a transcript becomes files: the cue layout, plus choices that belong to one format.

    None of it changes the words, so outputs can be rewritten with other options without
    transcribing again.
    """

    cues: CueOptions = field(default_factory=CueOptions)
    # WebVTT: an inline <hh:mm:ss.ttt> before every word after the first
    vtt_karaoke: bool = VTT_KARAOKE.field(False)
    # SRT: the word being spoken underlined (one cue per word, as openai/whisper's
    # highlight_words); ASS: karaoke tags ({\k}), the player colours each word as it is spoken
    highlight_words: bool = HIGHLIGHT_WORDS.field(False)
    json_cues: bool = JSON_CUES.field(False)  # JSON: the cues too, next to the word timeline
    embed: Optional[str] = EMBED.field(None)  # the subtitles muxed into the video (transcriber/subtitles/embed.py)
    # who speaks: the speaker pass run before the files are written (transcriber.add_speakers)
    speakers: SpeakerOptions = field(default_factory=SpeakerOptions)

    def __post_init__(self) -> None:
        if not isinstance(self.cues, CueOptions):
            raise ValueError(f"OutputOptions.cues must be CueOptions, got {self.cues!r}")
        if not isinstance(self.speakers, SpeakerOptions):
            raise ValueError(f"OutputOptions.speakers must be SpeakerOptions, got {self.speakers!r}")
        check_fields(self, qualified=True)

    @classmethod
    def named(cls, given: dict[str, Any]) -> "OutputOptions":
        """The options of these values by option name (``{"max_cps": 15, "vtt_karaoke": True}``;
        the others at their defaults). OptionError for a bad value."""
        return build(cls, given)


Render = Callable[[Transcript, OutputOptions], str]


class Format(NamedTuple):
    """One output format: the extension of its files, its renderer (transcript and options ->
    the file's text), the options only it reads (``OutputOptions`` fields; the cue layout is
    every subtitle format's), the media type HTTP serves it as, whether ``transcribe serve``
    offers it (whisper-asr-webservice's ``output``), and whether it is a subtitle format (no
    file of it for a transcript without speech: ``files.render_outputs``), and whether its
    renderer takes the file's name too, as a third argument (RTTM's file id: ``named``)."""

    extension: str
    render: Render
    options: tuple[Option, ...] = ()
    media_type: str = "text/plain"
    http: bool = False
    subtitle: bool = False
    named: bool = False


def milliseconds(seconds: float) -> int:
    """Seconds as whole milliseconds, never negative (subtitle formats have no sign)."""
    return max(0, round(seconds * 1000))


def speaker_lines(cue, lines: list[str]) -> list[str]:
    """A cue's lines as the formats that show speakers in the text write them (SRT; WebVTT and
    ASS in a dialogue cue): each line of a dialogue cue after ``- ``, else the speaker's name
    before the first line of a cue that starts a turn (``Speaker 1: ``). Unlabelled: as they are."""
    if cue.dialogue:
        return [DASH + line for line in lines]
    if cue.named and lines:
        return [name_prefix(cue.speaker) + lines[0], *lines[1:]]
    return list(lines)


def word_lines(cue, render: Callable[[int, str, Word], str]) -> list[str]:
    """The cue's lines, each word as ``render(n, token, word)`` makes it (``n``: its number
    among the cue's words with text, from 0), separated as on the cue's line (a space, or
    nothing in scripts written without spaces)."""
    lines, n = [], 0
    for words in line_layout(cue):
        parts = []
        for sep, word in words:
            token = layout_token(word.text)
            if token:
                parts.append(sep + render(n, token, word))
                n += 1
        lines.append("".join(parts))
    return lines
