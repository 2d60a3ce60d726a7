"""Inference: how a loaded Whisper runs on this machine, behind one interface.

    inference = inference_for(model)          # native/inference.py: chosen once per model
    features = inference.encode(mel)          # (B, 2*S, n_mels) -> (B, S, D)
    state = inference.start(features)         # the audio's cross-attention keys and values
    logits, state, weights = inference.decode(tokens, state, want_weights=..., want_logits=...)

``MLXInference`` (here) runs the model on MLX's own ops, with the sgemv of the BLAS bound into
MLX for the vocabulary projection of a row or two. ``NativeInference`` (native/inference.py)
serves what the native CPU kernels can and hands the rest to this one. The decoding code talks
to an inference only; the model (whisper.py) is a plain MLX module that knows neither.
"""

from __future__ import annotations

from typing import Collection, Sequence, Union

import mlx.core as mx

from ..native import blas
from .fastmath import HostKernels
from .state import DecoderState
from .whisper import Whisper


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
