"""One-shot transcription: walk a file window by window with timestamp-based seeking.

Audio is read as it is needed (a buffer a little over one 30 s window), each window is encoded
once, decoded with temperature fallback, split into segments at its timestamp tokens, and its
words timed from cross-attention. The next window starts where the last complete segment (or
the last word) ended. ``OneShotEngine.steps`` yields one ``Step`` per window; its state (the
seek point, the prompt and the language) resumes the walk at the next window.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field, replace
from typing import Iterator, Optional, Union

import numpy as np

from transcriber.media.source import as_source
from transcriber.constants import FRAMES_PER_SECOND, HOP_LENGTH, INPUT_STRIDE, N_FRAMES, N_SAMPLES, SAMPLE_RATE, TIME_PRECISION
from transcriber.engines.context import WhisperContext
from transcriber.engines.decoding import guard, loops
from transcriber.engines.decoding.fallback import WindowDecoder
from transcriber.engines.decoding.side_by_side import WindowsSideBySide
from transcriber.engines.decoding.options import TranscribeOptions
from transcriber.engines.decoding.task import DecodingResult, DecodingTask
from transcriber.engines.engine import Step
from transcriber.model.state import DecoderState
from transcriber.model.whisper import Whisper
from transcriber.engines.nonspeech import GATE
from transcriber.engines.timing import (WordTiming, clamp_edge_words, clamp_long_words, find_alignment, fix_segment_edges,
                                        SOUND_FRAME, merge_punctuations, snap_to_sound, start_at_onsets, text_frames,
                                        time_offsets)
from transcriber.model.tokenizer import Tokenizer
from transcriber.transcript.types import Segment, Word

READ_SECONDS = 10.0  # audio read from ffmpeg at a time
@dataclass
class SeekState:
    """Where a one-shot run stands: enough to continue at the next window after a restart."""

    seek: int = 0  # mel frames (10 ms) from the start of the file
    prompt_tokens: list[int] = field(default_factory=list)  # text tokens conditioning the next window
    last_speech: float = 0.0  # end of the last segment with words, seconds
    language: Optional[str] = None  # None until detected (multilingual model, no language given)
    language_probability: Optional[float] = None  # the detection's confidence

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SeekState":
        return cls(int(d["seek"]), [int(t) for t in d["prompt_tokens"]], float(d["last_speech"]), d.get("language"),
                   d.get("language_probability"))


class AudioBuffer:
    """Audio from ``iter_audio`` kept from the current seek point on: never the whole file."""

    def __init__(self, chunks: Iterator[tuple[int, np.ndarray]], start_sample: int = 0):
        self.chunks = chunks
        self.samples = np.zeros(0, dtype=np.float32)
        self.offset = start_sample  # sample index of self.samples[0] in the file
        self.eof = False

    def window(self, start: int, length: int) -> np.ndarray:
        """Samples [start, start + length) of the file (shorter at its end). ``start`` may jump
        past the audio read so far (--clip-timestamps): what lies before it is dropped as read."""
        while not self.eof and self.offset + len(self.samples) < start + length:
            self._drop_before(start)
            try:
                _, chunk = next(self.chunks)
                self.samples = np.concatenate([self.samples, chunk])
            except StopIteration:
                self.eof = True
        self._drop_before(start)
        return self.samples[:length]

    def _drop_before(self, start: int) -> None:
        cut = min(max(start - self.offset, 0), len(self.samples))
        self.samples, self.offset = self.samples[cut:], self.offset + cut


class OneShotEngine(WindowDecoder):
    """Runs a model over files in one-shot mode. Holds the context and options, which depend
    only on the model and options, so many files reuse them."""

    def __init__(self, model: Whisper, options: TranscribeOptions = TranscribeOptions()):
        self.model, self.options = model, options
        self.model_name = model.name
        self._time_offsets = time_offsets(model.name)
        self.context = WhisperContext(model, options.decoding.task, options.decoding.language)
        self._no_speech = options.no_speech

    def steps(self, source, state: Optional[dict] = None) -> Iterator[Step]:
        """Decode ``source`` window by window from ``state``: one ``Step`` per window."""
        with contextlib.closing(self._walk(source, state)) as walker:  # closing it stops ffmpeg
            reply = None
            while True:
                try:
                    item = walker.send(reply)
                except StopIteration:
                    return
                reply = None
                if isinstance(item, _Decode):
                    reply = item.task.run(item.base, item.task.tokenizer.language)
                else:
                    yield item

    def side_by_side(self, width: int) -> "FilesSideBySide":
        """Several files at once, their windows decoded together (see ``FilesSideBySide``)."""
        return FilesSideBySide(self, width)

    def _walk(self, source, state: Optional[dict]) -> Iterator[Union[Step, "_Decode"]]:
        """The window walk of one file: yields its ``Step``s, and a ``_Decode`` for each window's
        first decoding, which whoever drives the walk answers with the ``DecodingResult``
        (``send``): decoded alone (``steps``) or with other files' windows (``FilesSideBySide``)."""
        seek = SeekState.from_dict(state) if state else SeekState(prompt_tokens=self._initial_prompt(),
                                                                  language=self.context.language)
        span = self._span(seek.seek)
        start = (span[0] if span else seek.seek) * HOP_LENGTH
        audio = as_source(source, self.options.audio_track).chunks(READ_SECONDS, start / SAMPLE_RATE)
        buffer = AudioBuffer(audio, start)
        while (span := self._span(seek.seek)) is not None:
            if span[0] != seek.seek:  # the start of the next --clip-timestamps span
                seek = replace(seek, seek=span[0])
            samples = buffer.window(seek.seek * HOP_LENGTH, span[1])
            if len(samples) < HOP_LENGTH:
                break
            levels = GATE.frame_levels(samples)
            loud = levels >= GATE.silence_db  # (the silence check reads it again only when no frame is loud)
            if not loud.any() and GATE.is_silent(samples):  # silence or near-silence: nothing to decode
                segments, seek = [], replace(seek, seek=seek.seek + len(samples) // HOP_LENGTH)
            else:
                base, n_frames = self.context.encode_window(samples)
                if seek.language is None:  # detected once per file, on its first window with sound
                    seek.language, seek.language_probability, _ = self.context.detect_language(base)
                segments, seek = yield from self._decode_window(base, n_frames, seek,
                                                                self.context.tokenizer(seek.language), levels, samples)
            yield Step(tuple(w for s in segments for w in s.words), tuple(segments), seek.to_dict(),
                       seek.seek / FRAMES_PER_SECOND, seek.language or "en", seek.language_probability,
                       audio.warnings)
            if buffer.eof and seek.seek * HOP_LENGTH >= buffer.offset + len(buffer.samples):
                break

    def _span(self, seek: int) -> Optional[tuple[int, int]]:
        """Where the next window starts (mel frames, ``seek`` or later) and the samples it may
        take, within the spans of ``clip_timestamps`` (the whole file without); None past them."""
        for start, end in self.options.clips():
            last = None if end is None else round(end * FRAMES_PER_SECOND)
            if last is None or seek < last:
                seek = max(seek, round(start * FRAMES_PER_SECOND))
                return seek, N_SAMPLES if last is None else min(N_SAMPLES, (last - seek) * HOP_LENGTH)
        return None

    def _decode_window(self, base: DecoderState, n_frames: int, state: SeekState, tokenizer: Tokenizer,
                       levels: np.ndarray, samples: np.ndarray, guarded: bool = True):
        """One encoded window -> its segments (with words) and the state after it. A generator
        (``yield from`` it): it asks its driver for the first decoding (a ``_Decode``).
        levels: (F,) the level (dBFS) of the window's 20 ms frames (``GATE.frame_levels``) of
        ``samples``, its audio. ``guarded``: its voiced stretches that got no word are decoded again
        on their own (``_reread``); not for such a stretch itself."""
        opts = self.options
        time_offset = state.seek / FRAMES_PER_SECOND
        task = self._task(opts.temperatures[0], state.prompt_tokens, tokenizer, n_frames)
        first = yield _Decode(task, base)
        loud = levels >= GATE.silence_db
        result = self.decode_with_fallback(base, state.prompt_tokens, tokenizer, n_frames, first, loud)
        said = loops.prompt_words(state.prompt_tokens, tokenizer)
        if self.refuses(result, n_frames, tokenizer, loud, said) or self._runs_backwards(result, samples, n_frames):
            return (yield from self._refused(result, levels, samples, state, tokenizer, n_frames, guarded))
        pieces, next_seek = self._split(result, tokenizer, time_offset, state.seek, n_frames)
        if opts.word_timestamps and pieces:
            segments, next_seek = self._add_words(pieces, tokenizer, base, n_frames, time_offset,
                                                  state, next_seek, result, levels)
        else:
            segments = [_segment(p, []) for p in pieces]
        segments = [s for s in segments if s.text.strip()]
        if opts.word_timestamps:  # sound captions and guesses over music (nonspeech.py)
            decoded, segments = segments, GATE.speech_segments(segments, state.last_speech)
            # A window holding the end of the audio (under N_FRAMES) whose every segment the
            # gate refused ends the walk: the model heard all that is left and wrote nothing
            # believable. Seeking to the refused segment's end decoded the last seconds again
            # with less context: on the podcast's closing music the window wrote " you" (0.16,
            # refused), the 3.5 s after it " you" again (0.30, kept).
            if decoded and not segments and n_frames < N_FRAMES:
                next_seek = state.seek + n_frames
        if guarded:
            found = yield from self._reread(segments, levels, samples, state, tokenizer, next_seek - state.seek)
            segments = sorted(segments + found, key=lambda s: s.start)
        prompt = state.prompt_tokens
        if not opts.condition_on_previous_text or result.temperature > 0.5:
            prompt = []
        for s in segments:  # with their timestamps, as openai-whisper's and faster-whisper's prompts
            prompt = prompt + list(s.tokens)
        last_speech = segments[-1].end if segments else state.last_speech
        if not segments:  # (nor what its stretches read alone wrote)
            next_seek = state.seek + self._walk_on(levels, n_frames, next_seek - state.seek)
        max_prompt = self.model.dims.n_text_ctx // 2 - 1
        return segments, replace(state, seek=max(next_seek, state.seek + 1), prompt_tokens=prompt[-max_prompt:],
                                 last_speech=last_speech)

    def _refused(self, result: DecodingResult, levels: np.ndarray, samples: np.ndarray, state: SeekState,
                 tokenizer: Tokenizer, n_frames: int, guarded: bool):
        """A refused window: nothing of its text, but (``guarded``) what its voiced stretches
        read alone yield; the walk goes on after it. A window refused as silence or as audio
        running backwards was judged not speech: its stretches read alone are too short for that
        judgement (the Harvard sentences played backwards: " No clauses this night." from a
        1.5 s stretch). A generator, as ``_decode_window``."""
        judged = (self._no_speech.is_silence(result.no_speech_prob, result.avg_logprob)
                  or self._runs_backwards(result, samples, n_frames))
        found = (yield from self._reread([], levels, samples, state, tokenizer, n_frames)) \
            if guarded and not judged else []
        walk = self._walk_on(levels, n_frames, n_frames) if not found else n_frames
        return found, replace(state, seek=state.seek + walk, last_speech=found[-1].end if found else state.last_speech)

    @staticmethod
    def _walk_on(levels: np.ndarray, n_frames: int, walk: int) -> int:
        """Mel frames the walk moves on past a full window (``n_frames``) that wrote no word and
        would go on ``walk`` frames in: not into a voiced run its end cuts, but to where that
        run starts (``guard.cut_by_the_end``), so the next window hears it whole. (Not after a
        window that wrote words: moving the podcast's window after the end of a reading to the
        music's start moved the next reading's windows, and a cue ended 0.52 s into music.)"""
        at = guard.cut_by_the_end(levels) if n_frames >= N_FRAMES else None
        if at is None or walk <= round((at + guard.PAD_S) * FRAMES_PER_SECOND):
            return walk
        return max(1, round(at * FRAMES_PER_SECOND))

    def _reread(self, segments: list[Segment], levels: np.ndarray, samples: np.ndarray, state: SeekState,
                tokenizer: Tokenizer, until: int):
        """The segments of the window's voiced stretches before ``until`` (mel frames into the
        window: where the walk goes on) that no word of ``segments`` touches
        (``guard.unheard``), each decoded alone, unprompted, at its own time, and kept by the
        same rules as any window's text. A generator, as ``_decode_window``."""
        if not self.options.word_timestamps:
            return []
        offset = state.seek / FRAMES_PER_SECOND
        words = [(w.start, w.end) for s in segments for w in s.words]
        found, squeezed = [], guard.squeezed(words)
        for start, end in guard.unheard(levels, words, offset, offset + until / FRAMES_PER_SECOND):
            if squeezed is not None and start >= squeezed:
                continue  # its words are likely in the window's text, squeezed into one instant
            first = round((start - offset) * FRAMES_PER_SECOND)
            clip = samples[first * HOP_LENGTH:round((end - offset) * FRAMES_PER_SECOND) * HOP_LENGTH]
            if len(clip) < HOP_LENGTH:
                continue
            spoken = [e for s, e in words if e <= start]
            alone = replace(state, seek=state.seek + first, prompt_tokens=[],
                            last_speech=max(spoken) if spoken else state.last_speech)
            found += yield from self._alone(clip, alone, tokenizer)
        return found

    def _alone(self, clip: np.ndarray, state: SeekState, tokenizer: Tokenizer):
        """The segments of ``clip`` (a voiced stretch starting at ``state.seek``) decoded alone,
        unguarded, that are not guesses (``GATE.is_reread_guess``). A generator, as
        ``_decode_window``."""
        base, n_frames = self.context.encode_window(clip)
        segs, _ = yield from self._decode_window(base, n_frames, state, tokenizer, GATE.frame_levels(clip),
                                                 clip, guarded=False)
        kept = [s for s in segs if not GATE.is_reread_guess(s.no_speech_prob, s.avg_logprob, s.temperature)]
        for s in segs:  # (bench/peers/reread_corner.py fits nonspeech.REREAD_CORNER on these)
            guard.log.debug("%.2f-%.2f s read alone: %r, no-speech %.2f, log probability %.2f, temperature %g%s",
                            s.start, s.end, s.text, s.no_speech_prob, s.avg_logprob, s.temperature,
                            "" if s in kept else " (a guess)", extra={"reread": {
                                "start": s.start, "end": s.end, "text": s.text, "no_speech_prob": s.no_speech_prob,
                                "avg_logprob": s.avg_logprob, "temperature": s.temperature}})
        return kept

    def read_alone(self, clip: np.ndarray, seek: int, last_speech: float, tokenizer: Tokenizer) -> list[Segment]:
        """A voiced stretch that got no word elsewhere (the streaming guard), read as one-shot's
        guard reads one: ``clip`` starts at mel frame ``seek`` of the source, after speech that
        ended at ``last_speech`` seconds; unprompted, its guesses dropped."""
        walk = self._alone(clip, SeekState(seek, [], last_speech, tokenizer.language), tokenizer)
        reply = None
        while True:
            try:
                item = walk.send(reply)
            except StopIteration as done:
                return done.value
            reply = item.task.run(item.base, item.task.tokenizer.language)

    def _initial_prompt(self) -> list[int]:
        if not self.options.initial_prompt:
            return []
        return self.context.tokenizer().encode(" " + self.options.initial_prompt.strip())

    def _split(self, result: DecodingResult, tokenizer: Tokenizer, time_offset: float, seek: int,
               n_frames: int) -> tuple[list[dict], int]:
        """Segments between consecutive timestamp pairs, and where the next window starts."""
        tokens = np.array(result.tokens, dtype=np.int64)
        ts_begin = tokenizer.timestamp_begin
        is_ts = tokens >= ts_begin
        single_ending = len(is_ts) >= 2 and not is_ts[-2] and is_ts[-1]
        consecutive = np.where(is_ts[:-1] & is_ts[1:])[0] + 1
        segments = []

        probs = np.exp(np.asarray(result.token_logprobs, dtype=np.float64))

        def add(start_ts: float, end_ts: float, first: int, stop: int):
            text = [i for i in range(first, stop) if tokens[i] < tokenizer.eot]
            text_tokens = [int(tokens[i]) for i in text]
            segments.append({"start": time_offset + start_ts * TIME_PRECISION,
                             "end": time_offset + end_ts * TIME_PRECISION,
                             "tokens": text_tokens, "probs": [float(probs[i]) for i in text],
                             "text": tokenizer.decode(text_tokens), "result": result, "seek": seek,
                             "decoded": [int(t) for t in tokens[first:stop] if t != tokenizer.eot]})

        if len(consecutive):
            slices = consecutive.tolist() + ([len(tokens)] if single_ending else [])
            last = 0
            for current in slices:
                add(tokens[last] - ts_begin, tokens[current - 1] - ts_begin, last, current)
                last = current
            next_seek = seek + n_frames if single_ending else seek + (int(tokens[last - 1]) - ts_begin) * INPUT_STRIDE
        else:
            stamps = tokens[is_ts]
            duration = n_frames / FRAMES_PER_SECOND
            if len(stamps) and stamps[-1] != ts_begin:
                duration = (stamps[-1] - ts_begin) * TIME_PRECISION
            add(0, duration / TIME_PRECISION, 0, len(tokens))
            next_seek = seek + n_frames
        return segments, next_seek

    def _add_words(self, segments, tokenizer, base, n_frames, time_offset, state: SeekState, next_seek,
                   result, levels: np.ndarray) -> tuple[list[Segment], int]:
        """Time every word of the window's segments (one DTW for the window; kept out of the
        window's silence, started at the voice's onsets: ``levels``), then turn the segment dicts
        into ``Segment``s; a window ending mid-segment resumes after its last word."""
        all_tokens = [t for s in segments for t in s["tokens"]]
        all_probs = [p for s in segments for p in s["probs"]]
        alignment = find_alignment(self.model, tokenizer, base, all_tokens, all_probs,
                                   text_frames(result.tokens, tokenizer, n_frames))
        median, max_duration = clamp_long_words(alignment)
        merge_punctuations(alignment)
        out, index, last_speech, walked_to, cut = [], 0, state.last_speech, None, None
        for seg in segments:
            words: list[WordTiming] = []
            saved = 0
            while index < len(alignment) and saved < len(seg["tokens"]):
                timing = alignment[index]
                if timing.word:
                    words.append(WordTiming(timing.word, timing.tokens, time_offset + timing.start,
                                            time_offset + timing.end, timing.probability))
                saved += len(timing.tokens)
                index += 1
            if words and seg is segments[-1] and (cut := _cut_at_window_end(seg, words, tokenizer, time_offset,
                                                                             n_frames)) is not None:
                next_seek = round(cut * FRAMES_PER_SECOND)
            if words:
                edges = fix_segment_edges(words, seg["start"], seg["end"], median, max_duration, last_speech)
                start, end = clamp_edge_words(words, *edges, max_duration)
                walked_to = words[-1].end  # where the walk goes on: snap_to_sound moves times only
                snap_to_sound(words, levels >= GATE.silence_db, time_offset, median, last_speech)
                first = words[0].start
                times = start_at_onsets([(w.start, w.end) for w in words], levels, time_offset, SOUND_FRAME,
                                        last_speech, self._time_offsets.onset_lead)
                for w, (w_start, w_end) in zip(words, times):
                    w.start, w.end = w_start, w_end
                start = words[0].start if words[0].start < first else max(start, words[0].start)
                seg["start"], seg["end"] = start, min(end, words[-1].end)
                last_speech = seg["end"]
            out.append(_segment(seg, words))
        if cut is None and _resumes_mid_text(result, tokenizer, n_frames, len(segments)) and walked_to is not None \
                and walked_to > time_offset:
            # the walk's own end, not the snapped one: moving the next window's start with the
            # times changed base's text (LJ001 6.8 -> 10.3% WER)
            next_seek = round(walked_to * FRAMES_PER_SECOND)
        return out, next_seek


def _resumes_mid_text(result: DecodingResult, tokenizer: Tokenizer, n_frames: int, n_segments: int) -> bool:
    """The walk goes on after the window's last word, not where its timestamps say: its text
    does not end on a lone timestamp, nor is it the end of the audio read as one text with no
    end time (an initial prompt makes tiny.en end jfk so: resuming after its last word read the
    last 0.26 s alone, " Thank you." three times). What such a window left unread is the
    guard's (``_reread``)."""
    tokens = result.tokens
    single_ending = len(tokens) >= 2 and tokens[-2] < tokenizer.timestamp_begin <= tokens[-1]
    read_to_end = n_frames < N_FRAMES and n_segments == 1 and tokens[-1] < tokenizer.timestamp_begin
    return not single_ending and not read_to_end


CUT_WORD_EDGE_S = 0.1  # a full window's last word ending this close to its end was cut by it


def _cut_at_window_end(seg: dict, words: list[WordTiming], tokenizer: Tokenizer, time_offset: float,
                       n_frames: int) -> Optional[float]:
    """Drop the last word of a full window's last segment (``seg`` and ``words``, in place) when
    it ends within CUT_WORD_EDGE_S of the window's end and starts in its second half; returns its
    start, where the next window starts and hears it whole (tiny.en ended " operations" at 30 s
    as " opera," and began the next window " orations"), else None. The segment's tokens, text
    and decoded tokens lose the word (and a timestamp after it), as the next window's prompt."""
    last = words[-1]
    window_end = time_offset + n_frames / FRAMES_PER_SECOND
    if (n_frames < N_FRAMES or last.end < window_end - CUT_WORD_EDGE_S or len(words) < 2
            or last.start < time_offset + n_frames / FRAMES_PER_SECOND / 2
            or seg["tokens"][-len(last.tokens):] != list(last.tokens)):
        return None
    words.pop()
    kept = len(seg["tokens"]) - len(last.tokens)
    seg["tokens"], seg["probs"] = seg["tokens"][:kept], seg["probs"][:kept]
    seg["text"] = tokenizer.decode(seg["tokens"])
    decoded = list(seg["decoded"])
    while decoded and decoded[-1] >= tokenizer.timestamp_begin:
        decoded.pop()
    seg["decoded"] = decoded[:len(decoded) - len(last.tokens)]
    return last.start


@dataclass(frozen=True)
class _Decode:
    """A window walk's request: run ``task`` (the first temperature) over ``base``."""

    task: DecodingTask
    base: DecoderState


class FilesSideBySide:
    """Files walked side by side, their windows decoded together (``decoding.side_by_side``):
    on a CPU a decode step reads the decoder's weights once for all rows, so several files cost
    less than one after another. A window joins the decoding as soon as its file has encoded it
    and leaves as soon as it ends. Each file gets the steps ``OneShotEngine.steps`` would give it
    (the same words, up to float rounding).

        files = engine.side_by_side(4)
        files.add(key, path, state)        # at most ``width`` files; also between events
        for key, event in files.events():  # a Step, None (the file is done) or the exception
            ...                            # that ended it; files.drop(key) stops a file
    """

    def __init__(self, engine: OneShotEngine, width: int):
        if width < 1:
            raise ValueError(f"side-by-side width must be >= 1, not {width}")
        self.engine, self.width = engine, width
        self._walks: dict = {}  # key -> its window walk (a generator)
        self._replies: dict = {}  # key -> the DecodingResult its walk is to be sent next
        self._decoding = WindowsSideBySide(engine.model)  # the windows being decoded, by key

    def __len__(self) -> int:
        return len(self._walks)

    def add(self, key, source, state: Optional[dict] = None) -> None:
        if key in self._walks or len(self._walks) >= self.width:
            raise ValueError(f"cannot add {key!r}: decoded already, or {self.width} files are")
        self._walks[key] = self.engine._walk(source, state)

    def drop(self, key) -> None:
        """Stop walking ``key``'s file (its ffmpeg is stopped); nothing more is said of it."""
        walk = self._walks.pop(key, None)
        self._replies.pop(key, None)
        if key in self._decoding:
            self._decoding.remove(key)
        if walk is not None:
            walk.close()

    def close(self) -> None:
        for key in list(self._walks):
            self.drop(key)

    def events(self) -> Iterator[tuple[object, Union[Step, None, Exception]]]:
        """Each file's steps as they are decoded, until no file is left: (key, Step), then
        (key, None) at its end, or (key, exception) when it fails (the others go on)."""
        try:
            while self._walks:
                for key in list(self._walks):
                    yield from self._advance(key)
                for key, result in self._decoding.step() if len(self._decoding) else ():
                    self._replies[key] = result
        finally:  # the consumer stopped listening: stop every file's ffmpeg
            self.close()

    def _advance(self, key):
        """Run ``key``'s walk until it waits for the decoder, ends or fails."""
        while key in self._walks and key not in self._decoding:
            try:
                item = self._walks[key].send(self._replies.pop(key, None))
            except StopIteration:
                self._walks.pop(key)
                yield key, None
            except Exception as e:  # noqa: BLE001 - the file's failure, told to the consumer
                self._walks.pop(key)
                yield key, e
            else:
                if not isinstance(item, _Decode):
                    yield key, item
                elif item.task.search.side_by_side:
                    self._decoding.add(key, item.task, item.base)
                else:  # beam search: one window at a time
                    self._replies[key] = item.task.run(item.base, item.task.tokenizer.language)


def _segment(seg: dict, words: list[WordTiming]) -> Segment:
    r = seg["result"]
    return Segment(start=seg["start"], end=seg["end"], text=seg["text"],
                   words=tuple(Word(w.start, w.end, w.word, w.probability, tokens=tuple(w.tokens)) for w in words),
                   avg_logprob=r.avg_logprob, no_speech_prob=r.no_speech_prob,
                   compression_ratio=r.compression_ratio, temperature=r.temperature,
                   tokens=tuple(seg["decoded"]), seek=seg["seek"])
