"""Shared fixtures: the real tiny.en model, the recordings in ../shared/data, ffmpeg."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

# ../shared/data from the repository root (CI clones main next to shared/), unless set
DATA = Path(os.environ.get("TRANSCRIBER_TEST_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def manifest() -> list[dict]:
    with open(DATA / "manifest.jsonl") as f:
        return [json.loads(line) for line in f]


def scored_entries(subsets=("short_en", "long_en")) -> list[dict]:
    """The recordings whose references belong in a headline WER."""
    return [e for e in manifest() if e["subset"] in subsets and e["reference_quality"] in ("exact", "exact-ish")]


def audio_path(name: str) -> Path:
    hits = sorted((DATA / "audio").rglob(name))
    assert hits, f"{name} not found under {DATA / 'audio'}"
    return hits[0]


def ffmpeg(*args: str) -> None:
    """Run the same ffmpeg binary the library uses (quietly; raise on failure)."""
    from transcriber.audio import ffmpeg_binary

    subprocess.run([ffmpeg_binary(), "-nostdin", "-v", "error", "-y", *args], check=True)


@pytest.fixture(scope="session")
def model():
    import transcriber

    return transcriber.load_model("tiny.en")


@pytest.fixture(scope="session")
def oneshot_transcripts(model):
    """One-shot greedy transcripts of every scored recording: {file: Transcript}."""
    import transcriber

    return {e["file"]: transcriber.transcribe(DATA / e["file"], model) for e in scored_entries()}
