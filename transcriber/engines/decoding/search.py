"""Search strategies: how the next token is chosen, and which finished sequence wins; and
``Search``, the one place that builds them for a set of options.

One-method interfaces, as in openai/whisper: a ``TokenDecoder`` turns (tokens, logits) into
longer tokens; a ``SequenceRanker`` picks among finished candidates; ``LogitFilter``s
(filters.py) mask what may not come next. ``Search`` puts the three together, the same way for
one-shot windows (task.py), windows decoded side by side (side_by_side.py) and AlignAtt
streaming passes (streaming/alignatt.py). Greedy is ``beam_size`` 1 here (None in the
options of both modes). Arrays are numpy on
the host: (B, T) tokens, (B, V) filtered logits, (B,) cumulative log probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from transcriber.constants import TIME_PRECISION
from transcriber.engines.decoding.filters import (ApplyTimestampRules, LogitFilter, SuppressBlank, SuppressSpecials, SuppressTokens, log_softmax,
                                                  logsumexp, suppress_ids)

if TYPE_CHECKING:
    from transcriber.model.tokenizer import Tokenizer
    from transcriber.engines.decoding.options import DecodingOptions


@dataclass(frozen=True)
class Candidate:
    """A finished sequence: all its tokens (prompt included, ending with end of text), its
    summed log probability, and the log probability of each sampled token."""

    tokens: tuple[int, ...]
    sum_logprob: float
    token_logprobs: tuple[float, ...]


class TokenDecoder:
    def update(self, tokens: np.ndarray, logits: np.ndarray, sum_logprobs: np.ndarray):
        """Append one token per row. Returns (tokens (B, T+1), completed, source rows or None).

        ``sum_logprobs`` is updated in place. ``source rows`` (B,) says which previous row
        each new row continues (beam search reorders); None means row i continues row i.
        """
        raise NotImplementedError

    def finalize(self, tokens: np.ndarray, sum_logprobs: np.ndarray) -> list[Candidate]:
        """The candidates when decoding stops."""
        raise NotImplementedError

    def token_logprobs(self, row: int) -> list[float]:
        """Log probability of each token sampled so far in (current) row ``row``."""
        raise NotImplementedError


class GreedyDecoder(TokenDecoder):
    """Argmax at temperature 0, else a sample from the tempered distribution."""

    def __init__(self, temperature: float, eot: int, rng: Optional[np.random.Generator] = None):
        self.temperature, self.eot = temperature, eot
        self.rng = rng or np.random.default_rng(0)
        self.history: list[np.ndarray] = []  # per step, (B,) log probability of the token taken

    def update(self, tokens, logits, sum_logprobs):
        if self.temperature == 0:
            next_tokens = logits.argmax(axis=-1)
        else:
            p = np.exp(log_softmax(logits / self.temperature))
            next_tokens = np.array([self.rng.choice(len(row), p=row / row.sum()) for row in p])
        finished = tokens[:, -1] == self.eot
        # the taken token's log probability (its logit less the row's log-sum-exp; not the whole row's)
        picked = np.where(finished, 0.0, logits[np.arange(len(next_tokens)), next_tokens] - logsumexp(logits))
        sum_logprobs += picked
        self.history.append(picked)
        next_tokens[finished] = self.eot
        tokens = np.concatenate([tokens, next_tokens[:, None]], axis=1)
        return tokens, bool((tokens[:, -1] == self.eot).all()), None

    def token_logprobs(self, row):
        return [float(h[row]) for h in self.history]

    def finalize(self, tokens, sum_logprobs):
        history = np.stack(self.history, axis=1) if self.history else np.zeros((len(tokens), 0))
        return [Candidate(tuple(row) + (self.eot,), float(total), tuple(h))
                for row, total, h in zip(tokens.tolist(), sum_logprobs, history.tolist())]


class BeamSearchDecoder(TokenDecoder):
    """Beam search over one audio window. ``patience`` (arXiv:2204.05424) lets the search go on
    until ``round(beam_size * patience)`` candidates have finished."""

    def __init__(self, beam_size: int, eot: int, patience: Optional[float] = None):
        self.beam_size, self.eot = beam_size, eot
        self.max_candidates = max(1, round(beam_size * (patience or 1.0)))
        self.finished: dict[tuple[int, ...], Candidate] = {}
        self.history: list[list[float]] = []  # per beam row, the log probability of each token

    def update(self, tokens, logits, sum_logprobs):
        logprobs = log_softmax(logits)
        if not self.history:
            self.history = [[] for _ in range(tokens.shape[0])]
        k = self.beam_size + 1
        scores: dict[tuple[int, ...], tuple[float, int, float]] = {}  # seq -> (score, row, logprob)
        for row in range(tokens.shape[0]):
            prefix = tuple(tokens[row].tolist())
            for token in np.argpartition(-logprobs[row], k)[:k]:
                lp = float(logprobs[row, token])
                scores[prefix + (int(token),)] = (float(sum_logprobs[row]) + lp, row, lp)
        next_rows, next_history, new_finished = [], [], []
        for seq in sorted(scores, key=lambda q: scores[q][0], reverse=True):
            score, row, lp = scores[seq]
            if seq[-1] == self.eot:
                new_finished.append(Candidate(seq, score, tuple(self.history[row] + [lp])))
            else:
                sum_logprobs[len(next_rows)] = score
                next_rows.append(seq)
                next_history.append(self.history[row] + [lp])
                if len(next_rows) == self.beam_size:
                    break
        sources = np.array([scores[seq][1] for seq in next_rows])
        self.history = next_history
        for candidate in new_finished:
            if len(self.finished) >= self.max_candidates:
                break
            self.finished[candidate.tokens] = candidate
        completed = len(self.finished) >= self.max_candidates
        return np.array(next_rows, dtype=tokens.dtype), completed, sources

    def token_logprobs(self, row):
        return list(self.history[row]) if self.history else []

    def finalize(self, tokens, sum_logprobs):
        finished = dict(self.finished)
        if len(finished) < self.beam_size:  # not enough ended: take the best unfinished beams
            for row in np.argsort(sum_logprobs)[::-1]:
                seq = tuple(tokens[row].tolist()) + (self.eot,)
                history = self.history[row] if self.history else []
                finished[seq] = Candidate(seq, float(sum_logprobs[row]), tuple(history))
                if len(finished) >= self.beam_size:
                    break
        return list(finished.values())


class SequenceRanker:
    def rank(self, lengths: list[int], sum_logprobs: list[float]) -> int:
        """Index of the best candidate."""
        raise NotImplementedError


class MaximumLikelihoodRanker(SequenceRanker):
    """Highest log probability, normalised by length, or by Google NMT's length penalty."""

    def __init__(self, length_penalty: Optional[float]):
        self.length_penalty = length_penalty

    def rank(self, lengths, sum_logprobs):
        def score(logprob, length):
            if self.length_penalty is None:
                return logprob / max(length, 1)
            return logprob / (((5 + length) / 6) ** self.length_penalty)

        return int(np.argmax([score(p, n) for p, n in zip(sum_logprobs, lengths)]))


