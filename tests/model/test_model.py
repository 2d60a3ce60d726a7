"""Model loading: CTranslate2 conversion, the MLX folder layout, errors; decoder outputs."""

from __future__ import annotations

import json
import shutil

import mlx.core as mx
import numpy as np
import pytest

from transcriber.app.store.sqlite_store import SqliteJobStore
from transcriber.errors import ModelError
from transcriber import native
from transcriber.model import ct2, loader
from transcriber.backend import inference_for

from tests.conftest import JFK


@pytest.fixture(scope="module")
def tiny_folder():
    parts, folder = loader._package_folder("tiny.en")
    return parts, folder


def test_ct2_variables_and_dimensions(tiny_folder):
    parts, _ = tiny_folder
    variables = ct2.read_model_bin(parts)
    dims = ct2.dims_from_variables(variables)
    assert (dims.n_audio_layer, dims.n_text_layer, dims.n_audio_state, dims.n_audio_head) == (4, 4, 384, 6)
    assert (dims.n_vocab, dims.n_mels, dims.n_audio_ctx, dims.n_text_ctx) == (51864, 80, 1500, 448)
    weights = ct2.to_mlx_weights(variables, dims)
    fused = variables["decoder/layer_2/self_attention/linear_0/weight"].astype(np.float32)
    np.testing.assert_array_equal(weights["decoder.blocks.2.attn.query.weight"], fused[:384])
    np.testing.assert_array_equal(weights["decoder.blocks.2.attn.value.weight"], fused[768:])
    assert "decoder.blocks.2.attn.key.bias" not in weights  # Whisper's keys have no bias
    kv = variables["decoder/layer_0/attention/linear_1/weight"].astype(np.float32)
    np.testing.assert_array_equal(weights["decoder.blocks.0.cross_attn.value.weight"], kv[384:])
    assert weights["encoder.conv1.weight"].shape == (384, 3, 80)  # MLX's (out, kernel, in)


def test_conversion_is_cached_and_self_contained(tiny_folder):
    folder, name = loader.resolve("tiny.en")
    assert name == "tiny.en"
    assert {"weights.safetensors", "config.json", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    config = json.loads((folder / "config.json").read_text())
    assert config["alignment_heads"] == [[1, 0], [2, 0], [2, 5], [3, 0], [3, 1], [3, 2], [3, 3], [3, 4]]
    stamp = (folder / "weights.safetensors").stat().st_mtime_ns
    again, _ = loader.resolve("tiny.en")
    assert again == folder and (folder / "weights.safetensors").stat().st_mtime_ns == stamp


def test_corrupt_model_bin_is_a_model_error(tmp_path, tiny_folder):
    parts, folder = tiny_folder
    (tmp_path / "model.bin").write_bytes(parts[0].read_bytes()[:100_000])
    shutil.copy(folder / "config.json", tmp_path / "config.json")
    with pytest.raises(ModelError) as info:
        loader.load_model(tmp_path)
    assert "model.bin" in str(info.value) and "\n" not in str(info.value)


def _same_encoder_output(a, b):
    mel = mx.random.normal((1, 3000, 80), key=mx.random.key(0))
    np.testing.assert_allclose(np.array(a.encoder(mel)), np.array(b.encoder(mel)), atol=1e-4)


@pytest.mark.parametrize("fmt", ["safetensors", "npz"])
def test_mlx_layout_folder_loads(tmp_path, model, fmt):
    converted, _ = loader.resolve("tiny.en")
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(converted / name, tmp_path / name)
    weights = mx.load(str(converted / "weights.safetensors"))
    if fmt == "npz":
        np.savez(tmp_path / "weights.npz", **{k: np.array(v) for k, v in weights.items()})
    else:
        mx.save_safetensors(str(tmp_path / "weights.safetensors"), weights)
    other = loader.load_model(tmp_path)
    assert other.dims == model.dims and other.info.suppress_ids == model.info.suppress_ids
    _same_encoder_output(model, other)


def test_npz_with_objects_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"n_mels": 80}))
    np.savez(tmp_path / "weights.npz", bad=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ModelError):
        loader.load_model(tmp_path)


def test_missing_package_names_the_pip_install(monkeypatch):
    monkeypatch.setitem(loader.KNOWN_MODELS, "fake", (("fake-whisper-part1", "fake-whisper-part2"),
                                                      ("fake_whisper_part1", "fake_whisper_part2"), "data"))
    with pytest.raises(ModelError, match="pip install fake-whisper-part1 fake-whisper-part2"):
        loader.load_model("fake")


def test_unknown_model_name():
    with pytest.raises(ModelError, match="unknown model 'nope'"):
        loader.load_model("nope")


