"""Hugging Face transformers Whisper folders as ``--model PATH`` (issue 9, item 5).

The folders are built here from the bundled tiny.en weights by ``export_hf``, which writes what
``WhisperForConditionalGeneration.save_pretrained`` writes. Its name table is written out on its
own, from transformers' module names (WhisperEncoderLayer / WhisperDecoderLayer attributes), not
derived from the loader's, and ``test_exported_names_are_transformers_names`` pins it to the
literal names of a transformers checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from click.testing import CliRunner
from mlx.utils import tree_flatten

import transcriber
from transcriber.app.cli.main import main
from transcriber.errors import ModelError
from transcriber.model import loader
from transcriber.model.whisper import sinusoids

from tests.conftest import JFK

# our name's piece -> transformers' (applied in order, each where it occurs)
TO_TRANSFORMERS = [
    ("encoder.blocks.", "encoder.layers."),
    ("decoder.blocks.", "decoder.layers."),
    (".attn.query.", ".self_attn.q_proj."),
    (".attn.key.", ".self_attn.k_proj."),
    (".attn.value.", ".self_attn.v_proj."),
    (".attn.out.", ".self_attn.out_proj."),
    (".attn_ln.", ".self_attn_layer_norm."),
    (".cross_attn.query.", ".encoder_attn.q_proj."),
    (".cross_attn.key.", ".encoder_attn.k_proj."),
    (".cross_attn.value.", ".encoder_attn.v_proj."),
    (".cross_attn.out.", ".encoder_attn.out_proj."),
    (".cross_attn_ln.", ".encoder_attn_layer_norm."),
    (".mlp1.", ".fc1."),
    (".mlp2.", ".fc2."),
    (".mlp_ln.", ".final_layer_norm."),
    ("encoder.ln_post.", "encoder.layer_norm."),
    ("decoder.ln.", "decoder.layer_norm."),
    ("decoder.token_embedding.", "decoder.embed_tokens."),
    ("decoder.positional_embedding", "decoder.embed_positions.weight"),
]


def transformers_name(ours: str) -> str:
    for mine, theirs in TO_TRANSFORMERS:
        ours = ours.replace(mine, theirs)
    return "model." + ours


@pytest.fixture(scope="module")
def bundled() -> Path:
    """The converted tiny.en folder (MLX layout) of the user cache."""
    return loader.resolve("tiny.en")[0]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache folder of the test's own: every conversion here is a first one."""
    monkeypatch.setenv("TRANSCRIBER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def export_hf(bundled: Path, target: Path, *, dtype=mx.float32, shards: int = 1, tokenizer: str = "fast",
              generation_config: bool = True, proj_out: bool = False) -> Path:
    """Write tiny.en as transformers does: config.json (its names), model.safetensors or
    ``shards`` files with model.safetensors.index.json, generation_config.json (alignment heads,
    suppression lists), and tokenizer.json ("fast") or vocab.json + merges.txt +
    added_tokens.json ("slow")."""
    target.mkdir(parents=True)
    ours = json.loads((bundled / "config.json").read_text())
    tensors = {}
    for name, value in mx.load(str(bundled / "weights.safetensors")).items():
        if name in ("encoder.conv1.weight", "encoder.conv2.weight"):
            value = value.transpose(0, 2, 1)  # MLX (out, kernel, in) -> PyTorch (out, in, kernel)
        tensors[transformers_name(name)] = value.astype(dtype)
    tensors["model.encoder.embed_positions.weight"] = mx.array(sinusoids(1500, 384)).astype(dtype)
    if proj_out:
        tensors["proj_out.weight"] = tensors["model.decoder.embed_tokens.weight"]

    names = sorted(tensors)
    if shards == 1:
        mx.save_safetensors(str(target / "model.safetensors"), tensors)
    else:
        weight_map = {}
        for i, part in enumerate(np.array_split(np.array(names), shards), 1):
            file = f"model-{i:05d}-of-{shards:05d}.safetensors"
            mx.save_safetensors(str(target / file), {n: tensors[n] for n in part})
            weight_map.update({n: file for n in part})
        total = sum(v.nbytes for v in tensors.values())
        (target / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))

    config = {"architectures": ["WhisperForConditionalGeneration"], "model_type": "whisper",
              "activation_function": "gelu", "d_model": 384, "encoder_layers": 4, "decoder_layers": 4,
              "encoder_attention_heads": 6, "decoder_attention_heads": 6, "encoder_ffn_dim": 1536,
              "decoder_ffn_dim": 1536, "num_mel_bins": 80, "max_source_positions": 1500,
              "max_target_positions": 448, "vocab_size": 51864, "scale_embedding": False,
              "bos_token_id": 50257, "eos_token_id": 50256, "pad_token_id": 50256,
              "decoder_start_token_id": 50257,
              "torch_dtype": "float16" if dtype == mx.float16 else "float32"}
    (target / "config.json").write_text(json.dumps(config, indent=2))
    if generation_config:
        generation = {"alignment_heads": ours["alignment_heads"], "suppress_tokens": ours["suppress_ids"],
                      "begin_suppress_tokens": ours["suppress_ids_begin"], "is_multilingual": False}
        (target / "generation_config.json").write_text(json.dumps(generation, indent=2))

    fast = json.loads((bundled / "tokenizer.json").read_text(encoding="utf-8"))
    if tokenizer == "fast":
        shutil.copy(bundled / "tokenizer.json", target / "tokenizer.json")
    else:
        vocab = fast["model"]["vocab"]
        (target / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        merges = ["#version: 0.2", *fast["model"]["merges"]]
        (target / "merges.txt").write_text("\n".join(merges) + "\n", encoding="utf-8")
        added = {t["content"]: t["id"] for t in fast["added_tokens"] if t["content"] not in vocab}
        (target / "added_tokens.json").write_text(json.dumps(added), encoding="utf-8")
    return target


def assert_same_weights(model, other) -> None:
    ours = dict(tree_flatten(model.parameters()))
    theirs = dict(tree_flatten(other.parameters()))
    assert ours.keys() == theirs.keys()
    for name, value in ours.items():
        assert mx.array_equal(value, theirs[name]).item(), name


def test_exported_names_are_transformers_names(bundled, tmp_path):
    """The exporter writes the names of a transformers Whisper checkpoint (layer 0 and the
    top-level tensors, as listed by safetensors for openai/whisper-tiny.en)."""
    folder = export_hf(bundled, tmp_path / "hf")
    names = set(mx.load(str(folder / "model.safetensors")))
    layer = {f"model.decoder.layers.0.{n}" for n in (
        "self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.v_proj.bias", "self_attn.out_proj.weight",
        "self_attn.out_proj.bias", "self_attn_layer_norm.weight", "self_attn_layer_norm.bias",
        "encoder_attn.q_proj.weight", "encoder_attn.q_proj.bias", "encoder_attn.k_proj.weight",
        "encoder_attn.v_proj.weight", "encoder_attn.v_proj.bias", "encoder_attn.out_proj.weight",
        "encoder_attn.out_proj.bias", "encoder_attn_layer_norm.weight", "encoder_attn_layer_norm.bias",
        "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "final_layer_norm.weight",
        "final_layer_norm.bias")}
    top = {"model.encoder.conv1.weight", "model.encoder.conv1.bias", "model.encoder.conv2.weight",
           "model.encoder.conv2.bias", "model.encoder.embed_positions.weight", "model.encoder.layer_norm.weight",
           "model.encoder.layer_norm.bias", "model.decoder.embed_tokens.weight",
           "model.decoder.embed_positions.weight", "model.decoder.layer_norm.weight",
           "model.decoder.layer_norm.bias"}
    assert {n for n in names if n.startswith("model.decoder.layers.0.")} == layer
    assert {n for n in names if ".layers." not in n} == top
    assert len(names) == len(top) + 4 * 15 + 4 * 24  # an encoder layer has 15 tensors, a decoder one 24
    assert mx.load(str(folder / "model.safetensors"))["model.encoder.conv1.weight"].shape == (384, 80, 3)


def test_a_transformers_folder_transcribes_like_the_bundled_model(bundled, cache, model, tmp_path):
    folder = export_hf(bundled, tmp_path / "whisper-tiny.en")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [str(JFK), "--model", str(folder), "--mode", "oneshot", "-f", "json",
                                       "-o", str(out), "--db", str(tmp_path / "jobs.db"), "-q"])
    assert result.exit_code == 0, result.output
    words = [w for s in json.loads((out / "jfk.json").read_text())["segments"] for w in s["words"]]
    expected = transcriber.transcribe(JFK, model).words
    assert [w["word"] for w in words] == [w.text for w in expected]
    assert [w["start"] for w in words] == [round(w.start, 3) for w in expected]

    # converted once, into the cache, with the heads and suppression lists of generation_config.json
    (converted,) = (cache / "models").iterdir()
    assert converted.name.startswith("whisper-tiny.en-")
    config = json.loads((converted / "config.json").read_text())
    assert config["alignment_heads"] == [[1, 0], [2, 0], [2, 5], [3, 0], [3, 1], [3, 2], [3, 3], [3, 4]]
    stamp = (converted / "weights.safetensors").stat().st_mtime_ns
    other = loader.load_model(folder)
    assert (converted / "weights.safetensors").stat().st_mtime_ns == stamp
    assert other.info.suppress_ids == model.info.suppress_ids
    assert_same_weights(model, other)


