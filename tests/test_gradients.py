"""Gradients of "sum" and "log" (issue 4): finite differences, materialized refs.

``jax.test_util.check_grads`` compares forward- and reverse-mode derivatives with
finite differences in float64; the materialized references
(``strategies.materialized_reduce`` with ``xp=jnp``) give exact gradients of the
same function computed without any plan.
"""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.test_util import check_grads

import einslice
from strategies import (
    Equation,
    equations,
    limit_fractions,
    limit_from_fraction,
    materialized_reduce,
    random_operands,
    seeds,
    sliceable_equations,
)

# Shapes big enough that half the unsliced peak slices; one case per feature:
# many operands, a repeated index, sliced output indices.
CASES = [
    ("ij,ik,il,jk,jl,kl->ij", [(6, 7), (6, 5), (6, 8), (7, 5), (7, 8), (5, 8)]),
    ("iij,jk->ik", [(9, 9, 8), (8, 10)]),
    ("ia,ib,ic->iabc", [(6, 4), (6, 5), (6, 3)]),
]
cases_param = pytest.mark.parametrize(
    ("subscripts", "shapes"), CASES, ids=[c[0] for c in CASES]
)
sliced_param = pytest.mark.parametrize(
    "sliced", [False, True], ids=["unsliced", "sliced"]
)


def _start_limit(subscripts, shapes, sliced, semiring="sum"):
    """None, or half the unsliced forward peak (a limit that slices it)."""
    if not sliced:
        return None
    p = einslice.plan(subscripts, *shapes, dtype=np.float64, semiring=semiring)
    return max(1, p.peak_bytes // 2)


def with_feasible_limit(fn, limit):
    """``fn(limit)``, raising the limit to what a pass that does not fit asks for.

    The derivative of a plan keeps more alive per chunk than the plan itself, so
    it may refuse a limit the forward pass accepted; its MemoryLimitError says
    how much it needs.
    """
    for _ in range(4):
        try:
            return fn(limit)
        except einslice.MemoryLimitError as e:
            assert limit is not None and e.smallest_limit > limit, (e, limit)
            limit = e.smallest_limit
    return fn(limit)


def _ops(shapes, seed=0, low=-1.0, high=1.0):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.uniform(low, high, s)) for s in shapes]


# --- finite differences (float64) ---------------------------------------------------


@sliced_param
@cases_param
def test_sum_check_grads(subscripts, shapes, sliced):
    ops = _ops(shapes)

    def check(limit):
        def f(*o):
            return einslice.einsum(subscripts, *o, memory_limit=limit)

        check_grads(f, ops, order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)

    with_feasible_limit(check, _start_limit(subscripts, shapes, sliced))


@sliced_param
def test_sum_check_grads_to_second_order(sliced):
    subscripts, shapes = "iij,jk->ik", [(9, 9, 8), (8, 10)]
    ops = _ops(shapes)

    def check(limit):
        def f(*o):
            return einslice.einsum(subscripts, *o, memory_limit=limit)

        check_grads(f, ops, order=2, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)

    with_feasible_limit(check, _start_limit(subscripts, shapes, sliced))


@sliced_param
@cases_param
def test_log_check_grads(subscripts, shapes, sliced):
    ops = _ops(shapes, low=-3.0, high=3.0)

    def check(limit):
        def f(*o):
            return einslice.log_einsum(subscripts, *o, memory_limit=limit)

        check_grads(f, ops, order=1, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)

    with_feasible_limit(check, _start_limit(subscripts, shapes, sliced, "log"))


# --- against jax.grad of a materialized reference -----------------------------------


def _cotangent(shape, seed):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape))


def _grads(fn, ops, ct):
    argnums = tuple(range(len(ops)))
    return jax.grad(lambda *o: jnp.sum(fn(*o) * ct), argnums)(*ops)


def _reference_grads(eq, semiring, ops, ct):
    """Gradients of the materialized reference (jitted: one compile, not many)."""

    def ref(*o):
        return materialized_reduce(eq, o, semiring, xp=jnp)

    return jax.jit(lambda *o: _grads(ref, o, ct))(*ops)


def _compare(got, expected, rtol=1e-9):
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        assert not np.isnan(np.asarray(g)).any()
        scale = 1 + np.max(np.abs(np.asarray(e)), initial=0)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * scale)


@settings(max_examples=8)  # each example compiles a derivative
@given(equations(max_operands=5, max_elements=256), seeds, limit_fractions)
def test_sum_grad_matches_materialized_reference(eq, seed, fraction):
    ops = [jnp.asarray(x) for x in random_operands(eq, seed)]
    ct = _cotangent(eq.output_shape(), seed)
    expected = _reference_grads(eq, "sum", ops, ct)

    def ours(limit):
        def f(*o):
            return einslice.einsum(eq.subscripts, *o, memory_limit=limit)

        return jax.jit(lambda *o: _grads(f, o, ct))(*ops)

    limit = limit_from_fraction(eq.subscripts, eq.shapes, fraction)
    _compare(with_feasible_limit(ours, limit), expected)


