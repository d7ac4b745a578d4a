"""The host's value and gradient (``_exec/_host_grad.py``) against float64 references.

Random scalar contractions shaped like graphical models (small tables over a
few shared variables, repeated indices, impossible entries), planned whole,
sliced and as a `HostWalk`: the "log" gradient against the materialized joint
(each table's marginal) and ``jax.grad`` of the compiled plan; the "max"
gradient marks a state that attains the materialized maximum.
"""

from __future__ import annotations

import math
import tracemalloc

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import einslice
from einslice._errors import EinsliceError, MemoryLimitError
from einslice._exec import _host_grad
from einslice._exec._choose import host_grad_pays
from einslice._exec._host_grad import (
    BUFFER_BYTES,
    host_grad_peak_bytes,
    host_grad_seconds,
    host_value_and_grad,
)
from einslice._plan._equation import build_equation
from einslice._plan._planner import prepare_terms
from einslice._plan._search import greedy_path
from einslice._plan._types import HostWalk, Plan
from einslice._plan._walk import host_walk


@st.composite
def networks(draw):
    """(terms, cardinalities, log-tables): a scalar contraction of a few tables."""
    n_vars = draw(st.integers(1, 6))
    cards = draw(st.lists(st.integers(1, 3), min_size=n_vars, max_size=n_vars))
    n_tables = draw(st.integers(1, 5))
    terms = []
    for _ in range(n_tables):
        term = draw(st.lists(st.integers(0, n_vars - 1), min_size=0, max_size=3))
        terms.append(tuple(term))  # repeats allowed: a diagonal
    used = sorted({v for term in terms for v in term})  # each variable in a table
    terms = [tuple(used.index(v) for v in term) for term in terms]
    cards = [cards[v] for v in used]
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    tables = []
    for term in terms:
        table = 3 * rng.standard_normal([cards[v] for v in term])
        if table.size > 1 and draw(st.booleans()):
            table.flat[int(rng.integers(table.size))] = -np.inf  # impossible
        tables.append(table)
    return terms, cards, tables


def _labels(n: int) -> str:
    return "abcdefghij"[:n]


def _joint(terms, cards, tables) -> np.ndarray:
    """Every state's log-score: the tables added over all variables (float64)."""
    joint = np.zeros(cards)
    letters = _labels(len(cards))
    for term, table in zip(terms, tables, strict=True):
        unique = list(dict.fromkeys(term))
        spec = "".join(letters[v] for v in term)
        diagonal = np.einsum(f"{spec}->{''.join(letters[v] for v in unique)}", table)
        shape = [cards[v] if v in unique else 1 for v in range(len(cards))]
        order = sorted(range(len(unique)), key=lambda a: unique[a])
        joint = joint + np.transpose(diagonal, order).reshape(shape)
    return joint


def _reference_log(terms, cards, tables):
    """log Z and each table's gradient: its entries' probability (0 off-diagonal)."""
    joint = _joint(terms, cards, tables)
    top = joint.max()
    if top == -np.inf:
        return -math.inf, None
    p = np.exp(joint - top)
    log_z = math.log(p.sum()) + top
    p /= p.sum()
    letters = _labels(len(cards))
    grads = []
    for term, table in zip(terms, tables, strict=True):
        unique = "".join(letters[v] for v in dict.fromkeys(term))
        marginal = np.einsum(f"{letters}->{unique}", p)
        grad = np.zeros(table.shape)
        spec = "".join(letters[v] for v in term)
        if spec:
            np.einsum(f"{spec}->{unique}", grad)[...] = marginal  # a writable view
        else:
            grad[...] = marginal
        grads.append(grad)
    return log_z, grads


def _plans(terms, cards, tables, semiring):
    """The contraction planned whole, at a tight limit (sliced), and walked."""
    args = []
    for term, table in zip(terms, tables, strict=True):
        args += [table.shape, list(term)]
    whole = einslice.plan(*args, [], semiring=semiring, dtype=np.float64)
    plans: list[Plan | HostWalk] = [whole]
    try:  # sliced, where some index can be
        tight = einslice.plan(
            *args,
            [],
            semiring=semiring,
            dtype=np.float64,
            memory_limit=whole.peak_bytes // 2,
        )
        plans.append(tight)
    except MemoryLimitError:
        pass
    equation = build_equation(
        (tuple(tuple(t) for t in terms), ()), tuple(t.shape for t in tables)
    )
    path = greedy_path(prepare_terms(equation), equation.output, equation.sizes)
    plans.append(host_walk(equation, tuple(map(tuple, path)), semiring, "float64"))
    return plans


