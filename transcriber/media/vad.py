"""Speech spans: where a recording has speech (Silero VAD), and a source that hears only them.

    spans, total = speech_spans(source)           # [(first sample, end sample), ...], samples read
    speech = SpeechSource(source, spans)          # an AudioSource: the spans joined end to end
    timeline = SpanMap(spans)
    timeline.to_source(12.0)                      # a time of the joined audio -> of the source

Engines decode ``SpeechSource`` as any source (they never know): one-shot's 30 s windows are
built from speech only (with 2 s of silence between two spans), streaming replays only speech
chunks. ``SpanMap`` puts the times they
give back on the source's timeline (transcriber/engines/vad.py does, step by step).

How spans are made, as Silero's ``get_speech_timestamps`` with faster-whisper's defaults for
subtitles: speech starts where a 32 ms window's probability reaches ``threshold`` and ends where
it has stayed under ``threshold - 0.15`` for ``min_silence`` seconds (so pauses between
sentences stay inside a span); spans shorter than ``min_speech`` are dropped; each span is
padded by ``pad`` seconds both sides (a word's soft onset and tail) and padded spans that
touch are merged. The measurements behind the defaults are in docs/decoding.md ("Voice
activity detection").
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import numpy as np

from transcriber.constants import SAMPLE_RATE
from transcriber.media.silero import WINDOW, SileroVad

Span = tuple[int, int]  # samples of the source: [first, end)
READ_SECONDS = 30.0  # what the detector and SpeechSource read of the source at a time
# Seconds of silence between two spans in the joined audio (SpanMap). Measured on the 21-minute
# podcast (bench/peers/podcast.py --layout long, tiny.en; docs/decoding.md "Voice activity
# detection"): at 0.5 s streaming lost 30 s of a reading after a seam (WER 15.6%) and one-shot
# timed a last word into the next span; at 2 s neither (10.75% / 9.29%, 0 words over non-speech).
GAP = 2.0
KEEP_SECONDS = 3600.0  # the detector's pass keeps a file's audio up to this long (230 MB) for the decode after it


@dataclass(frozen=True)
class SpanRules:
    threshold: float = 0.5
    min_silence: float = 2.0  # seconds under the threshold that end a span
    min_speech: float = 0.25  # seconds: shorter spans are dropped
    pad: float = 0.4  # seconds added either side of a span


def speech_spans(source, rules: SpanRules = SpanRules(), net: Optional[SileroVad] = None) -> tuple[list[Span], int]:
    """(the speech spans of ``source``, the number of samples it has): one pass over its audio."""
    spans, total, _ = detect(source, rules, net, keep_seconds=0.0)
    return spans, total


def detect(source, rules: SpanRules = SpanRules(), net: Optional[SileroVad] = None,
           keep_seconds: float = KEEP_SECONDS) -> tuple[list[Span], int, Optional["Heard"]]:
    """``speech_spans``, and the audio the pass read as a source of its own (``Heard``: the
    decode after it reads memory, not the file again) when it is ``keep_seconds`` long at most."""
    net = net or SileroVad.installed()
    probabilities, state, carry, total, kept = [], None, np.zeros(0, np.float32), 0, []
    audio = source.chunks(READ_SECONDS)
    try:
        for _, samples in audio:
            total += len(samples)
            kept = kept + [samples] if kept is not None and total <= keep_seconds * SAMPLE_RATE else None
            carry = np.concatenate([carry, samples])
            whole = len(carry) // WINDOW * WINDOW
            p, state = net.probabilities(carry[:whole], state)
            probabilities.append(p)
            carry = carry[whole:]
    finally:
        audio.close()
    p = np.concatenate(probabilities) if probabilities else np.zeros(0, np.float32)
    heard = None if kept is None else Heard(source, np.concatenate(kept or [np.zeros(0, np.float32)]), audio.warnings)
    return spans_of(p, total, rules), total, heard


class _Around:
    """A source made from ``self.source``: its name and where it starts on the media's timeline."""

    source = None

    @property
    def name(self) -> str:
        return self.source.name

    def start_offset(self) -> float:
        return self.source.start_offset()


