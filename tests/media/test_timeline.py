"""Times on the media's timeline, and no file a player refuses (issue 48, items 2 and 3).

A video whose audio stream starts 4 s after its video (ffmpeg ``-itsoffset 4``; MKV keeps the
start in its first block, MP4 in an edit list): every word, cue and JSON time is 4 s later than
the same audio's at 0, in both modes, in ``--embed``'s track and in ``/asr`` with
``encode=true``; raw PCM (``encode=false``) has no timeline and starts at 0. A file with no
speech gets TXT and JSON, no SRT/VTT, a ``done`` job saying "no speech", and ``--embed`` skips it.
The media are made here, with the ffmpeg the library uses; the model is the real tiny.en.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import srt

import transcriber
from transcriber.media import audio
from transcriber.subtitles import embed
from transcriber.engines.engine import OnTimeline, applied_offset, on_timeline

from tests.conftest import JFK, ROOT, ffmpeg

pytestmark = pytest.mark.slow
DELAY = 4.0


def transcribe(*args: str, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transcriber.app", *args, "--db", str(db)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)


def delayed(path: Path) -> Path:
    """jfk.flac starting ``DELAY`` s after a 16 s video: FLAC copied into MKV (a track seeked
    exactly, were it not for its start), AAC in MP4."""
    audio = ["-c:a", "copy"] if path.suffix == ".mkv" else ["-c:a", "aac"]
    ffmpeg("-f", "lavfi", "-i", "color=c=black:s=64x64:r=10:d=16", "-itsoffset", str(DELAY), "-i", str(JFK),
           "-map", "0:v", "-map", "1:a", "-c:v", "mpeg4", *audio, str(path))
    return path


def audio_start(path: Path) -> float:
    from transcriber.media.ffmpegtool import ffprobe_binary

    out = subprocess.run([ffprobe_binary(), "-v", "error", "-select_streams", "a", "-show_entries",
                          "stream=start_time", "-of", "csv=p=0", str(path)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("delayed")
    files = {ext: delayed(folder / f"late.{ext}") for ext in ("mkv", "mp4")}
    for path in files.values():  # what the test is about: the audio stream itself starts ~4 s in
        assert abs(audio_start(path) - DELAY) < 0.1, path
    return files


def first_cue(srt_path: Path) -> float:
    return next(srt.parse(srt_path.read_text())).start.total_seconds()


@pytest.fixture(scope="module")
def undelayed(tmp_path_factory) -> dict[str, float]:
    """The first cue of jfk.flac itself (its audio at 0), per mode, by the same CLI."""
    out = tmp_path_factory.mktemp("plain")
    starts = {}
    for mode in ("oneshot", "stream"):
        run = transcribe(str(JFK), "--mode", mode, "--format", "srt", "--output-dir", str(out / mode), "-q",
                         db=out / f"{mode}.db")
        assert run.returncode == 0, run.stderr
        starts[mode] = first_cue(out / mode / "jfk.srt")
    return starts


@pytest.mark.parametrize("mode", ["oneshot", "stream"])
@pytest.mark.parametrize("ext", ["mkv", "mp4"])
def test_delayed_audio_has_its_cues_on_the_video_timeline(media, undelayed, tmp_path, mode, ext):
    run = transcribe(str(media[ext]), "--mode", mode, "--format", "srt,json", "--output-dir", str(tmp_path), "-q",
                     db=tmp_path / "jobs.db")
    assert run.returncode == 0, run.stderr
    start = first_cue(tmp_path / f"late.{ext}.srt")
    # on main: 0.04 s (one-shot), 0.5 s (streaming), the audio's own time
    assert abs(start - (DELAY + undelayed[mode])) < 0.3 and abs(start - DELAY) < 0.6, (start, undelayed)
    data = json.loads((tmp_path / f"late.{ext}.json").read_text())
    assert abs(data["offset"] - audio_start(media[ext])) < 1e-3  # the JSON says what it applied
    assert data["segments"][0]["words"][0]["start"] >= DELAY - 0.1
    assert data["duration"] >= data["segments"][-1]["end"] > 14.0  # the words were not clamped to 11 s


def test_files_decoded_side_by_side_are_each_on_their_own_timeline(media, undelayed, tmp_path):
    """One-shot's batch (``--batch-files``): the delayed file beside jfk.flac at 0."""
    run = transcribe(str(media["mkv"]), str(JFK), "--batch-files", "2", "-f", "srt", "-o", str(tmp_path), "-q",
                     db=tmp_path / "jobs.db")
    assert run.returncode == 0, run.stderr
    assert abs(first_cue(tmp_path / "late.mkv.srt") - (DELAY + undelayed["oneshot"])) < 0.3
    assert first_cue(tmp_path / "jfk.srt") == undelayed["oneshot"]


