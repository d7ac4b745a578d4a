"""A curated list of equations, opt_einsum style, plus bugs this suite has found.

Each equation runs unsliced and under a limit that slices it, against
``numpy.einsum`` in float64; a few also run through every path optimizer.
Sizes come from a seeded generator so the list stays deterministic.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import einslice
from einslice._plan._profile import CPU_DEFAULT
from strategies import Equation, assert_close_to_einsum, feasible_plan

EQUATIONS = [
    # -- from opt_einsum's tests/test_contract.py ---------------------------
    # hadamard-like
    "a,ab,abc->abc",
    "a,b,ab->ab",
    # index transformations
    "ea,fb,gc,hd,abcd->efgh",
    "ea,fb,abcd,gc,hd->efgh",
    "abcd,ea,fb,gc,hd->efgh",
    # complex
    "acdf,jbje,gihb,hfac,gfac,gifabc,hfac",
    "cd,bdhe,aidb,hgca,gc,hgibcd,hgac",
    "abhe,hidj,jgba,hiab,gab",
    "bde,cdh,agdb,hica,ibd,hgicd,hiac",
    "chd,bde,agbc,hiad,hgc,hgi,hiad",
    "chd,bde,agbc,hiad,bdi,cgh,agdb",
    "bdhe,acad,hiab,agac,hibd",
    # collapse
    "ab,ab,c->",
    "ab,ab,c->c",
    "ab,ab,cd,cd->",
    "ab,ab,cd,cd->ac",
    "ab,ab,cd,cd->cd",
    "ab,ab,cd,cd,ef,ef->",
    # outer products
    "ab,cd,ef->abcdef",
    "ab,cd,ef->acdf",
    "ab,cd,de->abcde",
    "ab,cd,de->be",
    "ab,bcd,cd->abcd",
    "ab,bcd,cd->abd",
    # random
    "eb,cb,fb->cef",
    "dd,fb,be,cdb->cef",
    "bca,cdb,dbf,afc->",
    "dcc,fce,ea,dbf->ab",
    "fdf,cdd,ccd,afe->ae",
    "abcd,ad",
    "ed,fcd,ff,bcf->be",
    "baa,dcf,af,cde->be",
    "bd,db,eac->ace",
    "fff,fae,bef,def->abd",
    "efc,dbc,acf,fd->abe",
    # inner products
    "ab,ab",
    "ab,ba",
    "abc,abc",
    "abc,bac",
    "abc,cba",
    # GEMM
    "ab,bc",
    "ab,cb",
    "ba,bc",
    "ba,cb",
    "abcd,cd",
    "abcd,ab",
    "abcd,cdef",
    "abcd,cdef->feba",
    "abcd,efdc",
    # inner then dot
    "aab,bc->ac",
    "ab,bcc->ac",
    "aab,bcc->ac",
    "baa,bcc->ac",
    "aab,ccb->ac",
    # long chains and rings
    "ab,bc,cd,de,ef,fg,gh,hi->ai",
    "ab,bc,cd,de,ef,fg,gh,ha->",
    # -- the seed and graphical-model shapes -----------------------------------
    "ij,ik,il,jk,jl,kl->ij",
    "ij,ik,jk->ij",
    "ij,ik,il,jk,jl,kl->",
    "a,ab,bc,c->",
    # -- jnp.einsum corner cases ---------------------------------------------
    "ijji->",
    "iij->j",
    "ii,ii->i",
    "a,a,a,a,a->a",
    "ab,ab,ab->",
]


def _sizes(equation: str, seed: int, low=3, high=6, budget=2**15) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    letters = sorted(set(equation) - set(",->"))
    sizes: dict[str, int] = {}
    for c in letters:
        sizes[c] = int(rng.integers(low, high + 1))
        while np.prod(list(sizes.values())) > budget and sizes[c] > 1:
            sizes[c] -= 1
    return sizes


def _case(equation: str, seed: int = 0) -> Equation:
    lhs, _, rhs = equation.partition("->")
    terms = tuple(lhs.split(","))
    sizes = _sizes(equation, seed)
    shapes = tuple(tuple(sizes[c] for c in t) for t in terms)
    return Equation(terms, rhs if "->" in equation else None, shapes)


def _run(eq: Equation, limit, optimize="auto"):
    ops = [np.random.default_rng(k).standard_normal(s) for k, s in enumerate(eq.shapes)]
    p, limit = feasible_plan(
        eq.subscripts, ops, limit, optimize=optimize, dtype=np.float64
    )
    out = einslice.einsum(eq.subscripts, *ops, memory_limit=limit, optimize=optimize)
    assert_close_to_einsum(out, eq, ops)
    return p


@pytest.mark.parametrize("equation", EQUATIONS)
def test_equation(equation):
    eq = _case(equation)
    unsliced = _run(eq, None)
    assert unsliced.sliced == {}
    _run(eq, max(1, unsliced.peak_bytes // 3))


@pytest.mark.parametrize("optimize", ["greedy", "optimal", "dp", False])
@pytest.mark.parametrize(
    "equation",
    ["ea,fb,gc,hd,abcd->efgh", "dcc,fce,ea,dbf->ab", "ij,ik,il,jk,jl,kl->ij"],
)
def test_equation_through_every_optimizer(equation, optimize):
    eq = _case(equation, seed=1)
    unsliced = _run(eq, None, optimize)
    _run(eq, max(1, unsliced.peak_bytes // 3), optimize)


# --- bugs found by this suite (minimal reproductions) ---------------------------


def test_smallest_limit_not_above_a_feasible_plan():
    # plan('i,ij,j->', float64) fits in ~600 bytes unsliced, yet a lower limit
    # was answered with smallest_limit=1528: the most-sliced plan's peak, which
    # a lax.scan's fixed costs make larger than the unsliced plan's.
    shapes = [(3,), (3, 4), (4,)]
    unsliced = einslice.plan("i,ij,j->", *shapes, dtype=np.float64)
    with pytest.raises(einslice.MemoryLimitError) as info:
        einslice.plan("i,ij,j->", *shapes, dtype=np.float64, memory_limit=100)
    assert info.value.smallest_limit <= unsliced.peak_bytes


@pytest.mark.parametrize(
    ("subscripts", "shapes", "limit"),
    [
        # jit(grad) at the limit the derivative asked for compiled to more:
        ("a,aaa", [(10,), (10, 10, 10)], 4276),  # 4560 bytes
        ("aab,bcde,cd,e", [(4, 4, 4), (4, 4, 6, 12), (4, 6), (12,)], 19724),  # 19780
        ("ij,jk->ik", [(40, 50), (50, 60)], 48136),  # 49796
        ("bed,dc->bedc", [(12, 10, 10), (10, 4)], 18044),  # 58116
        # 137220, while at 40000 (unsliced derivative) it needs 544
        (
            "dhgc,bedh,dc,h->ghdbe",
            [(10, 1, 9, 4), (12, 10, 10, 1), (10, 4), (1,)],
            22492,
        ),
    ],
)
def test_gradient_temporaries_within_the_limit(subscripts, shapes, limit):
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]

    def loss(*ops):
        return jnp.sum(einslice.einsum(subscripts, *ops, memory_limit=limit))

    grad = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))
    try:
        compiled = grad.lower(*args).compile()
    except einslice.MemoryLimitError as e:  # fine, if it says what it needs
        assert e.smallest_limit > limit
        return
    stats = compiled.memory_analysis()
    assert stats is not None and stats.temp_size_in_bytes <= limit


def test_a_limit_that_a_frugal_order_meets_is_feasible():
    # A chain of 60 16x16 float64 matrices: contracted left to right only two
    # 2 kB intermediates are alive (the explicit path fits 15936 bytes), but
    # with optimize="auto" a 20 kB limit raised MemoryLimitError with
    # smallest_limit=64360: the order was chosen for FLOPs alone, and slicing
    # cannot shrink the many intermediates of a balanced tree.
    n, d = 60, 16
    args: list = []
    for k in range(n):
        args += [(d, d), [k, k + 1]]
    path = [(0, 1)] + [(0, m - 1) for m in range(n - 1, 1, -1)]
    frugal = einslice.plan(*args, [0, n], dtype=np.float64, optimize=path)
    limit = 20_000
    assert frugal.peak_bytes <= limit
    try:
        p = einslice.plan(*args, [0, n], dtype=np.float64, memory_limit=limit)
    except einslice.MemoryLimitError as e:
        raise AssertionError(
            f"memory_limit={limit} refused (smallest_limit={e.smallest_limit}) "
            f"although the left-to-right path needs {frugal.peak_bytes}"
        ) from None
    assert p.peak_bytes <= limit


def test_a_small_einsum_under_the_default_limit_is_not_sliced():
    # 'a,d,abcd->bc' (9 kB of operands) was cut into two chunks of 'a' under the
    # default limit (12 GB): a lax.scan where jnp.einsum runs two dot_generals.
    p = einslice.plan(
        "a,d,abcd->bc", (4,), (8,), (4, 6, 6, 8), dtype=np.float64, profile=CPU_DEFAULT
    )
    assert p.sliced == {}, str(p)


def test_the_derivatives_smallest_limit_is_honored_when_retried():
    # jit(grad) of 'aaa,a,a,a->' at 640 bytes asked for 4256; at 4256 it asked
    # for 4304: the smallest_limit a MemoryLimitError states must be enough.
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in [(4, 4, 4), (4,), (4,), (4,)]]

    def grad_at(limit):
        def loss(*ops):
            return jnp.sum(einslice.einsum("aaa,a,a,a->", *ops, memory_limit=limit))

        return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3))).lower(*args)

    with pytest.raises(einslice.MemoryLimitError) as info:
        grad_at(640)
    grad_at(info.value.smallest_limit)
