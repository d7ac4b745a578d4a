"""The seed blog post's two hand-written baselines, reproduced as published.

Both are specialised to the seed's benchmark formula ``'ij,ik,il,jk,jl,kl->ij'``
and are kept as written in ``multi-input-einsums-in-jax.txt`` (only reformatted
to this project's line length) so that the benchmarks compare einslice against
the published reference, not a tuned one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

SEED_SUBSCRIPTS = "ij,ik,il,jk,jl,kl->ij"
"""The seed's hard 6-input formula: O(n^2) memory naively, O(n^4) time."""


def inner_einsum(*arrays):
    """Compute the seed formula for one output cell ``(i, j)``: ``,k,l,k,l,kl->``.

    Does not create any intermediate arrays.
    """
    A, B, C, D, E, F = arrays
    K, L = B.size, C.size

    def loop_body_k(partial1, k):
        def loop_body_l(partial2, l):  # noqa: E741 (the seed's name)
            return partial2 + C[l] * E[l] * F[k, l], ()

        inner = jax.lax.scan(loop_body_l, 0, jnp.arange(L))[0]
        return partial1 + B[k] * D[k] * inner, ()

    return A * jax.lax.scan(loop_body_k, 0, jnp.arange(K))[0]


@jax.jit
def vmap_einsum(*arrays):
    """Compute ``ij,ik,il,jk,jl,kl->ij`` naively: vmap over i, j; scan over k, l.

    No memory overhead; vectorised across output cells (the seed's first method).
    """
    return jax.vmap(
        # The in_axes specifies which arrays contain axis j (here) and i (below)
        jax.vmap(inner_einsum, in_axes=(0, None, None, 0, 0, None)),
        in_axes=(0, 0, 0, None, None, None),
    )(*arrays)


@jax.jit
def scan_einsum(*arrays):
    """Compute ``ij,ik,il,jk,jl,kl->ij`` as a scan over k of smaller jnp.einsums.

    The seed's second method: a running sum of ``'ij,i,il,j,jl,l->ij'`` applied
    to ``A, B[:, k], C, D[:, k], E, F[k, :]``.
    """
    A, B, C, D, E, F = arrays
    K = B.shape[1]
    zeros = jnp.zeros(A.shape)

    def add_small_einsum(partial, k):
        # einsum with k stripped out
        # i,j,i,il,j,jl,l->ij
        return partial + jnp.einsum(
            "ij,i,il,j,jl,l->ij", A, B[:, k], C, D[:, k], E, F[k, :]
        ), ()

    return jax.lax.scan(add_small_einsum, zeros, jnp.arange(K))[0]