def test_embedded_track_is_read_back_at_the_delay(media, undelayed, tmp_path):
    video = tmp_path / "late.mkv"
    video.write_bytes(media["mkv"].read_bytes())
    run = transcribe(str(video), "--embed", "-q", db=tmp_path / "jobs.db")
    assert run.returncode == 0, run.stderr
    copy = tmp_path / f"late{embed.SUFFIX}.mkv"
    track = tmp_path / "track.srt"
    ffmpeg("-i", str(copy), "-map", "0:s:0", str(track))
    assert abs(first_cue(track) - (DELAY + undelayed["oneshot"])) < 0.3


def test_a_resumed_stream_gives_the_times_of_an_uninterrupted_one(media, model):
    engine = OnTimeline(transcriber.StreamingEngine(model, transcriber.StreamingOptions()))
    steps = list(engine.steps(media["mkv"]))
    whole = [w for s in steps for w in s.words]
    assert whole and whole[0].start > DELAY - 0.1 and all(s.offset == DELAY for s in steps)
    cut = len(steps) // 2
    assert applied_offset(steps[cut].state) == DELAY
    resumed = [w for s in steps[:cut + 1] for w in s.words] + [w for s in engine.steps(media["mkv"], steps[cut].state)
                                                              for w in s.words]
    assert resumed == whole


@pytest.mark.parametrize("kill_at", ["checkpoint:2", "outputs"])
def test_a_killed_job_reruns_to_the_uninterrupted_times(media, tmp_path, kill_at):
    """The CLI, streaming (checkpoints every 3 s), kill -9 after the second checkpoint, or with
    the words complete and no output written: the rerun's SRT and JSON are the uninterrupted run's."""
    from tests.app.test_jobs_e2e import transcribe as run_cli

    args = ("--mode", "stream", "--checkpoint-seconds", "3", "-f", "srt,json", "-q")
    for name in ("ref", "work"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "late.mkv").write_bytes(media["mkv"].read_bytes())
    assert run_cli(tmp_path / "ref" / "late.mkv", *args, db=tmp_path / "ref.db").returncode == 0
    work, db = tmp_path / "work" / "late.mkv", tmp_path / "work.db"
    killed = run_cli(work, *args, db=db, TRANSCRIBER_TEST_KILL_AT=kill_at)
    assert killed.returncode == -signal.SIGKILL
    for written in work.parent.glob("late.*[nt]"):  # (at "outputs" they are written, the job not done)
        written.unlink()
    again = run_cli(work, *args, db=db)
    assert again.returncode == 0, again.stderr
    for suffix in (".srt", ".json"):
        assert (tmp_path / "work" / f"late{suffix}").read_text() == (tmp_path / "ref" / f"late{suffix}").read_text()
    assert json.loads((tmp_path / "work" / "late.json").read_text())["offset"] == DELAY


@pytest.mark.parametrize("ext", ["mkv", "mp4"])
def test_audio_starting_after_the_probed_seconds_is_on_its_timeline(tmp_path, ext, model):
    """jfk.flac 20 s into a 12 s video, as bench/peers/recall.py builds it: ffprobe's stream start_time
    comes from the packets its probe reads, and gave 0.0 for the MKV (ffmpeg 5.1), and its
    duration tag (31 s, the stream's end) for its length: the first packet says 19.936."""
    path = tmp_path / f"late20.{ext}"
    ffmpeg("-f", "lavfi", "-i", "color=c=black:s=64x64:r=10:d=12", "-itsoffset", "20", "-i", str(JFK),
           "-map", "0:v", "-map", "1:a", "-c:v", "mpeg4", "-c:a", "aac", str(path))
    offset = audio.start_offset(path)
    assert abs(offset - 20.0) < 0.1, offset
    assert abs(transcriber.probe(path) - 31.0) < 0.1  # where the audio ends on the timeline
    words = transcriber.transcribe(path, model).words
    assert words and abs(words[0].start - 20.0) < 0.3, words[:1]


