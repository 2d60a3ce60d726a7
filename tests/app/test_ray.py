"""The job runner on Ray (``transcribe --ray``, transcriber/app/run/ray_runner.py) on a local Ray instance that
this module starts once (2 CPUs, no dashboard), with the real tiny.en model on short cuts of the
example files: the same words as the in-process runner, a worker killed (kill -9) or hung
mid-file, files a worker cannot read, and Ray absent or never imported without ``--ray``.

Moments are picked by a test hook (tests/faults), not by sleeps: TRANSCRIBER_TEST_WORKER_SIGNAL_AT makes the
worker decoding a named file stop itself (SIGSTOP) at a given step; the test then kills it, or
lets the driver's --worker-timeout find it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
from click.testing import CliRunner

from transcriber.app.run.attempt import Attempt
from transcriber.app.cli.main import main
from transcriber.app.store.domain import Job
from transcriber.app.store.sqlite_store import SqliteJobStore

from tests import faults
from tests.conftest import JFK, PRESS_YARD, ffmpeg

RAY_INSTALL = "pip install 'transcriber[ray]'"
HOOK = "TRANSCRIBER_TEST_WORKER_SIGNAL_AT"


@pytest.fixture(scope="module")
def ray_address():
    """A local Ray instance for this module; its GCS address (what ``--ray ADDRESS`` joins)."""
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init installs its own: the other tests keep pytest's
    with pytest.MonkeyPatch.context() as patch:  # its workers act on HOOK (tests/faults)
        patch.setenv("PYTHONPATH", faults.environment(dict(os.environ))["PYTHONPATH"])
        ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=200 * 2**20,
                 logging_level=logging.ERROR, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()
    signal.signal(signal.SIGTERM, sigterm)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Four short files (24.6 s of speech): jfk.flac, the press yard, and two cuts of jfk."""
    path = tmp_path_factory.mktemp("media")
    shutil.copy(JFK, path / "jfk.flac")
    shutil.copy(PRESS_YARD, path / "press yard.flac")
    ffmpeg("-i", str(JFK), "-t", "6", str(path / "jfk start.flac"))
    ffmpeg("-i", str(JFK), "-ss", "5", str(path / "jfk end.flac"))
    return path


def copy_of(folder: Path, tmp_path: Path, names=None) -> Path:
    out = tmp_path / "in"
    out.mkdir()
    for f in folder.iterdir():
        if names is None or f.name in names:
            shutil.copy(f, out / f.name)
    return out


# Streaming: a file is many steps (one a chunk), so a worker can be stopped, killed or hung
# mid-file at a given step (one-shot, the default, takes jfk.flac in one window).
STREAM = ("--mode", "stream")


def invoke(*args) -> "click.testing.Result":  # noqa: F821
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def words_of(folder: Path) -> dict[str, list]:
    """{file name: its words (text, start, end)} from the JSON outputs."""
    out = {}
    for j in sorted(folder.glob("*.json")):
        data = json.loads(j.read_text(encoding="utf-8"))
        out[j.stem] = [(w["word"], w["start"], w["end"]) for s in data["segments"] for w in s["words"]]
    return out


@pytest.fixture(scope="module")
def reference(folder, tmp_path_factory) -> dict[str, list]:
    """The in-process runner's words for the four files."""
    work = copy_of(folder, tmp_path_factory.mktemp("reference"))
    result = invoke(work, *STREAM, "--db", work.parent / "jobs.db", "-f", "json", "-q")
    assert result.exit_code == 0, result.output
    words = words_of(work)
    assert len(words) == 4 and all(words.values())
    return words


def jobs_in(db: Path) -> dict[str, Job]:
    with SqliteJobStore(db) as store:
        return {Path(j.path).name: j for j in store.jobs()}


def pid_of(worker: str) -> int:
    return int(worker.rsplit(":", 1)[1])


