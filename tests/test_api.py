"""The public API against numpy.einsum and jnp.einsum (docs/CONTRACT.md, issue 2).

Properties over random equations (tests/strategies.py) under several memory
limits, then jnp.einsum parity on every kind of input jnp.einsum accepts, then
the Plan object.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import cotengra
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, target
from hypothesis import strategies as st
from jax import lax
from numpy.typing import DTypeLike

import einslice
from einslice._plan._profile import CPU_DEFAULT
from strategies import (
    LETTERS,
    Equation,
    assert_close_to_einsum,
    equations,
    feasible_plan,
    limit_fractions,
    limit_from_fraction,
    random_operands,
    seeds,
    sliceable_equations,
    tight_limit_fractions,
)

SEED = "ij,ik,il,jk,jl,kl->ij"


def _einsum_at(eq: Equation, ops, fraction, **kwargs):
    """einslice.einsum at ``fraction`` of the unsliced peak; returns (result, plan)."""
    limit = limit_from_fraction(eq.subscripts, eq.shapes, fraction)
    p, limit = feasible_plan(eq.subscripts, eq.shapes, limit, dtype=np.float64)
    return einslice.einsum(eq.subscripts, *ops, memory_limit=limit, **kwargs), p


# --- properties -------------------------------------------------------------


@given(equations(), seeds, limit_fractions)
def test_matches_numpy_under_memory_limits(eq, seed, fraction):
    ops = random_operands(eq, seed)
    out, p = _einsum_at(eq, ops, fraction)
    target(float(len(p.sliced)), label="sliced indices")
    assert out.dtype == jnp.float64
    assert_close_to_einsum(out, eq, ops)


@pytest.mark.slow
@given(sliceable_equations(), seeds, tight_limit_fractions)
def test_sliced_equals_unsliced_and_numpy(eq, seed, fraction):
    ops = random_operands(eq, seed)
    sliced, p = _einsum_at(eq, ops, fraction)
    _, output = eq.explicit()
    target(float(len(p.sliced)), label="sliced indices")
    target(float(len(set(p.sliced) & set(output))), label="sliced output indices")
    whole = jnp.einsum(eq.subscripts, *ops)  # the same pairwise steps, unsliced
    np.testing.assert_allclose(sliced, whole, rtol=1e-10, atol=1e-10)
    assert_close_to_einsum(sliced, eq, ops)


@given(equations(min_size=3, max_size=8, max_elements=4096))
def test_small_einsums_that_fit_are_not_sliced(eq):
    # Issue 2: "When no slicing is needed the program is the same pairwise
    # contraction jnp.einsum would run ... no overhead on small einsums".
    # These have at most 4096 elements in the whole joint table.
    p = einslice.plan(eq.subscripts, *eq.shapes, dtype=np.float64, profile=CPU_DEFAULT)
    assert p.sliced == {}, str(p)


@given(equations(), limit_fractions)
def test_smallest_limit_is_no_more_than_the_unsliced_peak(eq, fraction):
    # MemoryLimitError.smallest_limit promises the smallest feasible limit; the
    # unsliced plan is feasible at its own peak, so it can never be above it.
    unsliced = einslice.plan(eq.subscripts, *eq.shapes, dtype=np.float64)
    limit = max(1, int(unsliced.peak_bytes * (fraction or 0.0)))
    try:
        einslice.plan(eq.subscripts, *eq.shapes, dtype=np.float64, memory_limit=limit)
    except einslice.MemoryLimitError as e:
        assert e.smallest_limit <= unsliced.peak_bytes, (
            f"{eq.subscripts} {eq.shapes}: memory_limit={limit} raised with "
            f"smallest_limit={e.smallest_limit}, but the unsliced plan needs only "
            f"{unsliced.peak_bytes}"
        )


@pytest.mark.slow
@given(sliceable_equations(), seeds, limit_fractions)
def test_plan_call_matches_einsum(eq, seed, fraction):
    ops = random_operands(eq, seed)
    limit = limit_from_fraction(eq.subscripts, eq.shapes, fraction)
    p, limit = feasible_plan(eq.subscripts, ops, limit)
    np.testing.assert_allclose(
        p(*ops),
        einslice.einsum(eq.subscripts, *ops, memory_limit=limit),
        rtol=1e-12,
        atol=1e-12,
    )


@given(equations(), limit_fractions)
def test_plan_path_is_a_valid_pairwise_path(eq, fraction):
    limit = limit_from_fraction(eq.subscripts, eq.shapes, fraction)
    p, limit = feasible_plan(eq.subscripts, eq.shapes, limit)
    n = len(eq.terms)
    remaining = n
    for step in p.path:
        assert len(step) == 2, f"step {step} of {p.path} is not a pair"
        a, b = step
        assert a != b and 0 <= a < remaining and 0 <= b < remaining, p.path
        remaining -= 1
    assert remaining == 1 or (n == 1 and p.path == ()), p.path
    sizes = eq.sizes()
    for index, chunk in p.sliced.items():
        assert isinstance(chunk, int) and chunk >= 1, p.sliced
        if index in sizes:  # ellipsis dimensions have einslice's own names
            assert chunk < sizes[index], (index, chunk, sizes)
    if limit is not None:
        assert p.peak_bytes <= limit
        assert p.memory_limit == limit


@pytest.mark.slow
@given(equations(ellipsis=True, max_operands=4), seeds)
def test_interleaved_form_accepts_any_int_labels(eq, seed):
    ops = random_operands(eq, seed)

    def big(c):
        return 10**6 + 7919 * LETTERS.index(c)

    out = einslice.einsum(*eq.interleaved(ops, label=big))
    assert_close_to_einsum(out, eq, ops)
    small = eq.interleaved(ops, label=LETTERS.index)
    expected = jnp.einsum(*small)
    got = einslice.einsum(*small)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


@settings(max_examples=10)
@given(equations(max_operands=4, max_elements=256), seeds)
def test_naive_einsum_matches_numpy(eq, seed):
    ops = random_operands(eq, seed)
    assert_close_to_einsum(einslice.naive_einsum(eq.subscripts, *ops), eq, ops)


# --- forced slicing, chunk sizes that do not divide -------------------------


def test_output_indices_and_several_indices_are_sliced_when_that_is_what_fits():
    # Every index is an output index and every pairwise intermediate has three
    # of the four size-n indices: below n**2 elements, at least two indices must
    # be sliced, and all of them are output indices.
    n = 8
    eq = Equation(("ia", "ib", "ic"), "iabc", ((n, n),) * 3)
    ops = random_operands(eq, 0)
    for limit in (n**3 * 8 // 2, n**2 * 8 // 2, 64):
        p, used = feasible_plan(eq.subscripts, ops, limit)
        assert used is not None and p.sliced, str(p)
        assert set(p.sliced) <= set("iabc")
        if used < n**2 * 8:
            assert len(p.sliced) >= 2, str(p)
        out = einslice.einsum(eq.subscripts, *ops, memory_limit=used)
        assert_close_to_einsum(out, eq, ops)


def test_seed_formula_sliced_several_ways_matches_numpy():
    n = 12
    eq = Equation(tuple(SEED.split("->")[0].split(",")), "ij", ((n, n),) * 6)
    ops = random_operands(eq, 1)
    unsliced = einslice.plan(SEED, *ops).peak_bytes
    seen = set()
    for fraction in (0.5, 0.1, 0.02, 0.0):
        limit = max(1, int(unsliced * fraction))
        p, used = feasible_plan(SEED, ops, limit)
        seen.add(tuple(sorted(p.sliced.items())))
        out = einslice.einsum(SEED, *ops, memory_limit=used)
        assert_close_to_einsum(out, eq, ops)
    assert len(seen) >= 2, seen  # the limits did change the slicing


def test_chunk_sizes_that_do_not_divide_the_dimension():
    # Prime sizes: any chunk strictly between 1 and the size leaves a ragged
    # last chunk. Slicing one value at a time must not be the only answer.
    eq = Equation(("ij", "jk", "kl"), "il", ((7, 13), (13, 11), (11, 7)))
    ops = random_operands(eq, 2)
    ragged = []
    unsliced = einslice.plan(eq.subscripts, *ops).peak_bytes
    for fraction in (0.9, 0.7, 0.5, 0.35, 0.25, 0.15, 0.1, 0.05):
        limit = max(1, int(unsliced * fraction))
        p, used = feasible_plan(eq.subscripts, ops, limit)
        sizes = eq.sizes()
        ragged += [(i, c) for i, c in p.sliced.items() if sizes[i] % c]
        out = einslice.einsum(eq.subscripts, *ops, memory_limit=used)
        assert_close_to_einsum(out, eq, ops)
        assert_close_to_einsum(p(*ops), eq, ops)
    assert ragged, "no plan used a chunk size that leaves a ragged last chunk"


# --- parity with jnp.einsum ---------------------------------------------------

JNP_CASES = [
    # (subscripts, shapes); grouped by kind, as in opt_einsum's test_contract.
    # explicit and implicit output
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("ba,cb", [(3, 4), (5, 3)]),
    ("ij,jk->ki", [(3, 4), (4, 5)]),
    ("abc,cd,de->eab", [(2, 3, 4), (4, 5), (5, 2)]),
    # ellipsis and size-1 broadcasting
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...ij,...jk", [(2, 3, 4), (1, 4, 2)]),
    ("i...,...->...", [(3, 2, 1), (4,)]),
    ("ij...,jk...->ik...", [(2, 3), (3, 4, 5)]),
    ("...ij->ij", [(2, 3, 4)]),  # jnp sums an ellipsis the output omits
    ("ij,ij->ij", [(2, 1), (2, 3)]),
    ("ij,jk->ik", [(3, 1), (5, 4)]),
    ("ab,b->a", [(1, 3), (3,)]),
    # repeated indices: diagonals and traces
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("ii->", [(4, 4)]),
    ("iij,jk->ik", [(3, 3, 2), (2, 4)]),
    ("ijji->", [(2, 3, 3, 2)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("ii,i->i", [(1, 1), (3,)]),
    # indices in one operand only (summed before contraction)
    ("ij,k->i", [(3, 4), (5,)]),
    ("ijk,kl->l", [(2, 3, 4), (4, 5)]),
    # scalars
    ("", [()]),
    (",->", [(), ()]),
    (",i->i", [(), (3,)]),
    ("i,i", [(4,), (4,)]),
    ("i,j", [(2,), (3,)]),
    # 0-size dimensions
    ("ij,jk->ik", [(0, 3), (3, 4)]),
    ("ij,jk->ik", [(2, 0), (0, 4)]),
    ("ij->", [(0, 3)]),
    ("ij,jk,kl->il", [(2, 3), (3, 0), (0, 4)]),
    # many operands
    (SEED, [(3, 3)] * 6),
    ("ab,bc,cd,de,ef,fg,gh,ha->", [(2, 3), (3, 2), (2, 3), (3, 2)] * 2),
]


def _ops_for(shapes, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return [np.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes]


def assert_matches_jnp(args, kwargs=None, *, rtol=1e-10):
    """Same shape, dtype and values as ``jnp.einsum(*args, **kwargs)``.

    Inexact values may differ by ``rtol`` of Σ Π |operands| (the scale of the
    rounding error of any summation order); exact dtypes must agree exactly.
    """
    kwargs = kwargs or {}
    jnp_kwargs = {k: v for k, v in kwargs.items() if k != "memory_limit"}
    expected = jnp.einsum(*args, **jnp_kwargs)
    actual = einslice.einsum(*args, **kwargs)
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if not jnp.issubdtype(expected.dtype, jnp.inexact):
        np.testing.assert_array_equal(actual, expected)
        return actual
    scale = 1.0
    if isinstance(args[0], str):
        magnitudes = [np.abs(np.asarray(x).astype(np.complex128)) for x in args[1:]]
        scale = np.asarray(jnp.einsum(args[0], *magnitudes))
    err = np.abs(
        np.asarray(actual).astype(np.complex128)
        - np.asarray(expected).astype(np.complex128)
    )
    assert np.all(err <= rtol * scale + rtol * np.finfo(np.float64).tiny), (
        f"max error {err.max()} vs {rtol} x {np.max(scale)}"
    )
    return actual


def slicing_limit(
    subscripts, shapes, dtype: DTypeLike = np.float64, **plan_kwargs
) -> int:
    """A limit under which the plan slices: half the unsliced peak (or, if that is
    infeasible, the smallest feasible limit). Fails if the plan does not slice."""
    unsliced = einslice.plan(subscripts, *shapes, dtype=dtype, **plan_kwargs)
    p, limit = feasible_plan(
        subscripts, shapes, max(1, unsliced.peak_bytes // 2), dtype=dtype, **plan_kwargs
    )
    assert p.sliced, f"{subscripts} {list(shapes)} is not sliced at {limit}:\n{p}"
    assert limit is not None
    return limit


def _scaled(shapes, factor):
    """Every dimension larger than 1 times ``factor`` (0 and 1 stay)."""
    return [tuple(d * factor if d > 1 else d for d in s) for s in shapes]


@pytest.mark.parametrize(("subscripts", "shapes"), JNP_CASES)
def test_matches_jnp_einsum(subscripts, shapes):
    ops = _ops_for(shapes)
    assert_matches_jnp([subscripts, *ops])
    # float32 too: jnp keeps float32 under x64, and so must einslice.
    ops32 = [x.astype(np.float32) for x in ops]
    assert_matches_jnp([subscripts, *ops32], rtol=1e-5)


# The kinds of JNP_CASES that have something to slice, 8 times bigger.
SLICED_JNP_CASES = [
    (s, _scaled(shapes, 8))
    for s, shapes in JNP_CASES
    if s
    in {
        "ij,jk",
        "ij,jk->ki",
        "ba,cb",
        "abc,cd,de->eab",
        "...ij,...jk->...ik",
        "...ij,...jk",
        "ij...,jk...->ik...",
        "...ij->ij",
        "ij,ij->ij",
        "iij,jk->ik",
        "...ii->...i",
        "ijk,kl->l",
        "ij,jk,kl->il",
        SEED,
        "ab,bc,cd,de,ef,fg,gh,ha->",
    }
]


@pytest.mark.parametrize(("subscripts", "shapes"), SLICED_JNP_CASES)
def test_matches_jnp_einsum_sliced(subscripts, shapes):
    ops = _ops_for(shapes)
    limit = slicing_limit(subscripts, shapes)
    assert_matches_jnp([subscripts, *ops], {"memory_limit": limit})
    ops32 = [x.astype(np.float32) for x in ops]
    limit = slicing_limit(subscripts, shapes, np.float32)
    assert_matches_jnp([subscripts, *ops32], {"memory_limit": limit}, rtol=1e-5)


def test_accepts_python_scalars_and_numpy_arrays_like_jnp():
    x = np.arange(3, dtype=np.float32)
    assert_matches_jnp([",->", 2.0, 3.0])
    assert_matches_jnp(["i,->i", x, 2.0])  # weak-typed scalar keeps float32
    assert_matches_jnp(["i,->i", x, 2])


DTYPE_PAIRS = [
    (np.float32, np.float32),
    (np.float64, np.float64),
    (np.int32, np.float32),
    (np.int32, np.int32),
    (np.int8, np.int8),
    (np.bool_, np.bool_),
    (np.bool_, np.float32),
    (np.float16, np.float32),
    (jnp.bfloat16, jnp.bfloat16),
    (np.float32, np.complex64),
    (np.complex128, np.complex128),
    (np.float64, np.complex64),
]


def _values(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(np.dtype(dtype), np.integer):
        return rng.integers(-3, 4, shape).astype(dtype)
    x = rng.standard_normal(shape)
    if np.issubdtype(np.dtype(dtype), np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return jnp.asarray(x, dtype=dtype)


@pytest.mark.parametrize("sliced", [False, True], ids=["unsliced", "sliced"])
@pytest.mark.parametrize(
    ("a", "b"),
    DTYPE_PAIRS,
    ids=[f"{jnp.dtype(a)}-{jnp.dtype(b)}" for a, b in DTYPE_PAIRS],
)
def test_mixed_dtypes_promote_like_jnp(a, b, sliced):
    subscripts = "ij,jk,kl->il"
    shapes = [(64, 96), (96, 64), (64, 32)]
    ops = [_values(shapes[0], a, 0), _values(shapes[1], b, 1), _values(shapes[2], a, 2)]
    limit = None
    if sliced:
        limit = einslice.plan(subscripts, *ops).peak_bytes // 2
        p, limit = feasible_plan(subscripts, ops, limit)
        assert p.sliced, str(p)
    low = {jnp.dtype(jnp.bfloat16), jnp.dtype(np.float16)}
    rtol = 2e-2 if {jnp.dtype(a), jnp.dtype(b)} & low else 1e-5
    assert_matches_jnp([subscripts, *ops], {"memory_limit": limit}, rtol=rtol)


@dataclasses.dataclass
class _CountingOptimizer:
    """A path optimizer whose class defines __eq__ but not __hash__."""

    calls: int = 0

    def __call__(self, inputs, output, sizes, memory_limit=None):
        self.calls += 1
        return [(0, 1)] * (len(inputs) - 1)


def test_an_unhashable_optimizer_object_is_used_and_planned_once():
    # A plain @dataclass is unhashable: plans are cached on their request,
    # and hashing it made every call fail with a TypeError.
    optimizer = _CountingOptimizer()
    ops = _ops_for([(3, 4), (4, 5), (5, 2)])
    for _ in range(2):
        out = einslice.einsum("ij,jk,kl->il", *ops, optimize=optimizer)
        np.testing.assert_allclose(out, np.einsum("ij,jk,kl->il", *ops), rtol=1e-10)
    assert optimizer.calls == 1  # cached by the object's identity
    other = _CountingOptimizer()
    einslice.plan("ij,jk,kl->il", *ops, optimize=other)
    assert other.calls == 1  # another object is another key


def test_an_unhashable_optimize_that_is_not_callable_is_refused_clearly():
    with pytest.raises(einslice.EinsliceError, match="is not understood"):
        einslice.plan("ij,jk->ik", (2, 3), (3, 4), optimize={"x": 1})


OPTIMIZERS = [
    "auto",
    "greedy",
    "optimal",
    "dp",
    True,
    False,
    [(1, 2), (0, 2), (0, 1)],
    "cotengra",
]


@pytest.mark.parametrize("optimize", OPTIMIZERS, ids=str)
@pytest.mark.parametrize("sliced", [False, True], ids=["unsliced", "sliced"])
def test_optimize_options(optimize, sliced):
    if optimize == "cotengra":
        optimize = cotengra.HyperOptimizer(
            max_repeats=4,
            methods=["greedy"],
            parallel=False,  # pyright: ignore[reportArgumentType]
        )
    subscripts = "ab,bc,cd,da->ac"
    shapes = [(18, 24), (24, 30), (30, 36), (36, 18)]
    ops = _ops_for(shapes)
    limit = slicing_limit(subscripts, shapes) if sliced else None
    try:
        p = einslice.plan(subscripts, *ops, optimize=optimize, memory_limit=limit)
    except einslice.MemoryLimitError as e:  # the path is fixed: may need more
        limit = e.smallest_limit
        p = einslice.plan(subscripts, *ops, optimize=optimize, memory_limit=limit)
    if isinstance(optimize, list):  # followed, up to the order within a pair
        assert [sorted(s) for s in p.path] == [sorted(s) for s in optimize]
    assert bool(p.sliced) == sliced, str(p)
    out = einslice.einsum(subscripts, *ops, optimize=optimize, memory_limit=limit)
    np.testing.assert_allclose(out, np.einsum(subscripts, *ops), rtol=1e-10)
    if not isinstance(optimize, cotengra.HyperOptimizer):
        assert_matches_jnp(
            [subscripts, *ops], {"optimize": optimize, "memory_limit": limit}
        )


def test_usable_as_the_einsum_fn_of_code_written_for_jnp():
    def layer(x, w, v, einsum_fn=jnp.einsum):
        h = einsum_fn(
            "bi,io,o->bo", x, w, v, optimize="greedy", precision=lax.Precision.HIGHEST
        )
        return einsum_fn("bo,bo->b", h, h, optimize=True, precision="highest")

    rng = np.random.default_rng(0)
    x, w, v = rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), np.ones(5)
    expected = layer(x, w, v)
    for fn in (einslice.einsum, functools.partial(einslice.einsum, memory_limit=64)):
        try:
            got = layer(x, w, v, einsum_fn=fn)
        except einslice.MemoryLimitError as e:
            fn = functools.partial(einslice.einsum, memory_limit=e.smallest_limit)
            got = layer(x, w, v, einsum_fn=fn)
        np.testing.assert_allclose(got, expected, rtol=1e-10)
        np.testing.assert_allclose(
            jax.jit(layer, static_argnums=3)(x, w, v, fn), expected
        )


def test_more_than_52_indices_through_the_interleaved_form():
    n, d = 60, 16
    rng = np.random.default_rng(0)
    # orthogonal factors keep the product of 60 matrices well scaled
    mats = [np.linalg.qr(rng.standard_normal((d, d)))[0] for _ in range(n)]
    args = []
    for k, m in enumerate(mats):
        args += [m, [k, k + 1]]
    expected = np.linalg.multi_dot(mats)
    p = einslice.plan(*args, [0, n])
    assert len(p.path) == n - 1
    out = einslice.einsum(*args, [0, n])
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(p(*mats), expected, rtol=1e-10, atol=1e-12)
    # (sliced: see test_regressions.test_a_limit_that_a_frugal_order_meets_is_feasible)


# --- precision and preferred_element_type -----------------------------------


def _eqns(jaxpr):
    """Every equation of a jaxpr, nested ones (scan, while, cond, pjit) included."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple | list) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _eqns(inner)


