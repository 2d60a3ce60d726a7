"""The decode side of ``transcribe serve``: a request becomes a job in the job store, one decode
thread runs the jobs with the model loaded once, and each request waits for its own job.

Why jobs: a request is then what a file given to ``transcribe`` is. It shows in ``transcribe
status`` and on the status page, a restart of the service loses nothing that was decoded
(checkpoints), and a second request for the same audio with the same options is answered from the
store: the upload is kept under its content's hash and its options' fingerprint (``Spool``), so
the store sees the same file and a done job, and only the output asked for is rendered (from the
stored words when that format was not written yet, without the model).

One decode thread: MLX runs one model on all the cores a decode can use (the kernels' and BLAS's
threads), so a second decode at once would only share them; requests wait in a queue, in order.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import queue
import re
import struct
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Optional

import transcriber

from ..domain import DONE, Job
from ..enqueue import enqueue_files
from ..engines import EngineCache
from ..outputs import NO_SPEECH
from ..runner import Runner, StopFlag
from ..spec import JobSpec
from ..store import JobStore, connect

SAMPLE_RATE = 16000  # encode=false: the body is 16 kHz mono s16le PCM (whisper-asr-webservice's rule)
CHUNK = 1 << 20


class RequestError(Exception):
    """A request the service cannot serve: its HTTP status and one line saying why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ServeSettings:
    db: Path
    spool: Path  # the uploads (media/, by content) and their outputs (out/)
    model: str
    mode: str
    max_upload_bytes: int = 2 << 30
    token: Optional[str] = None
    path_map: tuple[tuple[str, str], ...] = ()  # (the media server's prefix, this machine's)
    languages: tuple[str, ...] = ()  # a webhook's wanted subtitle language (the first; default en)
    server_url: Optional[str] = None  # the media server a webhook's item is looked up on
    server_token: Optional[str] = None


def _wav_header(n_bytes: int) -> bytes:
    """A 44-byte RIFF header for ``n_bytes`` of 16 kHz mono s16le PCM."""
    return (b"RIFF" + struct.pack("<I", 36 + n_bytes) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, SAMPLE_RATE, SAMPLE_RATE * 2, 2, 16) + b"data" + struct.pack("<I", n_bytes))


def _suffix(filename: Optional[str]) -> str:
    """A safe extension from the upload's name ("" when it has none we can keep)."""
    suffix = Path(filename or "").suffix.lower()
    return suffix if re.fullmatch(r"\.[a-z0-9]{1,8}", suffix) else ""


class Spool:
    """Uploads kept by content: ``media/<sha256>.<ext>``, the same bytes always one file."""

    def __init__(self, root: Path, max_bytes: int):
        self.media, self.out, self.max_bytes = root / "media", root / "out", max_bytes
        for folder in (self.media, self.out):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)

    def save(self, source: BinaryIO, filename: Optional[str], raw_pcm: bool, options: str = "") -> Path:
        """Copy an upload in (raw PCM wrapped as WAV) as ``<content hash>[.<options>].<ext>``;
        RequestError for an empty one, one over the limit, or PCM of an odd length. ``options``
        (a spec's fingerprint): the same audio asked with other options is another file, so
        another job, and the first job's words stay as they are."""
        fd, name = tempfile.mkstemp(dir=self.media, prefix=".upload-", suffix=".part")
        temp, digest, size = Path(name), hashlib.sha256(), 0
        try:
            with os.fdopen(fd, "wb") as f:
                if raw_pcm:
                    f.write(_wav_header(0))
                while chunk := source.read(CHUNK):
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise RequestError(413, f"the upload is over the limit of {self.max_bytes} bytes")
                    digest.update(chunk)
                    f.write(chunk)
                if raw_pcm:
                    f.seek(0)
                    f.write(_wav_header(size))
            self._check(size, raw_pcm)
            tag = f".{options[:12]}" if options else ""
            final = self.media / f"{digest.hexdigest()[:32]}{tag}{'.wav' if raw_pcm else _suffix(filename)}"
            if final.exists():
                temp.unlink()
            else:
                os.replace(temp, final)
            return final
        finally:
            temp.unlink(missing_ok=True)

    @staticmethod
    def _check(size: int, raw_pcm: bool) -> None:
        if size == 0:
            raise RequestError(400, "the upload is empty")
        if raw_pcm and size % 2:
            raise RequestError(400, "encode=false wants 16 kHz mono 16-bit PCM: the body has an odd number of bytes")


