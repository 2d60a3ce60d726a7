"""Output files written whole: every requested format rendered before any file is written, and
each file written to a temporary file in the target directory and renamed over the target, so a
reader never sees a partial output. The writes are made by the reader child, with the bound on
reads (``transcriber.deadline.bounded``): an outputs' folder on a hung mount is an OutputError
naming it, not a wait forever."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Sequence, Union

from transcriber.deadline.bounded import ReadTimeout, bounded
from transcriber.errors import OutputError
from transcriber.subtitles.cues import CueOptions
from transcriber.subtitles.formats import FORMATS, SUBTITLE_FORMATS, OutputOptions
from transcriber.transcript.types import Transcript


def _one_line(error: BaseException) -> str:
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return " ".join((reason or type(error).__name__).split())


def _umask() -> int:
    # os.umask can only be read by setting it; done once, at import, to keep the window
    # in which another thread could create a file with a zero umask out of the job loop
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


# The mode a plain open() gives a new file. NamedTemporaryFile creates 0600 files; without
# this every output would be readable by its owner only.
_FILE_MODE = 0o666 & ~_umask()


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable; best effort (not every OS/filesystem allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_prefix(name: str) -> str:
    """The start of the temporary file's name for ``name``: a dot, its first 32 bytes and a
    short hash of the whole (``.talk.srt-1a2b3c.``), so the temporary name (~54 bytes with
    tempfile's 8 random characters and ``.part``) fits wherever ``name`` fits, even a 255-byte
    name, and still tells whose it is. transcriber/app/run/discover.py removes those a kill left behind."""
    raw = name.encode("utf-8", "surrogateescape")  # a Linux name need not be UTF-8
    head = raw[:32].decode("utf-8", errors="ignore")
    return f".{head}-{hashlib.sha256(raw).hexdigest()[:6]}."


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` so that ``path`` is either untouched or complete.

    Raises OutputError naming the path; the temporary file never outlives a failure.
    """
    path = Path(path)
    temp: Path | None = None
    done = False
    try:
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", newline="", dir=path.parent,
                                         delete=False, prefix=temp_prefix(path.name),
                                         suffix=".part") as f:
            temp = Path(f.name)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, _FILE_MODE)
        os.replace(temp, path)
        done = True
    except Exception as e:
        raise OutputError(f"cannot write {path}: {_one_line(e)}") from e
    finally:  # also on KeyboardInterrupt, which is re-raised as it is
        if not done and temp is not None:
            try:
                temp.unlink()
            except OSError:
                pass
    _fsync_directory(path.parent)


def output_path(stem_path: Path, fmt: str) -> Path:
    """``out/talk`` + ``srt`` -> ``out/talk.srt`` (a dot in the stem is kept: ``a.b.srt``)."""
    stem_path = Path(stem_path)
    return stem_path.with_name(stem_path.name + FORMATS[fmt].extension)


def write_outputs(transcript: Transcript, stem_path: Path, formats: Sequence[str],
                  options: Union[OutputOptions, CueOptions] = OutputOptions()) -> list[Path]:
    """Render every format, then write each file atomically; returns the paths written.

    ``options``: OutputOptions, or just the cue layout (CueOptions). A render error writes
    nothing. A write error leaves the files already written complete and the failing one
    untouched.
    """
    rendered = render_outputs(transcript, stem_path, formats, options)
    return write_rendered(stem_path, rendered)


def render_outputs(transcript: Transcript, stem_path: Path, formats: Sequence[str],
                   options: Union[OutputOptions, CueOptions] = OutputOptions()) -> list[tuple[Path, str]]:
    """``write_outputs``' first half: each format's (path, text), nothing written. A transcript
    without speech (``Transcript.has_speech``) gets no subtitle file (SRT, WebVTT, ASS): an empty
    SRT is refused by ffmpeg, pysubs2 and players, and a cue-less one helps no one; its TXT, TSV
    and JSON (``segments: []``) are written."""
    if isinstance(options, CueOptions):
        options = OutputOptions(cues=options)
    if isinstance(formats, str):
        formats = [formats]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown output format {unknown[0]!r}; "
                         f"choose from {', '.join(FORMATS)}")
    rendered = []
    for fmt in dict.fromkeys(formats):  # each format once, in the order asked
        if fmt in SUBTITLE_FORMATS and not transcript.has_speech:
            continue
        path = output_path(stem_path, fmt)
        try:
            entry = FORMATS[fmt]
            text = entry.render(transcript, options, stem_path.name) if entry.named else entry.render(transcript, options)
            rendered.append((path, text))
        except Exception as e:
            raise OutputError(f"cannot render {path}: {_one_line(e)}") from e
    return rendered


def write_rendered(stem_path: Path, rendered: list[tuple[Path, str]]) -> list[Path]:
    """``write_outputs``' second half: the rendered files written atomically, by the reader."""
    folder = Path(stem_path).parent
    try:
        return bounded(write_files, folder, rendered, path=folder, what=WRITE) if rendered else []
    except ReadTimeout as e:  # retried as any OutputError: the mount may come back
        raise OutputError(f"cannot write the outputs in {str(folder)!r}: {e.strerror}") from None


WRITE = "a write got no answer"


def write_files(folder: Path, rendered: list[tuple[Path, str]]) -> list[Path]:
    """``write_outputs``' writes (made by the reader child): ``folder`` made if it is not
    there, then each (path, text) written atomically, in order; the paths written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create {folder}: {_one_line(e)}") from e
    for path, text in rendered:
        write_atomic(path, text)
    return [path for path, _ in rendered]
