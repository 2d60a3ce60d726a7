"""A torch checkpoint file (``torch.save``) read into numpy arrays, without torch and without
running anything the file names.

A torch checkpoint is a zip: ``<name>/data.pkl`` (a pickle of the state dict, whose tensors
point at storages by key) and ``<name>/data/<key>`` (each storage's raw little-endian bytes).
A pickle can name any importable callable and have it called: loading an untrusted one with
``pickle.load`` (or ``torch.load`` without ``weights_only``) runs whatever it says. So the
unpickler here resolves only the globals in ``ALLOWED``: torch's tensor rebuilds and storage
types mapped to our numpy builders, ``collections.OrderedDict``, and the few metadata classes
the pyannote checkpoint carries (its task's specifications and the torch version), which become
inert records. Any other global is refused with ``UnsafeCheckpoint`` naming it, before anything
is called.

The legacy (pre-1.6, non-zip) torch format is refused: neither checkpoint we read uses it.
"""

from __future__ import annotations

import collections
import pickle
import zipfile
from pathlib import Path
from typing import Any, Union

import numpy as np

from transcriber.errors import ModelError


class UnsafeCheckpoint(ModelError):
    """A checkpoint that is not a plain torch state dict: a global outside the allowed ones, or
    not the zip format. Nothing the file names was called."""


class Storage:
    """A torch storage type (``torch.FloatStorage``...): only its element dtype is kept."""

    def __init__(self, name: str, dtype: str):
        self.name, self.dtype = name, np.dtype(dtype)


class Record:
    """An inert stand-in for a metadata object (an enum, a dataclass, a version string): its
    arguments and state kept as plain data, no code of its class run."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs, self.state = args, kwargs, None

    def __setstate__(self, state):
        self.state = state

    def __repr__(self):
        return f"Record{self.args!r}"


def _record_class(name: str) -> type:
    return type(name, (Record,), {"__module__": __name__})


def _rebuild_tensor(storage, offset, size, stride, *_hooks_and_metadata) -> np.ndarray:
    """torch._utils._rebuild_tensor_v2: a view of ``storage`` (a 1-D array) at an element
    offset, with a shape and element strides; copied, so it owns its memory."""
    if not (isinstance(storage, np.ndarray) and isinstance(offset, int)
            and all(isinstance(n, int) for n in (*size, *stride)) and len(size) == len(stride)):
        raise UnsafeCheckpoint("a tensor rebuild with arguments that are not a storage, an offset, a shape and strides")
    itemsize = storage.dtype.itemsize
    if not size:
        return storage[offset:offset + 1].reshape(()).copy()
    end = offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))
    if min(size) > 0 and (offset < 0 or end > storage.size or min(stride) < 0 or np.prod(size) > storage.size):
        raise UnsafeCheckpoint("a tensor reaches outside its storage (or repeats it)")
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=tuple(s * itemsize for s in stride), writeable=False)
    return np.array(view)


def _rebuild_parameter(data, *_requires_grad_and_hooks) -> np.ndarray:
    """torch._utils._rebuild_parameter: a Parameter is its tensor."""
    return data


_STORAGES = {"FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2", "LongStorage": "<i8",
             "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1", "ByteStorage": "u1",
             "BoolStorage": "?"}

# (module, name) -> what it resolves to. Only these: the tensor rebuilds, storage types and
# containers of any state dict, and the metadata classes the pyannote checkpoint carries.
ALLOWED: dict[tuple[str, str], Any] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch.torch_version", "TorchVersion"): _record_class("TorchVersion"),
    **{("pyannote.audio.core.task", name): _record_class(name) for name in ("Specifications", "Problem", "Resolution")},
    **{("torch", name): Storage(name, dtype) for name, dtype in _STORAGES.items()},
}


class _Unpickler(pickle.Unpickler):
    """Resolves the globals of ``ALLOWED`` only; reads storages from the zip by key."""

    def __init__(self, file, archive: zipfile.ZipFile, prefix: str):
        super().__init__(file)
        self.archive, self.prefix, self.storages = archive, prefix, {}

    def find_class(self, module, name):
        found = ALLOWED.get((module, name))
        if found is None:
            raise UnsafeCheckpoint(f"refused pickle global {module}.{name}: a torch checkpoint "
                                   f"should hold tensors and plain containers only")
        return found

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"
                and isinstance(pid[1], Storage)):
            raise UnsafeCheckpoint(f"unknown persistent id in the checkpoint: {pid!r:.80}")
        storage, key = pid[1], str(pid[2])
        if key not in self.storages:
            raw = self.archive.read(f"{self.prefix}data/{key}")
            self.storages[key] = np.frombuffer(raw, dtype=storage.dtype)
        return self.storages[key]


def read_pickle(path: Union[str, Path]) -> Any:
    """The object a torch checkpoint holds, tensors as numpy arrays, metadata as ``Record``s.
    UnsafeCheckpoint when it names anything else or is not torch's zip format; OSError as
    reading raises it."""
    path = Path(path)
    if not zipfile.is_zipfile(path):
        raise UnsafeCheckpoint(f"{path.name}: not a torch zip checkpoint (the legacy torch format "
                               f"and plain pickles are not read)")
    with zipfile.ZipFile(path) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise UnsafeCheckpoint(f"{path.name}: no single <name>/data.pkl in the zip")
        prefix = pickles[0][: -len("data.pkl")]
        with archive.open(pickles[0]) as file:
            return _Unpickler(file, archive, prefix).load()


def state_dict(obj: Any) -> dict[str, np.ndarray]:
    """The tensors of a loaded checkpoint, by dotted name: a Lightning checkpoint's
    ``state_dict``, else every array found in nested dicts (names joined by dots)."""
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    found: dict[str, np.ndarray] = {}

    def walk(value, name):
        if isinstance(value, np.ndarray):
            found[name] = value
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{name}.{key}" if name else str(key))

    walk(obj, "")
    if not found:
        raise ModelError("the checkpoint holds no tensors")
    return found


def load_checkpoint(path: Union[str, Path]) -> dict[str, np.ndarray]:
    """A torch checkpoint's state dict as ``{name: numpy array}``, read without torch: only
    tensors and plain containers are rebuilt, anything else is refused (UnsafeCheckpoint)."""
    return state_dict(read_pickle(path))
