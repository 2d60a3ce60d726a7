"""The job runner end to end: real `transcribe` processes, real SQLite files, the real model.

Economical on purpose (2 CPU cores): short recordings, one ~70 s file for the crash tests, and
few processes, since each one that decodes loads the model.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import srt
import webvtt

from transcriber.app.run.discover import content_key
from transcriber.app.store.sqlite_store import SqliteJobStore
from transcriber.media.ffmpegtool import ffmpeg_binary

from tests import faults
from tests.conftest import JFK

pytestmark = pytest.mark.slow
SHORT = Path("audio/short_en")  # in the recordings (the data_dir fixture)
LONG_SOURCE = Path("audio/long_en/ljspeech_LJ001-0001_0032_concat.flac")
TRANSCRIBE = Path(sys.executable).parent / "transcribe"
COMMAND = [str(TRANSCRIBE)] if TRANSCRIBE.exists() else [sys.executable, "-m", "transcriber.app"]


def ffmpeg(*args: str) -> None:
    subprocess.run([ffmpeg_binary(), "-nostdin", "-hide_banner", "-v", "error", "-y", *args], check=True)


def env(db: Path, **extra: str) -> dict:
    e = {k: v for k, v in os.environ.items()
         if k not in ("TRANSCRIBER_DB", "TRANSCRIBER_TEST_KILL_AT", "TRANSCRIBER_TEST_SIGNAL_AT")}
    return faults.environment({**e, "TRANSCRIBER_DB": str(db), **extra})


def transcribe(*args, db: Path, timeout: float = 300, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, *map(str, args)], env=env(db, **extra), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def start(*args, db: Path, **extra) -> subprocess.Popen:
    return subprocess.Popen([*COMMAND, *map(str, args)], env=env(db, **extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def wait_for(predicate, timeout: float = 120, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def wait_stopped(proc: subprocess.Popen, timeout: float = 300) -> None:
    """Wait until ``proc`` has stopped itself (SIGSTOP, by TRANSCRIBER_TEST_SIGNAL_AT)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status = os.waitpid(proc.pid, os.WNOHANG | os.WUNTRACED)  # does not reap a stopped child
        if pid:
            assert os.WIFSTOPPED(status), f"it ended instead of stopping (wait status {status})"
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting for the runner to stop itself")


def claimed_by(db: Path, proc: subprocess.Popen) -> bool:
    if not db.exists():
        return False
    with SqliteJobStore(db) as store:
        return any(j.lease_owner and f":{proc.pid}:" in j.lease_owner for j in store.jobs(statuses=["running"]))


def words(json_path: Path) -> list[tuple[str, float, float]]:
    data = json.loads(json_path.read_text(encoding="utf-8"))
    return [(w["word"], w["start"], w["end"]) for s in data["segments"] for w in s["words"]]


def assert_outputs_parse(stem: Path) -> None:
    subs = list(srt.parse(stem.with_name(stem.name + ".srt").read_text(encoding="utf-8")))
    assert subs and all(s.content.strip() for s in subs)
    cues = webvtt.read(str(stem.with_name(stem.name + ".vtt")))
    assert len(cues) == len(subs)
    assert json.loads(stem.with_name(stem.name + ".json").read_text(encoding="utf-8"))["segments"]


def no_leftovers(folder: Path) -> list[str]:
    """Temporary files of the atomic writer, which must never outlive a run."""
    return [p.name for p in folder.rglob("*") if p.name.endswith(".part")]


@pytest.fixture(scope="module")
def long_file(tmp_path_factory, data_dir) -> Path:
    """~70 s of speech: three one-shot windows, so three checkpoints."""
    path = tmp_path_factory.mktemp("long") / "long talk.flac"
    ffmpeg("-i", str(data_dir / LONG_SOURCE), "-t", "70", str(path))
    return path


