"""A cue's lines: how words share a line, the fewest lines a text needs, balanced line breaks,
and which word sits on which line of a cue (pass 2 of the cue layout in ``transcriber.subtitles.cues``).

Characters are counted as they are, one each, whatever their width. Words of a language written
without spaces (``text.NO_SPACE_LANGUAGES``) are joined without a space unless the word brings
its own; elsewhere with one space.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional, Sequence

from transcriber.transcript.text import NO_SPACE_LANGUAGES, ends_with_mark, is_attached_mark, is_function_word, layout_token
from transcriber.transcript.types import Word

if TYPE_CHECKING:
    from transcriber.subtitles.cues import Cue, CueOptions

DANGLING_LINE_COST = 150.0  # what a ~17-character imbalance between two lines costs
PUNCT_LINE_BONUS = 120.0


def separators(words: Sequence[Word], language: Optional[str]) -> list[str]:
    """What goes between each word and the one before it when they share a line: one space,
    or in a language written without spaces (``NO_SPACE_LANGUAGES``) a space only where the
    word brings one (Whisper's leading space, as before a Latin word in Chinese text). The
    first word's separator is never shown. A punctuation-only word ("." on its own) follows the
    word before it with no space, in every language (``text.is_attached_mark``)."""
    if language not in NO_SPACE_LANGUAGES:
        return ["" if is_attached_mark(w.text, language) else " " for w in words]
    return [" " if w.text[:1].isspace() and not is_attached_mark(w.text, language) else "" for w in words]


class LineFill:
    """Greedy line filling, extended one word at a time: the fewest lines a text needs."""

    def __init__(self, width: int):
        self.width = width
        self.lines = 0
        self.current = 0  # length of the last line; 0 when it is empty (or closed)
        self.chars = 0    # characters of the whole cue text, separators included
        self.words = 0

    def add(self, length: int, sep: int = 1) -> None:
        """Add a word of ``length`` characters, ``sep`` characters after the word before it."""
        self.chars += length + (sep if self.words else 0)
        self.words += 1
        if self.current and self.current + sep + length <= self.width:
            self.current += sep + length
        else:
            self.lines += 1
            self.current = length
        if length > self.width:  # an over-long word stands alone on its line
            self.current = self.width + 1


def join_line(tokens: Sequence[str], seps: Sequence[str]) -> str:
    """A line's text: its tokens with the separators between them (the first one dropped)."""
    return "".join(sep + t if i else t for i, (t, sep) in enumerate(zip(tokens, seps)))


def break_lines(tokens: Sequence[str], options: CueOptions,
                seps: Optional[Sequence[str]] = None) -> tuple[str, ...]:
    """Lay tokens out on the fewest lines that fit, as balanced as possible.

    ``seps``: what goes before each token on a shared line (``separators``; default one space).
    Minimises the sum of squared line lengths (balanced lines), plus a cost for a line ending
    in a function word and a bonus for one ending in punctuation; a tiny extra weight on
    earlier lines prefers a bottom-heavy layout on ties.
    """
    options = options.for_language(None)  # the default rule where none is given
    seps = [" "] * len(tokens) if seps is None else list(seps)
    kept = [(t, sep) for t, sep in zip(tokens, seps) if t]
    tokens, seps = [t for t, _ in kept], [sep for _, sep in kept]
    fill = LineFill(options.max_line_chars)
    for t, sep in zip(tokens, seps):
        fill.add(len(t), len(sep))
    if fill.lines <= 1:
        return (join_line(tokens, seps),) if tokens else ()
    m, n_lines, width = len(tokens), fill.lines, options.max_line_chars

    def line_cost(a: int, b: int, last: bool) -> float:
        length = sum(len(t) for t in tokens[a:b]) + sum(len(sep) for sep in seps[a + 1:b])
        if length > width and b - a > 1:
            return math.inf
        cost = float(length * length)
        if not last:
            cost += 0.1 * length
            if is_function_word(tokens[b - 1]):
                cost += DANGLING_LINE_COST
            elif ends_with_mark(tokens[b - 1]):
                cost -= PUNCT_LINE_BONUS
        return cost

    return tuple(join_line(tokens[a:b], seps[a:b]) for a, b in _best_breaks(m, n_lines, line_cost))


def _best_breaks(m: int, n_lines: int, line_cost) -> list[tuple[int, int]]:
    """The (start, end) token ranges of the cheapest layout of ``m`` tokens on ``n_lines``
    lines, first line first; ``line_cost(a, b, last)``: the cost of tokens[a:b] as one line."""
    # cost[l][k]: best layout of tokens[:k] on l lines
    cost = [[math.inf] * (m + 1) for _ in range(n_lines + 1)]
    back = [[0] * (m + 1) for _ in range(n_lines + 1)]
    cost[0][0] = 0.0
    for line in range(1, n_lines + 1):
        last = line == n_lines
        for b in range(line, m + 1):
            if last and b != m:
                continue
            for a in range(line - 1, b):
                c = cost[line - 1][a] + line_cost(a, b, last)
                if c < cost[line][b]:
                    cost[line][b], back[line][b] = c, a
    ranges, b = [], m
    for line in range(n_lines, 0, -1):
        a = back[line][b]
        ranges.append((a, b))
        b = a
    return ranges[::-1]


def line_layout(cue: Cue) -> list[list[tuple[str, Word]]]:
    """The cue's words by the line they are on, each with what comes before it on the line
    ("" for the first, else " " or "" as the line's text has it). Words without text join the
    line before, with an empty separator."""
    groups: list[list[tuple[str, Word]]] = [[] for _ in cue.lines]
    line, used = 0, 0  # the line being filled, and how far its text is taken
    for word in cue.words:
        token = layout_token(word.text)
        if token and line < len(cue.lines) and used >= len(cue.lines[line]):
            line, used = line + 1, 0
        index = min(line, len(groups) - 1)
        if index < 0:  # a cue of empty words only has no lines
            continue
        sep = ""
        if token:
            text = cue.lines[index]
            start = used
            while used < len(text) and text[used].isspace():
                used += 1
            sep = text[start:used] if start else ""
            used += len(token)
        groups[index].append((sep, word))
    return groups


def line_words(cue: Cue) -> list[tuple[Word, ...]]:
    """The cue's words grouped by the line they are on (empty words join the line before)."""
    return [tuple(word for _, word in group) for group in line_layout(cue)]
