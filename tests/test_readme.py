"""What the README promises: the Quick start prints what it shows, and more.

The Quick start is run as a user would run it (a fresh process, JAX's defaults,
no stored device profile) and its printed plan compared line by line with the
output block under it, so the README cannot drift from what einslice prints.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import einslice

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    """The text of one ``## title`` section."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"README has no section {title!r}"
    return match.group(1)


def _blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S)


@pytest.mark.slow
def test_quick_start_prints_what_the_readme_shows(tmp_path):
    blocks = _blocks(_section("Quick start"))
    code = next(body for lang, body in blocks if lang == "python")
    shown = next(body for lang, body in blocks if lang == "")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env |= {
        "JAX_PLATFORMS": "cpu",
        "EINSLICE_CACHE_DIR": str(tmp_path),  # no calibrated profile, no wisdom
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]),
    }
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    printed = [line.rstrip() for line in run.stdout.strip("\n").splitlines()]
    expected = [line.rstrip() for line in shown.strip("\n").splitlines()]
    assert printed == expected


def test_set_up_keeps_exactly_the_two_commands():
    commands = [body.strip() for lang, body in _blocks(_section("Set up"))]
    assert len(commands) == 2
    main_job, tests = commands
    assert "pip install -e '.[bench]' && einslice bench " in main_job
    assert tests.endswith(
        """pip install -q -e '.[test]' && python -m pytest -q -m "not slow" """
        "-n 2 --dist loadfile"
    )
    # CI runs the README's command as it is written
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()


def test_version_comes_from_the_package_metadata():
    assert isinstance(einslice.__version__, str) and einslice.__version__
    assert "__version__" in einslice.__all__


def test_public_signature_shows_no_private_parameter():
    for name in einslice.__all__:
        obj = getattr(einslice, name)
        if callable(obj) and not inspect.isclass(obj):
            try:
                params = inspect.signature(obj).parameters
            except ValueError:  # a builtin without a signature
                continue
            assert not [p for p in params if p.startswith("_")], name


def test_jnp_einsums_private_keyword_is_still_accepted():
    import jax.numpy as jnp
    from jax import lax

    x = jnp.ones((2, 3))
    y = einslice.einsum("ij,kj->ik", x, x, _dot_general=lax.dot_general)
    assert y.tolist() == [[3.0, 3.0], [3.0, 3.0]]
