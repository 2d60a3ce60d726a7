"""The status page of ``transcribe serve``: every job of the store (the service's requests and any
``transcribe`` run on the same database), updating live, and a job's subtitles over its media.

- ``GET /``: the page (page.html: a table refreshed every 1.5 s from ``/api/jobs``; a row with
  words opens a ``<video>`` of the job's file with its subtitles as a ``<track>``).
- ``GET /api/jobs``: the jobs as JSON: id, file name, status as ``transcribe status`` shows it
  (stalled, gone, following), progress, language, error.
- ``GET /media/{id}``: a job's source file, only when it is the service's (an upload in the
  spool, or a file of a library) and audio or video by its own first bytes (guard.media_type),
  as an attachment, under a sandbox CSP: never a page (ranges served).
- ``GET /subtitles/{id}.vtt``: the job's words so far as WebVTT, rendered from the store.

The page itself is sent with a CSP that allows its own inline script and style only.
"""

from __future__ import annotations

import asyncio
import time
from importlib import resources
from pathlib import Path
from typing import Optional

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse, Response

from transcriber import FORMATS, OutputOptions, Transcript

from transcriber.app.cli.report import shown_jobs
from transcriber.app.store.spec import JobSpec
from transcriber.app.store.jobstore import connect
from transcriber.app.serve.guard import SANDBOX, inside_roots, media_type, page_policy, under_roots
from transcriber.app.serve.service import RequestError, Service

MAX_JOBS = 500  # the newest jobs on the page


def row(job, status: str, name: Optional[str] = None) -> dict:
    fraction = min(1.0, job.progress / job.duration) if job.duration else (1.0 if status == "done" else 0.0)
    took = job.finished_at - job.started_at if status == "done" and job.finished_at and job.started_at else None
    return {"id": job.id, "name": name or Path(job.path).name, "status": status, "progress": round(fraction, 3),
            "duration": job.duration, "seconds": took, "language": job.language, "error": job.last_error,
            "updated": job.updated_at, "has_words": job.progress > 0 or status == "done"}


def job_rows(db: Path, roots, name_of=lambda path: None) -> list[dict]:
    """The service's jobs (of files in its spool or libraries: ``roots``), newest first; the
    database's other jobs (a CLI run's on the same machine) are not the service's to show.
    ``name_of``: an upload's name as the client sent it (``Spool.name_of``)."""
    with connect(db) as store:
        jobs = sorted((j for j in store.jobs() if inside_roots(j.path, roots)), key=lambda j: j.id, reverse=True)
        return [row(job, status, name_of(job.path))
                for job, status in shown_jobs(jobs[:MAX_JOBS], time.time(), lambda line: None)]


def job_of(db: Path, job_id: int, roots, segments: bool = True):
    """A job of the service (``job_rows``) and its segments so far (``segments``; else ());
    else 404, as for no job."""
    with connect(db) as store:
        job = store.get(job_id)
        if job is None or not inside_roots(job.path, roots):
            raise RequestError(404, f"no job {job_id}")
        return job, store.resume_point(job_id).segments if segments else ()


def vtt_of(db: Path, job_id: int, roots) -> str:
    job, segments = job_of(db, job_id, roots)
    task = JobSpec.from_dict(job.spec).option("task") or "transcribe"
    transcript = Transcript(language=job.language or "en", duration=job.duration or 0.0, segments=tuple(segments),
                            task=task)
    return FORMATS["vtt"].render(transcript, OutputOptions())


def routes(app: FastAPI, service: Service) -> None:
    db = service.settings.db
    html = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")

    policy = page_policy(html)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index():
        return HTMLResponse(html, headers={"Content-Security-Policy": policy})

    @app.get("/api/jobs", tags=["Status"])
    async def jobs():
        return await asyncio.to_thread(job_rows, db, service.roots, service.spool.name_of)

    @app.get("/media/{job_id}", tags=["Status"])
    async def media(job_id: int):
        job, _ = await asyncio.to_thread(job_of, db, job_id, service.roots)
        path, kind = await asyncio.to_thread(servable, job.path, service.roots)
        if kind is None:
            raise RequestError(404, f"job {job_id}'s file is not media this service serves")
        return FileResponse(path, media_type=kind, content_disposition_type="attachment", filename=f"job-{job_id}",
                            headers={"Content-Security-Policy": SANDBOX})

    @app.get("/subtitles/{job_id}.vtt", tags=["Status"])
    async def subtitles(job_id: int):
        return Response(await asyncio.to_thread(vtt_of, db, job_id, service.roots), media_type="text/vtt",
                        headers={"Content-Security-Policy": SANDBOX})


def servable(path: str, roots) -> tuple[str, Optional[str]]:
    """(the file resolved, its audio/video content type) when it lies in the spool or a library
    and its bytes are media; the type is None otherwise (or the file is gone)."""
    real = under_roots(path, roots)
    try:
        return (real, media_type(real)) if real is not None else (path, None)
    except OSError:
        return path, None
