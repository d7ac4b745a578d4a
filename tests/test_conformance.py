"""Drop-in conformance: JAX's own einsum tests, and what jnp.einsum callers pass.

Part 1 restates, case by case, ``tests/lax_numpy_einsum_test.py`` of jax-ml/jax
at tag ``jax-v0.10.2`` (the installed jax; the file is not shipped in JAX's
packages, so it is read, not run): the same equations, shapes, dtypes, options,
``numpy.einsum`` reference and tolerances, with ``einslice.einsum`` where that
file calls ``jnp.einsum``. Each case names the JAX test method it mirrors (the
first field of each table row, which is also the pytest id). Cases that
inspect jnp's own jaxpr assert the analogous property of einslice's; those
that cannot apply are listed, with the reason, in docs/conformance.md.

Part 2 compares einslice.einsum with the installed ``jnp.einsum`` on the same
call for the arguments callers pass today: same values (tolerance by dtype),
shape, dtype and weak type, or the same error type where jnp raises.

Every test runs twice, with ``jax_enable_x64`` on and off (the ``x64`` fixture).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import zlib
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import einslice


@pytest.fixture(autouse=True, scope="module")
def private_cache_dir(tmp_path_factory):
    """einslice's on-disk cache (profiles, wisdom) in a temp dir, not the home one.

    (Module-wide, and inherited by the two-device subprocess.)
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EINSLICE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(autouse=True, params=[True, False], ids=["x64", "x32"])
def x64(request):
    """Run the test with ``jax_enable_x64`` on, then off.

    conftest.py turns the flag on for the session. ``jax.enable_x64`` is JAX's
    public context manager for it: the flag is thread-local configuration that
    ``jax.jit`` keys its caches on, and einslice keys its plans on the operand
    dtype, so both settings run in this process, without a subprocess per case
    (``test_the_x64_fixture_changes_what_jnp_makes`` checks that it takes).
    """
    with jax.enable_x64(request.param):
        yield request.param


def test_the_x64_fixture_changes_what_jnp_makes(x64):
    expected = np.float64 if x64 else np.float32
    assert jnp.asarray(np.zeros(2)).dtype == expected
    assert einslice.einsum("i,i->", np.ones(2), np.ones(2)).dtype == expected


# --- helpers mirroring jax._src.test_util (restated, not imported) ------------

# jtu's default tolerance by dtype (public_test_util._default_tolerance).
DEFAULT_TOLERANCE = {
    np.dtype(jnp.bfloat16): 1e-2,
    np.dtype(np.float16): 1e-3,
    np.dtype(np.float32): 1e-6,
    np.dtype(np.float64): 1e-15,
    np.dtype(np.complex64): 1e-6,
    np.dtype(np.complex128): 1e-15,
}


def _tolerance(dtype, given: float | None) -> float:
    if given is not None:
        return given
    return DEFAULT_TOLERANCE.get(np.dtype(dtype), 0.0)  # exact for ints, bool


def _canonical(dtype) -> np.dtype:
    """The dtype JAX would store: 64-bit types narrowed when x64 is off."""
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _dtype(x) -> np.dtype:
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


def assert_all_close(actual, desired, *, atol=None, rtol=None, check_dtypes=True):
    """jtu's ``assertAllClose`` for one array.

    Dtypes equal (after canonicalisation when x64 is off, as JAX's tests do),
    shapes equal, then values within the larger of the two dtypes' default
    tolerances unless ``atol``/``rtol`` are given.
    """
    if check_dtypes:
        dtypes = _dtype(actual), _dtype(desired)
        assert _canonical(dtypes[0]) == _canonical(dtypes[1]), dtypes
    actual, desired = np.asarray(actual), np.asarray(desired)
    assert actual.shape == desired.shape
    atol = max(_tolerance(actual.dtype, atol), _tolerance(desired.dtype, atol))
    rtol = max(_tolerance(actual.dtype, rtol), _tolerance(desired.dtype, rtol))
    if actual.dtype == jnp.bfloat16:
        actual = actual.astype(np.float32)
    if desired.dtype == jnp.bfloat16:
        desired = desired.astype(np.float32)
    with np.errstate(invalid="ignore"):  # a zero tolerance means numpy's default
        np.testing.assert_allclose(actual, desired, rtol=rtol or 1e-7, atol=atol)


def rand_default(rng: np.random.RandomState, shape, dtype, scale: float = 3.0):
    """jtu's ``rand_default``: scaled normal draws cast to ``dtype``.

    Unsigned dtypes take the absolute value; complex ones draw twice.
    """
    dtype = np.dtype(dtype)

    def draw():
        values = scale * rng.randn(*shape)
        if np.issubdtype(dtype, np.unsignedinteger):
            values = np.abs(values)
        return np.asarray(values).astype(dtype)

    if np.issubdtype(dtype, np.complexfloating):
        return np.asarray(draw() + 1j * draw(), dtype)
    return draw()


def rng_for(name: str) -> np.random.RandomState:
    """A generator seeded from the test's name, as jtu seeds ``self.rng()``."""
    return np.random.RandomState(zlib.adler32(name.encode()))


