"""einslice's own TPU kernel: the max-plus product in Pallas (Mosaic TPU).

XLA's TPU programs run a max-plus product as elementwise fusions (the blocked
path, ``_semiring._max_plus_blocked``): 0.75 T pairs/s on a v5e, 68x the time
of a float matmul of the same size. This kernel runs it on the vector unit
the way a matmul is blocked: the output in VMEM blocks that stay resident
across the contracted axis, each block's rows in tiles of `ROW_TILE` held in
vector registers while a block of `BLOCK_K` contracted entries streams
through them; each step adds a column of the left side (broadcast along
lanes) to a row of the right side (broadcast along sublanes) and keeps the
max. The figures that fixed the block sizes are in
``benchmarks/results/maxplus.md`` (TPU section).

It takes float32 only (the v5e's vector unit has no float64, and no bfloat16
arithmetic), any batch dimension, and follows the max semiring's rules
except one: ``-inf + inf`` gives NaN here, so its caller
(``_semiring.max_plus_dot``) runs operands holding ``+inf`` on XLA's path.
It has no derivative of its own (the caller defines one).

Pallas's TPU API moved between JAX releases: the imports are guarded, and a
JAX without it (``available()`` false) keeps XLA's path. On other backends
the kernel runs only in interpret mode (the tests' CPU check).

Example (interpret mode runs it on any backend):
    >>> x = jnp.array([[[0.0, 5.0]]])  # [batch, m, k]
    >>> y = jnp.array([[[1.0], [0.0]]])  # [batch, k, n]
    >>> max_plus_tpu(x, y, interpret=True).tolist()
    [[[5.0]]]
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

try:  # Pallas and its TPU backend: experimental, their API moves
    from jax.experimental import pallas as _pl
    from jax.experimental.pallas import tpu as _pltpu
except ImportError:  # pragma: no cover - a JAX without Pallas
    _pl = _pltpu = None
pl: Any = _pl
# CompilerParams in JAX 0.10 and 0.12 (checked); TPUCompilerParams in older ones
_PARAMS: Any = getattr(_pltpu, "CompilerParams", None) or getattr(
    _pltpu, "TPUCompilerParams", None
)

# Block sizes (rows x contracted x columns of one grid step, and the rows a
# step keeps in vector registers): measured on a TPU v5e at 4096^2 against
# other shapes (benchmarks/maxplus_tpu_explore.py, results in
# benchmarks/results/maxplus.md).
BLOCK_M = 256
BLOCK_K = 128
BLOCK_N = 512
ROW_TILE = 32

# The kernel runs a product only when padding it to whole blocks costs at most
# this factor in pairs, and it has at least SMALL_PAIRS pairs: below that,
# one pallas_call's fixed cost and the padding copies outweigh the gain.
MAX_PADDING = 2.0
SMALL_PAIRS = 1 << 20


def available() -> bool:
    """Whether this JAX has Pallas's TPU backend (the kernel can be built)."""
    return pl is not None and _PARAMS is not None


def takes(dtype) -> bool:
    """Whether the kernel takes operands of ``dtype`` (float32 only)."""
    return jnp.dtype(dtype) == jnp.float32


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def blocks(m: int, k: int, n: int) -> tuple[int, int, int, int]:
    """Block sizes ``(rows, contracted, columns, row tile)`` for an m x k x n product.

    Shapes smaller than a block get one block of their own size, rounded up to
    the TPU's tile (8 sublanes, 128 lanes); the contracted block is the whole
    contracted length where that fits in one.

    Example:
        >>> blocks(4096, 4096, 4096)
        (256, 128, 512, 32)
        >>> blocks(5, 3, 7)
        (8, 3, 128, 8)
    """
    tile = min(ROW_TILE, _round_up(m, 8))
    bm = min(BLOCK_M, _round_up(m, tile))
    bk = k if k <= BLOCK_K else BLOCK_K
    bn = min(BLOCK_N, _round_up(n, 128))
    return bm, bk, bn, tile


