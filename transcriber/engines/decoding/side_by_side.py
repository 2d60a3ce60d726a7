"""Greedy decoding of several audio windows side by side (one-shot mode over several files).

On a CPU a decode step of a small model is bound by reading its weights: the decoder and the
80 MB vocabulary projection of tiny.en are read once per step, for one row or for four. So the
windows of several files, each at its own point, are stepped together:

    windows = WindowsSideBySide(model)
    windows.add(key, task, base)            # a window joins: its prompt goes through the decoder
    while windows:
        for key, result in windows.step():  # one token for every row; the rows that ended leave
            ...                             # with their DecodingResult; others may join now

A window joins as soon as its prompt is ready and leaves as soon as it ends (end of text, its
token budget, the text context), so no row waits for another and none is decoded past its end.
Each row is the window's own ``loop.Decode`` (its tokens, logit filters, greedy search and end
rules: the step ``decode_loop`` takes alone) after the same ``prompt_pass``; in the decoder the rows' caches are
padded on the left to one length and their audio on the right to one span, and the padding is
masked (``DecoderState.pad``, ``audio_len``). A row gets the tokens ``DecodingTask.run`` gives
it alone, up to float rounding in products of another shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

import mlx.core as mx
import numpy as np

from transcriber.model.state import DecoderState
from transcriber.model.whisper import Whisper
from transcriber.backend import inference_for
from transcriber.engines.decoding.loop import Decode, prompt_pass
from transcriber.engines.decoding.task import DecodingResult, DecodingTask


@dataclass
class _Row:
    key: Hashable
    task: DecodingTask
    no_speech: float
    decode: Decode


class WindowsSideBySide:
    def __init__(self, model: Whisper):
        self.model = model
        self.rows: list[_Row] = []
        self.state: DecoderState | None = None
        self.logits: np.ndarray | None = None  # (rows, V): each row's next-token logits

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, key) -> bool:
        return any(r.key == key for r in self.rows)

    def add(self, key: Hashable, task: DecodingTask, base: DecoderState) -> None:
        """Run the window's prompt through the decoder (batch 1) and add it as a row."""
        assert task.search.side_by_side, "windows side by side are decoded greedily at temperature 0"
        first = prompt_pass(self.model, base, task.initial_tokens, task.sot_index, task.tokenizer)
        decode = Decode(task.initial_tokens, task.search.decoder(), task.filters, 1,
                        task.sample_len, self.model.dims.n_text_ctx)
        self.rows.append(_Row(key, task, first.no_speech_prob, decode))
        self.state = first.state if self.state is None else DecoderState.stack([self.state, first.state])
        self.logits = first.logits if self.logits is None else np.concatenate([self.logits, first.logits])

    def remove(self, key: Hashable) -> None:
        """Forget a row (its file was dropped)."""
        self._keep([j for j, r in enumerate(self.rows) if r.key != key])

    def step(self) -> list[tuple[Hashable, DecodingResult]]:
        """Choose every row's next token (``Decode.choose``); the rows that end leave with
        their results, the others go through the decoder for the next logits."""
        ended, kept = [], []
        for j, row in enumerate(self.rows):
            result = row.decode.choose(self.logits[j:j + 1].copy())
            if result is None:
                kept.append(j)
            else:
                ended.append((row, result))
        self._keep(kept)
        if self.rows:
            last = mx.array([[int(r.decode.tokens[0, -1])] for r in self.rows])
            out, self.state, _ = inference_for(self.model).decode(last, self.state)
            self.logits = np.array(out[:, -1], dtype=np.float32)
        return [(row.key, row.task.result(result.candidates, row.no_speech)) for row, result in ended]

    def _keep(self, indices: list[int]) -> None:
        if len(indices) == len(self.rows):
            return
        self.rows = [self.rows[j] for j in indices]
        if not self.rows:
            self.state, self.logits = None, None
            return
        self.state = self.state.keep_rows(mx.array(indices)).compact()
        self.logits = self.logits[indices]
