"""Parity with jnp.einsum under jax.jit, jax.vmap and jax.grad, sliced and unsliced."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import einslice
from strategies import (
    equations,
    feasible_plan,
    limit_fractions,
    limit_from_fraction,
    random_operands,
    seeds,
    sliceable_equations,
)

# Shapes big enough that a limit of half the unsliced peak slices (tiny ones
# would not: a lax.scan has fixed costs that the planner counts).
CASES = [
    ("ij,ik,il,jk,jl,kl->ij", [(8, 9), (8, 7), (8, 10), (9, 7), (9, 10), (7, 10)]),
    ("...ij,...jk->...ik", [(2, 1, 6, 8), (5, 8, 7)]),
    ("iij,jk->ik", [(12, 12, 10), (10, 11)]),
    ("ij,ij,j->", [(30, 1), (30, 40), (40,)]),
    ("ab,bc,cd,da", [(12, 16), (16, 14), (14, 12), (12, 12)]),
    ("ia,ib,ic->iabc", [(8, 6), (8, 5), (8, 7)]),
]


def _ops(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.standard_normal(s)) for s in shapes]


def _limit(subscripts, shapes, sliced: bool):
    """None, or half the unsliced peak: a limit under which the plan slices."""
    if not sliced:
        return None
    unsliced = einslice.plan(subscripts, *shapes, dtype=np.float64)
    limit = unsliced.peak_bytes // 2
    p = einslice.plan(subscripts, *shapes, dtype=np.float64, memory_limit=limit)
    assert p.sliced, str(p)
    return limit


def _with_feasible_limit(fn, limit):
    """``fn(limit)``, raising the limit to what the forward pass, then the
    derivative, say they need when they do not fit."""
    for _ in range(3):
        try:
            return fn(limit)
        except einslice.MemoryLimitError as e:
            assert limit is not None and e.smallest_limit > limit, (e, limit)
            limit = e.smallest_limit
    return fn(limit)


sliced_param = pytest.mark.parametrize(
    "sliced", [False, True], ids=["unsliced", "sliced"]
)
cases_param = pytest.mark.parametrize(
    ("subscripts", "shapes"), CASES, ids=[c[0] for c in CASES]
)


@sliced_param
@cases_param
def test_jit(subscripts, shapes, sliced):
    ops = _ops(shapes)
    limit = _limit(subscripts, shapes, sliced)
    f = jax.jit(lambda *o: einslice.einsum(subscripts, *o, memory_limit=limit))
    np.testing.assert_allclose(f(*ops), jnp.einsum(subscripts, *ops), rtol=1e-10)
    p = einslice.plan(subscripts, *ops, memory_limit=limit)
    assert bool(p.sliced) == sliced, str(p)
    run = jax.jit(lambda *o: p(*o))
    np.testing.assert_allclose(run(*ops), jnp.einsum(subscripts, *ops), rtol=1e-10)


@sliced_param
@cases_param
def test_vmap(subscripts, shapes, sliced):
    batch = 3
    ops = _ops(shapes)
    batched = _ops([(batch, *s) for s in shapes], seed=1)
    limit = _limit(subscripts, shapes, sliced)

    def ours(*o):
        return einslice.einsum(subscripts, *o, memory_limit=limit)

    def ref(*o):
        return jnp.einsum(subscripts, *o)

    # every operand batched
    np.testing.assert_allclose(
        jax.vmap(ours)(*batched), jax.vmap(ref)(*batched), rtol=1e-10
    )
    # only the first operand batched, along its last axis
    first = jnp.moveaxis(batched[0], 0, -1)
    in_axes = (first.ndim - 1,) + (None,) * (len(ops) - 1)
    np.testing.assert_allclose(
        jax.vmap(ours, in_axes=in_axes)(first, *ops[1:]),
        jax.vmap(ref, in_axes=in_axes)(first, *ops[1:]),
        rtol=1e-10,
    )
    # a plan made for the unbatched shapes runs under vmap
    p = einslice.plan(subscripts, *ops, memory_limit=limit)
    np.testing.assert_allclose(
        jax.vmap(lambda *o: p(*o))(*batched), jax.vmap(ref)(*batched), rtol=1e-10
    )


def _grads(fn, ops, cotangent):
    argnums = tuple(range(len(ops)))
    return jax.grad(lambda *o: jnp.sum(fn(*o) * cotangent), argnums)(*ops)


@sliced_param
@cases_param
def test_grad(subscripts, shapes, sliced):
    ops = _ops(shapes)
    out = jnp.einsum(subscripts, *ops)
    ct = jnp.asarray(np.random.default_rng(5).standard_normal(out.shape))
    expected = _grads(lambda *o: jnp.einsum(subscripts, *o), ops, ct)

    def ours(limit):
        return _grads(
            lambda *o: einslice.einsum(subscripts, *o, memory_limit=limit), ops, ct
        )

    got = _with_feasible_limit(ours, _limit(subscripts, shapes, sliced))
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


@sliced_param
def test_grad_through_a_plan(sliced):
    subscripts, shapes = CASES[0]
    ops = _ops(shapes)
    ct = jnp.asarray(np.random.default_rng(5).standard_normal(shapes[0]))
    expected = _grads(lambda *o: jnp.einsum(subscripts, *o), ops, ct)

    def via_plan(limit):
        p = einslice.plan(subscripts, *ops, memory_limit=limit)
        return jax.jit(lambda *o: _grads(lambda *x: p(*x), o, ct))(*ops)

    got = _with_feasible_limit(via_plan, _limit(subscripts, shapes, sliced))
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


@sliced_param
def test_jit_of_vmap_of_grad(sliced):
    subscripts, shapes = CASES[0]
    ops = _ops(shapes)
    batched_a = _ops([(3, *shapes[0])], seed=2)[0]
    in_axes = (0,) + (None,) * (len(ops) - 1)

    def loss(fn):
        return lambda a, *rest: jnp.sum(fn(subscripts, a, *rest) ** 2)

    def ours(limit):
        def f(name, *o):
            return einslice.einsum(name, *o, memory_limit=limit)

        grad = jax.jit(jax.vmap(jax.grad(loss(f)), in_axes=in_axes))
        return grad(batched_a, *ops[1:])

    got = _with_feasible_limit(ours, _limit(subscripts, shapes, sliced))
    expected = jax.vmap(jax.grad(loss(jnp.einsum)), in_axes=in_axes)(
        batched_a, *ops[1:]
    )
    np.testing.assert_allclose(got, expected, rtol=1e-10)


@settings(max_examples=8)  # each example compiles a derivative
@given(equations(max_operands=5, max_elements=512), seeds, limit_fractions)
def test_grad_matches_jnp_on_random_equations(eq, seed, fraction):
    ops = [jnp.asarray(x) for x in random_operands(eq, seed)]
    out = jnp.einsum(eq.subscripts, *ops)
    ct = jnp.asarray(np.random.default_rng(seed).standard_normal(out.shape))
    expected = _grads(lambda *o: jnp.einsum(eq.subscripts, *o), ops, ct)

    def ours(limit):
        def f(*x):
            return einslice.einsum(eq.subscripts, *x, memory_limit=limit)

        return jax.jit(lambda *o: _grads(f, o, ct))(*ops)

    limit = limit_from_fraction(eq.subscripts, eq.shapes, fraction)
    _, limit = feasible_plan(eq.subscripts, eq.shapes, limit, dtype=np.float64)
    got = _with_feasible_limit(ours, limit)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        scale = 1e-10 * (1 + np.max(np.abs(np.asarray(e)), initial=0))
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=scale)


@settings(max_examples=6)  # each example compiles a derivative
@given(sliceable_equations(max_operands=4, max_elements=2**13), seeds)
def test_grad_matches_jnp_when_sliced(eq, seed):
    ops = [jnp.asarray(x) for x in random_operands(eq, seed)]
    out = jnp.einsum(eq.subscripts, *ops)
    ct = jnp.asarray(np.random.default_rng(seed).standard_normal(out.shape))
    expected = _grads(lambda *o: jnp.einsum(eq.subscripts, *o), ops, ct)

    def ours(limit):
        def f(*x):
            return einslice.einsum(eq.subscripts, *x, memory_limit=limit)

        return jax.jit(lambda *o: _grads(f, o, ct))(*ops)

    unsliced = einslice.plan(eq.subscripts, *ops)
    got = _with_feasible_limit(ours, max(1, unsliced.peak_bytes // 3))
    for g, e in zip(got, expected, strict=True):
        scale = 1e-10 * (1 + np.max(np.abs(np.asarray(e)), initial=0))
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=scale)


def test_a_plan_is_a_function_jax_transforms_accept():
    # A Plan is callable, so jax.jit(plan) should work like jax.jit(fn);
    # jax.jit keeps a weak reference to the function it wraps.
    ops = _ops([(3, 4), (4, 5)])
    p = einslice.plan("ij,jk->ik", *ops)
    expected = jnp.einsum("ij,jk->ik", *ops)
    np.testing.assert_allclose(jax.jit(p)(*ops), expected, rtol=1e-12)
    batched = [jnp.stack([x, 2 * x]) for x in ops]
    np.testing.assert_allclose(jax.vmap(p)(*batched)[1], 4 * expected, rtol=1e-12)
