"""Compile options of a plan called outside any trace, and their switch."""

from __future__ import annotations

import numpy as np

import einslice
from einslice._exec import _run


def _cheap_chain(n_matrices: int = 40):
    """A chain of small matrices: many steps, few FLOPs (compiled for compile time)."""
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal((3, 3)) for _ in range(n_matrices)]
    args = []
    for i, x in enumerate(ops):
        args += [x, [i, i + 1]]
    return [*args, [0, n_matrices]], ops


def test_a_cheap_plan_is_optimized_from_its_hundredth_call(monkeypatch):
    args, ops = _cheap_chain()
    p = einslice.plan(*args)
    assert _run.cheap_to_run(p)
    assert _run.compile_options(p) == _run.supported_options(_run.CHEAP_COMPILE)
    assert _run.compile_options(p, optimized=True) != _run.compile_options(p)
    monkeypatch.setattr(_run, "OPTIMIZE_AFTER_CALLS", 3)
    _run._top_level_run.cache_clear()
    runner = _run._top_level_run(p)
    used = []
    first, later = runner.first, runner.later
    monkeypatch.setattr(runner, "first", lambda *a: used.append("first") or first(*a))
    monkeypatch.setattr(runner, "later", lambda *a: used.append("later") or later(*a))
    expected = np.linalg.multi_dot(ops)
    results = [np.asarray(p(*ops)) for _ in range(4)]
    assert used == ["first", "first", "later", "later"]
    for got in results:
        np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_a_plan_that_is_not_cheap_keeps_one_program():
    p = einslice.plan("ij,jk->ik", (2, 2), (2, 2))
    assert not _run.cheap_to_run(p)
    runner = _run._top_level_run(p)
    assert runner.first is runner.later
