"""The benchmark's DER scorer (evalkit/der.py) maps many speakers as exactly as few.

Exhaustive permutations for a few speakers, the Hungarian method for more: both find the mapping
of most agreement, so they give the same number wherever both can run; a joined recording of
23 speakers (bench/speakers/der.py --joined) needs the second.
"""

from __future__ import annotations

import itertools

import numpy as np

from evalkit import der


def test_the_hungarian_method_finds_the_best_mapping():
    rng = np.random.default_rng(0)
    for _ in range(200):
        rows = int(rng.integers(1, 7))
        agree = rng.integers(0, 50, size=(rows, int(rng.integers(1, rows + 1))))
        best = max(sum(agree[r, c] for c, r in enumerate(p))
                   for p in itertools.permutations(range(agree.shape[0]), agree.shape[1]))
        assert der.hungarian(agree) == der.best_agreement(agree) == best


def test_many_speakers_are_scored():
    # 12 reference speakers, the hypothesis the same turns under other names: no error
    reference = [(float(i), i + 0.9, f"r{i}") for i in range(12)]
    hypothesis = [(s, e, f"h{11 - i}") for i, (s, e, _) in enumerate(reference)]
    assert der.score(reference, hypothesis).der == 0.0
    hypothesis[0] = (0.0, 0.9, "h10")  # one turn under another's name: confused
    assert 0 < der.score(reference, hypothesis).der < 0.1
