"""The native kernels (transcriber/native) against MLX's own ops, on every path this CPU runs.

Each kernel: rows 1-8, widths that are no multiple of the SIMD width, masked positions, -inf
scores, per forced path (TRANSCRIBER_KERNELS=avx512|avx2|portable). The decoder step on the
real tiny.en model against the MLX decoder. The in-place key/value cache never changes what an
older state sees. Skipped where the library was not built (a lone clone without a compiler):
test_native_fallback.py covers that case.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys

import mlx.core as mx
import numpy as np
import pytest

from transcriber import native
from transcriber.backend import MLXInference
from transcriber.native import checks, loader
from transcriber.backend import NativeInference, inference_for
from transcriber.native.kernels import INTEGER_LEVELS, Kernels

BUILT = loader.record() or {}
FLAGS = loader.cpu_flags()
PATHS = [p for p in BUILT.get("paths", []) if loader.runnable(p, FLAGS)]
pytestmark = pytest.mark.skipif(not PATHS, reason="native kernels not built here (see test_native_fallback.py)")


@pytest.fixture(autouse=True)
def _settings_read_again():
    yield
    native.reset()  # the kernel settings are read once: a test's are not kept for the next


def _kernel_setting(monkeypatch, name: str, value=None) -> None:
    """Set (None: unset) a TRANSCRIBER_KERNEL_* setting; read once, so the kernels load again."""
    if value is None:
        monkeypatch.delenv(name)
    else:
        monkeypatch.setenv(name, value)
    native.reset()


@pytest.fixture(params=PATHS or ["none"])
def kernels(request, monkeypatch) -> Kernels:
    monkeypatch.setenv(loader.ENV, request.param)
    loaded = loader.load()
    assert loaded.path == request.param, loaded.reason
    return Kernels(loaded.lib, loaded.path, "avx512_bf16" in FLAGS, "avx512_vnni" in FLAGS)


def _dots(kernels) -> tuple[bool, ...]:
    """The GEMM's variants this path serves here: vdpbf16ps (AVX-512 BF16) and widening."""
    return (True, False) if kernels.dot else (False,)


def _bf(a) -> mx.array:
    return mx.array(a).astype(mx.bfloat16).astype(mx.float32)


def test_every_kernel_passes_its_self_check_on_every_path(kernels):
    assert checks.run(kernels) == {kind: None for kind in checks.CHECKS}


