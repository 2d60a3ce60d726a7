"""``--speakers``: what the speaker pass is asked (who speaks when, then a label on every word).

    options = SpeakerOptions(speakers=True, max_speakers=4)

The pass itself is transcriber/speakers/ (pyannote segmentation-3.0 and CAM++ on MLX), run on
the file's audio once its words are known (``transcriber.add_speakers``); the labels are put on
the words by ``transforms.label_speakers``. These options are output options
(``OutputOptions.speakers``): they change no word, so a job run again with other speaker options
keeps its words and redoes only the speaker pass and the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from transcriber.options import Option, OptionError, check_fields

MAX_SPEAKERS = 20  # a bound for the counts given (clustering is over every local speaker)

SPEAKERS = Option("speakers", "Label who speaks (Speaker 1, Speaker 2... in order of first speech): a speaker pass "
                              "over the audio after the words (transcribe models pull speakers, once).", bool,
                  example="true")
NUM_SPEAKERS = Option("num_speakers", "With --speakers: exactly this many speakers.", int, low=1, high=MAX_SPEAKERS,
                      example="2")
MIN_SPEAKERS = Option("min_speakers", "With --speakers: at least this many speakers.", int, low=1, high=MAX_SPEAKERS,
                      example="2")
MAX_SPEAKERS_OPTION = Option("max_speakers", "With --speakers: at most this many speakers.", int, low=1,
                             high=MAX_SPEAKERS, example="4")


@dataclass(frozen=True)
class SpeakerOptions:
    speakers: bool = SPEAKERS.field(False)
    num_speakers: Optional[int] = NUM_SPEAKERS.field(None)
    min_speakers: Optional[int] = MIN_SPEAKERS.field(None)
    max_speakers: Optional[int] = MAX_SPEAKERS_OPTION.field(None)

    def __post_init__(self) -> None:
        check_fields(self, qualified=True)
        counts = {o.name: v for o, v in ((NUM_SPEAKERS, self.num_speakers), (MIN_SPEAKERS, self.min_speakers),
                                         (MAX_SPEAKERS_OPTION, self.max_speakers)) if v is not None}
        if counts and not self.speakers:
            name = next(iter(counts))
            raise OptionError("{name} needs {speakers}", {"name": name, "speakers": SPEAKERS.name})
        if self.num_speakers is not None and (self.min_speakers is not None or self.max_speakers is not None):
            raise OptionError("{name} is the count itself: give it, or {low} / {high}, not both",
                              {"name": NUM_SPEAKERS.name, "low": MIN_SPEAKERS.name, "high": MAX_SPEAKERS_OPTION.name})
        if (self.min_speakers or 0) > (self.max_speakers or MAX_SPEAKERS):
            raise OptionError("{low} is over {high}", {"low": MIN_SPEAKERS.name, "high": MAX_SPEAKERS_OPTION.name})