# What tracemalloc counts beside the arrays: Python's lists, tuples, dicts and
# array headers, which the bound (arrays only) leaves out.
PYTHON_OBJECTS = 64 * 1024


def _within_the_bound(plan, operands):
    """`host_value_and_grad`, checked to allocate at most its memory bound."""
    tracemalloc.start()
    try:
        found = host_value_and_grad(plan, operands)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= host_grad_peak_bytes(plan) + PYTHON_OBJECTS, plan
    return found


@settings(max_examples=60, deadline=None)
@given(networks())
def test_log_gradient_is_each_tables_marginal(network):
    terms, cards, tables = network
    want, grads = _reference_log(terms, cards, tables)
    for plan in _plans(terms, cards, tables, "log"):
        found = _within_the_bound(plan, tables)
        assert found is not None  # these tables' range cannot underflow
        value, got = found
        if want == -math.inf:
            assert value == -math.inf
            assert all(np.isnan(g).all() for g in got)
            continue
        assert value == pytest.approx(want, rel=1e-12, abs=1e-12)
        assert grads is not None
        for g, ref, table in zip(got, grads, tables, strict=True):
            assert g.shape == table.shape and np.isfinite(g).all()
            np.testing.assert_allclose(g, ref, rtol=1e-9, atol=1e-12)
            assert np.all(g[np.isneginf(table)] == 0)  # impossible: probability 0


@settings(max_examples=60, deadline=None)
@given(networks())
def test_max_gradient_marks_a_state_attaining_the_maximum(network):
    terms, cards, tables = network
    joint = _joint(terms, cards, tables)
    want = joint.max()
    for plan in _plans(terms, cards, tables, "max"):
        value, got = _within_the_bound(plan, tables)  # type: ignore[misc]
        assert value == pytest.approx(want, rel=1e-12, abs=1e-12)
        if want == -np.inf:
            assert all(not g.any() for g in got)
            continue
        state = {}
        for term, g in zip(terms, got, strict=True):
            assert g.sum() == 1 and set(np.unique(g)) <= {0.0, 1.0}
            entry = np.unravel_index(int(np.argmax(g)), g.shape) if g.ndim else ()
            for v, s in zip(term, entry, strict=True):
                assert state.setdefault(v, int(s)) == int(s)  # one state for all
        full = tuple(state.get(v, 0) for v in range(len(cards)))
        assert joint[full] == pytest.approx(want, rel=1e-12, abs=1e-12)


SLICEABLE = (
    "ij,jk,ki,i,jl,iik->",
    [(24, 24), (24, 24), (24, 24), (24,), (24, 5), (24, 24, 24)],
)


@pytest.mark.parametrize("semiring", ["log", "max"])
def test_a_small_plan_agrees_with_jax_grad_of_the_compiled_plan(semiring):
    rng = np.random.default_rng(4)
    ops = [rng.standard_normal((3, 4)), rng.standard_normal((4, 2, 3))]
    ops[0][1, 2] = -np.inf
    shapes = [x.shape for x in ops]
    plan = einslice.plan("ij,jki->", *shapes, semiring=semiring, dtype=np.float64)
    value, grads = jax.value_and_grad(plan, argnums=(0, 1))(*ops)
    found = host_value_and_grad(plan, ops)
    assert found is not None
    assert found[0] == pytest.approx(float(value), rel=1e-12)
    for g, ref in zip(found[1], grads, strict=True):
        np.testing.assert_allclose(g, np.asarray(ref), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("semiring", ["log", "max"])
def test_sliced_plans_agree_with_jax_grad_of_the_compiled_plan(semiring):
    spec, shapes = SLICEABLE
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal(s) for s in shapes]
    ops[1][0, 0] = -np.inf
    whole = einslice.plan(spec, *shapes, semiring=semiring, dtype=np.float64)
    sliced = einslice.plan(
        spec,
        *shapes,
        semiring=semiring,
        dtype=np.float64,
        memory_limit=whole.peak_bytes // 2,
    )
    assert sliced.n_chunks > 1
    argnums = tuple(range(len(ops)))
    value, grads = jax.value_and_grad(whole, argnums=argnums)(*ops)
    for plan in (whole, sliced):
        found = host_value_and_grad(plan, ops)
        assert found is not None
        assert found[0] == pytest.approx(float(value), rel=1e-12)
        for g, ref in zip(found[1], grads, strict=True):
            np.testing.assert_allclose(g, np.asarray(ref), rtol=1e-9, atol=1e-12)


