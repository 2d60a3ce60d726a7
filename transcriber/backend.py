"""The backend: how a loaded Whisper runs on this machine, chosen here and only here.

    model = load_model("tiny.en")             # model/loader.py's model, MLX's sgemm bound first
    inference = inference_for(model)          # chosen once per model
    features = inference.encode(mel)          # (B, 2*S, n_mels) -> (B, S, D)
    state = inference.start(features)         # the audio's cross-attention keys and values
    logits, state, weights = inference.decode(tokens, state, want_weights=..., want_logits=...)

This module sits above ``model/`` (a plain MLX Whisper that knows no backend) and ``native/``
(the CPU kernels, which know no model): neither imports the other, and the engines talk to an
inference only.

``MLXInference`` runs the model on MLX's own ops, with the sgemv of the BLAS bound into MLX for
the vocabulary projection of a row or two (every platform; the reference the native one is
checked against). ``NativeInference`` serves what the native CPU kernels can and hands the rest
to MLX's ops. The choice is made once per model (and again after ``native.reset``): off the
CPU, or where the kernels are not built, refused or turned off, ``MLXInference``; else a
``NativeInference`` holding the decoder's one-token step (native/decoder.py) and multi-token
pass (native/prefill.py) for this model, with the settings read once
(``native.kernel_settings``). Per call it still hands a shape the kernels refuse (batch padding
in a prompt) to MLX; language detection calls MLX's decoder itself (engines/context.py).
"""

from __future__ import annotations

import os
from typing import Collection, Sequence, Union

import mlx.core as mx

from transcriber.constants import DEFAULT_MODEL
from transcriber.model import loader
from transcriber.model.fastmath import HostKernels
from transcriber.model.state import DecoderState
from transcriber.model.whisper import Whisper, weight_layers
from transcriber.native import Ops, blas, encoder_threads, kernel_settings, ops


def load_model(model: str | os.PathLike = DEFAULT_MODEL, dtype: mx.Dtype = mx.float32) -> Whisper:
    """``model/loader.py``'s ``load_model``, after binding MLX's matrix product to the fastest
    BLAS of the machine (``blas.bind_once``: the first load does it, before any matmul)."""
    blas.bind_once()
    return loader.load_model(model, dtype)


class MLXInference:
    """The model on MLX's float32 ops (every platform; the reference the native one is checked
    against)."""

    def __init__(self, model: Whisper):
        self.model = model
        self.kernels = HostKernels(matvec=blas.host_matvec())

    def encode(self, mel: mx.array) -> mx.array:
        """mel (B, 2*S, n_mels) -> audio features (B, S, D)."""
        return self.model.encoder(mel, self.kernels)

    def start(self, features: mx.array) -> DecoderState:
        """The decoder state of one window's (or a batch of windows') features (B, S, D): its
        cross-attention keys and values, no tokens yet."""
        return self.model.decoder.start(features)

    def decode(self, tokens: mx.array, state: DecoderState, want_weights: Union[bool, Collection[int]] = False,
               want_logits: Union[bool, Sequence[int]] = True):
        """tokens (B, T) -> (logits (B, T, V) or the positions ``want_logits`` lists, the new
        state, cross-attention per layer or None): ``TextDecoder.__call__``'s contract."""
        return self.model.decoder(tokens, state, want_weights, want_logits, self.kernels)


class NativeInference(MLXInference):
    """The encoder, the cross-attention keys and values, and the decoder's steps and passes on
    the kernels that passed their self-checks (``Ops``); MLX's ops for the rest."""

    def __init__(self, model: Whisper, found: Ops):
        super().__init__(model)
        self.ops = found
        self.kernels = HostKernels(softmax=found.softmax_inplace(), attention=found.encoder_attention(),
                                   matvec=self.kernels.matvec)
        precision = kernel_settings().weights
        self.step = found.decoder_step(model.decoder, precision)
        self.prefill = found.decoder_pass(model.decoder, precision)

    def encode(self, mel: mx.array) -> mx.array:
        """The bf16 encoder where it serves (packed once per encoder: ``Ops.encoder``)."""
        run = self.ops.encoder(self.model.encoder)
        return run(mel) if run is not None else super().encode(mel)

    def start(self, features: mx.array) -> DecoderState:
        """The cross-attention keys and values on the bf16 GEMM where it serves."""
        if self.step is None or self.step.cross is None:
            return super().start(features)
        cross_kv = self.step.cross_keys_values(features, encoder_threads())
        return DecoderState(cross_kv, [None] * len(self.model.decoder.blocks))

    def decode(self, tokens: mx.array, state: DecoderState, want_weights: Union[bool, Collection[int]] = False,
               want_logits: Union[bool, Sequence[int]] = True):
        """A one-token step or a batch-1 pass on the kernels where they take the shape."""
        layers = weight_layers(want_weights, len(self.model.decoder.blocks))
        if self.step is not None and self.step.supports(tokens, state, want_logits):
            return self.step.step(tokens, state, layers)
        if self.prefill is not None and self.prefill.supports(tokens, state):
            return self.prefill(tokens, state, layers, want_logits,
                                lambda: super(NativeInference, self).decode(tokens, state, layers, want_logits))
        return super().decode(tokens, state, layers, want_logits)


def inference_for(model: Whisper) -> MLXInference:
    """How ``model`` runs here: chosen on first use and kept on the model, chosen again when
    the kernels were reloaded (``native.reset``: tests, a changed setting)."""
    found = ops() if mx.default_device() == mx.cpu else None
    kept = getattr(model, "_inference", None)
    if kept is not None and kept[0] is found:
        return kept[1]
    chosen = NativeInference(model, found) if found is not None else MLXInference(model)
    object.__setattr__(model, "_inference", (found, chosen))
    return chosen
