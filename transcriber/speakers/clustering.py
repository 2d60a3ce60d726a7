"""Which local speakers are the same person: agglomerative clustering of their embeddings.

Every piece of a local speaker's speech (pipeline.py) has a CAM++ embedding; pieces closer than a
threshold (cosine distance, average linkage) are one speaker across the file. pyannote clusters the same way in
spirit (its AgglomerativeClustering: centroid linkage of unit vectors, a calibrated threshold);
average linkage on cosine distance is what we use (``THRESHOLD`` calibrated on the fit half
of the AMI excerpts, bench/speakers/der.py --calibrate, with the 1.5 s pieces, the overlap rule
and the widening of pipeline.py, small clusters absorbed: pooled DER 0.196 at 0.8, 0.203 at
0.75, 0.220 at 0.7, 0.240 at 0.9, 0.242 at 0.6: short pieces' embeddings are noisier than whole
windows', the threshold higher than the 0.65 of one embedding per window). A count the user gives (``num_speakers``, or
``min_speakers``/``max_speakers`` bounds) cuts the same tree at that many clusters instead.
Two local speakers of one window may be merged: the segmentation model now and then gives one
voice two local speakers in a window (after a pause); keeping window-mates apart made one reader
two speakers. (pyannote keeps them apart but then drops the one that finds no cluster.)

numpy only (no scipy): the pieces of an hour (a few thousand) fit an O(n^2) matrix (float32
above 2000: 3000 pieces 36 MB) and the nearest-neighbour chain merges them in O(n^2) (3000
random ones in about a second).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

MIN_CLUSTER = 12  # pieces a cluster needs (or 10 % of them, if fewer) to stand as a speaker (pyannote's)
THRESHOLD = 0.8  # cosine distance at which average linkage stops merging (calibrated: bench/speakers/der.py)


def cosine_distances(embeddings: np.ndarray) -> np.ndarray:
    """(n, n) 1 - cosine similarity of the rows of ``embeddings``."""
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    return np.clip(1.0 - unit @ unit.T, 0.0, 2.0)


def merge_tree(distances: np.ndarray) -> list[tuple[int, int, float]]:
    """Average-linkage merges of n points: (kept cluster, absorbed cluster, distance) in order of
    distance, n - 1 of them. Cluster ids are point indices: a merged cluster keeps the smaller id.
    The nearest-neighbour chain (average linkage is reducible, so the merges are those of the
    textbook loop, found in O(n^2) rather than O(n^3): a recording has thousands of pieces)."""
    n = len(distances)
    d = distances.astype(np.float32 if n > 2000 else np.float64)  # 2000^2 x 8 bytes = 32 MB
    np.fill_diagonal(d, np.inf)
    sizes = np.ones(n)
    merges: list[tuple[int, int, float]] = []
    chain: list[int] = []
    alive = list(range(n - 1, -1, -1))  # a stack of cluster ids, for a fresh chain's start
    while len(merges) < n - 1:
        if not chain:
            while sizes[alive[-1]] == 0:
                alive.pop()
            chain.append(alive[-1])
        a = chain[-1]
        b = int(np.argmin(d[a]))
        if len(chain) > 1 and d[a, chain[-2]] <= d[a, b]:
            b = chain[-2]
        if len(chain) < 2 or b != chain[-2]:
            chain.append(b)
            continue
        del chain[-2:]
        lo, hi = min(a, b), max(a, b)
        merges.append((lo, hi, float(d[lo, hi])))
        pooled = (d[lo] * sizes[lo] + d[hi] * sizes[hi]) / (sizes[lo] + sizes[hi])
        d[lo], d[:, lo] = pooled, pooled
        d[lo, lo] = np.inf
        d[hi], d[:, hi] = np.inf, np.inf
        sizes[lo], sizes[hi] = sizes[lo] + sizes[hi], 0
    return sorted(merges, key=lambda m: m[2])


def cut(n: int, merges: list[tuple[int, int, float]], count: int) -> np.ndarray:
    """Cluster index of each of n points after the first ``n - count`` merges."""
    parent = np.arange(n)
    for a, b, _ in merges[:max(0, n - count)]:
        parent[parent == b] = a
    _, labels = np.unique(parent, return_inverse=True)
    return labels


def cluster(embeddings: np.ndarray, threshold: float = THRESHOLD, num_speakers: Optional[int] = None,
            min_speakers: Optional[int] = None, max_speakers: Optional[int] = None) -> np.ndarray:
    """Cluster index (0..k-1) of each embedding. The count is ``num_speakers`` when given, else
    the merges below ``threshold`` with the small clusters absorbed (``absorb_small``), kept
    within ``min_speakers``..``max_speakers`` (the tree cut at the bound when outside)."""
    n = len(embeddings)
    if n == 0:
        return np.zeros(0, dtype=int)
    merges = merge_tree(cosine_distances(embeddings))
    if num_speakers is not None:
        return cut(n, merges, min(max(num_speakers, 1), n))
    labels = absorb_small(embeddings, cut(n, merges, n - sum(1 for _, _, d in merges if d < threshold)))
    count = int(labels.max()) + 1
    bounded = min(max(count, min_speakers or 1), max_speakers or n)
    return labels if bounded == count else cut(n, merges, min(max(bounded, 1), n))


def absorb_small(embeddings: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Clusters of fewer than min(MIN_CLUSTER, 10 % of the pieces) pieces given to the nearest
    larger one (centroids, cosine), as pyannote's clustering does with its min_cluster_size:
    a few stray pieces are not a speaker (on a 10-minute two-reader recording they made a third)."""
    sizes = np.bincount(labels)
    large = sizes >= min(MIN_CLUSTER, max(1, round(0.1 * len(labels))))
    if large.all() or not large.any():
        return labels
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    kept = np.flatnonzero(large)
    centroids = np.stack([unit[labels == c].mean(axis=0) for c in kept])
    small = ~large[labels]
    out = labels.copy()
    out[small] = kept[np.argmax(unit[small] @ centroids.T, axis=1)]
    return np.unique(out, return_inverse=True)[1]


def cluster_then_assign(embeddings: np.ndarray, long: np.ndarray, threshold: float = THRESHOLD,
                        num_speakers: Optional[int] = None, min_speakers: Optional[int] = None,
                        max_speakers: Optional[int] = None) -> np.ndarray:
    """``cluster`` of the embeddings of enough speech (``long``), then every other one given the
    cluster of the nearest centroid (cosine), as pyannote assigns its too-short speakers. With
    no long one at all, the short ones are clustered themselves."""
    if not long.any():
        long = np.ones(len(embeddings), dtype=bool)
    labels = np.zeros(len(embeddings), dtype=int)
    if len(embeddings) == 0:
        return labels
    labels[long] = cluster(embeddings[long], threshold, num_speakers, min_speakers, max_speakers)
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    centroids = np.stack([unit[long][labels[long] == c].mean(axis=0) for c in range(labels[long].max() + 1)])
    labels[~long] = np.argmax(unit[~long] @ centroids.T, axis=1)
    return labels


def runners_up(embeddings: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each embedding's nearest cluster centroid (cosine) other than its own; -1 with one
    cluster. The reconstruction gives it the frames where its own cluster already speaks."""
    if len(labels) == 0 or labels.max() == 0:
        return np.full(len(labels), -1)
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    centroids = np.stack([unit[labels == c].mean(axis=0) for c in range(labels.max() + 1)])
    similarity = unit @ centroids.T
    similarity[np.arange(len(labels)), labels] = -np.inf
    return np.argmax(similarity, axis=1)
