"""CAM++ in MLX and its Kaldi filterbank, against numbers torch made (campplus_reference.npz, by
make_campplus_reference.py beside this file, from examples/jfk.flac), and on real speech: two
utterances of one reader sound more alike than utterances of two readers.

The weights: the safetensors file of CAM++'s state dict named by ``$TRANSCRIBER_TEST_CAMPP``;
without it the model's tests are skipped, saying so. The filterbank's needs nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import JFK, require_data
from transcriber.media.audio import load_audio
from transcriber.speakers import fbank
from transcriber.speakers.campplus import EMBEDDING_DIM, CAMPPlus

HERE = Path(__file__).resolve().parent
WEIGHTS_ENV = "TRANSCRIBER_TEST_CAMPP"
READERS = "ls_testother_367-130732_533-1066"  # ten utterances of reader 367, then ten of reader 533


@pytest.fixture(scope="module")
def reference():
    with np.load(HERE / "campplus_reference.npz") as data:
        return {name: data[name] for name in data.files}


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    return load_audio(JFK)


@pytest.fixture(scope="module")
def model() -> CAMPPlus:
    path = os.environ.get(WEIGHTS_ENV)
    if not path or not Path(path).is_file():
        pytest.skip(f"no CAM++ weights: set {WEIGHTS_ENV} to campplus.safetensors")
    return CAMPPlus.from_weights(path)


def span(samples: np.ndarray, seconds) -> np.ndarray:
    return samples[int(seconds[0] * fbank.SAMPLE_RATE):int(seconds[1] * fbank.SAMPLE_RATE)]


def test_the_filterbank_is_torchaudios(reference, jfk):
    ours = fbank.fbank(span(jfk, reference["fbank_span"]))
    assert ours.shape == reference["fbank"].shape == (58, 80)
    assert np.abs(ours - reference["fbank"]).max() < 2e-4


def test_frames_are_whole_25ms_frames_every_10ms():
    assert [fbank.n_frames(n) for n in (0, 399, 400, 559, 560, 16000)] == [0, 0, 1, 1, 2, 98]
    assert fbank.fbank(np.zeros(399, dtype=np.float32)).shape == (0, 80)
    features = fbank.features(np.random.default_rng(0).standard_normal(4000).astype(np.float32) * 0.1)
    assert np.abs(features.mean(axis=0)).max() < 1e-5  # mean-normalised over time


def test_the_embedding_is_3d_speakers(model, reference, jfk):
    ours = model.embed([fbank.features(span(jfk, reference["embed_span"]))])[0]
    theirs = reference["embedding"]
    assert ours.shape == (EMBEDDING_DIM,)
    assert np.abs(ours - theirs).max() < 2e-4
    assert ours @ theirs / (np.linalg.norm(ours) * np.linalg.norm(theirs)) > 0.99999


def test_a_batch_gives_each_piece_its_own_embedding(model, jfk):
    """Pieces of different lengths run in groups of one length, none padded: the same numbers
    as one at a time, in the order given."""
    pieces = [fbank.features(jfk[start:start + length]) for start, length in
              ((0, 48000), (16000, 32000), (64000, 48000), (100000, 16000))]
    together = model.embed(pieces)
    alone = np.stack([model.embed([piece])[0] for piece in pieces])
    assert np.abs(together - alone).max() < 1e-4
    with pytest.raises(ValueError):
        model.embed([np.zeros((0, 80), dtype=np.float32)])


def test_one_readers_utterances_are_closer_than_two_readers(model):
    """Five utterances (at most 4 s each) of each of two LibriSpeech readers: every pair of one
    reader is more alike (cosine) than every pair across the two."""
    data = require_data()
    segments = json.loads((data / "alignments" / f"{READERS}.segments.json").read_text())["segments"]
    audio = load_audio(data / "audio" / "long_en" / f"{READERS}.flac")
    chosen = segments[:5] + segments[10:15]
    readers = np.array([seg["id"].split("-")[0] for seg in chosen])
    assert len(set(readers)) == 2
    embeddings = model.embed([fbank.features(span(audio, (seg["start"], min(seg["end"], seg["start"] + 4.0))))
                              for seg in chosen])
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    similarity = unit @ unit.T
    same = readers[:, None] == readers[None, :]
    assert similarity[same & ~np.eye(len(readers), dtype=bool)].min() > similarity[~same].max() + 0.1