@pytest.mark.parametrize("rows", range(1, 9))
@pytest.mark.parametrize("width,out", [(384, 51), (37, 16), (100, 33)])
def test_linear_rows_and_widths_match_mlx(kernels, rows, width, out):
    rng = np.random.default_rng(rows * width)
    x = rng.standard_normal((rows, width), dtype=np.float32)
    w = rng.standard_normal((out, width), dtype=np.float32)
    b = rng.standard_normal(out, dtype=np.float32)
    res = rng.standard_normal((rows, out), dtype=np.float32)
    want = np.array(mx.array(x) @ mx.array(w).T + mx.array(b) + mx.array(res))
    np.testing.assert_allclose(kernels.linear(x, kernels.pack(w, "f32"), b, res), want, rtol=1e-4, atol=1e-4)
    want_bf16 = np.array(mx.array(x) @ mx.array(w).astype(mx.bfloat16).astype(mx.float32).T)
    np.testing.assert_allclose(kernels.linear(x, kernels.pack(w, "bf16")), want_bf16, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(kernels.linear(x, kernels.gemm_pack(w)), want_bf16, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", range(1, 9))
@pytest.mark.parametrize("width,out", [(384, 51), (37, 16), (1536, 33), (3, 70)])
def test_int8_linear_rows_and_widths_match_mlx(kernels, rows, width, out):
    """int8 weights (per column, channels scaled), rows quantised to int16 per row, int32 sums
    (checks.int8_reference): against MLX's product of the same quantised values, on every route
    this path serves here (vpdpwssd, vpmaddwd, plain C); and within the quantisation's error
    (1% of the output's scale) of MLX's float32 product."""
    rng = np.random.default_rng(rows * width + out)
    x = rng.standard_normal((rows, width), dtype=np.float32)
    w = rng.standard_normal((out, width), dtype=np.float32)
    b = rng.standard_normal(out, dtype=np.float32)
    want = np.array(checks.int8_reference(x, w) + mx.array(b))
    exact = np.array(mx.array(x) @ mx.array(w).T + mx.array(b))
    for vnni in ((True, False) if kernels.vnni else (False,)):
        got = kernels.linear(x, kernels.pack_int8(w, vnni), b)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        assert np.abs(got - exact).max() < 0.01 * np.abs(exact).max()


def test_int8_linear_is_the_same_on_every_path_and_thread_count():
    """The int32 sums are exact on every route (no saturation), so every path, route and thread
    count gives the same floats: a large projection-like weight at 1, 4 and 6 rows."""
    rng = np.random.default_rng(30)
    w = rng.standard_normal((5000, 384), dtype=np.float32)
    w[7] *= 40  # columns of very different scales
    x = rng.standard_normal((6, 384), dtype=np.float32)
    x[:, 5] = 30.0  # an outlier channel
    results = {}
    for path in PATHS:
        k = Kernels(ctypes.CDLL(loader.library_file(path)), path, False, "avx512_vnni" in FLAGS)
        for vnni in ((True, False) if k.vnni else (False,)):
            packed = k.pack_int8(w, vnni)
            for threads in (1, 2):
                k.set_threads(threads)
                results[(path, vnni, threads)] = [k.linear(x[:r], packed) for r in (1, 4, 6)]
            k.set_threads(1)
    first = next(iter(results.values()))
    for key, got in results.items():
        for a, b in zip(got, first):
            np.testing.assert_array_equal(a, b, err_msg=str(key))


def test_softmax_masked_and_minus_inf_match_mlx(kernels):
    rng = np.random.default_rng(3)
    for n in (1, 15, 17, 1500):
        s = rng.standard_normal((5, n), dtype=np.float32) * 8
        s[0, : n // 2] = -np.inf
        s[3, -1] = -np.inf if n > 1 else s[3, -1]
        want = np.array(mx.softmax(mx.array(s), axis=-1, precise=True))
        got = kernels.softmax(s.copy())
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
        assert np.all(got[np.isneginf(s)] == 0.0)
    row = np.full((1, 7), -np.inf, np.float32)  # nothing visible: zeros, never NaN
    assert np.all(kernels.softmax(row) == 0.0)


@pytest.mark.parametrize("width", [1, 15, 16, 1003])
def test_gelu_and_layer_norm_match_mlx(kernels, width):
    rng = np.random.default_rng(width)
    x = rng.standard_normal((3, width), dtype=np.float32) * 4
    want = np.array(mx.array(x) * 0.5 * (1 + mx.erf(mx.array(x) / np.sqrt(2))))
    np.testing.assert_allclose(kernels.gelu(x), want, rtol=1e-5, atol=1e-6)
    g, b = rng.standard_normal(width, dtype=np.float32), rng.standard_normal(width, dtype=np.float32)
    if width > 1:
        want = np.array(mx.fast.layer_norm(mx.array(x), mx.array(g), mx.array(b), 1e-5))
        np.testing.assert_allclose(kernels.layer_norm(x, g, b), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [1, 4, 8])
def test_attention_with_masks_matches_mlx(kernels, rows):
    rng = np.random.default_rng(rows)
    heads, dh, t = 6, 64, 37
    q = rng.standard_normal((rows, heads, dh), dtype=np.float32)
    k = rng.standard_normal((rows, heads, t, dh), dtype=np.float32)
    v = rng.standard_normal((rows, heads, t, dh), dtype=np.float32)
    hi = np.array([t - 3 * r for r in range(rows)], np.int32)  # each row sees its own audio span
    valid = np.arange(t)[None] < hi[:, None]
    scores = mx.where(mx.array(valid)[:, None, None], (mx.array(q)[:, :, None] / 8) @ mx.array(k).swapaxes(-1, -2), -mx.inf)
    weights = mx.softmax(scores, axis=-1, precise=True)
    want = np.array((weights @ mx.array(v))[:, :, 0])
    k_t = np.ascontiguousarray(k.transpose(0, 1, 3, 2))
    for keys in (k, k_t.transpose(0, 1, 3, 2)):  # position-major and transposed keys
        got, w = kernels.attend(q, keys, v, hi=hi, want_weights=True)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(w, np.array(weights[:, :, 0]), rtol=1e-4, atol=1e-6)
        assert np.all(w[~np.broadcast_to(valid[:, None], w.shape)] == 0.0)


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("t", [1500, 77, 5])
@pytest.mark.parametrize("dh", [64, 32, 128])
def test_attention_of_rows_sharing_one_window_matches_mlx(kernels, rows, t, dh):
    """Beams over one window: the keys (transposed) and values broadcast (row stride 0), in
    bf16 bits, read in groups of rows; per-row masks, positions off the register tiles (and
    fewer than one vector), head widths of 2 to 16 vectors (the values' tiles of 8, 4, 2, 1)."""
    rng = np.random.default_rng(rows + t + dh)
    heads = 6
    q = rng.standard_normal((rows, heads, dh), dtype=np.float32)
    k = rng.standard_normal((1, heads, t, dh), dtype=np.float32)
    v = rng.standard_normal((1, heads, t, dh), dtype=np.float32)
    lo = np.array([r % t for r in range(rows)], np.int32)
    hi = np.array([max(t - 5 * r, lo[r] + 1) for r in range(rows)], np.int32)
    valid = (np.arange(t)[None] >= lo[:, None]) & (np.arange(t)[None] < hi[:, None])
    kb, vb = _bf(k), _bf(v)
    scale = dh ** -0.5
    scores = mx.where(mx.array(valid)[:, None, None], (mx.array(q)[:, :, None] * scale) @ kb.swapaxes(-1, -2), -mx.inf)
    weights = mx.softmax(scores, axis=-1, precise=True)
    want = np.array((weights @ vb)[:, :, 0])
    share = lambda a: np.broadcast_to(a, (rows, *a.shape[1:]))  # noqa: E731
    k_t = kernels.to_bf16(np.ascontiguousarray(k.transpose(0, 1, 3, 2)))
    got, w = kernels.attend(q, share(k_t).transpose(0, 1, 3, 2), share(kernels.to_bf16(v)), lo=lo, hi=hi,
                            want_weights=True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w, np.array(weights[:, :, 0]), rtol=1e-4, atol=1e-6)
    assert np.all(w[~np.broadcast_to(valid[:, None], w.shape)] == 0.0)


def test_a_failing_self_check_disables_that_kernel_only(fresh_verdicts, monkeypatch):
    """The child's checks as they run, but attend's made to fail there."""
    monkeypatch.setattr(fresh_verdicts, "CHILD", [
        sys.executable, "-c", "from transcriber.native import checks, selfcheck\n"
                              "checks.CHECKS['attend'] = lambda k: False\nselfcheck.main()"])
    status = native.status()
    assert status.checks["attend"] and "disabled" in status.checks["attend"]
    assert status.serves("linear") and not status.serves("attend")
    assert "attend: differs from MLX" in status.line()
    assert native.ops().decoder_step(object()) is None  # the step needs attend: MLX's ops


def _decode(inference, state, steps, layers):
    """Greedy steps from the prompt pass; (logits per step, weights of the last step)."""
    logits, state, _ = inference.decode(mx.array([[50257, 50362]] * state.cross_kv[0][1].shape[0]), state)
    tok, out, weights = mx.array(np.array(logits[:, -1]).argmax(-1)[:, None]), [], None
    for _ in range(steps):
        logits, state, weights = inference.decode(tok, state, want_weights=layers)
        last = np.array(logits[:, -1], dtype=np.float32)
        out.append(last)
        tok = mx.array(last.argmax(-1)[:, None])
    return np.stack(out), weights


@pytest.mark.parametrize("rows", [1, 3])
def test_decoder_step_matches_the_mlx_decoder(model, monkeypatch, rows):
    """Native steps (bf16 weights) and MLX's float32 steps: the same tokens, logits within
    the bf16 rounding, cross-attention weights within 1e-2 of the float32 ones."""
    from transcriber.model.state import DecoderState

    native.reset()
    inference = inference_for(model)
    mel = mx.array(np.random.default_rng(0).standard_normal((1, 3000, 80), dtype=np.float32))
    base = inference.start(inference.encode(mel))
    share = lambda a: mx.broadcast_to(a, (rows, *a.shape[1:]))  # noqa: E731
    state = DecoderState([(share(k), share(v)) for k, v in base.cross_kv], [None] * len(base.self_kv))
    assert inference.step is not None
    got, w_got = _decode(inference, state, 12, (2,))
    want, w_want = _decode(MLXInference(model), state, 12, (2,))
    assert np.array_equal(got.argmax(-1), want.argmax(-1))
    assert np.abs(got - want).max() < 0.02 * np.abs(want).max()
    np.testing.assert_allclose(np.array(w_got[2]), np.array(w_want[2]), atol=1e-2)


@pytest.mark.parametrize("rows", [1, 4])
def test_the_decoder_step_on_two_threads_gives_the_same_floats(model, monkeypatch, rows):
    """The step's linears (in-place residuals included), attention heads and projection
    shared by two threads: the same logits and cross-attention weights to the bit as one."""
    from transcriber.model.state import DecoderState

    mel = mx.array(np.random.default_rng(2).standard_normal((1, 3000, 80), dtype=np.float32))
    got = {}
    for threads in ("1", "2"):
        _kernel_setting(monkeypatch, "TRANSCRIBER_KERNEL_THREADS", threads)
        inference = inference_for(model)
        base = inference.start(inference.encode(mel))
        share = lambda a: mx.broadcast_to(a, (rows, *a.shape[1:]))  # noqa: E731
        state = DecoderState([(share(k), share(v)) for k, v in base.cross_kv], [None] * len(base.self_kv))
        logits, weights = _decode(inference, state, 30, (1, 2))
        got[threads] = logits, np.array(weights[1]), np.array(weights[2])
    for a, b in zip(got["1"], got["2"]):
        np.testing.assert_array_equal(a, b)


def test_the_inference_is_chosen_once_per_model_and_again_after_a_reset(model):
    """inference_for: the native inference where the kernels serve, the same object on every
    call for the model, a new one once the kernels (and their settings) are loaded again."""
    native.reset()
    first = inference_for(model)
    assert isinstance(first, NativeInference) and first.step is not None
    assert inference_for(model) is first
    native.reset()
    assert inference_for(model) is not first


@pytest.mark.parametrize("windows,span", [(1, 1500), (2, 101)])
def test_cross_keys_values_on_the_gemm_match_mlx(model, monkeypatch, windows, span):
    """decoder.start's keys (transposed) and values on the bf16 GEMM: MLX's layout and shapes,
    within bf16 rounding (1% RMS) of MLX's float32 linears; TRANSCRIBER_KERNEL_CROSS=mlx gives
    MLX's."""
    native.reset()
    features = mx.array(np.random.default_rng(4).standard_normal((windows, span, 384), dtype=np.float32))
    assert inference_for(model).step.cross is not None
    got = inference_for(model).start(features).cross_kv
    _kernel_setting(monkeypatch, native.CROSS_ENV, "mlx")
    assert inference_for(model).step.cross is None
    want = inference_for(model).start(features).cross_kv
    assert len(got) == len(want) == 4
    for pair, ref in zip(got, want):
        for a, b in zip(pair, ref):
            a, b = np.array(a), np.array(b)
            assert a.shape == b.shape and a.dtype == b.dtype == np.float32
            assert np.sqrt(((a - b) ** 2).mean() / (b ** 2).mean()) < 0.01


def test_growing_cache_never_changes_what_an_older_state_sees():
    from transcriber.native.kvcache import GrowingCache

    cache, rng = GrowingCache(), np.random.default_rng(1)
    new = [rng.standard_normal((2, 3, 4), dtype=np.float32) for _ in range(5)]
    a = cache.extend(None, new[0])
    b = cache.extend(a, new[1])
    c = cache.extend(b, new[2])  # in place: b's buffer
    rewound = cache.extend(b, new[3])  # from b again (a rewind): must not touch c's position 2
    mx.eval(a, b, c, rewound)
    np.testing.assert_array_equal(np.array(c)[:, :, 2], new[2])
    np.testing.assert_array_equal(np.array(rewound)[:, :, 2], new[3])
    np.testing.assert_array_equal(np.array(rewound)[:, :, :2], np.array(b))
    truncated = c[:, :, :1]
    d = cache.extend(truncated, new[4])
    np.testing.assert_array_equal(np.array(d)[:, :, 1], new[4])
    np.testing.assert_array_equal(np.array(c)[:, :, 1], new[1])


def test_two_threads_give_the_same_results(kernels):
    """TRANSCRIBER_KERNEL_THREADS=2 splits the large linears by column blocks and attention by
    heads: the same sums in the same order, so the same floats."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 384), dtype=np.float32)
    w = kernels.pack(rng.standard_normal((5000, 384), dtype=np.float32))  # over the threshold
    q = rng.standard_normal((2, 6, 64), dtype=np.float32)
    kv = rng.standard_normal((2, 6, 1500, 64), dtype=np.float32)
    one = kernels.linear(x, w), kernels.attend(q, kv, kv, want_weights=True)
    kernels.set_threads(2)
    try:
        two = kernels.linear(x, w), kernels.attend(q, kv, kv, want_weights=True)
    finally:
        kernels.set_threads(1)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1][0], two[1][0])
    np.testing.assert_array_equal(one[1][1], two[1][1])


def test_threads_take_every_part_once_call_after_call(kernels):
    """The step's threads (src/pool.cpp) claim a linear's column blocks and attention's heads
    part by part, call after call: every part run once (a part run twice or left out would
    change the outputs), whatever thread took it, on widths of a few parts and of many."""
    rng = np.random.default_rng(8)
    weights = [kernels.pack(rng.standard_normal((n, k), dtype=np.float32)) for n, k in ((384, 384), (1536, 384), (5000, 384))]
    x = rng.standard_normal((4, 384), dtype=np.float32)
    q = rng.standard_normal((1, 6, 64), dtype=np.float32)
    kv = rng.standard_normal((1, 6, 1500, 64), dtype=np.float32)
    one = [kernels.linear(x[:r], w) for w in weights for r in (1, 4)] + [kernels.attend(q, kv, kv)[0]]
    kernels.set_threads(2)
    try:
        for _ in range(30):
            two = [kernels.linear(x[:r], w) for w in weights for r in (1, 4)] + [kernels.attend(q, kv, kv)[0]]
            for a, b in zip(one, two):
                np.testing.assert_array_equal(a, b)
    finally:
        kernels.set_threads(1)


def test_a_forked_child_runs_the_threaded_kernels(kernels, tmp_path):
    """A process that forks after the step's helper threads started (multiprocessing, a Ray
    worker) has no helpers in its child: the child's threaded linear still finishes, alone,
    with the same floats."""
    script = tmp_path / "fork.py"
    script.write_text(f"""
import ctypes, os, sys
import numpy as np
from transcriber.native.kernels import Kernels
k = Kernels(ctypes.CDLL({str(loader.library_file(kernels.path))!r}), {kernels.path!r})
w = k.pack(np.random.default_rng(1).standard_normal((5000, 384), dtype=np.float32))
x = np.ones((1, 384), np.float32)
want = k.linear(x, w)
k.set_threads(2)
assert (k.linear(x, w) == want).all()  # the helper has started
pid = os.fork()
if pid == 0:
    os._exit(0 if (k.linear(x, w) == want).all() and (k.linear(x, w) == want).all() else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
""")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("rows", [1, 7, 50, 96, 97, 300])
@pytest.mark.parametrize("threads", [2, 3])
def test_gemm_threads_give_the_same_floats(kernels, rows, threads):
    """Threads share a GEMM's row blocks, and split the columns too where there are fewer blocks
    than threads (a prompt pass's rows): the same sums in the same order, so the same floats,
    with the epilogue (bias, GELU, residual) on every column once, on both routes."""
    rng = np.random.default_rng(rows)
    w = kernels.gemm_pack(rng.standard_normal((1100, 384), dtype=np.float32))  # 69 column blocks, a tail
    a = rng.standard_normal((rows, 384), dtype=np.float32)
    bias = rng.standard_normal(1100, dtype=np.float32)
    res = rng.standard_normal((rows, 1100), dtype=np.float32)
    for dot in {False, kernels.dot}:
        one = kernels.gemm(a, w, bias, gelu=True, res=res.copy(), threads=1, dot=dot)
        many = kernels.gemm(a, w, bias, gelu=True, res=res.copy(), threads=threads, dot=dot)
        np.testing.assert_array_equal(one, many)


def test_the_encoder_runs_on_every_core_unless_told(monkeypatch):
    """The encoder's products take every core this process may use (their tiles are shared out
    dynamically, so a busy core costs a tile, not a step), the decoder step two of them; the
    BLAS threads this process was told (``blas.set_threads``: --threads, Ray's
    --worker-threads; $TRANSCRIBER_BLAS_THREADS) hold both to fewer, and
    $TRANSCRIBER_KERNEL_THREADS sets both. Not the BLAS probe's count: a loaded moment once
    made that 1 for good."""
    from transcriber import blas, native, settings

    def threads(**env):
        with monkeypatch.context() as m:
            m.setattr(settings, "cores", lambda: 3)
            for name in ("TRANSCRIBER_BLAS_THREADS", "TRANSCRIBER_KERNEL_THREADS"):
                m.delenv(name, raising=False)
            for name, value in env.items():
                m.setenv(name, value)
            native.reset()
            try:
                return native.encoder_threads(), native.threads()  # the encoder's, the step's
            finally:
                native.reset()

    assert threads() == (3, 2)  # the step: two threads at most
    assert threads(TRANSCRIBER_BLAS_THREADS="1") == (1, 1)
    assert threads(TRANSCRIBER_KERNEL_THREADS="3", TRANSCRIBER_BLAS_THREADS="1") == (3, 3)
    monkeypatch.setattr(blas, "_asked", None)
    blas.set_threads(1)  # as transcriber/app/run/runners.py does for --threads 1, a Ray worker for --worker-threads 1
    assert threads() == (1, 1)


@pytest.mark.parametrize("positions", [1, 63, 301])
def test_encoder_attention_matches_mlx(kernels, positions):
    rng = np.random.default_rng(positions)
    heads, dh = 6, 64
    q = rng.standard_normal((positions, heads * dh), dtype=np.float32) * 2
    k = rng.standard_normal((heads, positions, dh), dtype=np.float32) * 2
    v = rng.standard_normal((heads, positions, dh), dtype=np.float32)
    qh = mx.array(q).reshape(positions, heads, dh).transpose(1, 0, 2)
    w = mx.softmax((qh / 8) @ mx.array(k).swapaxes(-1, -2), axis=-1, precise=True)
    want = np.array((w @ mx.array(v)).transpose(1, 0, 2).reshape(positions, heads * dh))
    got = kernels.encoder_attention(q, np.ascontiguousarray(k.transpose(0, 2, 1)), v)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 5, 6, 7, 97, 200])
@pytest.mark.parametrize("width,out", [(384, 1152), (37, 29), (240, 70)])
def test_gemm_rows_and_widths_match_mlx(kernels, rows, width, out):
    """Both operands rounded to bf16 as MLX rounds them, float32 sums; bias, GELU, in-place
    residual; every tile shape (rows past 6 and 96, columns past 16 and 64)."""
    rng = np.random.default_rng(rows + width)
    x = rng.standard_normal((rows, width), dtype=np.float32)
    w = rng.standard_normal((out, width), dtype=np.float32)
    b = rng.standard_normal(out, dtype=np.float32)
    res = rng.standard_normal((rows, out), dtype=np.float32)
    pre = _bf(x) @ _bf(w).T + mx.array(b)
    gelu = np.array(pre * 0.5 * (1 + mx.erf(pre / np.sqrt(2))))
    packed = kernels.gemm_pack(w)
    for dot in _dots(kernels):
        np.testing.assert_allclose(kernels.gemm(x, packed, b, gelu=True, dot=dot), gelu, rtol=1e-4, atol=1e-3)
        y = res.copy()
        kernels.gemm(x, packed, b, res=y, out=y, dot=dot)
        np.testing.assert_allclose(y, np.array(pre) + res, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("stride", [1, 2])
def test_gemm_as_a_convolution_matches_mlx_conv1d(kernels, stride):
    """Rows of K = 3 x C floats read `stride` frames apart in the padded input: MLX's Conv1d."""
    rng = np.random.default_rng(stride)
    frames, c, out = 41, 19, 35
    x = rng.standard_normal((frames, c), dtype=np.float32)
    w = rng.standard_normal((out, 3, c), dtype=np.float32)  # MLX's (C_out, kernel, C_in)
    want = np.array(mx.conv1d(_bf(x)[None], _bf(w), stride=stride, padding=1)[0])
    padded = np.pad(x, ((1, 1), (0, 0)))
    for dot in _dots(kernels):
        got = kernels.gemm(padded, kernels.gemm_pack(w.reshape(out, -1)), rows=want.shape[0],
                           row_stride=stride * c, dot=dot)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="overrun"):
        kernels.gemm(padded, kernels.gemm_pack(w.reshape(out, -1)), rows=frames + 1, row_stride=c)


@pytest.mark.parametrize("rows", [1, 4, 5, 97, 200])
@pytest.mark.parametrize("width,out", [(384, 1152), (37, 29), (301, 70), (1536, 40)])
def test_integer_gemm_rows_and_widths_match_mlx(kernels, rows, width, out):
    """The integer GEMM (12-bit weights per column with channel scales, 14-bit rows, int32 sums
    exact per chunk of 128 k): against MLX's float32 product of the same quantised values
    (checks.int8_reference), with bias, GELU and an in-place residual; every tile shape (rows
    past 4 and 96) and K over many chunks; and within 0.5% of MLX's float32 product."""
    rng = np.random.default_rng(rows + width + out)
    x = rng.standard_normal((rows, width), dtype=np.float32)
    w = rng.standard_normal((out, width), dtype=np.float32)
    b = rng.standard_normal(out, dtype=np.float32)
    res = rng.standard_normal((rows, out), dtype=np.float32)
    pre = checks.int8_reference(x, w, INTEGER_LEVELS) + mx.array(b)
    gelu = np.array(pre * 0.5 * (1 + mx.erf(pre / np.sqrt(2))))
    packed = kernels.igemm_pack(w)
    np.testing.assert_allclose(kernels.gemm(x, packed, b, gelu=True), gelu, rtol=1e-5, atol=1e-4)
    y = res.copy()
    kernels.gemm(x, packed, b, res=y, out=y)
    np.testing.assert_allclose(y, np.array(pre) + res, rtol=1e-5, atol=1e-4)
    exact = np.array(mx.array(x) @ mx.array(w).T + mx.array(b))
    assert np.abs(kernels.gemm(x, packed, b) - exact).max() < 0.005 * np.abs(exact).max()


@pytest.mark.parametrize("stride", [1, 2])
def test_integer_gemm_as_a_convolution_matches_mlx(kernels, stride):
    """Overlapping rows (a convolution's im2col) on integer products: each row quantised alone."""
    rng = np.random.default_rng(stride)
    frames, c, out = 41, 19, 35
    x = rng.standard_normal((frames, c), dtype=np.float32)
    w = rng.standard_normal((out, 3 * c), dtype=np.float32)
    padded = np.pad(x, ((1, 1), (0, 0)))
    rows = (frames - 1) // stride + 1
    cols = np.stack([padded[stride * t: stride * t + 3].ravel() for t in range(rows)])
    got = kernels.gemm(padded, kernels.igemm_pack(w), rows=rows, row_stride=stride * c)
    np.testing.assert_allclose(got, np.array(checks.int8_reference(cols, w, INTEGER_LEVELS)), rtol=1e-5, atol=1e-4)


def test_integer_gemm_is_the_same_on_every_path_and_thread_count():
    """Exact int32 sums per chunk, added in float32 in one order: every path and thread count
    gives the same floats (a product alone; outsize columns and an outlier channel)."""
    rng = np.random.default_rng(31)
    w = rng.standard_normal((1100, 1536), dtype=np.float32)
    w[7] *= 40
    x = rng.standard_normal((150, 1536), dtype=np.float32)
    x[:, 5] = 30.0
    results = {}
    for path in PATHS:
        k = Kernels(ctypes.CDLL(loader.library_file(path)), path)
        packed = k.igemm_pack(w)
        for threads in (1, 2, 3):
            results[(path, threads)] = k.gemm(x, packed, threads=threads)
    first = next(iter(results.values()))
    for key, got in results.items():
        np.testing.assert_array_equal(got, first, err_msg=str(key))


@pytest.mark.parametrize("positions", [1, 63, 301])
def test_attention_bf16_matches_mlx(kernels, positions):
    """The bf16 attention against MLX's over the bf16-rounded query, keys and values: within
    the rounding of the probabilities (2^-8 of the scale)."""
    rng = np.random.default_rng(positions)
    heads, dh = 6, 64
    qkv = rng.standard_normal((positions, 3 * heads * dh), dtype=np.float32) * 2
    q, k, v = (_bf(qkv[:, i * heads * dh:(i + 1) * heads * dh]).reshape(positions, heads, dh).transpose(1, 0, 2)
               for i in range(3))
    w = mx.softmax((q / 8) @ k.swapaxes(-1, -2), axis=-1, precise=True)
    want = np.array((w @ v).transpose(1, 0, 2).reshape(positions, heads * dh))
    for dot in _dots(kernels):
        got = kernels.attention_bf16(qkv, heads, dot=dot)
        assert np.abs(got - want).max() < np.abs(want).max() / 256


@pytest.mark.parametrize("rows", [97, 350, 500, 701])
def test_gemm_and_attention_two_threads_give_the_same_results(kernels, rows):
    """Threads take whole blocks of rows, sized to the thread count (350 rows on 2 threads: 4 x
    90): every row's sums in the same order whatever its block, the same floats, on the bf16
    and the integer GEMM."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((rows, 384), dtype=np.float32)
    raw = rng.standard_normal((1152, 384), dtype=np.float32)
    w = kernels.gemm_pack(raw)
    for dot in _dots(kernels):
        qkv = kernels.gemm(x, w, dot=dot)
        for threads in (2, 3):
            np.testing.assert_array_equal(qkv, kernels.gemm(x, w, dot=dot, threads=threads))
        np.testing.assert_array_equal(kernels.attention_bf16(qkv, 6, dot=dot),
                                      kernels.attention_bf16(qkv, 6, dot=dot, threads=2))
    packed = kernels.igemm_pack(raw)
    np.testing.assert_array_equal(kernels.gemm(x, packed), kernels.gemm(x, packed, threads=2))


def test_the_bf16_encoder_stays_close_to_mlx_float32(model, monkeypatch):
    """The default native encoder (bf16 products) against MLX's float32 encoder: within 2% RMS
    (docs/speed.md has its words and timings on the dev set)."""
    native.reset()
    mel = mx.array(np.random.default_rng(2).standard_normal((1, 1000, 80), dtype=np.float32))  # 10 s
    assert native.ops().encoder(model.encoder) is not None
    got = np.array(inference_for(model).encode(mel))
    _kernel_setting(monkeypatch, native.ENCODER_ENV, "mlx")
    assert native.ops().encoder(model.encoder) is None
    want = np.array(inference_for(model).encode(mel))
    assert got.shape == want.shape == (1, 500, 384)
    assert np.sqrt(((got - want) ** 2).mean() / (want ** 2).mean()) < 0.02


def test_the_integer_native_encoder_on_every_path_stays_closer_to_mlx_float32_than_bf16(kernels, model, monkeypatch):
    """TRANSCRIBER_KERNEL_ENCODER=int16 (linears and convolutions on integer products) on each
    path: a 10 s window against MLX's float32 encoder, closer than the bf16 encoder's FMA route
    (12-bit weights and 14-bit rows against bf16's 8-bit mantissas); and the setting serves it."""
    from transcriber.native.encoder import NativeEncoder

    _kernel_setting(monkeypatch, native.ENCODER_ENV, "mlx")
    model.encoder.restore_weights()
    mel = np.random.default_rng(4).standard_normal((1000, 80), dtype=np.float32)
    want = np.array(model.encoder(mx.array(mel[None])))[0]
    error = {}
    for integer in (False, True):
        monkeypatch.setattr(kernels, "dot", False)
        got = NativeEncoder(kernels, model.encoder, threads=2, integer=integer).window(mel)
        error[integer] = np.sqrt(((got - want) ** 2).mean() / (want ** 2).mean())
    assert error[True] < error[False] < 0.02, error
    _kernel_setting(monkeypatch, native.ENCODER_ENV, "int16")
    assert native.ops().encoder(model.encoder).integer
    assert "integer GEMM" in native.encoder_line()


def test_the_native_encoder_frees_mlx_float32_weights_and_mlx_reads_them_again(model, monkeypatch):
    """Once packed, MLX's float32 encoder weights are dropped (peak RSS); MLX's encoder later
    reads them again from the model's file and gives what it gave before the drop."""
    from mlx.utils import tree_flatten

    _kernel_setting(monkeypatch, native.ENCODER_ENV, "mlx")
    mel = mx.array(np.random.default_rng(3).standard_normal((1, 400, 80), dtype=np.float32))
    before = np.array(inference_for(model).encode(mel))
    _kernel_setting(monkeypatch, native.ENCODER_ENV)
    inference_for(model).encode(mel)
    assert model.encoder.conv1.weight.size == model.encoder.blocks[0].mlp1.weight.size == 0
    _kernel_setting(monkeypatch, native.ENCODER_ENV, "mlx")
    np.testing.assert_array_equal(np.array(inference_for(model).encode(mel)), before)
    assert model.encoder.conv1.weight.size == 384 * 3 * 80
    _kernel_setting(monkeypatch, native.ENCODER_ENV)
    inference_for(model).encode(mel)  # packed again, dropped again; parameters() reads them again
    assert model.encoder.conv1.weight.size == 0
    assert all(v.size for _, v in tree_flatten(model.encoder.parameters()))


def test_the_encoder_on_the_kernels_matches_mlx(model, monkeypatch):
    _kernel_setting(monkeypatch, native.ENCODER_ENV, "mlx")  # MLX's float32 encoder, the native attention
    mel = mx.array(np.random.default_rng(2).standard_normal((1, 1000, 80), dtype=np.float32))  # 10 s
    got = np.array(inference_for(model).encode(mel))
    want = np.array(MLXInference(model).encode(mel))  # MLX's attention
    np.testing.assert_allclose(got, want, atol=1e-3 * np.abs(want).max())


def test_the_native_encoder_on_every_path_and_route_stays_close_to_mlx_float32(kernels, model, monkeypatch):
    """A 10 s window on each path's GEMM routes (the FMA route of avx2 / portable / avx512
    without vdpbf16ps, and vdpbf16ps where the CPU has it) against MLX's float32 encoder."""
    from transcriber.native.encoder import NativeEncoder

    _kernel_setting(monkeypatch, native.ENCODER_ENV, "mlx")
    model.encoder.restore_weights()
    mel = np.random.default_rng(4).standard_normal((1000, 80), dtype=np.float32)
    want = np.array(model.encoder(mx.array(mel[None])))[0]
    encoder = NativeEncoder(kernels, model.encoder, threads=2)
    for dot in _dots(kernels):
        monkeypatch.setattr(kernels, "dot", dot)
        got = encoder.window(mel)
        assert got.shape == want.shape == (500, 384)
        assert np.sqrt(((got - want) ** 2).mean() / (want ** 2).mean()) < 0.02, (kernels.path, dot)
