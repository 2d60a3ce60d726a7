"""Read a Hugging Face transformers Whisper folder and map it onto our MLX layout.

A folder written by ``WhisperForConditionalGeneration.save_pretrained`` holds:

- ``config.json``: ``d_model``, ``encoder_layers``, ``num_mel_bins``... (transformers' names);
- ``model.safetensors``, or shards ``model-0000N-of-0000M.safetensors`` listed by
  ``model.safetensors.index.json`` (``weight_map``: tensor name -> shard file);
- ``generation_config.json`` (optional): ``alignment_heads``, ``suppress_tokens``...;
- the tokenizer: ``tokenizer.json`` or ``vocab.json`` + ``merges.txt`` (read by tokenizer.py).

The weights are the same numbers as openai/whisper's under other names; the one change of
layout is the convolution kernels, stored (out, in, kernel) by PyTorch and (out, kernel, in) by
MLX. ``pytorch_model.bin`` (a pickle) is never read. No transformers or torch is needed:
``mlx.core.load`` reads safetensors (float32, float16 and bfloat16 alike).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from transcriber.errors import ModelError
from transcriber.model.dimensions import ModelDimensions
from transcriber.model.whisper import Whisper

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
GENERATION_CONFIG = "generation_config.json"
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")

# -- the name mapping ------------------------------------------------------------------------------
# transformers' module (after the optional "model." prefix) -> ours; each keeps its ".weight" /
# ".bias" leaf.
TOP_MODULES = {
    "encoder.conv1": "encoder.conv1",
    "encoder.conv2": "encoder.conv2",
    "encoder.layer_norm": "encoder.ln_post",
    "decoder.embed_tokens": "decoder.token_embedding",
    "decoder.layer_norm": "decoder.ln",
}
# inside "encoder.layers.N." / "decoder.layers.N." -> inside "encoder.blocks.N." / "decoder.blocks.N."
LAYER_MODULES = {
    "self_attn.q_proj": "attn.query",
    "self_attn.k_proj": "attn.key",  # no bias, in both
    "self_attn.v_proj": "attn.value",
    "self_attn.out_proj": "attn.out",
    "self_attn_layer_norm": "attn_ln",
    "encoder_attn.q_proj": "cross_attn.query",  # decoder only
    "encoder_attn.k_proj": "cross_attn.key",
    "encoder_attn.v_proj": "cross_attn.value",
    "encoder_attn.out_proj": "cross_attn.out",
    "encoder_attn_layer_norm": "cross_attn_ln",
    "fc1": "mlp1",
    "fc2": "mlp2",
    "final_layer_norm": "mlp_ln",
}
# whole tensors renamed
TENSORS = {"decoder.embed_positions.weight": "decoder.positional_embedding"}
# PyTorch's Conv1d kernel (out, in, kernel) -> MLX's (out, kernel, in)
TRANSPOSED = {"encoder.conv1.weight": (0, 2, 1), "encoder.conv2.weight": (0, 2, 1)}
# Not needed: the encoder's positions are fixed sinusoids (computed, as openai/whisper does),
# and the output projection is tied to the token embedding (checked equal when present).
UNUSED = ("encoder.embed_positions.weight", "proj_out.weight")

_LAYER = re.compile(r"(encoder|decoder)\.layers\.(\d+)\.(.+)")


def our_name(name: str) -> str | None:
    """transformers' tensor name -> ours (None: not a Whisper weight we know)."""
    name = name.removeprefix("model.")
    if name in TENSORS:
        return TENSORS[name]
    module, _, leaf = name.rpartition(".")
    if leaf not in ("weight", "bias"):
        return None
    layer = _LAYER.fullmatch(module)
    if layer:
        side, index, part = layer.groups()
        return f"{side}.blocks.{index}.{LAYER_MODULES[part]}.{leaf}" if part in LAYER_MODULES else None
    return f"{TOP_MODULES[module]}.{leaf}" if module in TOP_MODULES else None


def their_name(ours: str) -> str:
    """Our tensor name -> transformers' (for messages)."""
    for theirs, mine in TENSORS.items():
        if mine == ours:
            return f"model.{theirs}"
    module, _, leaf = ours.rpartition(".")
    block = re.fullmatch(r"(encoder|decoder)\.blocks\.(\d+)\.(.+)", module)
    if block:
        side, index, part = block.groups()
        theirs = {v: k for k, v in LAYER_MODULES.items()}[part]
        return f"model.{side}.layers.{index}.{theirs}.{leaf}"
    theirs = {v: k for k, v in TOP_MODULES.items()}[module]
    return f"model.{theirs}.{leaf}"


