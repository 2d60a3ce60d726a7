"""Which files a command line names, how a file's content is recognised, and where outputs go."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable, Iterable, Optional

from transcriber import TranscriberError, probe

# What a folder walk takes without asking ffmpeg. A file named explicitly is always tried.
MEDIA_EXTENSIONS = frozenset("""
    .wav .flac .mp3 .m4a .aac .ogg .oga .opus .wma .aif .aiff .alac .amr .ac3 .mka .caf .au
    .mp4 .m4v .mkv .mov .avi .webm .wmv .flv .mpg .mpeg .ts .mts .m2ts .3gp .ogv
""".split())

# Files a folder walk never probes: our own outputs, documents, images, databases... ffmpeg
# reads some of them (subtitles, images) but they never hold audio, and probing each one at every
# rerun or watch scan would cost a process start apiece.
NON_MEDIA_EXTENSIONS = frozenset("""
    .srt .vtt .json .txt .md .rst .csv .tsv .xml .html .htm .pdf .doc .docx .odt .rtf
    .jpg .jpeg .png .gif .bmp .tif .tiff .webp .svg .heic .ico
    .db .sqlite .sqlite3 .db-wal .db-shm .sqlite-wal .sqlite-shm .log .ini .cfg .toml .yaml .yml
    .py .sh .zip .tar .gz .bz2 .xz .7z .rar .exe .dll .so .iso .ass .ssa .sub .lrc .cue .nfo .m3u
    .m3u8 .pls .torrent .lock
""".split())

# Names of files that are still being written by something (browsers, rsync, editors, our own
# atomic writer): never taken, whatever their final extension will be.
TEMPORARY_SUFFIXES = (".part", ".partial", ".tmp", ".temp", ".crdownload", ".download", ".filepart",
                      ".!qb", ".opdownload", ".swp", ".swx", "~")


def is_temporary(path: Path) -> bool:
    name = path.name.lower()
    return (name.startswith((".", "~$")) or name.endswith(TEMPORARY_SUFFIXES)
            or (name.startswith("#") and name.endswith("#")))


def is_media_name(path: Path) -> bool:
    return path.suffix.lower() in MEDIA_EXTENSIONS and not is_temporary(path)


def has_audio(path: Path) -> bool:
    """ffmpeg's verdict for a file of unknown extension: does it hold an audio stream?"""
    try:
        probe(path)
        return True
    except (TranscriberError, OSError):
        return False


def looks_like_media(path: Path, check: Callable[[Path], bool] = has_audio) -> bool:
    """Taken by a folder walk: a media extension, or an unknown one that ffmpeg reads as audio."""
    if is_temporary(path):
        return False
    suffix = path.suffix.lower()
    if suffix in MEDIA_EXTENSIONS:
        return True
    if suffix in NON_MEDIA_EXTENSIONS:
        return False
    return check(path)


def broken_link(path: Path) -> Optional[str]:
    """Why ``path``, a symbolic link, leads nowhere ("symbolic link to gone.wav: No such file
    or directory", a loop...); None if it is not a link or leads to something."""
    if not path.is_symlink():
        return None
    try:
        os.stat(path)
        return None
    except OSError as e:
        return f"symbolic link to {os.readlink(path)}: {e.strerror or e}"


def discover(paths: Iterable[Path], check: Callable[[Path], bool] = has_audio
             ) -> tuple[list[tuple[Path, Optional[Path]]], list[tuple[Path, str]]]:
    """Expand paths into (file, the folder it was found under or None), in a stable order,
    without duplicates; and (path, why) for the paths that lead nowhere: a path that does not
    exist, a broken symbolic link named, or one with a media name found in a folder.

    Symbolic links to folders are not followed in a folder (a link to ``..`` would loop)."""
    found: list[tuple[Path, Optional[Path]]] = []
    missing: list[tuple[Path, str]] = []
    seen: set[Path] = set()

    def add(f: Path, root: Optional[Path]) -> None:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            found.append((f, root))

    for path in paths:
        if path.is_dir():
            for f in sorted(path.rglob("*")):
                if any(is_temporary(Path(part)) for part in f.relative_to(path).parts[:-1]):
                    continue
                if f.is_file() and looks_like_media(f, check):
                    add(f, path)
                elif is_media_name(f) and (why := broken_link(f)):
                    missing.append((f, why))
        elif path.exists():
            add(path, None)
        else:
            missing.append((path, broken_link(path) or "no such file or folder"))
    return found, missing


def output_stem(source: Path, root: Optional[Path], output_dir: Optional[Path]) -> Path:
    """``<stem>`` next to the source, or under ``output_dir`` mirroring the folder it came from
    (so two ``talk.mp3`` in different subfolders do not overwrite each other)."""
    if output_dir is None:
        return source.with_suffix("")
    relative = source.relative_to(root) if root is not None else Path(source.name)
    return output_dir / relative.with_suffix("")


# The content key tells "the same file as last time" from "a new or changed file".
#
# - size and mtime (nanoseconds) catch nearly every change for the price of a stat();
# - a hash of three 64 KiB samples (start, middle, end) catches what they miss: a file replaced
#   by another of the same size whose mtime was preserved (cp -p, rsync -t, tar/zip extraction,
#   restoring a backup). Media containers keep their headers (lengths, durations, seek tables)
#   at the start and/or the end, so two different recordings of equal size differ there.
# - not a hash of the whole file: a rerun over hundreds of multi-gigabyte videos would read
#   every byte of every file just to find that nothing changed; three samples cost three reads,
#   whatever the size, which keeps a rerun with nothing to do fast.
#
# A file touched without being changed (new mtime) is redone: the safe side.
SAMPLE_BYTES = 64 * 1024


def content_key(path: Path) -> str:
    """``size:mtime_ns:sha256-prefix``; OSError if the file cannot be read."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        digest = hashlib.sha256()
        offsets = sorted({0, max(0, st.st_size // 2 - SAMPLE_BYTES // 2), max(0, st.st_size - SAMPLE_BYTES)})
        for offset in offsets:
            f.seek(offset)
            digest.update(f.read(SAMPLE_BYTES))
    return f"{st.st_size}:{st.st_mtime_ns}:{digest.hexdigest()[:16]}"
