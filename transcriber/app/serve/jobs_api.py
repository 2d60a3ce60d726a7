"""Jobs over HTTP: a long upload answered at once, its job polled, its output fetched later.

- ``POST /asr?async=true`` (``asr`` in app.py): the job is written to the store and the answer is
  a 202 with its id, where it stands in the queue and its links, before any decoding;
- ``GET /jobs/{id}``: its status (as ``transcribe status`` shows it), progress, duration,
  language, error, place in the queue, and the links of its outputs;
- ``GET /jobs/{id}/output.{srt,vtt,json,txt,tsv}``: the output once the job is done (409 while it
  is not; the job's error once it failed), the file the job wrote, else rendered from its words.

Jobs live in the store, so they survive a restart: the next start runs the ones left. Only the
service's jobs (of its uploads and libraries) are seen here: another's id is a 404, as no job.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Optional

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from transcriber import FORMATS, OutputOptions, assemble

from transcriber.app.cli.report import shown_jobs
from transcriber.app.serve.page import job_of, row as page_row
from transcriber.app.serve.service import RequestError, Service
from transcriber.app.store.domain import DONE, FAILED, QUEUED, RUNNING, Job
from transcriber.app.store.spec import JobSpec

HTTP_FORMATS = tuple(name for name, fmt in FORMATS.items() if fmt.http)


def jobs_routes(app: FastAPI, service: Service) -> None:
    db = service.settings.db

    @app.get("/jobs/{job_id}", tags=["Jobs"])
    async def job_status(job_id: int):
        return await asyncio.to_thread(described, service, job_id)

    @app.get("/jobs/{job_id}/output.{output}", tags=["Jobs"], response_class=PlainTextResponse)
    async def job_output(job_id: int, output: str):
        if output not in HTTP_FORMATS:
            raise RequestError(404, f"no output {output!r}: one of {', '.join(HTTP_FORMATS)}", "output")
        text = await asyncio.to_thread(output_of, db, job_id, output, service.roots)
        return PlainTextResponse(text, media_type=FORMATS[output].media_type)


def accepted(service: Service, job: Job, output: str) -> dict:
    """The 202's body of an async request: the job's id, place and links."""
    return {"job_id": job.id, "status": job.status, "queue_position": queue_position(service, job.id),
            "links": links(job.id, output)}


def links(job_id: int, output: Optional[str] = None) -> dict:
    outputs = {fmt: f"/jobs/{job_id}/output.{fmt}" for fmt in HTTP_FORMATS}
    return {"status": f"/jobs/{job_id}", "output": outputs.get(output or "", None), "outputs": outputs}


def queue_position(service: Service, job_id: int) -> Optional[int]:
    """How many of the service's jobs run before this one (0: it is next, or running); None
    once it is no longer waiting."""
    pending = sorted(service.pending_ids())
    return pending.index(job_id) if job_id in pending else None


def described(service: Service, job_id: int) -> dict:
    job, _ = job_of(service.settings.db, job_id, service.roots, segments=False)
    ((_, status),) = list(shown_jobs([job], time.time(), lambda line: None))
    row = page_row(job, status)  # progress, duration, the seconds it took: as the status page shows them
    return {"job_id": job.id, **{key: row[key] for key in ("status", "progress", "duration", "language", "error",
                                                          "seconds")},
            "queue_position": queue_position(service, job.id) if status in (QUEUED, RUNNING) else None,
            "links": links(job.id)}


def output_of(db: Path, job_id: int, output: str, roots) -> str:
    """A done job's ``output``: the file it wrote, else made from its stored words."""
    job, segments = job_of(db, job_id, roots)
    if job.status == FAILED:
        raise RequestError(400 if not job.retryable else 503, job.last_error or f"job {job_id} failed")
    if job.status != DONE:
        raise RequestError(409, f"job {job_id} is {job.status}: its output is ready once it is done")
    for path in job.outputs:
        if path.endswith("." + output) and Path(path).is_file():
            return Path(path).read_text(encoding="utf-8")
    spec = JobSpec.from_dict(job.spec)
    transcript = assemble(segments, job.language, job.duration, job.model or "", job.language_probability,
                          spec.task)
    return FORMATS[output].render(transcript, OutputOptions())
