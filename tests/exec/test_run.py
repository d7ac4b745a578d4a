"""Compile options of a plan called outside any trace, and their switch."""

from __future__ import annotations

import threading
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import einslice
from einslice._exec import _choose, _executors, _host, _run, _threads


def _cheap_chain(n_matrices: int = 40):
    """A chain of small matrices: many steps, few FLOPs (compiled for compile time)."""
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal((3, 3)) for _ in range(n_matrices)]
    args = []
    for i, x in enumerate(ops):
        args += [x, [i, i + 1]]
    return [*args, [0, n_matrices]], ops


def _spy(monkeypatch, p):
    """A fresh runner for ``p``, and the roads its calls take: host, first, later.

    Only calls on this thread are recorded: the background thread's compile
    runs a program too.
    """
    used = []
    jitted, host = _run._jitted, _run.EXECUTORS["host"]
    optimized = _run.compile_options(p, optimized=True)
    wrappers = {}

    def record(name):
        if threading.current_thread() is threading.main_thread():
            used.append(name)

    def spying(options):
        name = "later" if options == optimized else "first"
        if name not in wrappers:
            program = jitted(options)
            wrappers[name] = lambda *a: record(name) or program(*a)
        return wrappers[name]

    monkeypatch.setattr(_run, "_jitted", spying)
    spied = replace(host, run=lambda *a: record("host") or host.run(*a))
    monkeypatch.setitem(_run.EXECUTORS, "host", spied)
    _run._top_level_run.cache_clear()
    return _run._top_level_run(p), used


@pytest.mark.cpu  # the CPU's compile options (XLA:CPU flags)
def test_a_cheap_plan_is_optimized_from_its_hundredth_call(monkeypatch):
    args, ops = _cheap_chain()
    p = einslice.plan(*args)
    assert _run.cheap_to_run(p)
    assert _run.compile_options(p) == _run.supported_options(_run.CHEAP_COMPILE)
    assert _run.compile_options(p, optimized=True) != _run.compile_options(p)
    monkeypatch.setattr(_run, "OPTIMIZE_AFTER_CALLS", 3)
    runner, used = _spy(monkeypatch, p)
    runner.stage = replace(runner.stage, host=False)  # (the host phase: below)
    expected = np.linalg.multi_dot(ops)
    results = [np.asarray(p(*ops)) for _ in range(3)]
    # the third call runs the compile-time program while the optimized one
    # compiles in the background; the calls after it run that one
    assert used == ["first", "first", "first"] and not runner.steady
    assert _run.settle(p, 60) and runner.steady
    results += [np.asarray(p(*ops)) for _ in range(2)]
    assert used == ["first", "first", "first", "later", "later"]
    for got in results:
        np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_a_plan_that_is_not_cheap_keeps_one_program():
    p = einslice.plan("ij,jk->ik", (2, 2), (2, 2))
    assert not _run.cheap_to_run(p)
    assert _run._top_level_run(p).stage.optimized


def test_a_many_step_plan_runs_on_the_host_until_that_has_cost_a_compile(
    monkeypatch,
):
    args, ops = _cheap_chain()
    p = einslice.plan(*args)
    runner, used = _spy(monkeypatch, p)
    assert runner.host_budget == pytest.approx(_choose.host_first_seconds(p))
    expected = np.linalg.multi_dot(ops)
    got = p(*ops)
    assert used == ["host"] and isinstance(got, jax.Array)
    assert got.dtype == jnp.result_type(*ops) and not runner.steady
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10)
    runner.host_spent = runner.host_budget  # as if the host runs had cost that
    got = p(*ops)  # on the host still: the program compiles in the background
    assert used == ["host", "host"]
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10)
    assert _run.settle(p, 60)
    got = p(*ops)  # (the optimized program: its compile was off the call path)
    assert used == ["host", "host", "later"]
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10)


def test_a_host_call_copies_its_result_and_compiles_nothing(monkeypatch, caplog):
    # A result of a new shape (issue 36: a 12-matrix chain's first host call
    # compiled ~110 ms converting the walk's result with jnp.asarray).
    args, ops = _cheap_chain()
    ops[-1] = ops[-1][:, :2]
    args[2 * (len(ops) - 1)] = ops[-1]
    p = einslice.plan(*args)
    assert _choose.host_first_seconds(p) > 0
    _, used = _spy(monkeypatch, p)
    with jax.log_compiles(True), caplog.at_level("WARNING"):
        got = p(*ops)
    assert used == ["host"] and isinstance(got, jax.Array)
    assert not [r for r in caplog.records if "ompil" in r.getMessage()]
    np.testing.assert_allclose(np.asarray(got), np.linalg.multi_dot(ops), rtol=1e-12)


