"""Subtitle cues from a word timeline, close to the Netflix Timed Text Style Guide.

Three passes:

1. grouping: an optimal segmentation of the word stream (dynamic programming over cue ends).
   Hard limits: the text fits ``max_lines`` lines of ``max_line_chars`` and the words span at
   most ``max_duration`` (a single word always makes a valid cue). Soft costs rank the split
   points: sentence end < clause punctuation = long pause < anywhere else, plus a cost per cue
   (so a cue is split only when it must be) and a cost for keeping two sentences (or the two
   sides of a long pause) together, outweighed only when a cue on its own would get too little
   time to be read.
2. lines: the fewest lines that fit, balanced (similar lengths), not breaking after an article,
   preposition or conjunction when another break is about as good.
3. timing: a cue starts with its first word (later only if the previous cue needs the room),
   stays ``linger`` after its last word or longer if reading speed / ``min_duration`` need it,
   small gaps are closed up to ``min_gap`` and never less than ``min_gap`` separates two cues.
   Lingering never delays the next cue; reading time may, by up to ``max_delay``. Word times
   leave no room otherwise: speech faster than ``max_cps`` (read-aloud text often runs at 18-20
   characters per second for several cues in a row) can only be read if its cues run a little
   behind the voice, catching up at the next pause.

Times are seconds of the source file. Word text keeps Whisper's leading space; it is stripped
(and inner whitespace collapsed) for layout.

Scripts: the line width and reading speed follow the style guide of the text's language
(``LANGUAGE_RULES``) unless the options give them. Languages written without spaces (Chinese,
Japanese, Thai...: ``NO_SPACE_LANGUAGES``) have a word per character or so, joined without a
space unless the word brings its own; elsewhere words are joined with one space. Characters are
counted as they are, one each, whatever their width; right-to-left text is laid out in its
logical order, as it is stored, and never reordered or altered.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from transcriber.tokenizer import NO_SPACE_LANGUAGES
from transcriber.types import Segment, Transcript, Word

# Line width (characters) and reading speed (characters a second) by language, from the
# Netflix Timed Text Style Guides (partnerhelp.netflixstudios.com, the language-specific
# guides; adult programmes, subtitles rather than SDH). Line widths as the guides state them:
#   Simplified Chinese (PRC): "16 characters per line" (so Cantonese, written in Traditional
#     Chinese, gets the same 16);
#   Japanese: "Horizontal subtitles - Maximum 13 full-width characters per line" (the guide
#     counts a half-width character as 0.5; we count every character as 1, never wider);
#   Korean: 16 characters per line;
#   Thai: "35 characters per line".
# Reading speeds from the same guides' reading-speed limits, as the Netflix checks of Subtitle
# Edit encode them (NetflixQualityController.cs): Chinese 9, Japanese 4, Korean 12 characters a
# second; Thai gives none of its own, so the general 17 stays. Any other language: the English
# template's 42 characters a line and 17 characters a second.
DEFAULT_RULE = (42, 17.0)
LANGUAGE_RULES: dict[str, tuple[int, float]] = {
    "zh": (16, 9.0), "yue": (16, 9.0), "ja": (13, 4.0), "ko": (16, 12.0), "th": (35, 17.0),
}


@dataclass(frozen=True)
class CueOptions:
    # None: the rule of the text's language (LANGUAGE_RULES; 42 and 17 for most languages)
    max_line_chars: Optional[int] = None  # characters per line
    max_lines: int = 2            # lines per cue
    max_cps: Optional[float] = None  # reading speed, characters (incl. spaces) per second
    min_duration: float = 5 / 6   # seconds a cue stays up, where the next cue leaves room
    max_duration: float = 7.0
    min_gap: float = 2 / 24       # two frames at 24 fps between consecutive cues
    close_gap: float = 0.5        # gaps up to this are closed to min_gap (avoids flicker)
    linger: float = 0.5           # a cue stays this long after its last word ends
    pause_split: float = 1.0      # silence of at least this long between words is a split point
    max_delay: float = 2.0        # a cue may start this much after its first word, for reading time

    # Upper bounds no subtitle needs (style guides stop at 42-47 characters, 2-3 lines, 7 s,
    # 20 cps); they also bound the words one cue can hold, hence the grouping pass's cost.
    LIMITS = {"max_line_chars": 200, "max_lines": 10, "max_cps": 100.0, "max_duration": 60.0}

    def __post_init__(self) -> None:
        def given(name: str) -> bool:  # max_line_chars, max_cps None: the language's rule
            return getattr(self, name) is not None or name not in ("max_line_chars", "max_cps")

        for name in filter(given, ("max_line_chars", "max_lines")):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"CueOptions.{name} must be an integer >= 1, got {value!r}")
        for name in filter(given, ("max_cps", "max_duration", "pause_split", "min_duration", "min_gap",
                                   "close_gap", "linger", "max_delay")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise ValueError(f"CueOptions.{name} must be a finite number, got {value!r}")
        for name in filter(given, ("max_cps", "max_duration", "pause_split")):
            if getattr(self, name) <= 0:
                raise ValueError(f"CueOptions.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("min_duration", "min_gap", "close_gap", "linger", "max_delay"):
            if getattr(self, name) < 0:
                raise ValueError(f"CueOptions.{name} must be >= 0, got {getattr(self, name)!r}")
        for name, limit in self.LIMITS.items():
            if given(name) and getattr(self, name) > limit:
                raise ValueError(f"CueOptions.{name} must be at most {limit:g}, got {getattr(self, name)!r}")
        if self.min_duration > self.max_duration:
            raise ValueError(f"CueOptions.min_duration ({self.min_duration}) must not exceed "
                             f"CueOptions.max_duration ({self.max_duration})")

    def for_language(self, language: Optional[str]) -> "CueOptions":
        """These options with the line width and reading speed of ``language``'s rule where
        they are not given (None); a given value always wins."""
        width, cps = LANGUAGE_RULES.get(language or "", DEFAULT_RULE)
        return replace(self, max_line_chars=width if self.max_line_chars is None else self.max_line_chars,
                       max_cps=cps if self.max_cps is None else self.max_cps)

    @staticmethod
    def language_defaults(name: str) -> str:
        """How the default of ``max_line_chars`` or ``max_cps`` depends on the language, for
        help texts: "42; zh 16, yue 16, ja 13, ko 16, th 35"."""
        index = ("max_line_chars", "max_cps").index(name)
        rules = ", ".join(f"{code} {rule[index]:g}" for code, rule in LANGUAGE_RULES.items())
        return f"{DEFAULT_RULE[index]:g}; {rules}"

    @property
    def min_visible(self) -> float:
        """The shortest a cue may be squeezed when the next one starts right after it."""
        return max(0.001, min(0.25, self.min_duration, self.max_duration))


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    lines: tuple[str, ...]
    words: tuple[Word, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def to_dict(self) -> dict:
        return {"start": round(self.start, 3), "end": round(self.end, 3), "text": self.text,
                "words": [w.to_dict() for w in self.words]}


# Marks written against the word before them, never after a space: Whisper sometimes gives one
# its own word (streaming commits " ." a pass after the word it ends), which cue and text layout
# would then set apart ("longer ."). French puts a space before ; : ! ?, so there only . and ,
# (and the CJK marks) are attached.
ATTACHED = ".,;:!?\u2026\u3002\uff0c\uff01\uff1f\u3001"
FRENCH_SPACED = ";:!?"


def is_attached_mark(text: str, language: Optional[str] = None) -> bool:
    """" ." or "," : a word made only of marks that belong to the word before it."""
    marks = text.strip()
    allowed = ATTACHED if language != "fr" else "".join(c for c in ATTACHED if c not in FRENCH_SPACED)
    return bool(marks) and all(c in allowed for c in marks)


# --- word classes -------------------------------------------------------------------------

_CLOSERS = "\"')]}»”’」』）"
# The one sentence-end rule (cue layout, segments, word edges, the streaming buffer's cuts):
# a sentence mark, maybe closing quotes or brackets after it, not an ellipsis. Marks of more
# scripts: full-width (Chinese, Japanese), Arabic (؟), Urdu (۔), Devanagari (।).
SENTENCE_MARKS = ".?!。！？؟۔।"
_SENTENCE_END = re.compile(rf"(?<!\.\.)[{re.escape(SENTENCE_MARKS)}][{re.escape(_CLOSERS)}]*$")
# clause marks of more scripts too: full-width, Arabic (، ؛)
_CLAUSE_END = re.compile(rf"([,;:–—…，、；：،؛]|\.\.\.)[{re.escape(_CLOSERS)}]*$")
# a period after these is not a sentence end
_ABBREVIATIONS = {"mr.", "mrs.", "ms.", "dr.", "st.", "jr.", "sr.", "prof.", "vs.", "etc.",
                  "e.g.", "i.e.", "no.", "mt."}
# words that should not end a line or a cue: they belong with the word after them. Words that
# often end a phrase ("it", "you", "up", "out", "so") are left out on purpose.
_FUNCTION_WORDS = frozenset("""
a an the
of in on at to for with from by about into onto over under after before between through
during without within upon across against among around behind beyond toward towards via per
and but or nor yet if because that than when while although though unless whether
as since until where which who whom whose
i we he she they my your his its our their this these those
""".split())

SENTENCE, CLAUSE, PAUSE, PLAIN = range(4)


def _token(word: Word) -> str:
    """The word as laid out: Whisper's leading space gone, inner whitespace collapsed."""
    return " ".join(word.text.split())


