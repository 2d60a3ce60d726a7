"""Search strategies: how the next token is chosen, and which finished sequence wins.

One-method interfaces, as in openai/whisper: a ``TokenDecoder`` turns (tokens, logits) into
longer tokens; a ``SequenceRanker`` picks among finished candidates. Arrays here are numpy on
the host: (B, T) tokens, (B, V) filtered logits, (B,) cumulative log probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from .filters import log_softmax


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
        logprobs = log_softmax(logits)
        if self.temperature == 0:
            next_tokens = logits.argmax(axis=-1)
        else:
            p = np.exp(log_softmax(logits / self.temperature))
            next_tokens = np.array([self.rng.choice(len(row), p=row / row.sum()) for row in p])
        finished = tokens[:, -1] == self.eot
        picked = np.where(finished, 0.0, logprobs[np.arange(len(next_tokens)), next_tokens])
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
