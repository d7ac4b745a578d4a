"""Running a plan in numpy on the host, step by step, with nothing to compile.

XLA compiles a program per plan, and for a graphical model's hundreds of tiny
steps compiling is most of the work: Promedus_24's 50 steps compile in 0.6 s
and run in 0.4 ms; pgmpy's whole query takes 0.01 s. Walking the same plan in
numpy costs tens of microseconds a step and nothing up front, so for a
one-shot value of such a plan (``einslice.pgm``'s log Z and MAP value) it is
the faster road; ``_choose.pays_on_host`` says when, from the plan alone.

What it runs is the plan's own: the same pairwise steps, the same sliced
indices and chunk sizes (looped in Python: numpy needs no traced loop), the
same semiring rules (numpy's: one `HostRules` per semiring in ``HOST_RULES``,
checked complete against the registry on import). A "log" chunk runs in
scaled linear form (one scalar shift per node, one ``np.einsum`` per small
step) when no product can underflow, else by the per-step rule that shifts
each side of a product by its max over the contracted axes, as
``_semiring.log_dot`` does (and, as it does, recomputes term by term what
underflowed). At infinities, NaN and empty axes it computes what the
compiled program does (the zero annihilates: ``-inf + inf`` in a product
is ``-inf``; tests/exec/test_semiring_corners.py holds both to the
definition). It also runs a `HostWalk`, the unplanned steps of
a small network. Results are numpy arrays in the plan's dtype; no derivatives
(those need JAX).

Example:
    >>> import einslice, numpy as np
    >>> p = einslice.plan("ij,jk->ik", (2, 3), (3, 2))
    >>> run_on_host(p, [np.ones((2, 3)), np.ones((3, 2))]).tolist()
    [[3.0, 3.0], [3.0, 3.0]]
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from math import prod

import numpy as np

from .._errors import EinsliceError
from .._plan._semiring import (
    LOG,
    MAX,
    SUM,
    Semiring,
    rules_for_every_semiring,
    semiring_named,
)
from .._plan._types import HostWalk, Plan, Step
from .._plan._walk import MAX_BLOCK_ENTRIES  # the "max" product's block
from ._native import host_max_plus

# Host cost model, measured on this project's 2-core CPU (numpy 2, float32,
# "log" steps of UAI networks): a step's fixed cost (transposes, reshapes,
# maxima and the ufunc calls on tiny arrays), then per entry touched
# (exponentials, logs and copies of the operands and result), then per FLOP
# of the matrix products.
STEP_SECONDS = 40e-6
ENTRY_SECONDS = 4e-9
FLOP_SECONDS = 1 / 20e9


# -- BLAS threads: the walk's matrix products may run on one --------------------

# threadpoolctl's controller of the process's BLAS libraries, once made
# (`prepare_one_thread`); [None]: none it can control (a BLAS threadpoolctl
# does not know, or threadpoolctl missing). numpy's OpenBLAS threads
# busy-wait for each other: with another process on one of 2 cores, a
# 12-matrix chain's walk took 88-92 ms with its 2 threads and 7.3 ms with
# one (4 ms with 2 on idle cores; load 2.5, 2026-12-07), so a reused plan's
# runner times both (``_run._TopLevelRun``).
_BLAS: list = []


def prepare_one_thread() -> None:
    """Make the BLAS controller `one_blas_thread` uses (~10 ms, once a process)."""
    if _BLAS:
        return
    try:
        import threadpoolctl

        made = threadpoolctl.ThreadpoolController().select(user_api="blas")
    except Exception:  # (not installed, or a BLAS it does not know)
        made = None
    if not _BLAS:
        _BLAS.append(made if made is not None and made.lib_controllers else None)


def one_thread_state() -> str:
    """Whether `one_blas_thread` can act: "ready", "none" or "unmade".

    "none": no controller can be made; "unmade": `prepare_one_thread` has
    not run yet.

    Example:
        >>> prepare_one_thread()
        >>> one_thread_state() in ("ready", "none")
        True
    """
    if not _BLAS:
        return "unmade"
    return "none" if _BLAS[0] is None else "ready"


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Matrix products in this block run on one BLAS thread (when controllable)."""
    control = _BLAS[0] if _BLAS else None
    if control is None:
        yield
        return
    with control.limit(limits=1):
        yield