def test_kill_at_three_points_then_resume(long_file, tmp_path):
    """kill -9 after the first checkpoint, kill -9 in the middle of the work (a window decoded, not
    committed), SIGTERM (stops after its checkpoint), kill -9 after the outputs were written but
    before the job was marked done; then a clean run. The file is done once, its words are those
    of an uninterrupted run (none lost, none repeated), and its outputs are complete. The runner's
    test hooks (TRANSCRIBER_TEST_KILL_AT, TRANSCRIBER_TEST_SIGNAL_AT) pick the moments: no sleeps."""
    formats = ("-f", "srt,vtt,json", "-q")
    reference = tmp_path / "ref" / long_file.name
    reference.parent.mkdir()
    shutil.copy(long_file, reference)
    r = transcribe(reference, *formats, db=tmp_path / "ref.db")
    assert r.returncode == 0, r.stderr
    expected = words(reference.with_suffix(".json"))
    assert len(expected) > 100

    media = tmp_path / "work" / long_file.name
    media.parent.mkdir()
    shutil.copy(long_file, media)
    stem, db = media.with_suffix(""), tmp_path / "jobs.db"
    outputs = [stem.with_name(stem.name + ext) for ext in (".srt", ".vtt", ".json")]

    def job():
        with SqliteJobStore(db) as store:
            (j,) = store.jobs()
            return j, store.checkpoints(j.id)

    # 1. kill -9 right after the first checkpoint was committed
    r = transcribe(media, *formats, db=db, TRANSCRIBER_TEST_KILL_AT="checkpoint:1")
    assert r.returncode == -signal.SIGKILL
    j, checkpoints = job()
    assert j.status == "running" and len(checkpoints) == 1 and not any(p.exists() for p in outputs)

    # 2. kill -9 from outside in the middle of the work: the runner stops itself (SIGSTOP) once a
    #    window is decoded and before it is committed; waitpid sees it stopped; then kill -9
    proc = start(media, *formats, db=db, TRANSCRIBER_TEST_SIGNAL_AT="SIGSTOP@step:1")
    try:
        wait_stopped(proc)
        assert claimed_by(db, proc)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert not any(p.exists() for p in outputs)

    # 3. SIGTERM in the middle of the work (the runner sends it to itself once a window is
    #    decoded): it stops after its current checkpoint and gives the job back
    before = len(job()[1])
    r = transcribe(media, *formats, db=db, TRANSCRIBER_TEST_SIGNAL_AT="SIGTERM@step:1")
    stderr = r.stderr
    assert r.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr and "stopping after the current checkpoint" in stderr
    j, checkpoints = job()
    assert j.status == "queued" and len(checkpoints) >= before and not any(p.exists() for p in outputs)

    # 4. kill -9 after the outputs are written, before the job is marked done
    r = transcribe(media, *formats, db=db, TRANSCRIBER_TEST_KILL_AT="outputs")
    assert r.returncode == -signal.SIGKILL
    j, _ = job()
    assert j.status == "running" and j.words_complete
    assert words(stem.with_suffix(".json")) == expected

    # 5. the rerun only finishes the job: done once, words equal, outputs complete
    t0 = time.monotonic()
    r = transcribe(media, *formats, db=db)
    assert r.returncode == 0, r.stderr
    assert "1 done, 0 skipped, 0 failed" in r.stderr
    j, checkpoints = job()
    assert j.status == "done" and j.runs == 5 and j.errors == 0
    assert [c["seq"] for c in checkpoints] == list(range(1, len(checkpoints) + 1))
    positions = [c["position"] for c in checkpoints]
    assert positions == sorted(set(positions)) and len(checkpoints) >= 3
    assert words(stem.with_suffix(".json")) == expected
    assert_outputs_parse(stem)
    assert (stem.with_suffix(".srt")).read_text() == (reference.with_suffix(".srt")).read_text()
    assert no_leftovers(media.parent) == []
    assert time.monotonic() - t0 < 10  # words were complete: no decoding (nor model load) needed

    r = transcribe(media, *formats, db=db)  # and nothing is left to do
    assert r.returncode == 0 and "0 done, 1 skipped" in r.stderr


def test_streaming_job_killed_mid_file_resumes_exactly(long_file, tmp_path):
    """Streaming mode checkpoints the session state every ~10 s of audio: kill -9 after the first
    and after the second checkpoint, then a clean run gives the words of an uninterrupted run."""
    media = tmp_path / "work" / "stream talk.flac"
    media.parent.mkdir()
    ffmpeg("-i", str(long_file), "-t", "35", str(media))
    reference = tmp_path / "ref" / media.name
    reference.parent.mkdir()
    shutil.copy(media, reference)
    args = ("--mode", "stream", "-f", "json,srt", "-q")
    r = transcribe(reference, *args, db=tmp_path / "ref.db")
    assert r.returncode == 0, r.stderr
    expected = words(reference.with_suffix(".json"))
    assert len(expected) > 50

    db = tmp_path / "jobs.db"
    for point in ("checkpoint:1", "checkpoint:2"):
        r = transcribe(media, *args, db=db, TRANSCRIBER_TEST_KILL_AT=point)
        assert r.returncode == -signal.SIGKILL
        assert not media.with_suffix(".json").exists()
    r = transcribe(media, *args, db=db)
    assert r.returncode == 0, r.stderr
    with SqliteJobStore(db) as store:
        (j,) = store.jobs()
        assert j.status == "done" and len(store.checkpoints(j.id)) >= 3
    assert words(media.with_suffix(".json")) == expected
    assert media.with_suffix(".srt").read_text() == reference.with_suffix(".srt").read_text()
    emitted = [w["emitted_at"] for s in json.loads(media.with_suffix(".json").read_text())["segments"]
               for w in s["words"]]
    assert emitted == sorted(emitted)


