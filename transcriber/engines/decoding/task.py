"""DecodingTask: decode one 30 s window of audio features into tokens.

The prompt (previous text, start-of-transcript sequence, optional prefix) is run through the
decoder once; then one token per step (``decode_loop``), with the logit filters, token decoder
and ranker of the options' ``Search``.
Cross-attention keys/values are computed once per window (``TextDecoder.start``) and shared by
every step, every beam and every temperature retried on the window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from transcriber.model.state import DecoderState
from transcriber.model.whisper import Whisper
from transcriber.model.tokenizer import Tokenizer
from transcriber.transcript.types import compression_ratio
from transcriber.engines.decoding.loop import decode_loop
from transcriber.engines.decoding.options import DecodingOptions
from transcriber.engines.decoding.search import Candidate, MaximumLikelihoodRanker, Search


@dataclass(frozen=True)
class DecodingResult:
    tokens: tuple[int, ...]  # sampled tokens: text and timestamps, without the end of text
    text: str
    language: str
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    compression_ratio: float
    token_logprobs: tuple[float, ...] = field(default=(), repr=False)  # one per token above


class DecodingTask:
    def __init__(self, model: Whisper, tokenizer: Tokenizer, options: DecodingOptions,
                 model_suppress_ids: tuple[int, ...] = (), rng: Optional[np.random.Generator] = None):
        self.model, self.tokenizer, self.options = model, tokenizer, options
        n_ctx = model.dims.n_text_ctx
        self.sample_len = options.sample_len or n_ctx // 2
        self.initial_tokens = self._initial_tokens()
        self.sample_begin = len(self.initial_tokens)
        self.sot_index = self.initial_tokens.index(tokenizer.sot)
        self.search = Search.one_shot(tokenizer, options, model_suppress_ids)
        self.filters = self.search.filters(self.sample_begin)
        self.rng = rng

    def _as_tokens(self, text_or_tokens) -> list[int]:
        if isinstance(text_or_tokens, str):
            return self.tokenizer.encode(" " + text_or_tokens.strip())
        return list(text_or_tokens)

    def _initial_tokens(self) -> list[int]:
        tok, opts = self.tokenizer, self.options
        tokens = list(tok.sot_sequence_including_notimestamps if opts.without_timestamps else tok.sot_sequence)
        if opts.prefix:
            max_prefix = self.model.dims.n_text_ctx // 2 - len(tokens)
            tokens += self._as_tokens(opts.prefix)[-max_prefix:]
        if opts.prompt:
            prompt = self._as_tokens(opts.prompt)[-(self.model.dims.n_text_ctx // 2 - 1):]
            tokens = [tok.sot_prev] + prompt + tokens
        return tokens

    def run(self, base: DecoderState, language: str) -> DecodingResult:
        """Decode one window whose cross-attention is precomputed in ``base`` (batch 1)."""
        result = decode_loop(self.model, base, self.initial_tokens, self.sot_index, tokenizer=self.tokenizer,
                             search=self.search.decoder(self.rng), filters=self.filters,
                             n_group=self.search.n_group, max_new=self.sample_len)
        return self.result(result.candidates, result.no_speech_prob, language)

    def result(self, candidates: list[Candidate], no_speech_prob: float,
               language: Optional[str] = None) -> DecodingResult:
        """The best of the finished candidates (decoded here or side by side with other windows: side_by_side.py)."""
        best, best_tokens = best_candidate(candidates, self.sample_begin, self.tokenizer.eot, self.search.ranker)
        text = self.tokenizer.decode(best_tokens)
        return DecodingResult(
            tokens=tuple(best_tokens), text=text, language=language or self.tokenizer.language,
            avg_logprob=best.sum_logprob / (len(best_tokens) + 1),
            no_speech_prob=no_speech_prob, temperature=self.options.temperature,
            compression_ratio=compression_ratio(text),
            token_logprobs=best.token_logprobs[: len(best_tokens)])


def sampled_tokens(sequence: tuple[int, ...], sample_begin: int, eot: int) -> list[int]:
    """The sampled part of a candidate's sequence, up to (without) its first end of text."""
    sampled = [int(t) for t in sequence[sample_begin:]]
    return sampled[: sampled.index(eot)] if eot in sampled else sampled


def best_candidate(candidates: list[Candidate], sample_begin: int, eot: int,
                   ranker: MaximumLikelihoodRanker) -> tuple[Candidate, list[int]]:
    """The candidate the ranker picks, and its sampled tokens (both modes end a decode here)."""
    sampled = [sampled_tokens(c.tokens, sample_begin, eot) for c in candidates]
    best = ranker.rank([len(s) for s in sampled], [c.sum_logprob for c in candidates])
    return candidates[best], sampled[best]
