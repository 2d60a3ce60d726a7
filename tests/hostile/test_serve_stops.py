"""``transcribe serve`` treated as a faulty machine treats it: stopped (SIGTERM) with work in
hand, its spool disk full, started with an empty token; and the inputs it (and the CLI) must
refuse before decoding: a symbolic link, an output folder that cannot be written.

Each case failed on the main branch before: webhook jobs answered 202 lived in memory (a SIGTERM
lost them), a stop waited on open requests for ever, a full spool was a 500 with a traceback,
``--token ''`` served everyone, and a link or a read-only folder was found after the decode.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import srt

from ..conftest import JFK, ROOT, ffmpeg
from ..app.test_jobs_runner import ScriptedEngine
from ..app.test_serve import free_port, serving as started, words
from .helpers import invoke, lines, no_traceback, read_only, use_engine
from .test_serve_exposure import hook, jobs_in, one_json_line

requests = pytest.importorskip("requests")
pytest.importorskip("fastapi", reason="the serve extra is not installed")

STOP_BOUND_S = 10.0  # the bound on a SIGTERM with a decode in hand


def stopped_in(proc: subprocess.Popen) -> float:
    """SIGTERM, then the seconds until the process is gone."""
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    return time.monotonic() - began


def wait_for(url: str, ready, timeout: float = 300) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = requests.get(f"{url}/api/jobs", timeout=10).json()
        if ready(jobs):
            return jobs
        time.sleep(0.3)
    raise AssertionError(f"not reached in {timeout} s: {jobs}")


def test_three_accepted_webhook_jobs_across_a_sigterm_are_all_done_after_a_restart(tmp_path):
    library = tmp_path / "library"
    library.mkdir()
    names = ["one.flac", "two.flac", "three.flac"]
    for name in names:
        shutil.copy(JFK, library / name)
    mapped = ("--path-map", f"/data/media={library}")
    with started(tmp_path, *mapped) as (proc, url):
        for kind, name in zip(("jellyfin", "emby", "plex"), names):
            assert hook(url, kind, f"/data/media/{name}").status_code == 202
        assert stopped_in(proc) < STOP_BOUND_S
    kept = jobs_in(tmp_path / "jobs.db")  # a 202 is a row: all three are there, none done twice
    assert sorted(Path(j["path"]).name for j in kept) == sorted(names)
    with started(tmp_path, *mapped) as (proc, url):
        wait_for(url, lambda jobs: len(jobs) == 3 and all(j["status"] == "done" for j in jobs))
    for name in names:
        cues = srt.parse((library / name).with_suffix(".en.srt").read_text())
        assert "ask not what your country" in " ".join(words(" ".join(cue.content for cue in cues)))


@pytest.fixture(scope="module")
def long_media(tmp_path_factory) -> Path:
    """Four minutes of speech (jfk.flac over and over): minutes of decoding on these CPUs."""
    path = tmp_path_factory.mktemp("long") / "long.flac"
    ffmpeg("-stream_loop", "21", "-i", str(JFK), "-c:a", "flac", str(path))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_stop_during_a_long_decode_exits_within_the_bound_and_the_job_resumes(tmp_path, long_media, how):
    """An /asr request is waiting on its decode (an open connection, as Bazarr's is) when the
    service is stopped: on SIGTERM the request is answered (503, one line) and the process is
    gone within the bound; either way the job keeps its checkpoint and the next start ends it."""
    with started(tmp_path) as (proc, url):
        answers: list = []

        def post():
            with open(long_media, "rb") as f:
                try:
                    answers.append(requests.post(f"{url}/asr", params={"output": "srt"},
                                                 files={"audio_file": ("long.flac", f)}, timeout=120))
                except requests.RequestException as e:  # the connection cut by a SIGKILL
                    answers.append(e)

        client = threading.Thread(target=post, daemon=True)
        client.start()
        wait_for(url, lambda jobs: jobs and jobs[0]["progress"] > 0.05)
        if how == "SIGKILL":
            proc.kill()
            proc.wait(timeout=30)
        else:
            assert stopped_in(proc) < STOP_BOUND_S
            client.join(timeout=30)
            assert proc.returncode == 0 and "Traceback" not in proc.stderr.read()
            assert "stopping" in one_json_line(answers[0], 503)
    (job,) = jobs_in(tmp_path / "jobs.db")
    assert job["status"] in ("queued", "stalled", "running") and job["progress"] > 0
    with started(tmp_path) as (proc, url):  # the next start takes it up again, and ends it
        wait_for(url, lambda jobs: jobs[0]["status"] == "done")
    (again,) = jobs_in(tmp_path / "jobs.db")
    assert again["id"] == job["id"] and again["status"] == "done" and again["progress"] >= job["progress"]


def test_a_full_spool_is_a_507_in_one_line(tmp_path, tiny_fs):
    mount, fill = tiny_fs
    with started(tmp_path, "--spool", str(mount)) as (proc, url):
        fill()
        answer = requests.post(f"{url}/asr", files={"audio_file": ("talk.flac", JFK.read_bytes())}, timeout=60)
        assert "full" in one_json_line(answer, 507)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert "Traceback" not in proc.stderr.read()
    assert [p.name for p in (mount / "media").iterdir()] == []  # no partial upload left


@pytest.mark.parametrize("env", [False, True])
def test_an_empty_token_is_a_usage_error(tmp_path, env):
    args = [sys.executable, "-m", "transcriber.app", "serve", "--port", str(free_port()), "--db", str(tmp_path / "jobs.db")]
    run = subprocess.run(args + ([] if env else ["--token", ""]), capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **({"TRANSCRIBER_SERVE_TOKEN": " "} if env else {})})
    assert run.returncode == 2 and "empty token" in run.stderr and "Traceback" not in run.stderr


def test_serve_with_webhooks_and_no_library_says_so(tmp_path):
    with started(tmp_path) as (proc, url):
        answer = hook(url, "emby", str(JFK))
        assert "outside every library" in one_json_line(answer, 403)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert "no --library or --path-map" in proc.stderr.read()


def test_a_symbolic_link_named_writes_its_outputs_beside_the_link(tmp_path, monkeypatch):
    """The link's folder is the one named: its outputs go there, not beside the target (and not
    refused after the decode, the work wasted)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "named").mkdir()
    shutil.copy(JFK, tmp_path / "real" / "talk.flac")
    link = tmp_path / "named" / "talk.flac"
    link.symlink_to(tmp_path / "real" / "talk.flac")
    use_engine(monkeypatch, ScriptedEngine())
    result = invoke("--db", str(tmp_path / "jobs.db"), str(link), "-f", "srt", "-q")
    no_traceback(result)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "named" / "talk.srt").exists()
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["talk.flac"]


