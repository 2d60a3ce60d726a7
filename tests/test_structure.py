"""The shape of the code, read from its source (nothing is imported): no import cycle among the
modules of transcriber/ (the library and its app, transcriber/app/), and no function longer than MAX_FUNCTION_LINES.

What counts as an import: every ``import``/``from ... import`` in a module, at its top or inside
a function. A lazy import inside a function still runs the other module, and when it is there
only to dodge a cycle the cycle is still one (the two modules cannot be read or changed apart).
Only imports under ``if TYPE_CHECKING:`` are left out: they never run. Importing a submodule
runs its package's ``__init__`` too, but that edge is not counted (every module would then
cycle through its own package); ``from . import x`` counts as an edge to the submodule ``x``
when there is one, else to the package's ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("transcriber",)
MAX_FUNCTION_LINES = 50


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages (``__init__`` as the package)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes under an ``if TYPE_CHECKING:`` block."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return skipped


def _base(module: str, is_package: bool, level: int, name: Optional[str]) -> str:
    """The absolute module of a relative ``from`` import."""
    parts = module.split(".")
    if not is_package:
        parts.pop()
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([name] if name else []))


def imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported module of the packages, line) for each import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_nodes(tree)
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, is_package, node.level, node.module) if node.level else node.module or ""
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    yield target, node.lineno
                elif base in known:
                    yield base, node.lineno


def import_graph() -> dict[str, dict[str, int]]:
    known = modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        edges = graph.setdefault(module, {})
        for target, line in imports(module, path, known):
            if target != module:
                edges.setdefault(target, line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(component)
    edges = [f"    {a} -> {b} (line {line})" for a in component for b, line in sorted(graph[a].items())
             if b in members]
    return "cycle among " + ", ".join(component) + ":\n" + "\n".join(edges)


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``file:line name (N lines)`` for each function (or method) longer than ``limit`` lines,
    counted from its ``def`` (decorators excluded) to its last line."""
    out = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    return out


def test_the_graph_reads_the_imports_it_should():
    """The reader itself: relative and absolute forms, submodules named in ``from . import``,
    and lazy imports inside functions are edges."""
    graph = import_graph()
    assert "transcriber.engines.modes" in graph["transcriber"]  # from transcriber.engines.modes import ... in __init__
    assert "transcriber" in graph["transcriber.app.store.jobstore"]  # from transcriber import ...
    assert "transcriber.app.store.jobstore" in graph["transcriber.app.run.enqueue"]  # from transcriber.app.store.jobstore import ...
    assert all(module.startswith(PACKAGES) for edges in graph.values() for module in edges)


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycle():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "\n".join(_describe(c, graph) for c in found)


def test_no_function_over_50_lines():
    found = long_functions()
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(found)


MAX_MODULE_LINES = 500


