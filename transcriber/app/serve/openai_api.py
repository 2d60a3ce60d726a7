"""OpenAI's audio API, the protocol most speech clients and servers speak (Open WebUI, Home
Assistant-style clients, subgen, WhisperLiveKit, speaches; the ``openai`` Python client):

- ``POST /v1/audio/transcriptions``: multipart ``file``, ``model``, ``language``, ``prompt``,
  ``response_format`` (json, text, srt, verbose_json, vtt, and ``diarized_json``: segments
  that break where the speaker changes, each with its ``speaker``, A, B, ... in order of first
  speech, as OpenAI labels them; the speaker pass, ``--speakers``), ``temperature``,
  ``timestamp_granularities[]`` (word, segment: with verbose_json), ``chunking_strategy``
  (``auto``: OpenAI's chunks chosen by voice activity; here ``--vad``: only the speech decoded);
- ``POST /v1/audio/translations``: the same but ``language`` and the granularities; the text in
  English (a multilingual model);
- ``GET /v1/models``: the installed models, as OpenAI lists models.

``model`` is an installed model's name (``transcribe models``), or ``whisper-1``, OpenAI's name,
for the service's own. A request is a job in the same store as ``/asr``'s and answered from it
when the same audio and options come again. ``temperature`` 0 (the default) is Whisper's
fallback schedule, as OpenAI's is; above 0, that one sampling temperature. With the header
``Prefer: respond-async`` (RFC 7240) the answer is a 202 at once with the job's id and links, as
``/asr?async=true``'s (jobs_api.py). Any other field, or a
value the service cannot honour, is a 400 in OpenAI's error shape naming the parameter
(``{"error": {"message", "type", "param", "code"}}``, guard.py's ``error``); the token, when
the service has one, is the client's API key (``Authorization: Bearer``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.datastructures import UploadFile

from transcriber import FORMATS, LANGUAGES, OutputOptions, Transcript, check_model_options, list_models

from transcriber.app.serve.jobs_api import accepted
from transcriber.app.serve.service import RequestError, Service

RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
DIARIZED = "diarized_json"  # (transcriptions only, as OpenAI's)
GRANULARITIES = ("word", "segment")
SERVICE_MODEL = "whisper-1"  # OpenAI's model name: the service's own model
FIELDS = {"file", "model", "language", "prompt", "response_format", "temperature", "timestamp_granularities[]",
          "chunking_strategy"}
TRANSLATION_FIELDS = {"file", "model", "prompt", "response_format", "temperature"}


def openai_routes(app: FastAPI, service: Service) -> None:
    @app.get("/v1/models", tags=["OpenAI"])
    async def models():
        names = await asyncio.to_thread(installed_models, service)
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "transcriber"}
                                           for name in names]}

    @app.post("/v1/audio/transcriptions", tags=["OpenAI"])
    async def transcriptions(request: Request):
        return await _answer(request, service, "transcribe")

    @app.post("/v1/audio/translations", tags=["OpenAI"])
    async def translations(request: Request):
        return await _answer(request, service, "translate")


def installed_models(service: Service) -> list[str]:
    """``whisper-1`` (the service's model), the service's model, then every other installed one."""
    others = [m.name for m in list_models().models if m.installed and m.name != service.settings.model]
    return [SERVICE_MODEL, service.settings.model, *others]


async def _answer(request: Request, service: Service, task: str):
    form = await request.form()
    try:
        upload, asked = _read(form, service, task)
        spec = _spec(service, task, asked)
        media = await asyncio.to_thread(service.spool.save, upload.file, False, spec.fingerprint(), upload.filename)
        job = await asyncio.to_thread(service.accept, media, spec, service.spool.out)  # in the store first
        if "respond-async" in request.headers.get("prefer", "").lower():
            output = {"text": "txt", "srt": "srt", "vtt": "vtt"}.get(asked["response_format"], "json")
            return JSONResponse(await asyncio.to_thread(accepted, service, job, output), status_code=202)
        timeline = await asyncio.wrap_future(service.transcribe(job, "json"))
    finally:
        await form.close()
    return respond(timeline, asked["response_format"], asked["granularities"], task)


def _read(form, service: Service, task: str) -> tuple[UploadFile, dict]:
    """The upload and the request's parameters; RequestError (400) naming the first one it
    cannot take."""
    known = FIELDS if task == "transcribe" else TRANSLATION_FIELDS
    unknown = sorted(set(form.keys()) - known)
    if any(name.startswith("chunking_strategy[") for name in unknown):  # (a server_vad object's fields)
        raise RequestError(400, "chunking_strategy takes auto (voice activity: --vad), not an object",
                           "chunking_strategy")
    if unknown:
        raise RequestError(400, f"this service does not take {unknown[0]!r}", unknown[0])
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise RequestError(400, "a file is needed: multipart field 'file'", "file")
    model = _one(form, "model")
    if not model:
        raise RequestError(400, f"model is needed: {SERVICE_MODEL} (the service's) or an installed model", "model")
    if model != SERVICE_MODEL and model != service.settings.model:
        installed = installed_models(service)  # (the catalog looked at once, and only when another is named)
        if model not in installed:
            raise RequestError(404, f"the model {model!r} is not installed here: one of {', '.join(installed)}",
                               "model")
    language = _one(form, "language") or None
    if language is not None and language not in LANGUAGES:
        raise RequestError(400, f"unknown language {language!r}: one of Whisper's codes", "language")
    response_format = _one(form, "response_format") or "json"
    formats = RESPONSE_FORMATS + ((DIARIZED,) if task == "transcribe" else ())
    if response_format not in formats:
        raise RequestError(400, f"response_format takes one of {', '.join(formats)}", "response_format")
    chunking = _one(form, "chunking_strategy")
    if chunking not in (None, "auto"):
        raise RequestError(400, "chunking_strategy takes auto (voice activity: --vad) only", "chunking_strategy")
    granularities = form.getlist("timestamp_granularities[]")
    if [g for g in granularities if g not in GRANULARITIES]:
        raise RequestError(400, "timestamp_granularities[] takes word and/or segment", "timestamp_granularities[]")
    if granularities and response_format != "verbose_json":
        raise RequestError(400, "timestamp_granularities[] needs response_format verbose_json",
                           "timestamp_granularities[]")
    return upload, {"model": None if model == SERVICE_MODEL else model, "language": language,
                    "prompt": _one(form, "prompt") or None, "response_format": response_format,
                    "temperature": _temperature(_one(form, "temperature")),
                    "granularities": tuple(granularities) or ("segment",), "vad": chunking == "auto"}


def _one(form, name: str) -> Optional[str]:
    value = form.get(name)
    if value is not None and not isinstance(value, str):
        raise RequestError(400, f"{name} is a form field, not a file", name)
    return value.strip() if value is not None else None


def _temperature(text: Optional[str]) -> Optional[tuple[float, ...]]:
    """None (the fallback schedule) for 0 or nothing; else that one temperature."""
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise RequestError(400, f"temperature takes a number from 0 to 1, not {text!r}", "temperature") from None
    if not 0 <= value <= 1:
        raise RequestError(400, f"temperature takes a number from 0 to 1, not {text!r}", "temperature")
    return None if value == 0 else (value,)


def _spec(service: Service, task: str, asked: dict):
    """The job spec; what the model or mode cannot do (an English-only model asked to
    translate, a temperature in streaming mode) is a 400 naming the parameter."""
    try:
        speakers = {"speakers": True} if asked["response_format"] == DIARIZED else None
        spec = service.spec(task, asked["language"], asked["prompt"], "json", model=asked["model"],
                            temperatures=asked["temperature"], vad=asked["vad"], speakers=speakers)
        check_model_options(spec.model, language=asked["language"], task=task)
        return spec
    except ValueError as e:
        said = str(e)
        param = next((p for p in ("temperature", "language", "prompt") if p in said), "model")
        raise RequestError(400, said, param) from None


def respond(timeline: str, response_format: str, granularities: tuple[str, ...], task: str):
    """The answer in ``response_format``, made from the job's JSON word timeline."""
    data = json.loads(timeline) if timeline.strip() else {"text": "", "language": "en", "duration": 0.0,
                                                           "segments": []}
    text = data["text"].strip()
    if response_format == "json":
        return JSONResponse({"text": text})
    if response_format == "text":
        return PlainTextResponse(text + "\n" if text else "")
    if response_format in ("srt", "vtt"):
        transcript = Transcript.from_dict(data)
        return PlainTextResponse(FORMATS[response_format].render(transcript, OutputOptions()),
                                 media_type=FORMATS[response_format].media_type)
    if response_format == DIARIZED:
        return JSONResponse({"task": task, "duration": data["duration"], "text": text, "segments": diarized(data),
                             "usage": {"type": "duration", "seconds": data["duration"]}})
    language = "en" if task == "translate" else data["language"]  # OpenAI's: the text's language
    verbose = {"task": task, "language": LANGUAGES.get(language, language),
               "duration": data["duration"], "text": text}
    if "segment" in granularities:
        verbose["segments"] = [{k: v for k, v in s.items() if k != "words"} for s in data["segments"]]
    if "word" in granularities:
        verbose["words"] = [{"word": w["word"].strip(), "start": w["start"], "end": w["end"]}
                            for s in data["segments"] for w in s["words"]]
    return JSONResponse(verbose)


def diarized(data: dict) -> list[dict]:
    """OpenAI's diarized segments from a labelled JSON timeline: each segment's words in runs of
    one speaker, a segment each; our "Speaker N" is OpenAI's N-th capital letter."""
    runs = []
    for segment in data["segments"]:
        words = segment.get("words") or [{**segment, "word": segment["text"]}]
        for word in words:
            speaker = _letter(word.get("speaker") or segment.get("speaker"))
            if runs and runs[-1]["speaker"] == speaker and runs[-1]["segment"] is segment:
                runs[-1].update(end=word["end"], text=runs[-1]["text"] + word["word"])
            else:
                runs.append({"segment": segment, "speaker": speaker, "start": word["start"], "end": word["end"],
                             "text": word["word"]})
    return [{"type": "transcript.text.segment", "id": f"seg_{i}", "start": run["start"], "end": run["end"],
             "text": run["text"].strip(), "speaker": run["speaker"]} for i, run in enumerate(runs)]


def _letter(label: Optional[str]) -> str:
    """"Speaker 2" -> "B" (past Z: "AA", ...); a label of another shape as it is."""
    number = label.rsplit(" ", 1)[-1] if label else ""
    if not number.isdigit() or int(number) < 1:
        return label or "A"
    n, letters = int(number), ""
    while n:
        n, rest = divmod(n - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters
