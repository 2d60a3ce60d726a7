"""The transcriber's cache folder, in a module of its own: the model loader and the BLAS probe
(transcriber/native/blas/probe.py, imported by the model) both need it, and neither may import the other.

What is cached is read back as data by later runs (a converted model, a probe's verdict), so
it is made private to the user whatever the umask: folders 0700 (``private_dir``), files 0600
(``private_write``, ``make_private``). Anyone else able to write there could steer those runs.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Union

from transcriber import settings

DIR_MODE, FILE_MODE = 0o700, 0o600


def cache_root() -> Path:
    """$TRANSCRIBER_CACHE, else $XDG_CACHE_HOME/transcriber, else ~/.cache/transcriber."""
    base = settings.get("TRANSCRIBER_CACHE")
    if base:
        return Path(base)
    xdg = settings.xdg_cache_home()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "transcriber"


def private_dir(path: Union[str, Path]) -> Path:
    """``path`` made (with its missing parents) as folders only the user can enter: 0700 for
    every folder created here, whatever the umask (a folder that was there is left as it is).
    OSError as ``os.makedirs`` raises it."""
    path = Path(path)
    missing = []
    for folder in (path, *path.parents):
        if folder.is_dir():
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:
            continue  # made by a concurrent run meanwhile
        os.chmod(folder, DIR_MODE)  # the umask may have taken bits from DIR_MODE (never added any)
    return path


def make_private(path: Union[str, Path]) -> None:
    """A file (0600) or folder (0700) written by another writer (MLX, shutil), made private."""
    os.chmod(path, DIR_MODE if os.path.isdir(path) else FILE_MODE)


def private_write(path: Union[str, Path], data: Union[str, bytes]) -> None:
    """``data`` written to ``path`` atomically (a temporary file renamed over it), the file 0600
    from its creation and its folder made as ``private_dir`` does. OSError on failure, the
    temporary file removed."""
    path = Path(path)
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