def _log_grad_case(eq, seed, neg_inf):
    rng = np.random.default_rng(seed)
    ops = []
    for shape in eq.shapes:
        x = rng.uniform(-100, 100, shape)
        if neg_inf:
            x[rng.random(shape) < neg_inf] = -np.inf
        ops.append(jnp.asarray(x))
    ref_out = materialized_reduce(eq, [np.asarray(x) for x in ops], "log")
    # Where the result is -inf its derivative is undefined: give it no weight.
    ct = jnp.where(np.isneginf(ref_out), 0.0, _cotangent(ref_out.shape, seed))
    return ops, ct


@settings(max_examples=10)  # each example compiles a derivative
@given(
    equations(max_operands=5, max_elements=256),
    seeds,
    st.sampled_from([0.0, 0.3, 0.7]),
    limit_fractions,
)
def test_log_grad_matches_materialized_reference(eq, seed, neg_inf, fraction):
    ops, ct = _log_grad_case(eq, seed, neg_inf)
    expected = _reference_grads(eq, "log", ops, ct)

    def ours(limit):
        def f(*o):
            return einslice.log_einsum(eq.subscripts, *o, memory_limit=limit)

        return jax.jit(lambda *o: _grads(f, o, ct))(*ops)

    limit = limit_from_fraction(eq.subscripts, eq.shapes, fraction, semiring="log")
    _compare(with_feasible_limit(ours, limit), expected, rtol=1e-7)


@settings(max_examples=4)  # each example compiles a derivative
@given(
    sliceable_equations(max_operands=4, max_elements=2**12),
    seeds,
    st.sampled_from([0.0, 0.5]),
)
def test_log_grad_matches_materialized_reference_when_sliced(eq, seed, neg_inf):
    ops, ct = _log_grad_case(eq, seed, neg_inf)
    expected = _reference_grads(eq, "log", ops, ct)

    def ours(limit):
        def f(*o):
            return einslice.log_einsum(eq.subscripts, *o, memory_limit=limit)

        return jax.jit(lambda *o: _grads(f, o, ct))(*ops)

    limit = limit_from_fraction(eq.subscripts, eq.shapes, 0.3, semiring="log")
    _compare(with_feasible_limit(ours, limit), expected, rtol=1e-7)


@sliced_param
def test_log_grad_has_no_nan_with_neg_inf_entries_and_rows(sliced):
    # float32, every output weighted, including the all -inf ones.
    rng = np.random.default_rng(4)
    a = rng.uniform(-100, 100, (30, 40)).astype(np.float32)
    b = rng.uniform(-100, 100, (40, 20)).astype(np.float32)
    c = rng.uniform(-100, 100, (20,)).astype(np.float32)
    a[rng.random(a.shape) < 0.5] = -np.inf
    a[2] = -np.inf  # a whole row: result row 2 is -inf
    b[:, 5] = -np.inf
    c[7] = -np.inf
    subscripts = "ij,jk,k->ik"
    shapes = [a.shape, b.shape, c.shape]
    limit = None
    if sliced:
        p = einslice.plan(subscripts, *shapes, semiring="log")
        limit = p.peak_bytes // 3

    def run(limit):
        def f(*o):
            return jnp.sum(einslice.log_einsum(subscripts, *o, memory_limit=limit))

        value, grads = jax.value_and_grad(f, argnums=(0, 1, 2))(a, b, c)
        out = einslice.log_einsum(subscripts, a, b, c, memory_limit=limit)
        return value, grads, out

    value, grads, out = with_feasible_limit(run, limit)
    assert np.isneginf(np.asarray(out)[2]).all()
    assert np.isneginf(value)
    for g in grads:
        assert not np.isnan(np.asarray(g)).any(), g
    # d log Σ exp / d entry is a probability: -inf entries get exactly 0
    assert (np.asarray(grads[0])[np.isneginf(a)] == 0).all()


def test_log_grad_is_the_marginal_probability():
    # For log Z = log Σ_ij exp(a_i + b_ij + c_j), d log Z / d b_ij = p(i, j).
    rng = np.random.default_rng(5)
    a, b, c = rng.normal(size=3), rng.normal(size=(3, 4)), rng.normal(size=4)
    joint = np.exp(a[:, None] + b + c[None])
    marginal = joint / joint.sum()
    g = jax.grad(lambda x: einslice.log_einsum("i,ij,j->", a, x, c))(b)
    np.testing.assert_allclose(g, marginal, rtol=1e-10)
    np.testing.assert_allclose(g.sum(), 1.0, rtol=1e-12)


# --- jvp, vjp, higher order for "sum" -------------------------------------------------


