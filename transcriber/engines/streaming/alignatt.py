"""One AlignAtt decoding pass over the current audio buffer.

The pass is the shared decode loop (``decoding.loop``) with the AlignAtt policy as its step
hook: each chosen token's most attended frame is checked against the audio end before the token
is kept. The pass never emits anything itself: it returns the tokens it kept, their frames and
why it stopped; the session decides what to commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import mlx.core as mx
import numpy as np

from transcriber.engines.decoding.ending import Ending
from transcriber.engines.decoding.loop import StepHook, decode_loop
from transcriber.engines.decoding.search import Search
from transcriber.engines.decoding.task import best_candidate, sampled_tokens
from transcriber.model.state import DecoderState
from transcriber.model.whisper import Whisper
from transcriber.engines.nonspeech import NoSpeechRule
from transcriber.transcript.text import UNJUDGED_MARKS
from transcriber.model.tokenizer import Tokenizer
from transcriber.engines.streaming.options import StreamingOptions
from transcriber.engines.streaming.policy import AttentionTracker, decide

__all__ = ["AlignAttPass", "PassResult"]


@dataclass
class PassResult:
    tokens: list[int] = field(default_factory=list)  # kept tokens after the prompt (no EOT)
    frames: list[int] = field(default_factory=list)  # most attended frame of each kept token
    logprobs: list[float] = field(default_factory=list)
    reason: Ending = Ending.EOT
    next_token: Optional[int] = None  # the token the pass stopped before (STOP)
    next_frame: Optional[int] = None  # and its most attended frame
    no_speech_prob: float = 0.0


def mark_tokens(tokenizer: Tokenizer) -> frozenset[int]:
    """The ids of the ``UNJUDGED_MARKS`` that are a token of their own."""
    ids = (tokenizer.encode(mark) for mark in UNJUDGED_MARKS)
    return frozenset(i[0] for i in ids if len(i) == 1)


def alignment_rows(weights: list[mx.array], heads: np.ndarray, rows: slice) -> np.ndarray:
    """The alignment heads' attention, (B, n_heads, T', S), for the token rows ``rows``: sliced
    and stacked in numpy (each layer's array read in place), not as MLX ops to evaluate (0.5 ms
    a step, ~3% of streaming)."""
    return np.stack([np.asarray(weights[layer])[:, head, rows, :] for layer, head in heads.tolist()],
                    axis=1).astype(np.float64)


class AlignAttHook(StepHook):
    """The AlignAtt policy as a decode-loop hook: tracks each row's attended frames, stops
    before a token that looks within the threshold of the audio end, rewinds on a jump back."""

    def __init__(self, model: Whisper, sot_index: int, n_positions: int, last_frame: Optional[int],
                 frame_threshold: int, rewind_threshold: int, is_last: bool, eot: int,
                 marks: frozenset[int] = frozenset()):
        self.marks = marks  # ``mark_tokens``
        self.heads, self.sot_index, self.n_positions = model.alignment_heads, sot_index, n_positions
        self.wants_weights = model.alignment_layers  # only the alignment heads' layers
        self.last_frame = last_frame
        self.frame_threshold, self.rewind_threshold = frame_threshold, rewind_threshold
        self.is_last, self.eot = is_last, eot
        self.tracker: Optional[AttentionTracker] = None
        self.frames = np.zeros((1, 0), dtype=np.int64)  # (B, kept tokens): each kept token's frame
        self.ended: dict[tuple, np.ndarray] = {}  # beam rows that reached the end: their frames
        self.stop_frame: Optional[int] = None

    def start(self, weights, n_group):
        rows = alignment_rows(weights, self.heads, slice(self.sot_index, None))
        self.tracker = AttentionTracker(np.repeat(rows, n_group, axis=0), self.n_positions)
        self.frames = np.zeros((n_group, 0), dtype=np.int64)

    def check(self, tokens, new_tokens, sources, completed):
        step_frames = np.array([self.tracker.frame(b) for b in range(tokens.shape[0])])
        if len(tokens) > 1:  # beam search: rows that end now leave the beam; keep their frames
            for b in range(len(tokens)):
                self.ended[tuple(tokens[b].tolist())] = self.frames[b]
        if completed:
            return Ending.CONTINUE
        frame = int(step_frames[sources[0]])
        mark = int(new_tokens[0, -1]) in self.marks
        decision = decide(frame, self.n_positions, self.last_frame, frame_threshold=self.frame_threshold,
                          rewind_threshold=self.rewind_threshold, is_last=self.is_last,
                          after_special=bool(new_tokens[0, -2] >= self.eot), mark=mark)
        if decision is Ending.STOP:
            self.stop_frame = frame
            self.frames = self.frames[sources]
        elif decision is Ending.CONTINUE:
            if not mark:  # the token after a mark is judged against the word before it
                self.last_frame = frame
            self.frames = np.concatenate([self.frames[sources], step_frames[sources][:, None]], axis=1)
            self.tracker.select(sources)
        return decision

    def push(self, weights):
        self.tracker.push(alignment_rows(weights, self.heads, slice(-1, None))[:, :, 0, :])

    def frames_of(self, sequence: tuple[int, ...]) -> np.ndarray:
        """The frames of a candidate's kept tokens (its sequence without the end of text)."""
        key = sequence[:-1] if sequence and sequence[-1] == self.eot else sequence
        return self.ended.get(tuple(key), self.frames[0])


