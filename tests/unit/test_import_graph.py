"""No import cycles: the graph of pgfleet's modules, built from the source (imports inside
functions count, because a cycle hidden in a function is still a cycle), has none."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# Cycles that exist outside config/ today, each a set of modules importing each other.
# Issue 11 removes them (cli/ and worker/ as packages); this list may only shrink.
KNOWN_CYCLES: list[frozenset[str]] = []

Graph = dict[str, set[str]]


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` under `root`, by dotted name (a package by its own name)."""
    names = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, node.module] if node.module else base)


def _under_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `module` imports anywhere in its source."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if _under_type_checking(node, parents):
            continue  # never runs, so it cannot take part in a cycle
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, module, path.name == "__init__.py")
            # `from pkg import sub` imports the submodule; `from pkg import name`, pkg.
            targets = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                for alias in node.names
            ]
        else:
            continue
        found.update(target for target in targets if target in known and target != module)
    return found


def import_graph(root: Path, package: str) -> Graph:
    modules = module_names(root, package)
    return {name: imports_of(name, path, set(modules)) for name, path in modules.items()}


def cycles(graph: Graph) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_config_package_takes_part_in_no_cycle() -> None:
    graph = import_graph(SRC, "pgfleet")
    assert "pgfleet.config.models" in graph["pgfleet.config.loading"]
    touching = [sorted(c) for c in cycles(graph) if any(m.startswith("pgfleet.config") for m in c)]
    assert touching == []


def test_no_cycle_in_pgfleet_beyond_the_known_ones() -> None:
    new = [
        sorted(cycle)
        for cycle in cycles(import_graph(SRC, "pgfleet"))
        if not any(cycle <= known for known in KNOWN_CYCLES)
    ]
    assert new == []


def _package(tmp_path: Path, files: dict[str, str]) -> Graph:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return import_graph(tmp_path, "pkg")


@pytest.mark.parametrize(
    "b_source",
    [
        "def late():\n    from pkg import a\n",
        "from . import a\n",
        "import pkg.a\n",
        "from pkg.a import name\n",
        "class C:\n    def m(self):\n        from .a import name\n",
    ],
)
def test_a_cycle_is_found_however_the_import_is_written(tmp_path: Path, b_source: str) -> None:
    graph = _package(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\n", "b.py": b_source})
    assert cycles(graph) == [frozenset({"pkg.a", "pkg.b"})]


def test_imports_only_for_type_checkers_are_no_cycle(tmp_path: Path) -> None:
    b_source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
    graph = _package(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\n", "b.py": b_source})
    assert cycles(graph) == []
