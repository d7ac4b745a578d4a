"""einslice.pgm reaches the core through one internal interface, and decides nothing.

Every ``pgm/*.py`` imports of einslice only the public package, the one
internal interface ``einslice._internal`` and its own modules (imports inside
functions included), and defines no cost-model figures of its own: the
host-vs-compile decisions and their figures are the choosing stage's
(``_exec/_choose.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import einslice.pgm
from einslice._exec import _choose
from einslice.pgm import _infer

PGM = Path(einslice.pgm.__file__).resolve().parent
MODULES = sorted(PGM.glob("*.py"))
ALLOWED = ("einslice._internal", "einslice.pgm")


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module ``node`` imports from, relative imports resolved."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*parts, *([node.module] if node.module else [])])


def forbidden_imports(path: Path, package: str = "einslice.pgm") -> list[str]:
    """The imports of einslice in ``path`` that are not pgm's to make."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            # `from einslice import x`: x is a public name or a module
            modules = [
                f"{base}.{alias.name}" if alias.name.startswith("_") else base
                for alias in node.names
            ]
        else:
            continue
        for module in modules:
            if module.split(".")[0] != "einslice" or module == "einslice":
                continue
            if module.startswith(ALLOWED):
                continue
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_pgm_imports_only_the_public_api_and_the_internal_interface(path):
    assert forbidden_imports(path) == []


def test_the_check_finds_private_imports_at_any_depth(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import einslice\n"
        "from einslice import plan, _internal\n"
        "from .. import _internal as i, profiles\n"
        "from ._model import FactorGraph\n"
        "def f():\n"
        "    from .._exec._host import run_on_host\n"
        "    from einslice import _api\n"
        "    import einslice._plan._types\n"
    )
    assert forbidden_imports(module) == [
        "m.py:6: from .._exec._host import run_on_host",
        "m.py:7: from einslice import _api",
        "m.py:8: import einslice._plan._types",
    ]


def _float_figures(path: Path) -> list[str]:
    """Module-level names bound to an expression with a float literal in it."""
    figures = []
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        if any(
            isinstance(c, ast.Constant) and isinstance(c.value, float)
            for c in ast.walk(node.value)
        ):
            figures.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return figures


def test_pgm_keeps_no_cost_figures_of_its_own(tmp_path):
    figures = tmp_path / "m.py"
    figures.write_text("TABLES = 12\nSECONDS = 0.04\nRATE: float = 1 / 3e11\n")
    assert _float_figures(figures) == [
        "m.py:2: SECONDS = 0.04",
        "m.py:3: RATE: float = 1 / 300000000000.0",
    ]
    assert [f for path in MODULES for f in _float_figures(path)] == []
    for name in ("MEASURED_PER_ESTIMATED", "COMPILE_SECONDS"):
        assert not hasattr(_infer, name), name
    # they are the choosing stage's, with the values pgm used
    assert _choose.MEASURED_PER_ESTIMATED == 30.0
    assert _choose.COMPILE_SECONDS_PER_TABLE == 0.04