def test_two_runners_share_one_folder(tmp_path, data_dir):
    folder = tmp_path / "in"
    folder.mkdir()
    names = ["ls_1089-134691-0000", "sr_one_two_three", "ljspeech_LJ002-0020", "librivox_sas01_0880"]
    for name in names:
        shutil.copy(data_dir / SHORT / f"{name}.flac", folder / f"{name}.flac")
    db = tmp_path / "shared.db"  # does not exist yet: both create it at once
    procs = [start(folder, "-f", "srt", db=db) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    done_lines = [line for _, err in results for line in err.splitlines() if line.startswith("done: ")]
    assert sorted(line.split(" -> ")[0][6:] for line in done_lines) == sorted(str(folder / f"{n}.flac") for n in names)
    with SqliteJobStore(db) as store:
        jobs = store.jobs()
        assert len(jobs) == len(names)
        for j in jobs:
            assert (j.status, j.runs) == ("done", 1)
            assert len({c["owner"] for c in store.checkpoints(j.id)}) == 1
    assert all((folder / f"{n}.srt").exists() for n in names)


def test_folder_with_bad_files_then_reruns(tmp_path, data_dir):
    folder = tmp_path / "in"
    folder.mkdir()
    good = {"with space.flac": "sr_one_two_three", "ünïcødé 日本.flac": "ls_1089-134691-0000",
            "-dash.flac": "ljspeech_LJ002-0020"}
    for name, source in good.items():
        shutil.copy(data_dir / SHORT / f"{source}.flac", folder / name)
    (folder / "empty.wav").write_bytes(b"")
    (folder / "corrupt.flac").write_bytes(JFK.read_bytes()[:40_000])  # cut off
    (folder / "notes.mp3").write_text("these are my notes, not an mp3\n" * 50)
    ffmpeg("-f", "lavfi", "-i", "color=c=black:s=64x64:r=5:d=2", str(folder / "no audio.mp4"))
    (folder / "readme.txt").write_text("not taken at all")
    bad = ["empty.wav", "corrupt.flac", "notes.mp3", "no audio.mp4"]
    db = tmp_path / "jobs.db"
    fmt = ("-f", "srt,json")

    r = transcribe(folder, *fmt, db=db)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "3 done, 0 skipped, 4 failed" in r.stderr
    for name in good:
        stem = (folder / name).with_suffix("")
        assert json.loads(stem.with_name(stem.name + ".json").read_text(encoding="utf-8"))["segments"]
    outputs = {p.name for p in folder.iterdir()} - set(good) - set(bad) - {"readme.txt"}
    assert outputs == {Path(n).stem + ext for n in good for ext in (".srt", ".json")}  # none for bad files
    assert no_leftovers(folder) == []

    status = transcribe("status", db=db)
    assert status.returncode == 0
    rows = {line.split("  ")[0]: line for line in status.stdout.splitlines()}
    reasons = {}
    for line in status.stdout.splitlines()[1:]:
        for name in bad:
            if str(folder / name) in line:
                assert " failed " in line
                reasons[name] = line.split(str(folder / name), 1)[1].strip()
    assert set(reasons) == set(bad), rows
    assert "file is empty" in reasons["empty.wav"] and "no audio stream" in reasons["no audio.mp4"]
    assert "truncated" in reasons["corrupt.flac"] and reasons["notes.mp3"]
    jobs = json.loads(transcribe("status", "--json", db=db).stdout)
    assert all("\n" not in (j["last_error"] or "") for j in jobs)

    # nothing changed: everything skipped, fast (the model is not even loaded); about 0.35 s on a
    # quiet 2-core machine, and the bounds here and below leave 5x or more
    mtimes = {p: p.stat().st_mtime_ns for p in folder.iterdir()}
    t0 = time.monotonic()
    r = transcribe(folder, *fmt, db=db)
    elapsed = time.monotonic() - t0
    assert elapsed < 2.0, elapsed
    assert r.returncode == 1 and "0 done, 3 skipped, 4 failed" in r.stderr
    assert {p: p.stat().st_mtime_ns for p in folder.iterdir()} == mtimes

    # a new output format: outputs rewritten from the stored words, still without the model
    t0 = time.monotonic()
    r = transcribe(folder, "-f", "srt,json,txt", "-q", db=db)
    assert time.monotonic() - t0 < 3.0
    assert "3 done, 0 skipped, 4 failed" in r.stderr
    assert (folder / "with space.txt").read_text().strip() == (
        " ".join(s["text"].strip() for s in json.loads((folder / "with space.json").read_text())["segments"]))

    # a changed option redoes every file
    r = transcribe(folder, *fmt, "--beam-size", "2", "-q", db=db)
    assert "3 done, 0 skipped, 4 failed" in r.stderr
    with SqliteJobStore(db) as store:
        assert {j.runs for j in store.jobs() if j.status == "done"} == {3}  # run, outputs, redo

    # a changed file is redone, the others skipped
    before = (folder / "with space.srt").read_text()
    shutil.copy(JFK, folder / "with space.flac")
    r = transcribe(folder, *fmt, "--beam-size", "2", "-q", db=db)
    assert "1 done, 2 skipped, 4 failed" in r.stderr
    after = (folder / "with space.srt").read_text()
    assert after != before and "country" in after


def test_watch_takes_a_slowly_written_file_once(tmp_path):
    source = tmp_path / "jfk.wav"
    ffmpeg("-i", str(JFK), str(source))
    data = source.read_bytes()
    folder, db = tmp_path / "incoming", tmp_path / "jobs.db"
    folder.mkdir()
    proc = start("watch", folder, "-f", "srt,json", "--stable-seconds", "3", "--interval", "0.3", "-q", db=db)
    try:
        (folder / "ignored.wav.part").write_bytes(data[:1000])  # a download in progress
        target = folder / "talk.wav"
        pieces = 6
        for i in range(pieces):  # 2.5 s of writing, a piece every 0.5 s (the watch waits 3 s: 6x that)
            with open(target, "ab") as f:
                f.write(data[i * len(data) // pieces:(i + 1) * len(data) // pieces])
            time.sleep(0.5 if i < pieces - 1 else 0)
        last_write = time.time()

        def done():
            with SqliteJobStore(db) as store:
                return [j for j in store.jobs() if j.status == "done"]

        wait_for(done, timeout=180, what="the watched file to be transcribed")
        time.sleep(1.0)  # a few more scans: nothing is taken twice
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "watch stopped: 1 done, 0 failed" in stderr and "Traceback" not in stderr
    with SqliteJobStore(db) as store:
        (job,) = store.jobs()
    assert job.path == str(target.resolve()) and job.runs == 1
    assert job.queued_at >= last_write  # taken only once it stopped growing
    assert job.content_key == content_key(target)
    text = "".join(w for w, _, _ in words(target.with_suffix(".json"))).lower()
    assert "not what your country can do for you" in text  # "ask" or "asked", by mode


def test_files_side_by_side_killed_then_resumed(long_file, tmp_path, data_dir):
    """--batch-files 3 over a folder (the 70 s file, two short ones, a broken one): killed -9
    right after the first checkpoint of a job, then run again; every good file ends done once
    with the words and subtitles of a run one file at a time, the broken one failed alone."""
    names = {"long talk.flac": long_file, "jfk.flac": JFK,
             "one two three.flac": data_dir / SHORT / "sr_one_two_three.flac"}
    folders = {}
    for kind in ("ref", "work"):
        folders[kind] = tmp_path / kind
        folders[kind].mkdir()
        for name, source in names.items():
            shutil.copy(source, folders[kind] / name)
        (folders[kind] / "broken.flac").write_bytes(JFK.read_bytes()[:30_000])
    fmt = ("--mode", "oneshot", "-f", "srt,json", "-q")
    r = transcribe(folders["ref"], *fmt, db=tmp_path / "ref.db")
    assert "3 done, 0 skipped, 1 failed" in r.stderr, r.stderr

    db = tmp_path / "jobs.db"
    r = transcribe(folders["work"], *fmt, "--batch-files", "3", db=db, TRANSCRIBER_TEST_KILL_AT="checkpoint:1")
    assert r.returncode == -signal.SIGKILL, r.stderr
    with SqliteJobStore(db) as store:
        killed = {Path(j.path).name: j.status for j in store.jobs()}
    assert killed["long talk.flac"] == "running"  # killed after its first window: work left to resume
    # side by side: the last file was taken with the others, not queued behind the long one
    assert killed["one two three.flac"] in ("running", "done"), killed
    r = transcribe(folders["work"], *fmt, "--batch-files", "3", db=db)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "1 failed" in r.stderr and "broken.flac" in r.stderr
    with SqliteJobStore(db) as store:
        jobs = {Path(j.path).name: j for j in store.jobs()}
    assert jobs["broken.flac"].status == "failed"
    for name in names:
        assert jobs[name].status == "done", name
        stem = Path(name).stem
        assert words(folders["work"] / f"{stem}.json") == words(folders["ref"] / f"{stem}.json"), name
        assert (folders["work"] / f"{stem}.srt").read_text() == (folders["ref"] / f"{stem}.srt").read_text()
    assert jobs["long talk.flac"].runs == 2  # killed once, resumed once
    assert no_leftovers(folders["work"]) == []