def test_zero_partition_gives_minus_infinity_and_a_zero_gradient():
    # as jax.grad of the compiled plan: log Z is -inf around these operands
    plan = einslice.plan("i,i->", (2,), (2,), semiring="log", dtype=np.float64)
    ops = [np.array([0.0, -np.inf]), np.array([-np.inf, 0.0])]
    value, grads = host_value_and_grad(plan, ops)  # type: ignore[misc]
    assert value == -math.inf and all((g == 0).all() for g in grads)
    compiled = jax.grad(plan, argnums=(0, 1))(*ops)
    for g, ref in zip(grads, compiled, strict=True):
        np.testing.assert_array_equal(g, np.asarray(ref))


def test_a_range_that_could_underflow_is_left_to_the_compiled_gradient():
    plan = einslice.plan("i,i->", (2,), (2,), semiring="log", dtype=np.float64)
    assert host_value_and_grad(plan, [np.array([0.0, -800.0]), np.zeros(2)]) is None


def test_broadcast_size_one_axes_get_their_gradient_summed():
    plan = einslice.plan("ij,ij->", (1, 3), (2, 3), semiring="log", dtype=np.float64)
    a, b = np.log([[1.0, 2.0, 3.0]]), np.zeros((2, 3))
    value, (ga, gb) = host_value_and_grad(plan, [a, b])  # type: ignore[misc]
    assert value == pytest.approx(math.log(12))
    np.testing.assert_allclose(ga, [[2 / 12, 4 / 12, 6 / 12]])
    np.testing.assert_allclose(gb, [[1 / 12, 2 / 12, 3 / 12]] * 2)


def test_refusals_say_what_is_wrong():
    vector = einslice.plan("ij,jk->ik", (2, 3), (3, 2), semiring="log")
    with pytest.raises(EinsliceError, match=r"scalar output.*output indices \[0, 2\]"):
        host_value_and_grad(vector, [np.ones((2, 3)), np.ones((3, 2))])
    scalar = einslice.plan("ij,jk->", (2, 3), (3, 2), semiring="sum")
    with pytest.raises(EinsliceError, match="semiring 'sum'"):
        host_value_and_grad(scalar, [np.ones((2, 3)), np.ones((3, 2))])
    log = einslice.plan("ij,jk->", (2, 3), (3, 2), semiring="log")
    with pytest.raises(EinsliceError, match=r"made for shapes"):
        host_value_and_grad(log, [np.ones((2, 3)), np.ones((3, 3))])


def test_small_plans_pay_within_the_limit_and_large_ones_do_not():
    small = einslice.plan("ij,jk->", (4, 4), (4, 4), semiring="log")
    assert host_grad_pays(small, 2**22)
    assert not host_grad_pays(small, host_grad_peak_bytes(small) - 1)
    n = 2048
    large = einslice.plan(
        "ij,jk,ki->", *[(n, n)] * 3, semiring="log", memory_limit=None
    )
    assert not host_grad_pays(large, 2**40)  # the compile is cheaper than the walk
    # the bound counts what the walk holds: operands, gradients, nodes, copies
    assert host_grad_peak_bytes(large) >= 8 * 2 * 3 * n**2


def test_the_memory_bound_covers_what_the_walk_allocates():
    spec, shapes = SLICEABLE
    rng = np.random.default_rng(2)
    ops = [rng.standard_normal(s) for s in shapes]
    for limit in (None, 60_000):
        plan = einslice.plan(
            spec, *shapes, semiring="log", dtype=np.float64, memory_limit=limit
        )
        tracemalloc.start()
        host_value_and_grad(plan, ops)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak <= host_grad_peak_bytes(plan), (peak, plan.n_chunks)


def test_backward_products_take_einsum_unless_a_real_matrix_product(monkeypatch):
    calls = []
    real = _host_grad._step

    def spy(*args):
        calls.append(args[1])
        return real(*args)

    monkeypatch.setattr(_host_grad, "_step", spy)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((32, 32)), rng.standard_normal((32, 32))
    plan = einslice.plan("ij,jk->", a.shape, b.shape, semiring="log", dtype="float64")
    # ij,jk-> prepares i and k away: the backward products are vector ones
    value, (ga, _) = host_value_and_grad(plan, [a, b])  # type: ignore[misc]
    assert not calls
    p = np.exp(a)[:, :, None] * np.exp(b)[None, :, :]
    np.testing.assert_allclose(ga, p.sum(2) / p.sum())
    assert value == pytest.approx(math.log(p.sum()))


