"""The job store in SQLite (through sqlite-utils): the ``JobStore`` of transcriber/app/store/jobstore.py. All SQL of
the jobs lives here; the connection (locks, a lost file) is transcriber/app/store/sqlite_db.py's, the schema
transcriber/app/store/migrations.py's, the rules the queries apply transcriber/app/store/policy.py's.

The tables are described in transcriber/app/store/migrations.py.

Concurrency: several processes share one database file (WAL, a busy timeout). Every write
transaction starts with a write statement (or is a single statement), so it takes SQLite's write
lock at once and waits for it, instead of failing with SQLITE_BUSY when it would have to upgrade
a stale read snapshot. A runner owns a job through a lease: ``claim`` is one UPDATE, so two
runners never take the same job; every write a runner makes for a job is fenced on
``lease_owner``, so a runner whose lease was taken over (it stalled, or it was thought dead) can
no longer write anything for that job (``LeaseLost``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from transcriber import Segment, Word

from transcriber.app.store.domain import (DEFAULT_TIMEOUT, DONE, FAILED, NEW, OUTPUTS, PENDING, QUEUED, REDO, REFUSED, RESUME, RUNNING,
                                          FileSignature, Job, LeaseLost, OutputRecord, Request, Resume, Vet)
from transcriber.app.run.outputs import all_outputs_exist, signed_files
from transcriber.app.store.policy import decide, retry_action
from transcriber.app.store.sqlite_db import FileIdentity, open_database

ENQUEUE_BATCH = 500  # files queued per transaction
_WRITTEN = (NEW, REDO, RESUME, OUTPUTS)  # the actions that change the job's row

# the columns of a done job that its words were made with, kept with them (``kept``)
KEPT_COLUMNS = ("content_key", "fingerprint", "spec", "following", "progress", "duration", "language", "language_probability",
                "model", "worker", "warnings", "outputs", "finished_at")


def segments_to_json(segments: Sequence[Segment]) -> str:
    # Full precision (not Segment.to_dict, which rounds for the JSON timeline): a resumed job's
    # words must be bit-for-bit those of an uninterrupted run.
    return json.dumps([asdict(s) for s in segments], ensure_ascii=False)


def segments_from_json(text: str) -> list[Segment]:
    return [Segment(**{**d, "words": tuple(Word(**w) for w in d["words"])}) for d in json.loads(text)]


@functools.lru_cache(maxsize=64)
def _parsed_spec(text: str) -> dict:
    """A spec's JSON, parsed once: the 10,000 jobs of a folder share one (status, a rerun)."""
    return json.loads(text)


def _json_tuple(text: Optional[str]) -> tuple:
    return () if not text or text == "[]" else tuple(json.loads(text))


_FLOAT_COLUMNS = ("progress", "duration", "lease_expires", "created_at", "queued_at", "started_at",
                  "updated_at", "finished_at")


def job_from_row(row: dict) -> Job:
    """A row of ``jobs``, typed."""
    d = dict(row)
    d["spec"] = dict(_parsed_spec(d["spec"]))  # a copy: each job's own dict (its values are not changed)
    d["outputs"] = _json_tuple(d["outputs"])
    d["warnings"] = _json_tuple(d["warnings"])
    d["words_complete"] = bool(d["words_complete"])
    d["retryable"] = bool(d["retryable"])
    d["following"] = bool(d["following"])
    for name in _FLOAT_COLUMNS:  # UPDATE ... RETURNING can hand back a whole REAL as an int
        if d[name] is not None:
            d[name] = float(d[name])
    return Job(**d)