def host_seconds(plan: Plan | HostWalk) -> float:
    """The host cost model's time for one `run_on_host` of ``plan``."""
    sizes = _chunk_sizes(plan)
    operands = sum(prod(sizes[i] for i in t) for t in plan.prepared)
    per_chunk = (
        sum(step_seconds(plan))
        + STEP_SECONDS * len(plan.prepared)
        + ENTRY_SECONDS * operands
    )
    return per_chunk * plan.n_chunks


def step_seconds(plan: Plan | HostWalk) -> list[float]:
    """The host cost model's time of each step in one chunk: call, result, FLOPs.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (10, 10), (10, 10))
        >>> round(step_seconds(p)[0] * 1e6, 2)  # 40 us + 100 x 4 ns + 2000 / 20e9 s
        40.5
    """
    sizes = _chunk_sizes(plan)
    return [
        STEP_SECONDS
        + ENTRY_SECONDS * prod(sizes[i] for i in step.result)
        + FLOP_SECONDS * 2 * prod(sizes[i] for i in (*step.result, *step.contracted))
        for step in plan.steps
    ]


def _chunk_sizes(plan: Plan | HostWalk) -> list[int]:
    """Each index's size in one chunk (a sliced index at its chunk size)."""
    sizes = list(plan.equation.sizes)
    for index, chunk in plan.chunks:
        sizes[index] = chunk
    return sizes


def run_on_host(plan: Plan | HostWalk, operands: Sequence) -> np.ndarray:
    """Contract ``operands`` along ``plan`` in numpy (no JAX, no compilation).

    Args:
        plan: a plan for one device (not sharded), or a `HostWalk`.
        operands: arrays of the planned shapes (anything ``np.asarray`` takes).

    Returns:
        The result, in the plan's dtype and output order.

    Raises:
        EinsliceError: on shapes other than the plan's, or a multi-device plan.
    """
    if plan.devices != 1 or plan.sharded is not None:
        raise EinsliceError(
            f"run_on_host runs one-device plans; this one spreads over "
            f"{plan.devices} devices (sharded={plan.sharded}). Call the plan itself."
        )
    arrays = [np.asarray(x) for x in operands]
    shapes = tuple(x.shape for x in arrays)
    if shapes != plan.equation.shapes:
        raise EinsliceError(
            f"this plan was made for shapes {list(plan.equation.shapes)} but got "
            f"{list(shapes)}; make a new plan with einslice.plan(...) for these "
            "shapes."
        )
    eq = plan.equation
    dtype = np.dtype(plan.dtype)
    # Why: the caller holds the operands; a copy only where the dtype differs
    arrays = [
        (np.squeeze(x, drop) if drop else x).astype(dtype, copy=False)
        for x, drop in zip(arrays, eq.squeezed, strict=True)
    ]
    ring = plan.ring
    chunks = dict(plan.chunks)
    if not chunks:  # (one chunk: its result, copied, for it may be an operand)
        return np.array(_chunk(plan, arrays), dtype, order="C")
    out = np.full([eq.sizes[i] for i in eq.output], ring.zero, dtype)
    ranges = [
        [slice(s, min(s + c, eq.sizes[i])) for s in range(0, eq.sizes[i], c)]
        for i, c in chunks.items()
    ]
    for where in itertools.product(*ranges):
        cut = dict(zip(chunks, where, strict=True))
        block = tuple(cut.get(i, slice(None)) for i in eq.output)
        pieces = [
            x[tuple(cut.get(i, slice(None)) for i in term)]
            for x, term in zip(arrays, eq.terms, strict=True)
        ]
        out[block] = _combine(ring, out[block], _chunk(plan, pieces))
    return out