def check(subscripts, *operands):
    """JAX's ``EinsumTest._check``: numpy.einsum vs einsum at HIGHEST precision."""
    expected = np.einsum(subscripts, *operands)
    got = einslice.einsum(subscripts, *operands, precision=lax.Precision.HIGHEST)
    assert_all_close(got, expected, atol=1e-4, rtol=1e-4)


def check_compiled(fn, make_args, *, rtol=None):
    """jtu's ``_CompileAndCheck``: eager twice, jitted twice, then fresh args.

    (Its count of op-by-op compilations reads a private JAX cache; not kept.)
    """
    args = make_args()
    eager = fn(*args)
    assert np.shape(eager) == np.asarray(eager).shape
    assert_all_close(fn(*args), eager, rtol=rtol, atol=rtol)
    jitted = jax.jit(fn)
    assert_all_close(jitted(*args), eager, rtol=rtol, atol=rtol)
    assert_all_close(jitted(*args), eager, rtol=rtol, atol=rtol)
    args = make_args()
    assert_all_close(jitted(*args), fn(*args), rtol=rtol, atol=rtol)


def primitives(jaxpr) -> list[str]:
    """Primitive names of a jaxpr, nested jaxprs (custom_jvp, jit, scan) opened."""
    names = []
    for eqn in jaxpr.eqns:
        inner = [
            getattr(v, "jaxpr", v)
            for v in eqn.params.values()
            if hasattr(getattr(v, "jaxpr", v), "eqns")
        ]
        if inner:
            for sub in inner:
                names += primitives(sub)
        else:
            names.append(eqn.primitive.name)
    return names


