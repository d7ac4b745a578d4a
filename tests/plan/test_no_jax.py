"""The planner (src/einslice/_plan/) stays pure Python: it never imports JAX.

Two checks: a static ``ast`` scan of every module, and a fresh interpreter that
imports every planner module (bypassing ``einslice/__init__.py``, which does
import JAX) and then looks in ``sys.modules``. And the flow goes one way: no
planner module imports the executors (``_exec``) or the API, not even lazily.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PLAN = Path(__file__).resolve().parents[2] / "src" / "einslice" / "_plan"
MODULES = sorted(PLAN.glob("*.py"))
FORBIDDEN = ("jax", "jaxlib", "flax", "equinox")
# Siblings of _plan that are pure Python too; anything else (_api, _exec) imports
# JAX and may only be imported lazily, inside a function body.
PURE_SIBLINGS = ("_errors",)


def _imports(tree: ast.AST):
    """(module name, level, at import time?) for every import in a module."""
    deferred: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            deferred |= {id(n) for n in ast.walk(node) if n is not node}
    for node in ast.walk(tree):
        eager = id(node) not in deferred
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, 0, eager
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.module else []
            if not node.module:  # `from .. import x`: the names are modules
                names = [alias.name for alias in node.names]
            for name in names:
                yield name, node.level, eager


def test_there_are_planner_modules():
    assert len(MODULES) >= 3, MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_jax_import(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for name, level, eager in _imports(tree):
        top = name.split(".")[0]
        if level == 0:
            assert top not in FORBIDDEN, f"{path.name} imports {name!r}"
            if top == "einslice":
                parts = name.split(".")
                sub = parts[1] if len(parts) > 1 else ""
                ok = sub in ("_plan", *PURE_SIBLINGS)
                assert ok or not eager, f"{path.name} imports {name!r} at import time"
        elif level >= 2 and eager:
            assert top in PURE_SIBLINGS, (
                f"{path.name} imports {'.' * level}{name} at import time; only "
                f"{PURE_SIBLINGS} may be imported from outside _plan eagerly"
            )


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_the_planner_never_imports_the_executors(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for name, level, _ in _imports(tree):
        parts = name.split(".")
        if level == 0 and parts[0] == "einslice":
            parts = parts[1:]
        elif level < 2:
            continue  # the standard library, a dependency or a sibling in _plan
        outside = parts[0] if parts else ""
        assert outside in ("_plan", *PURE_SIBLINGS), (
            f"{path.name} imports einslice.{name.removeprefix('einslice.')}: the "
            "planner may use only _plan and pure siblings; executors register "
            "themselves with it instead (_types.register_runner)"
        )


def test_importing_the_planner_loads_no_jax():
    names = [p.stem for p in MODULES if p.stem != "__init__"]
    script = textwrap.dedent(
        f"""
        import importlib, sys, types
        package = types.ModuleType("einslice")
        package.__path__ = [{str(PLAN.parent)!r}]
        sys.modules["einslice"] = package  # skip einslice/__init__.py
        for name in {names!r}:
            importlib.import_module("einslice._plan." + name)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {FORBIDDEN!r})
        assert not loaded, loaded
        print("ok", len({names!r}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok"), result.stdout
