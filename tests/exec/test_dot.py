"""``_semiring.dot``: merged axes give ``dot_general``'s result without copies."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import einslice
from einslice._exec._semiring import dot

# (left shape, right shape, dimension numbers): free axes on the far side of
# the contracted one, on one side, the other, both, with a batch axis.
CASES = [
    ((2, 3), (4, 5, 3), (((1,), (2,)), ((), ()))),
    ((3, 4, 5), (3, 2), (((0,), (0,)), ((), ()))),
    ((3, 4, 5), (6, 7, 3), (((0,), (2,)), ((), ()))),
    ((2, 6, 3), (2, 4, 5, 3), (((2,), (3,)), ((0,), (0,)))),
    ((2, 3, 4, 5), (2, 6, 3), (((1,), (2,)), ((0,), (0,)))),
    ((3, 4, 2), (4, 3, 5, 6), (((0, 1), (1, 0)), ((), ()))),
]


@pytest.mark.parametrize(("left", "right", "dims"), CASES)
def test_dot_matches_dot_general(left, right, dims):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(left), jnp.float32)
    y = jnp.asarray(rng.standard_normal(right), jnp.float32)
    want = lax.dot_general(x, y, dims, precision="highest")
    got = dot(x, y, dims, precision="highest")
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA CPU layouts")
def test_tucker_compiles_without_copies():
    # each factor contracts a core whose free axes lie after the contracted
    # one: unmerged, XLA's CPU backend copied the core before every GEMM
    ops = [jnp.ones((32, 32, 32)), *(jnp.ones((16, 32)) for _ in range(3))]
    text = (
        jax.jit(lambda *o: einslice.einsum("abc,ia,jb,kc->ijk", *o))
        .lower(*ops)
        .compile()
        .as_text()
    )
    assert text is not None
    assert not [line for line in text.splitlines() if " copy(" in line]
