"""Output formats (SRT, WebVTT, JSON word timeline, plain text, TSV, ASS) and atomic file writing.

``FORMATS`` is the registry: one ``Format`` per format name, with its file extension, its
renderer and the options only it reads (openai/whisper's ``ResultWriter`` subclasses as data).
A new format is one render function and one entry; its own options are ``Option``s declared
here and attached to ``OutputOptions``, and the command line makes its flags from them
(``output_option_table``). Every render function is pure (transcript in, text out); ``write_outputs`` renders every
requested format before it writes any file, and each file is written to a temporary file in
the target directory and renamed over the target, so a reader never sees a partial output.
The writes are made by the reader child, with the bound on reads (``transcriber.bounded``): an
outputs' folder on a hung mount is an OutputError naming it, not a wait forever.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

import srt

from transcriber.bounded import ReadTimeout, bounded
from transcriber.cues import CueOptions, transcript_cues
from transcriber.errors import OutputError
from transcriber.lines import line_layout
from transcriber.options import Option, build, check_fields, options_of
from transcriber.text import layout_token
from transcriber.types import Transcript, Word

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
    embed: Optional[str] = EMBED.field(None)  # the subtitles muxed into the video (transcriber/embed.py)

    def __post_init__(self) -> None:
        if not isinstance(self.cues, CueOptions):
            raise ValueError(f"OutputOptions.cues must be CueOptions, got {self.cues!r}")
        check_fields(self, qualified=True)

    @classmethod
    def named(cls, given: dict[str, Any]) -> "OutputOptions":
        """The options of these values by option name (``{"max_cps": 15, "vtt_karaoke": True}``;
        the others at their defaults). OptionError for a bad value."""
        return build(cls, given)

def _milliseconds(seconds: float) -> int:
    """Seconds as whole milliseconds, never negative (subtitle formats have no sign)."""
    return max(0, round(seconds * 1000))


def _word_lines(cue, render: Callable[[int, str, Word], str]) -> list[str]:
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


def _highlighted(cue) -> list[tuple[float, float, str]]:
    """(start, end, text) of one cue as openai/whisper's highlight_words shows it: a cue per
    word, that word underlined, and the plain text over the gaps between words."""
    spoken = [w for w in cue.words if w.text.strip()]
    out, last = [], cue.start
    for n, word in enumerate(spoken):
        start, end = min(max(word.start, last), cue.end), min(max(word.end, last), cue.end)
        if start > last:
            out.append((last, start, cue.text))
        if end > start:  # a word of no length is never on screen alone
            text = "\n".join(_word_lines(cue, lambda k, token, _: f"<u>{token}</u>" if k == n else token))
            out.append((start, end, text))
            last = end
    if last < cue.end:
        out.append((last, cue.end, cue.text))
    return out


def write_srt(transcript: Transcript, cue_options: CueOptions = CueOptions(), highlight_words: bool = False) -> str:
    """SubRip text: cues numbered from 1, ``hh:mm:ss,ttt`` times; "" for no speech. With
    ``highlight_words`` each cue is shown once per word, the word being spoken underlined."""
    cues = [cue for cue in transcript_cues(transcript, cue_options) if cue.text]  # no empty blocks
    timed = [piece for cue in cues for piece in _highlighted(cue)] if highlight_words else \
        [(cue.start, cue.end, cue.text) for cue in cues]
    subtitles = [srt.Subtitle(index=i, start=timedelta(milliseconds=_milliseconds(start)),
                              end=timedelta(milliseconds=_milliseconds(end)), content=text)
                 for i, (start, end, text) in enumerate(timed, start=1)]
    return srt.compose(subtitles, reindex=True, start_index=1)


def vtt_timestamp(seconds: float) -> str:
    """``hh:mm:ss.ttt``, hours always present (as WebVTT cue timings allow)."""
    ms = _milliseconds(seconds)
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

    return _word_lines(cue, render)


def write_vtt(transcript: Transcript, cue_options: CueOptions = CueOptions(),
              karaoke: bool = False) -> str:
    """WebVTT text; with ``karaoke``, inline word timestamps. Just the header for no speech."""
    blocks = ["WEBVTT\n"]
    for cue in transcript_cues(transcript, cue_options):
        if not cue.text:
            continue
        lines = _karaoke_lines(cue) if karaoke else [_vtt_escape(line) for line in cue.lines]
        timing = f"{vtt_timestamp(cue.start)} --> {vtt_timestamp(cue.end)}"
        blocks.append("\n".join([timing, *lines]) + "\n")
    return "\n".join(blocks)


def write_json(transcript: Transcript, include_cues: bool = False,
               cue_options: CueOptions = CueOptions()) -> str:
    """The word timeline: ``Transcript.to_dict()``, plus ``"cues"`` when asked."""
    data = transcript.to_dict()
    if include_cues:
        data["cues"] = [cue.to_dict() for cue in transcript_cues(transcript, cue_options)]
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


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
            rows.append(f"{_milliseconds(seg.start)}\t{_milliseconds(seg.end)}\t{text}")
    return "".join(row + "\n" for row in rows)


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
    return _word_lines(cue, lambda n, token, _: f"{{\\k{lengths[n]}}}{_ass_escape(token)}")


def write_ass(transcript: Transcript, cue_options: CueOptions = CueOptions(), karaoke: bool = False) -> str:
    """ASS text: the header and style, then a Dialogue event per cue (lines joined by ``\\N``);
    with ``karaoke``, a ``{\\k}`` tag before every word. Just the header for no speech."""
    events = []
    for cue in transcript_cues(transcript, cue_options):
        if not cue.text:
            continue
        lines = _ass_karaoke(cue) if karaoke else [_ass_escape(line) for line in cue.lines]
        events.append(f"Dialogue: 0,{ass_timestamp(cue.start)},{ass_timestamp(cue.end)},Default,,0,0,0,,"
                      + "\\N".join(lines))
    return ASS_HEADER + "".join(event + "\n" for event in events)


Render = Callable[[Transcript, OutputOptions], str]


class Format(NamedTuple):
    """One output format: the extension of its files, its renderer (transcript and options ->
    the file's text) and the options only it reads (``OutputOptions`` fields; the cue layout is
    every subtitle format's)."""

    extension: str
    render: Render
    options: tuple[Option, ...] = ()


# format name -> Format, in the order --help lists them
FORMATS: dict[str, Format] = {
    "srt": Format(".srt", lambda t, o: write_srt(t, o.cues, highlight_words=o.highlight_words), (HIGHLIGHT_WORDS,)),
    "vtt": Format(".vtt", lambda t, o: write_vtt(t, o.cues, karaoke=o.vtt_karaoke), (VTT_KARAOKE,)),
    "json": Format(".json", lambda t, o: write_json(t, include_cues=o.json_cues, cue_options=o.cues), (JSON_CUES,)),
    "txt": Format(".txt", lambda t, o: write_txt(t)),
    "tsv": Format(".tsv", lambda t, o: write_tsv(t)),
    "ass": Format(".ass", lambda t, o: write_ass(t, o.cues, karaoke=o.highlight_words), (HIGHLIGHT_WORDS,)),
}
# The subtitle formats: no file of them for a transcript without speech (``render_outputs``).
SUBTITLE_FORMATS = ("srt", "vtt", "ass")


@functools.lru_cache(maxsize=None)
def output_option_table() -> dict[str, tuple[Option, tuple[str, ...], Any]]:
    """Every output option the command line offers, in ``OutputOptions`` order: name ->
    (Option, the formats that read it: () for the cue layout's, which every subtitle format
    reads; its default). Made once: not to be modified."""
    readers: dict[str, tuple[str, ...]] = {}
    for name, fmt in FORMATS.items():
        for option in fmt.options:
            readers[option.name] = (*readers.get(option.name, ()), name)
    defaults, table = OutputOptions(), {}
    for name, (option, path) in options_of(OutputOptions).items():
        if option.library_only:
            continue
        default = defaults
        for attribute in path:  # ("cues", "max_lines")
            default = getattr(default, attribute)
        table[name] = (option, readers.get(name, ()), default)
    return table



def _one_line(error: BaseException) -> str:
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return " ".join((reason or type(error).__name__).split())


def _umask() -> int:
    # os.umask can only be read by setting it; done once, at import, to keep the window
    # in which another thread could create a file with a zero umask out of the job loop
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


# The mode a plain open() gives a new file. NamedTemporaryFile creates 0600 files; without
# this every output would be readable by its owner only.
_FILE_MODE = 0o666 & ~_umask()


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable; best effort (not every OS/filesystem allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_prefix(name: str) -> str:
    """The start of the temporary file's name for ``name``: a dot, its first 32 bytes and a
    short hash of the whole (``.talk.srt-1a2b3c.``), so the temporary name (~54 bytes with
    tempfile's 8 random characters and ``.part``) fits wherever ``name`` fits, even a 255-byte
    name, and still tells whose it is. jobs/discover.py removes those a kill left behind."""
    raw = name.encode("utf-8", "surrogateescape")  # a Linux name need not be UTF-8
    head = raw[:32].decode("utf-8", errors="ignore")
    return f".{head}-{hashlib.sha256(raw).hexdigest()[:6]}."


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` so that ``path`` is either untouched or complete.

    Raises OutputError naming the path; the temporary file never outlives a failure.
    """
    path = Path(path)
    temp: Path | None = None
    done = False
    try:
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", newline="", dir=path.parent,
                                         delete=False, prefix=temp_prefix(path.name),
                                         suffix=".part") as f:
            temp = Path(f.name)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, _FILE_MODE)
        os.replace(temp, path)
        done = True
    except Exception as e:
        raise OutputError(f"cannot write {path}: {_one_line(e)}") from e
    finally:  # also on KeyboardInterrupt, which is re-raised as it is
        if not done and temp is not None:
            try:
                temp.unlink()
            except OSError:
                pass
    _fsync_directory(path.parent)


def output_path(stem_path: Path, fmt: str) -> Path:
    """``out/talk`` + ``srt`` -> ``out/talk.srt`` (a dot in the stem is kept: ``a.b.srt``)."""
    stem_path = Path(stem_path)
    return stem_path.with_name(stem_path.name + FORMATS[fmt].extension)


def write_outputs(transcript: Transcript, stem_path: Path, formats: Sequence[str],
                  options: Union[OutputOptions, CueOptions] = OutputOptions()) -> list[Path]:
    """Render every format, then write each file atomically; returns the paths written.

    ``options``: OutputOptions, or just the cue layout (CueOptions). A render error writes
    nothing. A write error leaves the files already written complete and the failing one
    untouched.
    """
    rendered = render_outputs(transcript, stem_path, formats, options)
    return write_rendered(stem_path, rendered)


def render_outputs(transcript: Transcript, stem_path: Path, formats: Sequence[str],
                   options: Union[OutputOptions, CueOptions] = OutputOptions()) -> list[tuple[Path, str]]:
    """``write_outputs``' first half: each format's (path, text), nothing written. A transcript
    without speech (``Transcript.has_speech``) gets no subtitle file (SRT, WebVTT, ASS): an empty
    SRT is refused by ffmpeg, pysubs2 and players, and a cue-less one helps no one; its TXT, TSV
    and JSON (``segments: []``) are written."""
    if isinstance(options, CueOptions):
        options = OutputOptions(cues=options)
    if isinstance(formats, str):
        formats = [formats]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown output format {unknown[0]!r}; "
                         f"choose from {', '.join(FORMATS)}")
    rendered = []
    for fmt in dict.fromkeys(formats):  # each format once, in the order asked
        if fmt in SUBTITLE_FORMATS and not transcript.has_speech:
            continue
        path = output_path(stem_path, fmt)
        try:
            rendered.append((path, FORMATS[fmt].render(transcript, options)))
        except Exception as e:
            raise OutputError(f"cannot render {path}: {_one_line(e)}") from e
    return rendered


def write_rendered(stem_path: Path, rendered: list[tuple[Path, str]]) -> list[Path]:
    """``write_outputs``' second half: the rendered files written atomically, by the reader."""
    folder = Path(stem_path).parent
    try:
        return bounded(write_files, folder, rendered, path=folder, what=WRITE) if rendered else []
    except ReadTimeout as e:  # retried as any OutputError: the mount may come back
        raise OutputError(f"cannot write the outputs in {str(folder)!r}: {e.strerror}") from None


WRITE = "a write got no answer"


def write_files(folder: Path, rendered: list[tuple[Path, str]]) -> list[Path]:
    """``write_outputs``' writes (made by the reader child): ``folder`` made if it is not
    there, then each (path, text) written atomically, in order; the paths written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create {folder}: {_one_line(e)}") from e
    for path, text in rendered:
        write_atomic(path, text)
    return [path for path, _ in rendered]