def ends_sentence(text: str) -> bool:
    """The word or text ends a sentence (``SENTENCE_MARKS``; trailing whitespace ignored)."""
    return bool(_SENTENCE_END.search(text.rstrip()))


def ends_with_mark(text: str) -> bool:
    """The word or text ends with a sentence or clause mark (``.``, ``,``, ``;``, ``:``...)."""
    return _ends_with_punctuation(text.rstrip())


def _is_sentence_end(token: str) -> bool:
    """In cue layout also: not after an abbreviation or an initial."""
    return ends_sentence(token) and token.lower() not in _ABBREVIATIONS \
        and not re.fullmatch(r"[A-Z]\.", token)  # an initial, as in "J. R. R."


def _is_function_word(token: str) -> bool:
    return token.lower() in _FUNCTION_WORDS


def _ends_with_punctuation(token: str) -> bool:
    return bool(_SENTENCE_END.search(token) or _CLAUSE_END.search(token))


def _boundary_kind(word: Word, token: str, next_word: Word, pause_split: float) -> int:
    """What kind of split point lies between ``word`` and ``next_word``."""
    if _is_sentence_end(token):
        return SENTENCE
    if _CLAUSE_END.search(token):
        return CLAUSE
    if next_word.start - word.end >= pause_split:
        return PAUSE
    return PLAIN


