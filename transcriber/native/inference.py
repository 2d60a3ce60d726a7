"""NativeInference: a Whisper on the native CPU kernels where they serve, MLX's ops elsewhere;
and ``inference_for``, the one place that chooses how a model runs.

The choice is made once per model (and again after ``native.reset``): off the CPU, or where
the kernels are not built, refused or turned off, ``MLXInference`` (model/inference.py);
else a ``NativeInference`` holding the decoder's one-token step (decoder.py) and multi-token
pass (prefill.py) for this model, with the settings read once (``native.kernel_settings``).
Per call it still hands a shape the kernels refuse (batch padding in a prompt) to MLX;
language detection calls MLX's decoder itself (context.py).
"""

from __future__ import annotations

from typing import Collection, Sequence, Union

import mlx.core as mx

from ..model.fastmath import HostKernels
from ..model.inference import MLXInference
from ..model.state import DecoderState
from ..model.whisper import Whisper, weight_layers
from . import Ops, encoder_threads, kernel_settings, ops


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
