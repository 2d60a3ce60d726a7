"""Logit filters: each one masks what may not come next, on the host, in place.

They run on numpy copies of the last position's logits, (B, V): the timestamp rules look at
each sequence's own history, which is clearer and no slower on the CPU than a masked MLX
formulation (one small (B, V) transfer per step; the decoder itself stays in MLX).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from transcriber.model.tokenizer import Tokenizer


class LogitFilter:
    def apply(self, logits: np.ndarray, tokens: np.ndarray) -> None:
        """Mask ``logits`` (B, V) in place given ``tokens`` (B, T) so far (prompt included)."""
        raise NotImplementedError


class SuppressBlank(LogitFilter):
    """No blank and no end of text as the first sampled token."""

    def __init__(self, tokenizer: Tokenizer, sample_begin: int):
        self.ids = list(tokenizer.encode(" ")) + [tokenizer.eot]
        self.sample_begin = sample_begin

    def apply(self, logits, tokens):
        if tokens.shape[1] == self.sample_begin:
            logits[:, self.ids] = -np.inf


class SuppressTokens(LogitFilter):
    def __init__(self, ids: Sequence[int]):
        self.ids = sorted(set(ids))

    def apply(self, logits, tokens):
        logits[:, self.ids] = -np.inf


class SuppressSpecials(LogitFilter):
    """Nothing after the end of text: no special token, no timestamp, is ever sampled (the
    streaming passes' text-only decoding)."""

    def __init__(self, eot: int):
        self.eot = eot

    def apply(self, logits, tokens):
        logits[:, self.eot + 1:] = -np.inf


def suppress_ids(tokenizer: Tokenizer, spec: Optional[str], model_ids: tuple[int, ...]) -> list[int]:
    """Token ids never sampled: those of ``spec`` (``DecodingOptions.suppress_tokens``; its
    "-1": the model's own list, else Whisper's non-speech symbols) plus the special tokens that
    only belong in prompts."""
    if spec is None or spec == "":
        return []
    ids = [int(t) for t in str(spec).split(",") if t.strip()]
    if -1 in ids:
        ids = [t for t in ids if t >= 0] + list(model_ids or tokenizer.non_speech_tokens())
    ids += [tokenizer.transcribe, tokenizer.translate, tokenizer.sot, tokenizer.sot_prev,
            tokenizer.sot_lm, tokenizer.no_speech]
    return sorted({t for t in ids if 0 <= t < tokenizer.timestamp_begin and t != tokenizer.eot})


class ApplyTimestampRules(LogitFilter):
    """Whisper's timestamp grammar: timestamps come in pairs (an end, then the next start) and
    never decrease, the first token is a timestamp no later than ``max_initial_timestamp``, and
    a timestamp is forced when timestamps together are likelier than any text token."""

    def __init__(self, tokenizer: Tokenizer, sample_begin: int, max_initial_timestamp_index):
        self.tokenizer = tokenizer
        self.sample_begin = sample_begin
        self.max_initial_timestamp_index = max_initial_timestamp_index

    def apply(self, logits, tokens):
        ts_begin, eot = self.tokenizer.timestamp_begin, self.tokenizer.eot
        logits[:, self.tokenizer.no_timestamps] = -np.inf
        for k in range(tokens.shape[0]):
            seq = tokens[k, self.sample_begin:]
            last_was_ts = len(seq) >= 1 and seq[-1] >= ts_begin
            penultimate_was_ts = len(seq) < 2 or seq[-2] >= ts_begin
            if last_was_ts:
                if penultimate_was_ts:  # a closed pair: text must follow
                    logits[k, ts_begin:] = -np.inf
                else:  # an open timestamp: the pair must close (or the text end)
                    logits[k, :eot] = -np.inf
            stamps = seq[seq >= ts_begin]
            if len(stamps):
                # never go back in time; after a pair's end, the next start is later still
                floor = stamps[-1] if (last_was_ts and not penultimate_was_ts) else stamps[-1] + 1
                logits[k, ts_begin:floor] = -np.inf
        if tokens.shape[1] == self.sample_begin:
            logits[:, :ts_begin] = -np.inf  # start with a timestamp
            if self.max_initial_timestamp_index is not None:
                logits[:, ts_begin + self.max_initial_timestamp_index + 1:] = -np.inf
        # timestamps together likelier than the likeliest text token, compared as logits: both
        # log probabilities are these minus the same log-sum-exp of the row, so that need not be
        # computed (an exp of every logit, ~40 us of a ~1.5 ms step)
        ts_logit = logsumexp(logits[:, ts_begin:])
        text_max = logits[:, :ts_begin].max(axis=-1)
        logits[ts_logit > text_max, :ts_begin] = -np.inf


def logsumexp(x: np.ndarray) -> np.ndarray:
    """(B, N) -> (B,) log of each row's sum of exp, -inf for a row of -inf."""
    m = x.max(axis=-1)
    finite = np.isfinite(m)
    safe = np.where(finite, m, 0.0)
    with np.errstate(divide="ignore"):
        return np.where(finite, safe + np.log(np.exp(x - safe[:, None]).sum(axis=-1)), -np.inf)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """(B, V) -> (B, V) log probabilities, -inf stays -inf."""
    return logits - logsumexp(logits)[:, None]


def no_speech_prob(tokenizer: Tokenizer, sot_logits: np.ndarray) -> float:
    """Probability of <|nospeech|> from the logits (V,) at <|startoftranscript|>."""
    logprobs = log_softmax(np.asarray(sot_logits, dtype=np.float64)[None])[0]
    return float(np.exp(logprobs[tokenizer.no_speech]))