def equations_of(jaxpr, name: str) -> list:
    """The equations of primitive ``name`` in a jaxpr, nested ones included."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            found.append(eqn)
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                found += equations_of(inner, name)
    return found


# --- Part 1: tests/lax_numpy_einsum_test.py at jax-v0.10.2 --------------------

# (JAX test method, subscripts, operand shapes): each calls _check on standard
# normal float64 draws from the test's own generator.
RANDN_CASES = [
    ("test_three_operands_1", "i,j,k->ijk", [(3,), (4,), (5,)]),
    ("test_three_operands_2", "i,j,k->ijk", [(3,), (4,), (5,)]),
    ("test_two_operands_1", "ij,j->i", [(3, 4), (4,)]),
    ("test_two_operands_2", "ijk,j->i", [(3, 4, 5), (4,)]),
    ("test_two_operands_3", "iji,i->j", [(3, 4, 3), (3,)]),
    ("test_two_operands_4", "ij,ij->", [(3, 4), (3, 4)]),
    ("test_two_operands_5", "nij,jk->nik", [(10, 2, 3), (3, 4)]),
    ("test_two_operands_6", "sa,shb->shab", [(2, 1), (2, 3, 4)]),
    ("test_one_operand_1", "ijk->j", [(3, 4, 5)]),
    ("test_one_operand_2", "ijk->kij", [(3, 4, 5)]),
    ("test_one_operand_3", "ijk->ki", [(3, 4, 5)]),
    ("test_one_operand_4", "ijk->ki", [(3, 4, 5)]),
    ("test_one_operand_5", "...ijk->...ki", [(2, 3, 4, 5)]),
    ("test_one_operand_6", "...ijk->ki", [(3, 4, 5)]),
    ("test_one_operand_7", "ii->", [(3, 3)]),
    ("test_one_operand_8", "ij->", [(3, 3)]),
    ("test_one_operand_9", "iii->", [(3, 3, 3)]),
    ("test_one_operand_10", "ii->i", [(3, 3)]),
    ("test_one_operand_11", "iij->i", [(3, 3, 4)]),
    ("test_one_operand_12", "iii->i", [(3, 3, 3)]),
    ("test_one_operand_13", "iijkk->i", [(3, 3, 5, 4, 4)]),
    ("test_one_operand_14", "iijkk->ik", [(3, 3, 5, 4, 4)]),
    ("test_one_operand_15", "iijkl->il", [(3, 3, 5, 4, 4)]),
    ("test_one_operand_16", "ij->ij", [(3, 3)]),
    ("test_tf_unsupported_1", "ij...,jk...->ik...", [(2, 3, 5, 1), (3, 4, 5, 1)]),
    ("test_tf_unsupported_2", "ijj,k->ik", [(2, 3, 3), (4,)]),
    ("test_tf_unsupported_3", "ij,ij,jk->ik", [(2, 3), (2, 3), (3, 4)]),
    ("test_contraction_broadcasting", "cij,cjk->cik", [(3, 4, 5), (3, 1, 6)]),
    ("test_batch_broadcasting", "cij,cjk->cik", [(1, 4, 5), (3, 5, 6)]),
    (
        "test_batch_and_contraction_broadcasting",
        "cij,cjk->cik",
        [(1, 4, 5), (3, 1, 6)],
    ),
    ("test_broadcasting_issue_2189", "...ij,...j", [(2, 1, 3, 3), (2, 4, 3)]),
]


@pytest.mark.parametrize(
    ("method", "subscripts", "shapes"), RANDN_CASES, ids=[c[0] for c in RANDN_CASES]
)
def test_jax_randn_cases(method, subscripts, shapes):
    rng = rng_for(method)
    check(subscripts, *(rng.randn(*s) for s in shapes))


# test_from_dask: equations from dask's einsum tests, each in four dtypes.
DASK_EQUATIONS = [
    "abc,bad->abcd",
    "abcdef,bcdfg->abcdeg",
    "ea,fb,abcd,gc,hd->efgh",
    "ab,b",
    "aa",
    "a,a->",
    "a,a->a",
    "a,a",
    "a,b",
    "a,b,c",
    "a",
    "ba,b",
    "ba,b->",
    "defab,fedbc->defac",
    "ab...,bc...->ac...",
    "a...a",
    "abc...->cba...",
    "...ab->...a",
    "a...a->a...",
    "...abc,...abcd->...d",
    "ab...,b->ab...",
    "aa->a",
    "ab,ab,c->c",
    "aab,bc->ac",
    "aab,bcc->ac",
    "fdf,cdd,ccd,afe->ae",
    "fff,fae,bef,def->abd",
]


def dask_shapes(subscripts: str) -> list[tuple[int, ...]]:
    """Sizes 2, 3, 4, 2, ... to labels in order of appearance; ``...`` is 2 labels."""
    sizes = itertools.cycle([2, 3, 4])
    size_of: dict[str, int] = {}
    shapes = []
    for term in subscripts.split("->")[0].split(","):
        for label in term.replace("...", "01"):
            if label not in size_of:
                size_of[label] = next(sizes)
        shapes.append(tuple(size_of[label] for label in term.replace("...", "01")))
    return shapes


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.complex64, np.bool_])
@pytest.mark.parametrize("subscripts", DASK_EQUATIONS)
def test_from_dask(subscripts, dtype):
    rng = rng_for(f"test_from_dask_{subscripts}_{np.dtype(dtype).name}")
    check(subscripts, *(rand_default(rng, s, dtype) for s in dask_shapes(subscripts)))


def test_ordered_front_batch_dim_case():
    ones = np.ones((1, 8, 20, 4))
    check("ijkl,ijml->ijkm", ones, ones)


def test_einsum_kpmurphy_example():
    n_, c_, d_, k_, t_ = 2, 3, 4, 5, 6
    rng = rng_for("test_einsum_kpmurphy_example")
    s, w, v = rng.randn(n_, t_, k_), rng.randn(k_, d_), rng.randn(d_, c_)
    expected = np.zeros((n_, c_))  # the loop nest, term by term
    for n, c, d, k, t in itertools.product(*map(range, (n_, c_, d_, k_, t_))):
        expected[n, c] += s[n, t, k] * w[k, d] * v[d, c]
    path = jnp.einsum_path("ntk,kd,dc->nc", s, w, v, optimize="optimal")[0]
    with jax.default_matmul_precision("float32"):
        got = einslice.einsum("ntk,kd,dc->nc", s, w, v, optimize=path)
    assert_all_close(got, expected, check_dtypes=False)


def test_no_unnecessary_transpose():
    # JAX's test: jnp's jaxpr for ijk,kl->ijl holds no transpose. einslice
    # lays the step out so that dot_general's own order is the output's.
    rng = rng_for("test_no_unnecessary_transpose")
    x, y = rng.randn(2, 2, 2), rng.randn(2, 2)
    jaxpr = jax.make_jaxpr(partial(einslice.einsum, "ijk,kl->ijl"))(x, y)
    assert "transpose" not in str(jaxpr)
    assert primitives(jaxpr.jaxpr) == ["dot_general"]


def test_preferred_element_type():
    # JAX's test: jnp's jaxpr is one dot_general whose preferred_element_type
    # is the operands' type, or the one asked for. einslice's is one
    # dot_general (inside its custom_jvp wrapper) with the same parameter.
    rng = rng_for("test_preferred_element_type")
    x = rng.randn(2, 2).astype(jnp.bfloat16)
    y = rng.randn(2).astype(jnp.bfloat16)
    for kwargs, expected in [
        ({}, jnp.result_type(x, y)),
        ({"preferred_element_type": "float32"}, np.dtype("float32")),
    ]:
        jaxpr = jax.make_jaxpr(partial(einslice.einsum, "ij,j->i", **kwargs))(x, y)
        assert primitives(jaxpr.jaxpr) == ["dot_general"]
        [dot] = equations_of(jaxpr.jaxpr, "dot_general")
        assert dot.params["preferred_element_type"] in (None, expected)
        assert dot.outvars[0].aval.dtype == expected
        assert jaxpr.out_avals[0].dtype == expected


def test_inf_nan():
    x = np.array([[[np.inf, np.inf], [1.0, 1.0]]])
    assert_all_close(
        einslice.einsum("baa->ba", x), np.einsum("baa->ba", x), check_dtypes=False
    )


def _numeric_dtypes(x64: bool) -> list[np.dtype]:
    """jtu.dtypes.numeric: floating, integer, unsigned, complex (32-bit only
    when x64 is off)."""
    wide = [np.float64, np.int64, np.uint64, np.complex128] if x64 else []
    narrow = [np.float32, np.int32, np.uint32, np.complex64]
    return [np.dtype(d) for d in narrow + wide]


@pytest.mark.parametrize("lhs_dtype", _numeric_dtypes(True), ids=str)
def test_einsum_mixed_precision(lhs_dtype, x64):
    # JAX samples some (lhs, rhs) pairs of jtu.dtypes.numeric; here every rhs
    # is checked for each lhs. The jaxpr check: jnp's is one dot_general (and
    # perhaps a convert); einslice's is one product (a Hadamard product is a
    # mul) after converting the operands to the result type.
    if lhs_dtype not in _numeric_dtypes(x64):
        pytest.skip(f"{lhs_dtype} is not a JAX dtype with x64 off")
    rng = rng_for(f"test_einsum_mixed_precision_{lhs_dtype}")
    with jax.numpy_dtype_promotion("standard"):
        for rhs_dtype in _numeric_dtypes(x64):
            a = rand_default(rng, (10,), lhs_dtype)
            b = rand_default(rng, (10,), rhs_dtype)
            jaxpr = jax.make_jaxpr(partial(einslice.einsum, "a,a->a"))(a, b)
            casts = ["convert_element_type"]
            if jax.dtypes.result_type(a, b, return_weak_type_flag=True)[1]:
                casts.append(
                    "add"
                )  # a + 0.0: a cast to a weak type (int64 with uint64)
            ops = [p for p in primitives(jaxpr.jaxpr) if p not in casts]
            assert ops in (["mul"], ["dot_general"]), (rhs_dtype, ops)
            # jtu.promote_like_jnp: numpy computes in jnp's result type.
            common = jnp.result_type(a, b)
            expected = np.einsum("a,a->a", a.astype(common), b.astype(common))
            got = einslice.einsum("a,a->a", a, b)
            assert_all_close(got, expected)


OPTIMIZATION_CASES = [
    ("i->", [(3,)]),
    ("ii->i", [(4, 4)]),
    ("ij,jk", [(3, 4), (4, 3)]),
    ("ij,jkl,klm", [(2, 2), (2, 3, 4), (3, 4, 2)]),
]
OPTIMIZE_MODES = [True, False, "optimal", "auto", "greedy", "eager"]


@pytest.mark.parametrize("optimize", OPTIMIZE_MODES, ids=str)
@pytest.mark.parametrize(("subscripts", "shapes"), OPTIMIZATION_CASES)
def test_einsum_optimization_modes(subscripts, shapes, optimize):
    rng = rng_for(f"test_einsum_optimization_modes_{subscripts}_{optimize}")

    def make_args():
        return [rand_default(rng, s, np.float32) for s in shapes]

    fn = partial(einslice.einsum, subscripts, optimize=optimize)
    args = make_args()
    assert_all_close(fn(*args), np.einsum(subscripts, *args), rtol=1e-4)
    check_compiled(fn, make_args, rtol=1e-4)


@pytest.mark.parametrize("optimize", OPTIMIZE_MODES, ids=str)
@pytest.mark.parametrize(("subscripts", "shapes"), OPTIMIZATION_CASES)
def test_einsum_path_optimization_modes(subscripts, shapes, optimize):
    # The path comes from jnp.einsum_path (which einslice does not replace).
    rng = rng_for(f"test_einsum_path_optimization_modes_{subscripts}_{optimize}")

    def make_args():
        return [rand_default(rng, s, np.float32) for s in shapes]

    def fn(*args):
        path, _ = jnp.einsum_path(subscripts, *args, optimize=optimize)
        return einslice.einsum(subscripts, *args, optimize=path)

    args = make_args()
    assert_all_close(fn(*args), np.einsum(subscripts, *args), rtol=1e-4)
    check_compiled(fn, make_args, rtol=1e-4)


def test_einsum_unsupported_optimization():
    # jnp.einsum raises NotImplementedError for a path step contracting three
    # operands at once; einslice contracts them (pairwise, in the order its
    # planner picks), so the drop-in answers where jnp cannot.
    rng = rng_for("test_einsum_unsupported_optimization")
    arrays = [rand_default(rng, s, np.float32) for s in [(2, 3), (2, 4), (2, 5)]]
    got = einslice.einsum("ij,ik,il->jkl", *arrays, optimize=[(0, 1, 2)])
    assert_all_close(got, np.einsum("ij,ik,il->jkl", *arrays), rtol=1e-5)


# --- Part 2: what callers pass to jnp.einsum, against the installed jnp.einsum

# einslice and jnp.einsum may take other paths, so sums come in other orders:
# floats agree to a few ulps of the dtype, integers and bools exactly.
PARITY_TOLERANCE = {
    np.dtype(jnp.bfloat16): 2e-2,
    np.dtype(np.float16): 2e-3,
    np.dtype(np.float32): 2e-5,
    np.dtype(np.complex64): 2e-5,
    np.dtype(np.float64): 1e-12,
    np.dtype(np.complex128): 1e-12,
}


def assert_same_array(got, expected):
    """Same dtype, weak type, shape and (to the dtype's tolerance) values."""
    assert got.dtype == expected.dtype
    assert jax.typeof(got).weak_type == jax.typeof(expected).weak_type
    assert got.shape == expected.shape
    tol = PARITY_TOLERANCE.get(np.dtype(expected.dtype), 0.0)
    wide = np.complex128 if np.iscomplexobj(expected) else None
    np.testing.assert_allclose(
        np.asarray(got, wide or (np.float64 if tol else None)),
        np.asarray(expected, wide or (np.float64 if tol else None)),
        rtol=tol,
        atol=tol,
    )


def assert_matches_jnp(subscripts, *operands, **kwargs):
    """The same call to jnp.einsum and einslice.einsum gives the same array."""
    expected = jnp.einsum(subscripts, *operands, **kwargs)
    got = einslice.einsum(subscripts, *operands, **kwargs)
    assert_same_array(got, expected)
    return got


def assert_raises_like_jnp(subscripts, *operands, **kwargs):
    """jnp.einsum raises on this call, and einslice.einsum raises the same type."""
    with pytest.raises(Exception) as raised:
        jnp.einsum(subscripts, *operands, **kwargs)
    with pytest.raises(type(raised.value)):
        einslice.einsum(subscripts, *operands, **kwargs)
    return raised.value


def values(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Small random values of ``dtype`` (ints in [-3, 3], unsigned in [0, 3])."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -3, 4, shape).astype(dtype)
    x = rng.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


CHAIN = ("ab,bc,cd->ad", [(3, 4), (4, 5), (5, 2)])
OPT_EINSUM_NAMES = [
    "auto",
    "auto-hq",
    "greedy",
    "eager",
    "opportunistic",
    "optimal",
    "dp",
    "dynamic-programming",
    "branch-all",
    "branch-2",
    "branch-1",
    "random-greedy",
    "random-greedy-128",
]


@pytest.mark.parametrize(
    "optimize",
    [*OPT_EINSUM_NAMES, True, False, [(1, 2), (0, 1)], "from jnp.einsum_path"],
    ids=str,
)
def test_optimize_matches_jnp(optimize):
    subscripts, shapes = CHAIN
    rng = np.random.default_rng(0)
    ops = [values(rng, s, np.float32) for s in shapes]
    if optimize == "from jnp.einsum_path":
        optimize = jnp.einsum_path(subscripts, *ops, optimize="optimal")[0]
    assert_matches_jnp(subscripts, *ops, optimize=optimize)


PRECISIONS = [None, *lax.Precision, "highest", "bfloat16", "tensorfloat32"]
PRECISIONS += [(lax.Precision.HIGHEST, lax.Precision.DEFAULT)]


@pytest.mark.parametrize("precision", PRECISIONS, ids=str)
def test_precision_matches_jnp(precision):
    # Same values, and every dot_general gets the precision jnp's gets.
    subscripts, shapes = CHAIN
    rng = np.random.default_rng(1)
    ops = [values(rng, s, np.float32) for s in shapes]
    assert_matches_jnp(subscripts, *ops, precision=precision)

    def dot_precisions(einsum):
        fn = partial(einsum, subscripts, precision=precision)
        dots = equations_of(jax.make_jaxpr(fn)(*ops).jaxpr, "dot_general")
        return {d.params["precision"] for d in dots}

    assert dot_precisions(einslice.einsum) == dot_precisions(jnp.einsum)


PET_EQUATIONS = [  # a dot_general, a sum, a Hadamard product
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij->j", [(3, 4)]),
    ("i,i->i", [(4,), (4,)]),
]


@pytest.mark.parametrize("pet", [None, np.float32, np.float64], ids=str)
@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16], ids=str)
def test_preferred_element_type_matches_jnp(dtype, pet, x64):
    rng = np.random.default_rng(2)
    for subscripts, shapes in PET_EQUATIONS:
        ops = [values(rng, s, dtype) for s in shapes]
        if pet is np.float64 and not x64:  # both warn, then compute in float32
            with pytest.warns(UserWarning, match="float64"):
                expected = jnp.einsum(subscripts, *ops, preferred_element_type=pet)
            with pytest.warns(UserWarning, match="float64"):
                got = einslice.einsum(subscripts, *ops, preferred_element_type=pet)
            assert_same_array(got, expected)
        else:
            assert_matches_jnp(subscripts, *ops, preferred_element_type=pet)
    if pet is None:  # bfloat16 with float16: jnp promotes both to float32
        a, b = values(rng, (3, 4), jnp.bfloat16), values(rng, (4, 2), np.float16)
        assert_matches_jnp("ij,jk->ik", a, b)