def dot_generals(fn, *args):
    jaxpr = jax.make_jaxpr(fn)(*args)
    return [e for e in _eqns(jaxpr.jaxpr) if e.primitive.name == "dot_general"]


@pytest.mark.parametrize("sliced", [False, True], ids=["unsliced", "sliced"])
@pytest.mark.parametrize(
    "precision", [lax.Precision.HIGHEST, "high", lax.Precision.DEFAULT]
)
def test_precision_reaches_every_dot_general(precision, sliced):
    subscripts = "ij,jk,kl->il"
    ops = [jnp.ones((32, 32), jnp.float32)] * 3
    limit = slicing_limit(subscripts, [(32, 32)] * 3, np.float32) if sliced else None
    [ref] = dot_generals(
        lambda a, b: jnp.einsum("ij,jk->ik", a, b, precision=precision), *ops[:2]
    )
    dots = dot_generals(
        lambda *o: einslice.einsum(
            subscripts, *o, precision=precision, memory_limit=limit
        ),
        *ops,
    )
    assert dots
    for d in dots:
        assert d.params["precision"] == ref.params["precision"], d.params


@pytest.mark.parametrize("sliced", [False, True], ids=["unsliced", "sliced"])
def test_preferred_element_type_accumulates_wide(sliced):
    subscripts = "ij,jk->ik"
    a = jnp.full((48, 64), 100, jnp.int8)
    b = jnp.full((64, 40), 100, jnp.int8)
    limit = None
    if sliced:  # planned for 4-byte int32 results: a limit that slices those
        limit = slicing_limit(subscripts, [a.shape, b.shape], np.int32)
    out = assert_matches_jnp(
        [subscripts, a, b],
        {"memory_limit": limit, "preferred_element_type": jnp.int32},
    )
    assert out.dtype == jnp.int32 and int(out[0, 0]) == 64 * 100 * 100

    def f(x, y):
        return einslice.einsum(
            subscripts, x, y, preferred_element_type=jnp.int32, memory_limit=limit
        )

    dots = dot_generals(f, a, b)
    assert dots and all(d.params["preferred_element_type"] == jnp.int32 for d in dots)
    loops = [e for e in _eqns(jax.make_jaxpr(f)(a, b).jaxpr)]
    assert sliced == any(e.primitive.name in ("scan", "while") for e in loops)

    x = jnp.asarray(np.random.default_rng(0).standard_normal((5, 6)), jnp.bfloat16)
    assert_matches_jnp(
        ["ij,jk->ik", x, x.T], {"preferred_element_type": jnp.float32}, rtol=1e-6
    )


