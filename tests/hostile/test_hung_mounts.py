"""Reads that never answer (a hung network mount, tests/hungfs.py): a file, a listing, a stat,
an outputs' folder. Each fails alone within the bound (TRANSCRIBER_READ_TIMEOUT), one line naming
it; the batch goes on; a stop still acts within 2 seconds.
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

from transcriber.app.store.domain import Request
from transcriber.app.store.sqlite_store import SqliteJobStore
from transcriber import AudioError, ReadTimeout, bounded
from transcriber.media.audio import iter_audio

from .. import lockheld
from ..conftest import JFK, PRESS_YARD, ffmpeg
from ..hungfs import HungMount, unavailable
from ..app.test_jobs_runner import ScriptedEngine
from .helpers import invoke, lines, no_traceback, transcribe_cli, use_engine


HANG_FROM = 1_300_000


HUNG = "(a hung network mount?)"


@pytest.fixture
def hung_wav(tmp_path):
    if why := unavailable():
        pytest.skip(why)
    source = tmp_path / "long.wav"
    ffmpeg("-stream_loop", "5", "-i", str(JFK), "-t", "60", "-ac", "1", "-ar", "16000", str(source))
    with HungMount(tmp_path / "mnt", "long.wav", source) as mount:
        yield mount


def test_a_file_whose_reads_hang_fails_alone_at_enqueue(tmp_path, hung_wav):
    """Every read of it hangs (its content key cannot be read): one line naming it and the bound,
    the other file transcribed, exit 1; and the command exits while the mount still hangs (the
    content keys are read in a child process, which is left stuck: no thread of the command's is)."""
    hung_wav.hang(0, hung_wav.size)
    other = tmp_path / "press yard.flac"
    shutil.copy(PRESS_YARD, other)
    start = time.monotonic()
    proc = transcribe_cli("--db", str(tmp_path / "jobs.db"), str(hung_wav.path), str(other), "-f", "json", seconds=2)
    _, stderr = proc.communicate(timeout=120)
    took = time.monotonic() - start
    assert proc.returncode == 1, stderr
    path = str(hung_wav.path)
    assert stderr.splitlines()[-2:] == ["1 done, 0 skipped, 1 failed",
                                        f"failed: cannot read {path!r}: a read got no answer for 2 s {HUNG}"], stderr
    assert other.with_suffix(".json").exists() and hung_wav.hung.is_set()
    assert took < 60


def test_ffmpeg_stuck_on_its_input_fails_the_decode_within_the_bound(hung_wav, monkeypatch):
    """The decode's wait on ffmpeg is bounded: the chunks before the hung bytes come, then a
    ReadTimeout (an AudioError, retryable) naming the file, without waiting for the killed ffmpeg
    (stuck in the kernel until the mount answers)."""
    monkeypatch.setenv("TRANSCRIBER_READ_TIMEOUT", "1")
    hung_wav.hang(HANG_FROM, HANG_FROM + 100_000)
    offsets = []
    start = time.monotonic()
    with pytest.raises(AudioError) as failure:
        for offset, _ in iter_audio(hung_wav.path, chunk_seconds=10):
            offsets.append(offset)
    assert time.monotonic() - start < 15
    assert hung_wav.hung.is_set()
    assert str(failure.value) == f"cannot read audio from {str(hung_wav.path)!r}: ffmpeg gave no audio for 1 s {HUNG}"
    assert failure.value.retryable and isinstance(failure.value, OSError)
    assert offsets == [0, 160_000, 320_000]  # 30 s of the 40 before the hung bytes: a chunk is 10 s


def test_a_job_whose_decode_hangs_fails_with_the_bound_and_the_batch_goes_on(tmp_path, hung_wav):
    """Real model: the file fails with the line naming it and the bound; queued again by a later
    run (retryable: a mount may come back); the other file is done; the command exits."""
    hung_wav.hang(HANG_FROM, HANG_FROM + 100_000)
    other = tmp_path / "press yard.flac"
    shutil.copy(PRESS_YARD, other)
    db = tmp_path / "jobs.db"
    proc = transcribe_cli("--db", str(db), str(hung_wav.path), str(other), "--mode", "oneshot", "-f", "json",
                          "--max-attempts", "1", "-q", seconds=2)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr
    path = str(hung_wav.path)
    assert stderr.splitlines() == [
        f"error: cannot read audio from {path!r}: ffmpeg gave no audio for 2 s {HUNG}", "1 done, 0 skipped, 1 failed"]
    with SqliteJobStore(db) as store:
        job = next(j for j in store.jobs() if j.path == path)
    assert job.status == "failed" and job.retryable and job.progress > 0  # its first window kept
    assert other.with_suffix(".json").exists() and not (tmp_path / "mnt" / "long.json").exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_acts_within_2_seconds_while_the_decode_hangs(tmp_path, hung_wav, signum):
    """SIGTERM or Ctrl-C while ffmpeg is stuck on a hung read (the bound far off): exit 128 + the
    signal within 2 s, the job queued again with its checkpoint, no attempt counted."""
    hung_wav.hang(HANG_FROM, HANG_FROM + 100_000)
    db = tmp_path / "jobs.db"
    proc = transcribe_cli("--db", str(db), str(hung_wav.path), "--mode", "oneshot", "-f", "json", "-q",
                          "--checkpoint-seconds", "1", seconds=120)

    def waiting_on_ffmpeg() -> bool:  # the first window committed, ffmpeg stuck before the second
        if not (hung_wav.hung.is_set() and db.exists()):
            return False
        with SqliteJobStore(db) as store:
            return any(j.progress > 0 for j in store.jobs())

    try:
        deadline = time.monotonic() + 120
        while not waiting_on_ffmpeg():
            assert time.monotonic() < deadline and proc.poll() is None, "the decode never reached the hung bytes"
            time.sleep(0.1)
        time.sleep(0.3)
        start = time.monotonic()
        proc.send_signal(signum)
        proc.wait(30)
        took = time.monotonic() - start
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, proc.stderr.read()
    assert took < 2.5, f"took {took:.1f} s to stop"
    with SqliteJobStore(db) as store:
        (job,) = store.jobs()
    assert job.status == "queued" and job.errors == 0


@pytest.fixture
def hung_tree(tmp_path):
    """``make({relative path: source})`` mounts a hungfs tree at tmp_path/mnt (closed after the test)."""
    if why := unavailable():
        pytest.skip(why)
    mounts = []

    def make(files: dict) -> HungMount:
        mounts.append(HungMount(tmp_path / "mnt", files).__enter__())
        return mounts[-1]

    yield make
    for mount in mounts:
        mount.close()


def stuck_children() -> int:
    """This process's children waiting in the kernel (state D): those stuck on a hung mount."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        count += fields[0] == "D" and int(fields[1]) == os.getpid()
    return count


def test_a_folder_whose_listing_hangs_is_named_and_the_command_exits(tmp_path, hung_tree):
    """The listing of the folder never answers: one line naming the folder and the bound, the
    file named beside it is done, exit 1, and the command exits while the mount still hangs
    (the stuck listing is a child's, not a thread of the command's)."""
    mount = hung_tree({"in/a.flac": JFK, "in/b.flac": JFK})
    mount.hang_readdir("in")
    other = tmp_path / "press yard.flac"
    shutil.copy(PRESS_YARD, other)
    folder = tmp_path / "mnt" / "in"
    proc = transcribe_cli("--db", str(tmp_path / "jobs.db"), str(folder), str(other), "-f", "json", "-q", seconds=2)
    _, stderr = proc.communicate(timeout=120)  # the mount is not released: the command ends on its own
    assert proc.returncode == 1, stderr
    assert stderr.splitlines() == [
        "1 done, 0 skipped, 1 failed", f"failed: {folder}: cannot list the folder: its listing got no answer for 2 s {HUNG}"]
    assert mount.hung.is_set() and other.with_suffix(".json").exists()


def test_an_entry_whose_stat_hangs_fails_alone_and_its_folder_is_done(tmp_path, hung_tree, monkeypatch):
    """Among good files, one whose lookup (stat, open) never answers: the others are done, it is
    named with the bound, exit 1."""
    hung_tree({"in/a.flac": JFK, "in/b.flac": JFK, "in/c.flac": JFK}).hang_lookup("b.flac")
    monkeypatch.setenv("TRANSCRIBER_READ_TIMEOUT", "1")
    use_engine(monkeypatch, ScriptedEngine())
    folder = tmp_path / "mnt" / "in"
    start = time.monotonic()
    result = invoke("--db", str(tmp_path / "jobs.db"), str(folder), "-f", "json", "-o", str(tmp_path / "out"), "-q")
    no_traceback(result)
    assert result.exit_code == 1
    bad = folder / "b.flac"
    assert result.stderr.splitlines() == [
        "2 done, 0 skipped, 1 failed", f"failed: cannot read {str(bad)!r}: a read got no answer for 1 s {HUNG}"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.json", "c.json"]
    assert time.monotonic() - start < 30


def test_watch_reports_a_hung_folder_once_and_takes_its_files_when_it_answers(tmp_path, hung_tree, monkeypatch):
    """The watched folder's listing hangs for ~3 s: one warning line, the watch goes on with one
    scan stuck at most (not one per scan), and once the mount answers, its files are done."""
    mount = hung_tree({"in/a.flac": JFK, "in/b.flac": JFK})
    mount.hang_readdir("in")
    monkeypatch.setenv("TRANSCRIBER_READ_TIMEOUT", "0.5")
    stuck = []

    def release():
        stuck.append(stuck_children())  # after ~5 bounds and ~50 scans
        mount.release()

    threading.Timer(3.0, release).start()
    done = []

    def on_step(i):
        if i == 10:
            done.append(i)
            if len(done) == 2:
                threading.Timer(0.3, os.kill, [os.getpid(), signal.SIGTERM]).start()

    use_engine(monkeypatch, ScriptedEngine(on_step))
    folder = tmp_path / "mnt" / "in"
    result = invoke("--db", str(tmp_path / "jobs.db"), "watch", str(folder), "--stable-seconds", "0",
                    "--interval", "0.05", "-f", "json", "-o", str(tmp_path / "out"))
    no_traceback(result)
    assert stuck == [1]
    warnings = [line for line in lines(result) if line.startswith("warning:")]
    assert warnings == [f"warning: cannot list {folder}: its listing got no answer for 0.5 s {HUNG}; "
                        f"looked at again at each scan"]
    assert f"{folder} answers again" in lines(result)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.json", "b.json"]
    assert lines(result)[-1] == "watch stopped: 2 done, 0 failed"


@pytest.mark.parametrize("signum, sigint", [(signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.SIG_DFL),
                                            (signal.SIGINT, signal.SIG_IGN)], ids=["SIGTERM", "SIGINT", "SIGINT-ignored"])
def test_a_stop_during_a_hung_walk_ends_the_command_within_2_seconds(tmp_path, hung_tree, signum, sigint):
    """SIGTERM or Ctrl-C while the folder's listing hangs (the bound far off): one line, exit
    128 + the signal within 2 s, nothing queued; the mount still hangs. Also when the command
    was started with SIGINT ignored (a script's background job), as the run after the listing
    stops on it (its StopFlag installs its own handler)."""
    mount = hung_tree({"in/a.flac": JFK})
    mount.hang_readdir("in")
    db = tmp_path / "jobs.db"
    proc = transcribe_cli("--db", str(db), str(tmp_path / "mnt" / "in"), "-f", "json", seconds=120, sigint=sigint)
    try:
        assert mount.hung.wait(60), "the listing never reached the mount"
        time.sleep(0.3)
        start = time.monotonic()
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - start
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, stderr
    assert took < 2.5, f"took {took:.1f} s to stop"
    assert stderr.splitlines()[-1] == "interrupted while listing the inputs: nothing was queued"
    with SqliteJobStore(db) as store:
        assert list(store.jobs()) == []


def test_a_named_file_whose_stat_hangs_is_named_and_the_rest_is_done(tmp_path, hung_tree, monkeypatch):
    """The stat of a file named on the command line never answers (click's own stat() of each
    path is skipped: it would wait forever): one line naming it, the other file done, exit 1."""
    hung_tree({"in/a.flac": JFK, "in/b.flac": JFK}).hang_getattr("in/a.flac")
    monkeypatch.setenv("TRANSCRIBER_READ_TIMEOUT", "1")
    use_engine(monkeypatch, ScriptedEngine())
    folder = tmp_path / "mnt" / "in"
    result = invoke("--db", str(tmp_path / "jobs.db"), str(folder / "a.flac"), str(folder / "b.flac"), "-f", "json",
                    "-o", str(tmp_path / "out"), "-q")
    no_traceback(result)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "1 done, 0 skipped, 1 failed", f"failed: {folder / 'a.flac'}: its stat() got no answer for 1 s {HUNG}"]


def test_watch_of_a_folder_whose_stat_hangs_is_one_line(tmp_path, hung_tree, monkeypatch):
    hung_tree({"in/a.flac": JFK}).hang_getattr("in")
    monkeypatch.setenv("TRANSCRIBER_READ_TIMEOUT", "1")
    folder = tmp_path / "mnt" / "in"
    result = invoke("--db", str(tmp_path / "jobs.db"), "watch", str(folder))
    no_traceback(result)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"error: cannot watch {folder}: its stat() got no answer for 1 s {HUNG}"]


def process_state(pid: int) -> str:
    """``pid``'s state letter in /proc ("T": stopped, "Z": ended); "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def at_each_stop(proc: subprocess.Popen, first) -> threading.Thread:
    """Each time ``proc`` stops itself (SIGSTOP at a test point), let it go on; ``first()``
    runs before the first such SIGCONT (the fault set while the process waits)."""
    def loop() -> None:
        pending = True
        while process_state(proc.pid) not in ("", "Z", "X"):
            if process_state(proc.pid) == "T":
                if pending:
                    first()
                    pending = False
                os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.05)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def run_until_exit(proc: subprocess.Popen, seconds: float) -> str:
    """stderr, once ``proc`` exited; AssertionError if it has not within ``seconds`` (the mount
    still hung: a read of the command's own stuck in the kernel keeps it from exiting)."""
    return outputs_at_exit(proc, seconds)[1]


def outputs_at_exit(proc: subprocess.Popen, seconds: float) -> tuple[str, str]:
    """``run_until_exit``'s, with stdout: (stdout, stderr)."""
    try:
        return proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired as e:
        proc.kill()  # ends once the fixture unmounts (a thread stuck on the mount holds it)
        said = e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr
        raise AssertionError(f"the command did not exit within {seconds} s while the mount hung; "
                             f"it said: {said!r}") from None


def hang_at_the_first_step(tmp_path: Path, hung_wav, monkeypatch, hung_first: bool, hang: tuple[int, int],
                           *args: str):
    """Run the hung file and another, one-shot, one attempt each; at the first file's first
    step (SIGSTOP there) the hung file's bytes ``hang`` stop answering. The job of the hung file
    fails in one line, the other is done, exit 1, and the command exits while the mount still
    hangs (bounded: a read stuck in a thread of its own would keep it from exiting). The
    hung file's job."""
    other = tmp_path / "press yard.flac"
    shutil.copy(PRESS_YARD, other)
    db, path = tmp_path / "jobs.db", str(hung_wav.path)
    monkeypatch.setenv("TRANSCRIBER_TEST_SIGNAL_AT", "SIGSTOP@step:1")
    files = [path, str(other)] if hung_first else [str(other), path]
    proc = transcribe_cli("--db", str(db), *files, "--mode", "oneshot", "-f", "json", "--max-attempts", "1", "-q",
                          *args, seconds=2)
    at_each_stop(proc, lambda: hung_wav.hang(*hang))
    stderr = run_until_exit(proc, 90)
    assert proc.returncode == 1, stderr
    assert stderr.splitlines() == [
        f"error: cannot read audio from {path!r}: a read got no answer for 2 s {HUNG}", "1 done, 0 skipped, 1 failed"]
    assert other.with_suffix(".json").exists() and hung_wav.hung.is_set()
    with SqliteJobStore(db) as store:
        job = next(j for j in store.jobs() if j.path == path)
    assert job.status == "failed" and job.retryable and job.progress == 0
    return job


def test_a_file_that_hangs_after_it_was_enqueued_fails_alone_and_the_command_exits(tmp_path, hung_wav, monkeypatch):
    """The mount answers at enqueue and hangs before the job's first read (its content key at
    the start): the other file is first in line, and at its first step every read of the hung
    file stops answering. Its job never got to the probe."""
    job = hang_at_the_first_step(tmp_path, hung_wav, monkeypatch, False, (0, hung_wav.size))
    assert job.duration is None


def test_a_file_that_hangs_before_a_checkpoint_fails_alone_and_the_command_exits(tmp_path, hung_wav, monkeypatch):
    """The job has begun (probed, its first window decoded) when its file's tail stops
    answering: the content key read before the checkpoint commit hangs; nothing of it is
    committed. (ffmpeg is ~30 s into the 60 s file: it does not read the tail yet.)"""
    job = hang_at_the_first_step(tmp_path, hung_wav, monkeypatch, True, (hung_wav.size - 64 * 1024, hung_wav.size),
                                 "--checkpoint-seconds", "1")
    assert job.duration == pytest.approx(60, abs=0.1)


def test_the_reader_child_answers_each_call_and_is_replaced_when_stuck_or_killed(tmp_path, monkeypatch):
    """``bounded``'s calls go to one long-lived child (no fork per call); an error raised there
    is raised here; a call that passes the bound abandons that child (killed, never waited for)
    and the next call gets a new one; so does a call after the child was killed from outside."""
    reader = sys.modules["transcriber.deadline.bounded"]
    monkeypatch.setenv("TRANSCRIBER_READ_TIMEOUT", "0.5")
    reader.start_reader()
    pids = {bounded(os.getpid) for _ in range(50)}
    assert len(pids) == 1 and pids != {os.getpid()}  # one child answered all 50
    with pytest.raises(FileNotFoundError):
        bounded(os.stat, str(tmp_path / "none"))
    start = time.monotonic()
    with pytest.raises(ReadTimeout) as hung:
        bounded(time.sleep, 30, path="slow.wav")
    assert time.monotonic() - start < 5
    assert str(hung.value) == f"cannot read audio from 'slow.wav': a read got no answer for 0.5 s {HUNG}"
    (first,) = pids
    assert bounded(os.getpid) != first  # a new child
    os.kill(bounded(os.getpid), signal.SIGKILL)
    assert bounded(os.stat, str(tmp_path)).st_ino == tmp_path.stat().st_ino  # made again, in a new child


def test_status_of_a_job_whose_file_does_not_answer_is_one_line_and_exits(tmp_path, hung_tree):
    """``status`` looks whether each queued job's file still exists (else: ``gone``): the stat of
    one on a hung mount never answers. The table is shown (that job as stored), one line names
    the file and the bound, exit 1, while the mount still hangs."""
    mount = hung_tree({"in/a.flac": PRESS_YARD})
    hung, deleted = tmp_path / "mnt" / "in" / "a.flac", tmp_path / "deleted.flac"
    db = tmp_path / "jobs.db"
    with SqliteJobStore(db) as store:
        store.enqueue_many([Request(str(p), "1:1:key", "print", {}, str(p.with_suffix(""))) for p in (hung, deleted)])
    mount.hang_getattr("in/a.flac")
    stdout, stderr = outputs_at_exit(transcribe_cli("--db", str(db), "status", seconds=1), 60)
    assert stderr.splitlines() == [f"warning: cannot tell whether {hung} still exists: "
                                   f"its stat() got no answer for 1 s {HUNG}"]
    table = stdout.splitlines()
    assert [line.split()[1] for line in table[1:3]] == ["queued", "gone"] and table[-1] == "1 queued, 1 gone"
    assert mount.hung.is_set()


def test_outputs_whose_folder_does_not_answer_at_enqueue_fail_that_file_alone(tmp_path, hung_tree):
    """The enqueue looks whether a file's outputs exist (and are this tool's) before it queues it:
    the lookup of one output name never answers. That file fails at enqueue in one line naming
    its outputs' folder and the bound; the other file is done; exit 1, while the mount still hangs."""
    mount = hung_tree({"in/a.flac": PRESS_YARD})
    mount.hang_lookup("a.json")
    other = tmp_path / "press yard.flac"
    shutil.copy(PRESS_YARD, other)
    hung = tmp_path / "mnt" / "in" / "a.flac"
    proc = transcribe_cli("--db", str(tmp_path / "jobs.db"), str(hung), str(other), "-f", "json", "-q", seconds=1)
    stderr = run_until_exit(proc, 90)
    assert proc.returncode == 1, stderr
    assert stderr.splitlines() == ["1 done, 0 skipped, 1 failed",
                                   f"failed: {hung}: cannot check the outputs in {str(hung.parent)!r}: "
                                   f"its stat() got no answer for 1 s {HUNG}"]
    assert other.with_suffix(".json").exists() and mount.hung.is_set()


def test_outputs_whose_writes_do_not_answer_fail_the_job_and_the_batch_goes_on(tmp_path, hung_tree):
    """The file's folder (where its outputs go) answers reads, but its writes never answer (the
    temporary file's creation waits in the kernel): the job fails in one line naming the
    folder and the bound, retryable (a mount may come back); the other file is done; exit 1,
    while the mount still hangs."""
    mount = hung_tree({"in/a.flac": PRESS_YARD})
    mount.hang_writes()
    other = tmp_path / "press yard.flac"
    shutil.copy(PRESS_YARD, other)
    hung, db = tmp_path / "mnt" / "in" / "a.flac", tmp_path / "jobs.db"
    proc = transcribe_cli("--db", str(db), str(hung), str(other), "-f", "json", "--max-attempts", "1", "-q",
                          seconds=1)
    stderr = run_until_exit(proc, 90)
    assert proc.returncode == 1, stderr
    assert stderr.splitlines() == [
        f"error: {hung}: cannot write the outputs in {str(hung.parent)!r}: a write got no answer for 1 s {HUNG}",
        "1 done, 0 skipped, 1 failed"]
    with SqliteJobStore(db) as store:
        job = next(j for j in store.jobs() if j.path == str(hung))
    assert job.status == "failed" and job.retryable and job.words_complete  # its words are kept
    assert other.with_suffix(".json").exists() and mount.hung.is_set()


def test_follow_of_a_file_whose_folder_does_not_answer_is_one_line_and_exits(tmp_path, hung_tree):
    """``transcribe follow PATH``: the listing of PATH's folder (the outputs' names depend on
    it) never answers: one line naming PATH and the bound, exit 1, while the mount still hangs."""
    mount = hung_tree({"in/a.flac": PRESS_YARD})
    mount.hang_readdir("in")
    path = tmp_path / "mnt" / "in" / "a.flac"
    proc = transcribe_cli("--db", str(tmp_path / "jobs.db"), "follow", str(path), "-f", "json", seconds=1)
    stderr = run_until_exit(proc, 60)
    assert proc.returncode == 1, stderr
    assert stderr.splitlines() == [f"error: cannot follow {path}: its path got no answer for 1 s {HUNG}"]
    assert mount.hung.is_set()


def test_the_reader_starts_clean_while_another_thread_holds_a_lock(monkeypatch):
    """The reader is started while another thread of this process holds a lock that its call
    takes (a model's, tqdm's, a heartbeat's thread may hold one at any time). A forked child
    would find the lock held forever, and the call would end in a spurious ReadTimeout; the
    reader is a fresh interpreter: the call is answered at once."""
    reader = sys.modules["transcriber.deadline.bounded"]
    monkeypatch.setenv("TRANSCRIBER_READ_TIMEOUT", "3")
    reader._close_readers()  # the next call starts a reader
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lockheld.LOCK:
            held.set()
            done.wait(30)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(10)
    try:
        start = time.monotonic()
        pid = bounded(lockheld.pid_under_lock, path="the lock")
        assert time.monotonic() - start < 2.5
    finally:
        done.set()
    assert pid != os.getpid()
