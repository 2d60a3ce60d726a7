"""Caches and model folders are data, never instructions: a library is loaded only when it is
one of the candidates the code enumerates (or the user's TRANSCRIBER_BLAS path); cache files are
private to the user whatever the umask; a model folder never names a file outside itself.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from transcriber import ModelError
from transcriber.cachedir import private_dir, private_write
from transcriber.model import hf

from ..native.test_blas import PIP_ONLY, run_python


EVIL = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(MARKER, "w");
    if (f) { fputs("ran\n", f); fclose(f); }
}
"""


def planted_library(tmp_path: Path) -> tuple[Path, Path]:
    """A shared library whose constructor writes a marker file: (the library, the marker)."""
    marker, source, lib = tmp_path / "constructor-ran", tmp_path / "evil.c", tmp_path / "libevil.so"
    source.write_text(f'#define MARKER "{marker}"\n{EVIL}')
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    return lib, marker


def permissions(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the BLAS binding is Linux-only")
def test_a_poisoned_blas_cache_never_loads_its_library(tmp_path):
    """The probe's cache file for this machine's candidates rewritten to choose a library that
    is none of them (its path a library whose constructor writes a marker): the next start
    measures the candidates again and binds one of them; the planted library is never loaded.
    The cache it writes instead is private (0600, its folders 0700) under a umask of 000."""
    from transcriber.native.blas import probe
    from transcriber.native.blas.libraries import candidates

    lib, marker = planted_library(tmp_path)
    cache = tmp_path / "cache"
    names = PIP_ONLY.split(",")
    os.environ["TRANSCRIBER_CACHE"] = str(cache)
    try:
        path = Path(probe._cache_path(names, candidates(names)[0]))
    finally:
        del os.environ["TRANSCRIBER_CACHE"]
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"measured": {}, "choice": {
        "library": {"name": "planted", "path": str(lib), "sgemm": "cblas_sgemm"}, "threads": 1, "gflops": 999.0}}))
    report, err = run_python("", PIP_ONLY, cache=cache, prelude="os.umask(0)")
    assert not marker.exists(), err
    assert report["name"] == "scipy-openblas32" and report["matmul_ok"], report
    assert "planted" not in path.read_text()
    assert permissions(path) == 0o600


def test_cache_files_and_folders_are_private_whatever_the_umask(tmp_path):
    """private_write / private_dir (what the model conversion, the probe and the kernels'
    verdict write with) under umask 000: files 0600, every folder they made 0700."""
    old = os.umask(0)
    try:
        private_write(tmp_path / "cache" / "blas" / "x.json", "{}")
        private_dir(tmp_path / "cache" / "models" / "tiny")
    finally:
        os.umask(old)
    assert permissions(tmp_path / "cache" / "blas" / "x.json") == 0o600
    for folder in ("cache", "cache/blas", "cache/models", "cache/models/tiny"):
        assert permissions(tmp_path / folder) == 0o700, folder
    assert [p.name for p in (tmp_path / "cache" / "blas").iterdir()] == ["x.json"]  # no temporary left


def hf_folder(tmp_path: Path, weight_map: dict) -> Path:
    folder = tmp_path / "whisper-hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "whisper", "d_model": 384}))
    (folder / hf.INDEX_FILE).write_text(json.dumps({"weight_map": weight_map}))
    return folder


@pytest.mark.parametrize("name", ["../../../../etc/passwd", "/etc/hostname", "sub/../../outside.safetensors"])
def test_a_shard_index_naming_a_file_outside_the_folder_is_refused(tmp_path, name):
    """model.safetensors.index.json whose weight_map names a file by ``..`` or an absolute
    path: refused, naming the entry, before any file is opened."""
    (tmp_path / "outside.safetensors").write_bytes(b"x")
    folder = hf_folder(tmp_path, {"model.encoder.conv1.weight": name})
    with pytest.raises(ModelError, match="outside the model's folder: not read"):
        hf.weight_files(folder)


def test_a_shard_that_links_out_of_the_folder_is_refused(tmp_path):
    """A shard that is a symbolic link to a file elsewhere: refused."""
    folder = hf_folder(tmp_path, {"model.encoder.conv1.weight": "model-00001-of-00001.safetensors"})
    (folder / "model-00001-of-00001.safetensors").symlink_to("/etc/hostname")
    with pytest.raises(ModelError, match="outside the model's folder"):
        hf.weight_files(folder)


def test_a_hub_snapshot_links_into_its_blobs_and_is_read(tmp_path):
    """The Hugging Face hub's cache layout (snapshots/<rev>/file -> ../../blobs/<hash>) stays
    inside the repository: its shards are read."""
    repo = tmp_path / "models--openai--whisper-tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc123").write_bytes(b"x")
    snapshot = repo / "snapshots" / "rev1"
    snapshot.mkdir(parents=True)
    (snapshot / hf.INDEX_FILE).write_text(json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors"}}))
    (snapshot / "model-00001-of-00001.safetensors").symlink_to("../../blobs/abc123")
    assert hf.weight_files(snapshot) == [snapshot / "model-00001-of-00001.safetensors"]
