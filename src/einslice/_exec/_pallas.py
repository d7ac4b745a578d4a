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

from dataclasses import dataclass, replace
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
pltpu: Any = _pltpu
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

# VMEM a call may use: its blocks, double-buffered, take up to ~13 MB (4096
# columns), near the 16 MB that Mosaic allows by default; a v5e has 128 MiB.
# At most 3/4 of the chip's (`_vmem_limit`).
VMEM_LIMIT = 48 * 1024 * 1024

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


@dataclass(frozen=True)
class Blocks:
    """How a product is blocked: one grid step's rows x contracted x columns.

    ``tile`` rows (and, with ``chunks``, that many lane columns of 128) stay
    in vector registers while the step's contracted entries stream through.
    ``chunks=0`` lays both sides out as they come ([m, k] by [k, n]); else
    the right side and the output are laid out in lane columns ([n / 128, k,
    128]), so that a step loops over groups of ``chunks`` columns, reading
    the right side's rows by sublane-broadcast loads where ``stride0``, and
    broadcasting each left column along lanes once per step (into VMEM)
    where ``cache_a``, not once per group.
    """

    rows: int = BLOCK_M
    depth: int = BLOCK_K
    cols: int = BLOCK_N
    tile: int = ROW_TILE
    chunks: int = 0
    stride0: bool = False
    cache_a: bool = False

    def fit(self, m: int, k: int, n: int) -> Blocks:
        """These blocks shrunk to an m x k x n product.

        Shapes smaller than a block get one block of their own size, rounded
        up to the TPU's tile (8 sublanes, 128 lanes); the contracted block is
        the whole contracted length where that fits in one.

        Example:
            >>> b = Blocks(256, 128, 512, 32).fit(5, 3, 7)
            >>> (b.rows, b.depth, b.cols, b.tile)
            (8, 3, 128, 8)
        """
        tile = min(self.tile, _round_up(m, 8))
        lanes = 128 * max(self.chunks, 1)
        cols = min(self.cols, _round_up(n, lanes))
        chunks = min(self.chunks, cols // 128)
        return replace(
            self,
            rows=min(self.rows, _round_up(m, tile)),
            depth=k if k <= self.depth else self.depth,
            cols=cols,
            tile=tile,
            chunks=chunks,
        )


DEFAULT = Blocks()


def blocks(m: int, k: int, n: int) -> Blocks:
    """The default blocks for an m x k x n product (`Blocks.fit`).

    Example:
        >>> b = blocks(4096, 4096, 4096)
        >>> (b.rows, b.depth, b.cols, b.tile)
        (256, 128, 512, 32)
    """
    return DEFAULT.fit(m, k, n)


def worth_it(m: int, k: int, n: int) -> bool:
    """Whether an m x k x n product should run in the kernel.

    When it is large enough (`SMALL_PAIRS`), padding it costs at most
    `MAX_PADDING` in pairs, and its copies fit what the planner counts for a
    max-plus step beside its result (``_plan/_cost._step_transient``: twice
    both sides and the result; `copies`).

    Example:
        >>> worth_it(4096, 4096, 4096), worth_it(8, 8, 8), worth_it(4096, 4096, 8)
        (True, False, False)
    """
    if min(m, k, n) == 0 or m * k * n < SMALL_PAIRS:
        return False
    b = blocks(m, k, n)
    pm, pk, pn = _round_up(m, b.rows), _round_up(k, b.depth), _round_up(n, b.cols)
    if pm * pk * pn > MAX_PADDING * m * k * n:
        return False
    return copies(m, k, n) <= 2 * (m * k + k * n) + 2 * m * n


def copies(m: int, k: int, n: int) -> int:
    """Entries `max_plus_tpu` allocates for an m x k x n product, at most.

    A padded (or transposed, by its caller) copy of each side, the padded
    output and its cut; in lane columns, one more copy of the right side
    and of the output.

    Example:
        >>> copies(1024, 2048, 1024) == 1024 * 2048 * 2 + 2 * 1024 * 1024
        True
    """
    b = blocks(m, k, n)
    pm, pk, pn = _round_up(m, b.rows), _round_up(k, b.depth), _round_up(n, b.cols)
    extra = 1 if b.chunks else 0
    return pm * pk + (1 + extra) * pk * pn + (1 + extra) * pm * pn + m * n


def _vmem_limit() -> int | None:
    """`VMEM_LIMIT`, or 3/4 of this TPU's VMEM if less; None (Mosaic's) if unknown."""
    try:
        capacity = pltpu.get_tpu_info().vmem_capacity_bytes
    except Exception:  # no TPU here (lowering for one), or an older JAX
        return None
    return min(VMEM_LIMIT, capacity * 3 // 4)


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


def _kernel_columns(a_ref, b_ref, o_ref, *scratch, blk: Blocks, interpret: bool):
    """`_kernel` with the right side and output in lane columns (`Blocks`).

    ``a_ref`` [bm, bk], ``b_ref`` [bn / 128, bk, 128], ``o_ref`` [bn / 128,
    bm, 128]; ``scratch`` holds the left columns broadcast along lanes
    [bk, tile, 128] where ``blk.cache_a``.
    """

    @pl.when(pl.program_id(3) == 0)
    def _start():
        o_ref[...] = jnp.full(o_ref.shape, -jnp.inf, o_ref.dtype)

    depth, tile, chunks = a_ref.shape[1], blk.tile, blk.chunks
    groups = b_ref.shape[0] // chunks

    def row_of_b(c, k):
        if blk.stride0 and not interpret:  # a sublane-broadcast load
            return b_ref[c, pl.ds(k, tile, stride=0), :]
        return b_ref[c, pl.ds(k, 1), :]  # interpret mode: no stride 0

    def rows(r, carry):
        r0 = pl.multiple_of(r * tile, tile)
        a = a_ref[pl.ds(r0, tile), :]
        if blk.cache_a:
            for k in range(depth):
                scratch[0][k] = jnp.broadcast_to(a[:, k : k + 1], (tile, 128))

        def group(g, carry):
            c0 = g * chunks
            acc = [o_ref[c0 + c, pl.ds(r0, tile), :] for c in range(chunks)]
            for k in range(depth):
                if blk.cache_a:
                    col = scratch[0][k]
                else:
                    col = jnp.broadcast_to(a[:, k : k + 1], (tile, 128))
                for c in range(chunks):
                    acc[c] = jnp.maximum(acc[c], col + row_of_b(c0 + c, k))
            for c in range(chunks):
                o_ref[c0 + c, pl.ds(r0, tile), :] = acc[c]
            return carry

        lax.fori_loop(jnp.int32(0), jnp.int32(groups), group, 0)
        return carry

    lax.fori_loop(jnp.int32(0), jnp.int32(o_ref.shape[1] // tile), rows, 0)


def max_plus_tpu(
    lhs: jax.Array,
    rhs: jax.Array,
    interpret: bool = False,
    blk: Blocks | None = None,
) -> jax.Array:
    """``out[b, m, n] = max_k lhs[b, m, k] + rhs[b, k, n]`` in the Pallas kernel.

    float32 operands without ``+inf`` (see the module docstring); any sizes:
    each axis is padded with ``-inf`` (the semiring's zero) to whole blocks
    and the result cut back. ``interpret=True`` runs it on any backend;
    ``blk`` overrides the default `Blocks` (measurements).
    """
    if not available():
        raise RuntimeError(
            f"einslice's max-plus TPU kernel needs Pallas's TPU backend, which "
            f"this JAX ({jax.__version__}) lacks; call max_plus_dot instead"
        )
    batch, m, k = lhs.shape
    n = rhs.shape[2]
    b = (blk or DEFAULT).fit(m, k, n)
    bm, bk, bn = b.rows, b.depth, b.cols
    pm, pk, pn = _round_up(m, bm), _round_up(k, bk), _round_up(n, bn)
    if (pm, pk) != (m, k):
        lhs = jnp.pad(lhs, ((0, 0), (0, pm - m), (0, pk - k)), constant_values=-jnp.inf)
    if (pk, pn) != (k, n):
        rhs = jnp.pad(rhs, ((0, 0), (0, pk - k), (0, pn - n)), constant_values=-jnp.inf)
    grid = (batch, pm // bm, pn // bn, pk // bk)
    params = _PARAMS(
        dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"),
        vmem_limit_bytes=_vmem_limit(),
    )
    a_spec = pl.BlockSpec((None, bm, bk), lambda b, i, j, c: (b, i, c))
    if not b.chunks:
        out = pl.pallas_call(
            partial(_kernel, tile=b.tile),
            out_shape=jax.ShapeDtypeStruct((batch, pm, pn), lhs.dtype),
            grid=grid,
            in_specs=[
                a_spec,
                pl.BlockSpec((None, bk, bn), lambda b, i, j, c: (b, c, j)),
            ],
            out_specs=pl.BlockSpec((None, bm, bn), lambda b, i, j, c: (b, i, j)),
            compiler_params=params,
            interpret=interpret,
        )(lhs, rhs)
    else:
        lanes = bn // 128
        rhs = rhs.reshape(batch, pk, pn // 128, 128).transpose(0, 2, 1, 3)
        scratch = [pltpu.VMEM((bk, b.tile, 128), lhs.dtype)] if b.cache_a else []
        out = pl.pallas_call(
            partial(_kernel_columns, blk=b, interpret=interpret),
            out_shape=jax.ShapeDtypeStruct((batch, pn // 128, pm, 128), lhs.dtype),
            grid=grid,
            in_specs=[
                a_spec,
                pl.BlockSpec((None, lanes, bk, 128), lambda b, i, j, c: (b, j, c, 0)),
            ],
            out_specs=pl.BlockSpec(
                (None, lanes, bm, 128), lambda b, i, j, c: (b, j, i, 0)
            ),
            scratch_shapes=scratch,
            compiler_params=params,
            interpret=interpret,
        )(lhs, rhs)
        out = out.transpose(0, 2, 1, 3).reshape(batch, pm, pn)
    if (pm, pn) != (m, n):
        out = out[:, :m, :n]
    return out
