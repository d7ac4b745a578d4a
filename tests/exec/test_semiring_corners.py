"""The host walk and the compiled program at the semirings' corners.

A plan's first calls may walk in numpy (``_exec/_host.py``) and its later
ones run the compiled program (``_exec/_semiring.py``): both must give one
answer, including where the arithmetic is at its edges. The truth here is a
float64 brute force of the definition, one output entry at a time: the
semiring sum (log-sum-exp, max, min) over every assignment of the summed
indices of the semiring product (``+``) of the operands' entries, with
these conventions, which both paths follow:

- the zero annihilates: ``-inf`` (``+inf`` for "min") times anything,
  ``±inf`` included, is the zero, not NaN (the completed max-plus
  semiring's ``ε ⊗ ⊤ = ε``; for "log", ``0 · ∞ = 0``);
- an empty sum (a summed index of size 0) is the zero;
- NaN propagates through products and sums (as in jnp), also past the zero.
  Beside an empty sum a NaN reaches the result or not as the path meets it
  (jnp.einsum's "sum" does the same: ``i,ij->i`` with ``j`` empty gives NaN
  beside a NaN, numpy's unoptimized einsum 0): there the two paths, which
  run one plan, agree with each other, and each entry is NaN or the zero;
- log-sum-exp of ``+inf`` beside finite or ``-inf`` terms is ``+inf``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import einslice
from einslice._exec import _host, _run
from einslice._exec._host import run_on_host
from einslice._exec._host_grad import host_value_and_grad
from strategies import Equation, at_most, equations, seeds

# What operands are drawn from: finite values, ±800 (products whose sides
# peak apart underflow exp), the infinities, and NaN (rarely).
_VALUES = np.array([0.0, 1.5, -2.0, 800.0, -800.0, np.inf, -np.inf, np.nan])
_PALETTES = {
    "finite": [4, 4, 4, 0, 0, 0, 0, 0],
    "wide": [3, 3, 3, 2, 2, 0, 0, 0],
    "zeros": [3, 3, 3, 0, 0, 0, 4, 0],
    "infinities": [3, 3, 3, 0, 0, 3, 3, 0],
    "everything": [3, 3, 3, 1, 1, 3, 3, 1],
}
palettes = st.sampled_from(sorted(_PALETTES))


def _operands(eq: Equation, seed: int, palette: str, dtype) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    weights = np.array(_PALETTES[palette], float)
    return [
        rng.choice(_VALUES, shape, p=weights / weights.sum()).astype(dtype)
        for shape in eq.shapes
    ]


def semiring_brute(eq: Equation, ops, semiring: str) -> np.ndarray:
    """The definition, one output entry and one assignment at a time (float64)."""
    terms, output = eq.explicit()
    sizes = eq.sizes()
    summed = sorted(set(sizes) - set(output))
    zero = math.inf if semiring == "min" else -math.inf
    out = np.empty([sizes[c] for c in output])
    for at in itertools.product(*(range(sizes[c]) for c in output)):
        values = []
        for rest in itertools.product(*(range(sizes[c]) for c in summed)):
            where = dict(zip(output, at, strict=True)) | dict(
                zip(summed, rest, strict=True)
            )
            factors = [
                float(x[_entry(where, t, x.shape)])
                for t, x in zip(terms, ops, strict=True)
            ]
            if any(math.isnan(f) for f in factors):
                values.append(math.nan)
            elif zero in factors:
                values.append(zero)
            else:
                values.append(math.fsum(factors))
        out[at] = _semiring_sum(values, semiring, zero)
    return out


def _entry(where: dict, term: str, shape) -> tuple[int, ...]:
    """An operand's entry at an assignment (size-1 axes broadcast)."""
    return tuple(where[c] if n > 1 else 0 for c, n in zip(term, shape, strict=True))


def _semiring_sum(values: list[float], semiring: str, zero: float) -> float:
    if any(math.isnan(v) for v in values):
        return math.nan
    if semiring == "max":
        return max(values, default=zero)
    if semiring == "min":
        return min(values, default=zero)
    if math.inf in values:
        return math.inf
    finite = [v for v in values if v != -math.inf]
    if not finite:
        return -math.inf
    top = max(finite)
    return top + math.log(math.fsum(math.exp(v - top) for v in finite))


def _nan_beside_an_empty_sum(eq: Equation, ops) -> bool:
    _, output = eq.explicit()
    empty = any(n == 0 for c, n in eq.sizes().items() if c not in output)
    return empty and any(np.isnan(x).any() for x in ops)


