"""Search strategies: how the next token is chosen, and which finished sequence wins.

One-method interfaces, as in openai/whisper: a ``TokenDecoder`` turns (tokens, logits) into
longer tokens; a ``SequenceRanker`` picks among finished candidates. Arrays here are numpy on
the host: (B, T) tokens, (B, V) filtered logits, (B,) cumulative log probabilities.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .filters import log_softmax


class TokenDecoder:
    def update(self, tokens: np.ndarray, logits: np.ndarray, sum_logprobs: np.ndarray):
        """Append one token per row. Returns (tokens (B, T+1), completed, source rows or None).

        ``sum_logprobs`` is updated in place. ``source rows`` (B,) says which previous row
        each new row continues (beam search reorders); None means row i continues row i.
        """
        raise NotImplementedError

    def finalize(self, tokens: np.ndarray, sum_logprobs: np.ndarray):
        """Candidates when decoding stops: (list of token lists, list of sum logprobs)."""
        raise NotImplementedError


class GreedyDecoder(TokenDecoder):
    """Argmax at temperature 0, else a sample from the tempered distribution."""

    def __init__(self, temperature: float, eot: int, rng: Optional[np.random.Generator] = None):
        self.temperature, self.eot = temperature, eot
        self.rng = rng or np.random.default_rng(0)

    def update(self, tokens, logits, sum_logprobs):
        logprobs = log_softmax(logits)
        if self.temperature == 0:
            next_tokens = logits.argmax(axis=-1)
        else:
            p = np.exp(log_softmax(logits / self.temperature))
            next_tokens = np.array([self.rng.choice(len(row), p=row / row.sum()) for row in p])
        finished = tokens[:, -1] == self.eot
        picked = logprobs[np.arange(len(next_tokens)), next_tokens]
        sum_logprobs += np.where(finished, 0.0, picked)
        next_tokens[finished] = self.eot
        tokens = np.concatenate([tokens, next_tokens[:, None]], axis=1)
        return tokens, bool((tokens[:, -1] == self.eot).all()), None

    def finalize(self, tokens, sum_logprobs):
        return [list(row) + [self.eot] for row in tokens], list(sum_logprobs)


class BeamSearchDecoder(TokenDecoder):
    """Beam search over one audio window. ``patience`` (arXiv:2204.05424) lets the search go on
    until ``round(beam_size * patience)`` candidates have finished."""

    def __init__(self, beam_size: int, eot: int, patience: Optional[float] = None):
        self.beam_size, self.eot = beam_size, eot
        self.max_candidates = max(1, round(beam_size * (patience or 1.0)))
        self.finished: dict[tuple[int, ...], float] = {}

    def update(self, tokens, logits, sum_logprobs):
        logprobs = log_softmax(logits)
        k = self.beam_size + 1
        scores: dict[tuple[int, ...], float] = {}
        sources: dict[tuple[int, ...], int] = {}
        for row in range(tokens.shape[0]):
            prefix = tuple(tokens[row].tolist())
            top = np.argpartition(-logprobs[row], k)[:k]
            for token in top:
                seq = prefix + (int(token),)
                scores[seq] = float(sum_logprobs[row] + logprobs[row, token])
                sources[seq] = row
        next_rows, next_sources, new_finished = [], [], {}
        for seq in sorted(scores, key=scores.get, reverse=True):
            if seq[-1] == self.eot:
                new_finished[seq] = scores[seq]
            else:
                sum_logprobs[len(next_rows)] = scores[seq]
                next_rows.append(seq)
                next_sources.append(sources[seq])
                if len(next_rows) == self.beam_size:
                    break
        for seq in sorted(new_finished, key=new_finished.get, reverse=True):
            if len(self.finished) >= self.max_candidates:
                break
            self.finished[seq] = new_finished[seq]
        completed = len(self.finished) >= self.max_candidates
        return np.array(next_rows, dtype=tokens.dtype), completed, np.array(next_sources)

    def finalize(self, tokens, sum_logprobs):
        finished = dict(self.finished)
        if len(finished) < self.beam_size:  # not enough ended: take the best unfinished beams
            for row in np.argsort(sum_logprobs)[::-1]:
                finished[tuple(tokens[row].tolist()) + (self.eot,)] = float(sum_logprobs[row])
                if len(finished) >= self.beam_size:
                    break
        return [list(seq) for seq in finished], list(finished.values())


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