DTYPE_EQUATIONS = [  # a path of dot_generals, a diagonal, a sum
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]),
    ("ii->", [(3, 3)]),
    ("ij->j", [(3, 4)]),
]
NON_FLOAT_DTYPES = [np.int8, np.uint8, np.bool_, np.complex64, np.complex128]


@pytest.mark.parametrize("dtype", NON_FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_integer_bool_and_complex_operands_match_jnp(dtype):
    rng = np.random.default_rng(3)
    for subscripts, shapes in DTYPE_EQUATIONS:
        assert_matches_jnp(subscripts, *(values(rng, s, dtype) for s in shapes))
    # and mixed with float32
    x, y = values(rng, (3, 4), dtype), values(rng, (4,), np.float32)
    assert_matches_jnp("ij,j->i", x, y)


def test_numpy_arrays_and_scalars_match_jnp(x64):
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    assert_matches_jnp("ij,j->i", a, b)  # float64 numpy arrays
    assert_matches_jnp("ij,j->i", a.astype(np.float32), jnp.asarray(b))
    assert_matches_jnp("ij,->ij", a.astype(np.float32), np.float64(2.0))
    assert_matches_jnp("ij,->ij", a.astype(np.float32), 2.0)  # weak: stays f32
    assert_matches_jnp("ij,->ij", a.astype(np.int8), 2.5)
    assert_matches_jnp(",->", np.array(2.0), np.array(3))  # 0-d arrays
    ints = a.astype(np.int32)
    if x64:  # jnp.einsum 0.10.2 raises a TypeError here (docs/conformance.md)
        got = einslice.einsum("ij,->ij", ints, 2)
        assert got.dtype == jnp.result_type(ints, 2) == np.int32
        np.testing.assert_array_equal(got, ints * 2)
    else:
        assert_matches_jnp("ij,->ij", ints, 2)


@pytest.mark.parametrize(
    ("operands", "error_type"),
    [
        (([[1.0, 2.0], [3.0, 4.0]], [1.0, 2.0]), TypeError),
        ((np.ones((2, 2)), [1.0, 2.0]), TypeError),
        ((np.ones((2, 2)), (1.0, 2.0)), TypeError),
        ((np.ones((2, 2)), "ab"), ValueError),  # jnp's comes from opt_einsum
        ((np.ones((2, 2)), None), ValueError),
    ],
    ids=["lists", "a list", "a tuple", "a string", "None"],
)
def test_non_arrays_are_rejected_like_jnp(operands, error_type):
    # einslice's EinsliceTypeError is a TypeError and a ValueError
    assert isinstance(assert_raises_like_jnp("ij,j->i", *operands), error_type)


# Python scalars and arrays made from them are weakly typed; jnp.einsum's
# result is weak when all operands are (bools aside), so that it promotes
# like a Python scalar afterwards. The weak arrays are made inside the test,
# under its x64 setting.
def _weak(value, shape):
    return jnp.broadcast_to(jnp.asarray(value), shape)


WEAK_CASES = {
    "floats": lambda: (",->", 2.0, 3.0),
    "bool-int": lambda: (",->", True, 3),
    "numpy scalar": lambda: (",->", np.float32(2), 3.0),
    "int8 array-float": lambda: ("ij,->ij", np.ones((2, 3), np.int8), 2.5),
    "chain": lambda: ("ij,jk,kl->il", *(_weak(v, (3, 3)) for v in (2.0, 1.0, 3))),
    "trace": lambda: ("ii->", jnp.cumsum(_weak(2.0, (3, 3)), axis=0)),
    "sum": lambda: ("ij->j", jnp.cumsum(_weak(2, (3, 3)), axis=1)),
    "with bool": lambda: ("ij,j->i", _weak(2.0, (3, 2)), np.ones(2, bool)),
}


def test_a_sliced_plan_of_weak_operands_is_weak_like_jnp():
    # the scan accumulates in a strong array; the result is made weak again
    args = ("ij,jk,kl->il", *(_weak(v, (64, 64)) for v in (2.0, 1.0, 3.0)))
    limit = einslice.plan(*args).cost.peak_bytes // 2
    assert einslice.plan(*args, memory_limit=limit).chunks, "meant to slice"
    got = einslice.einsum(*args, memory_limit=limit)
    expected = jnp.einsum(*args)
    assert_same_array(got, expected)
    assert_same_array(
        got + jnp.ones((), jnp.float16), expected + jnp.ones((), jnp.float16)
    )


@pytest.mark.parametrize("case", WEAK_CASES)
def test_weak_types_match_jnp(case):
    args = WEAK_CASES[case]()
    got = assert_matches_jnp(*args)
    # and so the result promotes as jnp's does
    expected = jnp.einsum(*args) + jnp.ones((), jnp.float16)
    assert_same_array(got + jnp.ones((), jnp.float16), expected)


@pytest.mark.parametrize(
    ("dtypes", "raises"),
    [
        ((np.float32, np.float32), False),
        ((np.float32, "python float"), False),
        ((jnp.bfloat16, jnp.bfloat16), False),
        ((np.float32, np.float64), True),
        ((np.int32, np.float32), True),
        ((jnp.bfloat16, np.float32), True),
        ((np.float16, jnp.bfloat16), True),
    ],
    ids=str,
)
def test_strict_dtype_promotion_matches_jnp(dtypes, raises, x64):
    if np.float64 in dtypes and not x64:
        pytest.skip("float64 operands are float32 when x64 is off")
    rng = np.random.default_rng(5)
    a = jnp.asarray(values(rng, (3, 4), dtypes[0]))
    b = (
        2.0
        if dtypes[1] == "python float"
        else jnp.asarray(values(rng, (4,), dtypes[1]))
    )
    subscripts = "ij,->ij" if dtypes[1] == "python float" else "ij,j->i"
    with jax.numpy_dtype_promotion("strict"):
        if raises:
            assert_raises_like_jnp(subscripts, a, b)
        else:
            assert_matches_jnp(subscripts, a, b)


def test_jit_with_static_subscripts_matches_jnp():
    rng = np.random.default_rng(6)
    a, b, c = (jnp.asarray(values(rng, s, np.float32)) for s in CHAIN[1])
    for subscripts, ops in [("ab,bc->ac", (a, b)), (CHAIN[0], (a, b, c))]:
        expected = jax.jit(jnp.einsum, static_argnums=0)(subscripts, *ops)
        got = jax.jit(einslice.einsum, static_argnums=0)(subscripts, *ops)
        assert_same_array(got, expected)
    # keyword options static too, as callers write them
    static = {"static_argnums": 0, "static_argnames": ("optimize", "precision")}
    kwargs = {"optimize": "greedy", "precision": lax.Precision.HIGHEST}
    expected = jax.jit(jnp.einsum, **static)(CHAIN[0], a, b, c, **kwargs)
    got = jax.jit(einslice.einsum, **static)(CHAIN[0], a, b, c, **kwargs)
    assert_same_array(got, expected)


@pytest.mark.parametrize(
    ("subscripts", "shapes", "in_axes"),
    [
        ("ij,jk->ik", [(5, 3, 4), (4, 2)], (0, None)),
        ("ij,jk->ik", [(3, 5, 4), (4, 5, 2)], (1, 1)),
        ("ii->i", [(3, 3, 2)], (2,)),
        ("ab,bc,cd->ad", [(2, 3, 4), (4, 5), (2, 5, 2)], (0, None, 0)),
    ],
)
def test_vmap_matches_jnp(subscripts, shapes, in_axes):
    rng = np.random.default_rng(7)
    ops = [jnp.asarray(values(rng, s, np.float32)) for s in shapes]
    expected = jax.vmap(partial(jnp.einsum, subscripts), in_axes=in_axes)(*ops)
    got = jax.vmap(partial(einslice.einsum, subscripts), in_axes=in_axes)(*ops)
    assert_same_array(got, expected)


@pytest.mark.parametrize(
    ("subscripts", "shapes", "dtype"),
    [(*CHAIN, np.float32), ("iij,j->i", [(3, 3, 2), (2,)], np.complex64)],
)
def test_grad_matches_jnp(subscripts, shapes, dtype):
    rng = np.random.default_rng(8)
    ops = [jnp.asarray(values(rng, s, dtype)) for s in shapes]

    def loss(einsum):
        def f(*ops):
            return jnp.sum(jnp.abs(einsum(subscripts, *ops)) ** 2)

        return jax.grad(f, argnums=tuple(range(len(ops))))(*ops)

    for got, expected in zip(loss(einslice.einsum), loss(jnp.einsum), strict=True):
        assert_same_array(got, expected)


@pytest.mark.parametrize(
    ("subscripts", "shapes", "dtypes"),
    [
        ("ij,jk->ik", [(3, 4), (4, 2)], [np.float32, np.float32]),
        ("ij,jk->ik", [(3, 4), (4, 2)], [np.int8, jnp.bfloat16]),
        ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)], [np.float64] * 2),
        ("ii->i", [(3, 3)], [np.bool_]),
        ("ab,bc,cd->ad", CHAIN[1], [np.complex64, np.float32, np.int32]),
    ],
)
def test_eval_shape_matches_jnp(subscripts, shapes, dtypes):
    # Canonical dtypes: JAX 0.12 warns when a struct asks for float64 under x32.
    structs = [
        jax.ShapeDtypeStruct(s, jax.dtypes.canonicalize_dtype(d))
        for s, d in zip(shapes, dtypes, strict=True)
    ]
    expected = jax.eval_shape(partial(jnp.einsum, subscripts), *structs)
    got = jax.eval_shape(partial(einslice.einsum, subscripts), *structs)
    assert (got.shape, got.dtype, got.weak_type) == (
        expected.shape,
        expected.dtype,
        expected.weak_type,
    )