def _assert_is(got, expected, dtype) -> None:
    """Equal non-finite entries, close finite ones (relative to max(1, |x|))."""
    got = np.asarray(got, np.float64)
    assert got.shape == expected.shape
    for test in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(test(got), test(expected))
    finite = np.isfinite(expected)
    tol = 1e-9 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(got[finite], expected[finite], rtol=tol, atol=tol)


def _check_both(eq: Equation, ops, plan, semiring: str, dtype) -> None:
    host = run_on_host(plan, ops)
    compiled = np.asarray(jax.jit(plan)(*ops))
    assert host.dtype == compiled.dtype == dtype
    expected = semiring_brute(eq, ops, semiring)
    if _nan_beside_an_empty_sum(eq, ops):
        # (as the path meets it: see the module docstring)
        _assert_is(host, compiled.astype(np.float64), dtype)
        expected = np.where(np.isnan(compiled), np.nan, expected)
    _assert_is(host, expected, dtype)
    _assert_is(compiled, expected, dtype)


small_equations = equations(
    max_operands=4, max_elements=256, zero_size=True, min_size=1, max_size=3
)


@at_most(60)
@given(
    small_equations,
    st.sampled_from(["log", "max", "min"]),
    seeds,
    palettes,
    st.sampled_from([np.float64, np.float32]),
    st.sampled_from([None, 0.25]),
)
def test_the_walk_and_the_program_give_the_definition(
    eq, semiring, seed, palette, dtype, fraction
):
    dtype = np.dtype(dtype)
    ops = _operands(eq, seed, palette, dtype)
    plan = einslice.plan(eq.subscripts, *eq.shapes, semiring=semiring, dtype=dtype)
    if fraction is not None:  # sliced, where that fits: chunks combined
        try:
            plan = einslice.plan(
                eq.subscripts,
                *eq.shapes,
                semiring=semiring,
                dtype=dtype,
                memory_limit=max(1, int(plan.peak_bytes * fraction)),
            )
        except einslice.MemoryLimitError:
            pass
    _check_both(eq, ops, plan, semiring, dtype)


@pytest.mark.parametrize("semiring", ["log", "max", "min"])
@pytest.mark.parametrize(
    ("subscripts", "ops"),
    [
        # an empty sum beside +inf (and beside -inf)
        ("i,ij->i", [[np.inf, -np.inf, 0.0], np.zeros((3, 0))]),
        # +inf meeting -inf in a contraction, and in an outer product
        (
            "ij,jk->ik",
            [[[np.inf, 0.0], [1.0, -np.inf]], [[-np.inf, 2.0], [np.inf, 0.0]]],
        ),
        ("i,j->ij", [[np.inf, -np.inf, 1.0], [-np.inf, np.inf, 0.0]]),
        # all -inf rows, all +inf rows
        ("ij,j->i", [[[-np.inf] * 3, [np.inf] * 3, [0.0] * 3], [0.0, 1.0, -np.inf]]),
        # sides peaking at different positions (every product underflows)
        ("ij,jk->ik", [[[0.0, -800.0]], [[-800.0], [0.0]]]),
        # NaN beside -inf
        ("ij,jk->ik", [[[np.nan, -np.inf]], [[-np.inf], [0.0]]]),
    ],
)
def test_corners_through_einsum_first_and_later_calls(
    monkeypatch, semiring, subscripts, ops
):
    """A reused plan's walked first call and compiled later calls agree."""
    ops = [np.asarray(x, np.float64) for x in ops]
    inputs, output = subscripts.split("->")
    eq = Equation(tuple(inputs.split(",")), output, tuple(x.shape for x in ops))
    expected = semiring_brute(eq, ops, semiring)
    plan = einslice.plan(subscripts, *eq.shapes, semiring=semiring, dtype=np.float64)
    # every call walks while the rental lasts (short plans of these semirings
    # would otherwise compile at once)
    monkeypatch.setattr(_run, "host_first_seconds", lambda p, on_device=False: 1e9)
    walked = []
    host = _run.EXECUTORS["host"]
    spied = replace(host, run=lambda *a: walked.append(1) or host.run(*a))
    monkeypatch.setitem(_run.EXECUTORS, "host", spied)
    _run._top_level_run.cache_clear()
    first = plan(*ops)
    assert walked == [1]
    _assert_is(first, expected, np.float64)
    runner = _run._top_level_run(plan)
    runner.host_spent = runner.host_budget  # the rental ends: compile
    plan(*ops)
    assert _run.settle(plan, 60)
    later = plan(*ops)
    assert len(walked) == 2
    _assert_is(later, expected, np.float64)
    # and einsum itself, under a trace (compiled) and outside one
    fn = lambda *xs: einslice.einsum(subscripts, *xs, semiring=semiring)  # noqa: E731
    _assert_is(jax.jit(fn)(*ops), expected, np.float64)
    _assert_is(fn(*ops), expected, np.float64)


