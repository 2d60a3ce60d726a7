"""What Whisper writes over music and noise, and how it is told apart from speech.

Trained on captions, Whisper names sounds ("Applause", "Music") and, over music, invents words
it is barely sure of. Measured with tiny.en on the recordings (``../shared/data``):

- Brahms' Hungarian Dance no. 5 (no speech): one-shot wrote " Harrison" (mean word probability
  0.00001) and " Applause" (0.51); streaming " The" (0.027), " End" (0.038), " APPLAUSE" (0.73);
- the dev set's speech (short_en + long_en): the lowest mean word probability of a one-shot
  segment is 0.67 (36 segments), the lowest streamed word probability above 0.1 (820 words).
- With a 10 s streaming buffer, the Brahms gave " The" (0.027), " End" (0.025), then one pass
  committing " of the end." (0.094, 0.398, 0.309: mean 0.27); over the dev set's speech, 323
  passes, the lowest mean of a pass's words is 0.36 (" A"), leaving out a pass that committed
  only a comma (0.29).

So a segment (one-shot) or word (streaming) is dropped when it is only a sound tag, or when the
model is far less sure of it than of any speech measured; and a streaming pass's words are
judged together as a one-shot segment is (their mean, punctuation aside, under 0.3). Silence
and room noise never get this far: the no-speech probability skips them first.
"""

from __future__ import annotations

import re
from typing import Sequence

from .types import Segment, Word

# Caption words for sounds, as Whisper writes them bare once their brackets are suppressed.
SOUND_TAGS = frozenset({"applause", "music", "laughter", "laughing", "laughs", "cheering", "cheers",
                        "silence", "noise", "inaudible", "blank_audio", "no speech"})
# mean word probability of a one-shot segment (speech: >= 0.67) or of a streaming pass's words
# (speech: >= 0.36)
MIN_SEGMENT_PROBABILITY = 0.3
MIN_WORD_PROBABILITY = 0.08  # streaming: probability of a word (speech: > 0.1)

_NOT_LETTERS = re.compile(r"[^\w ]+")


def is_sound_tag(text: str) -> bool:
    """" Applause.", "[MUSIC]", "(laughter)": a caption of a sound, not speech."""
    return " ".join(_NOT_LETTERS.sub(" ", text).lower().split()) in SOUND_TAGS


def is_speech_segment(segment: Segment) -> bool:
    """Keep a one-shot segment: it has words, is not a sound tag, and is not a guess."""
    if not segment.words or is_sound_tag(segment.text):
        return False
    return sum(w.probability for w in segment.words) / len(segment.words) >= MIN_SEGMENT_PROBABILITY


def is_speech_word(word: Word) -> bool:
    """Keep a streamed word: not a sound tag, and not a guess."""
    return not is_sound_tag(word.text) and word.probability >= MIN_WORD_PROBABILITY


def speech_words(words: Sequence[Word]) -> list[Word]:
    """The words of one streaming pass that are speech: sound tags and guesses dropped, and all
    of them when the pass as a whole is a guess (mean probability of its words, punctuation
    aside, under ``MIN_SEGMENT_PROBABILITY``)."""
    kept = [w for w in words if is_speech_word(w)]
    judged = [w.probability for w in kept if _NOT_LETTERS.sub("", w.text).strip()] or [1.0]
    return kept if sum(judged) / len(judged) >= MIN_SEGMENT_PROBABILITY else []
