"""The JSON word timeline (``.json``): ``Transcript.to_dict()`` (docs/formats.md has its schema), the cues on request."""

from __future__ import annotations

import json

from transcriber.subtitles.cues import CueOptions, transcript_cues
from transcriber.subtitles.formats.base import JSON_CUES, Format
from transcriber.transcript.types import Transcript


def write_json(transcript: Transcript, include_cues: bool = False,
               cue_options: CueOptions = CueOptions()) -> str:
    """The word timeline: ``Transcript.to_dict()``, plus ``"cues"`` when asked."""
    data = transcript.to_dict()
    if include_cues:
        data["cues"] = [cue.to_dict() for cue in transcript_cues(transcript, cue_options)]
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


FORMAT = Format(".json", lambda t, o: write_json(t, include_cues=o.json_cues, cue_options=o.cues), (JSON_CUES,),
                "application/json", http=True)