def _chunk(plan: Plan | HostWalk, operands: Sequence[np.ndarray]) -> np.ndarray:
    """One chunk: prepare the operands, run every step, lay out the output."""
    ring = plan.ring
    terms, kept = plan.equation.terms, plan.prepared
    scaled = _scaled_log_walk(plan, operands) if ring.scaled_form else None
    if scaled is not None:
        result, term = scaled
    else:  # (an iterator: the walk lets each node go after its step)
        nodes = (
            _prepare(ring, x, t, k)
            for x, t, k in zip(operands, terms, kept, strict=True)
        )
        rules = chunk_rules(ring, operands)
        result, term = plan.walk_steps(nodes, partial(_step, ring, rules=rules))
    return np.transpose(result, [term.index(i) for i in plan.equation.output])


# A node of the scaled "log" walk: (m, s, floor) stands for log(m) + s, where m
# has max at most 1 and every positive entry at least floor.
_Scaled = tuple[np.ndarray, float, float]


def _scaled_log_walk(
    plan: Plan | HostWalk, operands: Sequence[np.ndarray]
) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """The "log" chunk in scaled linear form, when no product can underflow.

    Each node is ``log(m) + s`` with one scalar shift ``s``: the steps are
    "sum" steps on ``m`` (no per-step exponentials and logs; the smallest by
    ``np.einsum``, one C call), each result rescaled to max 1. A node's floor
    bounds its positive entries below; every term of a product is at least
    the product of its sides' floors, so while that stays above
    ``SCALED_FLOOR`` no term underflows in float64 (an entry is 0 only where
    every term is exactly 0) and the walk is exact to rounding. When it
    would drop below (entries of a node more than e^690 apart), None: the
    chunk takes the per-step rule. The nodes of a float32 plan of more than
    ``SINGLE_MIN_FLOPS`` stay float32 (half the memory traffic of its large
    steps) while their products' floors stay above ``FLOAT32_FLOOR``, and
    turn float64 below it; smaller plans, whose time is per-step overhead,
    keep float64's accuracy.
    """
    eq = plan.equation
    single = np.dtype(plan.dtype) == np.float32 and plan.flops > SINGLE_MIN_FLOPS

    def scaled() -> Iterator[_Scaled]:  # (an iterator: see `_chunk`)
        for x, term, kept in zip(operands, eq.terms, plan.prepared, strict=True):
            node = _to_scaled(x, term, kept, single)
            if node is None:
                raise _Underflow
            yield node

    try:
        (m, shift, _), term = plan.walk_steps(scaled(), _scaled_step)
    except _Underflow:
        return None
    with np.errstate(divide="ignore"):
        result = np.log(m) + shift
    return result.astype(plan.dtype), term


class _Underflow(Exception):
    """A scaled product could underflow: the chunk takes the per-step rule."""


# The smallest product of two floors allowed: float64's normal range ends at
# 2.2e-308, so every term of a product, and every sum of them, stays normal.
SCALED_FLOOR = 1e-300
# Above this many FLOPs a float32 plan's scaled walk runs in float32.
SINGLE_MIN_FLOPS = 2**21
# The float32 counterpart of SCALED_FLOOR (float32's normal range ends at
# 1.2e-38); an operand whose floor is below its square root starts float64.
FLOAT32_FLOOR = 1e-36
# A floor below this is tightened to the node's smallest positive entry (a
# pass over it): the bound, a product of floors, falls faster than entries do.
TIGHTEN_BELOW = 1e-150
# Steps whose indices span at most this many entries contract by np.einsum,
# one C call (~2 us against ~9 for the transposes and matrix product of
# `_step`); larger ones by the matrix unit, which einsum's loops do not use.
EINSUM_MAX_ENTRIES = 4096
_LETTERS = string.ascii_letters  # np.einsum's labels


