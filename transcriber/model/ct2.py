"""Read a CTranslate2 Whisper ``model.bin`` (spec version 6) and map it onto our MLX layout.

File layout (little endian): uint32 version; name (uint16 length incl. trailing NUL, bytes);
uint32 revision; uint32 variable count; per variable: name, uint8 rank, uint32 dims[rank],
uint8 dtype, uint32 byte count, raw bytes; then uint32 alias count and (alias, target) names.

CTranslate2 fuses self-attention Q/K/V into ``self_attention/linear_0`` (3D x D) and the
cross-attention K/V into ``attention/linear_1`` (2D x D); Whisper's key projections have no bias
(CTranslate2 stores zeros there). The output projection aliases the token embedding.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from transcriber.errors import ModelError
from transcriber.model.dimensions import ModelDimensions

# CTranslate2's DataType enum
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


class _Reader:
    def __init__(self, data: memoryview):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("H")
        raw = bytes(self.data[self.pos: self.pos + n])
        self.pos += n
        return raw.rstrip(b"\0").decode("utf-8")

    def raw(self, n: int) -> memoryview:
        chunk = self.data[self.pos: self.pos + n]
        if len(chunk) != n:
            raise ValueError("file ends inside a variable")
        self.pos += n
        return chunk


def read_model_bin(paths: list[Path]) -> dict[str, np.ndarray]:
    """All variables of a model.bin (given as one path, or parts to concatenate in order)."""
    try:
        data = memoryview(b"".join(Path(p).read_bytes() for p in paths))
        r = _Reader(data)
        version = r.take("I")
        if version != 6:
            raise ValueError(f"unsupported CTranslate2 model version {version} (expected 6)")
        spec = r.string()
        if spec != "WhisperSpec":
            raise ValueError(f"not a Whisper model (spec {spec!r})")
        r.take("I")  # spec revision
        variables: dict[str, np.ndarray] = {}
        for _ in range(r.take("I")):
            name = r.string()
            shape = tuple(r.take("I") for _ in range(r.take("B")))
            dtype_code = r.take("B")
            if dtype_code not in _DTYPES:
                raise ValueError(f"variable {name}: unsupported dtype code {dtype_code}")
            raw = r.raw(r.take("I"))
            variables[name] = np.frombuffer(raw, dtype=_DTYPES[dtype_code]).reshape(shape).copy()
        for _ in range(r.take("I")):
            alias, target = r.string(), r.string()
            variables[alias] = variables[target]
        return variables
    except (OSError, ValueError, struct.error, KeyError) as e:
        raise ModelError(f"cannot read CTranslate2 model {paths[0]}: {e}") from e


def dims_from_variables(v: dict[str, np.ndarray]) -> ModelDimensions:
    n_audio_layer = sum(1 for k in v if k.startswith("encoder/layer_") and k.endswith("ffn/linear_0/weight"))
    n_text_layer = sum(1 for k in v if k.startswith("decoder/layer_") and k.endswith("ffn/linear_0/weight"))
    n_vocab, n_text_state = v["decoder/embeddings/weight"].shape
    return ModelDimensions(
        n_mels=v["encoder/conv1/weight"].shape[1],
        n_audio_ctx=v["encoder/position_encodings/encodings"].shape[0],
        n_audio_state=v["encoder/conv1/weight"].shape[0],
        n_audio_head=int(v["encoder/num_heads"]),
        n_audio_layer=n_audio_layer,
        n_vocab=n_vocab,
        n_text_ctx=v["decoder/position_encodings/encodings"].shape[0],
        n_text_state=n_text_state,
        n_text_head=int(v["decoder/num_heads"]),
        n_text_layer=n_text_layer,
    )


def _linear(out: dict, dst: str, v: dict, src: str, bias: bool = True) -> None:
    out[f"{dst}.weight"] = v[f"{src}/weight"]
    if bias:
        out[f"{dst}.bias"] = v[f"{src}/bias"]


def _layer_norm(out: dict, dst: str, v: dict, src: str) -> None:
    out[f"{dst}.weight"] = v[f"{src}/gamma"]
    out[f"{dst}.bias"] = v[f"{src}/beta"]


def _fused(out: dict, names: list[str], v: dict, src: str) -> None:
    """Split a fused projection into ``names`` (equal parts); key projections lose their bias."""
    weights = np.split(v[f"{src}/weight"], len(names), axis=0)
    biases = np.split(v[f"{src}/bias"], len(names), axis=0)
    for name, w, b in zip(names, weights, biases):
        out[f"{name}.weight"] = w
        if not name.endswith(".key"):
            out[f"{name}.bias"] = b


def _block(out: dict, dst: str, v: dict, src: str, cross: bool) -> None:
    _fused(out, [f"{dst}.attn.query", f"{dst}.attn.key", f"{dst}.attn.value"], v, f"{src}/self_attention/linear_0")
    _linear(out, f"{dst}.attn.out", v, f"{src}/self_attention/linear_1")
    _layer_norm(out, f"{dst}.attn_ln", v, f"{src}/self_attention/layer_norm")
    if cross:
        _linear(out, f"{dst}.cross_attn.query", v, f"{src}/attention/linear_0")
        _fused(out, [f"{dst}.cross_attn.key", f"{dst}.cross_attn.value"], v, f"{src}/attention/linear_1")
        _linear(out, f"{dst}.cross_attn.out", v, f"{src}/attention/linear_2")
        _layer_norm(out, f"{dst}.cross_attn_ln", v, f"{src}/attention/layer_norm")
    _linear(out, f"{dst}.mlp1", v, f"{src}/ffn/linear_0")
    _linear(out, f"{dst}.mlp2", v, f"{src}/ffn/linear_1")
    _layer_norm(out, f"{dst}.mlp_ln", v, f"{src}/ffn/layer_norm")


def to_mlx_weights(v: dict[str, np.ndarray], dims: ModelDimensions) -> dict[str, np.ndarray]:
    """CTranslate2 variables -> MLX-layout weights (float32; conv kernels as (out, k, in))."""
    out: dict[str, np.ndarray] = {}
    for i in (1, 2):
        out[f"encoder.conv{i}.weight"] = v[f"encoder/conv{i}/weight"].transpose(0, 2, 1)
        out[f"encoder.conv{i}.bias"] = v[f"encoder/conv{i}/bias"]
    for i in range(dims.n_audio_layer):
        _block(out, f"encoder.blocks.{i}", v, f"encoder/layer_{i}", cross=False)
    _layer_norm(out, "encoder.ln_post", v, "encoder/layer_norm")
    out["decoder.token_embedding.weight"] = v["decoder/embeddings/weight"]
    out["decoder.positional_embedding"] = v["decoder/position_encodings/encodings"]
    for i in range(dims.n_text_layer):
        _block(out, f"decoder.blocks.{i}", v, f"decoder/layer_{i}", cross=True)
    _layer_norm(out, "decoder.ln", v, "decoder/layer_norm")
    return {k: np.ascontiguousarray(a, dtype=np.float32) for k, a in out.items()}
