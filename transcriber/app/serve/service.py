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
import contextlib
import errno
import hashlib
import os
import queue
import signal
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Optional

import transcriber

from transcriber.app.store.domain import DONE, NO_SPEECH, QUEUED, RUNNING, Job
from transcriber.app.run.enqueue import enqueue_files
from transcriber.app.run.engines import EngineCache
from transcriber.app.run.local import Runner, StopFlag
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.jobstore import JobStore, connect
from transcriber.app.serve.guard import inside_roots

SAMPLE_RATE = 16000  # encode=false: the body is 16 kHz mono s16le PCM (whisper-asr-webservice's rule)
CHUNK = 1 << 20
NAME_SUFFIX, NAME_LIMIT = ".name", 255  # an upload's name as the client sent it, kept beside it


class RequestError(Exception):
    """A request the service cannot serve: its HTTP status and one line saying why (``param``:
    the request's parameter it is about, when one is)."""

    def __init__(self, status: int, message: str, param: Optional[str] = None):
        super().__init__(message)
        self.status, self.param = status, param


STOPPING = RequestError(503, "the service is stopping; the job resumes when it is started again")

STOP_SECONDS = 8.5  # from a SIGTERM, how long the job in hand has to reach its checkpoint (then: exit)
WAKE = "wake"  # the decode thread's cue to run the store's pending jobs


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
    host: str = "127.0.0.1"  # the address served: a request's Host may name it (guard.py)
    allowed_hosts: tuple[str, ...] = ()  # other names a request's Host may give (--allowed-host)
    libraries: tuple[str, ...] = ()  # resolved folders a webhook's file must lie in (--library, --path-map's)


def _wav_header(n_bytes: int) -> bytes:
    """A 44-byte RIFF header for ``n_bytes`` of 16 kHz mono s16le PCM."""
    return (b"RIFF" + struct.pack("<I", 36 + n_bytes) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, SAMPLE_RATE, SAMPLE_RATE * 2, 2, 16) + b"data" + struct.pack("<I", n_bytes))


class Spool:
    """Uploads kept by content: ``media/<sha256>[-<options>]``, the same bytes always one file.
    No name or extension of the client's is kept (ffmpeg probes the content, not the name), so
    an upload named x.html is a file without an extension, never a page."""

    def __init__(self, root: Path, max_bytes: int):
        self.media, self.out, self.max_bytes = root / "media", root / "out", max_bytes
        for folder in (self.media, self.out):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)

    def save(self, source: BinaryIO, raw_pcm: bool, options: str = "", sent_as: Optional[str] = None) -> Path:
        """Copy an upload in (raw PCM wrapped as WAV) as ``<content hash>[-<options>]``;
        RequestError for an empty one, one over the limit, PCM of an odd length, or a full spool
        (507). ``options`` (a spec's fingerprint): the same audio asked with other options is
        another file, so another job, and the first job's words stay as they are. ``sent_as``: the
        client's name of the upload, kept beside it for the status page (``name_of``), never
        as the file's name."""
        temp = None
        try:
            fd, name = tempfile.mkstemp(dir=self.media, prefix=".upload-", suffix=".part")
            temp, digest, size = Path(name), hashlib.sha256(), 0
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
            tag = f"-{options[:12]}" if options else ""
            final = self.media / f"{digest.hexdigest()[:32]}{tag}"
            if final.exists():
                temp.unlink()
            else:
                os.replace(temp, final)
            if sent_as:
                self._keep_name(final, sent_as)
            return final
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise RequestError(507, f"the spool folder {self.media} is full: {e.strerror}") from None
            raise RequestError(503, f"cannot keep the upload in {self.media}: {e.strerror or e}") from None
        finally:
            if temp is not None:
                temp.unlink(missing_ok=True)

    def name_of(self, path: str) -> Optional[str]:
        """The name the upload at ``path`` was last sent with; None for a file that is not an
        upload of this spool (a library's: its own name says it) or was sent without one. Only
        the spool's own folder is read (a library's file may lie on a slow mount)."""
        media = os.path.realpath(self.media)
        if os.path.dirname(path) != media:
            return None
        try:
            with open(path + NAME_SUFFIX, encoding="utf-8") as f:
                return f.read(NAME_LIMIT) or None
        except OSError:
            return None

    def _keep_name(self, final: Path, name: str) -> None:
        """``name`` (its last part, one line, at most NAME_LIMIT characters) beside ``final``,
        written whole; a name that cannot be kept costs the page its name, not the request."""
        shown = "".join(c for c in Path(name.replace("\\", "/")).name if c.isprintable())[:NAME_LIMIT]
        if not shown:
            return
        temp = None
        try:
            fd, temp = tempfile.mkstemp(dir=self.media, prefix=".name-", suffix=".part")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(shown)
            os.replace(temp, str(final) + NAME_SUFFIX)
        except OSError:
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)

    @staticmethod
    def _check(size: int, raw_pcm: bool) -> None:
        if size == 0:
            raise RequestError(400, "the upload is empty")
        if raw_pcm and size % 2:
            raise RequestError(400, "encode=false wants 16 kHz mono 16-bit PCM: the body has an odd number of bytes")


