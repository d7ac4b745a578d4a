"""The TPU's max-plus kernel (``_exec/_pallas.py``), checked on the CPU.

Pallas runs the kernel in interpret mode on any backend: its results are
checked against a float64 numpy reference of the max semiring on shapes that
need padding on every axis (rows not a multiple of the row tile, columns not
of 128 lanes, contracted lengths over one block), batches, ``-inf`` rows and
columns, NaN, and ``+inf`` (which its caller sends to XLA's path). That
``max_plus_dot`` picks it on a TPU is checked by lowering for the TPU here.
The CPU's own path is unchanged (``tests/exec/test_native.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import einslice
from einslice._exec import _pallas
from einslice._exec._semiring import max_plus_dot, max_plus_pallas

pytestmark = pytest.mark.skipif(
    not _pallas.available(), reason=f"no Pallas TPU backend in jax {jax.__version__}"
)


def reference(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """max_k lhs[b, m, k] + rhs[b, k, n] in float64, -inf + inf = -inf."""
    left, right = lhs[:, :, :, None], rhs[:, None, :, :]
    with np.errstate(invalid="ignore"):
        total = left + right
    zero = ((left == -np.inf) & (right == np.inf)) | (
        (left == np.inf) & (right == -np.inf)
    )
    return np.where(zero, -np.inf, total).max(axis=2)


def run(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    call = jax.jit(lambda x, y: max_plus_pallas(x, y, interpret=True))
    return np.asarray(call(jnp.asarray(lhs), jnp.asarray(rhs)))


# each shape compiles the kernel in interpret mode (5-15 s): the two larger
# ones (several row tiles, column and contracted blocks) run with the slow tests
@pytest.mark.parametrize(
    "batch, m, k, n",
    [
        (1, 1, 1, 1),
        (2, 5, 7, 3),
        (1, 40, 129, 130),
        pytest.param(3, 9, 300, 20, marks=pytest.mark.slow),
        pytest.param(1, 264, 64, 600, marks=pytest.mark.slow),
    ],
)
def test_kernel_matches_float64_reference(batch, m, k, n):
    rng = np.random.default_rng(batch * 1000 + m + k + n)
    lhs = rng.standard_normal((batch, m, k)).astype(np.float32)
    rhs = rng.standard_normal((batch, k, n)).astype(np.float32)
    # each entry is one float32 sum of two operands: exact
    np.testing.assert_array_equal(run(lhs, rhs), reference(lhs, rhs).astype(np.float32))


def test_special_values_follow_the_semiring():
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal((2, 20, 150)).astype(np.float32)
    rhs = rng.standard_normal((2, 150, 140)).astype(np.float32)
    lhs[0, 3, :] = -np.inf  # a row of zeros: -inf out
    rhs[1, :, 7] = -np.inf  # a column of zeros
    lhs[1, 5, 100:] = -np.inf  # partly zero
    lhs[0, 8, 17] = np.nan  # NaN propagates along its row
    want = reference(lhs, rhs).astype(np.float32)
    got = run(lhs, rhs)
    np.testing.assert_array_equal(got, want)
    assert np.isneginf(got[0, 3]).all() and np.isneginf(got[1, :, 7]).all()
    assert np.isnan(got[0, 8]).all() and not np.isnan(got[0, 7]).any()
    # +inf beside -inf gives the semiring's zero (XLA's path, taken for +inf;
    # it gives -inf, not NaN, for NaN + -inf: no NaN here)
    lhs[0, 8, 17] = 0.5
    lhs[0, 2, :] = np.inf
    rhs[0, :, 4] = -np.inf
    rhs[0, 9, 5] = np.inf
    got = run(lhs, rhs)
    np.testing.assert_array_equal(got, reference(lhs, rhs).astype(np.float32))
    assert np.isneginf(got[0, 2, 4]) and got[0, 2, 5] == np.inf


@pytest.mark.slow
def test_kernel_alone_pads_with_the_semirings_zero():
    # without the +inf check around it, on a shape padded on every axis
    rng = np.random.default_rng(1)
    lhs = -np.abs(rng.standard_normal((1, 11, 133))).astype(np.float32)
    rhs = -np.abs(rng.standard_normal((1, 133, 129))).astype(np.float32)
    call = jax.jit(lambda x, y: _pallas.max_plus_tpu(x, y, interpret=True))
    got = np.asarray(call(lhs, rhs))
    np.testing.assert_array_equal(got, reference(lhs, rhs).astype(np.float32))


def test_vmap_of_the_kernel():
    rng = np.random.default_rng(2)
    lhs = rng.standard_normal((3, 1, 12, 20)).astype(np.float32)
    rhs = rng.standard_normal((3, 1, 20, 9)).astype(np.float32)
    call = jax.jit(jax.vmap(lambda x, y: max_plus_pallas(x, y, interpret=True)))
    got = np.asarray(call(lhs, rhs))
    want = np.stack([reference(a, b) for a, b in zip(lhs, rhs, strict=True)])
    np.testing.assert_array_equal(got, want.astype(np.float32))


# On a TPU: the compiled kernel (Mosaic), not the interpreter, on shapes that
# need padding on every axis, small contracted lengths, several column and
# contracted blocks, batches; against XLA's path on the chip, and numpy.
ON_TPU_SHAPES = [
    (1, 512, 1024, 512),
    (2, 40, 129, 130),
    (1, 5, 3, 300),
    (1, 300, 7, 2100),
    (3, 17, 260, 64),
]


@pytest.mark.skipif(jax.default_backend() != "tpu", reason="compiles for a TPU")
def test_the_compiled_kernel_on_a_tpu():
    check_compiled(interpret=False)


def check_compiled(interpret: bool, shapes=ON_TPU_SHAPES):
    from einslice._exec._semiring import _max_plus_xla

    for batch, m, k, n in shapes:
        rng = np.random.default_rng(m + k + n)
        lhs = rng.standard_normal((batch, m, k)).astype(np.float32)
        rhs = rng.standard_normal((batch, k, n)).astype(np.float32)
        lhs[0, m // 2, :] = -np.inf
        rhs[-1, :, n - 1] = -np.inf
        lhs[-1, 0, k - 1] = np.nan
        call = jax.jit(lambda x, y: _pallas.max_plus_tpu(x, y, interpret=interpret))
        got = np.asarray(call(lhs, rhs))
        xla = jax.jit(lambda x, y: _max_plus_xla(jnp.swapaxes(x, 1, 2), y))
        np.testing.assert_array_equal(got, np.asarray(xla(lhs, rhs)))
        if m * k * n <= 1 << 22:
            want = reference(lhs, rhs).astype(np.float32)
            np.testing.assert_array_equal(got, want)


def test_the_index_maps_are_int32_under_x64():
    # Mosaic refuses an index map returning an int64 (a literal 0 under x64,
    # which the tests enable): "failed to legalize operation 'func.return'".
    assert jax.config.read("jax_enable_x64")
    grid = [jnp.int32(1)] * 4
    for index_map in (_pallas._lhs_block, _pallas._rhs_block, _pallas._out_block):
        jaxpr = jax.make_jaxpr(index_map)(*grid)
        assert {v.aval.dtype for v in jaxpr.jaxpr.outvars} == {np.dtype("int32")}


def test_blocks_fit_the_tpu_tiles():
    for m, k, n in [(1, 1, 1), (5, 3, 7), (100, 200, 300), (4096, 4096, 4096)]:
        b = _pallas.blocks(m, k, n)
        assert b.rows % 8 == 0 and b.rows % b.tile == 0 and b.cols % 128 == 0
        assert b.depth == k or b.depth % 128 == 0
        assert b.rows <= max(_pallas.BLOCK_M, 8) and b.cols <= _pallas.BLOCK_N
        assert b.cols % (128 * b.chunks) == 0 and b.chunks * 128 <= max(n, 128) + 127


def lowered_for_tpu(monkeypatch, f, *shapes) -> str:
    """``f``'s program lowered for a TPU (this process's backend pretending one)."""
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    return jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",)).as_text()


def test_max_plus_dot_picks_the_kernel_on_a_tpu(monkeypatch):
    dims = (((1,), (0,)), ((), ()))
    text = lowered_for_tpu(
        monkeypatch, lambda x, y: max_plus_dot(x, y, dims), (512, 384), (384, 640)
    )
    assert "tpu_custom_call" in text
    # too small to pay for the call: XLA's path
    text = lowered_for_tpu(
        monkeypatch, lambda x, y: max_plus_dot(x, y, dims), (8, 8), (8, 8)
    )
    assert "tpu_custom_call" not in text
    # turned off with einslice's other kernels
    monkeypatch.setenv("EINSLICE_NATIVE", "0")
    text = lowered_for_tpu(
        monkeypatch, lambda x, y: max_plus_dot(x, y, dims), (512, 384), (384, 640)
    )
    assert "tpu_custom_call" not in text


def test_a_max_einsum_and_its_gradient_lower_for_a_tpu(monkeypatch):
    # the seed formula's shape of product (batch-free, two contracted axes),
    # and its derivative (the union rule: no kernel, still lowers)
    def f(a, b, c):
        return einslice.einsum("ikl,jkl,ij->ij", a, b, c, semiring="max")

    text = lowered_for_tpu(monkeypatch, f, (256, 4, 128), (256, 4, 128), (256, 256))
    assert "tpu_custom_call" in text
    batched = jax.vmap(f, in_axes=(0, 0, None))
    text = lowered_for_tpu(
        monkeypatch, batched, (2, 256, 4, 128), (2, 256, 4, 128), (256, 256)
    )
    assert "tpu_custom_call" in text
    grad = jax.grad(lambda a, b, c: f(a, b, c).sum(), (0, 1))
    lowered_for_tpu(monkeypatch, grad, (64, 2, 32), (64, 2, 32), (64, 64))


def test_the_cpu_keeps_its_path():
    # on the CPU backend the kernel is never traced into a program
    if jax.default_backend() != "cpu":
        pytest.skip("checks the CPU backend")
    dims = (((1,), (0,)), ((), ()))
    x = jnp.ones((512, 384))
    text = jax.jit(lambda a: max_plus_dot(a, a.T, dims)).lower(x).as_text()
    assert "tpu_custom_call" not in text and "pallas" not in text
