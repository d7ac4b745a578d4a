"""Blocked max-plus products (issue 20): values vs numpy, gradients vs the union."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import einslice
from einslice._exec._semiring import _union_reduce, max_first, max_plus_dot
from strategies import at_most


def _operands(rng, shapes, neg_inf):
    ops = []
    for shape in shapes:
        x = rng.uniform(-3, 3, shape)
        x[rng.random(shape) < neg_inf] = -np.inf
        ops.append(x.astype(np.float32))
    return ops


@at_most(12, deadline=None)  # (3 on an accelerator: each shape compiles)
@given(
    seed=st.integers(0, 2**16),
    m=st.integers(0, 5),
    k=st.integers(0, 41),  # tiles of 16: uneven, one tile, none
    n=st.integers(1, 300),  # column blocks of 256: uneven
    batch=st.integers(1, 3),
    neg_inf=st.sampled_from([0.0, 0.3, 1.0]),
)
def test_blocked_matches_numpy(seed, m, k, n, batch, neg_inf):
    rng = np.random.default_rng(seed)
    a, b = _operands(rng, [(batch, m, k), (batch, k, n)], neg_inf)
    out = einslice.einsum("bik,bkj->bij", a, b, semiring="max")
    ref = np.max(
        a.astype(np.float64)[..., None] + b.astype(np.float64)[:, None],
        axis=2,
        initial=-np.inf,
    )
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-6)


def test_nan_propagates():
    a = np.zeros((2, 20), np.float32)
    b = np.zeros((20, 3), np.float32)
    a[0, 17] = np.nan
    out = np.asarray(einslice.einsum("ik,kj->ij", a, b, semiring="max"))
    assert np.isnan(out[0]).all() and not np.isnan(out[1]).any()


@pytest.mark.parametrize("ties", [False, True])
def test_gradient_is_the_union_rule(ties):
    rng = np.random.default_rng(1)
    a = (
        rng.integers(0, 3, (4, 2, 20)).astype(np.float32)
        if ties
        else rng.normal(size=(4, 2, 20))
    )
    b = (
        rng.integers(0, 3, (2, 20, 3)).astype(np.float32)
        if ties
        else rng.normal(size=(2, 20, 3))
    )
    a, b = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    dims = (((1, 2), (0, 1)), ((), ()))

    def blocked(x, y):
        return (max_plus_dot(x, y, dims) * jnp.arange(12.0).reshape(4, 3)).sum()

    def union(x, y):
        return (
            _union_reduce(x, y, dims, max_first) * jnp.arange(12.0).reshape(4, 3)
        ).sum()

    # jitted: op by op, the two gradients compiled 40 programs (CPU count)
    got_grads = jax.jit(jax.grad(blocked, (0, 1)))(a, b)
    want_grads = jax.jit(jax.grad(union, (0, 1)))(a, b)
    for got, want in zip(got_grads, want_grads, strict=True):
        np.testing.assert_array_equal(got, want)


def test_compiled_memory_within_prediction():
    a = np.ones((256, 256), np.float32)
    p = einslice.plan("ik,kj->ij", a, a, semiring="max", memory_limit="16MB")
    f = jax.jit(
        lambda x, y: einslice.einsum(
            "ik,kj->ij", x, y, semiring="max", memory_limit="16MB"
        )
    )
    stats = f.lower(a, a).compile().memory_analysis()
    assert stats is not None, "this backend reports no memory analysis"
    temp = stats.temp_size_in_bytes
    assert temp <= p.cost.peak_bytes
