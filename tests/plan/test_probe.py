"""Probes: a few chunks of a sliced plan, timed instead of a whole long call."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import einslice
from einslice._plan._probe import probe


def test_a_probe_keeps_the_chunks_and_cuts_the_most_chunked_index_first():
    p = einslice.plan("ab,bc,cd->ad", (8, 600), (600, 900), (900, 8))
    p = replace(p, chunks=((1, 50), (2, 100)))  # b: 12 chunks, c: 9
    q = probe(p, seconds=p.cost.time / p.n_chunks * 30)
    assert q is not None
    assert q.plan.chunks == p.chunks and q.plan.steps == p.steps
    # 30 chunks wanted: b (the most chunks) keeps min(12, 30) = all 12, and c
    # is cut to ceil(30 / 12) = 3 chunks of 100.
    assert q.plan.equation.sizes[1:3] == (600, 300)
    assert q.shapes == ((8, 600), (600, 300), (300, 8))
    assert q.scale == p.n_chunks / q.plan.n_chunks == 3.0
    assert probe(p, seconds=p.cost.time) is None  # that would be the whole plan
    assert probe(replace(p, chunks=()), seconds=1e-9) is None  # nothing sliced


def test_a_probe_leaves_broadcast_axes_alone_and_computes_the_leading_part():
    subscripts = "ij,ij,jk->ik"
    shapes = [(8, 4096), (8, 1), (4096, 8)]  # operand 1's j broadcasts
    p = einslice.plan(subscripts, *shapes, memory_limit="64kB", dtype=np.float64)
    assert p.chunks, str(p)
    q = probe(p, seconds=p.cost.time / p.n_chunks * 2)
    assert q is not None
    j = p.equation.names.index("j")
    cut = q.plan.equation.sizes[j]
    assert q.shapes == ((8, cut), (8, 1), (cut, 8)) and cut < 4096
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal(s) for s in shapes]
    leading = [
        x[tuple(slice(0, n) for n in s)] for x, s in zip(ops, q.shapes, strict=True)
    ]
    np.testing.assert_allclose(
        np.asarray(q.plan(*leading)), np.einsum(subscripts, *leading), rtol=1e-10
    )