def test_out_is_rejected_like_jnp():
    x = np.ones((2, 2), np.float32)
    assert_raises_like_jnp("ij,jk->ik", x, x, out=np.empty((2, 2)))


# --- out_sharding= -------------------------------------------------------------


def _mesh(kind: AxisType = AxisType.Explicit, name: str = "x"):
    return jax.make_mesh((1,), (name,), axis_types=(kind,))


OUT_SHARDING_CASES = [
    ("ij,jk->ik", [(4, 3), (3, 6)], P("x")),
    ("ij,jk->ik", [(4, 3), (3, 6)], P(None, "x")),
    ("ij,jk,kl->il", [(4, 3), (3, 6), (6, 2)], P("x")),
    ("ij->i", [(4, 3)], P("x")),
    ("bij,bjk->bik", [(2, 4, 3), (2, 3, 5)], P(None, "x")),
]


@pytest.mark.parametrize(("subscripts", "shapes", "spec"), OUT_SHARDING_CASES)
def test_out_sharding_matches_jnp_under_set_mesh(subscripts, shapes, spec):
    # One device here: the result's type (its sharding spec) and placement
    # are compared; test_out_sharding_on_two_devices splits for real.
    mesh = _mesh()
    rng = np.random.default_rng(9)
    ops = [jnp.asarray(values(rng, s, np.float32)) for s in shapes]
    with jax.set_mesh(mesh):
        for out_sharding in (spec, NamedSharding(mesh, spec)):
            for wrap in (lambda f: f, jax.jit):
                got, expected = (
                    wrap(partial(einsum, subscripts, out_sharding=out_sharding))(*ops)
                    for einsum in (einslice.einsum, jnp.einsum)
                )
                assert_same_array(got, expected)
                assert (
                    jax.typeof(got).sharding.spec == jax.typeof(expected).sharding.spec
                )
                assert got.sharding.is_equivalent_to(expected.sharding, got.ndim)


