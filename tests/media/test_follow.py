"""``transcribe follow``: a recording transcribed as it is made (issue 20). Real ffmpeg, the real
tiny.en model, real SQLite in tmp dirs; the recording is examples/jfk.flac (11 s)."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bench.streaming.follow_latency import GrowingWriter, srt_words
from transcriber.app.cli.report import shown_status
from transcriber.app.store.sqlite_store import SqliteJobStore
from tests import faults
from tests.conftest import JFK, ROOT, SYSTEM_FFMPEG
from tests.hungfs import HungMount, unavailable
from transcriber import FollowOptions, LiveSource
from transcriber.media.audio import load_audio
from transcriber.media.ffmpegtool import ffmpeg_binary
from transcriber.media.follow import WAV_PACKET, wav_packet
from transcriber.media.growingfile import WavFeed

pytestmark = pytest.mark.usefixtures("any_ffmpeg")  # imageio-ffmpeg's and the PATH's (tests/conftest.py)


def transcribe(*args, tmp: Path, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    env = faults.environment({**os.environ, "TRANSCRIBER_DB": str(tmp / "jobs.db"), **(env or {})})
    return subprocess.run([sys.executable, "-m", "transcriber.app", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, **kwargs)


def start(*args, tmp: Path, env: dict | None = None) -> subprocess.Popen:
    env = faults.environment({**os.environ, "TRANSCRIBER_DB": str(tmp / "jobs.db"), **(env or {})})
    return subprocess.Popen([sys.executable, "-m", "transcriber.app", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def words(json_path: Path) -> list[str]:
    return [w["word"] for s in json.loads(json_path.read_text())["segments"] for w in s["words"]]


def replay(source: Path, tmp: Path) -> Path:
    """``transcribe FILE --mode stream`` on the finished file: its outputs' folder."""
    out = tmp / "replay"
    r = transcribe(source, "--mode", "stream", "-o", out, "-f", "srt,json", "-q", "--db", tmp / "replay.db", tmp=tmp)
    assert r.returncode == 0, r.stderr
    return out


# -- the library: a live source gives the samples of the finished file ------------------------------

@pytest.mark.parametrize("args", [["-c:a", "pcm_s16le", "x.wav"], ["-ar", "44100", "-ac", "2", "x.wav"],
                                  ["-c:a", "pcm_u8", "-ar", "8000", "x.wav"], ["-c:a", "pcm_s24le", "-ar", "48000", "x.wav"],
                                  ["-c:a", "pcm_s32le", "x.wav"], ["-c:a", "pcm_f32le", "x.wav"],
                                  ["-c:a", "pcm_s16le", "-ac", "6", "x.wav"],
                                  ["x.flac"], ["-c:a", "libvorbis", "x.mkv"], ["-c:a", "libopus", "x.ogg"],
                                  ["-c:a", "aac", "-f", "mpegts", "x.ts"],
                                  ["-c:a", "aac", "-movflags", "+frag_keyframe+empty_moov", "x.mp4"]],
                         ids=["wav", "wav44k", "wav-u8", "wav-s24", "wav-s32", "wav-float", "wav-5.1",
                              "flac", "mkv", "ogg", "mpegts", "fmp4"])
def test_live_source_gives_the_samples_of_the_file(tmp_path, args):
    """The same samples as the finished file's reader. (An integer PCM WAV goes to ffmpeg as
    float32, converted by the feeder: the samples out are the same all the same.)"""
    path = tmp_path / args[-1]
    subprocess.run([ffmpeg_binary(), "-v", "error", "-i", JFK, *args[:-1], path], check=True)
    source = LiveSource(str(path), FollowOptions(idle_seconds=0.3))
    got = np.concatenate([s for _, s in source.chunks(1.0)])
    assert np.array_equal(got, load_audio(path))