@sliced_param
@cases_param
def test_sum_jvp_and_vjp_match_jnp(subscripts, shapes, sliced):
    ops = _ops(shapes)
    tangents = _ops(shapes, seed=1)
    ref_out, ref_tan = jax.jvp(
        lambda *o: jnp.einsum(subscripts, *o), tuple(ops), tuple(tangents)
    )
    ct = _cotangent(ref_out.shape, 2)
    _, ref_vjp = jax.vjp(lambda *o: jnp.einsum(subscripts, *o), *ops)

    def run(limit):
        def f(*o):
            return einslice.einsum(subscripts, *o, memory_limit=limit)

        out, tan = jax.jvp(f, tuple(ops), tuple(tangents))
        out2, vjp = jax.vjp(f, *ops)
        return out, tan, out2, vjp(ct)

    out, tan, out2, cts = with_feasible_limit(
        run, _start_limit(subscripts, shapes, sliced)
    )
    np.testing.assert_allclose(out, ref_out, rtol=1e-10)
    np.testing.assert_allclose(out2, ref_out, rtol=1e-10)
    np.testing.assert_allclose(tan, ref_tan, rtol=1e-10, atol=1e-12)
    for g, e in zip(cts, ref_vjp(ct), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


@sliced_param
def test_sum_hessian_matches_jnp(sliced):
    subscripts = "ij,jk,ki->"
    shapes = [(5, 6), (6, 4), (4, 5)]
    ops = _ops(shapes)

    def hess(fn):
        return jax.hessian(lambda x: fn(subscripts, x, *ops[1:]) ** 2)(ops[0])

    expected = hess(jnp.einsum)

    def run(limit):
        return hess(lambda *a: einslice.einsum(*a, memory_limit=limit))

    got = with_feasible_limit(run, _start_limit(subscripts, shapes, sliced))
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_grad_of_broadcast_and_repeated_operands():
    # the gradient of a size-1 (broadcast) axis sums; of a diagonal, scatters
    eq = Equation(("ii", "ij", "j"), "i", ((4, 4), (4, 1), (5,)))
    ops = _ops(eq.shapes)
    ct = _cotangent((4,), 0)
    expected = _grads(lambda *o: jnp.einsum(eq.subscripts, *o), ops, ct)
    got = _grads(lambda *o: einslice.einsum(eq.subscripts, *o), ops, ct)
    _compare(got, expected)
    assert np.count_nonzero(np.asarray(got[0]) - np.diag(np.diag(got[0]))) == 0


SEED = "ij,ik,il,jk,jl,kl->ij"


@pytest.mark.parametrize("semiring", ["sum", "log", "max"])
def test_output_only_operand_multiplied_after_the_loop(semiring):
    # The seed's ij holds output indices only: the plan multiplies it in once
    # after the chunk loop (Plan.hoisted), so reverse mode takes its gradient
    # from the accumulated result. Values and gradients must not change.
    rng = np.random.default_rng(0)
    ops = [rng.uniform(0.5, 1.5, (16, 16)) for _ in range(6)]
    if semiring != "sum":
        ops = [np.log(x) for x in ops]
    plan = einslice.plan(SEED, *ops, memory_limit="120kB", semiring=semiring)
    assert plan.hoisted == 1 and (plan.chunks or plan.tangent_chunks), str(plan)

    def f(limit):
        return lambda *o: einslice.einsum(
            SEED, *o, memory_limit=limit, semiring=semiring
        )

    np.testing.assert_allclose(f("120kB")(*ops), f("1GB")(*ops), rtol=1e-12)
    if semiring == "max":
        return  # forward only: its gradient has its own test

    def grads(limit):
        fn = f(limit)
        return jax.grad(lambda *o: jnp.sum(jnp.sin(fn(*o))), argnums=range(6))(*ops)

    for got, want in zip(grads("120kB"), grads("1GB"), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def _count(jaxpr, name: str) -> int:
    """How many ``name`` equations a jaxpr holds, sub-jaxprs included."""
    total = 0
    for eqn in jaxpr.eqns:
        total += eqn.primitive.name == name
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            total += _count(sub, name)
    return total


@pytest.mark.parametrize("semiring", ["sum", "max"])
def test_unsliced_jvp_traces_the_steps_once(semiring):
    # Unsliced, one jax.jvp gives value and tangent: each step's dot_general
    # (max: its reduce_max) appears once for the value and once per tangent,
    # not once more for a separate forward pass (compile time, issue 12).
    xs = [jnp.full((3, 3), 0.5) for _ in range(5)]
    p = einslice.plan("ab,bc,cd,de,ef->af", *xs, semiring=semiring)
    assert not p.sliced and len(p.steps) == 4
    jaxpr = jax.make_jaxpr(lambda *a: jax.jvp(p, a, a))(*xs).jaxpr
    if semiring == "sum":
        assert _count(jaxpr, "dot_general") == 3 * len(p.steps)
    else:
        assert _count(jaxpr, "reduce_max") == len(p.steps)
    value, tangent = jax.jvp(p, tuple(xs), tuple(xs))
    expected = jnp.linalg.multi_dot(xs) if semiring == "sum" else None
    if expected is not None:
        np.testing.assert_allclose(value, expected, rtol=1e-6)
        np.testing.assert_allclose(tangent, 5 * expected, rtol=1e-6)
