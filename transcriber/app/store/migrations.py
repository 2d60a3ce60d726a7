"""The job database's schema, as sqlite-utils migrations applied in order (``m001`` ...). A
new column or table is a new migration at the end, never an edit of one that shipped: a
database of any older version is brought up to date when it is opened (transcriber/app/store/sqlite_store.py),
and one migrated by a newer version is refused (``NewerDatabase``).

Tables:

- ``jobs``: one row per input file (its resolved path is unique): content key, options
  fingerprint and spec, status (queued/running/done/failed), progress and duration in seconds,
  runs (times claimed), errors (runs that ended in an error), the last error, warnings (what
  the decoder reported about media it still read in full), output paths, the lease (owner +
  expiry), the worker (``host:pid`` of the process decoding it), whether its source is
  followed as it is made, and times (unix seconds).
- ``checkpoints``: what a job has committed so far, appended in order: the segments (with their
  words) new since the previous checkpoint, the audio position, and the engine state to resume
  from (only the latest row keeps its state; older ones are cleared to save space). Appending
  the new words, not rewriting all of them, keeps a checkpoint O(new words) on a long file.
"""

from __future__ import annotations

import json
import os

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from transcriber.app.store.domain import QUEUED

migrations = Migrations("transcriber.jobs")
APPLICATION_ID = 0x74726E73  # "trns": SQLite's application_id of a job database (m009)


@migrations()
def m001_jobs(db: Database) -> None:
    db["jobs"].create({
        "id": int, "path": str, "content_key": str, "fingerprint": str, "spec": str,
        "output_stem": str, "status": str, "progress": float, "duration": float,
        "words_complete": int, "language": str, "model": str,
        "runs": int, "errors": int, "last_error": str, "retryable": int, "outputs": str,
        "lease_owner": str, "lease_expires": float,
        "created_at": float, "queued_at": float, "started_at": float, "updated_at": float,
        "finished_at": float,
    }, pk="id", not_null={"path", "content_key", "fingerprint", "spec", "output_stem", "status"},
        defaults={"status": QUEUED, "progress": 0.0, "words_complete": 0, "runs": 0, "errors": 0,
                  "retryable": 1, "outputs": "[]"})
    db["jobs"].create_index(["path"], unique=True)
    db["jobs"].create_index(["status"])


@migrations()
def m002_checkpoints(db: Database) -> None:
    db["checkpoints"].create({
        "job_id": int, "seq": int, "position": float, "segments": str, "state": str,
        "owner": str, "created_at": float,
    }, pk=("job_id", "seq"), foreign_keys=[("job_id", "jobs", "id")], not_null={"segments"})


@migrations()
def m003_language_probability(db: Database) -> None:
    """How sure the model was of the language it detected (NULL when the language was given)."""
    db["jobs"].add_column("language_probability", float)


@migrations()
def m004_worker(db: Database) -> None:
    """The process that decodes (or last decoded) the job: ``host:pid`` of the runner itself, or
    of the Ray worker it handed the job to (NULL before any attempt)."""
    db["jobs"].add_column("worker", str)


@migrations()
def m005_warnings(db: Database) -> None:
    """What the decoder reported about a file it still read in full (ffmpeg's errors on a
    damaged frame): a JSON list of one-line messages; NULL when there was nothing to say."""
    db["jobs"].add_column("warnings", str)


@migrations()
def m006_outputs(db: Database) -> None:
    """The files this tool wrote, as it wrote them (size, mtime, SHA-256), and for which job: a
    subtitle file that is not in here, or that changed since, is the user's, never overwritten
    without --force."""
    db["outputs"].create({"path": str, "job_id": int, "size": int, "mtime_ns": int, "sha256": str,
                          "written_at": float}, pk="path", not_null={"job_id", "sha256"})


@migrations()
def m007_job_is_file_and_place(db: Database) -> None:
    """A job is a file and the place its outputs go (``output_stem``): the same file transcribed
    into another folder is another job, so a one-off run elsewhere never touches a done one."""
    db.execute("DROP INDEX IF EXISTS idx_jobs_path")
    db["jobs"].create_index(["path", "output_stem"], unique=True)


@migrations()
def m008_kept_words(db: Database) -> None:
    """The words of a done job being redone with other options (and what they were made with),
    kept until the redo is done: a redo that fails gives the job back its last good words."""
    db["kept"].create({"job_id": int, "fingerprint": str, "content_key": str, "job": str, "segments": str},
                      pk="job_id", not_null={"job", "segments"})


@migrations()
def m009_application_id(db: Database) -> None:
    """The file says it is ours (SQLite's ``application_id`` in its header): a SQLite file that
    is not, another program's, is refused untouched (transcriber/app/store/sqlite_db.py's ``_refuse_others``)."""
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")


@migrations()
def m010_output_root(db: Database) -> None:
    """The folder the command named for the job's outputs (``-o``, a followed source's stem's
    folder); NULL: the input's own folder. Every output is checked to lie inside it when it is
    written (transcriber/app/run/attempt.py), so an edited ``output_stem`` cannot steer a write elsewhere. Jobs
    of before: the folder their stem is in, where it is not the input's."""
    db["jobs"].add_column("output_root", str)
    for row in list(db.query("SELECT id, path, output_stem FROM jobs")):
        folder = os.path.dirname(row["output_stem"])
        if folder != os.path.dirname(row["path"]):
            db.execute("UPDATE jobs SET output_root = ? WHERE id = ?", [folder, row["id"]])


FOLLOW_KEY = "follow:"  # what the content keys of followed jobs started with before m011


@migrations()
def m011_following(db: Database) -> None:
    """Whether the job's source is followed as it is made (transcriber/app/run/follow.py), a column; it was a
    ``follow:`` prefix of the content key. Jobs of before: set from the prefix, which is taken
    off their content key (and off the kept words' of a redo, ``kept``), as a followed source's
    key is now written."""
    db["jobs"].add_column("following", int, not_null_default=0)
    prefixed = f"substr(content_key, 1, {len(FOLLOW_KEY)}) = ?"
    db.execute(f"UPDATE jobs SET following = 1, content_key = substr(content_key, {len(FOLLOW_KEY) + 1}) "
               f"WHERE {prefixed}", [FOLLOW_KEY])
    for row in list(db.query(f"SELECT job_id, content_key, job FROM kept WHERE {prefixed}", [FOLLOW_KEY])):
        key = row["content_key"][len(FOLLOW_KEY):]
        columns = {**json.loads(row["job"]), "content_key": key, "following": 1}
        db.execute("UPDATE kept SET content_key = ?, job = ? WHERE job_id = ?", [key, json.dumps(columns), row["job_id"]])
