"""transcriber: media -> words -> subtitles, on MLX Whisper.

    import transcriber
    model = transcriber.load_model("tiny.en")
    t = transcriber.transcribe("talk.mp3", model=model)      # one-shot -> Transcript
    print(t.text)
    for word in transcriber.stream("talk.mp3", model):       # streaming -> Words as committed
        print(word.start, word.text, word.emitted_at)
"""

import mlx.core as _mx  # noqa: F401  (loads libmlx.so, whose sgemm slot blas.apply rewrites)

from . import blas as _blas

_blas.apply()  # after mlx.core is loaded, before any matmul: see blas.py

from .errors import AudioError, ModelError, OutputError, TranscriberError  # noqa: E402
from .model.loader import DEFAULT_MODEL, load_model as _load_model  # noqa: E402
from .types import Segment, Transcript, Word  # noqa: E402
from .decoding.options import DecodingOptions  # noqa: E402
from .transcribe import TranscribeOptions, Transcriber  # noqa: E402
from .transcribe import transcribe as _transcribe  # noqa: E402
from .streaming import StreamingOptions, StreamingSession  # noqa: E402
from .streaming import stream as _stream  # noqa: E402

_models: dict = {}


def load_model(name=DEFAULT_MODEL):
    """Load (and cache in this process) a model by name or folder."""
    key = str(name)
    if key not in _models:
        _models[key] = _load_model(name)
    return _models[key]


def transcribe(path, model=DEFAULT_MODEL, *, language=None, task="transcribe", beam_size=None,
               word_timestamps=True, initial_prompt=None, on_progress=None,
               options: TranscribeOptions | None = None) -> Transcript:
    """Transcribe one media file in one-shot mode. ``model`` is a name, a folder or a loaded model."""
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        model = load_model(model)
    if options is None:
        options = TranscribeOptions(
            decoding=DecodingOptions(task=task, language=language, beam_size=beam_size),
            word_timestamps=word_timestamps, initial_prompt=initial_prompt)
    return _transcribe(path, model, options, on_progress=on_progress)


def stream(path, model=DEFAULT_MODEL, *, options: StreamingOptions | None = None, **kwargs):
    """Replay one media file through the AlignAtt streaming decoder; yields each ``Word`` as it
    is committed (with ``emitted_at``). See ``transcriber.streaming.stream`` for the keywords."""
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        model = load_model(model)
    return _stream(path, model, options or StreamingOptions(), **kwargs)


__all__ = ["transcribe", "stream", "StreamingOptions", "StreamingSession", "load_model", "Transcript", "Segment", "Word", "TranscribeOptions",
           "DecodingOptions", "Transcriber", "TranscriberError", "AudioError", "ModelError", "OutputError"]
