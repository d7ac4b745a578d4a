"""The semirings in JAX: how to multiply pairs, sum out axes, combine chunks.

"sum" is the ordinary einsum. "log" works on log-values: products are sums and
sums are log-sum-exp, computed on the matrix unit by shifting each side by its
max over the contracted axes, exponentiating, ``dot_general``, log, and adding
the shifts back. "max" is max-plus (tropical): products are sums, sums are max.
Every log-space rule is written so that all ``-inf`` input gives ``-inf`` out,
and a zero (not NaN) derivative. What each semiring is (its identity, how it
contracts, how its derivative behaves) is ``_plan/_semiring.Semiring``; its
operations here are one `Rules` record in the table ``RULES``, which every JAX
executor (the chunked chain, its sharded form, ``naive_einsum``) reads, and
which is checked complete against the registry when this module is imported.
A semiring registered as the negation of another gets that one's rules,
negated (`Rules.negated`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, partial
from itertools import pairwise
from math import prod
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import DTypeLike

from .._plan._semiring import (
    LOG,
    MAX,
    SMALL_CONTRACTION,
    SUM,
    Semiring,
    rules_for_every_semiring,
)
from . import _pallas
from ._native import BUILD_PAIRS, enabled, max_plus_kernel, takes

DimensionNumbers = tuple[
    tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]
]


@dataclass(frozen=True)
class Config:
    """Per-call execution options passed through to ``dot_general``."""

    precision: object = None
    preferred_element_type: object = None


def widened(x: jax.Array, config: Config) -> jax.Array:
    """``x`` in ``preferred_element_type`` when that type promotes ``x``.

    jnp.einsum sums out an operand's own indices, and multiplies operands,
    in the preferred type (e.g. bfloat16 operands summed in float32), not in
    the operands' narrower type; so must the steps that are not dot_generals.

    Example:
        >>> x = jnp.ones(3, jnp.bfloat16)
        >>> widened(x, Config(preferred_element_type=jnp.float32)).dtype
        dtype('float32')
    """
    if config.preferred_element_type is None:
        return x
    wanted = cast("DTypeLike", config.preferred_element_type)
    return x if jnp.promote_types(x.dtype, wanted) == x.dtype else x.astype(wanted)


def zero(ring: Semiring, dtype) -> jax.Array:
    """The semiring's additive identity: 0, or -inf in log and max."""
    return jnp.array(ring.zero, dtype)


def combine(ring: Semiring, acc: jax.Array, x: jax.Array) -> jax.Array:
    """Add two partial results (chunks) in the semiring."""
    return RULES[ring.name].combine(acc, x)


def _is_weak(x: jax.Array) -> bool:
    """Weakly typed: from Python scalars, promoted as they are."""
    return jax.typeof(x).weak_type


def reduce(ring: Semiring, x: jax.Array, axes: Sequence[int]) -> jax.Array:
    """Sum out ``axes`` in the semiring."""
    axes = tuple(axes)
    if not axes:
        return x
    return RULES[ring.name].reduce(x, axes)