# --- the Plan object ----------------------------------------------------------


def test_plan_accepts_arrays_shape_structs_and_shape_tuples():
    shapes = [(20, 30), (30, 40), (40, 20)]
    arrays = [jnp.ones(s, jnp.float32) for s in shapes]
    structs = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    limit = einslice.plan("ij,jk,ki->", *arrays).peak_bytes // 2
    plans = [
        einslice.plan("ij,jk,ki->", *arrays, memory_limit=limit),
        einslice.plan("ij,jk,ki->", *structs, memory_limit=limit),
        einslice.plan("ij,jk,ki->", *shapes, memory_limit=limit),  # float32 default
    ]
    assert plans[0].sliced, str(plans[0])
    for p in plans[1:]:
        assert (p.path, p.sliced, p.flops, p.peak_bytes) == (
            plans[0].path,
            plans[0].sliced,
            plans[0].flops,
            plans[0].peak_bytes,
        )
    wide = einslice.plan("ij,jk,ki->", *shapes, dtype=np.float64)
    narrow = einslice.plan("ij,jk,ki->", *shapes)
    assert wide.peak_bytes > narrow.peak_bytes
    np.testing.assert_allclose(
        plans[2](*arrays), jnp.einsum("ij,jk,ki->", *arrays), rtol=1e-5
    )