def test_decoder_returns_cross_attention(model, monkeypatch):
    # float32 weights in the native step, where it serves (its bf16 is test_native.py's)
    monkeypatch.setenv("TRANSCRIBER_KERNEL_WEIGHTS", "f32")
    native.reset()  # the kernel settings are read once
    inference = inference_for(model)
    features = inference.encode(mx.random.normal((1, 3000, 80), key=mx.random.key(1)))
    state = inference.start(features)
    logits, new_state, weights = inference.decode(mx.array([[50257, 50362, 1770]]), state, want_weights=True)
    assert logits.shape == (1, 3, 51864)
    assert len(weights) == 4 and weights[0].shape == (1, 6, 3, 1500)
    np.testing.assert_allclose(np.array(weights[3].sum(axis=-1)), 1.0, atol=1e-4)
    assert new_state.offset == 3 and state.offset == 0  # the old state is untouched
    # one token at a time over the cache gives the same logits as the whole sequence
    step_state = state
    for i, token in enumerate([50257, 50362, 1770]):
        step_logits, step_state, _ = inference.decode(mx.array([[token]]), step_state)
        np.testing.assert_allclose(np.array(step_logits[0, -1]), np.array(logits[0, i]), atol=2e-3)
    picked, _, _ = inference.decode(mx.array([[50257, 50362, 1770]]), state, want_logits=[0, 2])
    np.testing.assert_allclose(np.array(picked[0]), np.array(logits[0, [0, 2]]), atol=1e-4)
    native.reset()  # not f32 for the tests after this one


# -- a corrupt model is refused when it loads (issue 11) ------------------------------------------

@pytest.fixture
def model_copy(tmp_path, monkeypatch):
    """A copy of the converted tiny.en folder (config, weights, tokenizer) to damage; the checks
    it passes are remembered in a cache folder of the test's own."""
    source, _ = loader.resolve("tiny.en")
    target = tmp_path / "tiny-copy"
    shutil.copytree(source, target)
    monkeypatch.setenv("TRANSCRIBER_CACHE", str(tmp_path / "cache"))
    return target


def damage(path, offset_fraction: float, n: int) -> None:
    data = bytearray(path.read_bytes())
    start = int(len(data) * offset_fraction)
    data[start:start + n] = np.random.default_rng(0).bytes(n)
    path.write_bytes(bytes(data))


def test_random_bytes_in_the_weights_are_refused(model_copy):
    damage(model_copy / "weights.safetensors", 0.5, 4 << 20)  # 4 MB of noise in the tensor data
    with pytest.raises(ModelError) as info:
        loader.load_model(model_copy)
    message = str(info.value)
    assert str(model_copy) in message and "weights.safetensors" in message and "not finite" in message
    assert "\n" not in message


def test_a_truncated_weights_file_names_the_file(model_copy):
    path = model_copy / "weights.safetensors"
    path.write_bytes(path.read_bytes()[: 1 << 20])
    with pytest.raises(ModelError, match=r"weights\.safetensors"):
        loader.load_model(model_copy)


def test_the_check_runs_once_per_weights_file(model_copy, monkeypatch):
    loader.load_model(model_copy)  # checked and remembered
    calls = []
    monkeypatch.setattr(loader, "tree_flatten", lambda tree: calls.append(1) or [])
    loader.load_model(model_copy)
    assert calls == []  # the remembered check was not run again


def test_a_corrupt_model_stops_the_batch_with_one_line(model_copy, tmp_path):
    from click.testing import CliRunner

    from transcriber.app.cli.main import main

    damage(model_copy / "weights.safetensors", 0.5, 4 << 20)
    media = tmp_path / "a.flac"
    shutil.copy(JFK, media)
    db = tmp_path / "jobs.db"
    result = CliRunner().invoke(main, [str(media), "--model", str(model_copy), "--db", str(db), "-q"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "weights.safetensors" in lines[0] and "Traceback" not in result.output
    assert not media.with_suffix(".srt").exists()
    with SqliteJobStore(db) as store:
        job = store.jobs()[0]
        assert job.status == "queued" and job.errors == 0  # given back: nothing counted or retried


def test_fast_softmax_matches_the_exact_one():
    """The decoder's cross-attention softmax (a compiled polynomial exp): within 1e-5 of the
    exact softmax over scores of attention's range, masked (-inf) positions exactly 0."""
    from transcriber.model.fastmath import fast_softmax

    rng = np.random.default_rng(5)
    scores = (rng.standard_normal((2, 6, 3, 1500)) * 8).astype(np.float32)
    scores[0, :, :, 1000:] = -np.inf  # a row padded past its audio
    got = np.array(fast_softmax(mx.array(scores)), dtype=np.float64)
    exact = np.exp(scores.astype(np.float64) - scores.max(axis=-1, keepdims=True))
    exact /= exact.sum(axis=-1, keepdims=True)
    assert np.abs(got - exact).max() < 1e-5
    assert (got[0, :, :, 1000:] == 0).all() and np.allclose(got.sum(axis=-1), 1, atol=1e-5)
