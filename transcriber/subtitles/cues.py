"""Subtitle cues from a word timeline, close to the Netflix Timed Text Style Guide.

Three passes:

1. grouping: an optimal segmentation of the word stream (dynamic programming over cue ends).
   Hard limits: the text fits ``max_lines`` lines of ``max_line_chars`` and the words span at
   most ``max_duration`` (a single word always makes a valid cue). Soft costs rank the split
   points: sentence end < clause punctuation = long pause < anywhere else, plus a cost per cue
   (so a cue is split only when it must be) and a cost for keeping two sentences (or the two
   sides of a long pause) together, outweighed only when a cue on its own would get too little
   time to be read.
2. lines (``transcriber.subtitles.lines``): the fewest lines that fit, balanced (similar lengths), not
   breaking after an article, preposition or conjunction when another break is about as good.
3. timing: a cue starts with its first word (later only if the previous cue needs the room),
   stays ``linger`` after its last word or longer if reading speed / ``min_duration`` need it,
   small gaps are closed up to ``min_gap`` and never less than ``min_gap`` separates two cues.
   Lingering never delays the next cue; reading time may, by up to ``max_delay``. Word times
   leave no room otherwise: speech faster than ``max_cps`` (read-aloud text often runs at 18-20
   characters per second for several cues in a row) can only be read if its cues run a little
   behind the voice, catching up at the next pause.

Times are seconds of the source file. Word text keeps Whisper's leading space; it is stripped
(and inner whitespace collapsed) for layout. What ends a sentence or a clause is
``transcriber.transcript.text``'s rule.

Speakers: when words carry a ``speaker`` (``transcript.transforms.label_speakers``), a speaker
change is a split point that a cue never spans, and a cue that starts a speaker's turn keeps
room on its first line for the name (``Speaker 1: ``) the formats that show names write there.
With ``dialogue_dashes`` two speakers may share a cue instead, a line each, each line keeping
room for the ``- `` the formats write before it (the subtitling convention for a short
exchange): at most one change in a cue, each side on one line. ``Cue.speakers`` says each
line's speaker and ``Cue.named`` whether the cue's first line gets the name. A transcript
without speakers lays out exactly as before; in one with speakers, unlabelled words (None) are
a speaker of their own, without a name.

The options (``CueOptions``) are declared once each as an ``Option`` (name, type, bounds, help):
the command line's subtitle flags are made from them.

Scripts: the line width and reading speed follow the style guide of the text's language
(``LANGUAGE_RULES``) unless the options give them. Languages written without spaces (Chinese,
Japanese, Thai...: ``text.NO_SPACE_LANGUAGES``) have a word per character or so, joined without a
space unless the word brings its own; elsewhere words are joined with one space. Characters are
counted as they are, one each, whatever their width; right-to-left text is laid out in its
logical order, as it is stored, and never reordered or altered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Sequence

from transcriber.subtitles.lines import LineFill, break_lines, join_line, separators
from transcriber.options import Option, OptionError, check_fields
from transcriber.transcript.text import NO_SPACE_LANGUAGES, ends_clause, is_function_word, is_sentence_end, layout_token
from transcriber.transcript.types import Segment, Transcript, Word

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


def language_defaults(name: str) -> str:
    """How the default of ``max_line_chars`` or ``max_cps`` depends on the language, for
    help texts: "42; zh 16, yue 16, ja 13, ko 16, th 35"."""
    index = ("max_line_chars", "max_cps").index(name)
    rules = ", ".join(f"{code} {rule[index]:g}" for code, rule in LANGUAGE_RULES.items())
    return f"{DEFAULT_RULE[index]:g}; {rules}"


# The cue options, each declared once (name, type, bounds, help); the command line makes a flag
# of each one not ``library_only``. Upper bounds no subtitle needs (style guides stop at 42-47
# characters, 2-3 lines, 7 s, 20 cps) also bound the words one cue can hold, hence the grouping
# pass's cost.
MAX_LINE_CHARS = Option("max_line_chars", "Subtitles: characters per line.  [default by language: "
                                          f"{language_defaults('max_line_chars')}]",
                        int, low=1, high=200, one_bound_messages=True)
MAX_LINES = Option("max_lines", "Subtitles: lines per cue.", int, low=1, high=10, one_bound_messages=True)
MAX_CPS = Option("max_cps", "Subtitles: reading speed, characters per second.  [default by language: "
                            f"{language_defaults('max_cps')}]",
                 float, low=0, low_open=True, high=100, one_bound_messages=True)
MIN_DURATION = Option("min_duration", "Subtitles: seconds a cue stays up at least, where the next cue leaves "
                                      "room.  [default: 5/6]", float, low=0, one_bound_messages=True)
MAX_DURATION = Option("max_duration", "Subtitles: seconds a cue stays up at most.",
                      float, low=0, low_open=True, high=60, one_bound_messages=True)
MIN_GAP = Option("min_gap", "Seconds between two consecutive cues at least.",
                 float, low=0, one_bound_messages=True, library_only=True)
CLOSE_GAP = Option("close_gap", "Gaps between cues up to this many seconds are closed to min_gap (no flicker).",
                   float, low=0, one_bound_messages=True, library_only=True)
LINGER = Option("linger", "Seconds a cue stays up after its last word ends.",
                float, low=0, one_bound_messages=True, library_only=True)
PAUSE_SPLIT = Option("pause_split", "Silence between words of at least this many seconds is a split point.",
                     float, low=0, low_open=True, one_bound_messages=True, library_only=True)
DIALOGUE_DASHES = Option("dialogue_dashes", "Subtitles with speaker labels: two speakers may share a cue, a line "
                                            "each starting with '- ', instead of a cue per speaker with its "
                                            "name where the speaker changes.", bool)
MAX_DELAY = Option("max_delay", "Seconds a cue may start after its first word, for reading time.",
                   float, low=0, one_bound_messages=True, library_only=True)


@dataclass(frozen=True)
class CueOptions:
    """How a word timeline becomes cues (see the module docstring). ValueError (OptionError,
    naming ``CueOptions.<field>``) for a value out of its bounds."""

    # None: the rule of the text's language (LANGUAGE_RULES; 42 and 17 for most languages)
    max_line_chars: Optional[int] = MAX_LINE_CHARS.field(None)  # characters per line
    max_lines: int = MAX_LINES.field(2)  # lines per cue
    max_cps: Optional[float] = MAX_CPS.field(None)  # reading speed, characters (incl. spaces) per second
    min_duration: float = MIN_DURATION.field(5 / 6)  # seconds a cue stays up, where the next cue leaves room
    max_duration: float = MAX_DURATION.field(7.0)
    min_gap: float = MIN_GAP.field(2 / 24)  # two frames at 24 fps between consecutive cues
    close_gap: float = CLOSE_GAP.field(0.5)  # gaps up to this are closed to min_gap (avoids flicker)
    linger: float = LINGER.field(0.5)  # a cue stays this long after its last word ends
    pause_split: float = PAUSE_SPLIT.field(1.0)  # silence of at least this long between words is a split point
    max_delay: float = MAX_DELAY.field(2.0)  # a cue may start this much after its first word, for reading time
    # speakers (words labelled): two may share a cue, a line each with "- ", instead of names
    dialogue_dashes: bool = DIALOGUE_DASHES.field(False)

    def __post_init__(self) -> None:
        check_fields(self, qualified=True)
        if self.min_duration > self.max_duration:
            raise OptionError("{low} ({low_value}) must not exceed {high} ({high_value})",
                              {"low": MIN_DURATION.name, "high": MAX_DURATION.name},
                              low_value=self.min_duration, high_value=self.max_duration).of("CueOptions")

    def for_language(self, language: Optional[str]) -> "CueOptions":
        """These options with the line width and reading speed of ``language``'s rule where
        they are not given (None); a given value always wins."""
        width, cps = LANGUAGE_RULES.get(language or "", DEFAULT_RULE)
        return replace(self, max_line_chars=width if self.max_line_chars is None else self.max_line_chars,
                       max_cps=cps if self.max_cps is None else self.max_cps)

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
    # each line's speaker; () when no word has one. Two different ones: a dialogue cue
    # (``dialogue_dashes``), its lines written with "- " before them
    speakers: tuple[Optional[str], ...] = ()
    named: bool = False  # the cue starts a speaker's turn: its name goes before its first line

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def speaker(self) -> Optional[str]:
        """The cue's speaker (its first line's, in a dialogue cue); None when not labelled."""
        return self.speakers[0] if self.speakers else None

    @property
    def dialogue(self) -> bool:
        """Two speakers share the cue, a line each (``CueOptions.dialogue_dashes``)."""
        return len(set(self.speakers)) > 1

    def to_dict(self) -> dict:
        return {"start": round(self.start, 3), "end": round(self.end, 3), "text": self.text,
                "words": [w.to_dict() for w in self.words]}


# --- split points -------------------------------------------------------------------------

SENTENCE, CLAUSE, PAUSE, PLAIN, SPEAKER = range(5)
DASH = "- "  # before each line of a dialogue cue (the formats write it; the layout keeps its room)


def name_prefix(speaker: str) -> str:
    """What goes before a cue's first line when it starts ``speaker``'s turn ("Speaker 1: ")."""
    return f"{speaker}: "


def _boundary_kind(word: Word, token: str, next_word: Word, pause_split: float) -> int:
    """What kind of split point lies between ``word`` and ``next_word``."""
    if is_sentence_end(token):
        return SENTENCE
    if ends_clause(token):
        return CLAUSE
    if next_word.start - word.end >= pause_split:
        return PAUSE
    return PLAIN


# --- pass 1: grouping words into cues -----------------------------------------------------

# Costs, in arbitrary units. A split costs PER_CUE plus the cost of its kind; keeping a
# sentence end (or a long pause) inside a cue costs JOIN_*; a cue that gets less time than it
# needs (min_duration, reading speed) before the next cue's first word costs up to SHORT.
PER_CUE = 2.0
BREAK_COST = {SENTENCE: 0.0, CLAUSE: 1.0, PAUSE: 1.0, PLAIN: 6.0, SPEAKER: 0.0}
PLAIN_GAP_BONUS = 3.0      # a plain split at a longer silence is better, up to this much
DANGLING_COST = 4.0        # splitting right after "the", "of", "and", ...
JOIN_COST = {SENTENCE: 10.0, PAUSE: 6.0, SPEAKER: 10.0}  # SPEAKER: a dialogue cue
SHORT = 30.0               # so a cue left less than ~2/3 of the time it needs is joined
FILL = 2.0                 # times (chars / capacity)^2: of equal splits, the balanced one


class _Stream:
    """Per-word facts the segmentation needs, computed once."""

    def __init__(self, words: Sequence[Word], options: CueOptions, language: Optional[str] = None):
        self.words = words
        self.tokens = [layout_token(w.text) for w in words]
        self.seps = separators(words, language)
        n = len(words)
        self.kinds = [_boundary_kind(words[k], self.tokens[k], words[k + 1], options.pause_split)
                      for k in range(n - 1)]
        if language in NO_SPACE_LANGUAGES:  # a space in such text marks a phrase: a clause break
            self.kinds = [CLAUSE if kind == PLAIN and self.seps[k + 1] else kind
                          for k, kind in enumerate(self.kinds)]
        self.gaps = [max(0.0, words[k + 1].start - words[k].end) for k in range(n - 1)]
        self.speakers = [w.speaker for w in words]
        self.labelled = any(s is not None for s in self.speakers)
        self.kinds = [SPEAKER if self.speakers[k] != self.speakers[k + 1] else kind
                      for k, kind in enumerate(self.kinds)]
        # the name before a cue starting at each word (the first word of a speaker's turn)
        self.prefixes = ["" if options.dialogue_dashes or s is None or (k and self.speakers[k - 1] == s)
                         else name_prefix(s).rstrip() for k, s in enumerate(self.speakers)]

    def break_cost(self, k: int, options: CueOptions) -> float:
        """Cost of ending a cue after word ``k`` (another cue follows)."""
        kind = self.kinds[k]
        cost = BREAK_COST[kind]
        if kind == PLAIN:
            cost -= PLAIN_GAP_BONUS * min(1.0, self.gaps[k] / options.pause_split)
            if is_function_word(self.tokens[k]):
                cost += DANGLING_COST
        return cost


class _CueFill:
    """A cue from word ``first`` on, extended a word at a time: its line fill (the name before
    it counted), and the speakers' rules: no change of speaker, or with ``dialogue_dashes`` one,
    each side on one line with room for ``DASH``."""

    def __init__(self, stream: _Stream, first: int, options: CueOptions):
        self.stream, self.first, self.options = stream, first, options
        self.fill = LineFill(options.max_line_chars)
        self.side = LineFill(options.max_line_chars - len(DASH))  # the current speaker's line
        self.changes = 0

    def add(self, k: int) -> bool:
        """Add word ``k`` (the next one); False when the cue can no longer hold it."""
        stream, options = self.stream, self.options
        if k > self.first and stream.kinds[k - 1] == SPEAKER:
            self.changes += 1
            if not options.dialogue_dashes or self.changes > 1 or options.max_lines < 2 or self.side.lines > 1:
                return False
            self.side = LineFill(options.max_line_chars - len(DASH))
        named = k == self.first and bool(stream.prefixes[k])  # the name and the first word: never apart
        self.fill.add(len(stream.tokens[k]) + (len(stream.prefixes[k]) + 1 if named else 0), len(stream.seps[k]))
        self.side.add(len(stream.tokens[k]), len(stream.seps[k]))
        return self.side.lines <= 1 if self.changes else self.fill.lines <= options.max_lines


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
        cue = _CueFill(stream, i, options)
        fill = cue.fill
        span_end = -math.inf
        joins = 0.0
        for j in range(i + 1, n + 1):
            fits = cue.add(j - 1)
            span_end = max(span_end, words[j - 1].end)
            if j > i + 1:
                joins += JOIN_COST.get(stream.kinds[j - 2], 0.0)
                if not fits or span_end - words[i].start > options.max_duration:
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


# --- pass 3: timing -----------------------------------------------------------------------

# Subtitle files keep whole milliseconds: rounding the start and the end can shorten a cue by up
# to 1 ms, so reading time gets 1 ms more, and a cue at exactly max_cps stays at or under
# max_cps once written.
TIME_RESOLUTION = 0.001


def _time_cues(groups: list[tuple[tuple[Word, ...], tuple[str, ...], list[Word], dict]],
               options: CueOptions, end_time: Optional[float]) -> list[Cue]:
    """Cue times for groups of (all words, lines, the words with text, the cue's speaker fields).

    One pass, in order. A cue ends ``linger`` after its last word, but never later than the
    next cue's first word (less ``min_gap``) for that alone; it stays longer where reading
    speed or ``min_duration`` need it, pushing the next cue back by up to ``max_delay``. Fast
    speech thus borrows time from the pauses that follow it instead of flashing by: the lag
    builds up over a run of dense cues and is absorbed at the next pause.
    """
    cues: list[Cue] = []
    prev_end = -math.inf
    for index, (words, lines, spoken, marks) in enumerate(groups):
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
        cues.append(Cue(start=start, end=end, lines=lines, words=words, **marks))
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
    spoken_at = [k for k, w in enumerate(words) if layout_token(w.text)]
    if not spoken_at:
        return []
    spoken = [words[k] for k in spoken_at]
    stream = _Stream(spoken, options, language)
    groups = []
    for a, b in _group(stream, options):
        first = spoken_at[a] if a > 0 else 0
        end = spoken_at[b] if b < len(spoken_at) else len(words)
        lines, marks = _cue_lines(stream, a, b, options)
        groups.append((tuple(words[first:end]), lines, spoken[a:b], marks))
    return _time_cues(groups, options, end_time)


def _cue_lines(stream: _Stream, a: int, b: int, options: CueOptions) -> tuple[tuple[str, ...], dict]:
    """The lines of the cue of words a..b (pass 2), and its ``Cue`` speaker fields: a dialogue
    cue a line per speaker; a cue starting a turn laid out with its name fused to its first word
    (then taken off: the formats write it); otherwise ``break_lines``."""
    tokens, seps, speakers = stream.tokens[a:b], stream.seps[a:b], stream.speakers[a:b]
    if not stream.labelled:
        return break_lines(tokens, options, seps), {}
    change = next((k for k in range(1, b - a) if speakers[k] != speakers[k - 1]), None)
    if change is not None:  # a dialogue cue (only _CueFill with dialogue_dashes makes one)
        lines = (join_line(tokens[:change], seps[:change]), join_line(tokens[change:], seps[change:]))
        return lines, {"speakers": (speakers[0], speakers[change])}
    prefix = stream.prefixes[a]
    if not prefix:
        lines = break_lines(tokens, options, seps)
        return lines, {"speakers": (speakers[0],) * len(lines)}
    lines = list(break_lines([f"{prefix} {tokens[0]}", *tokens[1:]], options, seps))
    lines[0] = lines[0][len(prefix) + 1:]
    return tuple(lines), {"speakers": (speakers[0],) * len(lines), "named": True}


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