class Heard(_Around):
    """A source's audio already read (the detector's pass), served as that source's: the same
    ``chunks``, ``head``, ``start_offset``, name and decoder warnings."""

    def __init__(self, source, samples: np.ndarray, warnings: tuple[str, ...] = ()):
        self.source, self.samples, self.warnings = source, samples, tuple(warnings)

    def chunks(self, chunk_seconds: float, start: float = 0.0) -> "_ArrayChunks":
        return _ArrayChunks(self.samples, round(chunk_seconds * SAMPLE_RATE), round(start * SAMPLE_RATE), self.warnings)

    def head(self, seconds: float) -> np.ndarray:
        return self.samples[:round(seconds * SAMPLE_RATE)]


class _ArrayChunks:
    """(sample offset, samples) of an array from ``start``, ``size`` at a time (an AudioStream's shape)."""

    def __init__(self, samples: np.ndarray, size: int, start: int, warnings: tuple[str, ...]):
        self.samples, self.size, self.offset, self.warnings = samples, size, start, warnings

    def __iter__(self) -> "_ArrayChunks":
        return self

    def __next__(self) -> tuple[int, np.ndarray]:
        if self.offset >= len(self.samples):
            raise StopIteration
        offset, self.offset = self.offset, self.offset + self.size
        return offset, self.samples[offset:offset + self.size]

    def close(self) -> None:
        self.offset = len(self.samples)


def spans_of(probabilities: np.ndarray, total: int, rules: SpanRules = SpanRules()) -> list[Span]:
    """The spans (samples) that probabilities per ``WINDOW`` samples give, by ``rules``."""
    low = max(rules.threshold - 0.15, 0.01)
    quiet_windows = rules.min_silence * SAMPLE_RATE / WINDOW
    raw, start, quiet_since = [], None, None
    for i, p in enumerate(probabilities):
        if p >= rules.threshold:
            quiet_since = None
            if start is None:
                start = i
        elif start is not None and p < low:
            quiet_since = i if quiet_since is None else quiet_since
            if i - quiet_since >= quiet_windows:
                raw.append((start * WINDOW, quiet_since * WINDOW))
                start = quiet_since = None
    if start is not None:
        raw.append((start * WINDOW, total))
    pad = round(rules.pad * SAMPLE_RATE)
    spans: list[Span] = []
    for first, end in raw:
        if end - first < rules.min_speech * SAMPLE_RATE:
            continue
        first, end = max(0, first - pad), min(total, end + pad)
        if spans and first <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((first, end))
    return spans


class SpanMap:
    """Times of the spans joined <-> times of the source (seconds). The joined audio is the spans
    in order with ``GAP`` seconds of silence between each two: Whisper hears a pause where the
    file had one (its timestamps and sentence ends need it), and a word that its timing runs
    into a gap, or starts early in one, still has a side: each span owns the half of the gap
    next to it."""

    def __init__(self, spans: Sequence[Span], gap: float = GAP):
        self.spans = [tuple(s) for s in spans]
        self.gap = round(gap * SAMPLE_RATE)
        lengths = [end - first for first, end in self.spans]
        self.starts = np.cumsum([0] + [n + self.gap for n in lengths[:-1]]).tolist()  # each span's, joined
        self.length = self.starts[-1] + lengths[-1] if self.spans else 0  # samples

    def span_at(self, seconds: float) -> int:
        """The span that joined time ``seconds`` belongs to (a gap's halves: the spans either side)."""
        edges = [start - self.gap / 2 for start in self.starts[1:]]
        return bisect.bisect_right(edges, seconds * SAMPLE_RATE)

    def to_source(self, seconds: float, span: Optional[int] = None) -> float:
        """Joined time -> source time, kept inside span ``span`` (default: the one it belongs to)."""
        if not self.spans:
            return seconds
        k = self.span_at(seconds) if span is None else span
        first, end = self.spans[k]
        sample = first + seconds * SAMPLE_RATE - self.starts[k]
        return min(max(sample, first), end) / SAMPLE_RATE

    def region(self, k: int) -> tuple[int, int]:
        """Span ``k``'s stretch of the joined audio, the gap before it included: [start, end)."""
        return self.starts[k] - (self.gap if k else 0), self.starts[k] + self.spans[k][1] - self.spans[k][0]


