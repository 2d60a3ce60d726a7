"""segmentation-3.0 in MLX, without torch: its frames, its powerset, its scores against the
torch model's (a stored reference), and its speech against the AMI excerpts' RTTM turns."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from transcriber.speakers.segmentation import (FRAME_DURATION, FRAME_STEP, POWERSET, WINDOW_SAMPLES, Segmentation,
                                               num_frames, powerset_to_speakers)

# The torch model's log-probabilities [589, 7] for the first 10 s of ami_pyannote_debug_dev00,
# written by `python -m bench.speakers check-segmentation --save-reference PATH`
# (pyannote.audio 4.0.7's PyanNet on torch 2.14.1, CPU; tests/speakers/data/README.md).
REFERENCE = Path(__file__).parent / "data" / "dev00_first_window_scores.npy"


@pytest.fixture(scope="module")
def model(speaker_weights):
    return Segmentation.from_weights(speaker_weights.segmentation)


def read_audio(path: Path) -> np.ndarray:
    raw = subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", str(path), "-f", "f32le", "-ac", "1",
                          "-ar", "16000", "-"], check=True, capture_output=True).stdout
    return np.frombuffer(raw, dtype=np.float32)


def diarization_entry(data_dir: Path, stem: str) -> dict:
    entries = [json.loads(line) for line in (data_dir / "manifest.jsonl").read_text().splitlines() if line.strip()]
    return next(e for e in entries if Path(e["file"]).stem == stem)


def test_frames_of_a_window_as_pyannote_counts_them():
    assert num_frames(WINDOW_SAMPLES) == 589
    assert (FRAME_STEP, FRAME_DURATION) == (270 / 16000, 991 / 16000)


def test_the_powerset_is_three_speakers_at_most_two_at_once():
    assert POWERSET.shape == (7, 3) and POWERSET.sum(axis=1).max() == 2
    assert len({tuple(row) for row in POWERSET}) == 7
    scores = np.log(np.full((1, 2, 7), 0.01))
    scores[0, 0, 0], scores[0, 1, 5] = 0, 0  # frame 0: nobody; frame 1: speakers 1 and 3
    assert powerset_to_speakers(scores).tolist() == [[[0, 0, 0], [1, 0, 1]]]


def test_scores_are_log_probabilities_per_frame(model):
    noise = np.random.default_rng(0).normal(0, 0.1, (2, WINDOW_SAMPLES)).astype(np.float32)
    scores = model.scores(noise)
    assert scores.shape == (2, 589, 7)
    np.testing.assert_allclose(np.exp(scores).sum(axis=-1), 1, atol=1e-5)


def test_scores_match_the_torch_model(model, data_dir):
    audio = read_audio(data_dir / diarization_entry(data_dir, "ami_pyannote_debug_dev00")["file"])
    ours = model.scores(audio[None, :WINDOW_SAMPLES])[0]
    reference = np.load(REFERENCE)
    assert np.abs(ours - reference).max() < 1e-4
    assert (ours.argmax(-1) == reference.argmax(-1)).all()


def rttm_speech(path: Path, times: np.ndarray) -> np.ndarray:
    """Whether anyone speaks at each of ``times`` (seconds), by an RTTM file's turns."""
    speech = np.zeros(times.shape, dtype=bool)
    for line in path.read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "SPEAKER":
            start, duration = float(fields[3]), float(fields[4])
            speech |= (times >= start) & (times < start + duration)
    return speech


@pytest.mark.parametrize("stem", ["ami_pyannote_debug_dev00", "ami_pyannote_debug_dev01", "ami_pyannote_debug_trn06"])
def test_speech_frames_match_the_rttm(model, data_dir, stem):
    """The frames the powerset marks as someone speaking are those the RTTM turns cover, on
    nine frames in ten at least (measured: 0.96, 0.88, 0.92 on these three)."""
    entry = diarization_entry(data_dir, stem)
    audio = read_audio(data_dir / entry["file"])
    windows = np.stack([audio[i * WINDOW_SAMPLES:(i + 1) * WINDOW_SAMPLES] for i in range(3)])
    speech = powerset_to_speakers(model.scores(windows)).max(axis=-1).reshape(-1).astype(bool)
    centres = np.concatenate([10 * i + np.arange(589) * FRAME_STEP + FRAME_DURATION / 2 for i in range(3)])
    reference = rttm_speech(data_dir / "alignments" / Path(entry["speaker_rttm"]).name, centres)
    assert (speech == reference).mean() > 0.85


@pytest.mark.parametrize("time", [30, 31, 32])
def test_the_front_ends_own_operations_are_mlxs(time):
    """sinc_conv (numpy's unfolding and one matmul), conv_taps (a matmul per tap) and max_pool3
    (a strided view) against mx.conv1d and a reshaped max, on lengths that leave rests."""
    import mlx.core as mx

    from transcriber.speakers.segmentation import SINC_STRIDE, SINC_TAPS, conv_taps, max_pool3, sinc_conv

    rng = np.random.default_rng(time)
    audio = rng.standard_normal((2, SINC_TAPS + SINC_STRIDE * time + 3)).astype(np.float32)
    filters = rng.standard_normal((4, SINC_TAPS)).astype(np.float32)
    theirs = mx.abs(mx.conv1d(mx.array(audio)[:, :, None], mx.array(filters[:, :, None]), stride=SINC_STRIDE))
    ours = sinc_conv(audio, np.ascontiguousarray(filters.T))
    assert ours.shape == theirs.shape == (2, time + 1, 4)
    assert np.abs(np.array(ours) - np.array(theirs)).max() < 1e-4
    x = mx.array(rng.standard_normal((2, time, 6)).astype(np.float32))
    weight, bias = rng.standard_normal((5, 6, 3)).astype(np.float32), mx.array(rng.standard_normal(3).astype(np.float32))
    theirs = mx.conv1d(x, mx.array(weight.transpose(2, 0, 1))) + bias
    ours = conv_taps(x, mx.array(weight), bias)
    assert ours.shape == theirs.shape and np.abs(np.array(ours) - np.array(theirs)).max() < 1e-4
    usable = time - time % 3
    theirs = np.array(x)[:, :usable].reshape(2, usable // 3, 3, 6).max(axis=2)
    assert np.array_equal(np.array(max_pool3(x)), theirs)