class Service:
    """Requests in, jobs run one at a time on the decode thread, outputs out.

    A request's job is written to the store on the request's own thread (``accept``) before it
    is answered; the decode thread then runs the store's pending jobs of this service (those of
    its uploads and its libraries, queued or stalled), first at start: a job accepted before a
    stop or a crash is run by the next start, and ``transcribe retry`` sees it meanwhile."""

    def __init__(self, settings: ServeSettings):
        self.settings = settings
        self.spool = Spool(settings.spool, settings.max_upload_bytes)
        self.roots = (os.path.realpath(self.spool.media), *settings.libraries)  # whose jobs are the service's
        self.stop = StopFlag()
        # name -> model, loaded on the decode thread at first need: the service's own, kept, and
        # the last other one a request named (one more, whatever a client names in turn)
        self._models: dict[str, object] = {}
        self.engines = EngineCache(self._engine)  # (used on the decode thread only, as the models)
        self._queue: queue.Queue = queue.Queue()
        self._waiting: set[concurrent.futures.Future] = set()  # the requests' futures not yet answered
        self._stop_asked = 0.0  # time.monotonic() of the first stop asked
        self._queue.put(WAKE)  # the jobs a stopped service left
        self._thread = threading.Thread(target=self._decode_thread, name="decode", daemon=True)
        self._thread.start()

    def spec(self, task: str = "transcribe", language: Optional[str] = None, initial_prompt: Optional[str] = None,
             output: str = "srt", tag_language: bool = False, model: Optional[str] = None,
             temperatures: Optional[tuple[float, ...]] = None, vad: bool = False,
             speakers: Optional[dict] = None) -> JobSpec:
        """The job spec of a request: the service's mode, its model (or ``model``, another
        installed one), the request's options (``vad``: only the speech Silero VAD finds is
        decoded; ``speakers``: the speaker options, ``{"speakers": True, "max_speakers": 3}``);
        ValueError (naming the option) for one the model or mode cannot take."""
        options = {"task": task, "language": language, "initial_prompt": initial_prompt or None,
                   "temperature": temperatures, "vad": vad or None}
        outputs = {name: value for name, value in (speakers or {}).items() if value is not None}
        return JobSpec(model=model or self.settings.model, mode=self.settings.mode, options=options,
                       formats=(output,), tag_language=tag_language, outputs=outputs)

    def accept(self, media: Path, spec: JobSpec, output_dir: Optional[Path]) -> Job:
        """Write ``media``'s job to the store (its outputs in ``output_dir``, None: beside it) and
        wake the decode thread; the job. RequestError when it cannot be queued (its file
        unreadable, its output folder not writable, an output there not ours) or the service
        is stopping. Called on a request's thread, before its answer."""
        if self.stop.requested:
            raise RequestError(503, "the service is stopping: send it again once it is back")
        with connect(self.settings.db) as store:
            jobs = enqueue_files(store, [(media, None)], spec, output_dir)
            if jobs.failed or jobs.refused:
                raise RequestError(409 if jobs.refused else 400, (jobs.failed or jobs.refused)[0][1])
            job = store.by_path(os.path.realpath(media))
        if job is None:  # enqueue_files books every file it is given
            raise RequestError(500, f"{media} was not queued")
        self._queue.put(WAKE)
        return job

    def transcribe(self, job: Job, output: str) -> concurrent.futures.Future:
        """The future's result is the text of the ``output`` of ``job`` (accepted), once run."""
        return self._call(lambda store, runner: self._answer(store, runner, job.id, output))

    def detect_language(self, media: Path) -> concurrent.futures.Future:
        """The future's result: (language code, probability) of the first 30 s of ``media``."""
        return self._call(lambda store, runner: transcriber.detect_language(media, self.model()))

    def model(self, name: Optional[str] = None):
        """The service's model, or another (a request of the OpenAI routes may name one): loaded on
        first use. The service's own is kept; of the others only the last named is (a client
        naming each installed model in turn would otherwise hold them all in memory: large-v3
        alone is ~6 GB)."""
        name = name or self.settings.model
        if name not in self._models:
            for other in [n for n in self._models if n != self.settings.model]:
                self.engines.forget(self._models.pop(other))  # (before the load: never two others at once)
            self._models[name] = transcriber.load_model(name, keep=False)  # (held here only)
        return self._models[name]

    def stopping(self, signum: int = signal.SIGTERM) -> None:
        """A stop is asked: take no more work, answer every waiting request now (503; its job
        stays in the store, and the next start runs it) so that no connection holds the stop,
        and let the job in hand reach its checkpoint."""
        if not self.stop.requested:
            self._stop_asked = time.monotonic()
        self.stop.request(signum)
        for future in list(self._waiting):
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                future.set_exception(STOPPING)

    def close(self, seconds: float = STOP_SECONDS) -> bool:
        """Take no more work, let the job in hand checkpoint, and wait for the decode thread
        until ``seconds`` after the stop was asked; whether it ended (if not, the job resumes
        from its last checkpoint at the next start: its lease's owner, this process, is gone)."""
        self.stopping()
        self._queue.put(None)
        self._thread.join(timeout=max(0.5, self._stop_asked + seconds - time.monotonic()))
        return not self._thread.is_alive()

    def _call(self, fn: Callable) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._waiting.add(future)
        future.add_done_callback(self._waiting.discard)
        if self.stop.requested:
            future.set_exception(STOPPING)
        else:
            self._queue.put((fn, future))
        return future

    def _engine(self, spec: JobSpec) -> transcriber.Engine:
        """The engines of every request share the one model."""
        return transcriber.make_engine(spec.mode, self.model(spec.model), spec.engine_options())

    def _decode_thread(self) -> None:
        try:
            store = connect(self.settings.db)
        except Exception as e:  # noqa: BLE001 - every request is told, none waits forever
            return self._refuse_all(RequestError(503, f"the job database cannot be opened: {e}"))
        runner = Runner(store, engines=self.engines, stop=self.stop)
        try:
            while (item := self._queue.get()) is not None:
                if self.stop.requested:
                    break
                if item is WAKE:
                    runner.run(self._pending(store))
                    continue
                fn, future = item
                if future.done() or not future.set_running_or_notify_cancel():
                    continue  # answered already: the service is stopping
                # a future answered meanwhile (a stop) takes no second answer
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    try:
                        future.set_result(fn(store, runner))
                    except BaseException as e:  # noqa: BLE001 - handed to the request that waits
                        future.set_exception(e)
        finally:
            store.close()
            self._refuse_all(STOPPING)

    def pending_ids(self) -> list[int]:
        """The ids of the service's jobs waiting or running, oldest first (``_pending``)."""
        with connect(self.settings.db) as store:
            return self._pending(store)

    def _pending(self, store: JobStore) -> list[int]:
        """The service's jobs (of its uploads and libraries) that are queued or running: a
        running one is claimed only once its lease is dead (a stopped or killed service's)."""
        return [job.id for job in store.jobs(statuses=(QUEUED, RUNNING))
                if inside_roots(job.path, self.roots)]

    def _refuse_all(self, error: Exception) -> None:
        while True:
            try:
                item = self._queue.get_nowait() if error is STOPPING else self._queue.get()
            except queue.Empty:
                return
            if item is None and error is not STOPPING:
                return
            if isinstance(item, tuple) and not item[1].done():
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    item[1].set_exception(error)

    def _answer(self, store: JobStore, runner: Runner, job_id: int, output: str) -> str:
        runner.run([job_id])
        if self.stop.requested:
            raise STOPPING
        return answer(store.get(job_id), output)


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
