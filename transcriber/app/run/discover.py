"""Which files a command line names, how a file's content is recognised, and where outputs go."""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

import transcriber
from transcriber import ReadTimeout, TranscriberError, bounded_each

# What a folder walk takes without asking ffmpeg. A file named explicitly is always tried.
MEDIA_EXTENSIONS = frozenset("""
    .wav .flac .mp3 .m4a .aac .ogg .oga .opus .wma .aif .aiff .alac .amr .ac3 .mka .caf .au
    .mp4 .m4v .mkv .mov .avi .webm .wmv .flv .mpg .mpeg .ts .mts .m2ts .3gp .ogv
""".split())

# ``--embed``'s copies (NAME.subtitled.EXT: transcriber.subtitles.embed.SUFFIX, spelled here so a folder walk
# does not import the writers) are our outputs: a folder walk and watch mode never take one for an
# input (its subtitles would be transcribed and embedded again)
EMBEDDED = ".subtitled"

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
    return temporary_name(path.name)


def temporary_name(name: str) -> bool:
    """``is_temporary`` for a bare file name (no Path made: a folder listing has thousands)."""
    name = name.lower()
    return (name.startswith((".", "~$")) or name.endswith(TEMPORARY_SUFFIXES)
            or (name.startswith("#") and name.endswith("#")))


def is_media_name(path: Path) -> bool:
    return path.suffix.lower() in MEDIA_EXTENSIONS and not is_temporary(path)


def has_audio(path: Path) -> bool:
    """ffmpeg's verdict for a file of unknown extension: does it hold an audio stream?"""
    try:
        transcriber.probe(path)  # by name when used: the audio module (numpy) is not needed to list files
        return True
    except (TranscriberError, OSError):
        return False


def looks_like_media(path: Path, check: Callable[[Path], bool] = has_audio) -> bool:
    """Taken by a folder walk: a media extension, or an unknown one that ffmpeg reads as audio."""
    if is_temporary(path) or is_embedded_copy(path.name):
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


