"""The native multi-token decoder pass (transcriber/native/prefill.py) and its attention kernel.

``attention_packed`` against MLX's attention over the same bf16-rounded operands: query rows
and positions that are no multiple of the SIMD width or of the kernel's 48-row blocks, causal
after cached positions and unmasked, the probabilities, each forced path. The pass on the real
tiny.en model against MLX's float32 pass at several prompt lengths, after a cached prefix, the
cache it leaves for the native steps, and a failed first-pass check that disables it.
"""

from __future__ import annotations

import functools
import logging

import mlx.core as mx
import numpy as np
import pytest

from tests.conftest import JFK, audio_path
from tests.native.test_native import PATHS, _bf, _dots, _kernel_setting, _settings_read_again, kernels  # noqa: F401 - fixtures
from transcriber import native
from transcriber.media.audio import load_audio
from transcriber.model.mel import log_mel_spectrogram, pad_or_trim
from transcriber.backend import MLXInference
from transcriber.native import checks, prefill
from transcriber.backend import inference_for

pytestmark = pytest.mark.skipif(not PATHS, reason="native kernels not built here (see test_native_fallback.py)")


@pytest.mark.parametrize("t,n,causal", [(1, 1, 0), (17, 17, 0), (50, 57, 7), (200, 224, 24), (3, 1500, -1),
                                        (49, 301, -1)])
def test_attention_packed_matches_mlx(kernels, t, n, causal):  # noqa: F811
    rng = np.random.default_rng(t * n)
    h, dh = 3, 64
    q = rng.standard_normal((t, 3 * h * dh), dtype=np.float32)  # a fused q/k/v product: q first
    keys = rng.standard_normal((h, n, dh), dtype=np.float32)
    vals = rng.standard_normal((h, n, dh), dtype=np.float32)
    scaled = _bf(q[:, :h * dh] * dh ** -0.5).reshape(t, h, dh).transpose(1, 0, 2)
    want, want_w = checks._masked_attention(scaled, _bf(keys), _bf(vals), causal)
    # keys given transposed (a strided view), as the cross-attention's (H, Dh, S) are
    kp = kernels.pack_heads(np.ascontiguousarray(keys.transpose(0, 2, 1)).transpose(0, 2, 1), 1)
    vp = kernels.pack_heads(vals, 2)
    for dot in _dots(kernels):
        got, w = kernels.attention_packed(q, kp, vp, causal=causal, want_weights=True, dot=dot, q_cols=h * dh)
        assert np.abs(got - want).max() <= np.abs(want).max() / 256
        np.testing.assert_allclose(w, want_w, atol=2e-4)
        assert np.all(w[want_w == 0] == 0)  # masked positions exactly 0
        np.testing.assert_allclose(w.sum(-1), 1, atol=1e-5)


def test_pack_heads_is_gemm_pack_per_head(kernels):  # noqa: F811
    a = np.random.default_rng(3).standard_normal((2, 37, 21), dtype=np.float32)
    for n_axis, per_head in ((1, lambda x: x), (2, lambda x: x.T)):
        got = kernels.pack_heads(a, n_axis)
        for h in range(2):
            want = kernels.gemm_pack(np.ascontiguousarray(per_head(a[h]))).data
            assert np.array_equal(got.data[h], want)


@functools.lru_cache(maxsize=1)
def _jfk_mel() -> mx.array:
    """examples/jfk.flac's 30 s window (random mel frames make the attention peak on the
    last frame, far from what a pass sees)."""
    return pad_or_trim(log_mel_spectrogram(load_audio(JFK)), 3000, axis=0)[None]


def _pass_inputs(model, t: int, seed: int = 0):
    """jfk's features from MLX's float32 encoder and t random tokens. Not the native encoder's:
    each GEMM route's features differ in their last bits (all ~0.56% RMS from MLX's), and over
    random tokens one attention row can sit near a tie: the portable route's features once moved
    a probability by 0.016 in both passes' comparison, the same pass on MLX's features by 0.004."""
    state = model.decoder.start(model.encoder(_jfk_mel()))
    tokens = mx.array([np.random.default_rng(seed + 1).integers(0, 50000, t).tolist()])
    return state, tokens


def _agree(got, want, layers):
    (logits, state, weights), (ref_logits, ref_state, ref_weights) = got, want
    if ref_logits is not None:
        assert prefill._relative_rms(logits, ref_logits) < 0.03
        assert np.array_equal(np.asarray(logits).argmax(-1), np.asarray(ref_logits).argmax(-1))
    for mine, ref in zip(state.self_kv, ref_state.self_kv):
        assert mine[0].shape == ref[0].shape and mine[0].dtype == mx.float32
        assert max(prefill._relative_rms(mine[0], ref[0]), prefill._relative_rms(mine[1], ref[1])) < 0.03
    assert [w is None for w in weights] == [w is None for w in ref_weights]
    for i in layers:
        assert weights[i].shape == ref_weights[i].shape
        np.testing.assert_allclose(np.asarray(weights[i]), np.asarray(ref_weights[i]), atol=1e-2)


