"""What both decoding modes ask of a model besides decoding: its tokenizers, audio encoding,
language detection and the no-speech probability. One place for each."""

from __future__ import annotations

from typing import Optional

import mlx.core as mx
import numpy as np

from transcriber.constants import HOP_LENGTH, INPUT_STRIDE, N_FRAMES, N_SAMPLES, SAMPLE_RATE
from transcriber.engines.decoding.filters import log_softmax
from transcriber.model.mel import log_mel_spectrogram
from transcriber.backend import MLXInference
from transcriber.model.state import DecoderState
from transcriber.model.whisper import Whisper
from transcriber.backend import inference_for
from transcriber.model.tokenizer import Tokenizer, load_tokenizer


# A window shorter than 30 s (a short file, the end of a long one) is encoded at its own length
# plus this much silence, not padded to 30 s: the encoder's cost falls with its input. Whisper
# must see silence after the speech, or it loops. Measured with tiny.en, one-shot, on short_en:
# no padding 213% WER, 1 s 111%, 5 s and 10 s 6.67% as with the full 30 s (time 9.9 and 11.5 s
# against 21.1 s); on the dev set (short_en + long_en) 10 s keeps the median word start error
# at 0.110 s where 5 s moved it to 0.130 s.
SHORT_WINDOW_PAD = 10 * SAMPLE_RATE


def _log_probs(logits) -> np.ndarray:
    """(V,) logits -> float64 log probabilities."""
    return log_softmax(np.asarray(logits, dtype=np.float64)[None])[0]


def check_language(name: str, multilingual: bool, language: Optional[str], task: str) -> None:
    """English-only models transcribe English only: anything else is a ValueError naming the model."""
    if multilingual:
        return
    if language not in (None, "en"):
        raise ValueError(f"model {name} is English-only; language {language!r} needs a multilingual model")
    if task != "transcribe":
        raise ValueError(f"model {name} is English-only; --task {task} needs a multilingual model")


class WhisperContext:
    """A model and a task. ``language`` None means: detect it (multilingual models only;
    English-only models always transcribe English)."""

    def __init__(self, model: Whisper, task: str = "transcribe", language: Optional[str] = None):
        check_language(model.name, model.is_multilingual, language, task)
        self.model, self.task = model, task
        self.language = language if model.is_multilingual else "en"
        self._tokenizers: dict[str, Tokenizer] = {}

    def tokenizer(self, language: Optional[str] = None) -> Tokenizer:
        """The tokenizer for ``language`` (default: the context's, English until detected)."""
        language = language or self.language or "en"
        if language not in self._tokenizers:
            m = self.model
            self._tokenizers[language] = load_tokenizer(m.info.folder, multilingual=m.is_multilingual,
                                                        num_languages=m.num_languages, language=language,
                                                        task=self.task)
        return self._tokenizers[language]

    def encode(self, mel) -> DecoderState:
        """Encoder and cross-attention keys/values for one window: mel (n_frames, n_mels),
        normalised log-mel (numpy or MLX). Evaluated here, so the cost shows where it is paid."""
        mel = mel if isinstance(mel, mx.array) else mx.array(mel)
        inference = inference_for(self.model)
        base = inference.start(inference.encode(mel[None]))
        mx.eval(base.cross_kv)
        return base

    def encode_window(self, samples: np.ndarray) -> tuple[DecoderState, int]:
        """Up to 30 s of samples, zero-padded by ``SHORT_WINDOW_PAD`` (at most to 30 s): the
        decoder's base state, and how many of the window's mel frames are real audio."""
        n_frames = min(N_FRAMES, len(samples) // HOP_LENGTH)
        step = HOP_LENGTH * INPUT_STRIDE  # whole encoder positions
        total = min(N_SAMPLES, -(-(len(samples) + SHORT_WINDOW_PAD) // step) * step)
        mel = log_mel_spectrogram(samples, self.model.dims.n_mels, padding=total - len(samples))
        return self.encode(mel[: total // HOP_LENGTH]), n_frames

    def detect_language(self, base: DecoderState) -> tuple[str, float, float]:
        """The most likely language of an encoded window: (code, its probability, no-speech
        probability), from the logits after <|startoftranscript|>, on MLX's float32 decoder
        (the language probabilities are compared with thresholds and shown to users)."""
        tok = self.tokenizer("en")
        logits, _, _ = MLXInference(self.model).decode(mx.array([[tok.sot]]), base)
        logprobs = _log_probs(logits[0, -1])
        ids = np.array(tok.all_language_tokens)
        language_probs = np.exp(log_softmax(logprobs[ids][None])[0])
        best = int(language_probs.argmax())
        return tok.all_language_codes[best], float(language_probs[best]), float(np.exp(logprobs[tok.no_speech]))
