"""The house's arrows (docs/ARCHITECTURE.md), read from the source: each room of the library
imports only the rooms below it, and the application uses the library only through its public
API. A change that needs an arrow the other way is a change of design, made here first.

    app/                  the application (cli, store, run, serve)     -> transcriber.__all__ only
    engines/              audio in, words out                           -> media, model, backend, transcript, ...
    backend.py            which inference runs a model                  -> model, native
    media/ subtitles/     audio in; words out as files                  -> deadline, transcript, shared
    transcript/           Word, Segment, Transcript; text rules         -> shared
    model/  native/       plain MLX Whisper; the CPU kernels            -> transcript; shared (never each other)
    deadline/             reads of files with a deadline                -> shared
    speakers/             who speaks when (segmentation, embeddings)   -> shared
    shared: constants, errors, options, settings, cachedir
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import transcriber

PACKAGE = Path(transcriber.__file__).resolve().parent
APP = PACKAGE / "app"

# room -> the rooms it may import (besides itself and the shared modules). ``transcriber`` (the
# package's __init__: the public API) is the app's door, no room's.
SHARED = {"constants", "errors", "options", "settings", "cachedir"}
ALLOWED = {
    "deadline": set(),
    "model": {"transcript"},  # the tokenizer splits words by the text rules' languages
    "native": set(),
    "transcript": set(),
    "media": {"deadline"},
    "subtitles": {"deadline", "transcript", "media"},
    "backend": {"model", "native"},
    "engines": {"media", "model", "backend", "transcript", "deadline"},
    "doctor": {"media", "model", "native", "backend"},
    "speakers": {"media", "transcript", "deadline", "native"},  # who speaks when: its own models on MLX; stage.py reads the audio, labels the words
}


def imports_of(path: Path):
    """(module, names, line) for every import statement in a file, nested ones included."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (absolute ones say where they go)"
            yield node.module, [alias.name for alias in node.names], node.lineno


def room_of(module: str) -> str:
    """``transcriber.engines.oneshot`` -> ``engines``; ``transcriber.backend`` -> ``backend``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def library_modules():
    """(file, room) of every module of the library: all but the app and the package's own
    ``__init__`` (the public API, which names what every room offers)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] != "app" and relative != Path("__init__.py"):
            yield path, relative.parts[0].removesuffix(".py")


def wrong_arrows() -> list[str]:
    found = []
    for path, room in library_modules():
        allowed = ALLOWED.get(room)
        if allowed is None:  # a shared module: imports only other shared ones
            allowed = set()
        for module, names, line in imports_of(path):
            if not module.startswith("transcriber"):
                continue
            targets = [room_of(module)] if module != "transcriber" else names
            for target in targets:
                if target in SHARED or target == room:
                    continue
                if target not in allowed:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({room}) imports {module}"
                                 + (f" {target}" if module == "transcriber" else ""))
    return found


def test_each_room_imports_only_the_rooms_below_it():
    found = wrong_arrows()
    assert not found, "arrows the wrong way:\n" + "\n".join(found)


def test_the_arrow_check_sees_each_room():
    """The scan itself: every room of the table has modules, and a room not in it is a shared module."""
    rooms = {room for _, room in library_modules()}
    assert set(ALLOWED) <= rooms, set(ALLOWED) - rooms
    assert rooms - set(ALLOWED) <= SHARED, rooms - set(ALLOWED) - SHARED


@pytest.mark.parametrize("room", ["model", "native"])
def test_model_and_kernels_do_not_know_each_other(room):
    """model/ is a plain MLX Whisper; native/ knows no model: backend.py joins them."""
    other = {"model": "native", "native": "model"}[room]
    found = [f"{path.name}:{line} {module}" for path in (PACKAGE / room).rglob("*.py")
             for module, _, line in imports_of(path) if module.startswith(f"transcriber.{other}")]
    assert not found


def test_app_imports_only_the_public_api():
    public = set(transcriber.__all__)
    offending = []
    for path in sorted(APP.rglob("*.py")):
        for module, names, line in imports_of(path):
            if module.startswith("transcriber.") and not module.startswith("transcriber.app"):
                offending.append(f"{path.relative_to(APP)}:{line} from {module} import ...")
            elif module == "transcriber":
                offending += [f"{path.relative_to(APP)}:{line} {name} is not in transcriber.__all__" for name in names
                              if name not in public]
    assert not offending, "\n".join(offending)


def test_app_reaches_the_library_only_by_its_public_names():
    """``transcriber.NAME`` in the app (an attribute, not an import) names the public API too:
    ``transcriber.subtitles.embed`` would work only while something else imported it."""
    public = set(transcriber.__all__)
    found = []
    for path in sorted(APP.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "transcriber" and node.attr not in public):
                found.append(f"{path.relative_to(APP)}:{node.lineno} transcriber.{node.attr}")
    assert not found, "\n".join(found)


def test_the_library_knows_no_app():
    found = [f"{path.relative_to(PACKAGE)}:{line}" for path, _ in library_modules()
             for module, _, line in imports_of(path) if module.startswith("transcriber.app")]
    assert not found


def test_app_has_no_mode_branch():
    """Only the library's registry (transcriber/engines/modes.py) knows which modes exist."""
    for path in sorted(APP.rglob("*.py")):
        text = path.read_text()
        assert "mode ==" not in text and "mode !=" not in text, path.name
        assert '"stream"' not in text and '"oneshot"' not in text, path.name


def test_the_app_settings_live_in_the_app():
    """The library's settings module declares only the library's variables: the job database,
    serve's tokens and debug are the application's (transcriber/app/settings.py)."""
    from transcriber import settings
    from transcriber.app import settings as app_settings

    assert not set(settings.SETTINGS) & set(app_settings.SETTINGS)
    assert {"TRANSCRIBER_DB", "TRANSCRIBER_SERVE_TOKEN", "TRANSCRIBER_SERVER_TOKEN"} <= set(app_settings.SETTINGS)


def test_public_names_exist():
    for name in transcriber.__all__:
        assert hasattr(transcriber, name), name