def worth_it(m: int, k: int, n: int) -> bool:
    """Whether an m x k x n product should run in the kernel (see `MAX_PADDING`).

    Example:
        >>> worth_it(4096, 4096, 4096), worth_it(8, 8, 8), worth_it(4096, 4096, 8)
        (True, False, False)
    """
    if min(m, k, n) == 0 or m * k * n < SMALL_PAIRS:
        return False
    bm, bk, bn, _ = blocks(m, k, n)
    padded = _round_up(m, bm) * _round_up(k, bk) * _round_up(n, bn)
    return padded <= MAX_PADDING * m * k * n


def _kernel(a_ref, b_ref, o_ref, *, tile: int):
    """One grid step: ``o = max(o, max_k a[:, k] + b[k, :])`` over this block's k.

    ``a_ref`` [bm, bk], ``b_ref`` [bk, bn], ``o_ref`` [bm, bn]; the output
    block stays in VMEM across the contracted grid axis (the last).
    """

    @pl.when(pl.program_id(3) == 0)
    def _start():
        o_ref[...] = jnp.full(o_ref.shape, -jnp.inf, o_ref.dtype)

    depth = a_ref.shape[1]

    def rows(r, carry):
        r0 = pl.multiple_of(r * tile, tile)
        acc = o_ref[pl.ds(r0, tile), :]
        a = a_ref[pl.ds(r0, tile), :]
        for k in range(depth):  # unrolled: static lane slices of a
            acc = jnp.maximum(acc, a[:, k : k + 1] + b_ref[pl.ds(k, 1), :])
        o_ref[pl.ds(r0, tile), :] = acc
        return carry

    # int32 bounds: Mosaic's index arithmetic is 32-bit, also under x64
    lax.fori_loop(jnp.int32(0), jnp.int32(o_ref.shape[0] // tile), rows, 0)


def max_plus_tpu(lhs: jax.Array, rhs: jax.Array, interpret: bool = False) -> jax.Array:
    """``out[b, m, n] = max_k lhs[b, m, k] + rhs[b, k, n]`` in the Pallas kernel.

    float32 operands without ``+inf`` (see the module docstring); any sizes:
    each axis is padded with ``-inf`` (the semiring's zero) to whole blocks
    and the result cut back. ``interpret=True`` runs it on any backend.
    """
    if not available():
        raise RuntimeError(
            f"einslice's max-plus TPU kernel needs Pallas's TPU backend, which "
            f"this JAX ({jax.__version__}) lacks; call max_plus_dot instead"
        )
    batch, m, k = lhs.shape
    n = rhs.shape[2]
    bm, bk, bn, tile = blocks(m, k, n)
    pm, pk, pn = _round_up(m, bm), _round_up(k, bk), _round_up(n, bn)
    if (pm, pk) != (m, k):
        lhs = jnp.pad(lhs, ((0, 0), (0, pm - m), (0, pk - k)), constant_values=-jnp.inf)
    if (pk, pn) != (k, n):
        rhs = jnp.pad(rhs, ((0, 0), (0, pk - k), (0, pn - n)), constant_values=-jnp.inf)
    out = pl.pallas_call(
        partial(_kernel, tile=tile),
        out_shape=jax.ShapeDtypeStruct((batch, pm, pn), lhs.dtype),
        grid=(batch, pm // bm, pn // bn, pk // bk),
        in_specs=[
            pl.BlockSpec((None, bm, bk), lambda b, i, j, c: (b, i, c)),
            pl.BlockSpec((None, bk, bn), lambda b, i, j, c: (b, c, j)),
        ],
        out_specs=pl.BlockSpec((None, bm, bn), lambda b, i, j, c: (b, i, j)),
        compiler_params=_PARAMS(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")
        ),
        interpret=interpret,
    )(lhs, rhs)
    if (pm, pn) != (m, n):
        out = out[:, :m, :n]
    return out
