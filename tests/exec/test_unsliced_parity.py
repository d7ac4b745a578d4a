"""Unsliced plans on an accelerator compile jnp.einsum's program (issue 35 point 1).

A profile whose ``unsliced_executor`` is "xla" (the TPU's and the GPU's) runs
a plan that slices nothing as one ``jnp.einsum`` along its path, and takes
``jnp.einsum``'s own greedy path where the model ties it with einslice's:
the compiled program is then jnp's, instruction for instruction (checked
here on the CPU backend, the same lowering). Timings are in
``benchmarks/results/unsliced_parity.md``, never in tests.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import opt_einsum
import pytest

import einslice
from einslice.bench._parity import program_text

TPU = einslice.profiles.TPU

# (subscripts, shapes): unsliced formulas whose trees tie with jnp's greedy one
TIED = [
    ("abc,ia,jb,kc->ijk", [(8, 8, 8), (16, 8), (16, 8), (16, 8)]),
    ("ijk,jkl,klm->im", [(8, 8, 8)] * 3),
    ("ab,acd,bce,dfg,efh->gh", [(16, 16)] + [(16, 2, 16)] * 4),
    ("bhqd,bhkd,bhkv->bhqv", [(2, 2, 16, 8)] * 3),
    ("ia,ja,ka->ijk", [(16, 4)] * 3),
]  # fmt: skip


def _greedy(subscripts):
    return lambda *ops: jnp.einsum(subscripts, *ops, optimize="greedy")


def _structs(shapes):
    return [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]


@pytest.mark.parametrize(("subscripts", "shapes"), TIED)
def test_an_accelerator_plan_compiles_jnp_greedys_program(subscripts, shapes):
    p = einslice.plan(subscripts, *shapes, profile=TPU)
    assert p.executor == "xla" and not p.chunks
    ops = _structs(shapes)
    ours = jax.jit(lambda *o: p(*o)).lower(*ops).compile()
    theirs = jax.jit(_greedy(subscripts)).lower(*ops).compile()
    assert program_text(ours) == program_text(theirs)


def test_the_cpu_keeps_its_own_steps():
    # einslice's own dot_generals ran Tucker and bilinear steps 1.5-3x faster
    # than jnp's program on this CPU
    subscripts, shapes = TIED[0]
    assert einslice.plan(subscripts, *shapes).executor == "einslice"


def test_a_tree_estimated_faster_than_greedys_is_kept():
    # bilinear: jnp's greedy tree is estimated 1.57x slower (ran 1.62x slower
    # on a TPU v5e): einslice's tree, on jnp.einsum's lowering
    shapes = [(1024, 512), (256, 512, 512), (1024, 512)]
    subscripts = "bi,oij,bj->bo"
    path, _ = opt_einsum.contract_path(
        subscripts, *shapes, shapes=True, optimize="greedy"
    )
    p = einslice.plan(subscripts, *shapes, profile=TPU)
    greedy = einslice.plan(subscripts, *shapes, profile=TPU, optimize=path)
    assert p.executor == greedy.executor == "xla"
    assert p.cost.time * 1.5 < greedy.cost.time


def test_a_plan_whose_derivative_needs_slicing_keeps_einslices_steps():
    shapes = [(64, 64)] * 3
    # (the TPU's peak model counts tiles and program scratch: the forward
    # needs 361 kB unsliced there, its derivative about 1.5 MB)
    p = einslice.plan("ij,jk,kl->il", *shapes, profile=TPU, memory_limit=600_000)
    # the forward fits unsliced, its derivative does not
    assert not p.chunks and p.derivative.resolve().chunks
    assert p.executor == "einslice"


def test_jnp_lowering_agrees_with_numpy_under_grad_and_vmap():
    rng = np.random.default_rng(0)
    subscripts, shapes = TIED[0]
    ops = [rng.standard_normal(s) for s in shapes]

    def loss(*o):
        return einslice.einsum(subscripts, *o, profile=TPU).sum()

    value = einslice.einsum(subscripts, *ops, profile=TPU)
    np.testing.assert_allclose(value, np.einsum(subscripts, *ops), rtol=1e-10)
    grad = jax.grad(loss)(*ops)
    reference = np.einsum("ijk,ia,jb,kc->abc", np.ones(value.shape), *ops[1:])
    np.testing.assert_allclose(grad, reference, rtol=1e-10)
    batched = jax.vmap(lambda a: einslice.einsum(subscripts, a, *ops[1:], profile=TPU))
    stacked = np.stack([ops[0], 2 * ops[0]])
    np.testing.assert_allclose(batched(stacked)[1], 2 * value, rtol=1e-10)


@pytest.mark.parametrize(
    ("subscripts", "n"), [("abcd,ab,bc,cd->abcd", 48), ("ij,jk,ki->ijk", 128)]
)
def test_broadcast_products_that_fit_are_not_sliced(subscripts, n):
    # XLA fuses a plan of broadcast products into one loop with no
    # temporaries; sliced for speed (the model charged its intermediates as
    # written), these ran 1.4-6x slower than unsliced on this CPU.
    shapes = [(n,) * len(t) for t in subscripts.split("->")[0].split(",")]
    assert not einslice.plan(subscripts, *shapes, memory_limit="4GB").chunks
    tight = einslice.plan(subscripts, *shapes, memory_limit="4MB")
    assert tight.chunks and tight.peak_bytes <= 4 * 10**6  # sliced to fit


@pytest.mark.parametrize("limit", ["4GB", "400kB"])
def test_a_junction_tree_message_moves_no_clique_table(limit):
    # jt-message: the product abcd * bc is written in abcd's order and the
    # contraction over (a, b) reads it as it lies: no transpose of a clique
    # table in the program, sliced or not (written as cdab, it ran 0.4-0.9x
    # jnp.einsum-greedy on this CPU).
    subscripts, n = "abcd,ab,bc->cd", 16
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal(s) for s in [(n,) * 4, (n, n), (n, n)]]
    p = einslice.plan(subscripts, *ops, memory_limit=limit)
    assert bool(p.chunks) == (limit == "400kB")
    assert [s.result for s in p.steps] == [(0, 1, 2, 3), (2, 3)]
    ours = program_text(jax.jit(lambda *o: p(*o)).lower(*ops).compile())
    assert not re.search(
        r"= f(32|64)\[\d+,\d+,\d+,\d+\]\{[\d,]+\} (transpose|copy)\(", ours
    )
    np.testing.assert_allclose(p(*ops), np.einsum(subscripts, *ops), rtol=1e-10)
    if p.chunks:  # (its derivative needs 1.1 MB)
        return
    grad = jax.grad(lambda x: p(x, *ops[1:]).sum())(ops[0])
    want = np.einsum("ab,bc,cd->abcd", ops[1], ops[2], np.ones((n, n)))
    np.testing.assert_allclose(grad, want, rtol=1e-10)
