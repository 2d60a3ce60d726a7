"""``transcribe serve``'s HTTP routes (FastAPI): whisper-asr-webservice's API, the status page,
the media servers' webhooks.

The API is the one Bazarr's "Whisper" provider speaks (ahmetoner/whisper-asr-webservice),
parameter for parameter:

- ``POST /asr?task=&language=&initial_prompt=&output=&encode=&word_timestamps=&vad_filter=`` with a
  multipart ``audio_file``: the subtitles (txt, vtt, srt, tsv or json) as an attachment named
  ``<upload>.<output>``; ``encode=false``: the body is raw 16 kHz mono s16le PCM (Bazarr's own
  ffmpeg made it); ``vad_filter=true``: only the speech Silero VAD finds is decoded (--vad);
  ``diarize=true`` (with ``min_speakers``/``max_speakers``): speaker labels (--speakers);
  ``async=true``: a 202 with the job's id at once (jobs_api.py). Any unknown parameter is a 400
  naming it: none is silently ignored.
- ``POST /detect-language?encode=`` with ``audio_file``: ``{"detected_language": "english",
  "language_code": "en", "confidence": 0.98}``.
- ``GET /status``: the version (Bazarr's "Test connection"), without the token.

OpenAI's audio API is openai_api.py's, jobs over HTTP jobs_api.py's, the status page page.py's,
the media servers' webhooks hooks.py's.

Every error is a JSON ``{"error": "one line"}`` with a 4xx status (413 for an upload over the
limit, 401 without the token, 421 for a Host that is not the service's, 403 for a cross-site
request: guard.py) or 5xx (507: the spool is full; 503: stopping), never a traceback. With a token, a client sends it as ``Authorization:
Bearer TOKEN``, as ``?token=TOKEN``, or in the path: ``/t/TOKEN/asr`` (Bazarr's provider takes
only an endpoint URL, so its endpoint is ``http://host:9000/t/TOKEN``).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
import traceback
from importlib.metadata import version
from pathlib import Path
from typing import Literal, Optional
from urllib.parse import parse_qs, quote

from fastapi import FastAPI, File, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from transcriber import FORMATS, LANGUAGES, RunFault, TranscriberError

from transcriber.app.serve import page
from transcriber.app.serve.guard import RequestGuard, error
from transcriber.app.serve.hooks import hook_routes
from transcriber.app.serve.jobs_api import HTTP_FORMATS, accepted, jobs_routes
from transcriber.app.serve.openai_api import openai_routes
from transcriber.app.serve.service import RequestError, Service

# whisper-asr-webservice's ``output``: the formats the registry offers over HTTP, each with its media type
OUTPUTS = HTTP_FORMATS
Language = Literal[tuple(sorted(LANGUAGES))]  # the enum of the API's schema, as whisper-asr-webservice's
Output = Literal[OUTPUTS]
OVER_LIMIT = "transcriber.over_limit"  # the scope's mark of a body cut at the limit (SizeLimit)
# Answered without the token: the version only (Bazarr's "Test connection" asks the endpoint's
# host for /status and keeps no path, so no /t/TOKEN prefix either).
OPEN_PATHS = ("/status",)


class TokenGate:
    """ASGI middleware: with a token set, every request carries it (header, query or ``/t/TOKEN``
    path prefix, which is taken off before routing) or gets a 401."""

    def __init__(self, app, token: Optional[str]):
        self.app, self.token = app, token

    async def __call__(self, scope, receive, send):
        if self.token is None or scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        prefix = f"/t/{self.token}"
        path = scope.get("path", "")
        if path == prefix or path.startswith(prefix + "/"):
            scope = {**scope, "path": path[len(prefix):] or "/", "root_path": scope.get("root_path", "") + prefix}
            return await self.app(scope, receive, send)
        if self._given(scope):
            return await self.app(scope, receive, send)
        if path in OPEN_PATHS and scope.get("method") in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        return await error(401, "a token is needed: Authorization: Bearer TOKEN, ?token=TOKEN or /t/TOKEN/...",
                           path)(scope, receive, send)

    def _given(self, scope) -> bool:
        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization", b"").decode("latin-1")
        query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
        given = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else query
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())


class SizeLimit:
    """ASGI middleware: a request body over ``limit`` bytes is a 413 before it is all read (the
    multipart parser would otherwise spool all of it to disk first)."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.limit:
            return await self._refuse(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:  # the form parser turns any error into a 400: the handler reads this mark
                scope[OVER_LIMIT] = self.limit
                raise RequestError(413, f"the upload is over the limit of {self.limit} bytes")
            return message

        return await self.app(scope, counted, send)

    async def _refuse(self, scope, receive, send):
        await error(413, f"the upload is over the limit of {self.limit} bytes", scope.get("path", ""))(
            scope, receive, send)


def create_app(service: Service) -> FastAPI:
    app = FastAPI(title="transcriber", summary="Speech to subtitles with MLX Whisper: whisper-asr-webservice's API, "
                  "a status page and media-server hooks", docs_url="/docs")
    _errors(app)
    _asr_routes(app, service)
    page.routes(app, service)
    hook_routes(app, service)
    openai_routes(app, service)
    jobs_routes(app, service)
    # multipart's framing on top of the file: a body this much over the upload limit is refused unread
    app.add_middleware(SizeLimit, limit=service.settings.max_upload_bytes + (1 << 20))
    app.add_middleware(TokenGate, token=service.settings.token)
    app.add_middleware(RequestGuard, bound=service.settings.host, allowed_hosts=service.settings.allowed_hosts)
    return app


def _errors(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "request"
        return error(422, f"{where}: {first.get('msg', 'invalid')}", request.url.path, where)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        if OVER_LIMIT in request.scope:
            return error(413, f"the upload is over the limit of {request.scope[OVER_LIMIT]} bytes", request.url.path)
        return error(exc.status_code, exc.detail, request.url.path)

    @app.exception_handler(RequestError)
    async def refused(request: Request, exc: RequestError):
        return error(exc.status, str(exc), request.url.path, exc.param)

    @app.exception_handler(RunFault)
    async def fault(request: Request, exc: RunFault):  # the machine's or the model's, not the upload's
        return error(503, str(exc), request.url.path)

    @app.exception_handler(TranscriberError)
    async def library_error(request: Request, exc: TranscriberError):
        return error(400, str(exc), request.url.path)

    @app.exception_handler(ValueError)
    async def bad_value(request: Request, exc: ValueError):
        return error(422, str(exc), request.url.path)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):  # a bug: one line to the client, the trace here
        traceback.print_exception(exc, file=sys.stderr)
        return error(500, f"internal error: {type(exc).__name__}: {exc}", request.url.path)


async def _saved(service: Service, audio_file: UploadFile, encode: bool, options: str = "") -> Path:
    return await asyncio.to_thread(service.spool.save, audio_file.file, not encode, options, audio_file.filename)


# every query parameter of whisper-asr-webservice's /asr, and the token's: any other is refused by name
ASR_PARAMETERS = {"encode", "task", "language", "initial_prompt", "vad_filter", "word_timestamps", "output",
                  "diarize", "min_speakers", "max_speakers", "token", "async"}


def refuse_unknown(given, known, where: str) -> None:
    """RequestError (400) naming the first parameter ``where`` does not take: none is ignored."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise RequestError(400, f"{where} takes no parameter {unknown[0]!r}", unknown[0])


def speaker_options(diarize: bool, min_speakers: Optional[int], max_speakers: Optional[int]) -> dict:
    """whisper-asr-webservice's speaker parameters as the job's speaker options (a count
    without ``diarize=true`` is a 400 naming it, as the CLI's flags are)."""
    for name, value in (("min_speakers", min_speakers), ("max_speakers", max_speakers)):
        if value is not None and not diarize:
            raise RequestError(400, f"{name} needs diarize=true", name)
    return {"speakers": True, "min_speakers": min_speakers, "max_speakers": max_speakers} if diarize else {}


def without_words(text: str) -> str:
    """A JSON output without its words (``word_timestamps=false``, whisper-asr-webservice's
    default): each segment as openai-whisper writes it without word timestamps."""
    data = json.loads(text)
    for segment in data.get("segments", ()):
        segment.pop("words", None)
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def _asr_routes(app: FastAPI, service: Service) -> None:
    @app.get("/status", tags=["Endpoints"])
    async def status():
        """The service's version (Bazarr's "Test connection"), model and mode; no token needed."""
        return {"version": f"transcriber {version('transcriber')}", "model": service.settings.model,
                "mode": service.settings.mode}

    @app.post("/asr", tags=["Endpoints"], response_class=PlainTextResponse)
    async def asr(request: Request,
                  audio_file: UploadFile = File(...),  # noqa: B008 - FastAPI's way
                  encode: bool = Query(True, description="Decode the upload with ffmpeg (false: raw 16 kHz "
                                                         "mono s16le PCM)"),
                  task: Literal["transcribe", "translate"] = Query("transcribe"),
                  language: Optional[Language] = Query(None, description="None: detected"),
                  initial_prompt: Optional[str] = Query(None),
                  vad_filter: bool = Query(False, description="Decode only the speech Silero VAD finds "
                                                              "(music, silence and noise skipped)"),
                  word_timestamps: bool = Query(False, description="JSON: each segment's words with their "
                                                                   "times (words are always timed)"),
                  output: Output = Query("txt"),
                  diarize: bool = Query(False, description="Label who speaks (--speakers): VTT voices, "
                                                           "SRT and TXT names, JSON speaker fields"),
                  min_speakers: Optional[int] = Query(None, description="With diarize: at least this many"),
                  max_speakers: Optional[int] = Query(None, description="With diarize: at most this many"),
                  run_async: bool = Query(False, alias="async", description="Answer at once (202) with the "
                                                                             "job's id and links: GET /jobs/{id}")):
        refuse_unknown(request.query_params, ASR_PARAMETERS, "/asr")
        spec = service.spec(task, language, initial_prompt, output, vad=vad_filter,  # ValueError: 422, before the upload is kept
                            speakers=speaker_options(diarize, min_speakers, max_speakers))
        media = await _saved(service, audio_file, encode, spec.fingerprint())
        job = await asyncio.to_thread(service.accept, media, spec, service.spool.out)  # in the store before the answer
        if run_async:
            return JSONResponse(await asyncio.to_thread(accepted, service, job, output), status_code=202)
        text = await asyncio.wrap_future(service.transcribe(job, output))
        if output == "json" and not word_timestamps:
            text = without_words(text)
        name = quote(f"{Path(audio_file.filename or 'audio').name}.{output}")
        return PlainTextResponse(text, media_type=FORMATS[output].media_type,
                                 headers={"Asr-Engine": "transcriber",
                                          "Content-Disposition": f'attachment; filename="{name}"'})

    @app.post("/detect-language", tags=["Endpoints"])
    async def detect_language(audio_file: UploadFile = File(...),  # noqa: B008
                              encode: bool = Query(True)):
        media = await _saved(service, audio_file, encode)
        code, confidence = await asyncio.wrap_future(service.detect_language(media))
        return {"detected_language": LANGUAGES[code], "language_code": code, "confidence": confidence}

