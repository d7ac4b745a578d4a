"""A value-only plan's derivative is found on first use, as planning would have.

Planning without ``gradient=True`` used to slice the derivative pass too
(Grids_15's partition function: 2.8 of 3.7 s of ``make_plan``), for a
derivative that is mostly never taken. Such a plan now holds a
``_planner.Deferred`` that finds it when ``jax.grad`` traces the plan (or
``describe`` shows it); these tests pin that this changes nothing: the same
chunks, costs and gradient limit as the eager planning of the same request,
the same chunks in the derivative that runs, within the memory limit.
"""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import einslice
from einslice._exec import _jvp
from einslice._plan import _planner
from einslice._plan._equation import build_equation, parse_subscripts
from einslice._plan._request import PlanRequest
from einslice._plan._types import Derivative, Placement

SEED = "ij,ik,il,jk,jl,kl->ij"
CHAIN = "ab,bc,cd,de,ef->af"  # no operand of output indices only: deferred


def _request(subscripts, shapes, limit, **kw) -> PlanRequest:
    eq = build_equation(parse_subscripts(subscripts, len(shapes)), tuple(shapes))
    return PlanRequest(eq, 4, "float32", limit, **kw)


def _eager(request: PlanRequest) -> Derivative:
    """The derivative as planning found it before it was deferred.

    `_finish` of the same body and forward slicing, made eager by asking for
    the gradient (which `_finish` reads for nothing else: the gradient limit
    is re-planned without it either way).
    """
    found = _planner._found(request)
    eager = replace(request, gradient=True)
    parts = _planner._finish(eager, found.body, found.forward)
    assert isinstance(parts.derived, _planner._Derived)
    return _planner._derivative_of(parts.derived, request.cast_bytes)


def _temp_bytes(fn, *args) -> int:
    stats = jax.jit(fn).lower(*args).compile().memory_analysis()
    assert stats is not None, "this backend reports no memory analysis"
    return stats.temp_size_in_bytes