# --- pass 1: grouping words into cues -----------------------------------------------------

# Costs, in arbitrary units. A split costs PER_CUE plus the cost of its kind; keeping a
# sentence end (or a long pause) inside a cue costs JOIN_*; a cue that gets less time than it
# needs (min_duration, reading speed) before the next cue's first word costs up to SHORT.
PER_CUE = 2.0
BREAK_COST = {SENTENCE: 0.0, CLAUSE: 1.0, PAUSE: 1.0, PLAIN: 6.0}
PLAIN_GAP_BONUS = 3.0      # a plain split at a longer silence is better, up to this much
DANGLING_COST = 4.0        # splitting right after "the", "of", "and", ...
JOIN_COST = {SENTENCE: 10.0, PAUSE: 6.0}
SHORT = 30.0               # so a cue left less than ~2/3 of the time it needs is joined
FILL = 2.0                 # times (chars / capacity)^2: of equal splits, the balanced one


def separators(words: Sequence[Word], language: Optional[str]) -> list[str]:
    """What goes between each word and the one before it when they share a line: one space,
    or in a language written without spaces (``NO_SPACE_LANGUAGES``) a space only where the
    word brings one (Whisper's leading space, as before a Latin word in Chinese text). The
    first word's separator is never shown. A punctuation-only word ("." on its own) follows the
    word before it with no space, in every language (``engine.is_attached_mark``)."""
    if language not in NO_SPACE_LANGUAGES:
        return ["" if is_attached_mark(w.text, language) else " " for w in words]
    return [" " if w.text[:1].isspace() and not is_attached_mark(w.text, language) else "" for w in words]


