"""The diarization pipeline on real speech: two readers alternating, one reader, an AMI meeting.

The bounds are measured DERs (bench/speakers/der.py) with a margin: they catch a pipeline that
stops finding speakers, not a small change of numbers. The clustering's own rules (count
bounds, window-mates kept apart) are checked on made-up embeddings without any data.
"""

from __future__ import annotations

import numpy as np
import pytest

from evalkit import der, readers
from transcriber.media.audio import load_audio
from transcriber.speakers import clustering
from transcriber.speakers.pipeline import (
    ONCE_FROM_S, Diarizer, Local, Piece, _window_speakers, chunks, own_parts, speaker_pieces, split_at_pauses, window_starts)

READING = "ls_testother_367-130732_533-1066"
MEETING = "ami_pyannote_debug_dev00"
READERS_BOUND = 0.08  # alternating readers, 0.25 s collar (measured 0.044)
MEETING_BOUND = 0.45  # one AMI excerpt, no collar, count not given (measured 0.321)


@pytest.fixture(scope="module")
def diarizer(speaker_weights):
    return Diarizer.from_weights(speaker_weights)


@pytest.fixture(scope="module")
def reading(data_dir):
    return readers.pieces(data_dir, READING, load_audio(data_dir / "audio" / "long_en" / f"{READING}.flac"))


@pytest.fixture(scope="module")
def alternating(reading):
    samples, reference = readers.alternating({k: v[:5] for k, v in reading.items()})
    return samples, reference


def labels(turns) -> set:
    return {label for _, _, label in turns}


def test_windows_cover_the_recording():
    assert list(window_starts(25 * 16000, 5.0)) == [0, 80000, 160000, 240000]
    assert list(window_starts(22 * 16000, 5.0)) == [0, 80000, 160000, 192000]
    assert list(window_starts(3 * 16000, 5.0)) == [0]


def test_each_second_is_embedded_by_one_window():
    # 25 s: windows at 0, 5, 10, 15 s; one voice speaks throughout but pauses at 7.2-7.8 s of
    # the file: the first two windows' own parts meet in that pause, not at the midpoint (7.5 s)
    starts = window_starts(25 * 16000, 5.0)
    first = np.round(starts / 270).astype(int)
    speech = np.ones(first[-1] + 589, dtype=np.float32)
    speech[int(7.2 * 16000 / 270):int(7.8 * 16000 / 270)] = 0
    activity = np.zeros((len(starts), 589, 3), dtype=np.float32)
    for w, f in enumerate(first):
        activity[w, :, 0] = speech[f:f + 589]
    local = Local(starts, activity)
    own = own_parts(local)
    covered = np.concatenate([np.arange(f + a, f + b) for f, (a, b) in zip(first, own)])
    assert own[0, 0] == 0 and own[-1, 1] == 589 and list(covered) == list(range(first[-1] + 589))
    assert 7.2 <= (first[1] + own[1, 0]) * 270 / 16000 <= 7.8
    pieces = speaker_pieces(local, 2500, own)
    assert all(own[p.window, 0] <= p.span[0] < p.span[1] <= own[p.window, 1] for p in pieces)
    # at most each 10 ms filterbank frame of the 25 s once; every window's whole speech is half again
    assert sum(len(p.frames) for p in pieces) <= 2500 < sum(len(p.frames) for p in speaker_pieces(local, 2500))


def test_a_local_speaker_is_cut_at_its_pauses():
    # the segmentation gave two voices one local speaker, 0.5 s of silence between them: two pieces
    mask = np.zeros(400, dtype=np.int8)
    mask[0:150] = mask[180:400] = 1
    assert split_at_pauses(mask, gap=20, least=80) == [(0, 150), (180, 400)]
    assert split_at_pauses(mask, gap=40, least=80) == [(0, 400)]  # a shorter pause is not a cut
    mask[390:] = 0
    mask[395:] = 1  # a 5-frame scrap after a pause joins its neighbour rather than stand alone
    assert split_at_pauses(mask, gap=3, least=80) == [(0, 150), (180, 400)]
    assert split_at_pauses(np.zeros(10, dtype=np.int8), 3, 5) == []


def test_a_few_stray_pieces_are_not_a_speaker():
    # 30 pieces of each of two voices and 2 strays far from both: the strays join the nearer voice
    rng = np.random.default_rng(2)
    voices = 10 * np.eye(3, 192)
    points = np.concatenate([voices[0] + 0.3 * rng.normal(size=(30, 192)), voices[1] + 0.3 * rng.normal(size=(30, 192)),
                             voices[2] + 0.3 * voices[0] + 0.3 * rng.normal(size=(2, 192))])
    labels = clustering.cluster(points, threshold=0.5)
    assert len(set(labels)) == 2 and labels[60] == labels[61] == labels[0]
    assert len(set(clustering.cluster(points, num_speakers=3))) == 3  # a count given is kept


def test_pieces_are_cut_in_equal_chunks():
    assert chunks([(0, 100), (150, 330)], 90) == [(0, 100), (150, 240), (240, 330)]
    assert chunks([(0, 40)], 90) == [(0, 40)]


