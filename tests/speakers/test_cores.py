"""The speaker pass's parts side by side (cores.py): the same numbers as all at once, in order,
and the BLAS's threads given back after."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from transcriber.native import blas
from transcriber.speakers import cores
from transcriber.speakers.pipeline import Diarizer


def doubled(rows):
    return np.array(mx.array(np.asarray(rows)) * 2 + 1)


def test_parts_side_by_side_give_all_at_once_in_order():
    rows = np.arange(70 * 3, dtype=np.float32).reshape(70, 3)
    parts = cores._side_by_side(doubled, rows, 2)
    assert len(parts) == 2 and np.array_equal(np.concatenate(parts), doubled(rows))
    assert cores._side_by_side(doubled, rows[:1], 2)[0].shape == (1, 3)  # (one item: one part)


def test_the_blas_gets_its_threads_back():
    before = blas.threads() or 1
    with cores.on_cores() as run:
        assert (blas.threads() or 1) == 1
        assert np.array_equal(np.concatenate(run(doubled, np.ones((8, 2), np.float32))), np.full((8, 2), 3.0))
    assert (blas.threads() or 1) == before


@pytest.mark.slow
def test_the_pass_on_every_core_is_the_pass_on_one(speaker_weights, data_dir):
    """The segmentation's windows and CAM++'s pieces in parts on their own threads and streams:
    the same activity, the same pieces, embeddings within float noise (the batches differ: CAM++
    runs a part's pieces of one length together) and the same turns."""
    from transcriber.media.audio import load_audio

    samples = load_audio(data_dir / "audio" / "long_en" / "ls_testother_367-130732_533-1066.flac")[:60 * 16000]
    diarizer = Diarizer.from_weights(speaker_weights)
    side_by_side = diarizer.prepare(samples)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("transcriber.speakers.pipeline.on_cores", lambda: _alone())
        one = diarizer.prepare(samples)
    assert np.array_equal(side_by_side.local.activity, one.local.activity)
    assert len(side_by_side.pieces) == len(one.pieces) > 4
    np.testing.assert_allclose(side_by_side.embeddings, one.embeddings, atol=2e-5)
    assert diarizer.finish(side_by_side) == diarizer.finish(one)


def _alone():
    import contextlib

    return contextlib.nullcontext(cores.alone)