class _Stream:
    """Per-word facts the segmentation needs, computed once."""

    def __init__(self, words: Sequence[Word], options: CueOptions, language: Optional[str] = None):
        self.words = words
        self.tokens = [_token(w) for w in words]
        self.seps = separators(words, language)
        n = len(words)
        self.kinds = [_boundary_kind(words[k], self.tokens[k], words[k + 1], options.pause_split)
                      for k in range(n - 1)]
        if language in NO_SPACE_LANGUAGES:  # a space in such text marks a phrase: a clause break
            self.kinds = [CLAUSE if kind == PLAIN and self.seps[k + 1] else kind
                          for k, kind in enumerate(self.kinds)]
        self.gaps = [max(0.0, words[k + 1].start - words[k].end) for k in range(n - 1)]

    def break_cost(self, k: int, options: CueOptions) -> float:
        """Cost of ending a cue after word ``k`` (another cue follows)."""
        kind = self.kinds[k]
        cost = BREAK_COST[kind]
        if kind == PLAIN:
            cost -= PLAIN_GAP_BONUS * min(1.0, self.gaps[k] / options.pause_split)
            if _is_function_word(self.tokens[k]):
                cost += DANGLING_COST
        return cost


class _LineFill:
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


def _short_cost(chars: int, available: float, options: CueOptions) -> float:
    need = min(max(options.min_duration, chars / options.max_cps), options.max_duration)
    if need <= 0 or available >= need:
        return 0.0
    return SHORT * min(1.0, (need - max(available, 0.0)) / need)


def _group(stream: _Stream, options: CueOptions) -> list[tuple[int, int]]:
    """Optimal split of words into cues, as (first, end) index ranges.

    best[j] is the least cost of laying out words[:j]. Pushing forward from each cue start i
    lets the line fill, span and join costs grow one word at a time, and stop as soon as the
    cue no longer fits (more words never fit again).
    """
    words, n = stream.words, len(stream.words)
    best = [0.0] + [math.inf] * n
    back = [0] * (n + 1)
    capacity = options.max_lines * options.max_line_chars
    for i in range(n):
        fill = _LineFill(options.max_line_chars)
        span_end = -math.inf
        joins = 0.0
        for j in range(i + 1, n + 1):
            fill.add(len(stream.tokens[j - 1]), len(stream.seps[j - 1]))
            span_end = max(span_end, words[j - 1].end)
            if j > i + 1:
                joins += JOIN_COST.get(stream.kinds[j - 2], 0.0)
                if fill.lines > options.max_lines \
                        or span_end - words[i].start > options.max_duration:
                    break
            if j < n:
                available = words[j].start - options.min_gap - words[i].start
                cost = stream.break_cost(j - 1, options)
            else:
                available, cost = math.inf, 0.0
            cost += PER_CUE + joins + _short_cost(fill.chars, available, options) \
                + FILL * (fill.chars / capacity) ** 2
            if best[i] + cost < best[j]:
                best[j], back[j] = best[i] + cost, i
    ranges = []
    j = n
    while j > 0:
        ranges.append((back[j], j))
        j = back[j]
    return ranges[::-1]


# --- pass 2: line breaks ------------------------------------------------------------------

DANGLING_LINE_COST = 150.0  # what a ~17-character imbalance between two lines costs
PUNCT_LINE_BONUS = 120.0


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
    fill = _LineFill(options.max_line_chars)
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
            if _is_function_word(tokens[b - 1]):
                cost += DANGLING_LINE_COST
            elif _ends_with_punctuation(tokens[b - 1]):
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
        token = _token(word)
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


# --- pass 3: timing -----------------------------------------------------------------------

# Subtitle files keep whole milliseconds: rounding the start and the end can shorten a cue by up
# to 1 ms, so reading time gets 1 ms more, and a cue at exactly max_cps stays at or under
# max_cps once written.
TIME_RESOLUTION = 0.001