class Service:
    """Requests in, jobs run one at a time on the decode thread, outputs out."""

    def __init__(self, settings: ServeSettings):
        self.settings = settings
        self.spool = Spool(settings.spool, settings.max_upload_bytes)
        self.stop = StopFlag()
        self._model = None  # loaded on the decode thread at its first need, then kept
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._decode_thread, name="decode", daemon=True)
        self._thread.start()

    def spec(self, task: str = "transcribe", language: Optional[str] = None, initial_prompt: Optional[str] = None,
             output: str = "srt", tag_language: bool = False) -> JobSpec:
        """The job spec of a request: the service's model and mode, the request's options;
        ValueError (naming the option) for one the model or mode cannot take."""
        options = {"task": task, "language": language, "initial_prompt": initial_prompt or None}
        return JobSpec(model=self.settings.model, mode=self.settings.mode, options=options, formats=(output,),
                       tag_language=tag_language)

    def transcribe(self, media: Path, spec: JobSpec, output: str) -> concurrent.futures.Future:
        """Queue a job for ``media``; the future's result is the text of its ``output``."""
        return self._call(lambda store, runner: self._run(store, runner, media, spec, output))

    def detect_language(self, media: Path) -> concurrent.futures.Future:
        """The future's result: (language code, probability) of the first 30 s of ``media``."""
        return self._call(lambda store, runner: transcriber.detect_language(media, self.model()))

    def enqueue(self, media: Path, spec: JobSpec) -> concurrent.futures.Future:
        """Queue a job for a file of the media library (a webhook): its outputs go beside it."""
        return self._call(lambda store, runner: self._run(store, runner, media, spec, None, beside=True))

    def model(self):
        if self._model is None:
            self._model = transcriber.load_model(self.settings.model)
        return self._model

    def close(self) -> None:
        self.stop.request()
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _call(self, fn: Callable) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((fn, future))
        return future

    def _engine(self, spec: JobSpec) -> transcriber.Engine:
        """The engines of every request share the one model."""
        return transcriber.make_engine(spec.mode, self.model(), spec.engine_options())

    def _decode_thread(self) -> None:
        try:
            store = connect(self.settings.db)
        except Exception as e:  # noqa: BLE001 - every request is told, none waits forever
            return self._refuse_all(RequestError(503, f"the job database cannot be opened: {e}"))
        runner = Runner(store, engines=EngineCache(self._engine), stop=self.stop)
        try:
            while (item := self._queue.get()) is not None:
                fn, future = item
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn(store, runner))
                    except BaseException as e:  # noqa: BLE001 - handed to the request that waits
                        future.set_exception(e)
        finally:
            store.close()

    def _refuse_all(self, error: Exception) -> None:
        while (item := self._queue.get()) is not None:
            item[1].set_exception(error)

    def _run(self, store: JobStore, runner: Runner, media: Path, spec: JobSpec, output: Optional[str],
             beside: bool = False) -> Optional[str]:
        jobs = enqueue_files(store, [(media, None)], spec, None if beside else self.spool.out)
        if jobs.failed or jobs.refused:
            raise RequestError(400, (jobs.failed or jobs.refused)[0][1])
        if jobs.to_run:
            runner.run(jobs.to_run)
        job = store.by_path(os.path.realpath(media))
        return None if output is None else answer(job, output)


def answer(job: Optional[Job], output: str) -> str:
    """The text of a done job's ``output``; RequestError for a job that did not end done."""
    if job is None or job.status != DONE:
        why = (job.last_error if job else None) or "the file could not be transcribed"
        raise RequestError(400 if job is None or not job.retryable else 503, why)
    for path in job.outputs:
        if path.endswith("." + output):
            return Path(path).read_text(encoding="utf-8")
    if NO_SPEECH in job.warnings:  # no subtitle file for a file without speech: nothing to say
        return ""
    raise RequestError(500, f"the job's {output} output is missing")