def test_a_host_call_far_slower_than_estimated_starts_the_compile(monkeypatch):
    # (numpy's BLAS threads oversubscribed by other processes: a 12-matrix
    # chain's walk took ~90 ms a call where XLA's took 1-4 ms)
    args, ops = _cheap_chain()
    p = einslice.plan(*args)
    runner, used = _spy(monkeypatch, p)
    assert 0 < runner.host_slow == pytest.approx(_choose.host_slow_seconds(p))
    assert runner.host_spent == 0 < runner.host_budget
    monkeypatch.setattr(_host, "_BLAS", [None])  # (no one-thread control)
    runner.host_slow = 0.0  # as if the call took longer
    expected = np.linalg.multi_dot(ops)
    np.testing.assert_allclose(np.asarray(p(*ops)), expected, rtol=1e-10)
    assert runner.host_spent < runner.host_budget  # (not the rental's end)
    assert _run.settle(p, 60)  # compiled in the background
    np.testing.assert_allclose(np.asarray(p(*ops)), expected, rtol=1e-10)
    assert used == ["host", "later"]  # (the optimized program)


def test_a_slow_walk_on_blas_threads_takes_one_thread_not_the_compile(monkeypatch):
    # (a walk on BLAS's own threads far slower than the fastest says that
    # other processes oversubscribe them; where one thread can be set the
    # next walks take it, and only a slow walk there starts the compile)
    args, ops = _cheap_chain()
    p = einslice.plan(*args)
    runner, used = _spy(monkeypatch, p)
    _host.prepare_one_thread()
    if _host.one_thread_state() != "ready":
        pytest.skip("no BLAS whose threads threadpoolctl controls")
    expected = np.linalg.multi_dot(ops)
    monkeypatch.setattr(runner, "_blas_mode", lambda: False)  # BLAS's threads
    runner.host_slow = 0.0  # as if the walk took longer
    np.testing.assert_allclose(np.asarray(p(*ops)), expected, rtol=1e-10)
    assert not runner.busy.locked() and runner.stage.host
    monkeypatch.setattr(runner, "_blas_mode", lambda: True)  # one thread
    runner.host_slow = 0.0
    np.testing.assert_allclose(np.asarray(p(*ops)), expected, rtol=1e-10)
    assert _run.settle(p, 60) and runner.stage.keep is not None  # (compiled)
    assert used == ["host", "host"]


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
    _, used = _spy(monkeypatch, p)
    got = call(p, ops)
    assert "host" not in used
    np.testing.assert_allclose(np.asarray(got), np.linalg.multi_dot(ops), rtol=1e-10)


def test_an_integer_plan_is_compiled(monkeypatch):
    args, ops = _cheap_chain()
    ints = [np.ones((3, 3), np.int32) for _ in ops]
    args[: 2 * len(ops) : 2] = ints
    p = einslice.plan(*args)
    _, used = _spy(monkeypatch, p)
    got = p(*ints)
    assert "host" not in used and got.dtype == jnp.int32
    # (XLA's int32 wraps around, as jnp.einsum's does)
    assert int(got[0, 0]) == np.int64(3 ** (len(ops) - 1)).astype(np.int32)


def test_a_few_step_plan_walks_first_where_its_walk_beats_its_compile(monkeypatch):
    # (issue 36: a fresh 12-matrix chain compiled at once, 0.13x opt_einsum
    # at one call; no step count decides now, the estimates do)
    ops = [np.full((2, 2), 0.5), np.full((2, 2), 2.0), np.eye(2)]
    p = einslice.plan("ij,jk,kl->il", *ops)
    share = _choose.RENTAL_SUM_COMPILE_SHARE
    assert _choose.host_first_seconds(p) == pytest.approx(
        share * _executors.compile_seconds(p)
    )
    runner, used = _spy(monkeypatch, p)
    got = p(*ops)
    assert used == ["host"] and not runner.steady
    np.testing.assert_array_equal(np.asarray(got), ops[0] @ ops[1] @ ops[2])


