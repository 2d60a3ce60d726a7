"""The decode loop: the one place that runs the prompt pass, the logit filters, the search
update and the KV-cache reorder, for one-shot windows and streaming passes alike.

    result = decode_loop(model, base, prompt, sot_index, search=..., filters=..., n_group=...,
                         max_new=..., hook=None)

The prompt goes through the decoder once, at batch 1 (every beam or sample shares it); then one
token per step. A ``StepHook`` may look at each step's choice (with the cross-attention of the
position that made it) and stop the pass before the token is kept, or discard the pass: that is
how the AlignAtt streaming policy plugs in. Without a hook the loop runs to the end of text, the
token budget or the text context.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Collection, Optional, Sequence

import mlx.core as mx
import numpy as np

from ..context import no_speech_prob
from ..model.whisper import DecoderState, Whisper
from ..tokenizer import Tokenizer
from .filters import LogitFilter
from .search import Candidate, TokenDecoder

# why a loop ended
EOT, LENGTH, BUDGET, STOP, REWIND, NO_SPEECH = "eot", "length", "budget", "stop", "rewind", "no_speech"


class Verdict(enum.Enum):
    CONTINUE = "continue"  # keep the tokens just chosen
    STOP = "stop"  # end the pass before them (the best row's new token is not kept)
    REWIND = "rewind"  # discard the pass


class StepHook:
    """Watches a decode loop step by step (the AlignAtt policy is one)."""

    wants_weights: Collection[int] = ()  # decoder layers whose cross-attention ``start`` and ``push`` get

    def start(self, weights: Optional[list[mx.array]], n_group: int) -> None:
        """After the prompt pass: its cross-attention per layer (1, H, T, S), None for layers
        not in ``wants_weights``."""

    def check(self, tokens: np.ndarray, new_tokens: np.ndarray, sources: np.ndarray,
              completed: bool) -> Verdict:
        """One step chose ``new_tokens`` (B, T+1) from ``tokens`` (B, T): row i continues row
        ``sources[i]``. ``completed``: the search ended (the verdict is then not used)."""
        return Verdict.CONTINUE

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
    reason: str
    no_speech_prob: float
    # EOT/LENGTH/BUDGET: the search's finished candidates; STOP: the best row before the
    # rejected token (its tokens, score and token log probabilities); else none
    candidates: list[Candidate] = field(default_factory=list)
    next_token: Optional[int] = None  # STOP: the token that was not kept


def decode_loop(model: Whisper, base: DecoderState, prompt: Sequence[int], sot_index: int, *,
                tokenizer: Tokenizer, search: TokenDecoder, filters: Sequence[LogitFilter],
                n_group: int = 1, max_new: int, hook: Optional[StepHook] = None,
                no_speech_threshold: Optional[float] = None) -> LoopResult:
    """Decode after ``prompt`` over the audio in ``base`` (batch 1).

    sot_index: position of <|startoftranscript|> in the prompt (no-speech is read there);
    max_new: tokens to sample at most; no_speech_threshold: end right after the prompt pass
    (NO_SPEECH) when the no-speech probability is above it.
    """
    wants_weights = hook.wants_weights if hook is not None else ()
    logits, state, weights = model.decoder(mx.array([list(prompt)]), base, want_weights=wants_weights,
                                           want_logits=[sot_index, len(prompt) - 1])
    logits = np.array(logits[0], dtype=np.float32)  # (2, V): at sot, at the last prompt token
    no_speech = no_speech_prob(tokenizer, logits[0])
    if no_speech_threshold is not None and no_speech > no_speech_threshold:
        return LoopResult(NO_SPEECH, no_speech)
    if hook is not None:
        hook.start(weights, n_group)
    state = expand(state, n_group)
    last = np.repeat(logits[1:], n_group, axis=0)
    tokens = np.tile(np.array(prompt, dtype=np.int64), (n_group, 1))
    sum_logprobs = np.zeros(n_group)
    n_ctx, prompt_len = model.dims.n_text_ctx, len(prompt)
    reason = EOT
    while True:
        if tokens.shape[1] - prompt_len >= max_new:
            reason = BUDGET
            break
        for f in filters:
            f.apply(last, tokens)
        new_tokens, completed, sources = search.update(tokens, last, sum_logprobs)
        sources = np.arange(len(new_tokens)) if sources is None else sources
        verdict = hook.check(tokens, new_tokens, sources, completed) if hook is not None else Verdict.CONTINUE
        if completed:
            if new_tokens.ndim == 2 and len(new_tokens):
                tokens = new_tokens
            break
        if verdict is Verdict.REWIND:
            return LoopResult(REWIND, no_speech)
        if verdict is Verdict.STOP:
            row = tokens[sources[0]]
            kept = search.token_logprobs(0)[:-1]  # new row 0 continues the best row
            best = Candidate(tuple(int(t) for t in row), float(sum(kept)), tuple(kept))
            return LoopResult(STOP, no_speech, [best], int(new_tokens[0, -1]))
        tokens = new_tokens
        if tokens.shape[1] >= n_ctx:
            reason = LENGTH
            break
        if not np.array_equal(sources, np.arange(len(sources))):
            state = state.select(mx.array(sources))
        logits, state, weights = model.decoder(mx.array(tokens[:, -1:]), state, want_weights=wants_weights)
        if hook is not None:
            hook.push(weights)
        last = np.array(logits[:, -1], dtype=np.float32)
    return LoopResult(reason, no_speech, search.finalize(tokens, sum_logprobs))
