"""The "log" and "max" semirings against brute force (issue 4).

References materialize the table over every index in float64 numpy and reduce
it: ``scipy.special.logsumexp`` for "log", ``max`` for "max"
(``strategies.materialized_reduce``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from numpy.typing import DTypeLike

import einslice
from strategies import (
    Equation,
    equations,
    feasible_plan,
    limit_fractions,
    limit_from_fraction,
    materialized_reduce,
    seeds,
    sliceable_equations,
    tight_limit_fractions,
)


def log_operands(
    eq: Equation,
    seed: int,
    neg_inf: float,
    dtype: DTypeLike = np.float32,
    spread: float = 100.0,
):
    """Entries uniform in [-spread, spread]; a share ``neg_inf`` of them -inf, and,
    when that share is nonzero, one whole row (first axis) of one operand -inf.

    A spread of 100 makes most chunks underflow in the scaled form and take the
    per-step rule (``_exec/_scaled.py``); a spread of 3 keeps the scaled form.
    """
    rng = np.random.default_rng(seed)
    ops = []
    for shape in eq.shapes:
        x = rng.uniform(-spread, spread, shape)
        if neg_inf:
            x[rng.random(shape) < neg_inf] = -np.inf
        ops.append(x)
    if neg_inf:
        with_rows = [k for k, x in enumerate(ops) if x.ndim and x.shape[0]]
        if with_rows:
            k = with_rows[rng.integers(len(with_rows))]
            ops[k][rng.integers(ops[k].shape[0])] = -np.inf
    return [np.asarray(x, dtype=dtype) for x in ops]


def assert_log_close(out, ref, atol):
    out = np.asarray(out)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert not np.isnan(out).any(), out
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(ref))
    finite = np.isfinite(ref)
    assert np.isfinite(out[finite]).all()
    err = np.abs(out[finite].astype(np.float64) - ref[finite])
    assert err.size == 0 or err.max() <= atol, f"max error {err.max()}"


def _einsum_at(eq, ops, fraction, semiring, dtype: DTypeLike = np.float32):
    limit = limit_from_fraction(
        eq.subscripts, eq.shapes, fraction, dtype=dtype, semiring=semiring
    )
    _, limit = feasible_plan(
        eq.subscripts, eq.shapes, limit, dtype=dtype, semiring=semiring
    )
    return einslice.einsum(eq.subscripts, *ops, memory_limit=limit, semiring=semiring)


neg_inf_shares = st.sampled_from([0.0, 0.0, 0.3, 0.7, 1.0])
spreads = st.sampled_from([100.0, 3.0])


# --- "log" ------------------------------------------------------------------------


@given(
    equations(max_operands=5, max_elements=512),
    seeds,
    neg_inf_shares,
    limit_fractions,
    spreads,
)
def test_log_matches_logsumexp(eq, seed, neg_inf, fraction, spread):
    ops = log_operands(eq, seed, neg_inf, spread=spread)
    ref = materialized_reduce(eq, [x.astype(np.float64) for x in ops], "log")
    out = _einsum_at(eq, ops, fraction, "log")
    assert out.dtype == jnp.float32
    assert_log_close(out, ref, atol=1e-4)


@settings(max_examples=15)  # "log" takes seconds to compile
@given(
    sliceable_equations(max_operands=5, max_elements=2**14),
    seeds,
    neg_inf_shares,
    tight_limit_fractions,
)
def test_log_matches_logsumexp_when_sliced(eq, seed, neg_inf, fraction):
    ops = log_operands(eq, seed, neg_inf)
    ref = materialized_reduce(eq, [x.astype(np.float64) for x in ops], "log")
    assert_log_close(_einsum_at(eq, ops, fraction, "log"), ref, atol=1e-4)


@settings(max_examples=8)  # "log" takes seconds to compile
@given(sliceable_equations(max_operands=4, max_elements=2**13), seeds, limit_fractions)
def test_log_float64_is_accurate(eq, seed, fraction):
    ops = log_operands(eq, seed, 0.0, dtype=np.float64)
    ref = materialized_reduce(eq, ops, "log")
    out = _einsum_at(eq, ops, fraction, "log", dtype=np.float64)
    assert out.dtype == jnp.float64
    assert_log_close(out, ref, atol=1e-9)


@pytest.mark.parametrize("sliced", [False, True], ids=["unsliced", "sliced"])
def test_log_chunks_that_are_all_neg_inf(sliced):
    # All but the last few values of j are -inf in A, and row 3 is -inf
    # throughout: most chunks of a sliced j contribute nothing, and the running
    # log-add-exp starts from -inf; row 3 of the result must be exactly -inf.
    rng = np.random.default_rng(0)
    a = rng.uniform(-100, 100, (40, 50)).astype(np.float32)
    b = rng.uniform(-100, 100, (50, 30)).astype(np.float32)
    a[:, :45] = -np.inf
    a[3] = -np.inf
    b[:, 7] = -np.inf
    eq = Equation(("ij", "jk"), "ik", (a.shape, b.shape))
    fraction = 0.05 if sliced else None
    limit = limit_from_fraction(eq.subscripts, eq.shapes, fraction, semiring="log")
    p, limit = feasible_plan(eq.subscripts, eq.shapes, limit, semiring="log")
    assert bool(p.sliced) == sliced, str(p)
    out = einslice.log_einsum("ij,jk->ik", a, b, memory_limit=limit)
    ref = materialized_reduce(eq, [a.astype(np.float64), b.astype(np.float64)], "log")
    assert np.isneginf(ref[3]).all() and np.isneginf(ref[:, 7]).all()
    # float32 results up to ~200: 1e-4 is a few ulp on a CPU; a TPU's float32
    # exp is 5.5e-6 off in relative terms (v5e, 2026-12-07: 1.1e-4 here).
    assert_log_close(out, ref, atol=1e-4 if jax.default_backend() == "cpu" else 1e-3)


@pytest.mark.parametrize("sliced", [False, True], ids=["unsliced", "sliced"])
def test_log_of_all_neg_inf_is_neg_inf(sliced):
    a = np.full((20, 30), -np.inf, np.float32)
    b = np.zeros((30, 25), np.float32)
    limit = None
    if sliced:
        limit = einslice.plan("ij,jk->ik", a, b, semiring="log").peak_bytes // 4
    for subscripts in ("ij,jk->ik", "ij,jk->", "ij,jk->ijk"):
        try:
            out = einslice.log_einsum(subscripts, a, b, memory_limit=limit)
        except einslice.MemoryLimitError as e:
            out = einslice.log_einsum(subscripts, a, b, memory_limit=e.smallest_limit)
        assert np.isneginf(np.asarray(out)).all(), out


@pytest.mark.parametrize("semiring", ["log", "max"])
def test_empty_sum_is_neg_inf(semiring):
    # the semiring's zero: log Σ over nothing, max over nothing
    a, b = np.zeros((2, 0)), np.zeros((0, 3))
    out = einslice.einsum("ij,jk->ik", a, b, semiring=semiring)
    np.testing.assert_array_equal(out, np.full((2, 3), -np.inf))


def test_log_keeps_terms_whose_shifted_product_underflows():
    # Found by test_log_chunks_that_are_all_neg_inf: shifting A by its row max
    # (87) and B by its column max (84) leaves exp(37 - 87) * exp(39 - 84) =
    # exp(-95), below float32's normal range, so the j=2 term (76) was dropped
    # although it is only 9 below the largest (85).
    a = np.array([[-np.inf, 87, 37, 65]], np.float32)
    b = np.array([[84], [-93], [39], [20]], np.float32)
    ref = 85 + np.log1p(np.exp(76.0 - 85) + np.exp(-6.0 - 85))  # terms 85, 76, -6
    out = einslice.log_einsum("ij,jk->ik", a, b)
    assert abs(float(out[0, 0]) - ref) <= 1e-4, (float(out[0, 0]), ref)


def test_the_matrix_unit_rule_repairs_underflow_itself():
    # The case above, through the matrix-unit rule directly: plans send a
    # step this small to its union, so only a large one would reach it.
    from einslice._exec._semiring import log_dot

    a = jnp.array([[-np.inf, 87, 37, 65]], jnp.float32)
    b = jnp.array([[84], [-93], [39], [20]], jnp.float32)
    ref = 85 + np.log1p(np.exp(76.0 - 85) + np.exp(-6.0 - 85))
    out = log_dot(a, b, (((1,), (0,)), ((), ())), None)
    assert abs(float(out[0, 0]) - ref) <= 1e-4, (float(out[0, 0]), ref)


@pytest.mark.parametrize("n", [64, 128], ids=["small-union", "large-union"])
def test_a_log_step_over_a_small_union_has_no_control_flow(n):
    # ij,jk->ik contracting n > 16 entries: with 2n*2 <= SMALL_UNION entries
    # in the union it is reduced there, exactly and without the matrix-unit
    # rule's underflow repair (two conditionals and a loop to compile); past
    # that (here 2*n*n) it takes that rule.
    from einslice._exec import _semiring
    from einslice._plan._semiring import LOG, SMALL_UNION

    rng = np.random.default_rng(0)
    k = 2 if n == 64 else n
    a = rng.uniform(-100, 100, (2, n))
    b = rng.uniform(-100, 100, (n, k))
    a[0, : n - 3] = -np.inf  # a row of few terms, and a column of none
    b[:, 1] = -np.inf
    dims = (((1,), (0,)), ((), ()))

    def step(a, b):
        return _semiring.pair(LOG, a, b, dims, _semiring.Config())

    text = jax.jit(step).lower(a, b).as_text()
    small = 2 * n * k <= SMALL_UNION
    assert ("stablehlo.case" in text or "stablehlo.while" in text) != small
    out = np.asarray(step(jnp.asarray(a), jnp.asarray(b)))  # float64 (conftest)
    terms = a[:, :, None] + b[None]
    top = np.max(terms, axis=1)
    shift = np.where(np.isfinite(top), top, 0)
    with np.errstate(divide="ignore"):  # log(0): the column of no terms
        ref = np.log(np.sum(np.exp(terms - shift[:, None]), axis=1)) + shift
    assert np.isneginf(ref[:, 1]).all()
    assert_log_close(out, ref, atol=1e-9)


@pytest.fixture
def per_step_rule_poisoned(monkeypatch):
    """Make the per-step "log" rule return NaN, so only the scaled form can pass."""
    from einslice._exec import _scan

    def poisoned(plan, config, prepared):
        shape = tuple(
            next(
                x.shape[t.index(i)]
                for x, t in zip(prepared, plan.prepared, strict=True)
                if i in t
            )
            for i in plan.equation.output
        )
        return jnp.full(shape, jnp.nan, prepared[0].dtype)

    jax.clear_caches()
    monkeypatch.setattr(_scan, "run_steps", poisoned)
    yield
    jax.clear_caches()


# The fixture holds for the whole test: every example runs poisoned.
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(equations(max_operands=5, max_elements=512), seeds, limit_fractions)
def test_log_scaled_form_alone_matches_logsumexp(
    per_step_rule_poisoned, eq, seed, fraction
):
    # Entries in [-3, 3] never come near underflow: the scaled form (one exp
    # per input entry, then "sum" steps) must give every answer on its own.
    from einslice._exec import _scaled

    plan, _ = feasible_plan(eq.subscripts, eq.shapes, None, semiring="log")
    assume(_scaled.applies(plan, dict(plan.chunks)))
    assume(all(all(s > 0 for s in shape) for shape in eq.shapes))
    ops = log_operands(eq, seed, 0.0, dtype=np.float64, spread=3.0)
    ref = materialized_reduce(eq, ops, "log")
    out = _einsum_at(eq, ops, fraction, "log", dtype=np.float64)
    assert_log_close(out, ref, atol=1e-9)


def test_log_underflow_takes_the_per_step_rule(per_step_rule_poisoned):
    # the case above: its scaled product exp(-95) underflows, so the chunk is
    # handed to the per-step rule (here poisoned: NaN shows it was taken).
    # Under jit: a call outside a trace may walk on the host instead.
    a = np.array([[-np.inf, 87, 37, 65]], np.float32)
    b = np.array([[84], [-93], [39], [20]], np.float32)
    compiled = jax.jit(lambda a, b: einslice.log_einsum("ij,jk->ik", a, b))
    assert np.isnan(compiled(a, b)).all()


def test_log_of_equal_entries_counts_them():
    # log Σ_j exp(0 + 0) = log n, the textbook check
    n = 37
    out = einslice.log_einsum("ij,j->i", np.zeros((3, n)), np.zeros(n))
    np.testing.assert_allclose(out, np.full(3, np.log(n)), rtol=1e-6)


# --- "max" ------------------------------------------------------------------------


def _max_close(out, ref):
    out = np.asarray(out)
    assert out.shape == ref.shape
    assert not np.isnan(out).any()
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(out[finite], ref[finite], rtol=1e-12, atol=1e-11)


@pytest.mark.slow
@given(equations(max_operands=6), seeds, neg_inf_shares, limit_fractions)
def test_max_matches_brute_force(eq, seed, neg_inf, fraction):
    ops = log_operands(eq, seed, neg_inf, dtype=np.float64)
    ref = materialized_reduce(eq, ops, "max")
    out = _einsum_at(eq, ops, fraction, "max", dtype=np.float64)
    _max_close(out, ref)


@pytest.mark.slow
@settings(max_examples=20)
@given(sliceable_equations(max_elements=2**14), seeds, neg_inf_shares)
def test_max_matches_brute_force_when_sliced(eq, seed, neg_inf):
    ops = log_operands(eq, seed, neg_inf, dtype=np.float64)
    ref = materialized_reduce(eq, ops, "max")
    _max_close(_einsum_at(eq, ops, 0.05, "max", dtype=np.float64), ref)


@pytest.mark.parametrize("sliced", [False, True], ids=["unsliced", "sliced"])
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_max_gradient_is_the_indicator_of_the_maximizer(sliced, ties):
    # With ties (entries 0 or 1: most sums tie) the indicator still marks
    # one assignment: the first maximizer, as numpy's argmax picks it.
    rng = np.random.default_rng(3)
    draw = (
        (lambda s: rng.integers(0, 2, s).astype(float)) if ties else rng.standard_normal
    )
    a = jnp.asarray(draw((12, 20)))
    b = jnp.asarray(draw((20, 9)))
    # planned with the CPU's figures on every device: for a TPU a loop's
    # scratch (1 MiB) is more than this product's unsliced peak, so no limit
    # would slice it there
    cpu = einslice.profiles.CPU
    limit = None
    if sliced:
        whole = einslice.plan("ij,jk->ik", a, b, semiring="max", profile=cpu)
        limit = whole.peak_bytes // 4
        assert einslice.plan(
            "ij,jk->ik", a, b, semiring="max", memory_limit=limit, profile=cpu
        ).sliced

    def f(x, y, limit):
        out = einslice.max_einsum("ij,jk->ik", x, y, memory_limit=limit, profile=cpu)
        return jnp.sum(out)

    try:
        ga, gb = jax.grad(f, argnums=(0, 1))(a, b, limit)
    except einslice.MemoryLimitError as e:
        ga, gb = jax.grad(f, argnums=(0, 1))(a, b, e.smallest_limit)
    best = np.argmax(np.asarray(a)[:, :, None] + np.asarray(b)[None], axis=1)
    ref_a, ref_b = np.zeros(a.shape), np.zeros(b.shape)
    for i in range(a.shape[0]):
        for k in range(b.shape[1]):
            ref_a[i, best[i, k]] += 1
            ref_b[best[i, k], k] += 1
    np.testing.assert_array_equal(ga, ref_a)
    np.testing.assert_array_equal(gb, ref_b)


# --- shortcuts and transforms -------------------------------------------------------


def test_shortcuts_equal_the_semiring_argument():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((5, 6)), rng.standard_normal((6, 7))
    np.testing.assert_array_equal(
        einslice.log_einsum("ij,jk->ik", a, b),
        einslice.einsum("ij,jk->ik", a, b, semiring="log"),
    )
    np.testing.assert_array_equal(
        einslice.max_einsum("ij,jk->ik", a, b, memory_limit=2000),
        einslice.einsum("ij,jk->ik", a, b, semiring="max", memory_limit=2000),
    )


@pytest.mark.parametrize("semiring", ["log", "max"])
def test_semirings_under_jit_and_vmap(semiring):
    rng = np.random.default_rng(2)
    a = rng.uniform(-5, 5, (3, 6, 7))
    b = rng.uniform(-5, 5, (7, 5))
    eq = Equation(("ij", "jk"), "ik", ((6, 7), (7, 5)))
    refs = np.stack([materialized_reduce(eq, [x, b], semiring) for x in a])

    def f(x):
        return einslice.einsum("ij,jk->ik", x, b, semiring=semiring)

    np.testing.assert_allclose(jax.jit(jax.vmap(f))(a), refs, rtol=1e-10)
