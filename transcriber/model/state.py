"""DecoderState: what the decoder keeps between calls for one audio window, or for a batch of
windows decoded side by side (their rows padded to one length and masked).

Plain MLX arrays; the model (whisper.py) and every inference (model/inference.py,
native/inference.py) hand it back and forth. Shapes: B rows, H heads, D/H head width,
S audio positions (20 ms each), T tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import mlx.core as mx

# One layer's attention keys and values, each (B, H, T, D/H).
LayerCache = tuple[mx.array, mx.array]


@dataclass
class DecoderState:
    """What the decoder keeps between calls for one audio window (or a batch of them).

    cross_kv: per layer, the audio's keys, transposed, (B, H, D/H, S) and values (B, H, S, D/H):
    computed once per window (``MultiHeadAttention.cross_keys_values``).
    self_kv: per layer, the tokens' keys and values so far (B, H, T_past, D/H) each.
    pad, audio_len: rows of different windows in one batch (decoding/side_by_side.py): per row, the
    padded positions at the left of self_kv, and the real audio positions of cross_kv (the rest
    is padding); both (B,) int32, masked out in attention. None: no padding.
    """

    cross_kv: list[tuple[mx.array, mx.array]]
    self_kv: list[Optional[LayerCache]]
    pad: Optional[mx.array] = None
    audio_len: Optional[mx.array] = None

    @property
    def offset(self) -> int:
        first = self.self_kv[0]
        return 0 if first is None else first[0].shape[2]

    @property
    def audio_span(self) -> int:
        """Audio positions in cross_kv (padding included)."""
        return self.cross_kv[0][1].shape[2]

    def select(self, indices: mx.array) -> "DecoderState":
        """Reorder the batch (beam search): keep rows ``indices`` of the self-attention cache."""
        self_kv = [None if c is None else (c[0][indices], c[1][indices]) for c in self.self_kv]
        return DecoderState(self.cross_kv, self_kv)

    def keep_rows(self, indices: mx.array) -> "DecoderState":
        """Rows ``indices`` of a batch of windows: their audio, their tokens, their padding."""
        take = lambda pair: (pair[0][indices], pair[1][indices])  # noqa: E731
        return DecoderState([take(c) for c in self.cross_kv], [None if c is None else take(c) for c in self.self_kv],
                            None if self.pad is None else self.pad[indices],
                            None if self.audio_len is None else self.audio_len[indices])

    def truncate(self, length: int) -> "DecoderState":
        """Forget cached positions from ``length`` on (a rewind, or a shared prompt reused)."""
        self_kv = [None if c is None or length == 0 else (c[0][:, :, :length], c[1][:, :, :length])
                   for c in self.self_kv]
        return DecoderState(self.cross_kv, self_kv)

    @classmethod
    def stack(cls, states: list["DecoderState"]) -> "DecoderState":
        """States of different windows (batch 1, or batches of windows already) as one batch:
        token caches padded on the left to one length, audio on the right to one span."""
        lengths = [s.offset for s in states]
        spans = [s.audio_span for s in states]
        width, span = max(lengths), max(spans)

        def pad(a: mx.array, axis: int, before: int, after: int) -> mx.array:
            widths = [(0, 0)] * a.ndim
            widths[axis] = (before, after)
            return mx.pad(a, widths) if before or after else a

        def rows(s: "DecoderState") -> int:
            return s.cross_kv[0][1].shape[0]

        layers = range(len(states[0].cross_kv))
        self_kv = [tuple(mx.concatenate([pad(s.self_kv[i][k], 2, width - n, 0) for s, n in zip(states, lengths)])
                         for k in (0, 1)) for i in layers]
        # keys are transposed: their audio axis is the last one
        cross_kv = [tuple(mx.concatenate([pad(s.cross_kv[i][k], 3 - k, 0, span - n) for s, n in zip(states, spans)])
                          for k in (0, 1)) for i in layers]
        pads = [(s.pad if s.pad is not None else mx.zeros((rows(s),), mx.int32)) + (width - n)
                for s, n in zip(states, lengths)]
        audio = [s.audio_len if s.audio_len is not None else mx.full((rows(s),), n, mx.int32)
                 for s, n in zip(states, spans)]
        return cls(cross_kv, self_kv, mx.concatenate(pads), mx.concatenate(audio))

    def compact(self) -> "DecoderState":
        """Drop the padding every row has (after rows left the batch)."""
        if self.pad is None:
            return self
        cut = int(mx.min(self.pad).item())
        span = int(mx.max(self.audio_len).item())
        self_kv = [None if c is None else (c[0][:, :, cut:], c[1][:, :, cut:]) for c in self.self_kv]
        cross_kv = [(k_t[..., :span], v[:, :, :span]) for k_t, v in self.cross_kv]
        if self_kv[0] is not None and self_kv[0][0].shape[0] == 1:  # one row left: no padding at all
            return DecoderState(cross_kv, self_kv)
        return DecoderState(cross_kv, self_kv, self.pad - cut, self.audio_len)