class SpeechSource(_Around):
    """``source`` with only its speech spans, joined (``SpanMap``: a short silence between two;
    an ``AudioSource``)."""

    def __init__(self, source, spans: Sequence[Span]):
        self.source, self.map = source, SpanMap(spans)

    def chunks(self, chunk_seconds: float, start: float = 0.0) -> "_JoinedChunks":
        return _JoinedChunks(self.source, self.map, round(chunk_seconds * SAMPLE_RATE), round(start * SAMPLE_RATE))

    def head(self, seconds: float) -> np.ndarray:
        chunks = self.chunks(seconds)
        try:
            return next(iter(chunks), (0, np.zeros(0, np.float32)))[1]
        finally:
            chunks.close()


class _JoinedChunks:
    """The joined audio from joined sample ``start``, in chunks of ``size`` samples (the last
    shorter), read from the source in one pass from the first span needed."""

    def __init__(self, source, spans: SpanMap, size: int, start: int):
        self.source, self.map, self.size, self.start = source, spans, size, start
        self.audio = None
        self._chunks = self._joined()

    def __iter__(self) -> "_JoinedChunks":
        return self

    def __next__(self) -> tuple[int, np.ndarray]:
        return next(self._chunks)

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.audio.warnings if self.audio is not None else ()

    def _joined(self) -> Iterator[tuple[int, np.ndarray]]:
        out, offset, pending = [], self.start, 0
        for piece in self._pieces():
            out.append(piece)
            pending += len(piece)
            while pending >= self.size:
                joined = np.concatenate(out)
                yield offset, joined[:self.size]
                offset, out, pending = offset + self.size, [joined[self.size:]], pending - self.size
        if pending:
            yield offset, np.concatenate(out)

    def _pieces(self) -> Iterator[np.ndarray]:
        """The joined audio from ``start``: each span's gap (zeros), then its samples."""
        regions = [self.map.region(k) for k in range(len(self.map.spans))]
        wanted = [k for k, (_, end) in enumerate(regions) if end > self.start]
        if not wanted:
            return
        first = self.map.spans[wanted[0]][0] + max(0, self.start - self.map.starts[wanted[0]])
        self.audio = self.source.chunks(READ_SECONDS, first / SAMPLE_RATE)
        reader = _Reader(self.audio)
        for k in wanted:
            silence = self.map.starts[k] - max(regions[k][0], self.start)
            if silence > 0:
                yield np.zeros(silence, np.float32)
            span_first, span_end = self.map.spans[k]
            yield from reader.take(span_first + max(0, self.start - self.map.starts[k]), span_end)

    def close(self) -> None:
        self._chunks.close()
        if self.audio is not None:
            self.audio.close()


class _Reader:
    """Samples [a, b) of a source's chunks, asked in increasing order (what lies before is dropped)."""

    def __init__(self, audio):
        self.audio, self.offset, self.samples = iter(audio), 0, np.zeros(0, np.float32)

    def take(self, a: int, b: int) -> Iterator[np.ndarray]:
        while a < b:
            if a >= self.offset + len(self.samples):
                got = next(self.audio, None)
                if got is None:  # the source is shorter than the spans say
                    return
                self.offset, self.samples = got
                continue
            lo = max(a - self.offset, 0)
            hi = min(b - self.offset, len(self.samples))
            if hi > lo:
                yield self.samples[lo:hi]
            a = self.offset + hi
