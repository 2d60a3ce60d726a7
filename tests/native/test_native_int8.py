"""The int8 decoder step (TRANSCRIBER_KERNEL_WEIGHTS=int8 or int8-projection, src/int8.cpp) on
the real tiny.en model.

The one-token step's vocabulary projection (and with int8 its layers' linears) read int8
weights and quantise their rows per row; the multi-token passes keep the bf16 layer copies.
Off by default: the precision rule fails on base non_en (docs/speed.md). On every
path this CPU runs: the same tokens as MLX's float32 decoder over a dozen steps, logits within
the quantisation's error, and examples/jfk.flac gives MLX's words. The kernels themselves are
tested in test_native.py (test_int8_linear_*), under emulation too.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import transcriber
from tests.conftest import JFK
from tests.native.test_native import PATHS, _decode, _kernel_setting
from transcriber import native
from transcriber.backend import MLXInference
from transcriber.model.state import DecoderState
from transcriber.native import loader
from transcriber.backend import inference_for
from transcriber.native.kernels import Int8Weight

pytestmark = pytest.mark.skipif(not PATHS, reason="native kernels not built here (see test_native_fallback.py)")


@pytest.fixture(params=PATHS or ["none"])
def int8_path(request, monkeypatch) -> str:
    monkeypatch.setenv(loader.ENV, request.param)
    _kernel_setting(monkeypatch, native.PRECISION_ENV, "int8")
    yield request.param
    native.reset()


@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("precision", ["int8", "int8-projection"])
def test_the_int8_step_gives_the_mlx_decoders_tokens(model, int8_path, monkeypatch, rows, precision):
    """int8: the projection and the layers' linears in int8; int8-projection: the projection only."""
    _kernel_setting(monkeypatch, native.PRECISION_ENV, precision)
    inference = inference_for(model)
    step = inference.step
    assert step is not None and step.precision == precision
    int8 = [isinstance(w, Int8Weight) for w in step.step_weights]
    assert int8[-1] and all(int8[:-1]) == (precision == "int8") and any(int8[:-1]) == (precision == "int8")
    assert inference.prefill is not None  # the pass keeps its bf16 weights
    mel = mx.array(np.random.default_rng(0).standard_normal((1, 3000, 80), dtype=np.float32))
    base = inference.start(inference.encode(mel))
    share = lambda a: mx.broadcast_to(a, (rows, *a.shape[1:]))  # noqa: E731
    state = DecoderState([(share(k), share(v)) for k, v in base.cross_kv], [None] * len(base.self_kv))
    got, w_got = _decode(inference, state, 12, (2,))
    want, w_want = _decode(MLXInference(model), state, 12, (2,))
    assert np.array_equal(got.argmax(-1), want.argmax(-1))
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
    np.testing.assert_allclose(np.array(w_got[2]), np.array(w_want[2]), atol=3e-2)


def test_int8_weights_take_half_the_bytes_of_bf16_and_bf16_stays_the_default(model, monkeypatch):
    native.reset()
    assert native.weights_precision() == "bf16"
    bf16 = inference_for(model).step
    bf16_bytes = sum(w.data.nbytes for w in bf16.step_weights)
    _kernel_setting(monkeypatch, native.PRECISION_ENV, "int8")
    int8 = inference_for(model).step
    int8_bytes = sum(w.data.nbytes for w in int8.step_weights)
    assert int8.precision == "int8" and 0.45 < int8_bytes / bf16_bytes < 0.55


def test_jfk_with_the_int8_step_gives_mlxs_words(model, int8_path, monkeypatch):
    got = [w.text for w in transcriber.transcribe(JFK, model).words]
    assert inference_for(model).step.precision == "int8"
    monkeypatch.setenv(loader.ENV, "off")
    native.reset()
    want = [w.text for w in transcriber.transcribe(JFK, model).words]
    assert got == want and len(got) == 22