def _to_scaled(x: np.ndarray, term, kept, single: bool) -> _Scaled | None:
    """An operand as (m, s, floor), its diagonal taken and private sums done."""
    top = float(x.max()) if x.size else -math.inf
    if top == -math.inf:  # empty, or probability zero
        return _prepare(_SUM, np.zeros(x.shape), term, kept), 0.0, 1.0
    if not math.isfinite(top):  # +inf or NaN: the per-step rule decides
        return None
    low = float(np.min(x, where=x != -np.inf, initial=top))
    floor = math.exp(low - top)
    if floor < SCALED_FLOOR:
        return None
    single = single and x.dtype == np.float32 and floor * floor >= FLOAT32_FLOOR
    m = np.exp(x - top) if single else np.exp(x.astype(np.float64) - top)
    return _prepare(_SUM, m, term, kept), top, floor


def _scaled_step(
    step: Step,
    left: _Scaled,
    left_term: tuple[int, ...],
    right: _Scaled,
    right_term: tuple[int, ...],
) -> _Scaled:
    (a, shift_a, floor_a), (b, shift_b, floor_b) = left, right
    floor = floor_a * floor_b
    if floor < SCALED_FLOOR:
        raise _Underflow
    if floor < FLOAT32_FLOOR:  # (float32 with float64 gives float64)
        a, b = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
    small = a.size * b.size <= EINSUM_MAX_ENTRIES  # (bounds the union's entries)
    if small and len(set(left_term + right_term)) <= len(_LETTERS):
        product = _einsum_pair(step, a, left_term, b, right_term)
    else:
        product = _step(_SUM, step, a, left_term, b, right_term)
    top = float(product.max()) if product.size else 0.0
    if top == 0.0:  # every entry zero
        return product, 0.0, 1.0
    product /= top
    floor /= top
    if floor < TIGHTEN_BELOW:
        floor = float(np.min(product, where=product > 0, initial=1.0))
    return product, shift_a + shift_b + math.log(top), floor


def _einsum_pair(step: Step, a, left_term, b, right_term) -> np.ndarray:
    """A small "sum" step in one ``np.einsum`` call (any layout)."""
    labels = {
        i: _LETTERS[k] for k, i in enumerate(dict.fromkeys(left_term + right_term))
    }

    def letters(term) -> str:
        return "".join(labels[i] for i in term)

    spec = f"{letters(left_term)},{letters(right_term)}->{letters(step.result)}"
    return np.einsum(spec, a, b)


def _prepare(ring: Semiring, x: np.ndarray, term, kept) -> np.ndarray:
    """Diagonals of repeated indices, then private indices summed out."""
    unique = list(dict.fromkeys(term))
    if len(unique) < len(term):  # np.einsum's sublists take labels below 52
        local = {i: k for k, i in enumerate(unique)}
        x = np.einsum(x, [local[i] for i in term], list(range(len(unique))))
    x = _reduce(ring, x, tuple(a for a, i in enumerate(unique) if i not in kept))
    return x


def _step(
    ring: Semiring,
    step: Step,
    left: np.ndarray,
    left_term: tuple[int, ...],
    right: np.ndarray,
    right_term: tuple[int, ...],
    rules: HostRules | None = None,
) -> np.ndarray:
    """One pairwise product in the semiring, result in ``step.result`` order.

    ``rules``: `chunk_rules`' (None: ``HOST_RULES``', right for any operands).
    """
    rules = HOST_RULES[ring.name] if rules is None else rules
    keep = set(step.result) | set(step.contracted)
    left, left_term = _drop(ring, left, left_term, keep)
    right, right_term = _drop(ring, right, right_term, keep)
    if not step.contracted:
        a = _broadcast(left, left_term, step.result)
        b = _broadcast(right, right_term, step.result)
        return rules.times(a, b)
    batch = [i for i in step.result if i in left_term and i in right_term]
    free_l = [i for i in step.result if i in left_term and i not in right_term]
    free_r = [i for i in step.result if i in right_term and i not in left_term]
    a = _matrix(left, left_term, batch, free_l, list(step.contracted))
    b = _matrix(right, right_term, batch, list(step.contracted), free_r)
    product = rules.product(a, b)
    sizes = dict(zip(left_term, left.shape, strict=True))
    sizes.update(zip(right_term, right.shape, strict=True))
    laid = [*batch, *free_l, *free_r]
    product = product.reshape([sizes[i] for i in laid])
    return np.transpose(product, [laid.index(i) for i in step.result])


