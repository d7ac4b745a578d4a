"""The native max-plus kernel (``_exec/_native.py``, ``max_plus.cc``).

Checked against a float64 numpy reference of the max semiring's rules on
shapes that cross every blocking edge (rows not a multiple of the register
tile, columns not a multiple of a panel, contracted lengths over one packed
block), both operand layouts, batches, and special values; and against the
XLA path that runs where the kernel does not. Its build and fallback are
checked too: a failed build warns and falls back, ``EINSLICE_NATIVE=0``
turns it off.
"""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import einslice
from einslice._exec import _native
from einslice._exec._host import _max_product
from einslice._exec._semiring import _max_plus_xla, max_plus_dot

# The kernel is a CPU custom call: on an accelerator's default backend the
# XLA path runs (tests/test_every_semiring.py covers it there).
ON_CPU = jax.default_backend() == "cpu"
kernel = _native.max_plus_kernel() if ON_CPU else None
pytestmark = pytest.mark.skipif(
    kernel is None,
    reason="not the CPU backend" if not ON_CPU else f"not built: {_native.status()}",
)


def reference(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """max_k lhs[b, k, m] + rhs[b, k, n] in float64, -inf + inf = -inf."""
    left, right = lhs[:, :, :, None], rhs[:, :, None, :]
    with np.errstate(invalid="ignore"):
        total = left + right
    zero = ((left == -np.inf) & (right == np.inf)) | (
        (left == np.inf) & (right == -np.inf)
    )
    total = np.where(zero, -np.inf, total)
    out = total.max(axis=1)  # numpy's max propagates NaN
    return out


def run(lhs: np.ndarray, rhs: np.ndarray, lhs_k_last=False, rhs_k_last=False):
    native = kernel
    assert native is not None
    a = np.swapaxes(lhs, 1, 2) if lhs_k_last else lhs
    b = np.swapaxes(rhs, 1, 2) if rhs_k_last else rhs
    call = jax.jit(
        lambda x, y: native(x, y, lhs_k_last=lhs_k_last, rhs_k_last=rhs_k_last)
    )
    return np.asarray(call(jnp.asarray(a), jnp.asarray(b)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "batch, k, m, n",
    [(1, 1, 1, 1), (2, 7, 5, 3), (1, 129, 13, 65), (3, 300, 7, 130), (1, 700, 200, 70)],
)
@pytest.mark.parametrize(
    "layout", [(False, False), (True, False), (False, True), (True, True)]
)
def test_kernel_matches_float64_reference(dtype, batch, k, m, n, layout):
    rng = np.random.default_rng(batch * 1000 + k + m + n)
    lhs = rng.standard_normal((batch, k, m)).astype(dtype)
    rhs = rng.standard_normal((batch, k, n)).astype(dtype)
    got = run(lhs, rhs, *layout)  # float64 stays float64: conftest enables x64
    want = reference(lhs.astype(np.float64), rhs.astype(np.float64))
    # each entry is one float sum of two operands: exact in its own dtype
    np.testing.assert_array_equal(got, want.astype(dtype))


SPECIAL = st.sampled_from([0.0, -1.5, 2.0, np.inf, -np.inf, np.nan])


@given(
    shape=st.tuples(
        st.integers(1, 2), st.integers(1, 300), st.integers(1, 14), st.integers(1, 70)
    ),
    spots=st.lists(
        st.tuples(st.booleans(), st.integers(0, 10**6), SPECIAL), min_size=1, max_size=6
    ),
    layout=st.tuples(st.booleans(), st.booleans()),
)
def test_special_values_follow_the_semiring(shape, spots, layout):
    """-inf annihilates +inf, NaN propagates, also when it sits in a later block."""
    batch, k, m, n = shape
    rng = np.random.default_rng(k * m * n)
    lhs = rng.standard_normal((batch, k, m)).astype(np.float32)
    rhs = rng.standard_normal((batch, k, n)).astype(np.float32)
    for on_left, where, value in spots:
        target = lhs if on_left else rhs
        target.flat[where % target.size] = value
    got = run(lhs, rhs, *layout)
    want = reference(lhs.astype(np.float64), rhs.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_native_and_xla_paths_agree_on_a_dot_general_layout():
    """``max_plus_dot`` with batch, several contracted and free axes, both paths."""
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.standard_normal((3, 5, 7, 4, 2)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((4, 7, 6, 3, 2)), jnp.float32)
    dims = (((2, 4), (1, 4)), ((0,), (3,)))
    got = jax.jit(lambda a, b: max_plus_dot(a, b, dims))(x, y)
    lhs = jnp.transpose(x, (0, 2, 4, 1, 3)).reshape(3, 14, 20)
    rhs = jnp.transpose(y, (3, 1, 4, 0, 2)).reshape(3, 14, 24)
    want = _max_plus_xla(lhs, rhs).reshape(got.shape)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_vmap_and_grad_of_a_max_einsum_through_the_kernel():
    """vmap batches the custom call; the derivative is still the argmax indicator."""
    rng = np.random.default_rng(4)
    x = jnp.asarray(rng.standard_normal((3, 6, 9)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((9, 5)), jnp.float32)

    def f(a, b):
        return einslice.einsum("ik,kj->ij", a, b, semiring="max")

    got = jax.vmap(f, in_axes=(0, None))(x, y)
    want = np.max(np.asarray(x)[:, :, :, None] + np.asarray(y)[None, None], axis=2)
    np.testing.assert_array_equal(np.asarray(got), want)
    grad = jax.grad(lambda a: f(a, y).sum())(x[0])
    arg = np.argmax(np.asarray(x[0])[:, :, None] + np.asarray(y)[None], axis=1)
    indicator = np.zeros((6, 9), np.float32)
    for i in range(6):
        for j in range(5):
            indicator[i, arg[i, j]] += 1
    np.testing.assert_array_equal(np.asarray(grad), indicator)


def test_a_failed_build_warns_once_and_falls_back(monkeypatch, tmp_path):
    compiler = tmp_path / "broken-c++"
    compiler.write_text("#!/bin/sh\necho 'no such flag' >&2\nexit 1\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    monkeypatch.setattr(_native, "_registered", None)  # as in a fresh process
    _native._forget()
    try:
        with pytest.warns(_native.NativeWarning, match="no such flag"):
            assert _native.max_plus_kernel() is None
        assert "XLA path" in _native.status()
        x = jnp.asarray([[0.0, 5.0]])
        y = jnp.asarray([[1.0], [0.0]])
        assert max_plus_dot(x, y, (((1,), (0,)), ((), ()))).tolist() == [[5.0]]
    finally:
        monkeypatch.undo()
        _native._forget()
    assert _native.max_plus_kernel() is not None


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("EINSLICE_NATIVE", "0")
    assert _native.max_plus_kernel() is None
    assert _native.status().startswith("off")
    x = jnp.asarray([[0.0, 5.0]])
    y = jnp.asarray([[1.0], [0.0]])
    assert max_plus_dot(x, y, (((1,), (0,)), ((), ()))).tolist() == [[5.0]]


def test_the_cached_library_is_reused(tmp_path, monkeypatch):
    """A second process (here: cleared caches) loads the built file again."""
    monkeypatch.setenv("EINSLICE_CACHE_DIR", str(tmp_path / "cache"))
    _native._forget()
    try:
        first, reason = _native._library()
        assert first is not None and first.exists(), reason
        assert first.parent == tmp_path / "cache" / "kernels"
        stamp = first.stat().st_mtime_ns
        _native._forget()
        again, _ = _native._library()
        assert again == first
        assert first.stat().st_mtime_ns == stamp
    finally:
        _native._forget()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_host_entry_point_matches_the_reference(dtype):
    """The host walk's max products (``_host._max_product``) call the kernel."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 33, 300)).astype(dtype)  # [batch, m, k]
    b = rng.standard_normal((2, 300, 70)).astype(dtype)  # [batch, k, n]
    a[0, 1, 200], b[1, 7, 3], b[0, 5, 9] = np.nan, np.inf, -np.inf
    got = _native.host_max_plus(a, b)
    assert got is not None and got.dtype == dtype
    want = reference(np.swapaxes(a, 1, 2).astype(np.float64), b.astype(np.float64))
    np.testing.assert_array_equal(got, want.astype(dtype))
    np.testing.assert_array_equal(_max_product(a, b), got)


def test_host_entry_point_declines_what_it_does_not_take(monkeypatch):
    ints = np.ones((1, 2, 3), np.int32)
    assert _native.host_max_plus(ints, np.ones((1, 3, 2), np.int32)) is None
    mixed = np.ones((1, 3, 2), np.float32)
    assert _native.host_max_plus(np.ones((1, 2, 3)), mixed) is None
    monkeypatch.setenv("EINSLICE_NATIVE", "0")
    assert _native.host_max_plus(np.ones((1, 2, 3)), np.ones((1, 3, 2))) is None
    # the numpy blocks still give the product
    assert _max_product(np.ones((1, 2, 3)), np.ones((1, 3, 2))).tolist() == [
        [[2.0] * 2] * 2
    ]


@pytest.mark.parametrize(
    "shape", [(0, 3, 2, 4), (1, 0, 2, 4), (1, 3, 0, 4), (1, 3, 2, 0)]
)
def test_empty_operands(shape):
    """Nothing to contract gives the semiring's zero; empty results stay empty."""
    batch, k, m, n = shape
    a, b = np.ones((batch, m, k)), np.ones((batch, k, n))
    got = _native.host_max_plus(a, b)
    assert got is not None and got.shape == (batch, m, n)
    assert (got == -np.inf).all()
    out = run(np.swapaxes(a, 1, 2), b)
    assert out.shape == (batch, m, n) and (out == -np.inf).all()


def test_a_compiler_that_refuses_march_native_still_builds(monkeypatch, tmp_path):
    """Built without -march=native where the compiler rejects it."""
    real = shutil.which("c++") or shutil.which("g++")
    assert real is not None
    picky = tmp_path / "picky-c++"
    picky.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = -march=native ] && '
        "{ echo 'unsupported -march=native' >&2; exit 1; }; done\n"
        f'exec {real} "$@"\n'
    )
    picky.chmod(0o755)
    monkeypatch.setenv("CXX", str(picky))
    monkeypatch.setenv("EINSLICE_CACHE_DIR", str(tmp_path / "cache"))
    _native._forget()
    try:
        library, reason = _native._library()
        assert library is not None and library.exists(), reason
    finally:
        _native._forget()


def test_small_products_do_not_build_it(monkeypatch, tmp_path):
    """On a machine without the library, a small product takes the XLA path
    (or numpy) at once; only a product worth the build builds it.
    """
    monkeypatch.setenv("EINSLICE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_native, "_registered", None)  # as in a fresh process
    _native._forget()
    try:
        assert _native.max_plus_kernel(build=False) is None
        a, b = np.ones((1, 4, 5)), np.ones((1, 5, 3))
        assert _native.host_max_plus(a, b) is None  # numpy's blocks run it
        assert _max_product(a, b).tolist() == [[[2.0] * 3] * 4]
        x = jnp.ones((4, 5))
        assert (
            max_plus_dot(x, x.T, (((1,), (0,)), ((), ()))).tolist() == [[2.0] * 4] * 4
        )
        assert "until a product is large enough" in _native.status()
        assert not (tmp_path / "cache" / "kernels").exists()
    finally:
        monkeypatch.undo()
        _native._forget()
