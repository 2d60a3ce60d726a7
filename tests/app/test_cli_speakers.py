"""``transcribe --speakers`` end to end: two LibriSpeech readers taking turns, every format
labelled, the RTTM scored against the turns the recording was built from, and a rerun with
other speaker options that keeps the words and redoes only the speaker pass and the files."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import sqlite_utils
import srt

from evalkit import der, readers
from transcriber.media.audio import load_audio

from tests.conftest import ROOT, require_data
from tests.media.test_vad import write_wav

READING = "ls_testother_367-130732_533-1066"


def transcribe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transcriber.app", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=900)


def two_reader_audio(with_turns: bool = False):
    """About a minute: the first three utterances of each reader, alternating (and its turns)."""
    data = require_data()
    samples = load_audio(data / "audio" / "long_en" / f"{READING}.flac")
    by_reader = {who: pieces[:3] for who, pieces in readers.pieces(data, READING, samples).items()}
    audio, turns = readers.alternating(by_reader)
    return (audio, turns) if with_turns else audio


@pytest.fixture(scope="module")
def two_readers(tmp_path_factory, speaker_weights):
    audio, turns = two_reader_audio(with_turns=True)
    return write_wav(tmp_path_factory.mktemp("speakers") / "two readers.wav", audio), turns


@pytest.mark.slow
def test_two_readers_are_told_apart_in_every_format(two_readers):
    media, turns = two_readers
    folder, db = media.parent, media.parent / "jobs.db"
    done = transcribe(str(media), "--speakers", "-f", "vtt,srt,json,txt,rttm", "--db", str(db), "-q")
    assert done.returncode == 0, done.stderr
    stem = folder / "two readers"
    timeline = json.loads(stem.with_suffix(".json").read_text())
    words = [w for s in timeline["segments"] for w in s["words"]]
    assert words and all(w.get("speaker") in ("Speaker 1", "Speaker 2") for w in words)
    assert {s["speaker"] for s in timeline["segments"]} == {"Speaker 1", "Speaker 2"}
    vtt = stem.with_suffix(".vtt").read_text()
    assert "<v Speaker 1>" in vtt and "<v Speaker 2>" in vtt
    names = [c.content.split(":")[0] for c in srt.parse(stem.with_suffix(".srt").read_text()) if ":" in c.content]
    assert set(names) == {"Speaker 1", "Speaker 2"}
    hypothesis = der.read_rttm(stem.with_suffix(".rttm"))
    score = der.score(turns, hypothesis, collar=0.25)
    assert score.der < 0.1, score  # the pass alone measures ~0 here (bench/speakers/der.py); words' turns are coarser
    # other speaker options: the words are kept (same fingerprint), the pass and the files redone
    (job,) = sqlite_utils.Database(db)["jobs"].rows
    again = transcribe(str(media), "--speakers", "--num-speakers", "2", "-f", "vtt,srt,json,txt,rttm",
                       "--db", str(db), "-q")
    assert again.returncode == 0, again.stderr
    (rerun,) = sqlite_utils.Database(db)["jobs"].rows
    assert rerun["fingerprint"] == job["fingerprint"] and json.loads(rerun["spec"])["num_speakers"] == 2
    relabelled = json.loads(stem.with_suffix(".json").read_text())
    assert [w["word"] for s in relabelled["segments"] for w in s["words"]] == [w["word"] for w in words]


@pytest.mark.slow
def test_a_job_killed_mid_file_resumes_to_the_same_speakers(two_readers, tmp_path):
    """kill -9 after the first checkpoint, rerun: the labelled outputs are the uninterrupted run's."""
    from tests.app.test_jobs_e2e import transcribe as run

    media, _ = two_readers
    reference, work = tmp_path / "ref", tmp_path / "work"
    args = ("--speakers", "-f", "json,vtt", "-q")
    for folder in (reference, work):
        folder.mkdir()
        (folder / media.name).write_bytes(media.read_bytes())
    done = run(reference / media.name, *args, db=tmp_path / "ref.db", timeout=900)
    assert done.returncode == 0, done.stderr
    killed = run(work / media.name, *args, db=tmp_path / "jobs.db", timeout=900, TRANSCRIBER_TEST_KILL_AT="checkpoint:1")
    assert killed.returncode == -signal.SIGKILL and not (work / "two readers.json").exists()
    resumed = run(work / media.name, *args, db=tmp_path / "jobs.db", timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    for ext in (".json", ".vtt"):
        assert (work / f"two readers{ext}").read_text() == (reference / f"two readers{ext}").read_text(), ext
