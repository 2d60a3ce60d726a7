"""``transcribe serve`` driven as its users drive it: a real service process (uvicorn), a real
HTTP client (requests, as Bazarr's provider uses), the real tiny.en model, real media.

Bazarr's "Whisper" provider (whisperai.py) posts 16 kHz mono s16le PCM made by its own ffmpeg
with ``encode=false``: ``/detect-language`` first, then ``/asr?task=transcribe&language=en&
output=srt``. Other clients post the media file itself (``encode=true``).
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from contextlib import contextmanager
from pathlib import Path

import pytest
import srt

from tests.conftest import JFK, ROOT, ffmpeg

requests = pytest.importorskip("requests")
pytest.importorskip("fastapi", reason="the serve extra is not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(tmp_path: Path, *args: str):
    """A ``transcribe serve`` process on a free port; yields it and its base URL (a process still
    running at the end is killed: a test that stops it sends its own signal)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "transcriber.app", "serve", "--port", str(port), "--db", str(tmp_path / "jobs.db"),
                             "--spool", str(tmp_path / "spool"), *args], env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.get(url + "/openapi.json", timeout=2)
                break
            except requests.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the service did not start: {proc.stderr.read()}") from None
                time.sleep(0.2)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@contextmanager
def service(tmp_path: Path, *args: str):
    """A ``transcribe serve`` process on a free port; yields its base URL; stopped (SIGTERM) at the end."""
    with serving(tmp_path, *args) as (proc, url):
        yield url
        proc.terminate()
        proc.wait(timeout=30)


def pcm16(path: Path) -> bytes:
    """What Bazarr sends: its own ffmpeg's 16 kHz mono s16le PCM of the file."""
    from transcriber.media.ffmpegtool import ffmpeg_binary

    return subprocess.run([ffmpeg_binary(), "-nostdin", "-v", "error", "-i", str(path), "-f", "s16le", "-acodec",
                           "pcm_s16le", "-ac", "1", "-ar", "16000", "-"], capture_output=True, check=True).stdout


def words(text: str) -> list[str]:
    return "".join(c.lower() if c.isalnum() or c.isspace() else " " for c in text).split()


