"""Compile options of a plan called outside any trace, and their switch."""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import einslice
from einslice._exec import _choose, _executors, _run


def _cheap_chain(n_matrices: int = 40):
    """A chain of small matrices: many steps, few FLOPs (compiled for compile time)."""
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal((3, 3)) for _ in range(n_matrices)]
    args = []
    for i, x in enumerate(ops):
        args += [x, [i, i + 1]]
    return [*args, [0, n_matrices]], ops


@pytest.mark.cpu  # the CPU's compile options (XLA:CPU flags)
def test_a_cheap_plan_is_optimized_from_its_hundredth_call(monkeypatch):
    args, ops = _cheap_chain()
    p = einslice.plan(*args)
    assert _run.cheap_to_run(p)
    assert _run.compile_options(p) == _run.supported_options(_run.CHEAP_COMPILE)
    assert _run.compile_options(p, optimized=True) != _run.compile_options(p)
    monkeypatch.setattr(_run, "OPTIMIZE_AFTER_CALLS", 3)
    _run._top_level_run.cache_clear()
    runner = _run._top_level_run(p)
    runner.host_budget = 0.0  # (the host phase before it: tests below)
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


def _spy(monkeypatch, runner):
    """Record which road each call of ``runner`` takes: host, first or later."""
    used = []
    first, later, host = runner.first, runner.later, _run.EXECUTORS["host"]
    monkeypatch.setattr(runner, "first", lambda *a: used.append("first") or first(*a))
    monkeypatch.setattr(runner, "later", lambda *a: used.append("later") or later(*a))
    spied = replace(host, run=lambda *a: used.append("host") or host.run(*a))
    monkeypatch.setitem(_run.EXECUTORS, "host", spied)
    return used


def test_a_many_step_plan_runs_on_the_host_until_that_has_cost_a_compile(
    monkeypatch,
):
    args, ops = _cheap_chain()
    p = einslice.plan(*args)
    _run._top_level_run.cache_clear()
    runner = _run._top_level_run(p)
    assert runner.host_budget == pytest.approx(_executors.compile_seconds(p))
    used = _spy(monkeypatch, runner)
    expected = np.linalg.multi_dot(ops)
    got = p(*ops)
    assert used == ["host"] and isinstance(got, jax.Array)
    assert got.dtype == jnp.result_type(*ops) and not runner.steady
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10)
    runner.host_spent = runner.host_budget  # as if the host runs had cost that
    got = p(*ops)
    assert used == ["host", "first"]
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10)


@pytest.mark.parametrize(
    "call",
    [
        lambda p, ops: jax.jit(lambda *o: p(*o))(*ops),
        lambda p, ops: p(*ops, preferred_element_type=jnp.float64),
        lambda p, ops: p(*ops, precision=jax.lax.Precision.HIGHEST),
    ],
    ids=["traced", "preferred-type", "precision"],
)
def test_a_call_the_host_walk_cannot_match_is_compiled(monkeypatch, call):
    args, ops = _cheap_chain()
    p = einslice.plan(*args)
    _run._top_level_run.cache_clear()
    used = _spy(monkeypatch, _run._top_level_run(p))
    got = call(p, ops)
    assert "host" not in used
    np.testing.assert_allclose(np.asarray(got), np.linalg.multi_dot(ops), rtol=1e-10)


def test_an_integer_plan_is_compiled(monkeypatch):
    args, ops = _cheap_chain()
    ints = [np.ones((3, 3), np.int32) for _ in ops]
    args[: 2 * len(ops) : 2] = ints
    p = einslice.plan(*args)
    _run._top_level_run.cache_clear()
    used = _spy(monkeypatch, _run._top_level_run(p))
    got = p(*ints)
    assert "host" not in used and got.dtype == jnp.int32
    # (XLA's int32 wraps around, as jnp.einsum's does)
    assert int(got[0, 0]) == np.int64(3 ** (len(ops) - 1)).astype(np.int32)


def test_a_few_step_plan_is_compiled_at_once():
    p = einslice.plan("ij,jk,kl->il", (2, 2), (2, 2), (2, 2))
    assert _choose.host_first_seconds(p) == 0.0
    _run._top_level_run.cache_clear()
    assert _run._top_level_run(p).steady
