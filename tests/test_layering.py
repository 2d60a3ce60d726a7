"""The layering of DESIGN.md: jobs/ uses the library only through its public API, and knows
no decoding mode (the mode registry lives in the library)."""

from __future__ import annotations

import ast
from pathlib import Path

import transcriber

JOBS = Path(__file__).resolve().parents[1] / "jobs"


def imports_of(path: Path):
    """(module, names) for every import statement in a file, nested ones included."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, [alias.name for alias in node.names]


def test_jobs_import_only_the_public_api():
    public = set(transcriber.__all__)
    offending = []
    for path in sorted(JOBS.rglob("*.py")):  # jobs/serve/ too
        for module, names in imports_of(path):
            if module.startswith("transcriber."):
                offending.append(f"{path.relative_to(JOBS)}: from {module} import ...")
            elif module == "transcriber":
                offending += [f"{path.relative_to(JOBS)}: {name} is not in transcriber.__all__" for name in names
                              if name not in public]
    assert not offending, "\n".join(offending)


def test_jobs_have_no_mode_branch():
    """Only the library's registry (transcriber/modes.py) knows which modes exist."""
    for path in sorted(JOBS.rglob("*.py")):
        text = path.read_text()
        assert "mode ==" not in text and "mode !=" not in text, path.name
        assert '"stream"' not in text and '"oneshot"' not in text, path.name


def test_public_names_exist():
    for name in transcriber.__all__:
        assert hasattr(transcriber, name), name