def test_a_state_checkpointed_before_offsets_resumes_at_0():
    """A job checkpointed before this change stored its words unmoved and a state without the
    offset: it goes on with 0, its words consistent with those stored."""
    step = transcriber.Step((), (), {"seek": 100}, 1.0, "en")
    assert applied_offset(step.state) == 0.0 and on_timeline(step, 0.0) is step
    moved = on_timeline(step, 2.5)
    assert moved.position == 3.5 and applied_offset(moved.state) == 2.5 and moved.state["engine"] == {"seek": 100}


@pytest.fixture(scope="module")
def quiet_video(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("quiet")
    path = folder / "quiet.mkv"
    ffmpeg("-f", "lavfi", "-i", "color=c=black:s=64x64:r=10:d=8", "-f", "lavfi", "-i",
           "anoisesrc=a=0.0005:c=pink:d=8:r=16000", "-c:v", "mpeg4", "-c:a", "aac", "-shortest", str(path))
    return path


def test_no_speech_writes_no_subtitle_file_and_says_so(quiet_video, tmp_path):
    video = tmp_path / "quiet.mkv"
    video.write_bytes(quiet_video.read_bytes())
    db = tmp_path / "jobs.db"
    run = transcribe(str(video), "--format", "srt,vtt,txt,json", "--embed", db=db)
    assert run.returncode == 0, run.stderr
    assert not list(tmp_path.glob("*.srt")) and not list(tmp_path.glob("*.vtt"))  # on main: a 0-byte SRT
    assert json.loads((tmp_path / "quiet.json").read_text())["segments"] == []
    assert (tmp_path / "quiet.txt").exists()
    done = [line for line in run.stderr.splitlines() if line.startswith("done:")]
    assert len(done) == 1 and "no speech" in done[0], run.stderr
    assert "no speech, no subtitles embedded" in run.stderr  # on main: --embed exits 1 ("Invalid data")
    assert not (tmp_path / f"quiet{embed.SUFFIX}.mkv").exists()
    status = subprocess.run([sys.executable, "-m", "transcriber.app", "status", "--db", str(db)], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    row = [line for line in status.stdout.splitlines() if "quiet.mkv" in line]
    assert row and "done" in row[0] and "no speech" in row[0], status.stdout
    again = transcribe(str(video), "--format", "srt,vtt,txt,json", "--embed", "-q", db=db)
    assert again.returncode == 0 and "0 done, 1 skipped" in again.stderr, again.stderr  # done stays done


def test_no_speech_with_only_subtitles_asked_for_is_done_without_a_file(quiet_video, tmp_path):
    run = transcribe(str(quiet_video), "-f", "srt", "-o", str(tmp_path / "out"), db=tmp_path / "jobs.db")
    assert run.returncode == 0, run.stderr  # on main: a 0-byte SRT; before the fix here, an IndexError
    assert "done:" in run.stderr and "no speech" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    again = transcribe(str(quiet_video), "-f", "srt", "-o", str(tmp_path / "out"), db=tmp_path / "jobs.db")
    assert again.returncode == 0 and "0 done, 1 skipped" in again.stderr, again.stderr  # not rendered again


def test_asr_encode_true_answers_on_the_media_timeline(media, undelayed, quiet_video, tmp_path):
    requests = pytest.importorskip("requests")
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from tests.app.test_serve import pcm16, service

    with service(tmp_path) as url:
        with open(media["mp4"], "rb") as f:
            answer = requests.post(f"{url}/asr", params={"output": "srt", "encode": "true"},
                                   files={"audio_file": ("late.mp4", f)}, timeout=300)
        assert answer.status_code == 200, answer.text
        start = next(srt.parse(answer.text)).start.total_seconds()
        assert abs(start - (DELAY + undelayed["oneshot"])) < 0.3, start
        raw = requests.post(f"{url}/asr", params={"output": "srt", "encode": "false", "language": "en"},
                            files={"audio_file": ("late.pcm", pcm16(media["mp4"]))}, timeout=300)
        assert raw.status_code == 200, raw.text
        assert next(srt.parse(raw.text)).start.total_seconds() < 1.0  # raw PCM: no timeline, from 0
        with open(quiet_video, "rb") as f:  # no speech: no SRT file, an empty answer (not a 500)
            quiet = requests.post(f"{url}/asr", params={"output": "srt", "encode": "true"},
                                  files={"audio_file": ("quiet.mkv", f)}, timeout=300)
        assert quiet.status_code == 200 and quiet.text == "", quiet.text


def test_a_followed_growing_mkv_is_on_its_timeline_as_its_replay(media, undelayed, tmp_path):
    """``transcribe follow`` of the MKV as it is written (in 8 pieces, 0.5 s apart): the audio
    start is asked of the growing file once its first audio is out."""
    data, live = media["mkv"].read_bytes(), tmp_path / "live.mkv"

    def write():
        with open(live, "wb") as f:
            for i in range(8):
                f.write(data[i * len(data) // 8:(i + 1) * len(data) // 8])
                f.flush()
                time.sleep(0.5)

    writer = threading.Thread(target=write)
    writer.start()
    while not live.exists():
        time.sleep(0.01)
    try:
        run = transcribe("follow", str(live), "-f", "srt,json", "-o", str(tmp_path / "out"), "--idle-seconds", "2",
                         "-q", db=tmp_path / "follow.db")
    finally:
        writer.join()
    assert run.returncode == 0, run.stderr
    start = first_cue(tmp_path / "out" / "live.srt")
    assert abs(start - (DELAY + undelayed["stream"])) < 0.3, start
    assert json.loads((tmp_path / "out" / "live.json").read_text())["offset"] == DELAY
    replay = transcribe(str(live), "--mode", "stream", "-f", "srt", "-o", str(tmp_path / "replay"), "-q",
                        db=tmp_path / "replay.db")
    assert replay.returncode == 0, replay.stderr
    assert (tmp_path / "out" / "live.srt").read_text() == (tmp_path / "replay" / "live.srt").read_text()


def test_no_format_writes_a_file_its_readers_refuse(tmp_path):
    """Every subtitle file written for speech is read by pysubs2 and ffmpeg (WebVTT by webvtt-py
    too); for no speech only TXT, TSV, JSON (and RTTM, no turn) are written, and each is read back.
    (RTTM needs speakers: the speech is labelled by one turn.)"""
    import pysubs2
    import webvtt

    words = (transcriber.Word(4.0, 4.5, " And", 0.9), transcriber.Word(4.5, 5.0, " so.", 0.9))
    speech = transcriber.assemble([transcriber.words_segment(words)], "en", 16.0, "tiny.en", offset=4.0)
    speech = transcriber.label_speakers(speech, [(4.0, 5.0, "A")])
    written = transcriber.write_outputs(speech, tmp_path / "speech", list(transcriber.FORMATS))
    assert len(written) == len(transcriber.FORMATS)
    for path in written:
        if path.suffix in (".srt", ".vtt", ".ass"):
            assert [e.start for e in pysubs2.load(str(path))] == [4000], path
            ffmpeg("-i", str(path), "-map", "0", "-c", "copy", str(path.with_suffix(".mkv")))
    assert len(webvtt.read(str(tmp_path / "speech.vtt")).captions) == 1
    assert json.loads((tmp_path / "speech.json").read_text())["offset"] == 4.0
    silent = transcriber.assemble([], "en", 8.0, "tiny.en")
    written = transcriber.write_outputs(silent, tmp_path / "silent", list(transcriber.FORMATS))
    assert sorted(p.suffix for p in written) == [".json", ".rttm", ".tsv", ".txt"]
    assert (tmp_path / "silent.rttm").read_text() == ""
    assert json.loads((tmp_path / "silent.json").read_text())["segments"] == []
    assert "offset" not in json.loads((tmp_path / "silent.json").read_text())  # none applied: none said
