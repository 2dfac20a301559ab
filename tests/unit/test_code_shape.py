"""The size rules of docs/architecture.md: no class over 300 lines and no module over 600
in src/pgfleet, so that no room grows back into one that holds every concern."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "pgfleet"
MAX_CLASS_LINES = 300
MAX_MODULE_LINES = 600


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_the_rules_see_the_code() -> None:
    assert len(_modules()) > 40
    assert (SRC / "worker" / "loop.py") in _modules()


def test_no_module_over_the_limit() -> None:
    long = {str(p.relative_to(SRC)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_class_over_the_limit() -> None:
    large = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    large[f"{path.relative_to(SRC)}:{node.name}"] = lines
    assert large == {}