def _plain_sum(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    """Sum over ``axes`` in ``x``'s own dtype, keeping a weak type weak."""
    if _is_weak(x):  # lax keeps the weak type, which jnp.sum drops
        return lax.reduce_sum(x, axes)
    return jnp.sum(x, axis=axes, dtype=x.dtype)  # jnp.sum would widen ints


def _safe_shift(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    """Max over ``axes`` (kept), with non-finite maxima replaced by 0."""
    shift = lax.stop_gradient(jnp.max(x, axis=axes, keepdims=True, initial=-jnp.inf))
    return jnp.where(jnp.isfinite(shift), shift, jnp.zeros_like(shift))


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def log_sum(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    """Log Σ exp(x) over ``axes``: -inf for all -inf, and NaN-free derivatives.

    Over at most ``ONE_PASS_UP_TO`` entries (a "log" step that reduces its
    union) in one reduction with a logaddexp adder (`_pairwise_log_sum`),
    else shifted by the max.

    Example:
        >>> x = jnp.array([[0.0, 0.0], [-jnp.inf, -jnp.inf]])
        >>> [round(v, 4) for v in log_sum(x, (1,)).tolist()]
        [0.6931, -inf]
    """
    if prod(x.shape[a] for a in axes) <= ONE_PASS_UP_TO and _one_pass_compiles(x):
        return _pairwise_log_sum(x, axes)
    shift, _, total = _log_sum_parts(x, axes)
    return lax.log(total) + shift


# `log_sum` over at most this many entries runs as one reduction whose adder
# is logaddexp (`_pairwise_log_sum`): the "log" steps that reduce a union (at
# most SMALL_CONTRACTION entries each). Every such step is a kernel that XLA
# compiles, and a "log" plan of graphical models has hundreds of them
# (issue 35: "log" plans compile within 2x their "sum" plan).
# benchmarks/log_compile.py's lattices of binary variables (greedy paths,
# lowering and compile, "log" over "sum"), 2026-12-07:
#   TPU v5e, 24 / 48 steps: 2.10x / 2.09x (2.42x / 1.80x since the union
#     reduces a major axis, `_union_reduce`); with the max and the shifted
#     sum in one reduction of pairs 3.65x / 3.44x, in two reductions 4.29x /
#     5.26x. Run time within 5% of either (2.2 / 3.6 ms).
#   XLA:CPU (load ~1.5): 1.93x / 1.50x, against 2.16x / 1.75x and 2.0x.
# Over more entries the shifted form is kept: logaddexp costs an exponential
# and a log1p an entry.
ONE_PASS_UP_TO = SMALL_CONTRACTION


def _one_pass_compiles(x: jax.Array) -> bool:
    """Whether `_pairwise_log_sum` may reduce ``x`` here.

    Not float64 on a TPU: there float64 is emulated, and its transcendentals
    inside a reduction's adder made XLA:TPU abort (2026-12-07, JAX 0.10.2,
    a (6, 7) by (7, 5) "log" product under vmap); the shifted form compiled.
    """
    return not (x.dtype == np.float64 and jax.default_backend() == "tpu")


def _pairwise_log_sum(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    """`log_sum` as one reduction whose adder is logaddexp.

    One kernel where the shifted form takes two reductions and a log (the
    max, the sum of exponentials), and simpler than carrying (max, sum)
    pairs through the reduction: both compile slower, on a TPU by 1.6-2.5x
    (figures at ``ONE_PASS_UP_TO``). Equal entries add ``log 2`` exactly as
    they should, also where both are ``±inf``; NaN stays NaN.

    Example:
        >>> x = jnp.array([[1.0, -jnp.inf], [-jnp.inf, -jnp.inf], [jnp.inf, 2.0]])
        >>> _pairwise_log_sum(x, (1,)).tolist()
        [1.0, -inf, inf]
        >>> round(float(_pairwise_log_sum(jnp.zeros((1, 2)), (1,))[0]), 4)
        0.6931
    """
    dtype = np.dtype(x.dtype)
    return lax.reduce(x, np.array(-np.inf, dtype), _log_adder(dtype), axes)


@cache
def _log_adder(dtype: np.dtype):
    """The reduction's adder: logaddexp of two entries of ``dtype``.

    One function per dtype, so that JAX traces it once, not in every step.
    """
    zero = np.array(0, dtype)

    def add(a, b):
        gap = lax.select(a == b, lax.full_like(a, zero), -lax.abs(a - b))
        return lax.max(a, b) + lax.log1p(lax.exp(gap))

    return add


def _log_sum_parts(x: jax.Array, axes: tuple[int, ...]):
    """The clamped max over ``axes``, the exponentials shifted by it, their sum.

    Written in ``lax`` ops, the max clamped to the finite range (an all
    ``-inf`` slice keeps ``-inf - shift = -inf``, a ``+inf`` entry stays
    ``+inf``, and adding the shift back restores either): every "log" step
    that reduces a union runs this, and a 48-step lattice's lowering took
    1.1-1.3 s in jnp's wrappers and finiteness selects, 0.6 s in these
    (``benchmarks/log_compile.py``).
    """
    kept = tuple(a for a in range(x.ndim) if a not in axes)
    shift = lax.reduce_max(x, axes)
    if jnp.issubdtype(x.dtype, jnp.floating):
        finfo = jnp.finfo(x.dtype)
        low = lax.full_like(shift, finfo.min)
        shift = lax.clamp(low, shift, lax.full_like(shift, finfo.max))
    weights = lax.exp(x - lax.broadcast_in_dim(shift, x.shape, kept))
    return shift, weights, lax.reduce_sum(weights, axes)


@log_sum.defjvp
def _log_sum_jvp(axes, primals, tangents):
    (x,), (tx,) = primals, tangents
    shift, weights, total = _log_sum_parts(x, axes)
    out = lax.log(total) + shift
    safe = lax.select(total > 0, total, lax.full_like(total, 1))
    return out, lax.reduce_sum(weights * tx, axes) / safe


def elementwise(ring: Semiring, left: jax.Array, right: jax.Array) -> jax.Array:
    """The semiring product of two broadcast-compatible arrays."""
    return RULES[ring.name].times(left, right)


def annihilating_add(left: jax.Array, right: jax.Array) -> jax.Array:
    """``left + right``, but -inf (the log and max zero) where either is -inf.

    The semiring's zero annihilates: an empty sum (-inf) times +inf is the
    zero, not the NaN that ``inf + -inf`` gives; NaN stays NaN. The test is
    on the smaller side (``min(left, right) == -inf``), not on each side:
    XLA hoists a comparison of one side out of its broadcast into a kernel
    of its own, on the TPU in every "log" step (2026-12-07, v5e: a 24-step
    lattice's program held 68 kernels with the two tests, 22 without).

    Example:
        >>> annihilating_add(jnp.array([jnp.inf, 1.0]), jnp.array(-jnp.inf)).tolist()
        [-inf, -inf]
        >>> annihilating_add(jnp.array([jnp.nan]), jnp.array([-jnp.inf])).tolist()
        [nan]
    """
    if _same_type(left, right):  # every union step: lax only, no jnp wrappers
        total = lax.add(left, right)
        if not jnp.issubdtype(total.dtype, jnp.floating):
            return total
        low = lax.min(left, right)
    else:
        total = left + right
        if not jnp.issubdtype(total.dtype, jnp.floating):
            return total
        if np.shape(left) != total.shape or np.shape(right) != total.shape:
            # (a scalar beside an array)
            left, right = jnp.broadcast_arrays(left, right)
        low = lax.min(left.astype(total.dtype), right.astype(total.dtype))
    zero = lax.full_like(total, -jnp.inf)
    # (the zero as a constant: no derivative flows through the min)
    return lax.select(lax.eq(low, zero), zero, total)


def _same_type(left, right) -> bool:
    """Both JAX arrays of one shape, dtype and weakness: ``lax`` ops apply as is.

    (jnp's operators, which promote and broadcast, are a traced wrapper
    each: in a 48-step "log" plan they were a third of its lowering.)
    """
    if not (isinstance(left, jax.Array) and isinstance(right, jax.Array)):
        return False
    return jax.typeof(left) == jax.typeof(right)


def pair(
    ring: Semiring,
    left: jax.Array,
    right: jax.Array,
    dims: DimensionNumbers,
    config: Config,
) -> jax.Array:
    """One contracting step with ``dot_general`` dimension numbers, in the semiring.

    The result's axes are ordered as ``dot_general`` orders them: batch, left
    free, right free. Steps that contract nothing go through ``elementwise``.
    """
    return RULES[ring.name].contract(left, right, dims, config)


def _contract_by_flags(
    ring: Semiring,
    left: jax.Array,
    right: jax.Array,
    dims: DimensionNumbers,
    config: Config,
) -> jax.Array:
    """`pair` for a semiring with rules of its own, as its flags say to.

    The cost model (``_plan/_cost._step_transient``) reads the same flags, so
    what it costs is what runs.
    """
    (left_c, _), _ = dims
    entries = prod(left.shape[a] for a in left_c)
    if ring.selective and entries > 1:  # a max ("min" is its negation)
        return max_plus_dot(left, right, dims)
    if ring.contracts_by_union(entries, _union_entries(left, right, dims)):
        reduce = _WRITTEN[ring.name].reduce
        # "log" unions reduce a major axis: on a TPU v5e a 48-step lattice's
        # "log" program compiled in 1.80x its "sum" program's time, against
        # 2.15x with the contracted axis last, in the same run
        # (benchmarks/results/tpu_v5e.md); its gradient's in 0.91x. (Max
        # keeps it last: `max_first` breaks ties in row-major order.)
        return _union_reduce(left, right, dims, reduce, reduce is log_sum)
    if ring.shifted_exp_dot:
        return log_dot(left, right, dims, config.precision)
    return dot(
        left,
        right,
        dims,
        precision=config.precision,
        preferred_element_type=config.preferred_element_type,
    )


def _union_entries(left, right, dims: DimensionNumbers) -> int:
    """Entries of the two sides' union, as ``_plan/_cost._by_union`` counts them.

    (A size-1 axis broadcast against the other side's counts at the larger.)

    Example:
        >>> _union_entries(jnp.ones((2, 3)), jnp.ones((3, 5)), (((1,), (0,)), ((), ())))
        30
    """
    (left_c, right_c), (left_b, right_b) = dims
    shared = prod(
        max(left.shape[a], right.shape[b])
        for a, b in zip((*left_c, *left_b), (*right_c, *right_b), strict=True)
    )
    return (
        shared
        * prod(n for a, n in enumerate(left.shape) if a not in (*left_c, *left_b))
        * prod(n for a, n in enumerate(right.shape) if a not in (*right_c, *right_b))
    )


def dot(left, right, dims: DimensionNumbers, **options) -> jax.Array:
    """``lax.dot_general`` with runs of axes merged so XLA copies no operand.

    When the contracted axes are adjacent and in the same order on both sides
    they are reshaped into a single axis first (no data moves): XLA's CPU
    backend copied an operand with several contracted axes into another
    layout before its matrix multiply. It also copies an operand with several
    free axes on the far side of its contracted one (``[M1, M2, K]`` is fine
    on the left, ``[K, M1, M2]`` is copied; the mirror on the right), so such
    a run of free axes is merged too (Tucker's ``abc,ia,jb,kc->ijk``: 3
    transposes of up to 8 MB gone, 1.3x faster). Other free axes are left
    alone (merging them measured 1.5-2x slower on ``ab,ac,ad->bcd``). The
    result has ``dot_general``'s own shape.

    Example:
        >>> x, y = jnp.ones((3, 4, 5)), jnp.ones((6, 4, 5))
        >>> dot(x, y, (((1, 2), (1, 2)), ((), ()))).shape
        (3, 6)
        >>> dot(jnp.ones((2, 3)), jnp.ones((4, 5, 3)), (((1,), (2,)), ((), ()))).shape
        (2, 4, 5)
    """
    (left_c, right_c), (left_b, right_b) = dims
    contracted = _is_run(left_c) and _is_run(right_c)
    # merged only when the other side is laid out as XLA wants: with both
    # sides the wrong way round, merging measured 2x slower (``ab,ac,ad->bcd``)
    free_l = _far_free(left, left_c, left_b, right=False)
    free_r = _far_free(right, right_c, right_b, right=True)
    if free_l and _far(right, right_c, right_b, right=True):
        free_l = ()
    if free_r and _far(left, left_c, left_b, right=False):
        free_r = ()
    if not (contracted or free_l or free_r):
        return lax.dot_general(left, right, dims, **options)
    shape = (
        *(left.shape[a] for a in left_b),
        *(n for a, n in enumerate(left.shape) if a not in (*left_c, *left_b)),
        *(n for a, n in enumerate(right.shape) if a not in (*right_c, *right_b)),
    )
    runs_l = [tuple(left_c)] if contracted else []
    runs_r = [tuple(right_c)] if contracted else []
    left, where_l = _merge_axes(left, runs_l + ([free_l] if free_l else []))
    right, where_r = _merge_axes(right, runs_r + ([free_r] if free_r else []))
    merged = (
        (_moved(left_c, where_l), _moved(right_c, where_r)),
        (_moved(left_b, where_l), _moved(right_b, where_r)),
    )
    return lax.dot_general(left, right, merged, **options).reshape(shape)


def _far_free(x, contracted, batch, right: bool) -> tuple[int, ...]:
    """A run of two or more free axes of ``x`` on the far side (``_far``)."""
    free = _free(x, contracted, batch)
    return free if _is_run(free) and _far(x, contracted, batch, right) else ()


def _far(x, contracted, batch, right: bool) -> bool:
    """Whether free axes of ``x`` lie on the far side of its contracted ones.

    That is before them for the right operand (``[N, K]``), after them for
    the left one (``[K, M]``): the sides XLA's matrix multiply reads transposed.
    """
    free = _free(x, contracted, batch)
    if not (free and contracted):
        return False
    return free[0] < min(contracted) if right else free[-1] > max(contracted)


def _free(x, contracted, batch) -> tuple[int, ...]:
    return tuple(a for a in range(x.ndim) if a not in (*contracted, *batch))


def _is_run(axes: Sequence[int]) -> bool:
    """Whether ``axes`` are two or more adjacent axes in increasing order."""
    return len(axes) > 1 and all(b == a + 1 for a, b in pairwise(axes))


def _merge_axes(x: jax.Array, runs: list[tuple[int, ...]]) -> tuple[jax.Array, dict]:
    """Reshape each run of adjacent axes into one; map old axes to new ones."""
    if not runs:
        return x, {}
    first = {run[0]: run for run in runs}
    inside = {a for run in runs for a in run}
    shape, where, a = [], {}, 0
    while a < x.ndim:
        run = first.get(a, (a,))
        for b in run:
            where[b] = len(shape)
        shape.append(prod(x.shape[b] for b in run))
        a = run[-1] + 1
    assert inside <= where.keys()
    return x.reshape(shape), where


def _moved(axes: Sequence[int], where: dict) -> tuple[int, ...]:
    """Axes after merging, each merged run counted once."""
    if not where:
        return tuple(axes)
    return tuple(dict.fromkeys(where[a] for a in axes))


def _outer(op, left: jax.Array, right: jax.Array, dims: DimensionNumbers) -> jax.Array:
    """An elementwise step (nothing contracted), laid out as dot_general would."""
    (_, _), (left_b, right_b) = dims
    left_free = [a for a in range(left.ndim) if a not in left_b]
    right_free = [a for a in range(right.ndim) if a not in right_b]
    n_b, n_l, n_r = len(left_b), len(left_free), len(right_free)
    lhs = jnp.transpose(left, (*left_b, *left_free))
    rhs = jnp.transpose(right, (*right_b, *right_free))
    lhs = lhs.reshape(lhs.shape + (1,) * n_r)
    rhs = rhs.reshape(rhs.shape[:n_b] + (1,) * n_l + rhs.shape[n_b:])
    return op(lhs, rhs)


@partial(jax.custom_jvp, nondiff_argnums=(1,))
def max_first(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    """Max over ``axes``; its derivative follows the first maximizing entry.

    ``jnp.max`` splits the derivative equally among tied maxima; for max-plus
    (MAP) the derivative should be the indicator of one maximizing assignment,
    so ties go to the first entry in row-major order of ``axes`` (the union
    steps reduce trailing axes, so this needs no copy).

    Example:
        >>> jax.grad(lambda x: max_first(x, (0,)))(jnp.array([1.0, 3.0, 3.0])).tolist()
        [0.0, 1.0, 0.0]
    """
    return jnp.max(x, axis=axes, initial=-jnp.inf)


@max_first.defjvp
def _max_first_jvp(axes, primals, tangents):
    (x,), (tx,) = primals, tangents
    out = max_first(x, axes)
    if x.size == 0:  # (an empty max, or an empty result: nothing to follow)
        return out, jnp.zeros_like(out)
    kept = [a for a in range(x.ndim) if a not in axes]
    order = (*kept, *axes)

    def flat(y):
        if order != tuple(range(y.ndim)):
            y = jnp.transpose(y, order)
        return y.reshape((*out.shape, -1))

    first = jnp.argmax(flat(x), axis=-1)[..., None]
    return out, jnp.take_along_axis(flat(tx), first, axis=-1)[..., 0]


def _union_reduce(
    left, right, dims: DimensionNumbers, reduce_axes, contracted_first: bool = False
) -> jax.Array:
    """Reduce left + right over the contracted axes (materializes their union).

    Each side is laid out as one batch, one free and one contracted axis
    (rank 4 with the other side's free axis), whatever the step's rank:
    graphical models' steps hold tens of binary axes, and XLA's TPU backend
    pads the last two axes of every array to 8x128 tiles. The contracted
    axis is last, or with ``contracted_first`` second, after the batch axis:
    the union is then reduced over a major axis, its result's free axes are
    the two minor ones (the "log" steps: `_contract_by_flags`). Both sides
    are broadcast to the union in ``lax`` ops (jnp's broadcasting and
    ``where`` each add a wrapper to trace and lower, in every step).
    """
    (left_c, right_c), (left_b, right_b) = dims
    left_free = [a for a in range(left.ndim) if a not in left_b and a not in left_c]
    right_free = [a for a in range(right.ndim) if a not in right_b and a not in right_c]
    nb, nl, nr, nc = len(left_b), len(left_free), len(right_free), len(left_c)
    batch = [left.shape[a] for a in left_b], [right.shape[a] for a in right_b]
    summed = [left.shape[a] for a in left_c], [right.shape[a] for a in right_c]
    if batch[0] != batch[1] or summed[0] != summed[1]:
        # (a size-1 axis broadcast against the other side's: keep every axis)
        lhs = _transposed(left, (*left_b, *left_free, *left_c))
        rhs = _transposed(right, (*right_b, *right_free, *right_c))
        lhs = lhs.reshape(lhs.shape[: nb + nl] + (1,) * nr + lhs.shape[nb + nl :])
        rhs = rhs.reshape(rhs.shape[:nb] + (1,) * nl + rhs.shape[nb:])
        total = annihilating_add(lhs, rhs)
        return reduce_axes(total, tuple(range(nb + nl + nr, nb + nl + nr + nc)))
    free = [left.shape[a] for a in left_free], [right.shape[a] for a in right_free]
    n_b, n_c = prod(batch[0]), prod(summed[0])
    n_l, n_r = prod(free[0]), prod(free[1])
    if contracted_first:
        lhs = _transposed(left, (*left_b, *left_c, *left_free))
        rhs = _transposed(right, (*right_b, *right_c, *right_free))
        lhs, rhs = lax.reshape(lhs, (n_b, n_c, n_l)), lax.reshape(rhs, (n_b, n_c, n_r))
        union, on_left, on_right, axis = (n_b, n_c, n_l, n_r), (0, 1, 2), (0, 1, 3), 1
    else:
        lhs = _transposed(left, (*left_b, *left_free, *left_c))
        rhs = _transposed(right, (*right_b, *right_free, *right_c))
        lhs, rhs = lax.reshape(lhs, (n_b, n_l, n_c)), lax.reshape(rhs, (n_b, n_r, n_c))
        union, on_left, on_right, axis = (n_b, n_l, n_r, n_c), (0, 1, 3), (0, 2, 3), 3
    lhs = lax.broadcast_in_dim(lhs, union, on_left)
    rhs = lax.broadcast_in_dim(rhs, union, on_right)
    total = reduce_axes(annihilating_add(lhs, rhs), (axis,))
    return lax.reshape(total, (*batch[0], *free[0], *free[1]))


def _transposed(x: jax.Array, order: tuple[int, ...]) -> jax.Array:
    """``x`` with its axes in ``order`` (no op where they already are)."""
    return x if order == tuple(range(x.ndim)) else lax.transpose(x, order)


# Max-plus products run on the CPU in einslice's own kernel (`_native`,
# register-blocked as a matmul: 2.4x the float matmul on a 1024^2 product on
# a 2-core AVX-512 Xeon), on a TPU in a Pallas kernel (`_pallas`: 3.2x faster
# than this path at 4096^2 on a v5e). Elsewhere (GPU, integer or
# half-precision operands, or where no kernel runs) they run blocked in XLA ops
# (issue 20): the contracted axis in tiles of
# MAX_TILE, each tile's terms added and maxed in one elementwise fusion (XLA
# vectorizes it along the output's minor axis), the output in column blocks
# of MAX_COLUMNS so one tile of the right side stays in the L1 cache. Measured
# on a 1024^2 product (2-core EPYC): 1.7x the float matmul, against 6-9x for
# a fused reduce of the union (tiles of 16..256) and 27x before. On a 2-core
# AVX-512 Xeon, whose matmul is twice as fast, 5.8x (37 ms; 16 x 256 still at
# or near the best of 8..64 x 64..512: benchmarks/results/maxplus.md).
MAX_TILE = 16
MAX_COLUMNS = 256


@partial(jax.custom_jvp, nondiff_argnums=(2,))
def max_plus_dot(left, right, dims: DimensionNumbers) -> jax.Array:
    """Max over the contracted axes of left + right, laid out as ``dot_general``.

    Never materializes the union of the two sides' indices. The derivative is
    the union rule's (``max_first``: the first maximizing entry).

    Example:
        >>> x, y = jnp.array([[0.0, 5.0]]), jnp.array([[1.0], [0.0]])
        >>> max_plus_dot(x, y, (((1,), (0,)), ((), ()))).tolist()
        [[5.0]]
    """
    (left_c, right_c), (left_b, right_b) = dims
    left_f = [a for a in range(left.ndim) if a not in left_c and a not in left_b]
    right_f = [a for a in range(right.ndim) if a not in right_c and a not in right_b]
    shape = (
        *(left.shape[a] for a in left_b),
        *(left.shape[a] for a in left_f),
        *(right.shape[a] for a in right_f),
    )
    dtype = jnp.result_type(left, right)
    if 0 in shape or prod(left.shape[a] for a in left_c) == 0:
        return jnp.full(shape, -jnp.inf, dtype)
    left, right = left.astype(dtype), right.astype(dtype)
    # Built only where the CPU is the default backend: a GPU user's programs
    # run on the GPU, and should neither wait for nor warn about a CPU build.
    # A product too small to pay for the one-time build uses the kernel only
    # once something built it (`_native.BUILD_PAIRS`).
    backend = jax.default_backend()
    depth = prod(left.shape[a] for a in left_c)
    pairs = prod(shape) * depth
    kernel = None
    if takes(dtype) and backend == "cpu":
        kernel = max_plus_kernel(build=pairs >= BUILD_PAIRS)

    def xla(left, right):
        return _max_plus_xla(*_matrices(left, right, dims, (False, False)))

    branches = {}
    if kernel is not None:

        def native(left, right):
            # each side as it lies when its contracted axes are already last
            k_last = (
                _in_order(left_b, left_f, left_c),
                _in_order(right_b, right_f, right_c),
            )
            lhs, rhs = _matrices(left, right, dims, k_last)
            return kernel(lhs, rhs, lhs_k_last=k_last[0], rhs_k_last=k_last[1])

        branches["cpu"] = native
    # The TPU's Pallas kernel, traced only where the TPU is the default
    # backend (a CPU user's trace never pays for it)
    m, n = prod(left.shape[a] for a in left_f), prod(right.shape[a] for a in right_f)
    if backend == "tpu" and _tpu_takes(dtype, m, depth, n):

        def tpu(left, right):
            return max_plus_pallas(*_matrices(left, right, dims, (True, False)))

        branches["tpu"] = tpu
    if not branches:
        return xla(left, right).reshape(shape)
    # each platform's kernel where it has one; elsewhere (GPU) XLA's path
    return lax.platform_dependent(left, right, **branches, default=xla).reshape(shape)


def _tpu_takes(dtype, m: int, k: int, n: int) -> bool:
    """Whether an m x k by k x n product of ``dtype`` runs in the TPU kernel."""
    return (
        enabled()
        and _pallas.available()
        and _pallas.takes(dtype)
        and _pallas.worth_it(m, k, n)
    )


def max_plus_pallas(lhs: jax.Array, rhs: jax.Array, interpret: bool = False):
    """``out[b, m, n] = max_k lhs[b, m, k] + rhs[b, k, n]`` in the TPU kernel.

    Operands holding ``+inf`` run on XLA's path instead (the kernel's plain
    add would give NaN for ``-inf + inf``; see `_max_plus_xla`).
    ``interpret=True`` runs the kernel on any backend (tests).
    """

    def xla(lhs, rhs):
        blocked = partial(_max_plus_blocked, add=annihilating_add)
        return jax.vmap(blocked)(jnp.swapaxes(lhs, 1, 2), rhs)

    return lax.cond(
        jnp.any(lhs == jnp.inf) | jnp.any(rhs == jnp.inf),
        xla,
        partial(_pallas.max_plus_tpu, interpret=interpret),
        lhs,
        rhs,
    )


def _in_order(*groups: Sequence[int]) -> bool:
    """Whether the axes of ``groups``, in turn, are 0, 1, 2, ... (no transpose)."""
    return [a for g in groups for a in g] == list(range(sum(map(len, groups))))


def _matrices(
    left: jax.Array, right: jax.Array, dims: DimensionNumbers, k_last: tuple[bool, bool]
) -> tuple[jax.Array, jax.Array]:
    """Both sides as ``[batch, k, m]`` and ``[batch, k, n]`` matrices.

    Or ``[batch, m, k]`` / ``[batch, n, k]`` where ``k_last`` says so.
    """
    (left_c, right_c), (left_b, right_b) = dims

    def matrix(x, batch, contracted, last: bool):
        free = [a for a in range(x.ndim) if a not in contracted and a not in batch]
        n_b, n_k = prod(x.shape[a] for a in batch), prod(x.shape[a] for a in contracted)
        n_f = prod(x.shape[a] for a in free)
        if last:
            return jnp.transpose(x, (*batch, *free, *contracted)).reshape(n_b, n_f, n_k)
        return jnp.transpose(x, (*batch, *contracted, *free)).reshape(n_b, n_k, n_f)

    return (
        matrix(left, left_b, left_c, k_last[0]),
        matrix(right, right_b, right_c, k_last[1]),
    )


def _max_plus_xla(lhs: jax.Array, rhs: jax.Array) -> jax.Array:
    """``out[b, m, n] = max_k lhs[b, k, m] + rhs[b, k, n]`` in XLA ops."""
    if not jnp.issubdtype(lhs.dtype, jnp.floating):
        return jax.vmap(partial(_max_plus_blocked, add=jnp.add))(lhs, rhs)
    # -inf + +inf must give the semiring's zero (-inf), not NaN; the select
    # that ensures it costs time in the inner loop, so it runs only where an
    # operand holds +inf (a check linear in the operands, not their product).
    return lax.cond(
        jnp.any(lhs == jnp.inf) | jnp.any(rhs == jnp.inf),
        jax.vmap(partial(_max_plus_blocked, add=annihilating_add)),
        jax.vmap(partial(_max_plus_blocked, add=jnp.add)),
        lhs,
        rhs,
    )


def _max_plus_blocked(
    lhs: jax.Array,
    rhs: jax.Array,
    add: Callable[[jax.Array, jax.Array], jax.Array] = jnp.add,
) -> jax.Array:
    """``max_k add(lhs[k, m], rhs[k, n])`` of a ``[K, M]`` and a ``[K, N]`` array."""
    n_k, n_m = lhs.shape
    n_n = rhs.shape[1]
    tile = min(MAX_TILE, n_k)
    pad_k = -n_k % tile
    cols = min(MAX_COLUMNS, n_n)
    pad_n = -n_n % cols
    lhs = jnp.pad(lhs, ((0, pad_k), (0, 0)), constant_values=-jnp.inf)
    rhs = jnp.pad(rhs, ((0, pad_k), (0, pad_n)), constant_values=-jnp.inf)
    tiles = (n_k + pad_k) // tile
    lhs = lhs.reshape(tiles, tile, n_m)
    blocks = rhs.reshape(tiles, tile, (n_n + pad_n) // cols, cols)
    blocks = jnp.transpose(blocks, (2, 0, 1, 3))  # [column block, tile, k, col]

    def block(rhs_block):
        def add_tile(acc, tile_pair):
            lt, rt = tile_pair
            terms = [add(lt[s][:, None], rt[s][None, :]) for s in range(tile)]
            while len(terms) > 1:
                pairs = range(0, len(terms) - 1, 2)
                terms = [jnp.maximum(terms[i], terms[i + 1]) for i in pairs] + (
                    [terms[-1]] if len(terms) % 2 else []
                )
            return jnp.maximum(acc, terms[0]), None

        init = jnp.full((n_m, cols), -jnp.inf, lhs.dtype)
        return lax.scan(add_tile, init, (lhs, rhs_block))[0]

    out = lax.map(block, blocks) if blocks.shape[0] > 1 else block(blocks[0])[None]
    out = jnp.transpose(out, (1, 0, 2)).reshape(n_m, -1)
    return out[:, :n_n]


@max_plus_dot.defjvp
def _max_plus_dot_jvp(dims, primals, tangents):
    def union(left, right):
        return _union_reduce(left, right, dims, max_first)

    return jax.jvp(union, primals, tangents)


def _log_dot_parts(left, right, dims, precision):
    (left_c, right_c), _ = dims
    shift_l = _safe_shift(left, tuple(left_c))
    shift_r = _safe_shift(right, tuple(right_c))
    exp_l, exp_r = jnp.exp(left - shift_l), jnp.exp(right - shift_r)
    total = dot(exp_l, exp_r, dims, precision=precision)
    shift = _result_shift(shift_l, shift_r, dims)
    return exp_l, exp_r, total, shift


def _result_shift(shift_l, shift_r, dims: DimensionNumbers) -> jax.Array:
    """Lay the two shifts out in dot_general's result order and add them."""
    (left_c, right_c), (left_b, right_b) = dims
    sq_l = jnp.squeeze(shift_l, tuple(left_c))
    sq_r = jnp.squeeze(shift_r, tuple(right_c))
    kept_l = [a for a in range(shift_l.ndim) if a not in left_c]
    kept_r = [a for a in range(shift_r.ndim) if a not in right_c]
    batch_l = tuple(kept_l.index(a) for a in left_b)
    batch_r = tuple(kept_r.index(a) for a in right_b)
    return _outer(jnp.add, sq_l, sq_r, (((), ()), (batch_l, batch_r)))


@partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def log_dot(left, right, dims: DimensionNumbers, precision) -> jax.Array:
    """log-sum-exp contraction on the matrix unit (see the module docstring).

    Shifting each side by its own max keeps every exponential ≤ 1, but when the
    two sides peak at different contracted positions every product can
    underflow, and the result would be a wrong -inf (or a denormal). Those
    entries are detected (tiny total where some contracted position has both
    sides finite) and recomputed exactly by a loop over the contracted
    positions; the check costs nothing unless a total is tiny.
    """
    out, _ = _log_dot_jvp_impl(left, right, None, None, dims, precision)
    return out


@log_dot.defjvp
def _log_dot_jvp(dims, precision, primals, tangents):
    (left, right), (t_left, t_right) = primals, tangents
    return _log_dot_jvp_impl(left, right, t_left, t_right, dims, precision)


def _log_dot_jvp_impl(left, right, t_left, t_right, dims, precision):
    exp_l, exp_r, total, shift = _log_dot_parts(left, right, dims, precision)
    # Below tiny/eps a total's smaller terms are denormal and lose precision.
    finfo = jnp.finfo(total.dtype)
    tiny = finfo.tiny / finfo.eps

    def repair(out):
        finite_l = jnp.isfinite(left).astype(total.dtype)
        finite_r = jnp.isfinite(right).astype(total.dtype)
        support = dot(finite_l, finite_r, dims, precision=precision)
        # NaN: +inf beside an exact zero (a -inf) in the same product
        bad = ((total < tiny) & (support > 0)) | jnp.isnan(total)

        def exact(out):
            return jnp.where(bad, _exact_log_dot(left, right, dims), out)

        return lax.cond(jnp.any(bad), exact, lambda o: o, out)

    # The repair takes primal values only: a lax.cond with tangent operands
    # would make reverse mode store its residuals once per chunk.
    out = jnp.log(total) + shift
    out = lax.cond(jnp.any(~(total >= tiny)), repair, lambda o: o, out)
    if t_left is None:
        return out, None
    tangent = dot(exp_l * t_left, exp_r, dims, precision=precision)
    tangent = tangent + dot(exp_l, exp_r * t_right, dims, precision=precision)
    # Where the products underflowed, the weights keep what survived: the
    # tangent there is approximate (the value is exact).
    safe = jnp.where(total > 0, total, jnp.ones_like(total))
    return out, jnp.where(total > 0, tangent / safe, 0)


def _exact_log_dot(left, right, dims: DimensionNumbers):
    """Log Σ exp(left + right), one contracted position at a time."""
    (left_c, right_c), (left_b, right_b) = dims
    left_f = [a for a in range(left.ndim) if a not in left_c and a not in left_b]
    right_f = [a for a in range(right.ndim) if a not in right_c and a not in right_b]
    shape = (
        [left.shape[a] for a in left_b]
        + [left.shape[a] for a in left_f]
        + [right.shape[a] for a in right_f]
    )
    n_b = prod(left.shape[a] for a in left_b)
    n_m = prod(left.shape[a] for a in left_f)
    n_n = prod(right.shape[a] for a in right_f)
    n_k = prod(left.shape[a] for a in left_c)

    def as_lhs(x):
        return jnp.transpose(x, (*left_b, *left_c, *left_f)).reshape(n_b, n_k, n_m)

    def as_rhs(x):
        return jnp.transpose(x, (*right_b, *right_c, *right_f)).reshape(n_b, n_k, n_n)

    if n_k == 0:  # an empty sum
        return jnp.full(shape, -jnp.inf, left.dtype)
    lhs, rhs = as_lhs(left), as_rhs(right)

    def term(k):
        return annihilating_add(lhs[:, k, :, None], rhs[:, k, None, :])

    def add_term(acc, k):
        return jnp.logaddexp(acc, term(k)), None

    init = jnp.full((n_b, n_m, n_n), -jnp.inf, lhs.dtype)
    out, _ = lax.scan(add_term, init, jnp.arange(n_k))
    return out.reshape(shape)


def _log_all_reduce(x: jax.Array, axis: str) -> jax.Array:
    """Log Σ_d exp(x_d), shifted by the max; all -inf gives -inf, never NaN."""
    shift = lax.pmax(x, axis)
    shift = jnp.where(jnp.isfinite(shift), shift, jnp.zeros_like(shift))
    return jnp.log(lax.psum(jnp.exp(x - shift), axis)) + shift


@dataclass(frozen=True)
class Rules:
    """One semiring's operations in JAX: all a JAX executor asks of it.

    Attributes:
        reduce: ``reduce(x, axes)`` sums out ``axes`` (never empty).
        combine: ``combine(a, b)`` adds two partial results (chunks).
        times: ``times(a, b)`` multiplies two broadcast-compatible arrays.
        contract: ``contract(left, right, dims, config)``: one contracting
            step with ``dot_general`` dimension numbers (see `pair`).
        all_reduce: ``all_reduce(x, axis)`` adds the devices' partial
            results across a mesh axis (what ``Semiring.all_reduce`` names).
    """

    reduce: Callable[[jax.Array, tuple[int, ...]], jax.Array]
    combine: Callable[[jax.Array, jax.Array], jax.Array]
    times: Callable[[jax.Array, jax.Array], jax.Array]
    contract: Callable[[jax.Array, jax.Array, DimensionNumbers, Config], jax.Array]
    all_reduce: Callable[[jax.Array, str], jax.Array]

    def negated(self) -> Rules:
        """The rules of the semiring computed as ``-self(-x, -y)``.

        Negation is exact in floating point, so these are as exact as
        ``self``; derivatives follow (max's first maximizing entry becomes the
        first minimizing one; zero derivatives may come out as -0.0, which
        equals 0.0).

        Example:
            >>> lowest = RULES["max"].negated().reduce(jnp.array([3.0, 1.0]), (0,))
            >>> float(lowest)
            1.0
        """
        rules = self
        return Rules(
            reduce=lambda x, axes: -rules.reduce(-x, axes),
            combine=lambda a, b: -rules.combine(-a, -b),
            times=lambda a, b: -rules.times(-a, -b),
            contract=lambda a, b, dims, config: -rules.contract(-a, -b, dims, config),
            all_reduce=lambda x, axis: -rules.all_reduce(-x, axis),
        )


# The rules written out, one record per semiring that has its own; a
# semiring registered as a negation gets its base's, negated.
_WRITTEN: dict[str, Rules] = {
    SUM.name: Rules(
        reduce=_plain_sum,
        combine=operator.add,
        times=operator.mul,
        contract=partial(_contract_by_flags, SUM),
        all_reduce=lax.psum,
    ),
    LOG.name: Rules(
        reduce=log_sum,
        combine=jnp.logaddexp,
        times=annihilating_add,
        contract=partial(_contract_by_flags, LOG),
        all_reduce=_log_all_reduce,
    ),
    MAX.name: Rules(
        reduce=max_first,
        combine=jnp.maximum,
        times=annihilating_add,
        contract=partial(_contract_by_flags, MAX),
        all_reduce=lax.pmax,
    ),
}
RULES: dict[str, Rules] = rules_for_every_semiring(
    "JAX executors", _WRITTEN, Rules.negated, "_WRITTEN in _exec/_semiring.py"
)