def test_a_stale_wav_header_is_read_to_the_end(tmp_path):
    """A WAV whose header says 1 s (a writer patches it later): through a pipe ffmpeg would stop
    there; the feeder hands it a size of 0, so all of the audio comes."""
    full = tmp_path / "full.wav"
    subprocess.run([ffmpeg_binary(), "-v", "error", "-i", JFK, full], check=True)
    data = bytearray(full.read_bytes())
    i = data.find(b"data")
    data[i + 4:i + 8] = (32000).to_bytes(4, "little")
    stale = tmp_path / "stale.wav"
    stale.write_bytes(data)
    got = np.concatenate([s for _, s in LiveSource(str(stale), FollowOptions(idle_seconds=0.3)).chunks(1.0)])
    assert np.array_equal(got, load_audio(full))


@pytest.mark.parametrize("args", [["-c:a", "pcm_s16le"], ["-c:a", "pcm_s24le", "-ac", "2"], ["-c:a", "pcm_u8"],
                                  ["-c:a", "pcm_f32le", "-ac", "2"], ["-c:a", "pcm_f64le"]],
                         ids=["s16", "s24-stereo", "u8", "f32-stereo", "f64"])
def test_a_wav_fed_in_any_pieces_gives_the_samples_of_the_file(tmp_path, args):
    """The feeder's Matroska does not depend on how the file's bytes arrived (a header split over
    many reads, a sample, or the two channels of one, split between two reads): ffmpeg decodes
    the samples of the file from it."""
    path = tmp_path / "x.wav"
    subprocess.run([ffmpeg_binary(), "-v", "error", "-i", JFK, *args, path], check=True)
    data = path.read_bytes()
    assert WavFeed.kind(data[:WavFeed.LOOK]) == "pcm"
    feed, pieces, at = WavFeed(), [], 0
    for size in np.random.default_rng(0).integers(1, 700, size=len(data)):
        pieces.append(feed.feed(data[at:at + size]))
        at += size
        if at >= len(data):
            break
    fed = b"".join(pieces)
    assert fed[:4] == bytes.fromhex("1a45dfa3")  # EBML: Matroska
    r = subprocess.run([ffmpeg_binary(), "-v", "error", "-f", "matroska", "-i", "pipe:0", "-f", "f32le", "-ac", "1",
                        "-ar", "16000", "pipe:1"], input=fed, capture_output=True, check=True)
    assert not r.stderr, r.stderr
    assert np.array_equal(np.clip(np.frombuffer(r.stdout, "<f4"), -1, 1), load_audio(path))


def test_the_variant_s_ffmpeg_is_the_one_used_here_and_in_a_command(any_ffmpeg):
    """``any_ffmpeg``: the library finds the variant's ffmpeg, in this process and in one it
    starts; imageio-ffmpeg's comes without an ffprobe."""
    import imageio_ffmpeg

    from transcriber.media import ffmpegtool

    want = imageio_ffmpeg.get_ffmpeg_exe() if any_ffmpeg == "imageio" else SYSTEM_FFMPEG
    code = "from transcriber.media import ffmpegtool; print(ffmpegtool.ffmpeg_binary()); print(ffmpegtool.ffprobe_binary())"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    child, child_probe = r.stdout.splitlines()
    assert os.path.realpath(ffmpegtool.ffmpeg_binary()) == os.path.realpath(child) == os.path.realpath(want)
    assert (ffmpegtool.ffprobe_binary() is None) == (child_probe == "None") == (any_ffmpeg == "imageio")