def test_sharded_float16_with_vocab_and_merges(bundled, cache, model, tmp_path):
    """Three shards and their index, float16 (tiny.en's own precision, so nothing is lost), the
    slow tokenizer's files, a tied proj_out stored anyway, no generation_config.json."""
    folder = export_hf(bundled, tmp_path / "hf16", dtype=mx.float16, shards=3, tokenizer="slow",
                       generation_config=False, proj_out=True)
    other = loader.load_model(folder)
    assert_same_weights(model, other)
    # without generation_config.json: openai/whisper's default, the heads of the second half
    assert other.alignment_heads.tolist() == [[layer, head] for layer in (2, 3) for head in range(6)]

    from transcriber.model.tokenizer import load_tokenizer

    slow = load_tokenizer(other.info.folder, multilingual=False)
    fast = load_tokenizer(model.info.folder, multilingual=False)
    text = " And so, my fellow Americans: ask not — naïve café, 東京 ♪"
    assert slow.encode(text) == fast.encode(text) and slow.decode(slow.encode(text)) == text
    assert (slow.sot, slow.eot, slow.no_timestamps, slow.timestamp_begin) == \
        (fast.sot, fast.eot, fast.no_timestamps, fast.timestamp_begin)


# -- broken folders: one line, naming the folder and the file ---------------------------------------

