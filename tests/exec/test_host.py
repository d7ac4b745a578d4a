"""The numpy host walk of a plan (``_exec/_host.py``) against float64 references.

Same randomized formulas as the JAX executor's tests (diagonals, private and
broadcast indices, ellipses, scalars), at memory limits that force slicing, in
all three semirings; plus when the host is chosen, and its refusals.
"""

from __future__ import annotations

import dataclasses
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import einslice
from einslice._errors import EinsliceError
from einslice._exec import _host
from einslice._exec._choose import pays_on_host
from einslice._exec._host import host_seconds, run_on_host
from einslice._plan._walk import walk_peak_bytes
from strategies import (
    equations,
    feasible_plan,
    limit_fractions,
    limit_from_fraction,
    materialized_reduce,
    random_operands,
    seeds,
    sliceable_equations,
    tight_limit_fractions,
)

# ../shared beside the repository (a git worktree one level deeper: ../../shared)
_ROOT = Path(__file__).resolve().parents[2]
SHARED = (
    next(
        (
            p
            for p in (_ROOT.parent / "shared", _ROOT.parents[1] / "shared")
            if p.is_dir()
        ),
        _ROOT.parent / "shared",
    )
    / "data"
    / "uai"
)


def _plan(eq, fraction, semiring):
    limit = limit_from_fraction(
        eq.subscripts, eq.shapes, fraction, dtype=np.float64, semiring=semiring
    )
    plan, _ = feasible_plan(
        eq.subscripts, eq.shapes, limit, dtype=np.float64, semiring=semiring
    )
    return plan


def _check(eq, ops, plan, semiring):
    out = run_on_host(plan, ops)
    ref = materialized_reduce(eq, ops, semiring)
    assert out.dtype == np.float64 and out.shape == ref.shape
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(ref))
    finite = np.isfinite(ref)
    scale = 1.0 if semiring != "sum" else np.abs(ref[finite]).max(initial=1.0)
    np.testing.assert_allclose(out[finite], ref[finite], rtol=1e-9, atol=1e-9 * scale)


@settings(max_examples=60)
@given(
    equations(max_operands=5, max_elements=512, zero_size=True),
    seeds,
    limit_fractions,
)
def test_every_semiring_matches_the_reference(eq, seed, fraction):
    for semiring in ("sum", "log", "max"):
        ops = random_operands(eq, seed)
        if semiring != "sum":
            ops = [10 * x for x in ops]
            if ops and ops[0].size:
                ops[0].flat[0] = -np.inf  # an impossible entry
        _check(eq, ops, _plan(eq, fraction, semiring), semiring)


@settings(max_examples=20)
@given(
    sliceable_equations(max_operands=5, max_elements=2**13),
    seeds,
    tight_limit_fractions,
)
def test_sliced_plans_loop_over_their_chunks(eq, seed, fraction):
    for semiring in ("sum", "log", "max"):
        plan = _plan(eq, fraction, semiring)
        ops = random_operands(eq, seed)
        _check(eq, ops, plan, semiring)


def test_a_sliced_plan_with_uneven_chunks_covers_every_entry():
    eq_text, shapes = "ij,jk,kl->il", [(30, 37), (37, 41), (41, 29)]
    plan = einslice.plan(eq_text, *shapes, memory_limit=2000, dtype=np.float64)
    sizes = dict(zip(plan.equation.names, plan.equation.sizes, strict=True))
    assert any(sizes[name] % chunk for name, chunk in plan.sliced.items()), plan
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal(s) for s in shapes]
    np.testing.assert_allclose(run_on_host(plan, ops), np.einsum(eq_text, *ops))


def test_the_max_product_works_a_block_at_a_time(monkeypatch):
    monkeypatch.setattr(_host, "MAX_BLOCK_ENTRIES", 8)  # many blocks of k
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 13)), rng.standard_normal((13, 5))
    plan = einslice.plan(
        "ik,kj->ij", a.shape, b.shape, semiring="max", dtype=np.float64
    )
    expected = (a[:, :, None] + b[None, :, :]).max(axis=1)
    np.testing.assert_array_equal(run_on_host(plan, [a, b]), expected)


def test_results_come_in_the_plan_dtype():
    plan = einslice.plan("ij,jk->ik", (2, 3), (3, 2), dtype=np.float32)
    out = run_on_host(plan, [np.ones((2, 3)), np.ones((3, 2))])
    assert out.dtype == np.float32 and out.tolist() == [[3, 3], [3, 3]]


