"""The memory limit bounds what XLA compiles; sliced plans loop, unsliced ones don't.

Temporary bytes come from ``jax.jit(f).lower(...).compile().memory_analysis()``
(no device memory is allocated: nothing here runs at the big sizes).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import Phase, given, settings

import einslice
from strategies import (
    feasible_plan,
    limit_fractions,
    limit_from_fraction,
    random_operands,
    seeds,
    sliceable_equations,
    tight_limit_fractions,
)

SEED = "ij,ik,il,jk,jl,kl->ij"


def temp_bytes(fn, *args) -> int:
    stats = jax.jit(fn).lower(*args).compile().memory_analysis()
    assert stats is not None, "this backend reports no memory analysis"
    return stats.temp_size_in_bytes


def structs(shapes, dtype):
    return [jax.ShapeDtypeStruct(s, dtype) for s in shapes]


def _loss(subscripts, limit):
    def loss(*ops):
        return jnp.sum(einslice.einsum(subscripts, *ops, memory_limit=limit))

    return loss


def _all_grads(fn, n):
    return jax.grad(fn, argnums=tuple(range(n)))


# --- the seed's formula: jnp.einsum asks for 17 GB ------------------------------


def test_seed_formula_n256_fits_16MB():
    args = structs([(256, 256)] * 6, jnp.float32)
    assert temp_bytes(lambda *o: jnp.einsum(SEED, *o), *args) > 16_000_000
    p = einslice.plan(SEED, *args, memory_limit="16MB")
    assert p.sliced and p.peak_bytes <= 16_000_000, str(p)
    got = temp_bytes(lambda *o: einslice.einsum(SEED, *o, memory_limit="16MB"), *args)
    assert got <= 16_000_000, got


def test_seed_formula_n256_gradient_fits_16MB():
    args = structs([(256, 256)] * 6, jnp.float32)
    grad = _all_grads(_loss(SEED, "16MB"), 6)
    got = temp_bytes(grad, *args)
    assert got <= 16_000_000, got


def test_seed_formula_n256_log_semiring_fits_16MB():
    args = structs([(256, 256)] * 6, jnp.float32)

    def f(*o):
        return einslice.log_einsum(SEED, *o, memory_limit="16MB")

    assert temp_bytes(f, *args) <= 16_000_000
    grad = jax.grad(lambda *o: jnp.sum(f(*o)), argnums=tuple(range(6)))
    assert temp_bytes(grad, *args) <= 16_000_000


def test_a_many_step_log_gradient_counts_every_steps_exponentials():
    # The derivative of a "log" plan recomputes a chunk's steps and keeps each
    # step's shifted exponentials for the backward pass, all at once: on many
    # steps that sum, not twice the forward's peak, bounds the compiled
    # gradient (UAI 2014's linkage_15: 7.8 GB compiled for 608 MB predicted).
    n_mats, n = 40, 48
    labels = [chr(0x100 + i) for i in range(n_mats + 1)]
    chain = ",".join(labels[i] + labels[i + 1] for i in range(n_mats))
    chain += "->" + labels[0] + labels[-1]
    args = structs([(n, n)] * n_mats, jnp.float32)
    plan = einslice.plan(chain, *args, semiring="log", gradient=True)
    exps = 2 * n_mats * 2 * n * n * 4  # both sides' exponentials, and cotangents
    assert plan.tangent_cost.peak_bytes >= exps > 2 * plan.peak_bytes
    limit = plan.tangent_cost.peak_bytes * 9 // 10  # sliced to fit

    def loss(*o):
        out = einslice.einsum(
            chain, *o, semiring="log", memory_limit=limit, gradient=True
        )
        return jnp.sum(out)

    assert temp_bytes(_all_grads(loss, n_mats), *args) <= limit


# The derivative of a "max" ("min") sum takes the first chunk that attains the
# maximum. Carried as a mask of the entries already taken, it was a loop carry
# of the primal values, which reverse mode kept once per chunk: the seed
# formula at n=64 under 459 kB compiled 8.6 MB (2048 chunks of a 4 kB mask),
# at n=256 under 9.96 MB 1.08 GB.
@pytest.mark.parametrize("semiring", ["max", "min"])
@pytest.mark.parametrize(
    "subscripts, limit",
    [(SEED, 459_000), (SEED, 721_000), ("ik,il,jk,jl,kl->ij", 459_000)],
)
def test_selective_gradient_fits(semiring, subscripts, limit):
    n_ops = subscripts.count(",") + 1
    args = structs([(64, 64)] * n_ops, jnp.float32)
    p = einslice.plan(subscripts, *args, memory_limit=limit, semiring=semiring)
    assert p.tangent_chunks and p.tangent_cost.peak_bytes <= limit, str(p)

    def loss(*o):
        return jnp.sum(
            einslice.einsum(subscripts, *o, memory_limit=limit, semiring=semiring)
        )

    got = temp_bytes(_all_grads(loss, n_ops), *args)
    assert got <= limit, (got, limit)


# A "max" or "log" derivative reads the value, a temporary of the gradient
# program: outer products whose output dwarfs their operands compiled 8x
# ("max") and 16x ("log") the limit unsliced, 1.07x with the output sliced.
@pytest.mark.parametrize("semiring", ["max", "min", "log"])
@pytest.mark.parametrize(
    "subscripts, shapes",
    [
        ("f,dff,ege,ha,cd->cdfehga", [(11,), (7, 11, 11), (12, 1, 12), (1, 7), (7, 7)]),
        ("bd,a,ba,aa,dcd->abdc", [(9, 6), (11,), (9, 11), (11, 11), (6, 8, 6)]),
    ],
)
def test_gradient_counts_the_value_it_reads(semiring, subscripts, shapes):
    args = structs(shapes, jnp.float32)
    limit = einslice.plan(subscripts, *args, semiring=semiring).peak_bytes // 2

    def loss(*o, limit):
        out = einslice.einsum(subscripts, *o, memory_limit=limit, semiring=semiring)
        return jnp.sum(out)

    grad = jax.grad(loss, argnums=tuple(range(len(args))))
    try:
        got = temp_bytes(partial(grad, limit=limit), *args)
    except einslice.MemoryLimitError as e:
        limit = e.smallest_limit
        got = temp_bytes(partial(grad, limit=limit), *args)
    assert got <= limit, (got, limit)


@pytest.mark.parametrize("limit", ["1MB", "4MB", "64MB"])
def test_seed_formula_n128_under_other_limits(limit):
    args = structs([(128, 128)] * 6, jnp.float32)
    bound = einslice.parse_memory_limit(limit)
    got = temp_bytes(lambda *o: einslice.einsum(SEED, *o, memory_limit=limit), *args)
    assert got <= bound, (got, bound)
    try:
        assert temp_bytes(_all_grads(_loss(SEED, limit), 6), *args) <= bound
    except einslice.MemoryLimitError as e:  # gradients may need more: say how much
        assert e.smallest_limit > bound
        retry = e.smallest_limit
        assert temp_bytes(_all_grads(_loss(SEED, retry), 6), *args) <= retry


# --- random formulas --------------------------------------------------------------


@settings(max_examples=12)
@given(sliceable_equations(max_size=12, max_elements=2**16), tight_limit_fractions)
def test_compiled_temporaries_within_the_limit(eq, fraction):
    for dtype in (np.float32, np.float64):
        limit = limit_from_fraction(eq.subscripts, eq.shapes, fraction, dtype=dtype)
        p, limit = feasible_plan(eq.subscripts, eq.shapes, limit, dtype=dtype)
        assert limit is not None
        got = temp_bytes(
            lambda *o, limit=limit: einslice.einsum(
                eq.subscripts, *o, memory_limit=limit
            ),
            *structs(eq.shapes, dtype),
        )
        assert got <= limit, (
            f"{eq.subscripts} {eq.shapes} {dtype}: {got} > {limit}\n{p}"
        )


# Each example compiles a derivative, so shrinking a failure would take minutes:
# report the example as found (minimal ones go to test_regressions.py).
@settings(max_examples=4, phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(sliceable_equations(max_operands=4, max_size=12, max_elements=2**16))
def test_compiled_gradient_temporaries_within_the_limit(eq):
    args = structs(eq.shapes, np.float32)
    unsliced = einslice.plan(eq.subscripts, *args)
    limit = max(1, unsliced.peak_bytes // 2)
    for _ in range(3):  # the derivative may ask for more than the forward pass
        try:
            got = temp_bytes(_all_grads(_loss(eq.subscripts, limit), len(args)), *args)
            break
        except einslice.MemoryLimitError as e:
            assert e.smallest_limit > limit
            limit = e.smallest_limit
    else:
        raise AssertionError("no limit was accepted")
    assert got <= limit, f"{eq.subscripts} {eq.shapes}: {got} > {limit}"


# --- jaxpr: one loop when sliced, none when not ----------------------------------

LOOPS = {"scan", "while"}


def _primitives(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn.primitive.name
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple | list) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _primitives(inner)


def primitives(fn, *args) -> list[str]:
    return list(_primitives(jax.make_jaxpr(fn)(*args).jaxpr))


def test_unsliced_matmul_is_one_dot_general_and_no_loop():
    a = jnp.ones((64, 64), jnp.float32)
    prims = primitives(lambda x, y: einslice.einsum("ij,jk->ik", x, y), a, a)
    assert prims.count("dot_general") == 1, prims
    assert not LOOPS & set(prims), prims


# The limit is there to make the plan slice: planned for a TPU, a loop's
# scratch alone (1 MiB, profiles.TPU) is over 20 kB, so the CPU's figures
# plan it on every device.
CPU = einslice.profiles.CPU


def test_sliced_seed_formula_loops():
    args = [jnp.ones((32, 32), jnp.float32)] * 6
    p = einslice.plan(SEED, *args, memory_limit="20KB", profile=CPU)
    assert p.sliced, str(p)
    prims = primitives(
        lambda *o: einslice.einsum(SEED, *o, memory_limit="20KB", profile=CPU), *args
    )
    assert LOOPS & set(prims), prims
    # no Python loop over chunks: far fewer dot_generals than chunks
    assert prims.count("dot_general") <= 2 * len(p.path), prims


@settings(max_examples=15)
@given(sliceable_equations(), limit_fractions, seeds)
def test_a_plan_loops_exactly_when_it_is_sliced(eq, fraction, seed):
    ops = random_operands(eq, seed)
    limit = limit_from_fraction(eq.subscripts, eq.shapes, fraction)
    p, limit = feasible_plan(eq.subscripts, eq.shapes, limit, dtype=np.float64)
    prims = primitives(
        lambda *o: einslice.einsum(eq.subscripts, *o, memory_limit=limit), *ops
    )
    assert bool(LOOPS & set(prims)) == bool(p.sliced), (str(p), prims)


# --- the random-formula check accel_check runs on every device --------------------


def test_the_random_formula_check_holds_here_and_sees_a_failure():
    from einslice.bench._memory_check import Case, Outcome, check_memory_promise

    report = check_memory_promise(8, seed=11)
    assert len(report.outcomes) == 8
    assert not report.failures, [o.line() for o in report.failures]
    accepted = [o for o in report.outcomes if not o.refused]
    assert accepted, "every limit was refused: the check would be empty"
    case = Case("a,a->", ((4,), (4,)), "float64", limit=384)
    over = Outcome(case, 384, 384, False, 384, 516096)
    assert not over.ok and over.line().startswith("FAIL")