class AlignAttPass:
    """Runs passes for one model, tokenizer and set of options."""

    def __init__(self, model: Whisper, tokenizer: Tokenizer, options: StreamingOptions):
        """The options' no-speech rule (``StreamingOptions.no_speech``): a pass over its
        ``undecoded_above`` is not decoded, and a decoded pass may still be judged silence by
        its text."""
        self.model, self.tokenizer = model, tokenizer
        self.frame_threshold, self.rewind_threshold = options.frame_threshold, options.rewind_threshold
        self.no_speech: NoSpeechRule = options.no_speech
        self.search = Search.streaming(tokenizer, options.beam_size, model.info.suppress_ids)
        # Transcription only: a translation's marks follow its English words, not the sounds
        # of the audio, and there the rule changed the German opening's translation ("named
        # Smelchor Sternfelds" became "name-smell-like, sterrenfels"; test_multilingual)
        self.marks = mark_tokens(tokenizer) if tokenizer.task == "transcribe" else frozenset()

    def run(self, base: DecoderState, prompt: list[int], sot_index: int, sample_begin: int,
            n_positions: int, last_frame: Optional[int], max_new: int, is_last: bool) -> PassResult:
        """Decode after ``prompt`` over the audio in ``base`` (batch 1; its first ``n_positions``
        positions are real audio, any after them padding).

        sot_index: where <|startoftranscript|> is in the prompt (attention rows count from it,
        no-speech is read there); sample_begin: where the text of this buffer starts (the
        committed tokens are prompt[sample_begin:]); last_frame: frame of the last committed
        token (for rewinds); max_new: token budget of the pass.
        """
        tok = self.tokenizer
        hook = AlignAttHook(self.model, sot_index, n_positions, last_frame,
                            self.frame_threshold, self.rewind_threshold, is_last, tok.eot, self.marks)
        loop = decode_loop(self.model, base, prompt, sot_index, tokenizer=tok, search=self.search.decoder(),
                           filters=self.search.filters(sample_begin), n_group=self.search.n_group,
                           max_new=max_new, hook=hook, no_speech_above=self.no_speech.undecoded_above)
        if loop.reason in (Ending.NO_SPEECH, Ending.REWIND, Ending.BUDGET):
            return PassResult(reason=loop.reason, no_speech_prob=loop.no_speech_prob)
        if loop.reason is Ending.STOP:
            best = loop.candidates[0]
            tokens, frames = sampled_tokens(best.tokens, len(prompt), tok.eot), hook.frames[0]
        else:  # EOT or LENGTH: the best candidate
            best, tokens = best_candidate(loop.candidates, len(prompt), tok.eot, self.search.ranker)
            frames = hook.frames_of(best.tokens)
        logprobs = [float(p) for p in best.token_logprobs[:len(tokens)]]
        if self._no_speech(loop.no_speech_prob, logprobs, loop.reason):
            return PassResult(reason=Ending.NO_SPEECH, no_speech_prob=loop.no_speech_prob)
        frames = [int(f) for f in frames[:len(tokens)]]
        if loop.reason is Ending.EOT and not is_last and self._unconfirmed_mark(tokens, frames, n_positions):
            # nothing came after the mark to judge: the pass stops before it, as before a word
            return PassResult(tokens[:-1], frames[:-1], logprobs[:-1], Ending.STOP, tokens[-1], frames[-1],
                              loop.no_speech_prob)
        return PassResult(tokens, frames, logprobs, loop.reason, loop.next_token, hook.stop_frame,
                          loop.no_speech_prob)

    def _unconfirmed_mark(self, tokens: list[int], frames: list[int], n_positions: int) -> bool:
        """The text ends on a mark the rule would have stopped before (it attends the audio's
        end): on the French clip decoded from 2 s, "numéro." then the end of text, where the
        speaker went on "numéro un"."""
        return bool(tokens) and tokens[-1] in self.marks and n_positions - frames[-1] <= self.frame_threshold

    def _no_speech(self, no_speech_prob: float, logprobs: list[float], reason: Ending) -> bool:
        """The rule's verdict on a decoded pass. A pass that ended its text with none is
        judged as unlikely text; one that stopped before its first token has no text to judge
        (it waits for more audio)."""
        if logprobs:
            avg = float(np.mean(logprobs))
        else:
            avg = -np.inf if reason is Ending.EOT else None
        return self.no_speech.is_silence(no_speech_prob, avg)
