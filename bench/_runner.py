"""The runner behind ``python -m bench.FAMILY SUBCOMMAND [ARGS...]``.

The subcommands of a family are its scripts, bench/FAMILY/NAME.py (and NAME.sh), named with
'-' for '_'; a name that starts with '_' is a worker, not a subcommand. ARGS go to the script
unchanged: a Python script runs as ``python bench/FAMILY/NAME.py ARGS...`` would run it (as
``__main__``, ``sys.argv[0]`` its path, its folder first on ``sys.path``), a shell script
through bash. ``--help`` without a subcommand lists the subcommands with the first line of each
one's docstring (the header comment of a shell script); ``SUBCOMMAND --help`` is the script's own.
"""

from __future__ import annotations

import ast
import os
import runpy
import sys
from pathlib import Path


def scripts(folder: Path) -> dict[str, Path]:
    """Subcommand -> script, in name order."""
    found = sorted(p for p in folder.iterdir() if p.suffix in (".py", ".sh") and not p.name.startswith("_"))
    return {p.stem.replace("_", "-"): p for p in found}


def header(script: Path) -> str:
    """A shell script's leading comment (after the #! line), without the '#'s."""
    lines = []
    for line in script.read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        lines.append(line[1:].removeprefix(" "))
    return "\n".join(lines).strip()


def summary(script: Path) -> str:
    """The script's one-line summary: its docstring's first line (read, not imported)."""
    if script.suffix == ".sh":
        text = header(script)
    else:
        text = ast.get_docstring(ast.parse(script.read_text(), str(script))) or ""
    return text.strip().splitlines()[0] if text.strip() else ""


def usage(package: str, folder: Path, found: dict[str, Path]) -> str:
    doc = (sys.modules[package].__doc__ or "").strip().split("\n\n")[0]  # what the family measures
    width = max(len(name) for name in found)
    rows = [f"  {name:<{width}}  {summary(script)}" for name, script in found.items()]
    return "\n".join([f"usage: python -m {package} SUBCOMMAND [ARGS...]", "", doc, "",
                      "subcommands (SUBCOMMAND --help: the script's own options):", *rows])


def main(package: str, argv: list[str] | None = None) -> None:
    folder = Path(sys.modules[package].__file__).resolve().parent
    found = scripts(folder)
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage(package, folder, found), file=sys.stdout if args else sys.stderr)
        sys.exit(0 if args else 2)
    name, rest = args[0], args[1:]
    if name not in found:
        print(f"python -m {package}: no subcommand {name!r}; one of: {', '.join(found)}", file=sys.stderr)
        sys.exit(2)
    script = found[name]
    if script.suffix == ".sh":
        if rest[:1] in (["-h"], ["--help"]):  # the script reads no options: its first argument is a path
            print(header(script))
            sys.exit(0)
        os.execvp("bash", ["bash", str(script), *rest])
    sys.argv = [str(script), *rest]
    if not getattr(sys.flags, "safe_path", False):  # (python -P puts neither first)
        sys.path[0] = str(script.parent)  # what `python bench/FAMILY/NAME.py` puts first, not the cwd
    runpy.run_path(str(script), run_name="__main__")
