"""Punctuation and sentence rules: the one place that says what ends a sentence or a clause,
which marks belong to the word before them, and which scripts are written without spaces.

Cue layout (cues.py, lines.py), segments (engine.py), word edges (timing.py), the streaming
buffer's cuts (streaming/words.py, session.py) and the AlignAtt rule (alignatt.py) all read
these, so a sentence ends in the same place everywhere. Plain data and small functions on
strings: no model, no numpy.
"""

from __future__ import annotations

import re
from typing import Optional

# Languages written without spaces between words: word boundaries fall on characters instead.
NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})

# Closing quotes and brackets, which may follow a sentence or clause mark.
CLOSERS = "\"')]}»”’」』）"
# The one sentence-end rule: a sentence mark, maybe closing quotes or brackets after it, not an
# ellipsis. Marks of more scripts: full-width (Chinese, Japanese), Arabic (؟), Urdu (۔),
# Devanagari (।).
SENTENCE_MARKS = ".?!。！？؟۔।"
SENTENCE_END = re.compile(rf"(?<!\.\.)[{re.escape(SENTENCE_MARKS)}][{re.escape(CLOSERS)}]*$")
# clause marks of more scripts too: full-width, Arabic (، ؛)
CLAUSE_END = re.compile(rf"([,;:–—…，、；：،؛]|\.\.\.)[{re.escape(CLOSERS)}]*$")
# a period after these is not a sentence end (cue layout)
ABBREVIATIONS = frozenset({"mr.", "mrs.", "ms.", "dr.", "st.", "jr.", "sr.", "prof.", "vs.", "etc.",
                           "e.g.", "i.e.", "no.", "mt."})

# Marks written against the word before them, never after a space: Whisper sometimes gives one
# its own word (streaming commits " ." a pass after the word it ends), which cue and text layout
# would then set apart ("longer ."). French puts a space before ; : ! ?, so there only . and ,
# (and the CJK marks) are attached.
ATTACHED = ".,;:!?\u2026\u3002\uff0c\uff01\uff1f\u3001"
FRENCH_SPACED = ";:!?"

# Marks the streaming AlignAtt rule does not judge (``streaming.policy.decide``): sentence ends
# and commas, the full-width ones of Chinese and Japanese that are one token. Not ``;:``, which
# French spaces.
UNJUDGED_MARKS = ".,?!\u3002\u3001"

# Word timestamps (openai/whisper's merge_punctuations): a token of these joins the word after
# it (PREPEND) or before it (APPEND), so a word's time covers its punctuation.
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"

# Words that should not end a line or a cue: they belong with the word after them. Words that
# often end a phrase ("it", "you", "up", "out", "so") are left out on purpose.
FUNCTION_WORDS = frozenset("""
a an the
of in on at to for with from by about into onto over under after before between through
during without within upon across against among around behind beyond toward towards via per
and but or nor yet if because that than when while although though unless whether
as since until where which who whom whose
i we he she they my your his its our their this these those
""".split())


def ends_sentence(text: str) -> bool:
    """The word or text ends a sentence (``SENTENCE_MARKS``; trailing whitespace ignored)."""
    return bool(SENTENCE_END.search(text.rstrip()))


def ends_clause(text: str) -> bool:
    """The word or text ends with a clause mark (``,`` ``;`` ``:`` ``...``, a dash...)."""
    return bool(CLAUSE_END.search(text))


def ends_with_mark(text: str) -> bool:
    """The word or text ends with a sentence or clause mark (``.``, ``,``, ``;``, ``:``...)."""
    text = text.rstrip()
    return bool(SENTENCE_END.search(text) or CLAUSE_END.search(text))


def is_sentence_end(token: str) -> bool:
    """In cue layout: ``ends_sentence``, and not after an abbreviation or an initial."""
    return ends_sentence(token) and token.lower() not in ABBREVIATIONS \
        and not re.fullmatch(r"[A-Z]\.", token)  # an initial, as in "J. R. R."


def is_function_word(token: str) -> bool:
    """An article, preposition, conjunction or pronoun that belongs with the word after it."""
    return token.lower() in FUNCTION_WORDS


def is_attached_mark(text: str, language: Optional[str] = None) -> bool:
    """" ." or "," : a word made only of marks that belong to the word before it."""
    marks = text.strip()
    allowed = ATTACHED if language != "fr" else "".join(c for c in ATTACHED if c not in FRENCH_SPACED)
    return bool(marks) and all(c in allowed for c in marks)


def layout_token(text: str) -> str:
    """A word as laid out: Whisper's leading space gone, inner whitespace collapsed."""
    return " ".join(text.split())