class SqliteJobStore:
    """The ``JobStore`` of transcriber/app/store/jobstore.py: jobs and checkpoints in one SQLite file; safe to share
    between processes."""

    def __init__(self, path, timeout: float = DEFAULT_TIMEOUT,
                 on_wait: Optional[Callable[[str], None]] = None, same_as: Optional[FileIdentity] = None):
        """Opens (makes, migrates) the database at ``path``: see transcriber/app/store/sqlite_db.py's ``open_database``."""
        self.path = Path(path)
        self.timeout = timeout
        self.db = open_database(self.path, timeout, on_wait, same_as)

    def reopen(self) -> "SqliteJobStore":
        """Another connection to the very file this one opened (DatabaseGone if it was lost)."""
        return SqliteJobStore(self.path, same_as=self.db.identity)

    def close(self) -> None:
        self.db.found_lost()  # a lost file: nothing checkpointed into it on the way out
        self.db.close()

    def __enter__(self) -> "SqliteJobStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- reading -------------------------------------------------------------------------

    def get(self, job_id: int) -> Optional[Job]:
        rows = list(self.db.query("SELECT * FROM jobs WHERE id = ?", [job_id]))
        return job_from_row(rows[0]) if rows else None

    def by_path(self, path: str) -> Optional[Job]:
        """The file's job (the latest one, when it was sent to several output folders)."""
        rows = list(self.db.query("SELECT * FROM jobs WHERE path = ? ORDER BY updated_at DESC, id DESC LIMIT 1",
                                  [path]))
        return job_from_row(rows[0]) if rows else None

    def output_records(self, paths: Optional[Iterable[str]] = None) -> dict[str, OutputRecord]:
        """The files this tool wrote (among ``paths``; all of them if None), by path."""
        sql = ("SELECT o.path, o.job_id, o.size, o.mtime_ns, o.sha256, j.path AS job_path, j.output_stem "
               "FROM outputs o LEFT JOIN jobs j ON j.id = o.job_id")
        params: list = []
        if paths is not None:
            sql += " WHERE o.path IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(list(paths)))
        return {r["path"]: OutputRecord(r["path"], r["job_id"], FileSignature(r["size"], r["mtime_ns"], r["sha256"]),
                                        r["job_path"], r["output_stem"])
                for r in self.db.query(sql, params)}

    def expect_outputs(self, job_id: int, paths: Iterable[str]) -> None:
        """The job is about to write these files (found free, or its own): recorded first, with
        no signature yet, so that a kill between the write and ``finish`` leaves them the job's."""
        now = time.time()
        with self.db.atomic():
            for path in paths:
                self._put_output(str(path), job_id, FileSignature(-1, -1, PENDING), now)

    def record_outputs(self, job_id: int, paths: Iterable[str]) -> None:
        """Files written for a job (or, with --force, taken over by it): recorded as they are now.
        ReadTimeout if they do not answer (read before the transaction: ``signed_files``)."""
        signed = signed_files(paths)
        with self.db.atomic():
            self._record_outputs(job_id, signed, time.time())

    def _record_outputs(self, job_id: int, signed: dict[str, FileSignature], now: float) -> None:
        for path, sig in signed.items():
            self._put_output(path, job_id, sig, now)

    def _put_output(self, path: str, job_id: int, sig: FileSignature, now: float) -> None:
        self.db.execute("INSERT OR REPLACE INTO outputs (path, job_id, size, mtime_ns, sha256, written_at) "
                        "VALUES (?, ?, ?, ?, ?, ?)", [path, job_id, sig.size, sig.mtime_ns, sig.sha256, now])

    def jobs(self, statuses: Optional[Iterable[str]] = None, ids: Optional[Iterable[int]] = None) -> list[Job]:
        where, params = [], []
        if statuses:
            where.append("status IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(statuses)))
        if ids is not None:
            where.append("id IN (SELECT value FROM json_each(?))")
            params.append(json.dumps(list(ids)))
        sql = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        return [job_from_row(r) for r in self.db.query(sql, params)]

    def each_job(self) -> Iterable[Job]:
        """Every job, in id order, read as it is consumed (flat memory for any number of jobs)."""
        return map(job_from_row, self.db.query("SELECT * FROM jobs ORDER BY id"))

    def checkpoints(self, job_id: int) -> list[dict]:
        """The checkpoint rows of a job, in order, without their (large) payloads."""
        return list(self.db.query(
            "SELECT job_id, seq, position, owner, created_at, state IS NOT NULL AS has_state, "
            "json_array_length(segments) AS n_segments FROM checkpoints WHERE job_id = ? ORDER BY seq",
            [job_id]))

    def resume_point(self, job_id: int) -> Resume:
        rows = list(self.db.query(
            "SELECT position, segments, state FROM checkpoints WHERE job_id = ? ORDER BY seq", [job_id]))
        if not rows:
            return Resume()
        segments = [s for r in rows for s in segments_from_json(r["segments"])]
        last = rows[-1]
        state = json.loads(last["state"]) if last["state"] is not None else None
        return Resume(segments, state, last["position"], len(rows))

    # --- enqueueing ----------------------------------------------------------------------

    def enqueue(self, request: Request, force: bool = False,
                outputs_present: Callable[[Iterable[str]], bool] = all_outputs_exist) -> tuple[Job, str]:
        """Queue a file unless it is done with the same content and options; what was done."""
        return self.enqueue_many([request], force, outputs_present)[0]

    def enqueue_many(self, requests: Sequence[Request], force: bool = False,
                     outputs_present: Callable[[Iterable[str]], bool] = all_outputs_exist,
                     vet: Optional[Vet] = None) -> list[tuple[Optional[Job], str]]:
        """``enqueue`` for many files, in transactions of ``ENQUEUE_BATCH``: each holds the write
        lock from its start, so two processes enqueueing the same folder agree on every job,
        and 10,000 files cost a few commits, not 10,000.

        ``vet(request, job)`` (job: the existing one, or None) is asked before a file would be
        queued to write its outputs; a reason means REFUSED: nothing is written for it (the job
        stays as it was; None in its place when there was none)."""
        out: list[tuple[Optional[Job], str]] = []
        for i in range(0, len(requests), ENQUEUE_BATCH):
            out += self._enqueue_batch(requests[i:i + ENQUEUE_BATCH], force, outputs_present, vet)
        return out

    def _enqueue_batch(self, requests: Sequence[Request], force: bool,
                       outputs_present: Callable[[Iterable[str]], bool],
                       vet: Optional[Vet]) -> list[tuple[Optional[Job], str]]:
        now = time.time()
        done: dict[tuple[str, str], tuple[Optional[Job], str]] = {}  # (path, output_stem) -> (job, action)
        specs: dict[int, str] = {}  # the JSON of each spec dict, made once (a batch shares one)
        with self._write_transaction():
            existing = self._by_identity(requests)
            for request in requests:
                key = (request.path, request.output_stem)
                if key not in done:
                    if id(request.spec) not in specs:
                        specs[id(request.spec)] = json.dumps(request.spec, sort_keys=True)
                    done[key] = self._enqueue_one(request, existing.get(key), specs[id(request.spec)], force,
                                                  outputs_present, vet, now)
            changed = [job.id for job, action in done.values() if action in _WRITTEN]
            fresh = {j.id: j for j in self.jobs(ids=changed)} if changed else {}
        return [(fresh.get(job.id, job) if job else None, action) for job, action in done.values()]

    def _enqueue_one(self, request: Request, job: Optional[Job], spec: str, force: bool,
                     outputs_present: Callable[[Iterable[str]], bool], vet: Optional[Vet],
                     now: float) -> tuple[Optional[Job], str]:
        """One file of ``_enqueue_batch`` (inside its transaction): (the job as read, the action)."""
        if job is None:
            if vet is not None and vet(request, None):
                return None, REFUSED
            cursor = self.db.execute(
                "INSERT INTO jobs (path, content_key, fingerprint, spec, output_stem, output_root, following, "
                "status, created_at, queued_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [request.path, request.content_key, request.fingerprint, spec, request.output_stem,
                 request.output_root, request.following, QUEUED, now, now, now])
            return Job(cursor.lastrowid, request.path, request.content_key, request.fingerprint, request.spec,
                       request.output_stem, QUEUED, output_root=request.output_root,
                       following=request.following), NEW
        action = decide(job, request, force, outputs_present, now)
        if action == REDO and not force and self._restore_kept(job.id, now, (request.content_key, request.fingerprint)):
            job = self.get(job.id)  # the redo of other options never finished: back to the words of these
            action = decide(job, request, force, outputs_present, now)
        if action in (REDO, RESUME, OUTPUTS) and vet is not None and vet(request, job):
            return job, REFUSED
        if action == REDO:
            self._keep(job, request.content_key)
            self._reset(job.id, request.content_key, request.fingerprint, spec, request.output_stem, now,
                        request.following)
        elif action in (RESUME, OUTPUTS):
            self.db.execute(
                "UPDATE jobs SET status = ?, spec = ?, errors = CASE WHEN status = ? "
                "THEN 0 ELSE errors END, lease_owner = NULL, lease_expires = NULL, queued_at = ?, "
                "updated_at = ? WHERE id = ?",
                [QUEUED, spec, FAILED, now, now, job.id])
        return job, action

    def outputs_for(self, requests: Sequence[Request]) -> dict[tuple[str, str], list[str]]:
        """The outputs of these requests' jobs that exist, by (path, output_stem), in one query."""
        return {(r["path"], r["output_stem"]): json.loads(r["outputs"])
                for r in self._identified(requests, "path, output_stem, outputs")}

    def _by_identity(self, requests: Sequence[Request]) -> dict[tuple[str, str], Job]:
        """The jobs of these (path, output_stem) pairs that exist, in one query."""
        return {(j.path, j.output_stem): j for j in map(job_from_row, self._identified(requests, "*"))}

    def _identified(self, requests: Sequence[Request], columns: str) -> Iterable[dict]:
        pairs = json.dumps([[r.path, r.output_stem] for r in requests])
        return self.db.query(
            f"SELECT {columns} FROM jobs WHERE (path, output_stem) IN (SELECT json_extract(value, '$[0]'), "
            "json_extract(value, '$[1]') FROM json_each(?))", [pairs])

    @contextlib.contextmanager
    def _write_transaction(self):
        """A transaction that takes the write lock at its start (waiting for it as every
        statement does), so nothing it read can go stale before it writes."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.conn.rollback()
            raise
        self.db.execute("COMMIT")

    def _reset(self, job_id: int, content_key: str, fingerprint: str, spec: str, output_stem: str,
               now: float, following: bool) -> None:
        self.db.execute(
            "UPDATE jobs SET status = ?, content_key = ?, fingerprint = ?, spec = ?, output_stem = ?, following = ?, "
            "progress = 0, duration = NULL, words_complete = 0, language = NULL, language_probability = NULL, "
            "model = NULL, worker = NULL, warnings = NULL, "
            "errors = 0, last_error = NULL, retryable = 1, outputs = '[]', lease_owner = NULL, "
            "lease_expires = NULL, queued_at = ?, updated_at = ?, finished_at = NULL WHERE id = ?",
            [QUEUED, content_key, fingerprint, spec, output_stem, following, now, now, job_id])
        self.db.execute("DELETE FROM checkpoints WHERE job_id = ?", [job_id])

    def _keep(self, job: Job, content_key: str) -> None:
        """Before a done job is redone on the same content (other options, --force): keep its
        words and the columns they go with, until the redo is done (``_restore_kept``)."""
        if job.status != DONE or not job.words_complete or job.content_key != content_key:
            self.db.execute("DELETE FROM kept WHERE job_id = ?", [job.id])  # older words of other content
            return
        row = next(self.db.query(f"SELECT {', '.join(KEPT_COLUMNS)} FROM jobs WHERE id = ?", [job.id]))
        segments = segments_to_json(self.resume_point(job.id).segments)
        self.db.execute("INSERT OR REPLACE INTO kept (job_id, fingerprint, content_key, job, segments) "
                        "VALUES (?, ?, ?, ?, ?)", [job.id, job.fingerprint, job.content_key, json.dumps(row), segments])

    def _restore_kept(self, job_id: int, now: float, identity: Optional[tuple[str, str]] = None) -> bool:
        """Give the job back the done words ``_keep`` kept (``identity``: only those made from
        this (content key, fingerprint)); whether there were any. Inside a transaction."""
        kept = next(self.db.query("SELECT * FROM kept WHERE job_id = ?", [job_id]), None)
        if kept is None or (identity is not None and identity != (kept["content_key"], kept["fingerprint"])):
            return False
        columns = json.loads(kept["job"])
        self.db.execute(
            f"UPDATE jobs SET {', '.join(f'{c} = ?' for c in columns)}, status = ?, words_complete = 1, errors = 0, "
            "last_error = NULL, retryable = 1, lease_owner = NULL, lease_expires = NULL, updated_at = ? WHERE id = ?",
            [*columns.values(), DONE, now, job_id])
        self.db.execute("DELETE FROM checkpoints WHERE job_id = ?", [job_id])
        self.db["checkpoints"].insert({"job_id": job_id, "seq": 1, "position": columns["progress"] or 0.0,
                                       "segments": kept["segments"], "state": None, "owner": "", "created_at": now})
        self.db.execute("DELETE FROM kept WHERE job_id = ?", [job_id])
        return True

    def retry(self, job_ids: Iterable[int]) -> list[tuple[Job, str]]:
        """Queue jobs again by hand: failed or stalled ones resume from their checkpoint with a
        fresh count of attempts, done ones are redone from scratch."""
        out = []
        now = time.time()
        for job_id in job_ids:
            with self.db.atomic():
                self.db.execute("UPDATE jobs SET updated_at = updated_at WHERE id = ?", [job_id])  # lock
                job = self.get(job_id)
                if job is None:
                    continue
                action = retry_action(job, now)
                if action == REDO:
                    self._reset(job.id, job.content_key, job.fingerprint, json.dumps(job.spec, sort_keys=True),
                                job.output_stem, now, job.following)
                elif action == RESUME:
                    self.db.execute(
                        "UPDATE jobs SET status = ?, errors = 0, retryable = 1, lease_owner = NULL, "
                        "lease_expires = NULL, queued_at = ?, updated_at = ? WHERE id = ?",
                        [QUEUED, now, now, job.id])
            out.append((self.get(job_id), action))
        return out

    # --- running: leases ------------------------------------------------------------------

    def claim(self, owner: str, ids: Iterable[int], lease_seconds: float,
              spec: Optional[dict] = None) -> Optional[Job]:
        """Take the next queued (or stalled) job among ``ids`` for ``owner``, atomically; with
        ``spec``, only a job of that spec (files decoded side by side share one engine).

        One statement: SQLite runs it under its write lock, so two runners never get the same
        job. Jobs that failed less often go first, so a job being retried waits behind fresh ones.
        """
        now = time.time()
        same_spec = "" if spec is None else "AND spec = :spec "
        with self.db.atomic():
            rows = list(self.db.query(
                "UPDATE jobs SET status = :running, lease_owner = :owner, lease_expires = :expires, "
                "runs = runs + 1, started_at = :now, updated_at = :now "
                "WHERE id = (SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids)) "
                "AND (status = :queued OR (status = :running AND coalesce(lease_expires, 0) < :now)) "
                f"{same_spec}ORDER BY errors, id LIMIT 1) RETURNING *",
                {"running": RUNNING, "queued": QUEUED, "owner": owner, "expires": now + lease_seconds,
                 "now": now, "ids": json.dumps(list(ids)), "spec": json.dumps(spec, sort_keys=True)}))
        return job_from_row(rows[0]) if rows else None

    def heartbeat(self, job_id: int, owner: str, lease_seconds: float) -> bool:
        """Extend the lease; False if this owner has lost it."""
        now = time.time()
        cursor = self.db.execute(
            "UPDATE jobs SET lease_expires = ? WHERE id = ? AND lease_owner = ? AND status = ?",
            [now + lease_seconds, job_id, owner, RUNNING])
        return cursor.rowcount == 1

    def expire_dead_leases(self, is_dead: Callable[[str], bool]) -> list[int]:
        """Expire at once the leases whose owner ``is_dead`` says is gone (a runner on this
        host that was killed), instead of waiting for them to time out."""
        expired = []
        for row in list(self.db.query("SELECT id, lease_owner FROM jobs WHERE status = ? AND "
                                      "coalesce(lease_expires, 0) >= ?", [RUNNING, time.time()])):
            if row["lease_owner"] and is_dead(row["lease_owner"]):
                cursor = self.db.execute(
                    "UPDATE jobs SET lease_expires = 0 WHERE id = ? AND lease_owner = ? AND status = ?",
                    [row["id"], row["lease_owner"], RUNNING])
                if cursor.rowcount:
                    expired.append(row["id"])
        return expired

    def _fenced(self, job_id: int, owner: str, sets: str, params: Sequence[Any]) -> None:
        """``UPDATE jobs SET <sets>`` for a job this owner holds; LeaseLost otherwise."""
        cursor = self.db.execute(f"UPDATE jobs SET {sets} WHERE id = ? AND lease_owner = ? AND status = ?",
                                 [*params, job_id, owner, RUNNING])
        if cursor.rowcount != 1:
            raise LeaseLost(f"job {job_id} is no longer held by {owner}")

    # --- running: progress ----------------------------------------------------------------

    def start(self, job_id: int, owner: str, content_key: str, duration: Optional[float],
              worker: Optional[str] = None) -> None:
        """Record what the runner found at the start: the duration, the process that will
        decode the file (``worker``), and if the file changed since it was queued, a new content
        key (its old words are dropped)."""
        now = time.time()
        with self.db.atomic():
            self._fenced(job_id, owner, "duration = ?, worker = ?, updated_at = ?", [duration, worker, now])
            cursor = self.db.execute(
                "UPDATE jobs SET content_key = ?, progress = 0, words_complete = 0, warnings = NULL "
                "WHERE id = ? AND content_key != ?", [content_key, job_id, content_key])
            if cursor.rowcount:
                self.db.execute("DELETE FROM checkpoints WHERE job_id = ?", [job_id])
                self.db.execute("DELETE FROM kept WHERE job_id = ?", [job_id])  # words of what the file was

    def set_worker(self, job_id: int, owner: str, worker: str) -> None:
        """The job moved to another process (a Ray worker restarted elsewhere)."""
        self._fenced(job_id, owner, "worker = ?, updated_at = ?", [worker, time.time()])

    def adopt_content(self, job_id: int, owner: str, content_key: str) -> None:
        self._fenced(job_id, owner, "content_key = ?, updated_at = ?", [content_key, time.time()])

    def checkpoint(self, job_id: int, owner: str, segments: Sequence[Segment], state: Optional[dict],
                   position: float, language: Optional[str], model: Optional[str], lease_seconds: float,
                   complete: bool = False, language_probability: Optional[float] = None,
                   warnings: Sequence[str] = ()) -> int:
        """Commit new segments and the engine state after them, in one transaction; the
        checkpoint's number. ``state=None`` with ``complete`` only marks the words complete.
        ``warnings``: the decoder's, kept on the job (none: those kept stay)."""
        now = time.time()
        with self.db.atomic():
            self._fenced(job_id, owner, "progress = max(progress, ?), language = coalesce(?, language), "
                         "language_probability = coalesce(?, language_probability), "
                         "model = coalesce(?, model), warnings = coalesce(?, warnings), words_complete = ?, "
                         "lease_expires = ?, updated_at = ?",
                         [position, language, language_probability, model,
                          json.dumps(list(warnings), ensure_ascii=False) if warnings else None, int(complete),
                          now + lease_seconds, now])
            seq = self.db.execute("SELECT coalesce(max(seq), 0) FROM checkpoints WHERE job_id = ?",
                                  [job_id]).fetchone()[0]
            if state is None and not segments:
                return seq
            seq += 1
            self.db["checkpoints"].insert({
                "job_id": job_id, "seq": seq, "position": position, "segments": segments_to_json(segments),
                "state": json.dumps(state) if state is not None else None, "owner": owner, "created_at": now})
            self.db.execute("UPDATE checkpoints SET state = NULL WHERE job_id = ? AND seq < ? "
                            "AND state IS NOT NULL", [job_id, seq])
        return seq

    def finish(self, job_id: int, owner: str, outputs: Sequence[str]) -> None:
        """The job is done: its outputs, as they are now (``outputs`` records them), are its."""
        now, signed = time.time(), signed_files(outputs)
        with self.db.atomic():
            self._fenced(job_id, owner, "status = ?, outputs = ?, progress = coalesce(nullif(duration, 0), "
                         "progress), last_error = NULL, lease_owner = NULL, "
                         "lease_expires = NULL, updated_at = ?, finished_at = ?",
                         [DONE, json.dumps([str(p) for p in outputs]), now, now])
            self._record_outputs(job_id, signed, now)
            self.db.execute("DELETE FROM kept WHERE job_id = ?", [job_id])  # the redo is done: its words hold

    def release(self, job_id: int, owner: str) -> None:
        """Give a job back to the queue (stopped by a signal); its checkpoint stays."""
        now = time.time()
        with self.db.atomic():
            self._fenced(job_id, owner, "status = ?, lease_owner = NULL, lease_expires = NULL, updated_at = ?",
                         [QUEUED, now])

    def fail(self, job_id: int, owner: str, error: str, retryable: bool, max_attempts: int) -> str:
        """Record a failed attempt; the job is queued again while it has attempts left and the
        error may go away, else failed. Returns the new status: ``failed`` also for a redo that
        gave up, whose job is done again with its last good words (``_restore_kept``)."""
        now = time.time()
        with self.db.atomic():
            self._fenced(
                job_id, owner,
                "errors = errors + 1, last_error = ?, retryable = ?, "
                "status = CASE WHEN ? AND errors + 1 < ? THEN ? ELSE ? END, "
                "lease_owner = NULL, lease_expires = NULL, updated_at = ?, "
                "finished_at = CASE WHEN ? AND errors + 1 < ? THEN finished_at ELSE ? END",
                [error, int(retryable), int(retryable), max_attempts, QUEUED, FAILED, now,
                 int(retryable), max_attempts, now])
            status = self.get(job_id).status
            if status == FAILED:
                self._restore_kept(job_id, now)
        return status
