"""Jobs over HTTP: ``POST /asr?async=true`` answers at once, ``GET /jobs/{id}`` tells where the
job stands, ``GET /jobs/{id}/output.{fmt}`` gives its output; jobs survive a killed service; the
status page tells an upload by the name it was sent with, its length and how long it took.

A real service process, the real tiny.en model, real media (jfk.flac; a minute of it repeated).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import srt

from tests.app.test_serve import serving, service, words
from tests.conftest import JFK, ROOT, ffmpeg

requests = pytest.importorskip("requests")


def post(url: str, path: Path, name: str, **params):
    with open(path, "rb") as f:
        return requests.post(url + "/asr", params=params, files={"audio_file": (name, f)}, timeout=300)


def spoken(subtitles: str) -> str:
    """The words of an SRT file's cues, lower case, one space apart."""
    return " ".join(words(" ".join(cue.content for cue in srt.parse(subtitles))))


def done(url: str, job_id: int, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = requests.get(f"{url}/jobs/{job_id}", timeout=10).json()
        if state["status"] in ("done", "failed") or time.monotonic() > deadline:
            return state
        time.sleep(0.3)


@pytest.fixture(scope="module")
def minute(tmp_path_factory) -> Path:
    """jfk.flac five times over: 55 s, a few seconds to decode."""
    path = tmp_path_factory.mktemp("minute") / "minute.flac"
    ffmpeg("-stream_loop", "4", "-i", str(JFK), "-c:a", "flac", str(path))
    return path


def test_an_async_request_is_answered_at_once_and_its_output_fetched_later(tmp_path):
    with service(tmp_path) as url:
        sync = post(url, JFK, "jfk.flac", output="srt", language="en")
        assert sync.status_code == 200
        answer = post(url, JFK, "talk.flac", output="srt", language="en", initial_prompt="A speech.",
                      **{"async": "true"})
        assert answer.status_code == 202, answer.text
        body = answer.json()
        assert body["status"] == "queued" and body["queue_position"] in (0, None)
        assert body["links"]["output"] == f"/jobs/{body['job_id']}/output.srt"
        state = done(url, body["job_id"])
        assert state["status"] == "done" and state["duration"] == pytest.approx(11.0, abs=0.1)
        assert state["progress"] == 1.0 and state["seconds"] > 0 and state["queue_position"] is None
        subtitles = requests.get(url + body["links"]["output"], timeout=10)
        assert subtitles.status_code == 200 and "ask not what your country" in spoken(subtitles.text)
        for fmt in ("vtt", "json", "txt", "tsv"):  # every format, made from the stored words
            other = requests.get(f"{url}/jobs/{body['job_id']}/output.{fmt}", timeout=10)
            assert other.status_code == 200 and "country" in other.text.lower(), fmt
        rows = {row["id"]: row for row in requests.get(url + "/api/jobs", timeout=10).json()}
        row = rows[body["job_id"]]
        assert row["name"] == "talk.flac" and row["duration"] == pytest.approx(11.0, abs=0.1) and row["seconds"] > 0
        assert requests.get(f"{url}/jobs/{body['job_id']}/output.exe", timeout=10).status_code == 404
        assert requests.get(f"{url}/jobs/{body['job_id'] + 100}", timeout=10).status_code == 404


def test_a_running_job_has_no_output_yet_and_a_killed_service_finishes_it_after_a_restart(tmp_path, minute):
    with serving(tmp_path) as (proc, url):
        answer = post(url, minute, "minute.flac", output="srt", language="en", **{"async": "true"})
        assert answer.status_code == 202
        job_id = answer.json()["job_id"]
        early = requests.get(f"{url}/jobs/{job_id}/output.srt", timeout=10)
        said = early.json()["error"]
        assert early.status_code == 409 and ("is queued" in said or "is running" in said), said
        proc.send_signal(signal.SIGKILL)  # no checkpoint, no goodbye
        proc.wait(timeout=30)
    with service(tmp_path) as url:  # the same database and spool
        state = done(url, job_id)
        assert state["status"] == "done", state
        text = requests.get(f"{url}/jobs/{job_id}/output.srt", timeout=10).text
        assert spoken(text).count("ask not what your country") == 5


def test_another_s_job_is_not_the_service_s_to_show(tmp_path):
    """A job of a ``transcribe`` run on the same database (a file outside the service's folders)
    is a 404 on every job route, as no job."""
    media = tmp_path / "private" / "jfk.flac"
    media.parent.mkdir()
    media.write_bytes(JFK.read_bytes())
    subprocess.run([sys.executable, "-m", "transcriber.app", str(media), "-f", "srt", "--db", str(tmp_path / "jobs.db"),
                    "-q"], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    with service(tmp_path) as url:
        for path in ("/jobs/1", "/jobs/1/output.srt", "/jobs/1/output.json"):
            r = requests.get(url + path, timeout=10)
            assert r.status_code == 404 and "private" not in r.text, path
        r = requests.post(url + "/asr", params={"async": "true"}, files={"audio_file": ("a.flac", JFK.read_bytes())},
                          headers={"Origin": "http://evil.example"}, timeout=30)
        assert r.status_code == 403  # a web page in the user's browser cannot queue work
        r = requests.get(url + "/jobs/1", headers={"Host": "evil.example"}, timeout=10)
        assert r.status_code == 421


def test_an_upload_s_name_is_shown_as_text_and_kept_nowhere_else(tmp_path):
    """A client's name with folders, a newline and markup: the page gets its last part as plain
    text (the page puts it in with textContent), and nothing is written outside the spool."""
    with service(tmp_path) as url:
        answer = post(url, JFK, "../../outside\n<img src=x onerror=alert(1)>.flac", output="txt", language="en",
                      **{"async": "true"})
        assert answer.status_code == 202
        row = requests.get(url + "/api/jobs", timeout=10).json()[0]
    assert row["name"] == "outside%0A<img src=x onerror=alert(1)>.flac"  # (requests escaped the newline)
    assert not [p for p in tmp_path.rglob("*") if "outside" in p.name or "img" in p.name]
    kept = [p for p in (tmp_path / "spool" / "media").iterdir() if p.name.endswith(".name")]
    assert len(kept) == 1 and kept[0].read_text() == row["name"]