# A 5-matrix chain of 40x40 (float32): the forward needs 26-103 kB unsliced,
# the derivative (with the operands' cotangents) at least 101-131 kB.
CHAIN_SHAPES = [(40, 40)] * 5
# limits under which the derivative is sliced and fits, or cannot fit ("sum"
# and "log" slice the forward at the lowest ones)
CHAIN_LIMITS = [140_000, 110_000, 60_000, 30_000]
# (semiring, limit) whose value-only plan slices its derivative and fits
# (the "log" and "max" cases take 8-13 s each on 2 cores: slow)
FITTING = [
    ("sum", 110_000),
    pytest.param("log", 140_000, marks=pytest.mark.slow),
    pytest.param("max", 140_000, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("semiring", ["sum", "log", "max"])
@pytest.mark.parametrize("limit", CHAIN_LIMITS)
def test_a_deferred_derivative_is_what_planning_found_eagerly(semiring, limit):
    request = _request(CHAIN, CHAIN_SHAPES, limit, semiring=semiring)
    plan = _planner.make_plan(request)
    assert isinstance(plan.derivative, _planner.Deferred)
    assert plan.derivative.resolve() == _eager(request)
    assert plan.tangent_chunks == plan.derivative.resolve().chunks
    # two devices: the derivative is re-spread over them too
    spread = replace(request, placement=Placement(devices=2))
    spread_plan = _planner.make_plan(spread)
    assert spread_plan.derivative.resolve() == _eager(spread)


def test_value_only_planning_does_not_slice_the_derivative(monkeypatch):
    calls = []
    slicing = _planner._tangent_slicing

    def counted(*args, **kwargs):
        calls.append(args)
        return slicing(*args, **kwargs)

    monkeypatch.setattr(_planner, "_tangent_slicing", counted)
    # sizes no other test plans: not in the planner's caches
    shapes = [(41, 42), (42, 43), (43, 44), (44, 45), (45, 46)]
    plan = einslice.plan(CHAIN, *shapes, memory_limit="60kB")
    assert not calls, "planning the value sliced the derivative"
    assert plan.tangent_chunks and calls  # found on first use
    found = len(calls)  # (with the re-plans that find its gradient limit)
    assert plan.gradient_limit > plan.memory_limit
    assert str(plan) and len(calls) == found  # once


def test_a_hoisting_plan_slices_its_derivative_when_planned():
    # the seed's ij leaves the loop only if the derivative fits beside it:
    # the forward plan depends on the derivative's slicing, found eagerly
    request = _request(SEED, [(32, 32)] * 6, 256_000)
    plan = _planner.make_plan(request)
    assert plan.hoisted == 1 and isinstance(plan.derivative, Derivative)
    assert plan == _planner.make_plan(replace(request, gradient=True))


@pytest.mark.parametrize(
    ("semiring", "limit"),
    [("sum", 140_000), ("sum", 110_000), ("log", 140_000), ("max", 140_000)],
)
def test_value_only_plan_takes_the_gradient_plans_derivative_where_it_fits(
    semiring, limit
):
    kw = {"memory_limit": limit, "semiring": semiring}
    value_only = einslice.plan(CHAIN, *CHAIN_SHAPES, **kw)
    with_grad = einslice.plan(CHAIN, *CHAIN_SHAPES, **kw, gradient=True)
    assert value_only.tangent_cost.peak_bytes <= limit  # so the same plan
    assert (value_only.path, value_only.chunks) == (with_grad.path, with_grad.chunks)
    assert value_only.tangent_chunks == with_grad.tangent_chunks
    assert value_only.tangent_cost == with_grad.tangent_cost
    assert value_only.gradient_limit == with_grad.gradient_limit == limit
    assert str(value_only) == str(with_grad)


@pytest.mark.parametrize(("semiring", "limit"), FITTING)
def test_grad_of_a_value_only_plan_runs_its_chunks_within_the_limit(
    semiring, limit, monkeypatch
):
    plan = einslice.plan(CHAIN, *CHAIN_SHAPES, memory_limit=limit, semiring=semiring)
    assert plan.chunks != plan.tangent_chunks and plan.tangent_chunks
    seen = []
    sweep = _jvp.tangent_sweep

    def spy(p, *args, **kwargs):
        seen.append(p.tangent_chunks)
        return sweep(p, *args, **kwargs)

    monkeypatch.setattr(_jvp, "tangent_sweep", spy)
    argnums = tuple(range(len(CHAIN_SHAPES)))
    grad = jax.grad(lambda *ops: jnp.sum(plan(*ops)), argnums=argnums)
    structs = [jax.ShapeDtypeStruct(s, jnp.float32) for s in CHAIN_SHAPES]
    assert _temp_bytes(grad, *structs) <= limit
    assert seen and set(seen) == {plan.tangent_chunks}
    rng = np.random.default_rng(0)
    ops = [jnp.asarray(rng.random(s), jnp.float32) / 8 for s in CHAIN_SHAPES]
    got = grad(*ops)
    whole = einslice.plan(CHAIN, *CHAIN_SHAPES, semiring=semiring, memory_limit=None)
    assert not whole.chunks and not whole.tangent_chunks
    want = jax.grad(lambda *o: jnp.sum(whole(*o)), argnums=argnums)(*ops)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_grad_of_a_value_only_plan_that_cannot_fit_names_its_limit():
    limit = CHAIN_LIMITS[-1]
    plan = einslice.plan(CHAIN, *CHAIN_SHAPES, memory_limit=limit)
    assert plan.gradient_limit > limit
    ops = [jnp.ones(s, jnp.float32) for s in CHAIN_SHAPES]
    with pytest.raises(einslice.MemoryLimitError) as caught:
        jax.grad(lambda *o: jnp.sum(plan(*o)))(*ops)
    assert caught.value.smallest_limit == plan.gradient_limit
    retry = einslice.plan(
        CHAIN, *CHAIN_SHAPES, memory_limit=plan.gradient_limit, gradient=True
    )
    assert retry.tangent_cost.peak_bytes <= plan.gradient_limit


def test_deferred_plans_compare_and_hash_by_what_fixes_the_derivative():
    request = _request(CHAIN, CHAIN_SHAPES, CHAIN_LIMITS[0])
    plan = _planner._plan_of(request, _planner._planned(request))
    again = _planner._plan_of(request, _planner._finish(request, *_body(request)))
    assert plan.derivative is not again.derivative
    assert plan == again and hash(plan) == hash(again)
    # another precision changes no derivative
    other = replace(request, precision="highest")
    assert _planner.make_plan(other).derivative == plan.derivative
    # another limit does: not equal
    tighter = _planner.make_plan(replace(request, memory_limit=CHAIN_LIMITS[1]))
    assert tighter.derivative != plan.derivative


def _body(request):
    found = _planner._found(request)
    return found.body, found.forward