def test_plan_attributes_and_report():
    n = 64
    p = einslice.plan(SEED, *[(n, n)] * 6, memory_limit="1MB")
    assert p.sliced, str(p)
    assert p.memory_limit == 1_000_000
    assert isinstance(p.path, tuple) and len(p.path) == 5
    assert all(isinstance(s, tuple) and len(s) == 2 for s in p.path)
    assert isinstance(p.flops, int) and isinstance(p.naive_flops, int)
    assert 0 < p.flops < p.naive_flops  # a path beats the n**4 * 6 loop nest
    assert 0 < p.peak_bytes <= 1_000_000

    text = str(p)
    low = text.lower()
    for index, chunk in p.sliced.items():
        assert re.search(rf"\b{index}\b.*\b{chunk}\b", text), text
    assert "flop" in low and "naive" in low and "peak" in low, text
    assert re.search(r"path", low), text
    # the path's pairs appear, and the numbers are there in some form
    assert all(f"{a}, {b}" in text or f"{a},{b}" in text for a, b in p.path), text
    assert "\n" not in repr(p)

    unsliced = einslice.plan("ij,jk->ik", (4, 5), (5, 6))
    assert unsliced.sliced == {} and unsliced.path == ((0, 1),)
    assert unsliced.flops == unsliced.naive_flops or unsliced.flops > 0