def test_no_module_over_500_lines():
    """A module a newcomer can read at one sitting: one concept a file. A module that grows past
    this holds two (the job store's 1,000 lines held its types, its policy, its SQL and its
    schema), and is split by concept, not by size (C++ sources aside: a kernel file is one ISA's
    loops)."""
    found = [f"{path.relative_to(ROOT)}: {n} lines" for path in modules().values()
             if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not found, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(found)


LIFECYCLE = "transcriber.app.run.attempt"  # the one module that writes an attempt's life
LIFECYCLE_PARTS = ("Heartbeat", "CheckpointClock")


def constructed(names: tuple[str, ...]) -> dict[str, list[str]]:
    """{module: ``file:line name``} for each call of one of ``names`` (a class constructed)."""
    found: dict[str, list[str]] = {}
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in names:
                    found.setdefault(module, []).append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    return found


def test_only_the_attempt_builds_a_heartbeat_or_a_checkpoint_clock():
    """An attempt's life (its lease's heartbeat, the clock that says when to checkpoint, the stop
    check, the commits, the end booked) is written once, in transcriber/app/run/attempt.py, and every runner
    (in process, side by side, Ray, follow; the Ray worker's clock too) only hands it its steps.
    A runner that built its own heartbeat or clock would be a second copy of that life, and a
    fix to one (how a lost lease or a stop is handled) would have to be made in each."""
    found = constructed(LIFECYCLE_PARTS)
    assert set(found) <= {LIFECYCLE}, "\n".join(line for m, lines in found.items() if m != LIFECYCLE
                                                for line in lines)
    assert set(found) == {LIFECYCLE}  # the scan itself: it does find them there


# -- the product and its support code ----------------------------------------------------------------

SUPPORT = ("evalkit", "tests", "bench")  # the tests' and benchmarks' code: never shipped


def _imported_top_names(path: Path) -> Iterator[tuple[str, int]]:
    """(first part of the module's name, line) for every absolute import in ``path``, lazy ones
    included."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module.split(".")[0], node.lineno


def test_the_product_imports_nothing_from_the_tests_or_bench():
    """transcriber/ is what the wheel ships; evalkit/ (scoring, the test podcast),
    tests/ and bench/ are not in it. A product module importing one of them would work in the
    repository and fail when installed, so none does; and the wheel's package list
    (pyproject.toml) takes none of them in."""
    import fnmatch
    import re

    found = [f"{path.relative_to(ROOT)}:{line} imports {name}" for path in modules().values()
             for name, line in _imported_top_names(path) if name in SUPPORT]
    assert not found, "\n".join(found)
    text = (ROOT / "pyproject.toml").read_text()
    listed = re.search(r"^\[tool\.setuptools\.packages\.find\]\s*include = \[(.*?)\]", text, re.M)
    assert listed, "pyproject.toml lists the wheel's packages under [tool.setuptools.packages.find]"
    include = re.findall(r'"([^"]+)"', listed.group(1))
    assert not [name for name in SUPPORT if any(fnmatch.fnmatch(name, pattern) for pattern in include)], include


# The environment is read in the two settings modules alone (the library's transcriber/settings.py,
# the application's transcriber/app/settings.py): there each variable is named,
# checked and documented once (``transcribe doctor``, the CLI's check before any work). What
# cannot go there, by (file, variable), and why:
ENVIRONMENT_READS_ALLOWED = {
    ("transcriber/native/build.py", "CXX"):
        "the compiler of the kernels' build, run by setup.py before the package is installed "
        "(loaded by path: importing transcriber.settings would import the package and MLX); "
        "CXX is the build tools' convention, not a setting of the tool",
    ("transcriber/native/loader.py", "OMP_WAIT_POLICY"):
        "a default written for OpenMP before the kernels load (setdefault: the user's value "
        "wins); the tool never uses the value",
}
# Methods of os.environ that hand a variable's value to the code (``copy`` passes it on whole).
_ENVIRON_READS = ("get", "items", "keys", "values", "setdefault", "pop", "__getitem__", "__contains__")


def _is_environ(node: ast.AST) -> bool:
    """``os.environ`` or a bare ``environ`` (``from os import environ``)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def _environment_reads(path: Path) -> Iterator[tuple[int, str]]:
    """(line, variable or "*") of each read of the environment in ``path``: ``os.environ[...]``,
    ``os.environ.get(...)`` and the other reading methods, ``... in os.environ``,
    ``os.getenv(...)``. Handing ``os.environ`` on to a child (``env=os.environ``,
    ``{**os.environ, ...}``, an argument) is not a read: the child reads its own."""
    def name(args: list) -> str:
        first = args[0] if args else None
        return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else "*"

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        function = node.func if isinstance(node, ast.Call) else None
        if isinstance(function, ast.Attribute) and _is_environ(function.value) and function.attr in _ENVIRON_READS:
            yield node.lineno, name(node.args)
        elif (isinstance(function, ast.Attribute) and function.attr in ("getenv", "getenvb")) or (
                isinstance(function, ast.Name) and function.id in ("getenv", "getenvb")):
            yield node.lineno, name(node.args)
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
            yield node.lineno, name([node.slice])
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            yield node.lineno, name([node.left])


def test_the_reader_of_environment_reads_finds_them():
    """The finder itself, on a module written here: reads found, a hand-on to a child not."""
    import tempfile

    source = ("import os\nfrom os import environ\na = os.environ.get('A')\nb = os.environ['B']\n"
              "c = 'C' in os.environ\nd = os.getenv('D')\ne = environ.get('E')\nf = dict(os.environ.items())\n"
              "from os import getenv\ng = getenv('G')\n"
              "import subprocess\nsubprocess.run(['x'], env={**os.environ, 'H': '1'})\n"
              "subprocess.run(['x'], env=os.environ)\nh = os.environ.copy()\n")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.py"
        path.write_text(source)
        assert sorted(_environment_reads(path)) == [(3, "A"), (4, "B"), (5, "C"), (6, "D"), (7, "E"), (8, "*"),
                                                       (10, "G")]


def test_no_environment_read_outside_the_settings_module():
    """Every environment variable the product reads is read in a settings module (the library's
    transcriber/settings.py, the application's transcriber/app/settings.py), where
    it is checked, documented and listed once; a read deep in a module is a setting a newcomer
    cannot find. The few that cannot go there are named above, each with its reason."""
    settings = (ROOT / "transcriber" / "settings.py", ROOT / "transcriber" / "app" / "settings.py")
    found = []
    for path in modules().values():
        if path in settings:
            continue
        where = str(path.relative_to(ROOT))
        for line, variable in _environment_reads(path):
            if (where, variable) not in ENVIRONMENT_READS_ALLOWED:
                found.append(f"{where}:{line} reads {variable if variable != '*' else 'the environment'}")
    assert not found, "read them through transcriber/settings.py:\n" + "\n".join(found)
    for (where, variable) in ENVIRONMENT_READS_ALLOWED:  # no stale entry
        assert (ROOT / where).is_file() and any(v == variable for _, v in _environment_reads(ROOT / where)), where
