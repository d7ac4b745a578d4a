"""The "log" union steps' log-sum-exp: one reduction, and where it is not used."""

from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

from einslice._exec import _semiring


@pytest.mark.parametrize("axes", [(1,), (0, 2), (0, 1, 2)])
def test_the_one_reduction_matches_scipy_with_infinities_and_nan(axes):
    rng = np.random.default_rng(0)
    x = rng.normal(0, 30, (4, 3, 5))
    x[0] = -np.inf  # a slice of zeros
    x[1, 0, 0] = x[1, 0, 1] = np.inf  # two +inf entries in one run
    x[2, 1] = x[2, 1, 0]  # equal entries
    x[3, 2, 4] = np.nan
    got = np.asarray(_semiring._pairwise_log_sum(jnp.asarray(x), axes))
    want = np.asarray(cast(np.ndarray, logsumexp(x, axis=axes)))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_its_derivative_is_the_softmax_and_zero_for_all_minus_inf():
    x = jnp.array([[0.0, np.log(3.0)], [-jnp.inf, -jnp.inf]])
    got = jax.grad(lambda v: jnp.sum(_semiring.log_sum(v, (1,))[:1]))(x)
    np.testing.assert_allclose(got, [[0.25, 0.75], [0.0, 0.0]])
    got = jax.grad(lambda v: _semiring.log_sum(v, (1,))[1])(x)
    np.testing.assert_array_equal(got, np.zeros((2, 2)))


def _primitives(x, axes):
    jaxpr = jax.make_jaxpr(lambda v: _semiring.log_sum(v, axes))(x).jaxpr
    inner = jaxpr.eqns[0].params["call_jaxpr"].jaxpr  # inside the custom_jvp
    return {e.primitive.name for e in inner.eqns}


def test_float64_on_a_tpu_keeps_the_max_and_the_sum(monkeypatch):
    x32 = jnp.zeros((3, 4), jnp.float32)
    assert "reduce" in _primitives(x32, (1,))
    with jax.enable_x64(True):
        x64 = jnp.zeros((3, 4), jnp.float64)
        assert "reduce" in _primitives(x64, (1,))  # the CPU takes it
        monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
        assert {"reduce_max", "reduce_sum"} <= _primitives(x64, (1,))
        assert "reduce" not in _primitives(x64, (1,))
        assert "reduce" in _primitives(x32, (1,))


def test_the_union_tests_the_smaller_side_once():
    """One comparison in a step's union, not one a side (see annihilating_add)."""
    left, right = jnp.zeros((3, 1)), jnp.zeros((1, 4))
    jaxpr = jax.make_jaxpr(_semiring.annihilating_add)(left, right).jaxpr
    names = [e.primitive.name for e in jaxpr.eqns]
    assert names.count("eq") == 1 and "min" in names
    got = _semiring.annihilating_add(
        jnp.array([[-jnp.inf], [jnp.inf], [jnp.nan]]), jnp.array([[jnp.inf, -jnp.inf]])
    )
    np.testing.assert_array_equal(
        got, [[-np.inf, -np.inf], [np.inf, -np.inf], [np.nan, np.nan]]
    )
