"""CAM++ in MLX and its Kaldi filterbank, against numbers torch made (campplus_reference.npz, by
make_campplus_reference.py beside this file, from examples/jfk.flac), and on real speech: two
utterances of one reader sound more alike than utterances of two readers.

The weights: ``transcribe models pull speakers``'s campplus.safetensors (the ``speaker_weights``
fixture: pulled once per session when the cache has none). The filterbank's tests need nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import JFK, require_data
from transcriber.media.audio import load_audio
from transcriber.speakers import fbank
from transcriber.speakers.campplus import EMBEDDING_DIM, CAMPPlus

HERE = Path(__file__).resolve().parent
READERS = "ls_testother_367-130732_533-1066"  # ten utterances of reader 367, then ten of reader 533


@pytest.fixture(scope="module")
def reference():
    with np.load(HERE / "campplus_reference.npz") as data:
        return {name: data[name] for name in data.files}


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    return load_audio(JFK)


@pytest.fixture(scope="module")
def model(speaker_weights) -> CAMPPlus:
    return CAMPPlus.from_weights(speaker_weights.embedding)


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


@pytest.mark.parametrize("rows", [1, 6, 7])
@pytest.mark.parametrize("stride", [1, 2])
def test_the_convolution_by_taps_is_mlxs(rows, stride):
    """``_conv`` (a matmul per tap over shifted slices) against mx.conv2d and mx.conv1d, odd
    sizes, strides and dilations included: the model's own check covers only its shapes."""
    import mlx.core as mx

    from transcriber.speakers import campplus

    rng = np.random.default_rng(rows + 10 * stride)
    x = mx.array(rng.standard_normal((2, rows, 5, 4)).astype(np.float32))
    weight = rng.standard_normal((3, 3, 4, 6)).astype(np.float32)  # (kh, kw, in, out)
    bias = mx.array(rng.standard_normal(6).astype(np.float32))
    ours = campplus._conv(x, (mx.array(weight.reshape(9, 4, 6)), bias), (3, 3), stride)
    theirs = mx.conv2d(x, mx.array(weight.transpose(3, 0, 1, 2)), stride=(stride, 1), padding=1) + bias
    assert ours.shape == theirs.shape
    assert np.abs(np.array(ours) - np.array(theirs)).max() < 1e-4
    frames = x.reshape(2, rows * 5, 4)
    weight = rng.standard_normal((5, 4, 6)).astype(np.float32)  # (k, in, out)
    for kernel, dilation in ((5, 1), (3, 2)):
        taps = weight[:kernel]
        ours = campplus._conv1d(frames, (mx.array(taps), bias), kernel, stride if dilation == 1 else 1, dilation)
        theirs = mx.conv1d(frames, mx.array(taps.transpose(2, 0, 1)), stride=stride if dilation == 1 else 1,
                           padding=(kernel - 1) // 2 * dilation, dilation=dilation) + bias
        assert ours.shape == theirs.shape
        assert np.abs(np.array(ours) - np.array(theirs)).max() < 1e-4


@pytest.mark.parametrize("negative", [False, True])
def test_a_norm_folded_into_the_next_weights_gives_the_same_layer(negative):
    """``_norm_into``: relu(x s + t) W + b = relu(x + t/s) (s W) + b where every scale s is
    positive; with one not positive the norm stays as it was."""
    import mlx.core as mx

    from transcriber.speakers import campplus

    rng = np.random.default_rng(int(negative))
    var = rng.uniform(0.5, 2, 8).astype(np.float32)
    gamma = rng.uniform(0.2, 2, 8).astype(np.float32)
    gamma[3] = -gamma[3] if negative else gamma[3]
    state = {"bn.running_mean": rng.standard_normal(8).astype(np.float32), "bn.running_var": var,
             "bn.weight": gamma, "bn.bias": rng.standard_normal(8).astype(np.float32)}
    linear = (mx.array(rng.standard_normal((8, 5)).astype(np.float32)), mx.array(rng.standard_normal(5).astype(np.float32)))
    x = mx.array(rng.standard_normal((2, 7, 8)).astype(np.float32))
    plain = campplus._pointwise(campplus._relu(campplus._affine(x, campplus._norm(state, "bn"))), linear)
    norm, folded_linear = campplus._norm_into(state, "bn", linear)
    assert (norm[0] is None) == (not negative)
    folded = campplus._pointwise(campplus._relu(campplus._affine(x, norm)), folded_linear)
    assert np.abs(np.array(folded) - np.array(plain)).max() < 1e-5
