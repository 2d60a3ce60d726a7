"""The shape of the code, read from its source (nothing is imported): no import cycle among the
modules of transcriber/ and jobs/, and no function longer than MAX_FUNCTION_LINES.

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
PACKAGES = ("transcriber", "jobs")
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
    assert "transcriber.modes" in graph["transcriber"]  # from .modes import ... in __init__
    assert "transcriber" in graph["jobs.store"]  # from transcriber import ...
    assert "jobs.store" in graph["jobs.enqueue"]  # from .store import ...
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
