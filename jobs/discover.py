"""Which files a command line names, and where each one's outputs go."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

# What a folder walk takes. A file named explicitly is always tried, whatever its name.
MEDIA_EXTENSIONS = frozenset("""
    .wav .flac .mp3 .m4a .aac .ogg .oga .opus .wma .aif .aiff .alac .amr .ac3 .mka .caf .au
    .mp4 .m4v .mkv .mov .avi .webm .wmv .flv .mpg .mpeg .ts .mts .m2ts .3gp .ogv
""".split())


def is_media_name(path: Path) -> bool:
    return path.suffix.lower() in MEDIA_EXTENSIONS and not path.name.startswith(".")


def discover(paths: Iterable[Path]) -> tuple[list[tuple[Path, Optional[Path]]], list[Path]]:
    """Expand paths into (file, the folder it was found under or None), in a stable order,
    without duplicates; and the paths that do not exist."""
    found: list[tuple[Path, Optional[Path]]] = []
    missing: list[Path] = []
    seen: set[Path] = set()
    for path in paths:
        if path.is_dir():
            for f in sorted(p for p in path.rglob("*") if p.is_file() and is_media_name(p)):
                if f.resolve() not in seen:
                    seen.add(f.resolve())
                    found.append((f, path))
        elif path.exists():
            if path.resolve() not in seen:
                seen.add(path.resolve())
                found.append((path, None))
        else:
            missing.append(path)
    return found, missing


def output_stem(source: Path, root: Optional[Path], output_dir: Optional[Path]) -> Path:
    """``<stem>`` next to the source, or under ``output_dir`` mirroring the folder it came from
    (so two ``talk.mp3`` in different subfolders do not overwrite each other)."""
    if output_dir is None:
        return source.with_suffix("")
    relative = source.relative_to(root) if root is not None else Path(source.name)
    return output_dir / relative.with_suffix("")
