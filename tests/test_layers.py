"""The layers import downwards only: planning and execution never import ``_api``.

``Plan.__call__`` runs a plan through ``_exec/_run.py``; an import of the
public entry points from below them would be a cycle (issue 11).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "einslice"
LOWER = sorted([*(SRC / "_plan").glob("*.py"), *(SRC / "_exec").glob("*.py")])


def _imported_modules(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            yield node.module or "", [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []


@pytest.mark.parametrize("module", LOWER, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_planning_and_execution_never_import_the_public_api(module):
    tree = ast.parse(module.read_text())
    for name, names in _imported_modules(tree):
        parts = name.split(".")
        assert "_api" not in parts and "_api" not in names, (
            f"{module.name} imports {name or '.'} {names}: the public entry points "
            "(_api) sit above planning and execution"
        )


def test_the_check_sees_a_deferred_import():
    tree = ast.parse("def f():\n    from .._api import execute_plan\n")
    assert any("_api" in name for name, _ in _imported_modules(tree))