def test_tiny_plans_pay_on_the_host_and_large_ones_do_not():
    tiny = einslice.plan("ij,jk->ik", (4, 4), (4, 4))
    large = einslice.plan("ij,jk->ik", (4096, 4096), (4096, 4096))
    assert pays_on_host(tiny) and not pays_on_host(large)
    # the estimate grows with the work: a matmul of 2 n^3 FLOPs
    assert host_seconds(large) > 2 * 4096**3 * _host.FLOP_SECONDS


def test_wrong_shapes_and_multi_device_plans_are_refused():
    plan = einslice.plan("ij,jk->ik", (2, 3), (3, 2))
    with pytest.raises(EinsliceError, match=r"made for shapes \[\(2, 3\), \(3, 2\)\]"):
        run_on_host(plan, [np.ones((2, 3)), np.ones((3, 3))])
    # one device here: the plan as the planner writes it for two
    spread = dataclasses.replace(plan, devices=2)
    assert not pays_on_host(spread)
    with pytest.raises(EinsliceError, match="one-device plans"):
        run_on_host(spread, [np.ones((2, 3)), np.ones((3, 2))])


@settings(max_examples=30)
@given(equations(max_operands=5, max_elements=512), seeds, limit_fractions)
def test_both_log_walks_match_the_reference(eq, seed, fraction):
    """The scaled linear walk and the per-step rule it falls back to."""
    ops = [30 * x for x in random_operands(eq, seed)]
    plan = _plan(eq, fraction, "log")
    _check(eq, ops, plan, "log")
    with pytest.MonkeyPatch.context() as patch:  # every product "underflows"
        patch.setattr(_host, "SCALED_FLOOR", 2.0)
        _check(eq, ops, plan, "log")


def test_the_scaled_log_walk_gives_way_where_a_product_would_underflow():
    # each side spans e^400 (fine alone); their product's terms e^-800 would
    # flush to zero in float64: the per-step rule computes it instead
    a, b = np.array([0.0, -400.0]), np.array([-400.0, 0.0])
    plan = einslice.plan("i,i->", (2,), (2,), semiring="log", dtype=np.float64)
    assert _host._scaled_log_walk(plan, [a, b]) is None
    np.testing.assert_allclose(run_on_host(plan, [a, b]), -400 + np.log(2), rtol=1e-12)
    wide = np.array([0.0, -800.0])  # one table spanning e^800
    assert _host._scaled_log_walk(plan, [wide, np.zeros(2)]) is None
    np.testing.assert_allclose(run_on_host(plan, [wide, np.zeros(2)]), 0.0, atol=1e-12)


def test_the_scaled_log_walk_keeps_impossible_and_undefined_entries():
    plan = einslice.plan("ij,jk->ik", (2, 2), (2, 2), semiring="log", dtype=np.float64)
    impossible = np.full((2, 2), -np.inf)
    out = run_on_host(plan, [impossible, np.zeros((2, 2))])
    assert np.isneginf(out).all()
    one_row = np.array([[0.0, 0.0], [-np.inf, -np.inf]])
    out = run_on_host(plan, [one_row, np.zeros((2, 2))])
    np.testing.assert_allclose(out[0], np.log(2), rtol=1e-12)
    assert np.isneginf(out[1]).all()
    undefined = np.array([[np.nan, 0.0], [0.0, 0.0]])
    assert _host._scaled_log_walk(plan, [undefined, np.zeros((2, 2))]) is None
    assert np.isnan(run_on_host(plan, [undefined, np.zeros((2, 2))])[0]).all()


@pytest.mark.parametrize("spread", [1.0, 15.0, 60.0])
def test_float32_scaled_walks_turn_float64_before_underflow(monkeypatch, spread):
    # entries spanning up to e^(2*spread) per table: at 1 the walk stays
    # float32, at 15 its last product turns float64, at 60 it starts float64
    monkeypatch.setattr(_host, "SINGLE_MIN_FLOPS", 0)
    rng = np.random.default_rng(7)
    shapes = [(6, 5), (5, 4), (4, 6), (6, 3)]
    ops = [(spread * rng.uniform(-1, 1, s)).astype(np.float32) for s in shapes]
    plan = einslice.plan("ab,bc,cd,de->", *shapes, semiring="log")
    out = run_on_host(plan, ops)
    assert out.dtype == np.float32
    big = [x.astype(np.float64) for x in ops]
    full = big[0][:, :, None, None, None] + big[1][None, :, :, None, None]
    full = full + big[2][None, None, :, :, None] + big[3][None, None, None, :, :]
    top = full.max()
    ref = top + np.log(np.exp(full - top).sum())
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-6)


