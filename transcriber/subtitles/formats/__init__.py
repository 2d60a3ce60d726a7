"""The output formats: one module per format (srt, vtt, timeline for JSON, plain for txt and tsv,
ass, rttm), each exporting its ``Format`` entry: extension, renderer, its own options, media type,
whether HTTP offers it. ``FORMATS`` is the one registry: the command line's ``--format``, its
flags (``output_option_table``), ``transcribe serve``'s outputs and the sweep of stale
temporaries (app/run/outputs.py) all derive from it. A new format is one module and one line
here. Every renderer is pure (transcript in, text out)."""

from __future__ import annotations

import functools
from typing import Any

from transcriber.options import Option, options_of
from transcriber.subtitles.formats import ass, plain, rttm, srt, timeline, vtt
from transcriber.subtitles.formats.base import (EMBED, HIGHLIGHT_WORDS, JSON_CUES, VTT_KARAOKE, Format,
                                                OutputOptions)

# format name -> Format, in the order --help lists them
FORMATS: dict[str, Format] = {"srt": srt.FORMAT, "vtt": vtt.FORMAT, "json": timeline.FORMAT, "txt": plain.TXT,
                              "tsv": plain.TSV, "ass": ass.FORMAT, "rttm": rttm.FORMAT}
# The subtitle formats: no file of them for a transcript without speech (``render_outputs``).
SUBTITLE_FORMATS = tuple(name for name, fmt in FORMATS.items() if fmt.subtitle)
# What ``transcribe serve`` offers (whisper-asr-webservice's ``output``).
HTTP_FORMATS = tuple(name for name, fmt in FORMATS.items() if fmt.http)
# The renderers by name, for callers that render one format with explicit arguments.
write_srt, write_vtt, write_json, write_txt = srt.write_srt, vtt.write_vtt, timeline.write_json, plain.write_txt
write_tsv, write_ass, vtt_timestamp, ass_timestamp = plain.write_tsv, ass.write_ass, vtt.vtt_timestamp, ass.ass_timestamp
write_rttm = rttm.write_rttm

__all__ = ["FORMATS", "SUBTITLE_FORMATS", "HTTP_FORMATS", "Format", "OutputOptions", "output_option_table", "EMBED",
           "HIGHLIGHT_WORDS", "JSON_CUES", "VTT_KARAOKE", "write_srt", "write_vtt", "write_json", "write_txt",
           "write_tsv", "write_ass", "write_rttm", "vtt_timestamp", "ass_timestamp"]


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