class Search:
    """How one set of options chooses tokens: a fresh token decoder per pass (``decoder``), the
    logit filters of a pass that samples from ``sample_begin`` on (``filters``), and the ranker.

    n_group: sequences decoded side by side for one window (beams, or samples at a temperature
    above 0); beam_size: 1 is greedy; timestamps: Whisper's timestamp grammar (with the first
    timestamp at most ``max_initial_timestamp`` seconds), else text only, and with
    ``text_only`` nothing after the end of text (no timestamp, no special token).
    """

    def __init__(self, tokenizer: Tokenizer, *, n_group: int = 1, beam_size: int = 1, temperature: float = 0.0,
                 patience: Optional[float] = None, length_penalty: Optional[float] = None,
                 suppress_tokens: Optional[str] = "-1", model_suppress_ids: tuple[int, ...] = (),
                 suppress_blank: bool = True, timestamps: bool = True, max_initial_timestamp: Optional[float] = None,
                 text_only: bool = False):
        self.tokenizer, self.n_group = tokenizer, n_group
        self.beam_size, self.temperature, self.patience = beam_size, temperature, patience
        self.ranker = MaximumLikelihoodRanker(length_penalty)
        self.suppress_blank, self.timestamps = suppress_blank, timestamps
        self.max_initial_timestamp = max_initial_timestamp
        ids = suppress_ids(tokenizer, suppress_tokens, model_suppress_ids)
        # the filters that do not depend on the pass: built once
        self._suppress: list[LogitFilter] = [SuppressTokens(ids)] if ids else []
        if text_only:
            self._suppress.append(SuppressSpecials(tokenizer.eot))

    @classmethod
    def one_shot(cls, tokenizer: Tokenizer, options: DecodingOptions, model_suppress_ids: tuple[int, ...] = ()) -> "Search":
        """One-shot windows (``DecodingOptions``, whose ``beam_size`` None is greedy too)."""
        return cls(tokenizer, n_group=options.n_group, beam_size=options.beam_size or 1,
                   temperature=options.temperature, patience=options.patience,
                   length_penalty=options.length_penalty, suppress_tokens=options.suppress_tokens,
                   model_suppress_ids=model_suppress_ids, suppress_blank=options.suppress_blank,
                   timestamps=not options.without_timestamps, max_initial_timestamp=options.max_initial_timestamp)

    @classmethod
    def streaming(cls, tokenizer: Tokenizer, beam_size: Optional[int],
                  model_suppress_ids: tuple[int, ...] = ()) -> "Search":
        """AlignAtt passes (``StreamingOptions.beam_size``: None is greedy): text only, at
        temperature 0, Whisper's non-speech symbols never sampled."""
        beam_size = beam_size or 1
        return cls(tokenizer, n_group=beam_size, beam_size=beam_size, model_suppress_ids=model_suppress_ids,
                   timestamps=False, text_only=True)

    @property
    def side_by_side(self) -> bool:
        """Greedy at temperature 0: what windows decoded side by side share (beams and samples
        stay one window's)."""
        return self.temperature == 0 and self.n_group == 1

    def decoder(self, rng: Optional[np.random.Generator] = None) -> TokenDecoder:
        """A fresh token decoder: beam search at temperature 0 with beams, else greedy (argmax, or
        a sample at the temperature)."""
        eot = self.tokenizer.eot
        if self.temperature == 0 and self.beam_size > 1:
            return BeamSearchDecoder(self.beam_size, eot, self.patience)
        return GreedyDecoder(self.temperature, eot, rng)

    def filters(self, sample_begin: int) -> list[LogitFilter]:
        """The logit filters of a pass whose sampled tokens start at ``sample_begin``."""
        filters: list[LogitFilter] = [SuppressBlank(self.tokenizer, sample_begin)] if self.suppress_blank else []
        filters += self._suppress
        if self.timestamps:
            max_index = None
            if self.max_initial_timestamp is not None:
                max_index = round(self.max_initial_timestamp / TIME_PRECISION)
            filters.append(ApplyTimestampRules(self.tokenizer, sample_begin, max_index))
        return filters