def _textbook_average_linkage(distances):
    """The O(n^3) loop: always merge the closest pair of clusters."""
    n = len(distances)
    d = distances.astype(np.float64).copy()
    np.fill_diagonal(d, np.inf)
    sizes, merges = np.ones(n), []
    for _ in range(n - 1):
        a, b = sorted(divmod(int(np.argmin(d)), n))
        merges.append((a, b, float(d[a, b])))
        pooled = (d[a] * sizes[a] + d[b] * sizes[b]) / (sizes[a] + sizes[b])
        d[a], d[:, a] = pooled, pooled
        d[a, a] = np.inf
        d[b], d[:, b] = np.inf, np.inf
        sizes[a] += sizes[b]
    return merges


def test_the_merge_chain_is_average_linkage():
    rng = np.random.default_rng(1)
    for n in (2, 7, 40):
        points = rng.normal(size=(n, 8)) + 3 * rng.integers(0, 3, size=(n, 1))
        distances = clustering.cosine_distances(points)
        ours, textbook = clustering.merge_tree(distances), _textbook_average_linkage(distances)
        assert np.allclose([m[2] for m in ours], sorted(m[2] for m in textbook))
        for count in range(1, n + 1):
            a, b = clustering.cut(n, ours, count), clustering.cut(n, textbook, count)
            assert len(set(zip(a, b))) == len(set(a)) == len(set(b)) == count


def test_one_cluster_is_not_heard_twice_at_once():
    # two local speakers of one window, both put in cluster 0, overlap in frames 5-9: there
    # the second one's frames go to its next best cluster (1), elsewhere they stay in cluster 0
    activity = np.zeros((20, 3), dtype=np.int8)
    activity[0:10, 0] = 1
    activity[5:15, 1] = 1
    pieces = [Piece(0, 0, (0, 10), np.arange(5)), Piece(0, 1, (5, 15), np.arange(5))]
    mapped = _window_speakers(activity, pieces, np.array([0, 0]), np.array([1, 1]), 2)
    assert mapped[:, 0].tolist() == [1] * 15 + [0] * 5
    assert mapped[:, 1].tolist() == [0] * 5 + [1] * 5 + [0] * 10
    # with one cluster only (no next best: -1) both stay in it
    mapped = _window_speakers(activity, pieces, np.array([0, 0]), np.array([-1, -1]), 1)
    assert mapped[:, 0].tolist() == [1] * 15 + [0] * 5


def test_clustering_honours_counts():
    rng = np.random.default_rng(0)
    centres = 10 * np.eye(3, 192)  # three directions far apart
    points = np.concatenate([c + 0.05 * rng.normal(size=(4, 192)) for c in centres])
    assert len(set(clustering.cluster(points))) == 3
    assert len(set(clustering.cluster(points, num_speakers=2))) == 2
    assert len(set(clustering.cluster(points, max_speakers=2))) == 2
    assert len(set(clustering.cluster(points, min_speakers=5))) == 5
    short = np.zeros(12, dtype=bool)
    short[::4] = True
    labels = clustering.cluster_then_assign(points, ~short)
    assert len(set(labels)) == 3 and all(labels[i] == labels[i + 1] for i in range(0, 12, 4))


def test_alternating_readers_get_two_speakers(diarizer, alternating):
    samples, reference = alternating
    turns = diarizer.diarize(samples)
    assert len(labels(turns)) == 2
    measured = der.score(reference, turns, len(samples) / 16000, collar=0.25).der
    print(f"alternating readers: DER {measured:.3f}")
    assert measured < READERS_BOUND


def test_speaker_count_given_is_honoured(diarizer, alternating):
    samples, reference = alternating
    prepared = diarizer.prepare(samples)
    assert len(labels(diarizer.finish(prepared, num_speakers=2))) == 2
    assert len(labels(diarizer.finish(prepared, num_speakers=3))) == 3
    assert len(labels(diarizer.finish(prepared, max_speakers=1))) == 1


def test_one_reader_is_one_speaker(diarizer, reading):
    samples, _ = readers.one_reader({k: v[:6] for k, v in reading.items()})
    assert len(labels(diarizer.diarize(samples))) == 1


def test_meeting_excerpt(diarizer, data_dir):
    samples = load_audio(data_dir / "audio" / "diarization" / f"{MEETING}.flac")
    reference = der.read_rttm(data_dir / "alignments" / f"{MEETING}.rttm")
    turns = diarizer.diarize(samples)
    measured = der.score(reference, turns, 30.0).der
    print(f"{MEETING}: DER {measured:.3f}")
    assert measured < MEETING_BOUND


def test_a_long_recording_embeds_each_second_once(diarizer, reading):
    # the whole reading alternated (about 150 s, over ONCE_FROM_S): each window embeds its own part only
    samples, reference = readers.alternating(reading)
    assert len(samples) >= ONCE_FROM_S * 16000
    turns = diarizer.diarize(samples)
    assert len(labels(turns)) == 2
    measured = der.score(reference, turns, len(samples) / 16000, collar=0.25).der
    print(f"alternating readers, {len(samples) / 16000:.0f} s: DER {measured:.3f}")
    assert measured < READERS_BOUND