def test_a_symlinked_library_file_is_queued_as_its_target_in_the_library(tmp_path):
    library = tmp_path / "library"
    (library / "a").mkdir(parents=True)
    shutil.copy(JFK, library / "a" / "talk.flac")
    (library / "b.flac").symlink_to(library / "a" / "talk.flac")
    with started(tmp_path, "--library", str(library)) as (proc, url):
        answer = hook(url, "emby", str(library / "b.flac"))
        assert answer.status_code == 202 and answer.json() == {"queued": str(library / "a" / "talk.flac")}


def test_an_unwritable_output_folder_is_refused_before_decoding_cli(tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(JFK, folder / "talk.flac")
    engine = ScriptedEngine()
    use_engine(monkeypatch, engine)
    with read_only(folder):
        result = invoke("--db", str(tmp_path / "jobs.db"), str(folder / "talk.flac"), "-q")
    no_traceback(result)
    assert result.exit_code == 1 and engine.started_from == []  # no decode began
    assert any(f"cannot write the outputs in {str(folder)!r}" in line for line in lines(result)), result.stderr


def test_an_unwritable_library_folder_is_refused_before_decoding_serve(tmp_path):
    library = tmp_path / "library"
    library.mkdir()
    shutil.copy(JFK, library / "talk.flac")
    with started(tmp_path, "--library", str(library)) as (proc, url), read_only(library):
        answer = hook(url, "jellyfin", str(library / "talk.flac"))
        assert "cannot write the outputs" in one_json_line(answer, 400)
        assert jobs_in(tmp_path / "jobs.db") == []
    assert sorted(p.name for p in library.iterdir()) == ["talk.flac"]
