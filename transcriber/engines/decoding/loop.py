"""The decode loop: the one place that runs the prompt pass, the logit filters, the search
update, the end rules and the KV-cache reorder, for one-shot windows (alone or side by side,
``batch.py``), beams, samples and streaming passes alike.

    result = decode_loop(model, base, prompt, sot_index, search=..., filters=..., n_group=...,
                         max_new=..., hook=None)

The prompt goes through the decoder once, at batch 1 (every beam or sample shares it:
``prompt_pass``); then one token per step. A ``Decode`` holds one window's rows between steps
and chooses their next tokens (``Decode.choose``); ``decode_loop`` runs the decoder for one
window, ``WindowsSideBySide`` for the rows of several windows at once. A ``StepHook`` may look at
each step's choice (with the cross-attention of the position that made it) and stop the pass
before the token is kept, or discard the pass: that is how the AlignAtt streaming policy plugs
in. Without a hook the loop runs to the end of text, the token budget or the text context.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Collection, Optional, Sequence

import mlx.core as mx
import numpy as np

from transcriber.model.state import DecoderState
from transcriber.model.whisper import Whisper
from transcriber.backend import inference_for
from transcriber.model.tokenizer import Tokenizer
from transcriber.engines.decoding.ending import Ending
from transcriber.engines.decoding.filters import LogitFilter, no_speech_prob
from transcriber.engines.decoding.search import Candidate, TokenDecoder


class StepHook:
    """Watches a decode loop step by step (the AlignAtt policy is one)."""

    wants_weights: Collection[int] = ()  # decoder layers whose cross-attention ``start`` and ``push`` get

    def start(self, weights: Optional[list[mx.array]], n_group: int) -> None:
        """After the prompt pass: its cross-attention per layer (1, H, T, S), None for layers
        not in ``wants_weights``."""

    def check(self, tokens: np.ndarray, new_tokens: np.ndarray, sources: np.ndarray,
              completed: bool) -> Ending:
        """One step chose ``new_tokens`` (B, T+1) from ``tokens`` (B, T): row i continues row
        ``sources[i]``. ``completed``: the search ended (the verdict is then not used).
        ``Ending.CONTINUE`` keeps the tokens; ``STOP`` ends the pass before them (the best
        row's new token is not kept); ``REWIND`` discards the pass."""
        return Ending.CONTINUE

    def push(self, weights: Optional[list[mx.array]]) -> None:
        """The cross-attention (B, H, 1, S) per layer of the position of the token just kept."""


def expand(state: DecoderState, n: int) -> DecoderState:
    """A batch-1 decoder state repeated to ``n`` rows (beams and samples share the prompt pass)."""
    if n == 1:
        return state
    rep = lambda a: mx.repeat(a, n, axis=0)  # noqa: E731
    # the audio's keys and values are the same for every row: a broadcast view, read once a
    # step for all rows by the native kernels (and never copied n times)
    share = lambda a: mx.broadcast_to(a, (n, *a.shape[1:]))  # noqa: E731
    return DecoderState([(share(k), share(v)) for k, v in state.cross_kv],
                        [None if c is None else (rep(c[0]), rep(c[1])) for c in state.self_kv])


@dataclass
class LoopResult:
    reason: Ending
    no_speech_prob: float
    # EOT/LENGTH/BUDGET: the search's finished candidates; STOP: the best row before the
    # rejected token (its tokens, score and token log probabilities); else none
    candidates: list[Candidate] = field(default_factory=list)
    next_token: Optional[int] = None  # STOP: the token that was not kept


@dataclass(frozen=True)
class PromptPass:
    """The prompt through the decoder at batch 1: the logits (1, V) after its last token, the
    decoder state and cross-attention after it, and the no-speech probability at
    <|startoftranscript|>."""

    logits: np.ndarray
    state: DecoderState
    weights: Optional[list]
    no_speech_prob: float


def prompt_pass(model: Whisper, base: DecoderState, prompt: Sequence[int], sot_index: int,
                tokenizer: Tokenizer, wants_weights: Collection[int] = ()) -> PromptPass:
    """Run ``prompt`` over the audio in ``base`` (batch 1); ``sot_index``: where
    <|startoftranscript|> is in it (no-speech is read there)."""
    logits, state, weights = inference_for(model).decode(mx.array([list(prompt)]), base, want_weights=wants_weights,
                                                         want_logits=[sot_index, len(prompt) - 1])
    logits = np.array(logits[0], dtype=np.float32)  # (2, V): at sot, at the last prompt token
    return PromptPass(logits[1:], state, weights, no_speech_prob(tokenizer, logits[0]))


class Decode:
    """One window's rows (its beams or samples, or the one greedy row) between steps: their
    tokens (B, T), summed log probabilities (B,), search, filters, hook and token budget."""

    def __init__(self, prompt: Sequence[int], search: TokenDecoder, filters: Sequence[LogitFilter],
                 n_group: int, max_new: int, n_ctx: int, hook: Optional[StepHook] = None):
        self.tokens = np.tile(np.array(prompt, dtype=np.int64), (n_group, 1))
        self.sum_logprobs = np.zeros(n_group)
        self.search, self.filters, self.hook = search, filters, hook or StepHook()
        self.prompt_len, self.max_new, self.n_ctx = len(prompt), max_new, n_ctx
        self.sources = np.arange(n_group)  # which previous row each row continues (last step)

    def choose(self, logits: np.ndarray) -> Optional[LoopResult]:
        """Take the next token of every row from their logits (B, V) (filtered here, in
        place); the result (its ``no_speech_prob`` not set) if the window ended, else None."""
        if self.tokens.shape[1] - self.prompt_len >= self.max_new:
            return self._finished(Ending.BUDGET)
        for f in self.filters:
            f.apply(logits, self.tokens)
        new_tokens, completed, sources = self.search.update(self.tokens, logits, self.sum_logprobs)
        sources = np.arange(len(new_tokens)) if sources is None else sources
        verdict = self.hook.check(self.tokens, new_tokens, sources, completed)
        if completed:
            if new_tokens.ndim == 2 and len(new_tokens):
                self.tokens = new_tokens
            return self._finished(Ending.EOT)
        if verdict is Ending.REWIND:
            return LoopResult(Ending.REWIND, 0.0)
        if verdict is Ending.STOP:
            row = self.tokens[sources[0]]
            kept = self.search.token_logprobs(0)[:-1]  # new row 0 continues the best row
            best = Candidate(tuple(int(t) for t in row), float(sum(kept)), tuple(kept))
            return LoopResult(Ending.STOP, 0.0, [best], int(new_tokens[0, -1]))
        self.tokens, self.sources = new_tokens, sources
        return self._finished(Ending.LENGTH) if self.tokens.shape[1] >= self.n_ctx else None

    @property
    def reordered(self) -> bool:
        """The last step's rows do not each continue the row of their own index (beams)."""
        return not np.array_equal(self.sources, np.arange(len(self.sources)))

    def _finished(self, reason: Ending) -> LoopResult:
        return LoopResult(reason, 0.0, self.search.finalize(self.tokens, self.sum_logprobs))


def decode_loop(model: Whisper, base: DecoderState, prompt: Sequence[int], sot_index: int, *,
                tokenizer: Tokenizer, search: TokenDecoder, filters: Sequence[LogitFilter],
                n_group: int = 1, max_new: int, hook: Optional[StepHook] = None,
                no_speech_above: Optional[float] = None) -> LoopResult:
    """Decode after ``prompt`` over the audio in ``base`` (batch 1).

    sot_index: position of <|startoftranscript|> in the prompt (no-speech is read there);
    max_new: tokens to sample at most; no_speech_above: end right after the prompt pass
    (``Ending.NO_SPEECH``) when the no-speech probability is above it
    (``NoSpeechRule.undecoded_above``).
    """
    decode = Decode(prompt, search, filters, n_group, max_new, model.dims.n_text_ctx, hook)
    hook = decode.hook
    first = prompt_pass(model, base, prompt, sot_index, tokenizer, hook.wants_weights)
    if no_speech_above is not None and first.no_speech_prob > no_speech_above:
        return LoopResult(Ending.NO_SPEECH, first.no_speech_prob)
    hook.start(first.weights, n_group)
    inference = inference_for(model)
    state, logits = expand(first.state, n_group), np.repeat(first.logits, n_group, axis=0)
    while (ended := decode.choose(logits)) is None:
        if decode.reordered:
            state = state.select(mx.array(decode.sources))
        out, state, weights = inference.decode(mx.array(decode.tokens[:, -1:]), state,
                                               want_weights=hook.wants_weights)
        hook.push(weights)
        logits = np.array(out[:, -1], dtype=np.float32)
    return replace(ended, no_speech_prob=first.no_speech_prob)