@settings(max_examples=40)
@given(equations(max_operands=5, max_elements=512, zero_size=True), seeds)
def test_a_host_walk_of_the_greedy_path_matches_the_reference(eq, seed):
    # what einslice.pgm walks unplanned: plain steps (no layout), any output
    from einslice._plan._equation import build_equation, parse_subscripts
    from einslice._plan._planner import prepare_terms
    from einslice._plan._search import greedy_path
    from einslice._plan._walk import host_walk

    equation = build_equation(
        parse_subscripts(eq.subscripts, len(eq.shapes)), eq.shapes
    )
    terms = prepare_terms(equation)
    path = greedy_path(terms, equation.output, equation.sizes) if len(terms) > 1 else ()
    for semiring in ("sum", "log", "max"):
        ops = random_operands(eq, seed)
        if semiring != "sum":
            ops = [10 * x for x in ops]
        walk = host_walk(equation, path, semiring, "float64")
        _check(eq, ops, walk, semiring)


# -- memory: the walk holds the nodes alive at each step, within its bound -------

# What tracemalloc counts beside the arrays: Python's lists, tuples and array
# headers, which the bound (arrays only) leaves out.
PYTHON_OBJECTS = 64 * 1024


def _traced_peak(walk, operands) -> int:
    """tracemalloc's peak over one `run_on_host` (the operands made before)."""
    tracemalloc.start()
    try:
        run_on_host(walk, operands)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@settings(max_examples=30)
@given(
    sliceable_equations(max_operands=5, max_elements=2**13),
    seeds,
    st.sampled_from((None, 0.5, 0.1)),
)
def test_the_walk_holds_at_most_its_bound(eq, seed, fraction):
    ops = random_operands(eq, seed)
    for semiring in ("sum", "log", "max"):
        plan = _plan(eq, fraction, semiring)
        assert _traced_peak(plan, ops) <= walk_peak_bytes(plan) + PYTHON_OBJECTS
    with pytest.MonkeyPatch.context() as patch:  # the per-step "log" rule
        patch.setattr(_host, "SCALED_FLOOR", 2.0)
        assert _traced_peak(plan, ops) <= walk_peak_bytes(plan) + PYTHON_OBJECTS


def test_a_chain_holds_a_few_nodes_not_all_of_them():
    # 24 matrix products of 200 x 200: the walk used to keep every result
    # (24 x 320 kB); it holds the two sides and the result of one step
    n, k = 24, 200
    rng = np.random.default_rng(3)
    args, ops = [], []
    for i in range(n):
        ops.append(rng.standard_normal((k, k)) / np.sqrt(k))
        args += [(k, k), [i, i + 1]]
    # left to right: each result (last in opt_einsum's list) times the next
    path = [(0, 1)] + [(0, n - 2 - j) for j in range(n - 2)]
    plan = einslice.plan(*args, [0, n], dtype=np.float64, optimize=path)
    steps = plan.steps
    assert all(n + k - 1 in (steps[k].left, steps[k].right) for k in range(1, n - 1))
    all_nodes = 8 * k * k * (2 * n - 1)
    assert walk_peak_bytes(plan) < all_nodes / 2
    assert _traced_peak(plan, ops) <= walk_peak_bytes(plan) + PYTHON_OBJECTS
    expected = np.linalg.multi_dot(ops)
    np.testing.assert_allclose(run_on_host(plan, ops), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"no shared UAI instances at {SHARED}")
@pytest.mark.parametrize(
    "name", ["Grids_12", pytest.param("Grids_15", marks=pytest.mark.slow)]
)
def test_the_shared_grids_walk_within_the_bound(name):
    # log Z at 256 MB, as `einslice uai` plans it: Grids_12's greedy tree is
    # walked unplanned; Grids_15's plan (743 steps, unsliced; its tree search
    # takes 10-40 s) is walked on the host: its nodes once summed to 2 GB
    from einslice.pgm import read_evidence, read_uai
    from einslice.pgm._infer import _prepare

    model = read_uai(SHARED / f"{name}.uai")
    evidence = read_evidence(SHARED / f"{name}.uai.evid")
    prepared = _prepare(
        model, evidence, "log", "256MB", "auto", np.float32, value_only=True
    )
    walk = prepared.walk if prepared.walk is not None else prepared.plan
    assert walk is not None and (prepared.walk is not None or prepared.on_host)
    bound = walk.peak_bytes if prepared.walk is not None else walk_peak_bytes(walk)
    assert bound <= 256e6
    tables = prepared.network.tables
    assert _traced_peak(walk, tables) <= bound + PYTHON_OBJECTS