# -- the folder ------------------------------------------------------------------------------------

def _json(path: Path) -> dict | None:
    """A JSON object from a file; None when the file is absent, ModelError when unreadable."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:  # (nested too deeply)
        raise ModelError(f"model {path.parent}: {path.name} is not readable JSON ({type(e).__name__}: {e})") from e
    if not isinstance(data, dict):
        raise ModelError(f"model {path.parent}: {path.name} is not a JSON object")
    return data


def is_hf_folder(folder: Path) -> bool:
    """A transformers folder: its config uses transformers' names, or its weights file does.
    (An MLX-layout config names ``n_mels``; then the folder is read as MLX whatever its files.)"""
    try:
        config = _json(folder / "config.json")
    except ModelError:
        config = None
    if config is not None and "n_mels" in config:
        return False
    if config is not None and "d_model" in config:
        return True
    return any((folder / f).is_file() for f in (SINGLE_FILE, INDEX_FILE, *PICKLE_FILES))


def inside(folder: Path, name: str, listed_in: str) -> Path:
    """``folder / name`` for a file name a model file lists (a shard of the index): ModelError
    unless it stays in the folder: no absolute path, no ``..``, no symbolic link out of it. A
    model folder is data; it never names a file elsewhere for this process to open. (A snapshot
    of the Hugging Face hub's cache links its files to the repository's ``../../blobs``: those
    links stay in the repository, and are followed.)"""
    path = folder / name
    real = os.path.realpath(path)
    roots = [os.path.realpath(folder)]
    if folder.parent.name == "snapshots":
        roots.append(os.path.realpath(folder.parent.parent / "blobs"))
    if os.path.isabs(name) or ".." in Path(name).parts or not any(os.path.commonpath([r, real]) == r for r in roots):
        raise ModelError(f"model {folder}: {listed_in} names {name!r}, outside the model's folder: not read")
    return path


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of the folder, in order (one file, or the shards of the index)."""
    if (folder / INDEX_FILE).is_file():
        index = _json(folder / INDEX_FILE)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelError(f"model {folder}: {INDEX_FILE} has no weight_map")
        files = [inside(folder, name, INDEX_FILE) for name in sorted(set(map(str, weight_map.values())))]
        for f in files:
            if not f.is_file():
                raise ModelError(f"model {folder}: {f.name}, listed in {INDEX_FILE}, is missing")
        return files
    if (folder / SINGLE_FILE).is_file():
        return [inside(folder, SINGLE_FILE, "the folder")]
    pickles = [f for f in PICKLE_FILES if (folder / f).is_file()]
    if pickles:
        raise ModelError(f"model {folder}: only {pickles[0]} (a pickle, never loaded here); save it as "
                         f"safetensors: model.save_pretrained(folder, safe_serialization=True)")
    raise ModelError(f"model {folder}: no {SINGLE_FILE} or {INDEX_FILE}")


def read_config(folder: Path) -> tuple[ModelDimensions, dict]:
    """The model's dimensions and our config entries from config.json + generation_config.json."""
    config = _json(folder / "config.json")
    if config is None:
        raise ModelError(f"model {folder}: config.json is missing (a transformers Whisper folder has one "
                         f"next to {SINGLE_FILE})")
    where = f"model {folder}: config.json"
    if config.get("model_type", "whisper") != "whisper":
        raise ModelError(f"{where} is for a {config['model_type']!r} model, not Whisper")
    names = {"n_mels": "num_mel_bins", "n_audio_ctx": "max_source_positions", "n_audio_state": "d_model",
             "n_audio_head": "encoder_attention_heads", "n_audio_layer": "encoder_layers",
             "n_vocab": "vocab_size", "n_text_ctx": "max_target_positions", "n_text_state": "d_model",
             "n_text_head": "decoder_attention_heads", "n_text_layer": "decoder_layers"}
    missing = [theirs for theirs in dict.fromkeys(names.values()) if not isinstance(config.get(theirs), int)]
    if missing:
        raise ModelError(f"{where} has no {', '.join(missing)}")
    try:
        dims = ModelDimensions(**{ours: config[theirs] for ours, theirs in names.items()})
    except ValueError as e:
        raise ModelError(f"{where}: {e}") from e
    d = config["d_model"]
    for key in ("encoder_ffn_dim", "decoder_ffn_dim"):  # our blocks' MLP is 4 x d_model wide
        if config.get(key, 4 * d) != 4 * d:
            raise ModelError(f"{where}: {key} is {config[key]}, Whisper's is 4 x d_model = {4 * d}")
    if config.get("activation_function", "gelu") != "gelu" or config.get("scale_embedding"):
        raise ModelError(f"{where}: activation_function {config.get('activation_function')!r}, "
                         f"scale_embedding {config.get('scale_embedding')}: not Whisper's (gelu, false)")
    generation = _json(folder / GENERATION_CONFIG) or {}

    def setting(key):  # newer transformers keep these in generation_config.json only
        return generation.get(key, config.get(key))

    return dims, {"alignment_heads": setting("alignment_heads"),
                  "suppress_ids": setting("suppress_tokens") or [],
                  "suppress_ids_begin": setting("begin_suppress_tokens") or []}