def test_a_plan_whose_walk_does_not_beat_its_compile_is_compiled_at_once():
    p = einslice.plan("ij,jk->ik", (2048, 2048), (2048, 2048))
    assert _choose.host_first_seconds(p) == 0.0
    _run._top_level_run.cache_clear()
    assert _run._top_level_run(p).steady


def test_a_walk_runs_on_the_blas_threads_that_timed_faster(monkeypatch):
    args, _ = _cheap_chain(12)
    p = einslice.plan(*args)
    runner, _ = _spy(monkeypatch, p)
    monkeypatch.setattr(_host, "_BLAS", [object()])  # (a controller, not used)
    assert runner._blas_mode() is True  # (the first walk: one thread)
    runner.blas.record(True, 0.01)
    assert runner._blas_mode() is False  # (then each side in turn)
    monkeypatch.setattr(_host, "_BLAS", [None])  # no controller: never one thread
    assert [runner._blas_mode() for _ in range(20)] == [False] * 20
    assert runner.host_single is None


def _walks(choice, n, one, own):
    """``n`` walks: one thread takes ``one`` seconds, BLAS's own ``own``."""
    sides = []
    for _ in range(n):
        side = choice.next(True)
        choice.record(side, one if side else own)
        sides.append(side)
    return sides


def test_the_blas_choice_tries_each_side_then_takes_the_faster_and_rechecks():
    choice = _threads.BlasChoice()
    assert choice.next(True) is _threads.FIRST_ONE  # (the first walk, not counted)
    choice.record(True, 1.0, counted=False)
    # close times: each side in turn, TRY_WALKS walks each
    sides = _walks(choice, 2 * _threads.TRY_WALKS, 0.004, 0.005)
    assert sorted(sides) == [False] * _threads.TRY_WALKS + [True] * _threads.TRY_WALKS
    # then one thread, and the other side once the walks cost 1/RECHECK_SHARE of it
    taken = _walks(choice, 100, 0.004, 0.005)
    assert choice.chosen is True
    every = 0.005 / _threads.RECHECK_SHARE / 0.004  # walks between re-timings
    assert taken.count(False) == pytest.approx(100 / (every + 1), abs=1)
    # the load changes: one thread slows (another process beside the walk);
    # within a few re-timings the choice follows
    _walks(choice, 200, 0.020, 0.005)
    assert choice.chosen is False
    # a spike does not switch back: the fastest of the recent walks counts
    choice.record(False, 0.5)
    choice.next(True)
    assert choice.chosen is False


def test_the_blas_choice_retimes_a_far_slower_side_seldom():
    # (BLAS's threads oversubscribed: lattice-8x8 walked in 92-127 ms on
    # them against 8-17 on one thread, load 3)
    choice = _threads.BlasChoice()
    choice.next(True)
    choice.record(True, 0.5, counted=False)
    sides = _walks(choice, 300, 0.008, 0.120)
    assert sides[:2] == [True, False] and choice.chosen is True  # (clear at once)
    cost = sum(0.120 for side in sides[2:] if not side)
    assert cost <= 2 * _threads.RECHECK_SHARE * 0.008 * len(sides)


def test_the_blas_choice_stays_on_blas_threads_where_one_cannot_be_set():
    choice = _threads.BlasChoice()
    for _ in range(10):
        assert choice.next(False) is False
        choice.record(False, 0.01)
    assert choice.chosen is None


def test_a_walk_on_one_blas_thread_gives_the_same_result():
    args, ops = _cheap_chain(12)
    p = einslice.plan(*args)
    _host.prepare_one_thread()
    with _host.one_blas_thread():
        one = _host.run_on_host(p, ops)
    np.testing.assert_array_equal(one, _host.run_on_host(p, ops))


def test_the_slow_walk_bound_follows_the_fastest_walk():
    p = einslice.plan("ij,jk,kl->il", (200, 200), (200, 200), (200, 200))
    estimate = _choose.host_slow_seconds(p)
    assert _choose.host_slow_seconds(p, fastest=1.0) == estimate  # (the lower)
    assert _choose.host_slow_seconds(p, fastest=1e-3) == pytest.approx(
        _choose.HOST_SLOW_FACTOR * 1e-3 + _choose.HOST_SLOW_SECONDS
    )


def test_an_unsliced_walk_returns_a_copy_not_an_operand():
    x = np.arange(6.0).reshape(2, 3)
    got = _host.run_on_host(einslice.plan("ij->ij", x), [x])
    np.testing.assert_array_equal(got, x)
    assert not np.shares_memory(got, x) and got.flags.c_contiguous