def test_plan_is_deterministic():
    a = einslice.plan(SEED, *[(32, 32)] * 6, memory_limit="100KB")
    b = einslice.plan(SEED, *[(32, 32)] * 6, memory_limit=100_000)
    assert (a.path, a.sliced, a.flops, a.peak_bytes) == (
        b.path,
        b.sliced,
        b.flops,
        b.peak_bytes,
    )


def test_default_memory_limit_is_a_positive_byte_count():
    p = einslice.plan("ij,jk->ik", (4, 5), (5, 6))
    assert isinstance(p.memory_limit, int) and p.memory_limit > 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("256MB", 256_000_000),
        ("16MB", 16_000_000),
        ("1GB", 10**9),
        ("1MiB", 2**20),
        ("4GiB", 4 * 2**30),
        ("512MB", 512 * 10**6),
        (12345, 12345),
    ],
)
def test_parse_memory_limit(text, expected):
    assert einslice.parse_memory_limit(text) == expected


@given(st.integers(1, 10**4), st.sampled_from(["MB", "GB", "MiB", "GiB"]))
def test_parse_memory_limit_units(value, unit):
    scale = {"MB": 10**6, "GB": 10**9, "MiB": 2**20, "GiB": 2**30}[unit]
    assert einslice.parse_memory_limit(f"{value}{unit}") == value * scale
    p = einslice.plan("ij,jk->ik", (2, 2), (2, 2), memory_limit=f"{value}{unit}")
    assert p.memory_limit == value * scale
