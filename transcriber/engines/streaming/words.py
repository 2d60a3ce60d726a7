"""Word-level rules of the session: which decoded words to commit, their frames, where the
buffer may be cut, and how much prompt text to keep. Plain functions over tokens and frames."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from transcriber.transcript.text import ends_sentence, ends_with_mark
from transcriber.model.tokenizer import Tokenizer

# Word times from attended frames (encoder positions, 20 ms). The frame a token is predicted
# from lies ~0.3 s after the token's onset (measured against forced alignments and one-shot
# DTW times on short_en/long_en), so frames are shifted back by SHIFT. A word ends where the
# next token starts, but not later than MAX_TAIL after its own last token.
SHIFT = -14  # positions added to attended frames to get onsets
MAX_TAIL = 25  # a word ends at most this many positions after its last token's onset
DEFAULT_TAIL = 10  # ... and this many when the next token is unknown
CUT_MARGIN = 10  # mel frames kept before a word the buffer is cut in front of
# Prompt text whose last RUN_ON_TOKENS tokens hold no mark at all (not even a comma) has lost
# its punctuation, and Whisper follows a prompt's style: once a pass dropped a sentence end,
# the unpunctuated prompt kept later passes unpunctuated (music + the LJSpeech reading: 4 of
# its 13 sentence ends). ``punctuated_context`` cuts such a prompt back to its last sentence
# end: 11 of 13 (14 tokens: 10). Cutting every prompt back to its last sentence end gave 14-15
# of 13 but dropped the words just before the buffer: 7-9 more word errors on that reading.
# Used with ``StreamingOptions.punctuated_prompt`` (off: it still costs words on the podcast,
# and since marks are no longer judged by the AlignAtt rule the default keeps its sentence ends).
RUN_ON_TOKENS = 10
MARK_TOKENS = 3  # tokens decoded together to read a mark: a UTF-8 character spans up to 3


@dataclass
class CommittedWord:
    """A committed word whose audio is still in the buffer: its tokens stay in the prompt."""

    tokens: list[int]
    start: int  # stream mel frames (10 ms)
    end: int
    text: str = field(default="", compare=False)

    def to_dict(self) -> dict:
        return {"tokens": [int(t) for t in self.tokens], "start": int(self.start),
                "end": int(self.end), "text": self.text}

    @classmethod
    def from_dict(cls, d: dict) -> "CommittedWord":
        return cls([int(t) for t in d["tokens"]], int(d["start"]), int(d["end"]), d.get("text", ""))


def commit_count(tokenizer: Tokenizer, texts: Sequence[str], groups: Sequence[list[int]],
                 next_token: Optional[int], commit_all: bool, final: bool = False) -> int:
    """How many of a pass's words (``split_to_word_tokens``) are complete.

    commit_all: the pass saw the end of the text (end of text token, or the last chunk). Else the
    last word is held back when the token the pass stopped before would continue it (or is
    unknown). A last word that ends inside a UTF-8 character is held back too, unless this is
    the final pass of the stream: the model may end a pass on a character's first byte (the
    multilingual model did, on a 1 s Chinese clip), and the next pass completes it.
    """
    n = len(texts)
    if n == 0:
        return 0
    if not commit_all:
        if next_token is None:
            n -= 1
        else:
            merged, _ = tokenizer.split_to_word_tokens(list(groups[-1]) + [int(next_token)])
            if len(merged) == 1:
                n -= 1
    if n and not final and "\ufffd" in texts[n - 1]:
        n -= 1
    return n


def word_frames(frames: Sequence[int], following: Optional[int], n_positions: int) -> tuple[int, int]:
    """(start, end) encoder positions of a word from its tokens' attended frames and the frame
    of the token after it (None: unknown). Clamped to the buffer's ``n_positions``."""
    start = min(max(frames[0] + SHIFT, 0), n_positions - 1)
    last = frames[-1] + SHIFT
    tail = last + DEFAULT_TAIL
    if following is not None and following > frames[-1]:
        tail = min(following + SHIFT, last + MAX_TAIL)
    end = min(max(tail, start + 1), n_positions)
    return start, end


def cut_frame(words: Sequence[CommittedWord], start: int, end: int, max_frames: float,
              trim_frames: Optional[float], keep_frames: Optional[float] = None) -> tuple[Optional[int], int]:
    """Where to cut the buffer (stream mel frame, None: keep it) and how many committed words
    leave with the audio before the cut (their text becomes prompt).

    Cuts fall just before a committed word. Past ``max_frames`` the buffer must lose its oldest
    audio: cut before the first committed word that lets it fit, else at the limit (every
    committed word before it leaves). Past ``trim_frames`` the buffer is cut back to between
    ``keep_frames`` (default: half of it) and all of it: before the last committed word that
    follows a sentence end there, else as late as that range allows.
    """
    def at(i: int) -> int:
        cut = words[i].start - CUT_MARGIN
        return max(cut, words[i - 1].start + 1) if i > 0 else max(cut, start)

    if end - start > max_frames:
        need = int(math.ceil(end - max_frames))
        for i in range(len(words)):
            if at(i) >= need:
                return at(i), i
        return need, len(words)
    if trim_frames is not None and end - start > trim_frames:
        keep = trim_frames / 2 if keep_frames is None else keep_frames
        candidates = [i for i in range(len(words)) if at(i) > start and end - at(i) >= keep]
        sentences = [i for i in candidates
                     if i > 0 and ends_sentence(words[i - 1].text)]
        if candidates:
            i = (sentences or candidates)[-1]
            return at(i), i
    return None, 0


def context_tail(tokenizer: Tokenizer, tokens: list[int], limit: int) -> list[int]:
    """The last ``limit`` tokens of the prompt text, starting at a word."""
    if limit <= 0:
        return []
    if len(tokens) <= limit:
        return list(tokens)
    tail = tokens[len(tokens) - limit:]
    for i, t in enumerate(tail):
        if tokenizer.decode([t]).startswith(" "):
            return tail[i:]
    return tail


def punctuated_context(tokenizer: Tokenizer, tokens: list[int]) -> list[int]:
    """The prompt text a pass is conditioned on: ``tokens`` as they are, unless they end in a
    run-on (``RUN_ON_TOKENS`` tokens without a mark), then up to their last sentence end (if
    they have one)."""
    def ends_at(end: int, test) -> bool:
        return test(tokenizer.decode(tokens[max(0, end - MARK_TOKENS):end]))

    n = len(tokens)
    if n < RUN_ON_TOKENS or any(ends_at(end, ends_with_mark) for end in range(n - RUN_ON_TOKENS + 1, n + 1)):
        return list(tokens)
    for end in range(n - RUN_ON_TOKENS, 0, -1):
        if ends_at(end, ends_sentence):
            return list(tokens[:end])
    return list(tokens)
