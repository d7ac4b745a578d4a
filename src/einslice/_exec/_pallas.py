"""einslice's own TPU kernel: the max-plus product in Pallas (Mosaic TPU).

XLA's TPU programs run a max-plus product as elementwise fusions (the blocked
path, ``_semiring._max_plus_blocked``): 0.75 T pairs/s on a v5e, 68x the time
of a float matmul of the same size. This kernel blocks it for the vector
unit as a matmul is blocked: output blocks stay in VMEM across the
contracted grid axis; in each, `Blocks.tile` rows by `Blocks.chunks` lane
columns (16 x 1024 entries, 16 vector registers) are held in registers
while the block's contracted entries stream through, each adding a column
of the left side, broadcast along lanes, to a row of the right side, read
by a sublane-broadcast load, and keeping the max. The right side and the
output are laid out in lane columns ([n / 128, k, 128]) for those loads.
On a v5e: 2.48 T pairs/s at 4096^2 (3.3x XLA's path), about 80% of the
vector unit's add-and-max rate (``benchmarks/results/maxplus.md``).

It takes float32 only (the v5e's vector unit has no float64, and no bfloat16
arithmetic), any batch dimension, and follows the max semiring's rules
except one: ``-inf + inf`` gives NaN here, so its caller
(``_semiring.max_plus_dot``) runs operands holding ``+inf`` on XLA's path.
It has no derivative of its own (the caller defines one).

Pallas's TPU API moved between JAX releases: the imports are guarded, and a
JAX without it (``available()`` false) keeps XLA's path. On other backends
the kernel runs only in interpret mode (the tests' CPU check), which reads
the right side's rows by a plain load and a broadcast instead.

Example (interpret mode runs it on any backend):
    >>> x = jnp.array([[[0.0, 5.0]]])  # [batch, m, k]
    >>> y = jnp.array([[[1.0], [0.0]]])  # [batch, k, n]
    >>> max_plus_tpu(x, y, interpret=True).tolist()
    [[[5.0]]]
"""

from __future__ import annotations

from dataclasses import dataclass
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

# Block sizes: a grid step's rows x contracted x columns, and the rows and
# lane columns (of 128) kept in registers. Measured on a TPU v5e at 4096^2,
# each variant equal to XLA's path (benchmarks/maxplus_tpu_tune.py; the
# table in benchmarks/results/maxplus.md): 27.7 ms (2.48 T pairs/s) with
# these, against 38.1 ms for 16 x 1024 registers read as [k, n] rows and
# broadcast (1.80), 52.7 ms for 8 x 2048, 42.8-73.9 ms for 32 x 512 and
# 64 x 256 (more lane broadcasts), and 37.9-44.6 ms with the lane
# broadcasts made once per step into VMEM and read back.
BLOCK_M = 256
BLOCK_K = 128
BLOCK_N = 2048
ROW_TILE = 16
CHUNKS = 8

# VMEM a call may use: the default blocks, double-buffered, take about 6 MB,
# wider ones (4096 columns) 13 MB, near the 16 MB that Mosaic allows by
# default; a v5e has 128 MiB. At most 3/4 of the chip's (`_vmem_limit`).
VMEM_LIMIT = 48 * 1024 * 1024

# The kernel runs a product only when padding it to whole blocks costs at most
# this factor in pairs, and it has at least SMALL_PAIRS pairs (not measured
# on the chip: below it either path takes microseconds, and a pallas_call
# and its padding copies have a fixed cost).
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

    ``tile`` rows by ``chunks`` lane columns (of 128) stay in vector
    registers while the step's contracted entries stream through.
    """

    rows: int = BLOCK_M
    depth: int = BLOCK_K
    cols: int = BLOCK_N
    tile: int = ROW_TILE
    chunks: int = CHUNKS

    def fit(self, m: int, k: int, n: int) -> Blocks:
        """These blocks shrunk to an m x k x n product.

        Shapes smaller than a block get one block of their own size, rounded
        up to the TPU's tile (8 sublanes, 128 lanes); the contracted block is
        the whole contracted length where that fits in one.

        Example:
            >>> Blocks().fit(5, 3, 300)
            Blocks(rows=8, depth=3, cols=384, tile=8, chunks=3)
        """
        tile = min(self.tile, _round_up(m, 8))
        chunks = min(self.chunks, -(-n // 128))
        return Blocks(
            rows=min(self.rows, _round_up(m, tile)),
            depth=k if k <= self.depth else self.depth,
            cols=min(self.cols, _round_up(n, 128 * chunks)),
            tile=tile,
            chunks=chunks,
        )


DEFAULT = Blocks()


def blocks(m: int, k: int, n: int) -> Blocks:
    """The default blocks for an m x k x n product (`Blocks.fit`).

    Example:
        >>> blocks(4096, 4096, 4096)
        Blocks(rows=256, depth=128, cols=2048, tile=16, chunks=8)
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
    """Entries `max_plus_tpu` holds beside its result for an m x k x n product.

    At most: a padded (or transposed, by its caller) copy of each side, the
    right side again in lane columns, the output in lane columns, and in rows
    where it is padded (then cut to the result).

    Example:
        >>> copies(1024, 2048, 1024) == 1024 * 2048 * 3 + 1024 * 1024
        True
    """
    b = blocks(m, k, n)
    pm, pk, pn = _round_up(m, b.rows), _round_up(k, b.depth), _round_up(n, b.cols)
    padded_out = pm * pn if (pm, pn) != (m, n) else 0
    return pm * pk + 2 * pk * pn + pm * pn + padded_out