def test_the_wav_packet_is_one_the_ffmpeg_accepts(tmp_path):
    """ffmpeg 5.x's WAV demuxer refuses packets under 1024 bytes ("Error setting option
    max_size"); 6 and later take WAV_PACKET. Asked of the ffmpeg once; none where it cannot tell."""
    path = tmp_path / "x.wav"
    subprocess.run([ffmpeg_binary(), "-v", "error", "-i", JFK, path], check=True)
    packet = wav_packet(ffmpeg_binary())
    assert packet == WAV_PACKET or packet == 1024
    r = subprocess.run([ffmpeg_binary(), "-v", "error", "-f", "wav", "-max_size", str(packet), "-i", path,
                        "-f", "null", "-"], capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr, r.stderr
    assert wav_packet("/bin/false") is None and wav_packet(str(tmp_path / "no-such-ffmpeg")) is None


@pytest.mark.parametrize("fmt", ["flac", "wav"])
def test_a_file_followed_on_a_loaded_machine_is_read_whole_without_errors(tmp_path, monkeypatch, fmt):
    """A loaded machine: a read of the growing file that finds nothing new is answered 1.2 s
    after the file was looked at (the reader process, busy or started anew, waits for a core),
    longer than the 1 s idle end. The recorder writes a piece every 0.25 s, so the file never
    stops growing for 1 s: it is read to its end, every sample as the finished file's, and
    ffmpeg reports no error. (The idle time was taken when the answer came: the first read that
    found nothing new ended the file there, and the FLAC's last frame held, if written only in
    part, was fed to ffmpeg: "invalid residual".)"""
    import transcriber.media.growingfile as growingfile

    def late(call, *args, **kwargs):
        answer = bounded(call, *args, **kwargs)
        if call is growingfile.read_at and not answer[0]:
            time.sleep(1.2)
        return answer

    bounded = growingfile.bounded
    monkeypatch.setattr(growingfile, "bounded", late)
    path = tmp_path / f"rec.{fmt}"
    writer = GrowingWriter(load_audio(JFK)[:6 * 16000], path, 0.25)
    writer.start()
    while not path.exists():
        time.sleep(0.01)
    stream = LiveSource(str(path), FollowOptions(idle_seconds=1.0)).chunks(1.0)
    got = np.concatenate([s for _, s in stream])
    writer.join()
    assert stream.warnings == ()
    assert np.array_equal(got, load_audio(path))


def test_resume_drops_the_samples_before_its_start(tmp_path):
    source = LiveSource(str(JFK), FollowOptions(idle_seconds=0.3))
    source.key()  # read ahead: served first all the same
    chunks = list(source.chunks(1.0, start=3.0))
    assert chunks[0][0] == 48000
    assert np.array_equal(np.concatenate([s for _, s in chunks]), load_audio(JFK)[48000:])


# -- the command -------------------------------------------------------------------------------------

def following(db: Path) -> set[tuple[str, bool]]:
    """(status as ``transcribe status`` shows it, progress > 0) of each job now."""
    if not db.exists():
        return set()
    with SqliteJobStore(db) as store:
        return {(shown_status(j, time.time()), j.progress > 0) for j in store.each_job()}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_follow_a_recording_being_made(tmp_path, fmt):
    """Written in real time in 1 s pieces: words are on disk before the writer ends, status says
    following, and after the idle timeout the outputs are those of the replay of the file.
    (The recording twice over, 22 s: room for the model's load on a loaded machine.)"""
    source, out = tmp_path / f"rec.{fmt}", tmp_path / "out"
    writer = GrowingWriter(np.tile(load_audio(JFK), 2), source, piece_seconds=1.0)
    writer.start()
    while not source.exists():
        time.sleep(0.01)
    follow = start("follow", source, "-o", out, "-f", "srt,json", "-q", "--idle-seconds", 1.5,
                   "--update-seconds", 0.5, tmp=tmp_path)
    live_words, statuses = 0, set()
    while writer.is_alive():
        live_words = max(live_words, srt_words(out / "rec.srt"))
        statuses |= following(tmp_path / "jobs.db")
        time.sleep(0.2)
    _, stderr = follow.communicate(timeout=120)
    assert follow.returncode == 0, stderr
    assert live_words > 0, "no word on disk before the writer finished"
    assert ("following", True) in statuses
    ref = replay(source, tmp_path)
    for name in ("rec.srt", "rec.json"):
        assert (out / name).read_bytes() == (ref / name).read_bytes()


@pytest.mark.slow
def test_follow_standard_input(tmp_path):
    out = tmp_path / "out"
    cmd = (f"{ffmpeg_binary()} -v error -i '{JFK}' -f wav - | {sys.executable} -m transcriber.app follow - -o '{out}' --name rec "
           f"-f json -q --jsonl -")
    r = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TRANSCRIBER_DB": str(tmp_path / "jobs.db")})
    assert r.returncode == 0, r.stderr
    expected = words(replay(JFK, tmp_path) / "jfk.json")
    assert words(out / "rec.json") == expected
    assert [json.loads(line)["word"] for line in r.stdout.splitlines()] == expected  # --jsonl: as committed


@pytest.mark.slow
def test_kill_mid_follow_then_resume(tmp_path):
    """kill -9 right after the second checkpoint while the file still grows; the same command
    again resumes there and ends with the words of an uninterrupted follow (the replay's)."""
    source, out = tmp_path / "rec.wav", tmp_path / "out"
    writer = GrowingWriter(load_audio(JFK), source, piece_seconds=1.0, speed=2.0)
    writer.start()
    while not source.exists():
        time.sleep(0.01)
    args = ("follow", source, "-o", out, "-f", "srt,json", "-q", "--idle-seconds", 1.5, "--checkpoint-seconds", 3)
    killed = transcribe(*args, tmp=tmp_path, env={"TRANSCRIBER_TEST_KILL_AT": "checkpoint:2"})
    assert killed.returncode == -9, killed.stderr
    resumed = transcribe(*args, tmp=tmp_path)
    writer.join()
    assert resumed.returncode == 0, resumed.stderr
    ref = replay(source, tmp_path)
    assert (out / "rec.json").read_bytes() == (ref / "rec.json").read_bytes()
    assert (out / "rec.srt").read_bytes() == (ref / "rec.srt").read_bytes()


def test_a_plain_mp4_being_written_is_refused(tmp_path):
    """A plain MP4 cut where a recorder would be (the index not written yet): one line naming
    the container, at once."""
    whole = tmp_path / "whole.mp4"
    subprocess.run([ffmpeg_binary(), "-v", "error", "-i", JFK, "-c:a", "aac", whole], check=True)
    data = whole.read_bytes()
    assert data.find(b"mdat") < data.find(b"moov")
    growing = tmp_path / "rec.mp4"
    growing.write_bytes(data[:len(data) // 2])
    began = time.monotonic()
    r = transcribe("follow", growing, "--idle-seconds", 1, tmp=tmp_path)
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and "plain MP4" in r.stderr and "moov" in r.stderr
    assert time.monotonic() - began < 30


@pytest.fixture
def silent_server():
    """A TCP port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield f"http://127.0.0.1:{server.getsockname()[1]}/live.mp3"
    server.close()


def closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/live.mp3"


@pytest.mark.parametrize("kind", ["silent-url", "refused-url", "no-device", "never-written"])
def test_a_source_that_never_starts_is_one_line(tmp_path, silent_server, kind):
    empty = tmp_path / "empty.wav"
    empty.touch()
    args = {"silent-url": [silent_server], "refused-url": [closed_port()],
            "no-device": ["/dev/no-such-camera", "--input-format", "v4l2", "--name", "cam"],
            "never-written": [empty]}[kind]
    began = time.monotonic()
    r = transcribe("follow", *args, "--idle-seconds", 1, "-o", tmp_path, tmp=tmp_path)
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: "), r.stderr
    assert time.monotonic() - began < 30


def test_follow_is_streaming_only(tmp_path):
    r = transcribe("follow", JFK, "--mode", "oneshot", tmp=tmp_path)
    assert r.returncode == 2 and "streaming" in r.stderr


@pytest.mark.slow
def test_watch_follows_a_file_still_growing(tmp_path):
    """``watch --follow``: a file being written is followed before it settles; its outputs end
    as the replay's, and it is not transcribed again once it is stable."""
    folder, out = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    watch = start("watch", folder, "--follow", "--mode", "stream", "-o", out, "-f", "json", "--stable-seconds", 1.5,
                  "--interval", 0.2, tmp=tmp_path)
    writer = GrowingWriter(load_audio(JFK), folder / "rec.wav", piece_seconds=1.0, speed=2.0)
    writer.start()
    seen_following = set()
    deadline = time.monotonic() + 240
    while not (out / "rec.json").exists() or ("following", True) not in seen_following or \
            any(s == "following" for s, _ in following(tmp_path / "jobs.db")):
        seen_following |= following(tmp_path / "jobs.db")
        assert time.monotonic() < deadline and watch.poll() is None
        time.sleep(0.2)
    time.sleep(3)  # a scan or two after the file settled: nothing queued again
    watch.send_signal(2)
    _, stderr = watch.communicate(timeout=60)
    assert "1 done, 0 failed" in stderr, stderr
    assert ("following", True) in seen_following
    assert words(out / "rec.json") == words(replay(folder / "rec.wav", tmp_path) / "rec.json")


@pytest.mark.slow
def test_ctrl_c_ends_the_stream_with_the_outputs_written(tmp_path):
    """Ctrl-C mid-recording: the audio received is transcribed to its end, the outputs are
    written and the job is done."""
    source, out = tmp_path / "rec.wav", tmp_path / "out"
    writer = GrowingWriter(np.tile(load_audio(JFK), 3), source, piece_seconds=1.0)
    writer.start()
    while not source.exists():
        time.sleep(0.01)
    follow = start("follow", source, "-o", out, "-f", "json", "-q", "--update-seconds", 0.5, tmp=tmp_path)
    deadline = time.monotonic() + 120
    while not (out / "rec.json").exists():
        assert time.monotonic() < deadline and follow.poll() is None
        time.sleep(0.2)
    follow.send_signal(2)
    _, stderr = follow.communicate(timeout=120)
    assert follow.returncode == 130, stderr
    with SqliteJobStore(tmp_path / "jobs.db") as store:
        (job,) = store.jobs()
    assert job.status == "done" and job.words_complete
    assert words(out / "rec.json") and words(out / "rec.json")[:3] == [" And", " so", " my"]


@pytest.mark.parametrize("fmt, piece", [("wav", 1.0), ("flac", 0.25)])
def test_a_growing_file_s_chunk_comes_out_when_its_audio_is_written(tmp_path, fmt, piece):
    """Each 1 s chunk of a recording written in real time comes out as soon as the piece that
    ends it is on disk, the first ones too. A WAV in 1 s pieces: with 1024-byte packets ffmpeg
    held back the last 256 bytes of every 32000-byte write, and with them the chunk, until the
    next write (1 s late); and it gave out nothing of an integer PCM WAV before it held 64 KiB
    (the first two chunks 2 s late). A FLAC in 0.25 s pieces (its encoder holds a frame's
    worth of each): ffmpeg's FLAC parser held 10 frames (0.8-1.1 s late); now one frame is held
    until the next one starts, so the last chunk's last frame waits for the file's end (2 s
    idle). With ffmpeg 5.x a WAV is fed as Matroska (it refuses packets under 1024 bytes). The
    FLAC's encoder is imageio-ffmpeg's with either: Debian's 5.1 writes the file's first frames
    1 s late, and the end of each piece with the next (its raw PCM demuxer's packets)."""
    import imageio_ffmpeg

    path = tmp_path / f"rec.{fmt}"
    writer = GrowingWriter(load_audio(JFK)[:8 * 16000], path, piece, encoder=imageio_ffmpeg.get_ffmpeg_exe())
    writer.start()
    while not path.exists():
        time.sleep(0.01)
    late = []
    for offset, samples in LiveSource(str(path), FollowOptions(idle_seconds=2)).chunks(1.0):
        last_piece = round((offset + samples.size) / 16000 / piece) - 1
        if last_piece < len(writer.written):
            late.append(time.monotonic() - writer.written[last_piece])
    writer.join()
    assert len(late) == 8 and max(late[:-1]) < 0.5, late
    assert late[-1] < (0.5 if fmt == "wav" else 2 + 0.5), late


@pytest.mark.slow
def test_words_committed_before_a_pause_are_on_disk_during_it(tmp_path):
    """The recording pauses (6 s written, then nothing for 8 s: the idle end): the words committed
    before the pause are in the SRT within --update-seconds (4) of their commit (--jsonl), not
    when the next audio or the idle end comes. (The outputs were written only after a step: the
    words of the steps within 4 s of the first write waited for the idle end.)"""
    source, out = tmp_path / "rec.wav", tmp_path / "out"
    update = 4.0
    writer = GrowingWriter(load_audio(JFK)[:6 * 16000], source, piece_seconds=1.0)
    writer.start()
    while not source.exists():
        time.sleep(0.01)
    follow = start("follow", source, "-o", out, "-f", "srt", "-q", "--idle-seconds", 8, "--update-seconds", update,
                   "--jsonl", "-", tmp=tmp_path)
    printed: list[float] = []  # when the k-th word was printed (committed)
    reader = threading.Thread(target=lambda: [printed.append(time.monotonic()) for _ in follow.stdout], daemon=True)
    reader.start()
    on_disk: list[float] = []  # when the SRT first held k + 1 words
    pause_ends = math.inf
    while follow.poll() is None and time.monotonic() < pause_ends:
        n = srt_words(out / "rec.srt")
        on_disk += [time.monotonic()] * max(0, n - len(on_disk))
        if pause_ends == math.inf and not writer.is_alive():
            pause_ends = writer.written[-1] + 7.5
        time.sleep(0.05)
    follow.communicate(timeout=60)
    committed = [t for t in printed if t < pause_ends - update - 0.5]
    assert len(committed) >= 6, printed
    waits = [on_disk[k] - t if k < len(on_disk) else math.inf for k, t in enumerate(committed)]
    assert max(waits) < update + 0.5, waits


def test_a_followed_file_whose_reads_hang_fails_with_the_bound_and_the_command_exits(tmp_path):
    """The file is on a mount that stops answering 40 s in: the feeder's read gets no answer
    within the bound (its reads are made by the reader child), so the follow ends with one line
    naming the file and the bound, the job failed and queued again (a mount may come back), and
    the command exits while the mount still hangs. (The feeder read in a thread of its own: the
    follow waited for the bytes forever.)"""
    if why := unavailable():
        pytest.skip(why)
    source = tmp_path / "long.wav"
    subprocess.run([ffmpeg_binary(), "-v", "error", "-stream_loop", "5", "-i", JFK, "-t", "60", source], check=True)
    with HungMount(tmp_path / "mnt", "long.wav", source) as mount:
        mount.hang(1_300_000, mount.size)
        follow = start("follow", mount.path, "-o", tmp_path / "out", "-f", "srt", "-q", "--idle-seconds", 30,
                       tmp=tmp_path, env={"TRANSCRIBER_READ_TIMEOUT": "2"})
        _, stderr = follow.communicate(timeout=120)
        assert mount.hung.is_set()
    assert follow.returncode == 1, stderr
    path = str(mount.path)
    assert stderr.splitlines() == [f"error: cannot read audio from {path!r}: a read got no answer for 2 s "
                                   "(a hung network mount?)"], stderr
    with SqliteJobStore(tmp_path / "jobs.db") as store:
        (job,) = store.each_job()
    assert job.status == "failed" and job.retryable