def test_out_sharding_outside_set_mesh_is_honoured():
    # jnp.einsum honours a NamedSharding outside jax.set_mesh only for paths
    # of several steps (docs/conformance.md); einslice does for every einsum.
    mesh = _mesh()
    rng = np.random.default_rng(10)
    a, b = (jnp.asarray(values(rng, s, np.float32)) for s in [(4, 3), (3, 6)])
    out_sharding = NamedSharding(mesh, P("x"))
    got = einslice.einsum("ij,jk->ik", a, b, out_sharding=out_sharding)
    assert_same_array(got, jnp.einsum("ij,jk->ik", a, b))
    assert jax.typeof(got).sharding.spec == P("x", None)
    assert got.sharding.is_equivalent_to(out_sharding, 2)


def test_out_sharding_errors_match_jnp():
    a, b = np.ones((4, 3), np.float32), np.ones((3, 6), np.float32)
    device = jax.devices()[0]
    # JAX 0.12.1 deprecates constructing SingleDeviceSharding directly.
    single = getattr(jax.sharding, "make_single_device_sharding", None)
    single = single(device) if single else jax.sharding.SingleDeviceSharding(device)
    for bad in ("x", single):
        error = assert_raises_like_jnp("ij,jk->ik", a, b, out_sharding=bad)
        assert isinstance(error, TypeError)
    # a PartitionSpec with no mesh set; an axis that is not explicit
    for bad in (P("x"), NamedSharding(_mesh(AxisType.Auto), P("x"))):
        error = assert_raises_like_jnp("ij,jk->ik", a, b, out_sharding=bad)
        assert isinstance(error, ValueError)
    # a sharding over another mesh than the one set
    with jax.set_mesh(_mesh()):
        other = NamedSharding(_mesh(name="y"), P("y"))
        assert_raises_like_jnp("ij,jk->ik", a, b, out_sharding=other)
    # no explicit axis named: accepted, and nothing to place
    auto = NamedSharding(_mesh(AxisType.Auto), P())
    assert_matches_jnp("ij,jk->ik", a, b, out_sharding=auto)