def _tensors(folder: Path, files: list[Path]):
    """(file, transformers name, tensor) for every tensor; with an index, each tensor is read
    from the shard the index names, and must be there."""
    index = _json(folder / INDEX_FILE)  # weight_files() took the shards from it, when there is one
    for path in files:
        try:
            tensors = mx.load(str(path))
        except (OSError, RuntimeError, ValueError) as e:  # MLX's reader on a truncated file
            raise ModelError(f"model {folder}: cannot read {path.name} ({e})") from e
        if index is not None:
            listed = [n for n, f in index["weight_map"].items() if f == path.name]
            absent = [n for n in listed if n not in tensors]
            if absent:
                raise ModelError(f"model {folder}: {path.name} has no tensor {absent[0]}, which "
                                 f"{INDEX_FILE} says it holds")
            tensors = {n: tensors[n] for n in listed}
        for name, value in tensors.items():
            yield path, name, value


def to_mlx_weights(folder: Path) -> tuple[dict[str, mx.array], dict]:
    """Read the folder: MLX-layout weights (float32) and our config.json entries.

    Every tensor is checked against the shapes a Whisper of the config's dimensions has; a
    missing, unknown or misshapen tensor is a ModelError naming the folder and the file.
    """
    dims, settings = read_config(folder)
    files = weight_files(folder)
    expected = {name: tuple(value.shape) for name, value in tree_flatten(Whisper(dims).parameters())}
    weights: dict[str, mx.array] = {}
    output_projection = None
    for path, name, value in _tensors(folder, files):
        if name.removeprefix("model.") in UNUSED:
            if name.endswith("proj_out.weight"):
                output_projection = (path, value)
            continue
        ours = our_name(name)
        if ours is None or ours not in expected:
            raise ModelError(f"model {folder}: {path.name} holds {name}, which is not a weight of "
                             f"transformers' Whisper with the dimensions of config.json")
        want = _their_shape(ours, expected[ours])
        if tuple(value.shape) != want:
            raise ModelError(f"model {folder}: {path.name}: {name} has shape {tuple(value.shape)}, "
                             f"config.json's dimensions give {want}")
        if ours in TRANSPOSED:
            value = value.transpose(*TRANSPOSED[ours])
        weights[ours] = value.astype(mx.float32)
    missing = [their_name(n) for n in expected if n not in weights]
    if missing:
        source = INDEX_FILE if (folder / INDEX_FILE).is_file() else files[0].name
        raise ModelError(f"model {folder}: {source} has no tensor {missing[0]}"
                         + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    if output_projection is not None:
        path, value = output_projection
        if not mx.array_equal(value.astype(mx.float32), weights["decoder.token_embedding.weight"]).item():
            raise ModelError(f"model {folder}: {path.name}: proj_out.weight differs from the token "
                             f"embedding; Whisper ties the two, and so does this loader")
    return weights, {"model_type": "whisper", **dims.to_dict(), **settings}


def _their_shape(ours: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape of ours in transformers' layout (the convolutions are transposed)."""
    if ours not in TRANSPOSED:
        return shape
    order = TRANSPOSED[ours]
    inverse = tuple(order.index(i) for i in range(len(order)))
    return tuple(shape[i] for i in inverse)