@at_most(40)
@given(
    equations(max_operands=4, max_elements=128, zero_size=True, min_size=1).map(
        lambda eq: Equation(eq.terms, "", eq.shapes)  # (a scalar: log Z, max)
    ),
    st.sampled_from(["log", "max"]),
    seeds,
    st.sampled_from(["finite", "zeros", "infinities", "everything"]),
)
def test_host_gradients_are_jax_grad_of_the_program(eq, semiring, seed, palette):
    """Marginals (log) and a maximizing state (max) at the corners.

    The host's gradient, where it computes one (it leaves +inf and NaN
    operands of "log" to the compiled gradient), equals ``jax.grad`` of the
    compiled plan: zero where the value is -inf or NaN; at ties ("max"
    with +inf) both take the first maximizing entry.
    """
    ops = _operands(eq, seed, palette, np.float64)
    plan = einslice.plan(eq.subscripts, *eq.shapes, semiring=semiring, dtype="float64")
    found = host_value_and_grad(plan, ops)
    if semiring == "log" and any((np.isnan(x) | np.isposinf(x)).any() for x in ops):
        assert found is None
        return
    argnums = tuple(range(len(ops)))
    value, grads = jax.jit(jax.value_and_grad(plan, argnums=argnums))(*ops)
    if found is None:  # (a "log" range that could underflow)
        return
    _assert_is(np.float64(found[0]), np.asarray(value, np.float64), np.float64)
    for got, ref in zip(found[1], grads, strict=True):
        np.testing.assert_allclose(got, np.asarray(ref), rtol=1e-9, atol=1e-12)


def test_the_log_product_recomputes_what_underflowed_or_met_inf():
    # the per-step rule's product: sides peaking apart (every shifted product
    # underflows), and +inf beside -inf (NaN in the matrix product)
    a = np.array([[[0.0, -800.0], [np.inf, 1.0]]])
    apart = np.array([[[-800.0], [0.0]]])
    np.testing.assert_allclose(
        _host._log_product(a, apart), [[[-800.0 + math.log(2)], [np.inf]]], rtol=1e-12
    )
    annihilated = np.array([[[-np.inf], [0.0]]])
    np.testing.assert_allclose(
        _host._log_product(a, annihilated), [[[-800.0], [1.0]]], rtol=1e-12
    )


@pytest.mark.parametrize(
    ("semiring", "big"), [("log", 1e308), ("max", 1e308), ("min", -1e308)]
)
def test_sums_that_overflow_to_inf_still_meet_the_zero(semiring, big):
    # finite operands whose sum overflows to ±inf, then meets the zero: the
    # walk must not take its plain adds (`_host.chunk_rules`)
    zero = np.inf if semiring == "min" else -np.inf
    ops = [np.array([[big]]), np.array([[big]]), np.array([[zero]])]
    plan = einslice.plan("ij,jk,kl->il", (1, 1), (1, 1), (1, 1), semiring=semiring,
                         dtype=np.float64)  # fmt: skip
    assert not _host._plain_adds_exact(plan.ring, ops)
    np.testing.assert_array_equal(run_on_host(plan, ops), [[zero]])
    np.testing.assert_array_equal(jax.jit(plan)(*ops), [[zero]])


@pytest.mark.parametrize("semiring", ["max", "min"])
def test_complex_max_and_min_agree(semiring):
    # (ordered as numpy and jnp order complex numbers: real part first)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))
    b = rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))
    plan = einslice.plan("ij,jk->ik", a.shape, b.shape, semiring=semiring,
                         dtype=np.complex128)  # fmt: skip
    np.testing.assert_array_equal(run_on_host(plan, [a, b]), jax.jit(plan)(a, b))


def test_log_refuses_complex_operands():
    # (the compiled steps raised a TypeError deep in lax; the walk dropped
    # the imaginary parts)
    with pytest.raises(einslice.EinsliceError, match="takes real operands"):
        einslice.log_einsum("ij,jk->ik", np.ones((2, 2), complex), np.ones((2, 2)))
    with pytest.raises(einslice.EinsliceError, match="not complex128"):
        einslice.plan("i->", (2,), semiring="log", dtype=np.complex128)
