"""The application's ``TRANSCRIBER_*`` environment variables: declared, checked and read here,
as the library's are in transcriber/settings.py (``Setting``: type, bounds, a one-line
``SettingError``). ``check_all`` checks the library's and these before any work: the CLI makes
a bad value a usage error (exit 2). The few other variables the application reads
(``XDG_DATA_HOME``, ``LOCALAPPDATA``: the job database's folder) are read here too."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from transcriber import settings

Setting, SettingError = settings.Setting, settings.SettingError
DAY = 86400.0

SETTINGS = {s.name: s for s in (
    Setting("TRANSCRIBER_DB", doc="the job database's path"),
    Setting("TRANSCRIBER_DB_TIMEOUT", float, 0, DAY, doc="seconds to wait for another process's lock"),
    Setting("TRANSCRIBER_SERVE_TOKEN", doc="the secret of transcribe serve's requests"),
    Setting("TRANSCRIBER_SERVER_TOKEN", doc="the media server's API key (transcribe serve's webhooks)"),
    Setting("TRANSCRIBER_DEBUG", bool, doc="an unexpected error raises with its traceback"),
)}


def get(name: str) -> Optional[settings.Value]:
    """The variable's value, parsed and checked; None when it is unset or empty."""
    return SETTINGS[name].value()


def check_all() -> None:
    """SettingError for the first TRANSCRIBER_* variable, the library's or the application's,
    set to a value it cannot take."""
    settings.check_all()
    for setting in SETTINGS.values():
        setting.value()


def worker_environment() -> dict[str, str]:
    """The TRANSCRIBER_* variables of this process that the Ray workers it starts need too (the
    BLAS choice, the model cache, debug, the test suite's): all but the job database's, which
    only the driver opens."""
    return {name: value for name, value in os.environ.items()
            if name.startswith("TRANSCRIBER_") and name not in ("TRANSCRIBER_DB", "TRANSCRIBER_DB_TIMEOUT")}


def data_folder() -> Path:
    """The user's data folder, where an application keeps its files (the job database's
    default folder): ~/Library/Application Support on macOS, %LOCALAPPDATA% on Windows,
    $XDG_DATA_HOME (else ~/.local/share) elsewhere."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support"
    if os.name == "nt":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