def test_four_files_on_two_workers_give_the_in_process_words(ray_address, folder, reference, tmp_path):
    work = copy_of(folder, tmp_path)
    db = tmp_path / "jobs.db"
    # --ray before the folder: taken for a path, not for the Ray address
    result = invoke("--ray", work, *STREAM, "--db", db, "-f", "json", "--checkpoint-seconds", "2")
    assert result.exit_code == 0, result.output
    assert "2 workers (1 BLAS thread each), the first ready in" in result.output
    assert "4 done, 0 skipped, 0 failed" in result.output
    assert words_of(work) == reference
    jobs = jobs_in(db)
    assert all(j.status == "done" and j.runs == 1 for j in jobs.values())
    workers = {j.worker for j in jobs.values()}
    assert len(workers) == 2 and os.getpid() not in {pid_of(w) for w in workers}  # both Ray workers decoded
    status = invoke("status", "--db", db).output
    assert "WORKER" in status.splitlines()[0] and all(w in status for w in workers)


def process_state(pid: int):
    """The state letter of a process (b"T": stopped, b"Z": a zombie), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return None


def driver(*args, env_extra: dict) -> subprocess.Popen:
    """``transcribe ARGS`` as its own process (a driver joining this module's Ray instance)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSCRIBER_TEST_")}
    return subprocess.Popen([sys.executable, "-m", "transcriber.app", *map(str, args)], env={**env, **env_extra},
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(predicate, what: str, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def stopped_worker(db: Path, name: str):
    """The pid of the worker decoding ``name``, once it has stopped itself and the driver has
    committed a checkpoint of that file."""
    if not db.exists():
        return None
    with SqliteJobStore(db) as store:
        job = next((j for j in store.jobs() if Path(j.path).name == name), None)
        if job is None or not job.worker or not store.checkpoints(job.id):
            return None
    pid = pid_of(job.worker)
    return pid if process_state(pid) == b"T" else None


def test_a_worker_killed_mid_file_is_replaced_and_the_file_resumes(ray_address, folder, reference, tmp_path):
    work = copy_of(folder, tmp_path)
    db = tmp_path / "jobs.db"
    proc = driver(work, *STREAM, "--ray", ray_address, "--db", db, "-f", "json", "--checkpoint-seconds", "1",
                  env_extra={HOOK: "SIGSTOP@jfk.flac:4"})
    def others_done() -> bool:
        return db.exists() and all(j.status == "done" for name, j in jobs_in(db).items() if name != "jfk.flac")

    try:
        pid = wait_for(lambda: stopped_worker(db, "jfk.flac"), "the worker of jfk.flac to stop at step 4")
        # the other files done first: the driver has no job left to hand out, then gets one back
        wait_for(others_done, "the other files to be done")
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert words_of(work) == reference  # the resumed file too: no word lost or repeated
    jobs = jobs_in(db)
    assert all(j.status == "done" for j in jobs.values())
    assert jobs["jfk.flac"].runs == 2 and jobs["jfk.flac"].errors == 1  # resumed once, after the kill
    assert pid_of(jobs["jfk.flac"].worker) != pid
    assert all(j.runs == 1 for name, j in jobs.items() if name != "jfk.flac")
    done = re.findall(r"done: (.+?) -> ", err)
    assert sorted(Path(path).name for path in done) == sorted(jobs)  # each file done once
    assert f"jfk.flac: the Ray worker {jobs['jfk.flac'].worker.rsplit(':', 1)[0]}:{pid} transcribing it died" in err
    assert "4 done, 0 skipped, 0 failed" in err


def test_the_driver_killed_mid_file_then_a_rerun_resumes_it(ray_address, folder, reference, tmp_path):
    work = copy_of(folder, tmp_path, names={"jfk.flac"})
    db = tmp_path / "jobs.db"
    args = (work, *STREAM, "--ray", ray_address, "--db", db, "-f", "json", "--checkpoint-seconds", "1", "--workers", "1")
    proc = driver(*args, env_extra={HOOK: "SIGSTOP@jfk.flac:4"})
    try:
        pid = wait_for(lambda: stopped_worker(db, "jfk.flac"), "the worker of jfk.flac to stop at step 4")
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
    wait_for(lambda: process_state(pid) in (None, b"Z"), "Ray to end the workers of the dead driver")
    proc = driver(*args, env_extra={})
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert words_of(work) == {"jfk": reference["jfk"]}
    job = jobs_in(db)["jfk.flac"]
    assert job.status == "done" and job.runs == 2 and job.errors == 0  # resumed, not counted as a failure
    with SqliteJobStore(db) as store:
        owners = [c["owner"] for c in store.checkpoints(job.id)]
    assert len(set(owners)) == 2 and owners[0] != owners[-1]  # the second driver went on from the first's


@pytest.mark.slow
def test_a_hung_worker_is_killed_after_the_timeout_and_restarted(ray_address, folder, reference, tmp_path):
    work = copy_of(folder, tmp_path, names={"jfk.flac"})
    db = tmp_path / "jobs.db"
    proc = driver(work, *STREAM, "--ray", ray_address, "--db", db, "-f", "json", "--checkpoint-seconds", "1",
                  "--workers", "1", "--worker-timeout", "20", env_extra={HOOK: "SIGSTOP@jfk.flac:4"})
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert "hung (no progress for 20 s) and was killed" in err
    assert words_of(work) == {"jfk": reference["jfk"]}
    job = jobs_in(db)["jfk.flac"]
    assert job.status == "done" and job.runs == 2  # resumed on the worker Ray restarted


def test_files_a_worker_cannot_read_fail_alone(ray_address, folder, reference, tmp_path, monkeypatch):
    work = copy_of(folder, tmp_path, names={"press yard.flac"})
    data = JFK.read_bytes()
    (work / "broken.flac").write_bytes(data[: len(data) // 3])  # the header says 11 s
    shutil.copy(JFK, work / "gone.flac")
    begin = Attempt.begin

    def vanish_after_the_driver_looked(attempt):
        # the driver has read the file; the worker will not find it (a share missing on its node)
        resume = begin(attempt)
        if attempt.path.name == "gone.flac":
            attempt.path.unlink()
        return resume

    monkeypatch.setattr(Attempt, "begin", vanish_after_the_driver_looked)
    db = tmp_path / "jobs.db"
    result = invoke(work, *STREAM, "--ray", "--db", db, "-f", "json", "--workers", "2", "-q")
    assert result.exit_code == 1, result.output
    errors = sorted(re.findall(r"error: (.*)", result.output))
    assert len(errors) == 2, result.output
    assert "broken.flac" in errors[0] and "truncated: decoded" in errors[0]
    assert "gone.flac" in errors[1] and "No such file or directory" in errors[1]
    assert "1 done, 0 skipped, 2 failed" in result.output
    assert words_of(work) == {"press yard": reference["press yard"]}  # no partial output of the others
    jobs = jobs_in(db)
    assert jobs["broken.flac"].status == jobs["gone.flac"].status == "failed"
    assert jobs["press yard.flac"].status == "done"


def test_ray_asked_for_but_not_installed_is_a_usage_error(tmp_path):
    hidden = "import sys; sys.modules['ray'] = None; from transcriber.app.cli.main import main; main()"
    proc = subprocess.run([sys.executable, "-c", hidden, str(PRESS_YARD), "--ray", "--db", tmp_path / "jobs.db"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == f"Error: Invalid value for '--ray': Ray is not installed: {RAY_INSTALL}"
    assert not (tmp_path / "jobs.db").exists()


def test_ray_is_not_imported_without_the_flag(tmp_path):
    shutil.copy(PRESS_YARD, tmp_path / "a.flac")
    script = ("import json, sys\nfrom transcriber.app.cli.main import main\n"
              "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code\n"
              "print(json.dumps({'code': code, 'ray': sorted(m for m in sys.modules if m.split('.')[0] == 'ray')}))")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "a.flac"), "--db", tmp_path / "jobs.db",
                           "-q", "-f", "json"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert json.loads(proc.stdout.splitlines()[-1]) == {"code": 0, "ray": []}
    assert (tmp_path / "a.json").exists()


def test_a_cluster_address_where_nothing_answers_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "transcriber.app", str(PRESS_YARD), "--ray", "127.0.0.1:1", "--db",
                           str(tmp_path / "jobs.db"), "-q"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["error: cannot join the Ray cluster at 127.0.0.1:1: Connection refused"]
