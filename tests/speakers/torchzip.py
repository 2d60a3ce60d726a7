"""Torch-format checkpoints made without torch, for the tests: a zip of ``archive/data.pkl``
and ``archive/data/<key>``, the pickle written opcode by opcode as ``torch.save`` writes it
(protocol 2: GLOBAL torch._utils _rebuild_tensor_v2, a persistent id per storage, REDUCE).

Plain values (strings, ints, tuples of ints) are spliced in from ``pickle.dumps`` of them, so
only the globals and the call structure are written by hand here.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import numpy as np

STORAGE_OF = {np.dtype("<f4"): "FloatStorage", np.dtype("<i8"): "LongStorage", np.dtype("<f2"): "HalfStorage"}
MARK, TUPLE, REDUCE, BINPERSID, EMPTY_DICT, SETITEMS, NEWFALSE, STOP = b"(", b"t", b"R", b"Q", b"}", b"u", b"\x89", b"."


def value(obj) -> bytes:
    """The opcodes that push ``obj`` (a str, an int, a tuple of ints), from pickle itself."""
    return pickle.dumps(obj, protocol=2)[2:-1]


def global_(module: str, name: str) -> bytes:
    return f"c{module}\n{name}\n".encode()


def ordered_dict() -> bytes:
    return global_("collections", "OrderedDict") + b")" + REDUCE


def tensor(key: str, array: np.ndarray) -> bytes:
    """_rebuild_tensor_v2((storage pid), 0, shape, stride, False, OrderedDict())."""
    storage = global_("torch", STORAGE_OF[array.dtype])
    pid = MARK + value("storage") + storage + value(key) + value("cpu") + value(int(array.size)) + TUPLE + BINPERSID
    strides = tuple(s // array.itemsize for s in array.strides)
    args = MARK + pid + value(0) + value(tuple(array.shape)) + value(strides) + NEWFALSE + ordered_dict() + TUPLE
    return global_("torch._utils", "_rebuild_tensor_v2") + args + REDUCE


def state_dict_pickle(tensors: dict[str, np.ndarray], wrap: str = "") -> bytes:
    """The pickle of an OrderedDict of tensors (storage keys 0, 1...), inside ``{wrap: ...}``
    when ``wrap`` is given (a Lightning checkpoint's ``state_dict``)."""
    body = ordered_dict() + MARK
    for i, (name, array) in enumerate(tensors.items()):
        body += value(name) + tensor(str(i), array)
    body += SETITEMS
    if wrap:
        body = EMPTY_DICT + MARK + value(wrap) + body + value("epoch") + value(3) + SETITEMS
    return b"\x80\x02" + body + STOP


def write_checkpoint(path: Path, tensors: dict[str, np.ndarray], wrap: str = "", pickled: bytes = b"") -> Path:
    """A torch zip checkpoint of ``tensors`` (little-endian; each stored in its memory order with
    its strides, as torch stores a transposed view), or of the given pickle."""
    tensors = {name: a if a.flags.c_contiguous or a.flags.f_contiguous else np.ascontiguousarray(a)
               for name, a in tensors.items()}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickled or state_dict_pickle(tensors, wrap))
        archive.writestr("archive/version", "3\n")
        for i, array in enumerate(tensors.values()):
            archive.writestr(f"archive/data/{i}", array.ravel(order="K").tobytes())
    return path