@pytest.mark.parametrize("t", [1, 2, 17, 100, 224])
def test_the_pass_matches_mlx_float32(model, t):
    """1: a first window's <|startoftranscript|> alone (tiny.en, timestamps), no cache yet."""
    native.reset()
    state, tokens = _pass_inputs(model, t)
    run = inference_for(model).prefill
    assert run is not None and run.supports(tokens, state)
    layers, logits = model.alignment_layers, sorted({0, t - 1})
    _agree(run.run(tokens, state, layers, logits), MLXInference(model).decode(tokens, state, layers, logits), layers)
    got = run.run(tokens, state, (), False)  # the word-timing pass asks for no logits
    assert got[0] is None and got[2] is None


def test_a_pass_after_cached_tokens_and_the_steps_after_it(model):
    """A prompt, then native steps extending its cache in place, then a second pass from that
    offset: each as MLX's float32 decoder gives it from the same state."""
    native.reset()
    state, tokens = _pass_inputs(model, 30, seed=5)
    inference, layers = inference_for(model), model.alignment_layers
    decoder = inference.decode
    first = decoder(tokens, state, want_weights=layers, want_logits=[29])
    step = inference.step
    assert all(step.cache._buffer(c) is not None for pair in first[1].self_kv for c in pair)
    token = mx.array([[int(np.asarray(first[0])[0, -1].argmax())]])
    after_step = decoder(token, first[1])
    assert all(step.cache._buffer(c) is not None for pair in after_step[1].self_kv for c in pair)
    more = mx.array([[220, 11, 290, 13, 400]])
    _agree(decoder(more, after_step[1], want_weights=layers), MLXInference(model).decode(more, after_step[1], layers),
           layers)


def test_a_first_pass_that_differs_from_mlx_disables_the_pass(model, monkeypatch, caplog):
    native.reset()
    monkeypatch.setattr(prefill, "CHECK_RMS", 0.0)
    state, tokens = _pass_inputs(model, 12)
    inference = inference_for(model)
    with caplog.at_level(logging.WARNING):
        got = inference.decode(tokens, state, want_logits=[11])
    want = model.decoder(tokens, state, (), [11], inference.kernels)
    assert np.array_equal(np.asarray(got[0]), np.asarray(want[0]))  # MLX's result served
    run = inference.prefill
    assert run.checked is False and not run.supports(tokens, state)
    assert "native prompt pass" in caplog.text and "differ" in caplog.text
    native.reset()


def test_logits_that_differ_by_a_constant_agree_and_others_do_not():
    """The check compares logits as a softmax reads them: a row's constant offset is no difference."""
    rng = np.random.default_rng(4)
    ref = rng.standard_normal((2, 51864)) * 1.4
    assert prefill._relative_rms(ref + 0.08, ref) > prefill.CHECK_RMS  # what the check measured before
    assert prefill._logits_rms(ref + 0.08 + rng.standard_normal(ref.shape) * 0.005, ref) < 0.01
    assert prefill._logits_rms(ref + rng.standard_normal(ref.shape) * 0.2, ref) > prefill.CHECK_RMS


def test_a_first_window_of_quiet_reading_keeps_the_native_pass(model):
    """The first 30 s of a Harvard-sentences recording: tiny.en's first logits (RMS 1.4) come out
    of the native pass 0.08 above MLX's all along, 7% as the check once measured them, which
    turned the pass off for the whole process; the same probabilities (0.5% centred)."""
    native.reset()
    audio = load_audio(audio_path("osr_us_000_0034_harvard.flac"))[:30 * 16000]
    state = model.decoder.start(model.encoder(pad_or_trim(log_mel_spectrogram(audio), 3000, axis=0)[None]))
    tokens = mx.array([[50257]])  # tiny.en's <|startoftranscript|> (tests/model/test_tokenizer.py)
    run = inference_for(model).prefill
    got, want = run.run(tokens, state, (), [0]), MLXInference(model).decode(tokens, state, (), [0])
    assert prefill._relative_rms(got[0], want[0]) > prefill.CHECK_RMS
    assert prefill._compare(got, want, ()) is None
    served = inference_for(model).decode(tokens, state, want_logits=[0])  # the first pass: checked
    assert run.checked is True and np.asarray(served[0]).argmax() == np.asarray(want[0]).argmax()
    native.reset()


def test_the_pass_can_be_turned_off_and_only_serves_one_row(model, monkeypatch):
    native.reset()
    state, tokens = _pass_inputs(model, 5)
    run = inference_for(model).prefill
    assert run.supports(tokens[:, :1], state)  # one token without a cache: a first window's prompt
    two = mx.concatenate([tokens, tokens])
    assert not run.supports(two, type(state)([(mx.concatenate([k, k]), mx.concatenate([v, v]))
                                              for k, v in state.cross_kv], state.self_kv))
    _kernel_setting(monkeypatch, native.PASS_ENV, "mlx")
    assert inference_for(model).prefill is None