TWO_DEVICES = r"""
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
import einslice

assert len(jax.devices()) == 2
mesh = jax.make_mesh((2,), ("x",), axis_types=(AxisType.Explicit,))
rng = np.random.default_rng(0)


def check(name, subscripts, ops, spec, jit=False, **options):
    tol = 1e-12 if ops[0].dtype == np.float64 else 1e-5
    with jax.set_mesh(mesh):
        expected = jnp.einsum(subscripts, *ops, out_sharding=spec)
        fn = lambda *o: einslice.einsum(subscripts, *o, out_sharding=spec, **options)
        got = (jax.jit(fn) if jit else fn)(*ops)
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape), name
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol, err_msg=name)
    spec_got = jax.typeof(got).sharding.spec
    assert spec_got == jax.typeof(expected).sharding.spec, (name, spec_got)
    assert got.sharding.is_equivalent_to(expected.sharding, got.ndim), name
    assert len(got.sharding.device_set) == 2, name


def check_all():
    shapes = [(4, 6), (6, 8), (8, 2), (16, 32), (32, 32), (32, 8)]
    A, B, C, D, E, F = (jnp.asarray(rng.standard_normal(s)) for s in shapes)
    with jax.set_mesh(mesh):
        rows, cols = P("x", None), P(None, "x")
        split_j = [jax.device_put(A, cols), jax.device_put(B, rows)]
        split_out = [jax.device_put(A, rows), jax.device_put(B, cols)]
        limit = einslice.plan("ij,jk,kl->il", D, E, F).peak_bytes // 2
        sliced = einslice.plan("ij,jk,kl->il", D, E, F, memory_limit=limit)
    assert sliced.sliced, sliced
    check("one step", "ij,jk->ik", [A, B], P("x"))
    check("several steps", "ij,jk,kl->il", [A, B, C], P(None, "x"), jit=True)
    check("reduction", "ij->i", [A], P("x"))
    check("inputs split along the output", "ij,jk->ik", split_out, P(None, "x"))
    check("inputs split along the sum", "ij,jk->ik", split_j, P("x"), jit=True)
    check("sliced", "ij,jk,kl->il", [D, E, F], P("x"), memory_limit=limit)
    check("devices=2", "ij,jk,kl->il", [A, B, C], P("x"), devices=2)


for x64 in (True, False):
    with jax.enable_x64(x64):
        check_all()
print("all out_sharding checks passed")
"""


def test_out_sharding_on_two_devices(x64):
    # Several devices need XLA_FLAGS before JAX starts: a fresh interpreter,
    # started once (seconds), which checks both x64 settings itself.
    if not x64:
        pytest.skip("the x64 run's interpreter checks both settings")
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
    }
    proc = subprocess.run(
        [sys.executable, "-c", TWO_DEVICES],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "all out_sharding checks passed" in proc.stdout