def _spine(links: int, width: int = 8, seed: int = 0):
    """A table over ``width`` binary variables, then 2x2 tables each replacing one.

    Contracted left to right, every result keeps ``width`` variables: a
    chain of equally large nodes, as a pedigree's spine is.
    """
    rng = np.random.default_rng(seed)
    terms = [list(range(width))]
    current = list(range(width))
    for k in range(links):
        old, new = current[k % width], width + k
        terms.append([old, new])
        current[k % width] = new
    terms.append(current)  # closes the chain: a scalar
    tables = [rng.standard_normal([2] * len(t)) for t in terms]
    args = []
    for term, table in zip(terms, tables, strict=True):
        args += [table, term]
    return args, tables


@pytest.mark.parametrize("links", [3, 12, 40])
def test_recomputing_ranges_fits_a_limit_that_keeping_every_node_does_not(links):
    args, tables = _spine(links)
    shapes_and_terms = [a.shape if k % 2 == 0 else a for k, a in enumerate(args)]
    plan = einslice.plan(
        *shapes_and_terms, [], semiring="log", dtype=np.float64, optimize=False
    )
    keep_all = host_grad_peak_bytes(plan)
    assert host_grad_peak_bytes(plan, keep_all) == keep_all  # fits: nothing changes
    assert not _host_grad.recompute_schedule(plan, keep_all).splits
    want_value, want = host_value_and_grad(plan, tables)  # type: ignore[misc]
    least = min(
        host_grad_peak_bytes(plan, limit)
        for limit in range(keep_all, 0, -keep_all // 64)
    )
    assert (least < keep_all) == (links > 3)  # a 4-step chain has nothing to gain
    for limit in {least, (least + keep_all) // 2}:
        schedule = _host_grad.recompute_schedule(plan, limit)
        bound = host_grad_peak_bytes(plan, limit)
        assert bound <= limit
        assert (bound < keep_all) == bool(schedule.splits)
        assert host_grad_seconds(plan, limit) >= host_grad_seconds(plan)
        tracemalloc.start()
        try:
            value, got = host_value_and_grad(plan, tables, memory_limit=limit)  # type: ignore[misc]
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak <= bound + PYTHON_OBJECTS, (peak, bound, schedule)
        assert value == pytest.approx(want_value, rel=1e-13)
        for g, ref in zip(got, want, strict=True):
            np.testing.assert_allclose(g, ref, rtol=1e-12, atol=1e-15)


def test_recomputing_agrees_with_jax_grad_and_pays_only_within_the_limit():
    args, tables = _spine(30, seed=3)
    shapes_and_terms = [a.shape if k % 2 == 0 else a for k, a in enumerate(args)]
    plan = einslice.plan(
        *shapes_and_terms, [], semiring="log", dtype=np.float64, optimize=False
    )
    limit = (host_grad_peak_bytes(plan) + 3 * BUFFER_BYTES) // 4
    if host_grad_peak_bytes(plan, limit) > limit:
        limit = host_grad_peak_bytes(plan, limit)
    assert _host_grad.recompute_schedule(plan, limit).splits
    assert host_grad_pays(plan, limit)
    assert not host_grad_pays(plan, limit, recompute=False)
    want = jax.grad(plan, argnums=tuple(range(len(tables))))(*tables)
    _, got = host_value_and_grad(plan, tables, memory_limit=limit)  # type: ignore[misc]
    for g, ref in zip(got, want, strict=True):
        np.testing.assert_allclose(g, np.asarray(ref), rtol=1e-9, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(networks(), st.floats(0.0, 1.0))
def test_any_recompute_schedule_gives_the_same_gradient_within_its_bound(network, at):
    terms, cards, tables = network
    for plan in _plans(terms, cards, tables, "log"):
        keep_all = host_grad_peak_bytes(plan)
        limit = int(BUFFER_BYTES + at * (keep_all - BUFFER_BYTES))
        want = host_value_and_grad(plan, tables)
        assert want is not None
        tracemalloc.start()
        try:
            found = host_value_and_grad(plan, tables, memory_limit=limit)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak <= host_grad_peak_bytes(plan, limit) + PYTHON_OBJECTS
        assert found is not None
        if want[0] == -math.inf:
            assert found[0] == -math.inf
            continue
        assert found[0] == pytest.approx(want[0], rel=1e-13, abs=1e-13)
        for g, ref in zip(found[1], want[1], strict=True):
            np.testing.assert_allclose(g, ref, rtol=1e-12, atol=1e-14)
