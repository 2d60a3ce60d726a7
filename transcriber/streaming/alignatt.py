"""One AlignAtt decoding pass over the current audio buffer.

The prompt (previous text, start of transcript, the buffer's committed tokens) goes through the
decoder in one call; then one token per step with the one-shot search code (greedy or beam),
each token checked by the policy against the audio end before it is kept. The pass never
emits anything itself: it returns the tokens it kept and why it stopped; the session decides
what to commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import mlx.core as mx
import numpy as np

from ..decoding.filters import LogitFilter, SuppressBlank, SuppressTokens, log_softmax
from ..decoding.options import DecodingOptions
from ..decoding.search import BeamSearchDecoder, GreedyDecoder, MaximumLikelihoodRanker
from ..decoding.task import suppress_ids
from ..model.whisper import DecoderState, Whisper
from ..tokenizer import Tokenizer
from .policy import AttentionTracker, Decision, decide

# why a pass ended
EOT, THRESHOLD, REWIND, BUDGET, LENGTH, NO_SPEECH = "eot", "threshold", "rewind", "budget", "length", "no_speech"


class SuppressSpecials(LogitFilter):
    """Nothing after the end of text: no special token, no timestamp, is ever sampled."""

    def __init__(self, eot: int):
        self.eot = eot

    def apply(self, logits, tokens):
        logits[:, self.eot + 1:] = -np.inf


@dataclass
class PassResult:
    tokens: list[int] = field(default_factory=list)  # kept tokens after the prompt (no EOT)
    frames: list[int] = field(default_factory=list)  # most attended frame of each kept token
    logprobs: list[float] = field(default_factory=list)
    reason: str = EOT
    next_token: Optional[int] = None  # the token the pass stopped before (THRESHOLD)
    next_frame: Optional[int] = None  # and its most attended frame
    no_speech_prob: float = 0.0


def alignment_rows(weights: list[mx.array], heads: np.ndarray, rows: slice) -> np.ndarray:
    """The alignment heads' attention, (B, n_heads, T', S), for the token rows ``rows``."""
    stacked = mx.stack([weights[layer][:, head, rows, :] for layer, head in heads.tolist()], axis=1)
    return np.array(stacked, dtype=np.float64)


def expand(state: DecoderState, n: int) -> DecoderState:
    """A batch-1 decoder state repeated to ``n`` rows (beams share their prompt pass)."""
    if n == 1:
        return state
    rep = lambda a: mx.repeat(a, n, axis=0)  # noqa: E731
    return DecoderState([(rep(k), rep(v)) for k, v in state.cross_kv],
                        [None if c is None else (rep(c[0]), rep(c[1])) for c in state.self_kv])


class AlignAttPass:
    """Runs passes for one model, tokenizer and set of options."""

    def __init__(self, model: Whisper, tokenizer: Tokenizer, beam_size: int, frame_threshold: int,
                 rewind_threshold: int, no_speech_threshold: Optional[float]):
        self.model, self.tokenizer = model, tokenizer
        self.beam_size = beam_size
        self.frame_threshold, self.rewind_threshold = frame_threshold, rewind_threshold
        self.no_speech_threshold = no_speech_threshold
        ids = suppress_ids(tokenizer, DecodingOptions(task=tokenizer.task), model.info.suppress_ids)
        self.suppress = [SuppressTokens(ids), SuppressSpecials(tokenizer.eot)]
        self.ranker = MaximumLikelihoodRanker(None)

    def run(self, base: DecoderState, prompt: list[int], sot_index: int, sample_begin: int,
            n_frames: int, last_frame: Optional[int], max_new: int, is_last: bool) -> PassResult:
        """Decode after ``prompt`` over the audio in ``base`` (batch 1; its first ``n_frames``
        positions are real audio, any after them padding).

        sot_index: where <|startoftranscript|> is in the prompt (attention rows count from it,
        no-speech is read there); sample_begin: where the text of this buffer starts (the
        committed tokens are prompt[sample_begin:]); last_frame: frame of the last committed
        token (for rewinds); max_new: token budget of the pass.
        """
        tok = self.tokenizer
        logits, state, weights = self.model.decoder(mx.array([prompt]), base, want_weights=True)
        first = np.array(logits[0, sot_index], dtype=np.float64)
        no_speech = float(np.exp(log_softmax(first[None])[0, tok.no_speech]))
        if self.no_speech_threshold is not None and no_speech > self.no_speech_threshold:
            return PassResult(reason=NO_SPEECH, no_speech_prob=no_speech)

        n = self.beam_size
        rows = alignment_rows(weights, self.model.alignment_heads, slice(sot_index, None))
        tracker = AttentionTracker(np.repeat(rows, n, axis=0), n_frames)
        state = expand(state, n)
        last = np.repeat(np.array(logits[:, -1], dtype=np.float64), n, axis=0)
        tokens = np.tile(np.array(prompt, dtype=np.int64), (n, 1))
        frames = np.zeros((n, 0), dtype=np.int64)
        logprobs = np.zeros((n, 0))
        sum_logprobs = np.zeros(n)
        search = GreedyDecoder(0.0, tok.eot) if n == 1 else BeamSearchDecoder(n, tok.eot)
        filters = [SuppressBlank(tok, sample_begin)] + self.suppress
        n_ctx = self.model.dims.n_text_ctx
        prompt_len = len(prompt)
        finished: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # beam: ended hypotheses' rows

        def result(row_tokens, row_frames, row_logprobs, reason, next_token=None, next_frame=None):
            return PassResult([int(t) for t in row_tokens], [int(f) for f in row_frames],
                              [float(p) for p in row_logprobs], reason, next_token, next_frame, no_speech)

        while True:
            if tokens.shape[1] - prompt_len >= max_new:
                return PassResult(reason=BUDGET, no_speech_prob=no_speech)
            if tokens.shape[1] >= n_ctx:
                return result(tokens[0, prompt_len:], frames[0], logprobs[0], LENGTH)
            for f in filters:
                f.apply(last, tokens)
            step_logprobs = log_softmax(last)
            step_frames = np.array([tracker.frame(b) for b in range(tokens.shape[0])])
            new_tokens, completed, sources = search.update(tokens, last, sum_logprobs)
            if n > 1:
                self._remember_finished(search, finished, tokens, frames, logprobs)
            if new_tokens.ndim != 2 or len(new_tokens) == 0:  # beam search: every candidate ended
                completed = True
                new_tokens = tokens
            if sources is None:
                sources = np.arange(tokens.shape[0])
            chosen = new_tokens[:, -1]
            if n == 1 and chosen[0] == tok.eot:
                return result(tokens[0, prompt_len:], frames[0], logprobs[0], EOT)
            if completed and finished:  # beam search: enough hypotheses ended
                return self._best_finished(search, finished, prompt_len, no_speech)
            if completed:
                return result(tokens[0, prompt_len:], frames[0], logprobs[0], EOT)
            decision = decide(int(step_frames[sources[0]]), n_frames, last_frame,
                              frame_threshold=self.frame_threshold, rewind_threshold=self.rewind_threshold,
                              is_last=is_last, after_special=bool(new_tokens[0, -2] >= tok.eot))
            if decision is Decision.REWIND:
                return PassResult(reason=REWIND, no_speech_prob=no_speech)
            if decision is Decision.STOP:
                src = sources[0]
                return result(tokens[src, prompt_len:], frames[src], logprobs[src], THRESHOLD,
                              int(chosen[0]), int(step_frames[src]))
            last_frame = int(step_frames[sources[0]])
            frames = np.concatenate([frames[sources], step_frames[sources][:, None]], axis=1)
            picked = step_logprobs[sources, chosen]
            logprobs = np.concatenate([logprobs[sources], picked[:, None]], axis=1)
            if not np.array_equal(sources, np.arange(tokens.shape[0])):
                state = state.select(mx.array(sources))
                tracker.select(sources)
            tokens = new_tokens
            logits, state, weights = self.model.decoder(mx.array(tokens[:, -1:]), state, want_weights=True)
            tracker.push(alignment_rows(weights, self.model.alignment_heads, slice(-1, None))[:, :, 0, :])
            last = np.array(logits[:, -1], dtype=np.float64)

    @staticmethod
    def _remember_finished(search: BeamSearchDecoder, finished: dict, tokens, frames, logprobs) -> None:
        """Keep the frames and log probabilities of hypotheses that just reached the end of text
        (their rows leave the beam)."""
        rows = None
        for seq in search.finished:
            if seq not in finished:
                if rows is None:
                    rows = {tuple(tokens[b].tolist()): b for b in range(tokens.shape[0])}
                b = rows.get(tuple(seq[:-1]))
                if b is not None:
                    finished[seq] = (frames[b].copy(), logprobs[b].copy())

    def _best_finished(self, search: BeamSearchDecoder, finished: dict, prompt_len: int,
                       no_speech: float) -> PassResult:
        """The best hypothesis that reached the end of text."""
        # the search keeps a score, or a Candidate with one, per ended sequence
        candidates = [(seq, float(getattr(v, "sum_logprob", v))) for seq, v in search.finished.items()
                      if seq in finished]
        lengths = [len(seq) - prompt_len for seq, _ in candidates]
        best_seq, _ = candidates[self.ranker.rank(lengths, [score for _, score in candidates])]
        best_frames, best_logprobs = finished[best_seq]
        return PassResult([int(t) for t in best_seq[prompt_len:-1]], [int(f) for f in best_frames],
                          [float(p) for p in best_logprobs], EOT, None, None, no_speech)
