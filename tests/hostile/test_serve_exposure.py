"""``transcribe serve`` probed as an attacker probes it: what it reads, what it serves, and what
a web page in a browser beside it can make it do. A real service process, a real HTTP client,
headless Chromium where a browser is the attacker's tool.

Each case failed on the main branch before the service's guard (transcriber/app/serve/guard.py): a webhook
queued /etc/passwd and /media served it; a text/plain cross-site post was taken; an uploaded page
was served back as text/html; any Host was answered.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import JFK, ROOT, ffmpeg
from ..app.test_serve import service

requests = pytest.importorskip("requests")
pytest.importorskip("fastapi", reason="the serve extra is not installed")

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install "
                                                           "chromium)")


def jobs_in(db: Path) -> list[dict]:
    """The store's jobs as ``transcribe status --json`` lists them."""
    listed = subprocess.run([sys.executable, "-m", "transcriber.app", "status", "--json", "--db", str(db)], capture_output=True,
                            text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    return json.loads(listed.stdout or "[]")


def hook(url: str, kind: str, path: str, **headers) -> "requests.Response":
    """A library.new/ItemAdded webhook naming ``path`` in the shape each server sends it."""
    if kind == "jellyfin":
        return requests.post(f"{url}/webhook/jellyfin", json={"NotificationType": "ItemAdded", "Path": path},
                             headers=headers, timeout=30)
    if kind == "emby":
        return requests.post(f"{url}/webhook/emby", files={"data": (None, json.dumps(
            {"Event": "library.new", "Item": {"Path": path}}))}, headers=headers, timeout=30)
    payload = {"event": "library.new", "Metadata": {"Media": [{"Part": [{"file": path}]}]}}
    return requests.post(f"{url}/webhook/plex", files={"payload": (None, json.dumps(payload))}, headers=headers,
                         timeout=30)


def one_json_line(answer, status: int) -> str:
    assert answer.status_code == status, answer.text
    message = answer.json()["error"]
    assert "\n" not in message and "Traceback" not in answer.text
    return message


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A service whose one library is /data/movies -> library/; outside/ beside it holds a copy
    of jfk.flac, and library/ a link to it."""
    tmp = tmp_path_factory.mktemp("exposed")
    (tmp / "library").mkdir()
    (tmp / "outside").mkdir()
    shutil.copy(JFK, tmp / "outside" / "talk.flac")
    (tmp / "library" / "link.flac").symlink_to(tmp / "outside" / "talk.flac")
    with service(tmp, "--path-map", f"/data/movies={tmp / 'library'}") as url:
        yield url, tmp


ESCAPES = {
    "etc-passwd": lambda tmp: "/etc/passwd",
    "dot-dot": lambda tmp: "/data/movies/../../../../../../etc/passwd",
    "outside-media": lambda tmp: "/data/movies/../outside/talk.flac",
    "link-out": lambda tmp: "/data/movies/link.flac",
}


@pytest.mark.parametrize("kind", ["jellyfin", "emby", "plex"])
@pytest.mark.parametrize("escape", list(ESCAPES))
def test_a_webhook_path_outside_the_library_is_a_403_and_nothing_is_queued_or_served(served, kind, escape):
    url, tmp = served
    message = one_json_line(hook(url, kind, ESCAPES[escape](tmp)), 403)
    assert "outside every library" in message
    assert jobs_in(tmp / "jobs.db") == []
    assert requests.get(f"{url}/media/1", timeout=10).status_code == 404


def test_a_file_outside_the_library_gets_no_subtitle_beside_it(served):
    url, tmp = served
    for kind in ("jellyfin", "emby", "plex"):
        assert hook(url, kind, str(tmp / "outside" / "talk.flac")).status_code == 403
    time.sleep(2)  # what a queued job would have had to begin
    assert sorted(p.name for p in (tmp / "outside").iterdir()) == ["talk.flac"]
    assert jobs_in(tmp / "jobs.db") == []


@pytest.mark.parametrize("headers, status", [
    ({"Content-Type": "text/plain", "Origin": "http://evil.example"}, 403),  # a page's no-cors fetch
    ({"Content-Type": "text/plain"}, 415),  # the same body, the Origin header stripped
    ({"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"}, 403),
    ({"Content-Type": "application/x-www-form-urlencoded"}, 415),  # a form post
    ({"Content-Type": "application/json", "Origin": "http://evil.example"}, 403),
    ({"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403),
])
def test_a_cross_site_webhook_is_refused(served, headers, status):
    """The JSON of a valid Emby event naming a library file, sent as a web page can send it."""
    url, tmp = served
    (tmp / "library" / "film.flac").exists() or shutil.copy(JFK, tmp / "library" / "film.flac")
    body = json.dumps({"Event": "library.new", "Item": {"Path": "/data/movies/film.flac"}})
    one_json_line(requests.post(f"{url}/webhook/emby", data=body, headers=headers, timeout=30), status)
    assert jobs_in(tmp / "jobs.db") == []


def test_a_cross_site_upload_is_refused(served):
    url, tmp = served
    answer = requests.post(f"{url}/asr", files={"audio_file": ("talk.flac", JFK.read_bytes())},
                           headers={"Origin": "http://evil.example"}, timeout=30)
    assert "cross-site" in one_json_line(answer, 403)
    assert jobs_in(tmp / "jobs.db") == [] and not any((tmp / "spool" / "media").iterdir())


@pytest.mark.parametrize("host", ["evil.example", "evil.example:9000", "localhost.evil.example", "10.0.0.1", ""])
def test_a_host_that_is_not_the_service_is_refused(served, host):
    """DNS rebinding: a name of the attacker's resolving to 127.0.0.1 reaches the service with
    its own Host; the page, the API and the media all refuse it."""
    url, _ = served
    for path in ("/", "/api/jobs", "/media/1", "/openapi.json", "/status", "/jobs/1", "/jobs/1/output.srt"):
        answer = requests.get(url + path, headers={"Host": host}, timeout=10)
        assert "not this service's" in one_json_line(answer, 421)
    answer = requests.get(url + "/v1/models", headers={"Host": host}, timeout=10)  # OpenAI's error shape there
    assert answer.status_code == 421 and "not this service's" in answer.json()["error"]["message"]
    for ours in ("localhost", "localhost:9000", "127.0.0.1", "[::1]:9000"):
        assert requests.get(url + "/api/jobs", headers={"Host": ours}, timeout=10).status_code == 200


def test_the_page_sends_a_csp_and_every_answer_nosniff(served):
    url, _ = served
    page = requests.get(url + "/", timeout=10)
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'sha256-" in policy and "unsafe-inline" not in policy
    for path in ("/", "/api/jobs", "/media/999"):
        assert requests.get(url + path, timeout=10).headers["x-content-type-options"] == "nosniff"


PAGE = (b"<!doctype html><html><body><p id='p'>inert</p><script>document.getElementById('p').textContent = "
        b"'SCRIPT-RAN-' + document.domain;</script></body></html>")


def test_an_uploaded_html_file_is_never_served_as_a_page(served):
    url, tmp = served
    answer = requests.post(f"{url}/asr", params={"output": "srt"}, files={"audio_file": ("x.html", PAGE)}, timeout=120)
    assert answer.status_code == 400  # not media: its job failed
    kept = [p for p in (tmp / "spool" / "media").iterdir() if p.suffix != ".name"]  # (.name: the name sent, as text)
    assert kept and all(p.suffix == "" for p in kept)  # stored by content, no name of the client's
    (job,) = [j for j in requests.get(f"{url}/api/jobs", timeout=10).json() if j["status"] == "failed"]
    media = requests.get(f"{url}/media/{job['id']}", timeout=10)
    assert media.status_code == 404 and "html" not in media.headers["content-type"]
    assert media.headers["x-content-type-options"] == "nosniff"
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed: the browser's half of this case is not run")
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000",
                          "--dump-dom", f"{url}/media/{job['id']}"], capture_output=True, text=True, timeout=120).stdout
    assert "SCRIPT-RAN" not in dom and "<script>document" not in dom


def test_a_done_upload_is_served_as_media_never_inline(served):
    url, tmp = served
    with open(JFK, "rb") as f:
        assert requests.post(f"{url}/asr", params={"output": "srt"}, files={"audio_file": ("a.html", f)},
                             timeout=300).status_code == 200
    (job,) = [j for j in requests.get(f"{url}/api/jobs", timeout=10).json() if j["status"] == "done"]
    media = requests.get(f"{url}/media/{job['id']}", timeout=10)
    assert media.status_code == 200 and media.headers["content-type"] == "audio/flac"
    assert media.headers["content-disposition"].startswith("attachment")
    assert "sandbox" in media.headers["content-security-policy"] and media.content == JFK.read_bytes()


FORMATS = {  # ffmpeg's arguments for each, and the type /media gives it (from its bytes)
    "mp3": (("-c:a", "libmp3lame"), "audio/mpeg"), "ogg": (("-c:a", "libopus"), "audio/ogg"),
    "m4a": (("-c:a", "aac"), "video/mp4"), "aac": (("-c:a", "aac", "-f", "adts"), "audio/aac"),
    "mkv": (("-c:a", "aac"), "video/x-matroska"), "wav": (("-c:a", "pcm_s16le"), "audio/wav"),
}


@pytest.mark.slow
def test_uploads_are_decoded_without_their_name_and_played_back_as_media(served, tmp_path):
    """The spool keeps no extension: ffmpeg finds each format from its bytes, and /media gives
    each its audio/video type from the allow-list."""
    url, _ = served
    for ext, (args, kind) in FORMATS.items():
        made = tmp_path / f"talk.{ext}"
        ffmpeg("-i", str(JFK), *args, str(made))
        answer = requests.post(f"{url}/asr", params={"output": "txt"}, files={"audio_file": (made.name, made.read_bytes())},
                               timeout=300)
        assert answer.status_code == 200 and "country" in answer.text.lower(), (ext, answer.text)
        (job,) = [j for j in requests.get(f"{url}/api/jobs", timeout=10).json() if j["status"] == "done"
                  and requests.get(f"{url}/media/{j['id']}", timeout=10).content == made.read_bytes()]
        assert requests.get(f"{url}/media/{job['id']}", timeout=10).headers["content-type"] == kind, ext


def test_the_databases_other_jobs_are_not_listed_nor_their_words_served(tmp_path):
    """The store a service shares with the CLI holds jobs of files outside its folders: their
    names, paths and words are not the service's to show (the page's list, /subtitles, /media)."""
    (tmp_path / "library").mkdir()
    private = tmp_path / "private"
    private.mkdir()
    shutil.copy(JFK, private / "diary.flac")
    subprocess.run([sys.executable, "-m", "transcriber.app", str(private / "diary.flac"), "-f", "txt", "--db",
                    str(tmp_path / "jobs.db"), "-q"], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                   timeout=300)
    (job,) = jobs_in(tmp_path / "jobs.db")
    assert job["status"] == "done"
    with service(tmp_path, "--library", str(tmp_path / "library")) as url:
        assert requests.get(f"{url}/api/jobs", timeout=10).json() == []
        for route in (f"/subtitles/{job['id']}.vtt", f"/media/{job['id']}"):
            answer = requests.get(url + route, timeout=10)
            assert answer.status_code == 404 and "diary" not in answer.text and "fellow" not in answer.text, route