def _time_cues(groups: list[tuple[tuple[Word, ...], tuple[str, ...], list[Word]]],
               options: CueOptions, end_time: Optional[float]) -> list[Cue]:
    """Cue times for groups of (all words, lines, the words with text).

    One pass, in order. A cue ends ``linger`` after its last word, but never later than the
    next cue's first word (less ``min_gap``) for that alone; it stays longer where reading
    speed or ``min_duration`` need it, pushing the next cue back by up to ``max_delay``. Fast
    speech thus borrows time from the pauses that follow it instead of flashing by: the lag
    builds up over a run of dense cues and is absorbed at the next pause.
    """
    cues: list[Cue] = []
    prev_end = -math.inf
    for index, (words, lines, spoken) in enumerate(groups):
        first = spoken[0].start
        last = max(first, max(w.end for w in spoken))
        start = max(first, prev_end + options.min_gap)
        need = max(options.min_duration, len(" ".join(lines)) / options.max_cps + TIME_RESOLUTION)
        linger_end, read_end = last + options.linger, start + need
        limit = start + options.max_duration
        if index + 1 < len(groups):
            room = groups[index + 1][2][0].start - options.min_gap  # the next cue on time
            late = room + options.max_delay                          # the next cue pushed back
            end = max(min(linger_end, room), min(read_end, late))
            limit = min(limit, late)
            if end < room and room - end <= options.close_gap:
                end = room  # close the small gap
        else:
            end = max(linger_end, read_end)
            if end_time is not None:
                limit = min(limit, max(end_time, last))
        end = max(min(end, limit), start + options.min_visible)
        cues.append(Cue(start=start, end=end, lines=lines, words=words))
        prev_end = end
    return cues


def layout_cues(words: Sequence[Word], options: CueOptions = CueOptions(), *,
                end_time: Optional[float] = None, language: Optional[str] = None) -> list[Cue]:
    """Subtitle cues for a word timeline (words in time order) in ``language`` (the language
    the text is written in: its rule fills the options not given, and says whether words are
    joined with spaces; see the module docstring).

    Every word lands in exactly one cue, in order. Words without text (only whitespace) take
    no part in layout or timing: they ride along in the cue of the word before them (the
    first cue for leading ones), and a timeline without any text gives no cues at all.
    ``end_time`` (the media duration), when given, is where free time after the last word ends.
    """
    options = options.for_language(language)
    words = list(words)
    spoken_at = [k for k, w in enumerate(words) if _token(w)]
    if not spoken_at:
        return []
    spoken = [words[k] for k in spoken_at]
    stream = _Stream(spoken, options, language)
    groups = []
    for a, b in _group(stream, options):
        first = spoken_at[a] if a > 0 else 0
        end = spoken_at[b] if b < len(spoken_at) else len(words)
        groups.append((tuple(words[first:end]), break_lines(stream.tokens[a:b], options, stream.seps[a:b]),
                       spoken[a:b]))
    return _time_cues(groups, options, end_time)


# --- word timelines -----------------------------------------------------------------------

def segment_words(segment: Segment) -> tuple[Word, ...]:
    """The segment's words; without word timestamps, pseudo-words from its text.

    Pseudo-words share the segment's time in proportion to their length in characters.
    """
    if segment.words:
        return segment.words
    tokens = segment.text.split()
    if not tokens:
        return ()
    total = sum(len(t) for t in tokens)
    span = max(0.0, segment.end - segment.start)
    probability = math.exp(min(0.0, segment.avg_logprob))
    words, done = [], 0
    for t in tokens:
        start = segment.start + span * done / total
        done += len(t)
        end = segment.start + span * done / total
        words.append(Word(start=start, end=end, text=" " + t, probability=probability))
    return tuple(words)


def transcript_words(transcript: Transcript) -> list[Word]:
    """All words of a transcript, pseudo-words for segments without word timestamps."""
    return [w for s in transcript.segments for w in segment_words(s)]


def transcript_cues(transcript: Transcript, options: CueOptions = CueOptions()) -> list[Cue]:
    """The cues of a transcript, by the rules of the language its text is written in."""
    end_time = transcript.duration if transcript.duration > 0 else None
    return layout_cues(transcript_words(transcript), options, end_time=end_time,
                       language=transcript.text_language)
