"""Native CPU kernels under MLX (issue 21): the seam the model asks for its ops through.

``ops()`` gives the kernels this process may use: loaded once (loader.py), each kind checked
once against MLX's own op (checks.py) before it serves; a kind that fails is disabled with a
note. The TRANSCRIBER_KERNEL_* settings are read once too (``kernel_settings``; ``reset`` reads
them again). The model reaches them through an inference (inference.py), chosen once per model. Nothing here is used off the CPU (Metal, macOS: MLX's ops as before), and when the
library was not built (no compiler, failed build, another MLX) every op is MLX's.

Why a plain C library over evaluated MLX buffers (ctypes) and not MLX ``Primitive``s: see
docs/speed.md ("Native CPU kernels", and the kernels' measurements) (the nanobind pin of MLX's extension example
does not bind to this wheel's arrays).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Optional

from transcriber import settings


@dataclass(frozen=True)
class Status:
    """What serves: the path (None: MLX's ops), why not, and each kind's self-check."""

    path: Optional[str]
    isa: str
    reason: Optional[str]
    checks: dict = field(default_factory=dict)  # kind -> None (passed) or why it is disabled

    def serves(self, kind: str) -> bool:
        return self.path is not None and kind in self.checks and self.checks[kind] is None

    def line(self) -> str:
        """One line for `transcribe doctor` and logs."""
        if self.path is None:
            return f"native kernels: {self.reason}; MLX's own ops serve"
        bad = {k: v for k, v in self.checks.items() if v}
        ok = [k for k, v in self.checks.items() if v is None]
        text = f"native kernels: {self.isa}; self-check passed: {', '.join(ok) or 'none'}"
        return text + "".join(f"; {k}: {v}" for k, v in bad.items())


class Ops:
    """The kernels that passed their checks (``status.serves(kind)``), and where they serve."""

    def __init__(self, kernels, status: Status):
        self.kernels, self.status = kernels, status
        self._steps: dict = {}
        self._encoders: dict = {}

    def decoder_step(self, decoder, precision: str = "bf16"):
        """A DecoderStep for this decoder (made once per decoder), or None when a kernel it
        needs is disabled. Its cross-attention keys and values on the bf16 GEMM where that
        serves, with bf16 weights (f32 weights: MLX's float32 throughout, for measurements)
        and $TRANSCRIBER_KERNEL_CROSS not mlx."""
        if not all(self.status.serves(k) for k in ("linear", "layer_norm", "gelu", "attend")):
            return None
        if precision.startswith("int8") and not self.status.serves("linear_int8"):
            precision = "bf16"
        cross = cross_choice() == "bf16" and precision in BF16_LAYERS and self.status.serves("gemm")
        key = (id(decoder), id(decoder.token_embedding.weight), precision, cross)
        with _lock:
            if key not in self._steps:
                from transcriber.native.decoder import DecoderStep

                if len(self._steps) >= KEPT_MODELS:  # their bf16 copies: the oldest goes
                    self._steps.pop(next(iter(self._steps)))
                self._steps[key] = DecoderStep(self.kernels, decoder, precision, cross_gemm=cross)
            return self._steps[key]

    def decoder_pass(self, decoder, precision: str = "bf16"):
        """A DecoderPass (prefill.py) for this decoder's multi-token passes at batch 1, or None:
        a kernel it needs is disabled, f32 weights (the measurement mode), or
        $TRANSCRIBER_KERNEL_PASS=mlx (MLX's float32 pass: for comparisons). With int8 weights
        the pass reads the step's bf16 layer copies, as with bf16."""
        step = self.decoder_step(decoder, precision)
        if (step is None or step.precision not in BF16_LAYERS or pass_choice() != "bf16"
                or not all(self.status.serves(k) for k in PASS_KINDS)):
            return None
        with _lock:
            if getattr(step, "prefill", None) is None:
                from transcriber.native.prefill import DecoderPass

                step.prefill = DecoderPass(self.kernels, decoder, step, encoder_threads)
            return step.prefill

    def encoder(self, encoder):
        """A NativeEncoder for this AudioEncoder (weights packed once per encoder), or None: a
        kernel it needs is disabled, or $TRANSCRIBER_KERNEL_ENCODER=mlx. Once packed, MLX's
        float32 weights of the encoder are dropped (``AudioEncoder.drop_weights``: read again
        from the model's file if MLX's ops serve it later); the self-checks ran before."""
        integer = encoder_choice() == "int16"
        if encoder_choice() == "mlx" or not all(self.status.serves(k) for k in encoder_kinds()):
            return None
        key = (id(encoder), id(encoder.conv1.weight), integer)  # a dropped weight is a new array: new id
        with _lock:
            if key not in self._encoders:
                from transcriber.native.encoder import NativeEncoder

                if len(self._encoders) >= KEPT_MODELS:
                    self._encoders.pop(next(iter(self._encoders)))
                encoder.restore_weights()  # packed from float32, never from a dropped copy
                packed = NativeEncoder(self.kernels, encoder, integer=integer)
                encoder.drop_weights()
                key = (id(encoder), id(encoder.conv1.weight), integer)
                self._encoders[key] = packed
            found = self._encoders[key]
        found.threads = encoder_threads()
        return found

    def encoder_attention(self):
        """``f(q, k_t, v)`` (kernels.Kernels.encoder_attention), or None."""
        return self.kernels.encoder_attention if self.status.serves("encoder_attention") else None

    def softmax_inplace(self):
        """``f(scores)`` over the last axis of a float32 numpy array, in place; or None."""
        return self.kernels.softmax if self.status.serves("softmax") else None


KEPT_MODELS = 2  # decoders whose packed weights are kept (jobs may switch between two models)
PRECISION_ENV = "TRANSCRIBER_KERNEL_WEIGHTS"
BF16_LAYERS = ("bf16", "int8-projection", "int8")  # precisions whose step keeps the layers' bf16 copies (the pass's)
ENCODER_ENV = "TRANSCRIBER_KERNEL_ENCODER"
ENCODER_KINDS = ("gemm", "attention_bf16", "layer_norm")
PASS_ENV = "TRANSCRIBER_KERNEL_PASS"
PASS_KINDS = ("gemm", "attention_packed", "layer_norm")
CROSS_ENV = "TRANSCRIBER_KERNEL_CROSS"
THREADS_ENV = "TRANSCRIBER_KERNEL_THREADS"


def encoder_kinds() -> tuple[str, ...]:
    """The kernels the native encoder needs: ``ENCODER_KINDS``, and the integer GEMM when
    $TRANSCRIBER_KERNEL_ENCODER=int16 (``Ops.encoder`` and the doctor's line ask the same)."""
    return ENCODER_KINDS + (("igemm",) if encoder_choice() == "int16" else ())


@dataclass(frozen=True)
class KernelSettings:
    """The TRANSCRIBER_KERNEL_* settings, read once (``kernel_settings``). Besides the
    defaults, they exist for the measurements in bench/.

    weights: the decoder's weight precision on the kernels, bf16, f32, int8-projection (the
    one-token step's vocabulary projection in int8) or int8 (its layers' linears too; the
    multi-token passes bf16 either way) ($..._WEIGHTS);
    encoder: bf16 (the native bf16 GEMM), int16 (its linears and convolutions on integer
    products, src/gemm.cpp's igemm) or mlx (MLX's float32 ops, the native attention) ($..._ENCODER);
    passes: the decoder's multi-token passes (prompts, word timing), bf16 (the native pass) or
    mlx (MLX's float32 decoder) ($..._PASS);
    cross: the cross-attention keys and values per window, bf16 (the bf16 GEMM) or mlx (MLX's
    float32 sgemms) ($..._CROSS);
    threads: threads of the large kernels, None: the decoder step's default (``threads()``) ($..._THREADS).
    """

    weights: str = "bf16"
    encoder: str = "bf16"
    passes: str = "bf16"
    cross: str = "bf16"
    threads: Optional[int] = None

    @classmethod
    def read(cls) -> "KernelSettings":
        def choice(env: str, allowed: tuple[str, ...]) -> str:
            value = settings.get(env) or allowed[0]
            return value if value in allowed else allowed[0]

        return cls(choice(PRECISION_ENV, settings.KERNEL_WEIGHTS), choice(ENCODER_ENV, settings.KERNEL_ENCODER),
                   choice(PASS_ENV, ("bf16", "mlx")), choice(CROSS_ENV, ("bf16", "mlx")),
                   settings.get(THREADS_ENV) or None)


def kernel_settings() -> KernelSettings:
    """The settings, read on first use and kept (``reset`` forgets them)."""
    global _settings
    with _settings_lock:  # not _lock: loading the kernels under it reads the threads
        if _settings is None:
            _settings = KernelSettings.read()
        return _settings


def weights_precision() -> str:
    """The decoder's weight precision on the kernels (``KernelSettings.weights``)."""
    return kernel_settings().weights


def encoder_choice() -> str:
    """The encoder on the kernels (``KernelSettings.encoder``)."""
    return kernel_settings().encoder


def pass_choice() -> str:
    """The decoder's multi-token passes (``KernelSettings.passes``)."""
    return kernel_settings().passes


def cross_choice() -> str:
    """The decoder's cross-attention keys and values (``KernelSettings.cross``)."""
    return kernel_settings().cross


def encoder_line() -> str:
    """What serves the encoder, for `transcribe doctor`."""
    st, found = status(), _ops
    if st.path is None:
        return "encoder: MLX's float32 ops"
    if encoder_choice() == "mlx":
        return f"encoder: MLX's float32 ops ({ENCODER_ENV}={encoder_choice()}), native attention"
    if not all(st.serves(k) for k in encoder_kinds()):
        return "encoder: MLX's float32 ops (a kernel it needs is disabled)"
    how = "vdpbf16ps (AVX-512 BF16)" if found.kernels.dot else "bf16 widened to float32 FMAs"
    gemm = "bf16 GEMM"
    if encoder_choice() == "int16":
        gemm, how = f"integer GEMM ({ENCODER_ENV}=int16)", f"attention {how}"
    return (f"encoder: native {gemm} on {st.path}, {how}, {encoder_threads()} thread(s); "
            f"{ENCODER_ENV}=mlx for MLX's float32")


def pass_line() -> str:
    """What serves the decoder's multi-token passes (prompts, word timing), for `transcribe doctor`."""
    st = status()
    if st.path is None:
        return "decoder passes: MLX's float32 ops"
    if pass_choice() != "bf16" or weights_precision() not in BF16_LAYERS:
        return f"decoder passes: MLX's float32 ops ({PASS_ENV}={pass_choice()}, weights {weights_precision()})"
    if not all(st.serves(k) for k in PASS_KINDS):
        return "decoder passes: MLX's float32 ops (a kernel they need is disabled)"
    return (f"decoder passes (prompts, word timing; batch 1): native bf16 GEMM and attention on {st.path}, "
            f"float32 logits; {PASS_ENV}=mlx for MLX's float32")


def encoder_threads() -> int:
    """Threads for the encoder's GEMMs and attention, the cross-attention keys and values and
    the prompt passes: $TRANSCRIBER_KERNEL_THREADS when set, else the BLAS threads this process
    was told to use (``blas.asked_threads``: --threads, a Ray worker's --worker-threads,
    $TRANSCRIBER_BLAS_THREADS: processes sharing the cores), else every core it may use. Not
    the BLAS probe's count: its OpenBLAS on small products is no guide to these kernels, whose
    tiles are shared out dynamically, so that a descheduled thread costs at most the tile in its
    hands once per product (not once per token as in the decoder step). Measured
    (docs/speed.md, "The second core, one probe a file"): the tiny.en window on AVX2 0.36 s
    on one thread, 0.19 s on two; with one and two other processes spinning, 0.33 and 0.49 s on
    two threads against 0.36 and 0.73 s on one."""
    from transcriber.native import blas

    return max(1, kernel_settings().threads or blas.asked_threads() or settings.cores())


def threads() -> int:
    """Threads for the decoder step's large kernels (src/pool.cpp): $TRANSCRIBER_KERNEL_THREADS,
    else the encoder's (``encoder_threads``), at most STEP_THREADS."""
    forced = kernel_settings().threads
    if forced:
        return forced
    return max(1, min(STEP_THREADS, encoder_threads()))


# Two: a tiny.en step reads 66 MB, 2.06 ms on one core of this project's Zen 5 and 1.52 ms on
# two (bench/kernels/step_spread.py; docs/speed.md, "The decoder step on the second core"); more
# cores were not measured here, and each helper spins a few tens of microseconds after its
# last part. The pool gives a busy machine's core back: its caller never waits for a helper
# that has not started, and runs alone while helpers do not help.
STEP_THREADS = 2
_lock = threading.Lock()
_settings_lock = threading.Lock()
_ops: Optional[Ops] = None
_status: Optional[Status] = None
_settings: Optional[KernelSettings] = None


def status() -> Status:
    """Load and check once (cached for the process)."""
    ops()
    return _status


def ops() -> Optional[Ops]:
    """The checked kernels, or None: MLX's own ops everywhere."""
    global _ops, _status
    with _lock:
        if _status is None:
            _ops, _status = _load()
        return _ops


def _load():
    from transcriber.native import loader, selfcheck

    loaded = loader.load()
    if loaded.lib is None:
        return None, Status(None, "", loaded.reason)
    results = selfcheck.verdict(loader.library_file(loaded.path), loaded.path, loaded.flags)
    if selfcheck.CRASHED in results:  # nothing of this library runs here
        return None, Status(None, "", f"disabled ({results[selfcheck.CRASHED]})")
    from transcriber.native.kernels import Kernels

    k = Kernels(loaded.lib, loaded.path, "avx512_bf16" in loaded.flags, "avx512_vnni" in loaded.flags)
    k.set_threads(threads())
    st = Status(loaded.path, loaded.isa, None, results)
    bad = [f"{kind}: {note}" for kind, note in results.items() if note]
    if bad:
        import logging

        logging.getLogger(__name__).warning("transcriber: native kernels: %s", "; ".join(bad))
    return Ops(k, st), st


def first_run_note() -> Optional[str]:
    """One line for a run's output when the kernels do not serve (not built, a failed build, a
    self-check that crashed), given once per reason (a marker in the cache folder); None when
    they serve, were turned off on purpose ($TRANSCRIBER_KERNELS=off), or off the CPU."""
    st = status()
    if st.path is not None or not st.reason or st.reason.startswith(("off (", "not used on")):
        return None
    import hashlib

    from transcriber.native.selfcheck import folder

    marker = folder() / f"told-{hashlib.sha256(st.reason.encode()).hexdigest()[:16]}"
    if marker.exists():
        return None
    from transcriber.cachedir import private_write

    try:
        private_write(marker, "")
    except OSError:
        pass  # told again next run: better than never
    return f"note: {st.line()} (said once)"


def reset() -> None:
    """Forget the loaded state (tests that change TRANSCRIBER_KERNELS)."""
    global _ops, _status, _settings
    with _lock, _settings_lock:
        _ops = _status = _settings = None