def _matrix(x, term, batch, rows, cols) -> np.ndarray:
    """``x`` as a stack of matrices: (batch, rows, cols), each group flattened."""
    order = [term.index(i) for i in (*batch, *rows, *cols)]
    x = np.transpose(x, order)
    n_batch = prod(x.shape[: len(batch)])
    n_rows = prod(x.shape[len(batch) : len(batch) + len(rows)])
    n_cols = prod(x.shape[len(batch) + len(rows) :])  # not -1: sizes may be 0
    return x.reshape(n_batch, n_rows, n_cols)


def _drop(ring: Semiring, x, term, keep):
    axes = tuple(a for a, i in enumerate(term) if i not in keep)
    if not axes:
        return x, term
    return _reduce(ring, x, axes), tuple(i for i in term if i in keep)


def _broadcast(x: np.ndarray, term, result) -> np.ndarray:
    present = [i for i in result if i in term]
    x = np.transpose(x, [term.index(i) for i in present])
    return x.reshape([x.shape[present.index(i)] if i in term else 1 for i in result])


def _shift(x: np.ndarray, axis, keepdims=True) -> np.ndarray:
    """Max over ``axis`` with non-finite maxima (all -inf, say) replaced by 0."""
    top = np.max(x, axis=axis, keepdims=keepdims, initial=-np.inf)
    return np.where(np.isfinite(top), top, 0).astype(x.dtype)