def _vmem_limit() -> int | None:
    """`VMEM_LIMIT`, or 3/4 of this TPU's VMEM if less; None (Mosaic's) if unknown."""
    try:
        capacity = pltpu.get_tpu_info().vmem_capacity_bytes
    except Exception:  # no TPU here (lowering for one), or an older JAX
        return None
    return min(VMEM_LIMIT, capacity * 3 // 4)


def _kernel(a_ref, b_ref, o_ref, *, blk: Blocks, interpret: bool):
    """One grid step: ``o = max(o, max_k a[:, k] + b[k, :])`` over this block's k.

    ``a_ref`` [bm, bk], ``b_ref`` [bn / 128, bk, 128], ``o_ref`` [bn / 128,
    bm, 128]; the output block stays in VMEM across the contracted grid axis
    (the last).
    """

    @pl.when(pl.program_id(3) == 0)
    def _start():
        o_ref[...] = jnp.full(o_ref.shape, -jnp.inf, o_ref.dtype)

    depth, tile, chunks = a_ref.shape[1], blk.tile, blk.chunks

    # a sublane-broadcast (stride-0) load, as measured (contracted blocks of
    # 128); a load and a broadcast in the interpreter, which has none, and
    # for contracted blocks shorter than the tile (not run on the chip yet)
    broadcast_load = not interpret and depth >= tile

    def row_of_b(c, k):
        if broadcast_load:
            return b_ref[c, pl.ds(k, tile, stride=0), :]
        return b_ref[c, pl.ds(k, 1), :]

    def rows(r, carry):
        r0 = pl.multiple_of(r * tile, tile)
        a = a_ref[pl.ds(r0, tile), :]

        def group(g, carry):
            c0 = g * chunks
            acc = [o_ref[c0 + c, pl.ds(r0, tile), :] for c in range(chunks)]
            for k in range(depth):  # unrolled: static lane slices of a
                col = jnp.broadcast_to(a[:, k : k + 1], (tile, 128))
                for c in range(chunks):
                    acc[c] = jnp.maximum(acc[c], col + row_of_b(c0 + c, k))
            for c in range(chunks):
                o_ref[c0 + c, pl.ds(r0, tile), :] = acc[c]
            return carry

        # int32 bounds: Mosaic's index arithmetic is 32-bit, also under x64
        lax.fori_loop(jnp.int32(0), jnp.int32(b_ref.shape[0] // chunks), group, 0)
        return carry

    lax.fori_loop(jnp.int32(0), jnp.int32(o_ref.shape[1] // tile), rows, 0)


# The blocks' index maps over the grid (batch, rows, columns, contracted).
# Their constants are int32: a literal 0 is int64 under ``jax_enable_x64``,
# which Mosaic refuses ("failed to legalize operation 'func.return'
# (i32, i32, i32, i64)", TPU v5e, JAX 0.10.2, 2026-12-07).
def _lhs_block(b, i, j, c):
    return b, i, c


def _rhs_block(b, i, j, c):
    return b, j, c, jnp.int32(0)


def _out_block(b, i, j, c):
    return b, j, i, jnp.int32(0)


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
    lanes = bn // 128
    rhs = rhs.reshape(batch, pk, pn // 128, 128).transpose(0, 2, 1, 3)
    out = pl.pallas_call(
        partial(_kernel, blk=b, interpret=interpret),
        out_shape=jax.ShapeDtypeStruct((batch, pn // 128, pm, 128), lhs.dtype),
        grid=(batch, pm // bm, pn // bn, pk // bk),
        in_specs=[
            pl.BlockSpec((None, bm, bk), _lhs_block),
            pl.BlockSpec((None, lanes, bk, 128), _rhs_block),
        ],
        out_specs=pl.BlockSpec((None, lanes, bm, 128), _out_block),
        compiler_params=_PARAMS(
            dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=_vmem_limit(),
        ),
        interpret=interpret,
    )(lhs, rhs)
    out = out.transpose(0, 2, 1, 3).reshape(batch, pm, pn)
    if (pm, pn) != (m, n):
        out = out[:, :m, :n]
    return out