@pytest.fixture(scope="module")
def cli_words(tmp_path_factory) -> list[str]:
    """The words of a CLI run on jfk.flac (the default model and mode)."""
    out = tmp_path_factory.mktemp("cli")
    subprocess.run([sys.executable, "-m", "transcriber.app", str(JFK), "--format", "srt", "--output-dir", str(out), "--db",
                    str(out / "jobs.db"), "-q"], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return words(" ".join(s.content for s in srt.parse((out / "jfk.srt").read_text())))


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    with service(tmp, "--max-upload-mb", "3") as url:
        yield url, tmp


def test_bazarr_detects_then_transcribes_raw_pcm(running, cli_words):
    url, tmp = running
    audio = pcm16(JFK)
    detected = requests.post(f"{url}/detect-language", params={"encode": "false"}, files={"audio_file": audio},
                             timeout=120)
    assert detected.status_code == 200
    assert detected.json() == {"detected_language": "english", "language_code": "en", "confidence": 1.0}
    answer = requests.post(f"{url}/asr", params={"task": "transcribe", "language": "en", "output": "srt",
                                                 "encode": "false"}, files={"audio_file": audio}, timeout=300)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-disposition"].startswith('attachment; filename="audio_file.srt')
    cues = list(srt.parse(answer.text))
    assert cues and words(" ".join(c.content for c in cues)) == cli_words
    assert cues[0].start.total_seconds() < 1.0 and cues[-1].end.total_seconds() <= 11.5


def test_a_media_file_with_encode_true_in_every_output(running, cli_words):
    url, tmp = running
    for output in ("srt", "vtt", "txt", "tsv", "json"):
        with open(JFK, "rb") as f:
            answer = requests.post(f"{url}/asr", params={"output": output, "encode": "true", "word_timestamps": "true"},
                                   files={"audio_file": ("jfk.flac", f)}, timeout=300)
        assert answer.status_code == 200, (output, answer.text)
        assert answer.headers["content-disposition"] == f'attachment; filename="jfk.flac.{output}"'
        if output == "json":
            data = answer.json()
            assert words(data["text"]) == cli_words and data["segments"][0]["words"]
        elif output == "tsv":
            assert answer.text.splitlines()[0] == "start\tend\ttext"
        elif output == "vtt":
            assert answer.text.startswith("WEBVTT")
        assert set(cli_words) <= set(words(answer.text))


def test_the_same_audio_again_is_answered_from_the_store(running):
    url, tmp = running
    with open(JFK, "rb") as f:
        data = f.read()
    started = time.monotonic()
    answer = requests.post(f"{url}/asr", params={"output": "srt"}, files={"audio_file": ("again.flac", data)},
                           timeout=300)
    assert answer.status_code == 200 and time.monotonic() - started < 5  # no decode: the job is done
    listed = subprocess.run([sys.executable, "-m", "transcriber.app", "status", "--json", "--db", str(tmp / "jobs.db")],
                            capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    jobs = json.loads(listed.stdout)
    assert jobs and all(j["status"] == "done" for j in jobs)
    assert len({j["path"] for j in jobs}) == len(jobs)  # one job per audio content, not per request
    assert requests.get(f"{url}/api/jobs", timeout=10).json()[0]["status"] == "done"


@pytest.mark.parametrize("params, files, status, words_in", [
    ({"output": "srt"}, {"audio_file": ("notes.txt", b"this is not media at all\n" * 50)}, 400, "media"),
    ({"output": "srt", "encode": "false"}, {"audio_file": ("a.pcm", b"")}, 400, "empty"),
    ({"output": "srt", "encode": "false"}, {"audio_file": ("a.pcm", b"\x00\x01\x02")}, 400, "odd"),
    ({"output": "doc"}, {"audio_file": ("a.flac", b"x")}, 422, "output"),
    ({"language": "xx"}, {"audio_file": ("a.flac", b"x")}, 422, "language"),
    ({"task": "translate"}, {"audio_file": ("a.flac", JFK.read_bytes())}, 400, "english-only"),
    ({"output": "srt"}, {"audio_file": ("big.wav", b"\x00" * (3 << 20) + b"\x00")}, 413, "limit"),
    ({"output": "srt"}, {"audio_file": ("huge.wav", b"\x00" * (9 << 20))}, 413, "limit"),
    ({"output": "srt"}, {}, 422, "audio_file"),
])
def test_bad_input_is_a_4xx_with_one_json_line(running, params, files, status, words_in):
    url, _ = running
    answer = requests.post(f"{url}/asr", params=params, files=files or None, data=None if files else {"x": "1"},
                           timeout=120)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert words_in in error.lower() and "\n" not in error and "Traceback" not in answer.text


def test_the_docs_and_the_schema_are_served(running):
    url, _ = running
    assert requests.get(f"{url}/docs", timeout=10).status_code == 200
    schema = requests.get(f"{url}/openapi.json", timeout=10).json()
    asr = schema["paths"]["/asr"]["post"]
    assert {p["name"] for p in asr["parameters"]} >= {"encode", "task", "language", "initial_prompt", "output"}


def test_a_token_is_asked_for_and_taken_three_ways(tmp_path):
    with service(tmp_path, "--token", "s3cret") as url:
        assert requests.get(f"{url}/api/jobs", timeout=10).status_code == 401
        assert requests.get(f"{url}/api/jobs", params={"token": "wrong"}, timeout=10).status_code == 401
        assert requests.get(f"{url}/api/jobs", params={"token": "s3cret"}, timeout=10).status_code == 200
        assert requests.get(f"{url}/api/jobs", headers={"Authorization": "Bearer s3cret"}, timeout=10).ok
        assert requests.get(f"{url}/t/s3cret/api/jobs", timeout=10).json() == []  # Bazarr: endpoint .../t/s3cret
        assert requests.post(f"{url}/t/wrong/asr", timeout=10).status_code == 401


def test_a_service_on_every_address_without_a_token_says_so(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "transcriber.app", "serve", "--host", "0.0.0.0", "--port", str(port), "--db",
                             str(tmp_path / "jobs.db")], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert line.startswith("warning: serving on 0.0.0.0 without --token")


def make_video(path: Path, seconds: float = 11) -> Path:
    ffmpeg("-f", "lavfi", "-i", "testsrc=size=96x64:rate=5", "-i", str(JFK), "-t", str(seconds), "-shortest",
           "-c:v", "mpeg4", "-c:a", "aac", str(path))
    return path


def wait_done(url: str, name: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for job in requests.get(f"{url}/api/jobs", timeout=10).json():
            if job["name"] == name and job["status"] in ("done", "failed"):
                return job
        time.sleep(0.5)
    raise AssertionError(f"{name} did not finish")


@contextmanager
def media_server(items: dict[str, str], token: str):
    """A stand-in Jellyfin and Plex on loopback: the item lookups the webhooks make, with the token checked."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            url = urllib.parse.urlparse(self.path)
            query = urllib.parse.parse_qs(url.query)
            if url.path == "/Items" and self.headers.get("Authorization") == f'MediaBrowser Token="{token}"':
                body = {"Items": [{"Id": i, "Path": items[i]} for i in query.get("ids", []) if i in items]}
            elif url.path.startswith("/library/metadata/") and self.headers.get("X-Plex-Token") == token:
                key = url.path.rsplit("/", 1)[1]
                body = {"MediaContainer": {"Metadata": [{"Media": [{"Part": [{"file": items[key]}]}]}]}}
            else:
                self.send_error(401)
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_webhooks_queue_a_library_file_without_subtitles(tmp_path):
    library = tmp_path / "library"
    library.mkdir()
    video = make_video(library / "Speech (1961).mkv")
    items = {"abc": "/data/movies/Speech (1961).mkv", "42": "/data/movies/missing.mkv"}
    with media_server(items, "k3y") as server, \
            service(tmp_path, "--path-map", f"/data/movies={library}", "--server-url", server,
                    "--server-token", "k3y") as url:
        hook = f"{url}/webhook/jellyfin"
        body = {"NotificationType": "ItemAdded", "ItemId": "abc", "ItemType": "Movie"}  # the plugin has no path
        answer = requests.post(hook, json=body, headers={"User-Agent": "Jellyfin-Server/10.10"}, timeout=30)
        assert answer.status_code == 202 and answer.json() == {"queued": str(video)}
        assert wait_done(url, video.name)["status"] == "done"
        sidecar = library / "Speech (1961).en.srt"
        text = " ".join(cue.content for cue in srt.parse(sidecar.read_text()))
        assert "ask not what your country" in " ".join(words(text))
        again = requests.post(hook, json=body, timeout=30)
        assert again.status_code == 200 and "has en subtitles already" in again.json()["ignored"]
        emby = {"Event": "library.new", "Item": {"Path": "/data/movies/Speech (1961).mkv"}}
        assert "already" in requests.post(f"{url}/webhook/emby", json=emby, timeout=30).json()["ignored"]
        plex = {"event": "media.play", "Metadata": {"ratingKey": "42"}}
        missing = requests.post(f"{url}/webhook/plex", files={"payload": (None, json.dumps(plex))}, timeout=30)
        assert missing.status_code == 404 and f"{library}/missing.mkv" in missing.json()["error"]
        unknown = requests.post(hook, json={**body, "ItemId": "nope"}, timeout=30)
        assert unknown.status_code == 400 and "names no file" in unknown.json()["error"]
        other = requests.post(hook, json={**body, "NotificationType": "PlaybackStop"}, timeout=30)
        assert other.status_code == 200 and "PlaybackStop" in other.json()["ignored"]
        assert requests.post(hook, data="not json", headers={"Content-Type": "application/json"},
                             timeout=30).status_code == 400


@pytest.mark.skipif(not any(Path(p, "chromium").exists() for p in os.environ.get("PATH", "").split(os.pathsep)),
                    reason="Debian's chromium is not installed (apt-get install chromium)")
def test_the_status_page_in_chromium_lists_the_jobs_and_reads_the_cues(tmp_path):
    video = make_video(tmp_path / "talk.mp4")
    with service(tmp_path) as url:
        with open(video, "rb") as f:
            assert requests.post(f"{url}/asr", params={"output": "vtt"}, files={"audio_file": ("talk.mp4", f)},
                                 timeout=300).ok
        job = requests.get(f"{url}/api/jobs", timeout=10).json()[0]
        dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--mute-audio",
                              "--virtual-time-budget=10000", "--dump-dom", f"{url}/?job={job['id']}"],
                             capture_output=True, text=True, timeout=120).stdout
    assert f'data-id="{job["id"]}" data-status="done"' in dom
    assert "<td>talk.mp4</td>" in dom and "<td>0:11</td>" in dom  # the name it was sent with, its length
    assert '<pre id="cues" data-count="' in dom  # the browser's WebVTT parser read the track
    shown = dom.split('<pre id="cues"', 1)[1].split("</pre>", 1)[0].split(">", 1)[1]
    parsed = [line.split(" ", 2) for line in shown.splitlines() if line.count(" ") >= 2 and line[0].isdigit()]
    assert parsed and float(parsed[0][0]) < 1.0 and float(parsed[-1][1]) <= 11.5
    assert "ask not what your country" in " ".join(words(" ".join(text for _, _, text in parsed)))


def test_a_chunked_upload_over_the_limit_is_refused_as_it_streams(running):
    url, _ = running
    boundary = "b0undary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"audio_file\"; filename=\"a.wav\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode()

    def body():  # no Content-Length: the size is known only as it arrives
        yield head
        for _ in range(8):
            yield b"\x00" * (1 << 20)
        yield f"\r\n--{boundary}--\r\n".encode()

    answer = requests.post(f"{url}/asr", data=body(), timeout=60,
                           headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert answer.status_code == 413 and "limit" in answer.json()["error"]


def test_a_database_that_cannot_be_opened_is_one_line_at_start(tmp_path):
    (tmp_path / "jobs.db").write_text("not a database, a note\n" * 20)
    run = subprocess.run([sys.executable, "-m", "transcriber.app", "serve", "--port", str(free_port()), "--db",
                          str(tmp_path / "jobs.db")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 1 and run.stderr.startswith("error: ") and len(run.stderr.splitlines()) == 1
    assert "Traceback" not in run.stderr