def special_file(path: Path) -> Optional[str]:
    """Why a path that exists is not a file to transcribe: a FIFO, a device or a socket (opening
    or reading one can wait forever, or never end); None for a regular file or a folder."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, what in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return f"{what}, not a file: refused (only regular files are transcribed)"
    return None


def discover(paths: Iterable[Path], check: Callable[[Path, str], bool] = lambda path, key: has_audio(path)
             ) -> tuple[list[tuple[Path, Optional[Path]]], list[tuple[Path, str]]]:
    """Expand paths into (file, the folder it was found under or None), in a stable order,
    without duplicates; and (path, why) for the paths that lead nowhere: a path that does not
    exist, a broken symbolic link named, one with a media name found in a folder, or a path or
    folder that got no answer (a hung mount: ``bounded_each``'s bound, named, the rest goes on).

    The walk and its stats are made by the reader process with a bound (``listing``); ``check(path,
    resolved key)``, which decides on a file of unknown extension, runs here (it may read this
    process's job store). Symbolic links to folders are not followed in a folder (a link to
    ``..`` would loop)."""
    found: list[tuple[Path, Optional[Path]]] = []
    seen: set[str] = set()
    candidates, missing = listing(list(paths))
    for candidate in candidates:
        if candidate.key not in seen and (not candidate.unknown or check(candidate.path, candidate.key)):
            seen.add(candidate.key)
            found.append((candidate.path, candidate.root))
    return found, missing


@dataclass(frozen=True)
class Candidate:
    """A file a walk found: taken if ``unknown`` is False (named, or a media extension), else
    if ffmpeg reads it as audio. ``key``: its resolved path (``resolved``)."""

    path: Path
    root: Optional[Path]  # the folder named that it was found under; None: named itself
    key: str
    unknown: bool


@dataclass(frozen=True)
class Folder:
    """One folder's listing, filtered by name: its resolved path, its subfolders to enter, its
    regular files (by d_type: no stat) and other entries (links...: a stat each) that may be media."""

    real: str
    folders: list[str]
    files: list[str]
    others: list[str]


LISTING = "its listing got no answer"
STAT = "its stat() got no answer"


def listing(paths: list[Path]) -> tuple[list[Candidate], list[tuple[Path, str]]]:
    """The file-system part of ``discover``: every stat and listing, made by the reader process
    with a bound (``bounded_each``: a batch of calls each, not one per file); a path or folder that
    gets no answer is in ``missing`` with the reason, and the rest goes on."""
    candidates, missing = [], []
    for path, kind in zip(paths, bounded_each(_named, paths, what=STAT)):
        if isinstance(kind, OSError):
            missing.append((path, kind.strerror or str(kind)))
        elif isinstance(kind, Exception):
            raise kind
        elif isinstance(kind, str):
            missing.append((path, kind))
        elif kind is None:
            candidates += _walk(path, missing)
        else:
            candidates.append(kind)
    return candidates, missing


def identify(source: Path, root: Optional[Path], output_dir: Optional[Path]) -> tuple[str, str, str]:
    """(its resolved path, its content key, the place of its outputs' stem: ``output_stem``) of
    a file found under ``root`` (None: named alone): what a job's Request needs of the file
    system, read by the reader (``bounded_each``). OSError if the file cannot be read, ValueError
    if its name cannot be stored."""
    path = resolved(source)
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("the file name is not valid UTF-8; rename it") from None
    return path, content_key(path), resolved_place(output_stem(source, root, output_dir))


def identify_found(file: tuple[Path, Optional[Path]], output_dir: Optional[Path]) -> tuple[str, str, str]:
    """``identify`` of a (file, the folder named that holds it) pair, as ``discover`` finds them."""
    return identify(*file, output_dir)


def unwritable(folder: str) -> Optional[str]:
    """Why no output can be made in ``folder`` (or, where it is not made yet, the nearest folder
    above it that is), or None: found before a decode, not after it (read by the reader)."""
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    if os.access(folder, os.W_OK | os.X_OK):
        return None
    read_only = os.statvfs(folder).f_flag & os.ST_RDONLY
    return f"cannot write the outputs in {folder!r}: {'Read-only file system' if read_only else 'Permission denied'}"


def path_kind(path: Path) -> Optional[str]:
    """"folder", "file" (anything else that exists), or None: nothing there."""
    return "folder" if path.is_dir() else "file" if path.exists() else None


def _named(path: Path):
    """A path of the command line: None for a folder, a Candidate for a file, or why not."""
    if path.is_dir():
        return None
    if path.exists():
        return special_file(path) or Candidate(path, None, resolved(path), unknown=False)
    return broken_link(path) or "no such file or folder"


def _walk(root: Path, missing: list[tuple[Path, str]]) -> list[Candidate]:
    """The files under ``root`` that may be media, in Path order (by components), from one
    batch of listings per level of folders; the folders and entries that got no answer (or a
    broken link with a media name) go to ``missing``."""
    files: dict[str, Optional[str]] = {}  # path -> its resolved key (None: a link or other, stat it)
    level = [str(root)]
    while level:
        listed = bounded_each(_list_folder, level, what=LISTING)
        for folder, got in zip(level, listed):
            if isinstance(got, ReadTimeout):
                missing.append((Path(folder), f"cannot list the folder: {got.strerror}"))
            elif isinstance(got, Folder):
                files.update((os.path.join(folder, n), os.path.join(got.real, n)) for n in got.files)
                files.update((os.path.join(folder, n), None) for n in got.others)
            elif not isinstance(got, OSError):  # an unreadable folder is skipped, as ever
                raise got
        level = [os.path.join(folder, n) for folder, got in zip(level, listed) if isinstance(got, Folder)
                 for n in got.folders]
    ordered = sorted(files, key=lambda f: f.split(os.sep))  # Path's own comparison is slow
    others = [f for f in ordered if files[f] is None]
    for f, got in zip(others, bounded_each(_other, others, what=STAT)):
        files[f] = got
    candidates = []
    for f in ordered:
        key = files[f]
        if isinstance(key, str):
            candidates.append(Candidate(Path(f), root, key, unknown=not is_media_name(Path(f))))
        elif isinstance(key, tuple):  # (why, broken link)
            missing.append((Path(f), key[0]))
        elif isinstance(key, ReadTimeout):
            missing.append((Path(f), key.strerror))
        elif key is not None and not isinstance(key, OSError):
            raise key
    return candidates


def _list_folder(folder: str) -> Folder:
    """One scandir: the entries a walk looks at (d_type tells a folder, a file, a link: no stat)."""
    folders, files, others = [], [], []
    for entry in os.scandir(folder):
        name = entry.name
        if entry.is_dir(follow_symlinks=False):
            if not temporary_name(name):
                folders.append(name)
        elif _may_be_media(name):
            (files if entry.is_file(follow_symlinks=False) else others).append(name)
    return Folder(_resolved_folder(folder), folders, files, others)


def _may_be_media(name: str) -> bool:
    return (not temporary_name(name) and os.path.splitext(name)[1].lower() not in NON_MEDIA_EXTENSIONS
            and not is_embedded_copy(name))


def is_embedded_copy(name: str) -> bool:
    """``--embed``'s copy of a video (``NAME.subtitled.EXT``): an output, never an input."""
    return os.path.splitext(name)[0].endswith(EMBEDDED)


def _other(f: str):
    """An entry that is not a regular file by its d_type (a link, a FIFO, a socket...): its
    resolved key if it leads to a regular file, (why,) for a broken link with a media name, else
    None."""
    path = Path(f)
    try:
        if stat.S_ISREG(os.stat(f).st_mode):
            return str(path.resolve())
        return None
    except OSError:
        why = broken_link(path) if is_media_name(path) else None
        return (why,) if why else None


def resolved(path: Path) -> str:
    """``str(path.resolve())``, with each folder resolved once per process: a big folder costs
    one lstat per file, not one per component of its path. (A link is resolved in full.)"""
    if os.path.islink(path):
        return str(Path(path).resolve())
    absolute = os.path.abspath(path)
    return os.path.join(_resolved_folder(os.path.dirname(absolute)), os.path.basename(absolute))


def resolved_place(path: Path) -> str:
    """``path`` in its folder resolved (``resolved``'s folder, once per process): the place of
    a name that is not a file yet (an outputs' stem), so no lstat of the name itself."""
    absolute = os.path.abspath(path)
    return os.path.join(_resolved_folder(os.path.dirname(absolute)), os.path.basename(absolute))


@functools.lru_cache(maxsize=1024)
def _resolved_folder(folder: str) -> str:
    return os.path.realpath(folder)


def output_stem(source: Path, root: Optional[Path], output_dir: Optional[Path]) -> Path:
    """``<stem>`` next to the source, or under ``output_dir`` mirroring the folder it came from
    (so two ``talk.mp3`` in different subfolders do not overwrite each other).

    The one naming rule of ``run`` and ``watch``: a file whose stem another media file of its
    folder shares (``talk.wav`` beside ``talk.mp3``) keeps its extension (``talk.wav.srt``,
    ``talk.mp3.srt``), whatever else the command named; it depends on the folder only, so two
    commands (or a watch scan) always give a file the same name. Names that still clash
    (``a/talk.mp3 b/talk.mp3 -o out/``) are the enqueue's to refuse (transcriber/app/run/enqueue.py)."""
    name = source.name if _shares_stem(source) else source.stem
    if output_dir is None:
        return source.with_name(name)
    relative = source.relative_to(root) if root is not None else Path(source.name)
    return output_dir / relative.with_name(name)


def _shares_stem(source: Path) -> bool:
    try:
        mtime = os.stat(source.parent).st_mtime_ns  # a new or removed entry changes it
    except OSError:
        return False
    own = 0 if is_media_name(source) else 1  # an unknown extension ffmpeg read: counted too
    return _media_stems(str(source.parent), mtime)[source.stem] + own > 1


@functools.lru_cache(maxsize=256)
def _media_stems(folder: str, mtime_ns: int) -> Counter:
    """How many media files of ``folder`` have each stem (one listing per folder and state)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return Counter()
    stems = (os.path.splitext(n) for n in names if not temporary_name(n))
    return Counter(stem for stem, ext in stems if ext.lower() in MEDIA_EXTENSIONS)


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
    """``size:mtime_ns:sha256-prefix``; OSError if the file cannot be read, or is not a regular
    file (opened without blocking: a FIFO that no one writes would wait forever)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        digest = hashlib.sha256()
        offsets = sorted({0, max(0, st.st_size // 2 - SAMPLE_BYTES // 2), max(0, st.st_size - SAMPLE_BYTES)})
        for offset in offsets:
            f.seek(offset)
            digest.update(f.read(SAMPLE_BYTES))
    return f"{st.st_size}:{st.st_mtime_ns}:{digest.hexdigest()[:16]}"
