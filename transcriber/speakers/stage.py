"""The speaker pass as a transcript stage: a transcript and its media -> the same words, labelled.

    transcript = add_speakers(transcript, "meeting.mp4", SpeakerOptions(speakers=True))

The audio is read whole (16 kHz mono float32: 230 MB an hour) and diarized
(transcriber/speakers/pipeline.py: who speaks when), the turns are moved onto the transcript's
timeline (the audio track's start, ``offset``) and ``label_speakers`` puts a speaker on every
word and segment. It runs once a file's words are complete, before its files are written:
redone, not checkpointed, when a job's outputs are written again (bench/speakers/der.py
measures what it costs).
"""

from __future__ import annotations

import numpy as np

from transcriber.media.source import as_source
from transcriber.speakers.pipeline import diarize
from transcriber.transcript.speakers import SpeakerOptions
from transcriber.transcript.transforms import label_speakers
from transcriber.transcript.types import Transcript

READ_SECONDS = 60.0


def add_speakers(transcript: Transcript, media, options: SpeakerOptions, track=None, offset: float = 0.0) -> Transcript:
    """``transcript`` with speaker labels from ``media``'s audio (a path or an ``AudioSource``);
    unchanged when ``options.speakers`` is off or the transcript has no words."""
    if not options.speakers or not transcript.words:
        return transcript
    audio = as_source(media, track).chunks(READ_SECONDS)
    try:
        samples = np.concatenate([chunk for _, chunk in audio] or [np.zeros(0, np.float32)])
    finally:
        audio.close()
    turns = diarize(samples, num_speakers=options.num_speakers, min_speakers=options.min_speakers,
                    max_speakers=options.max_speakers)
    return label_speakers(transcript, [(start + offset, end + offset, label) for start, end, label in turns])