def _reduce(ring: Semiring, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if not axes:
        return x
    return HOST_RULES[ring.name].reduce(x, axes)


def _sum(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return np.sum(x, axis=axes, dtype=x.dtype)


def _max(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return np.max(x, axis=axes, initial=-np.inf)


def _log_sum(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    shift = _shift(x, axes)
    with np.errstate(divide="ignore"):
        total = np.log(np.sum(np.exp(x - shift), axis=axes))
    return total + np.squeeze(shift, axes)


def _log_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log(exp(a) @ exp(b)), each side shifted by its max over the contraction.

    As ``_semiring.log_dot``: where a total is below ``tiny / eps`` while
    some contracted position has both sides finite (the sides peak at
    different positions and every product underflowed), or is NaN (``+inf``
    met ``-inf``), the product is recomputed exactly (`_exact_log_product`).
    The check is one pass over the result; finite, well-scaled products
    skip the rest.
    """
    shift_a, shift_b = _shift(a, 2), _shift(b, 1)
    with np.errstate(over="ignore", invalid="ignore"):  # (+inf beside -inf)
        total = np.exp(a - shift_a) @ np.exp(b - shift_b)
    finfo = np.finfo(total.dtype)
    tiny = finfo.tiny / finfo.eps
    if total.size and not total.min() >= tiny:  # (NaN fails the test too)
        support = np.isfinite(a).astype(total.dtype) @ np.isfinite(b)
        bad = ((total < tiny) & (support > 0)) | np.isnan(total)
        if bad.any():
            return np.where(
                bad, _exact_log_product(a, b), _log_of(total, shift_a, shift_b)
            )
    return _log_of(total, shift_a, shift_b)


def _log_of(total: np.ndarray, shift_a: np.ndarray, shift_b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(total) + shift_a + shift_b


def _exact_log_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ_k of a[., m, k] + b[., k, n] in log space, term by term, k in blocks.

    The zero annihilates (`_annihilating_add`); what `_log_product` falls
    back to, as ``_semiring._exact_log_dot`` is ``log_dot``'s.
    """
    n_batch, rows, inner = a.shape
    cols = b.shape[2]
    block = max(1, MAX_BLOCK_ENTRIES // max(1, n_batch * rows * cols))
    out = np.full((n_batch, rows, cols), -np.inf, np.result_type(a, b))
    for k in range(0, inner, block):
        part = _annihilating_add(
            a[:, :, k : k + block, None], b[:, None, k : k + block, :]
        )
        out = _log_add(out, _log_sum(part, (2,)))
    return out


def _max_product(
    a: np.ndarray, b: np.ndarray, plain: Callable[[], bool] | None = None
) -> np.ndarray:
    """The max over k of a[., m, k] + b[., k, n].

    In einslice's native kernel (`_native.host_max_plus`, which annihilates
    as `_annihilating_add` does), else in numpy, a block of k at a time
    (Grids_15's MAP walk: 14.6 s in numpy, well under a second in the
    kernel), by a plain add where ``plain()`` says it is exact or neither
    side holds ``+inf`` or NaN, else by `_annihilating_add`.
    """
    native = host_max_plus(a, b)
    if native is not None:
        return native
    exact = (plain is not None and plain()) or not (_unsafe(a) or _unsafe(b))
    add = np.add if exact else _masked_add  # (the sides checked once, above)
    n_batch, rows, inner = a.shape
    cols = b.shape[2]
    block = max(1, MAX_BLOCK_ENTRIES // max(1, n_batch * rows * cols))
    out = np.full((n_batch, rows, cols), -np.inf, a.dtype)
    for k in range(0, inner, block):
        part = add(a[:, :, k : k + block, None], b[:, None, k : k + block, :])
        np.maximum(out, part.max(axis=2), out=out)
    return out


def _unsafe(x: np.ndarray) -> bool:
    """Whether ``x`` may hold ``+inf`` (or NaN): its max is not below ``+inf``."""
    return bool(x.size) and not x.max() < np.inf


def _annihilating_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` (broadcast), but ``-inf`` where either side is ``-inf``.

    The product of the "log" and "max" semirings, as
    ``_semiring.annihilating_add`` computes it: their zero annihilates, so
    an empty sum (``-inf``) times ``+inf`` is the zero, not the NaN that
    ``inf + -inf`` gives (the completed max-plus semiring's rule,
    ``-inf ⊗ +inf = -inf``; for "log", ``0 · ∞ = 0`` as in measure theory);
    NaN stays NaN. Sides without ``+inf`` or NaN add plainly (one max pass
    each to tell).

    Example:
        >>> x = np.array([np.inf, 1.0, np.nan])
        >>> _annihilating_add(x, np.array(-np.inf)).tolist()
        [-inf, -inf, nan]
    """
    if not (_unsafe(a) or _unsafe(b)):
        return np.add(a, b)
    return _masked_add(a, b)


def _masked_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`_annihilating_add` without its check: ``-inf`` wherever a side is ``-inf``."""
    with np.errstate(invalid="ignore"):
        total = np.add(a, b)
        return np.where(np.minimum(a, b) == -np.inf, -np.inf, total).astype(total.dtype)


def _combine(ring: Semiring, acc: np.ndarray, x: np.ndarray) -> np.ndarray:
    return HOST_RULES[ring.name].combine(acc, x)


def _log_add(acc: np.ndarray, x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # NaN in, NaN out (as in JAX)
        return np.logaddexp(acc, x)


@dataclass(frozen=True)
class HostRules:
    """One semiring's operations in numpy: all the host walk asks of it.

    Attributes:
        reduce: ``reduce(x, axes)`` sums out ``axes`` (never empty).
        combine: ``combine(a, b)`` adds two partial results (chunks).
        times: ``times(a, b)`` multiplies two broadcast arrays.
        product: ``product(a, b)``: the matrix product of stacks of matrices,
            ``[B, M, K]`` by ``[B, K, N]``, in the semiring.
    """

    reduce: Callable[[np.ndarray, tuple[int, ...]], np.ndarray]
    combine: Callable[[np.ndarray, np.ndarray], np.ndarray]
    times: Callable[[np.ndarray, np.ndarray], np.ndarray]
    product: Callable[[np.ndarray, np.ndarray], np.ndarray]

    def negated(self) -> HostRules:
        """The rules of the semiring computed as ``-self(-x, -y)`` (exact).

        Example:
            >>> a, b = np.array([[[1.0, 5.0]]]), np.array([[[2.0], [0.0]]])
            >>> HOST_RULES["max"].negated().product(a, b).tolist()
            [[[3.0]]]
        """
        rules = self
        return HostRules(
            reduce=lambda x, axes: -rules.reduce(-x, axes),
            combine=lambda a, b: -rules.combine(-a, -b),
            times=lambda a, b: -rules.times(-a, -b),
            product=lambda a, b: -rules.product(-a, -b),
        )


# The rules written out, one record per semiring that has its own; a
# semiring registered as a negation gets its base's, negated.
_WRITTEN: dict[str, HostRules] = {
    SUM.name: HostRules(_sum, np.add, np.multiply, np.matmul),
    LOG.name: HostRules(_log_sum, _log_add, _annihilating_add, _log_product),
    MAX.name: HostRules(_max, np.maximum, _annihilating_add, _max_product),
}
HOST_RULES: dict[str, HostRules] = rules_for_every_semiring(
    "host walk (numpy)", _WRITTEN, HostRules.negated, "_WRITTEN in _exec/_host.py"
)


def chunk_rules(ring: Semiring, operands: Sequence[np.ndarray]) -> HostRules:
    """``HOST_RULES``' for a chunk of ``operands``, adding plainly where that is exact.

    A product of "log", "max" or "min" annihilates (`_annihilating_add`),
    which takes a max pass over both sides of every step to tell whether
    one may hold ``+inf`` (``-inf`` in "min") or NaN: 13% of a 40-step
    max-plus walk of 3-state variables (2026-12-07). These rules tell once
    for the chunk, when a product first needs to (`_plain_adds_exact`;
    max-plus products in the native kernel never do), and then add
    plainly if no product can meet ``+inf``.

    Example:
        >>> rules = chunk_rules(semiring_named("max"), [np.array([np.inf, 0.0])])
        >>> rules.times(np.array([np.inf]), np.array([-np.inf])).tolist()
        [-inf]
    """
    rules = HOST_RULES[ring.name]
    if not (math.isinf(ring.zero) and operands) or np.iscomplexobj(operands[0]):
        return rules
    told: list[bool] = []

    def plain() -> bool:
        if not told:
            told.append(_plain_adds_exact(ring, operands))
        return told[0]

    def times(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        # (-((-a) + (-b)) is a + b: a plain add serves "min" as it is)
        return np.add(a, b) if plain() else rules.times(a, b)

    def min_plus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return -_max_product(-a, -b, plain)

    product: Callable[[np.ndarray, np.ndarray], np.ndarray] = rules.product
    if ring.selective:  # (the kernel annihilates: it never asks)
        product = min_plus if ring.negation_of else partial(_max_product, plain=plain)
    return HostRules(rules.reduce, rules.combine, times, product)


def _plain_adds_exact(ring: Semiring, operands: Sequence[np.ndarray]) -> bool:
    """Whether no product of these operands' entries can meet ``+inf`` (or NaN).

    None holds ``+inf`` (``-inf`` for "min") or NaN, and the sum of their
    largest entries stays far inside the float range, so that no sum of
    entries overflows to ``+inf`` either: a plain add is then the product.

    Example:
        >>> max_plus = semiring_named("max")
        >>> _plain_adds_exact(max_plus, [np.zeros(2), np.array([-np.inf])])
        True
        >>> _plain_adds_exact(max_plus, [np.array([1e308]), np.array([1e308])])
        False
    """
    upward = ring.zero < 0  # (the side +inf lies on: "min" mirrors it)
    bound = 0.0
    for x in operands:
        if x.size:
            top = float(x.max()) if upward else -float(x.min())
            if not top < math.inf:  # +inf, or NaN
                return False
            bound += max(top, 0.0)
    return bound < float(np.finfo(operands[0].dtype).max) / 4


_SUM = semiring_named("sum")
