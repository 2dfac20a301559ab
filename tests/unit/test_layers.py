"""The import graph of pgfleet, built from the source: no cycle between modules or between
packages, and the packages import one another only along the layers below. Imports inside
functions and under TYPE_CHECKING count: a cycle a type checker or a late import hides is
still two modules that cannot be read apart."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

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


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `module` imports anywhere in its source."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
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


def test_no_cycle_between_modules() -> None:
    graph = import_graph(SRC, "pgfleet")
    assert "pgfleet.config.models" in graph["pgfleet.config.loading"]  # the graph sees imports
    assert [sorted(cycle) for cycle in cycles(graph)] == []


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


def test_imports_for_type_checkers_count(tmp_path: Path) -> None:
    b_source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
    graph = _package(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\n", "b.py": b_source})
    assert cycles(graph) == [frozenset({"pkg.a", "pkg.b"})]


# The layers, as the packages (and the public modules at the top) each may import. A unit is
# a subpackage of pgfleet, or a module directly under it. From the bottom up:
LAYERS: dict[str, set[str]] = {
    "errors": set(),
    "core": {"errors"},
    "config": {"core", "errors"},
    "sql": {"core", "errors"},
    "tasks": {"core", "errors"},
    "context": {"core", "errors", "sql"},
    "middleware": {"context", "errors", "tasks"},
    # The child-process runtime imports no child process.
    "runtime": {"errors", "sql"},
    "metrics": {"runtime"},
    "status": {"core", "errors", "sql"},
    "client": {"core", "errors", "middleware", "sql", "tasks"},
    "dev": {"errors", "runtime"},
    # One package per child process.
    "worker": {"config", "context", "core", "errors", "metrics", "middleware", "runtime", "sql",
               "tasks"},
    "maintenance": {"config", "core", "errors", "metrics", "runtime", "sql"},
    "cron": {"client", "config", "core", "errors", "metrics", "runtime", "sql"},
    "exporter": {"config", "core", "errors", "metrics", "runtime", "sql"},
    "web": {"config", "core", "errors", "runtime", "sql", "status"},
    "supervisor": {"config", "cron", "errors", "exporter", "maintenance", "metrics",
                   "middleware", "runtime", "tasks", "web", "worker"},
    # The public API and the commands, at the top.
    "__init__": {"client", "context", "core", "errors", "runtime", "sql", "tasks"},
    "testing": {"client", "core", "errors", "sql", "tasks", "worker"},
    "otel": {"core", "middleware"},
    "pytest_plugin": {"sql"},
    "cli": {"__init__", "client", "config", "core", "dev", "errors", "metrics", "middleware",
            "runtime", "sql", "status", "supervisor", "tasks", "web", "worker"},
    "__main__": {"cli"},
}


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def package_graph(graph: Graph) -> Graph:
    units: Graph = {}
    for module, targets in graph.items():
        edges = units.setdefault(unit(module), set())
        edges.update(unit(t) for t in targets if unit(t) != unit(module))
    return units


def test_every_unit_has_its_layer() -> None:
    assert set(package_graph(import_graph(SRC, "pgfleet"))) == set(LAYERS)


def test_the_layers_have_no_cycle() -> None:
    assert cycles({name: set(edges) for name, edges in LAYERS.items()}) == []


def test_packages_import_only_along_the_layers() -> None:
    beyond = {name: sorted(edges - LAYERS[name])
              for name, edges in package_graph(import_graph(SRC, "pgfleet")).items()
              if edges - LAYERS.get(name, set())}
    assert beyond == {}


def test_the_named_rules_hold_in_the_layers() -> None:
    importers = {target: {name for name, edges in LAYERS.items() if target in edges}
                 for target in LAYERS}
    assert importers["cli"] == {"__main__"}
    assert importers["web"] == {"cli", "supervisor"}  # its entry point and its process
    assert "cli" not in LAYERS["web"] and "web" not in LAYERS["status"]
    children = {"worker", "maintenance", "cron", "exporter", "web"}
    assert not LAYERS["runtime"] & children
    assert LAYERS["sql"] <= {"core", "errors"}


def test_a_forbidden_edge_is_caught(tmp_path: Path) -> None:
    graph = _package(tmp_path, {"__init__.py": "", "sql/__init__.py": "",
                                "sql/store.py": "from pkg.worker import loop\n",
                                "worker/__init__.py": "", "worker/loop.py": ""})
    assert package_graph(graph)["sql"] == {"worker"}