@pytest.fixture(scope="module")
def good_folder(bundled, tmp_path_factory) -> Path:
    """A float16, two-shard, slow-tokenizer export to copy and damage."""
    return export_hf(bundled, tmp_path_factory.mktemp("hf") / "good", dtype=mx.float16, shards=2,
                     tokenizer="slow")


def rewrite(path: Path, change) -> None:
    """Rewrite a safetensors file with ``change(tensors)`` applied (a new file: the copy's
    files are hard links to the good folder's)."""
    tensors = dict(mx.load(str(path)))
    change(tensors)
    path.unlink()
    mx.save_safetensors(str(path), tensors)


def drop_tensor(folder):
    rewrite(folder / "model-00002-of-00002.safetensors", lambda t: t.pop("model.encoder.layers.2.fc2.weight"))
    return "model-00002-of-00002.safetensors has no tensor model.encoder.layers.2.fc2.weight"


def wrong_shape(folder):
    def change(t):
        t["model.encoder.layers.1.fc1.weight"] = t["model.encoder.layers.1.fc1.weight"][:, :383]
    rewrite(folder / "model-00002-of-00002.safetensors", change)
    return "model-00002-of-00002.safetensors: model.encoder.layers.1.fc1.weight has shape (1536, 383)"


def missing_from_index(folder):
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    del index["weight_map"]["model.decoder.layers.3.fc1.bias"]
    (folder / "model.safetensors.index.json").unlink()
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return "model.safetensors.index.json has no tensor model.decoder.layers.3.fc1.bias"


