"""The choosing stage: which plan, which executor, and how it was chosen."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import einslice
from einslice._exec import _choose
from einslice._exec._executors import EXECUTORS, compile_seconds, transfer_seconds
from einslice._exec._run import Config, _run
from einslice._plan._executors import EXECUTOR_FACTS
from einslice._plan._planner import with_other_executors
from einslice._plan._profile import CPU_DEFAULT, TPU_DEFAULT
from strategies import request_of

CHAIN = "ij,jk,kl->il"


def test_a_tiny_plan_run_once_is_walked_on_the_host():
    tiny = einslice.plan("ij,jk->ik", (2, 2), (2, 2))
    assert _choose.pays_on_host(tiny)
    chosen = _choose.choose(tiny, once=True)
    assert (chosen.how, chosen.executor.name) == ("host", "host")
    assert chosen.plan is tiny and not chosen.executor.compiles
    # run many times (the default), the same plan compiles
    many = _choose.choose(tiny)
    assert (many.how, many.executor.name) == ("estimate", "einslice")


def test_a_large_plan_compiles_even_once():
    large = einslice.plan("ij,jk->ik", (2048, 2048), (2048, 2048))
    assert not _choose.pays_on_host(large)
    chosen = _choose.choose(large, once=True)
    assert (chosen.how, chosen.executor.name) == ("estimate", "einslice")
    assert chosen.executor.compiles


def test_the_host_is_chosen_only_for_plans_it_runs():
    # tiny, so the walk would pay, but numpy's integer arithmetic is not XLA's
    ints = einslice.plan("ij,jk->ik", (2, 2), (2, 2), dtype="int32")
    assert _choose.pays_on_host(ints) and not EXECUTORS["host"].runs(ints)
    assert _choose.choose(ints, once=True).how == "estimate"


def _tuning(best, ops) -> _choose.Tuning:
    run = lambda plan, xs: _run(plan, Config(), *xs)  # noqa: E731
    return _choose.Tuning(ops, request_of(best), run)


def test_the_record_says_measured_then_remembered():
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal((16, 16)) for _ in range(3)]
    best = einslice.plan(CHAIN, *ops, profile=CPU_DEFAULT)
    # a short call: "auto" trusts the estimate
    assert _choose.choose(best, "auto", _tuning(best, ops)).how == "estimate"
    measured = _choose.choose(best, "measure", _tuning(best, ops))
    assert measured.how == "measure" and measured.plan.choice is not None
    assert measured.executor is EXECUTORS[measured.plan.executor]
    labels = measured.plan.choice.labels
    assert any("via jnp.einsum" in label for label in labels)  # "xla" offered
    again = _choose.choose(best, "measure", _tuning(best, ops))
    assert again.how == "wisdom" and again.plan == measured.plan


def test_other_executors_are_offered_where_the_registry_says_they_run(monkeypatch):
    p = einslice.plan(CHAIN, (8, 8), (8, 8), (8, 8))
    offered = with_other_executors(request_of(p), count=1)
    assert [q.executor for q in offered] == ["einslice", "xla"]
    assert offered[1].path == p.path
    # an executor that does not run the plan is not offered it
    never = replace(EXECUTOR_FACTS["xla"], runs=lambda plan: False)
    monkeypatch.setitem(EXECUTOR_FACTS, "xla", never)
    offered = with_other_executors(request_of(p), 1)
    assert [q.executor for q in offered] == ["einslice"]


@pytest.mark.parametrize("n", [2, 17])
def test_plans_whose_walk_beats_their_compile_walk_their_first_calls(n):
    # (any number of steps: issue 36's 12-matrix chain had 11)
    shapes = [(2, 2)] * (n + 1)
    subscripts = ",".join(f"{chr(97 + k)}{chr(98 + k)}" for k in range(n + 1))
    p = einslice.plan(subscripts + f"->a{chr(98 + n)}", *shapes, optimize="greedy")
    assert len(p.steps) == n and _choose.pays_on_host(p)
    # (a quarter of the compile estimate for a short one: `RENTAL_SUM_...`)
    long = n >= _choose.SHORT_PLAN_STEPS
    share = 1.0 if long else _choose.RENTAL_SUM_COMPILE_SHARE
    assert _choose.host_first_seconds(p) == share * compile_seconds(p) > 0
    # (on an accelerator too, its whole compile estimate; other semirings:
    # their whole estimate, short or long, on a CPU or an accelerator)
    log = einslice.plan(subscripts + f"->a{chr(98 + n)}", *shapes, semiring="log")
    assert _choose.host_first_seconds(log) == compile_seconds(log)
    on_device = _choose.host_first_seconds(log, on_device=True)
    assert on_device == compile_seconds(log) > 0
    assert _choose.host_first_seconds(p, on_device=True) == compile_seconds(p)
    large = einslice.plan(CHAIN, *[(2048, 2048)] * 3)
    assert not _choose.pays_on_host(large) and _choose.host_first_seconds(large) == 0


def test_a_derivative_may_be_walked_where_its_value_would_compile():
    # Compiling the value-and-gradient program costs ~7x the forward's a step
    # (Profile.grad_compile_step_seconds), the backward walk ~3x the forward's.
    p = einslice.plan("ij,jk,ki->", *[(1024, 1024)] * 3, semiring="log")
    assert not _choose.pays_on_host(p) and _choose.host_grad_pays(p, 2**40)
    assert not _choose.host_grad_pays(p, 2**20)  # over the limit
    n = 2048
    large = einslice.plan("ij,jk,ki->", *[(n, n)] * 3, semiring="log")
    assert not _choose.host_grad_pays(large, 2**40)


@pytest.mark.parametrize("tables", [1, 100])
def test_a_trees_time_counts_its_run_as_measured_and_each_tables_compile(tables):
    base = _choose.tree_seconds(0.0, tables)
    assert base == pytest.approx(_choose.COMPILE_SECONDS_PER_TABLE * tables)
    assert _choose.tree_seconds(1.0, tables) - base == pytest.approx(
        _choose.MEASURED_PER_ESTIMATED
    )


def test_check_tune_names_the_modes():
    assert _choose.check_tune("auto") == "auto"
    with pytest.raises(einslice.EinsliceError, match="'estimate'"):
        _choose.check_tune("fast")


def test_the_host_walk_is_weighed_against_the_devices_compile(monkeypatch):
    # A many-step plan of tiny steps: its walk beats a CPU's compile, and a
    # TPU's (which compiles slower) all the more; with its operands on the
    # device the walk also pays their copies.
    n = 40
    shapes = [(2, 2)] * n
    subscripts = ",".join(f"{chr(0x100 + k)}{chr(0x101 + k)}" for k in range(n))
    p = einslice.plan(subscripts + "->", *shapes, optimize="greedy")
    monkeypatch.setattr(_choose, "current_profile", lambda: TPU_DEFAULT)
    walk = _choose.host_seconds(p)
    assert walk < compile_seconds(p, CPU_DEFAULT) < compile_seconds(p, TPU_DEFAULT)
    assert _choose.pays_on_host(p) and _choose.pays_on_host(p, on_device=True)
    assert _choose.host_first_seconds(p, on_device=True) == compile_seconds(p)
    # a walk between the two compiles is taken only where the device's is dear
    slow = compile_seconds(p, CPU_DEFAULT) * 1.5
    monkeypatch.setattr(_choose, "host_seconds", lambda plan: slow)
    assert _choose.pays_on_host(p)
    monkeypatch.setattr(_choose, "current_profile", lambda: CPU_DEFAULT)
    assert not _choose.pays_on_host(p)


def test_copies_to_and_from_the_device_count_against_the_walk(monkeypatch):
    big = einslice.plan("ij,jk->ik", (4096, 4096), (4096, 4096))
    slow_link = replace(TPU_DEFAULT, host_transfer_bandwidth=1e6)
    copies = transfer_seconds(big, slow_link)
    assert copies == pytest.approx(3 * 4096**2 * 4 / 1e6)
    assert transfer_seconds(big, CPU_DEFAULT) == 0.0
    monkeypatch.setattr(_choose, "current_profile", lambda: slow_link)
    monkeypatch.setattr(_choose, "host_seconds", lambda plan: 1e-3)
    assert _choose.pays_on_host(big) and not _choose.pays_on_host(big, on_device=True)