def missing_shard(folder):
    (folder / "model-00001-of-00002.safetensors").unlink()
    return "model-00001-of-00002.safetensors, listed in model.safetensors.index.json, is missing"


def missing_config(folder):
    (folder / "config.json").unlink()
    return "config.json is missing"


def config_without_layers(folder):
    config = json.loads((folder / "config.json").read_text())
    del config["decoder_layers"]
    (folder / "config.json").unlink()
    (folder / "config.json").write_text(json.dumps(config))
    return "config.json has no decoder_layers"


def unknown_tensor(folder):
    name, file = "model.encoder.layers.0.adapter.weight", "model-00001-of-00002.safetensors"
    rewrite(folder / file, lambda t: t.update({name: mx.zeros((4, 4))}))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"][name] = file
    (folder / "model.safetensors.index.json").unlink()
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return "model-00001-of-00002.safetensors holds model.encoder.layers.0.adapter.weight"


def truncated(folder):
    path = folder / "model-00002-of-00002.safetensors"
    data = path.read_bytes()[: 1 << 20]
    path.unlink()
    path.write_bytes(data)
    return "cannot read model-00002-of-00002.safetensors"


def pickle_only(folder):
    for f in folder.glob("model*"):
        f.unlink()
    (folder / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not read")
    return "only pytorch_model.bin (a pickle, never loaded here)"


def merges_out_of_order(folder):
    lines = (folder / "merges.txt").read_text(encoding="utf-8").split("\n")
    lines[10], lines[11] = lines[11], lines[10]  # ids would no longer be merge ranks
    (folder / "merges.txt").unlink()
    (folder / "merges.txt").write_text("\n".join(lines), encoding="utf-8")
    return "merges.txt: merge 11"  # merge 10 now makes a later token, merge 11 an earlier one


def no_tokenizer(folder):
    for name in ("vocab.json", "merges.txt", "added_tokens.json"):
        (folder / name).unlink()
    return "no tokenizer.json, vocab.json or vocabulary.txt in"


def not_bpe(folder):
    for name in ("vocab.json", "merges.txt", "added_tokens.json"):
        (folder / name).unlink()
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "Unigram", "vocab": [["a", -1.0]]}}))
    return "tokenizer.json: a Unigram tokenizer; Whisper's is byte-level BPE"


BROKEN = [drop_tensor, wrong_shape, missing_from_index, missing_shard, missing_config, config_without_layers,
          unknown_tensor, truncated, pickle_only, merges_out_of_order, no_tokenizer, not_bpe]


@pytest.mark.parametrize("damage", BROKEN, ids=[f.__name__ for f in BROKEN])
def test_a_broken_folder_is_one_line_naming_the_folder_and_the_file(good_folder, cache, tmp_path, damage):
    folder = tmp_path / "broken"
    shutil.copytree(good_folder, folder, copy_function=os.link)
    expected = damage(folder)
    with pytest.raises(ModelError) as info:
        loader.load_model(folder)
    message = str(info.value)
    assert str(folder) in message and expected in message and "\n" not in message, message
    models = cache / "models"
    assert not models.exists() or not any(p.name.startswith("broken") for p in models.iterdir())


def test_a_broken_folder_stops_the_batch_with_one_line(good_folder, cache, tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(good_folder, folder, copy_function=os.link)
    expected = wrong_shape(folder)
    result = CliRunner().invoke(main, [str(JFK), "--model", str(folder), "--db", str(tmp_path / "jobs.db"),
                                       "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in result.output, result.output
