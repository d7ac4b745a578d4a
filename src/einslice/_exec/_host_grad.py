"""A scalar contraction's value and gradient in numpy on the host, nothing compiled.

Marginals are the gradient of log Z and a MAP state comes from the gradient
of the max-plus value; through JAX both compile the plan's forward and
backward program, and for a small graphical model that compilation is
nearly all the time (Promedus_24: ~30 s of compiling against 0.05 s of
running, on a loaded 2-core machine). Here the plan's steps are walked
forward in numpy as ``_host.run_on_host`` walks them, every node kept, and
then in reverse:

- ``"log"``: the forward walk runs in ``_host``'s scaled linear form, each
  node ``m · e^s`` with ``max m = 1``. Write ``g_n = e^{s_n} ∂Z/∂N_n / Z`` for
  node ``N_n = m_n e^{s_n}``; then ``g_root = 1 / m_root``, a step ``N = A ⋆ B``
  (an einsum) hands ``A`` the cotangent ``(g ⋆ m_B) · e^{s_A + s_B - s}`` (the
  einsum of the result's cotangent with the other side), and the gradient of
  log Z with respect to a log-table ``θ`` is ``m_θ · g_θ``: every quantity
  stays in the scaled range, so nothing overflows where the forward did not.
- ``"max"``: the maximizing state is traced back from the root, each step
  choosing the contracted indices that attain its maximum given the indices
  its result has already fixed. The gradient returned is the indicator of
  that state's entries: the max-plus gradient wherever the maximum is
  unique; where states tie, one of them (the first in index order) rather
  than JAX's even split.

Where keeping every node would not fit the memory limit, "log" keeps only
the nodes alive at chosen points and recomputes the ranges between them on
the way back (`recompute_schedule`; linkage_15's marginals: 4.1 GB of nodes,
0.96 GB recomputed).

A sliced plan's chunks are walked one at a time, as ``run_on_host`` walks
them: for "log" each chunk's gradient enters the operands' gradients
weighted by its share of Z (a running log-sum-exp rescales the sum so
far); for "max" the best chunk's state is kept. Plans of one device and a
scalar output are handled; `host_value_and_grad` returns None for a "log"
network whose scaled form could underflow (the caller then compiles).
``_choose.host_grad_pays`` says when the host takes it: the same rule as
``_choose.pays_on_host``, for the derivative.

Example:
    >>> import einslice, numpy as np
    >>> p = einslice.plan("i,i->", (2,), (2,), semiring="log", dtype="float64")
    >>> value, (g, h) = host_value_and_grad(p, [np.log([1.0, 3.0]), np.zeros(2)])
    >>> round(value, 4), g.round(3).tolist()  # ln 4, the marginal of i
    (1.3863, [0.25, 0.75])
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from math import prod

import numpy as np

from .._errors import EinsliceError
from .._plan._semiring import semiring_named
from .._plan._types import HostWalk, Plan, Step
from .._plan._walk import MAX_BLOCK_ENTRIES
from ._host import (
    EINSUM_MAX_ENTRIES,
    _einsum_pair,
    _prepare,
    _scaled_step,
    _step,
    _to_scaled,
    _Underflow,
    chunk_rules,
    host_seconds,
    step_seconds,
)

# The backward walk contracts two einsums a step (a cotangent for each side)
# where the forward contracts one; with the forward's own cost, about three
# forward walks (measured: Promedus_24 and Grids_12, 2.2-2.9x).
GRAD_PER_FORWARD = 3.0
# A backward product goes to the matrix unit (``_host._step``: transposed
# copies of both sides, then a batched matmul) only when its rows, columns and
# contracted entries are all at least this many; otherwise one ``np.einsum``
# over the strided sides. A cotangent is often contracted with a side of its
# own size down to a few entries (CSP_11: 2^18-entry sides of 16 indices, out
# 16 entries): there the copies cost 0.1 s and einsum 3 ms.
MATMUL_MIN_SIDE = 16
# Beside the arrays the bound counts: numpy's iterator buffers (8192 entries
# an operand, for casts, strided reductions and einsum) and Python's objects.
# Measured with tracemalloc on the shared UAI instances: at most 1.3 MB over
# the arrays (CSP_11, 32 chunks).
BUFFER_BYTES = 2 * 2**20
_SUM = semiring_named("sum")
_MAX = semiring_named("max")
_LETTERS = string.ascii_letters


def host_grad_supported(plan: Plan | HostWalk) -> bool:
    """Whether `host_value_and_grad` can run ``plan``'s derivative at all.

    One device (operands not sharded), a scalar output, and the "log" or
    "max" semiring.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,ij->", (2, 2), (2, 2), semiring="log")
        >>> host_grad_supported(p)
        True
        >>> host_grad_supported(einslice.plan("ij,jk->ik", (2, 2), (2, 2)))
        False
    """
    return (
        plan.devices == 1
        and plan.sharded is None
        and not plan.equation.output
        and plan.semiring in ("log", "max")
    )


def host_grad_peak_bytes(plan: Plan | HostWalk, memory_limit: int | None = None) -> int:
    """A bound on the temporary memory of `host_value_and_grad` on ``plan``.

    The walk's own accounting, step by step, at 8 bytes an entry: the
    operands' float64 copies, their gradients and a chunk's gradients (three
    times the operands, alive throughout); in a chunk, every forward node,
    alive until the backward walk passes it, beside each forward step's
    copies of its two sides and its product; then the cotangents alive at
    each backward step, beside its copies of the output's cotangent and the
    other side (scaled, then laid out as matrices) and its result; a
    table's three temporaries (when scaled, and for its gradient). "max"
    (`_max_peak_bytes`) keeps no cotangents. With ``memory_limit``, "log"
    counts the schedule `host_value_and_grad` runs at that limit
    (`recompute_schedule`: ranges of steps recomputed instead of kept).

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->", (10, 10), (10, 10), semiring="log")
        >>> host_grad_peak_bytes(p) - BUFFER_BYTES  # 8 x (3 x 200 + 40 + 3 x 100)
        7520
    """
    if plan.semiring == "max":
        return _max_peak_bytes(plan)
    schedule = recompute_schedule(plan, memory_limit)
    return _log_peak_bytes(plan, schedule.splits)


def _log_peak_bytes(plan: Plan | HostWalk, splits: Splits) -> int:
    """`host_grad_peak_bytes` of "log" under a recompute schedule's ``splits``.

    Walks the schedule as `_log_value_and_grad` runs it, counting each node
    once while any range still holds it (a node kept at a split is shared
    with the ranges below it, as the walk's dictionaries share arrays).
    """
    eq = plan.equation
    node = _node_entries(plan)
    tables = [prod(shape) for shape in eq.shapes]
    temporaries = 3 * max(tables, default=0)  # a table's copy, shifted, exp
    n_operands = len(tables)
    steps = plan.steps
    holders = [0] * len(node)
    alive = sum(node[:n_operands])  # the scaled operands, held throughout
    cotangents = 0  # the root's, from the walk of the last range on
    peak = alive + temporaries

    def take(n: int) -> None:
        nonlocal alive
        if n >= n_operands:
            holders[n] += 1
            alive += node[n] if holders[n] == 1 else 0

    def drop(n: int) -> None:
        nonlocal alive
        if n >= n_operands:
            holders[n] -= 1
            alive -= node[n] if holders[n] == 0 else 0

    def forward(s: int) -> None:
        nonlocal peak
        step, out = steps[s], node[n_operands + s]
        peak = max(
            peak, alive + cotangents + 2 * (node[step.left] + node[step.right]) + out
        )
        take(n_operands + s)

    def advance(a: int, m: int, state: list[int]) -> list[int]:
        held = list(state)
        for n in held:
            take(n)
        for s in range(a, m):
            forward(s)
            held.append(n_operands + s)
            for child in (steps[s].left, steps[s].right):
                if child >= n_operands:
                    held.remove(child)
                    drop(child)
        return held

    def leaf(a: int, b: int, state: list[int]) -> None:
        nonlocal peak, cotangents
        for n in state:
            take(n)
        for s in range(a, b):
            forward(s)
        if b == len(steps):
            cotangents += node[-1]
        for s in range(b - 1, a - 1, -1):
            step, out = steps[s], node[n_operands + s]
            drop(n_operands + s)
            for this, other in ((step.left, step.right), (step.right, step.left)):
                # the smaller side scaled, both laid out as matrices, the product
                copies = min(out, node[other]) + out + node[other] + node[this]
                peak = max(peak, alive + cotangents + copies)
                cotangents += node[this]
            cotangents -= out
        for n in state:
            drop(n)

    def release(held: list[int]) -> None:
        for n in held:
            drop(n)

    _walk_ranges(splits, leaf, advance, release, 0, len(steps), [])
    peak = max(peak, alive + cotangents + temporaries)
    return 8 * (3 * sum(tables) + peak) + BUFFER_BYTES


def _node_entries(plan: Plan | HostWalk) -> list[int]:
    """Each node's entries in one chunk (prepared operands, then step results)."""
    sizes = list(plan.equation.sizes)
    for index, chunk in plan.chunks:
        sizes[index] = chunk
    return [prod(sizes[i] for i in t) for t in plan.node_terms()]


def _max_peak_bytes(plan: Plan | HostWalk) -> int:
    """`host_grad_peak_bytes` for "max": nodes in the plan's dtype, no cotangents.

    The operands' copies (the plan's dtype) and two sets of float64
    indicators; every forward node (alive until the trace passes it) beside
    a step's copies of its sides, its product and the product's block; the
    trace's grid of a step's freed indices, twice, beside its sides.
    """
    item = np.dtype(plan.dtype).itemsize
    eq = plan.equation
    node = _node_entries(plan)
    terms = plan.node_terms()
    sizes = dict(enumerate(eq.sizes))
    sizes.update(plan.chunks)
    tables = [prod(shape) for shape in eq.shapes]
    n_operands = len(tables)
    alive = sum(node[:n_operands])
    temporaries = 3 * max(tables, default=0)  # a table's copy, maxima, trace
    peak = alive + temporaries
    for s, step in enumerate(plan.steps):
        sides = node[step.left] + node[step.right]
        out = node[n_operands + s]
        # sides laid out, the product, its block and the block's maxima (a
        # block is the product's size where one contracted entry exceeds it)
        block = 2 * MAX_BLOCK_ENTRIES + 2 * out
        peak = max(peak, alive + 2 * sides + out + block)
        alive += out
    for step in plan.steps:
        freed = set(terms[step.left] + terms[step.right]) - set(step.result)
        grid = prod(sizes[i] for i in freed)
        sides = node[step.left] + node[step.right]
        peak = max(peak, alive + sides + 2 * grid)
    peak = max(peak, alive + temporaries)
    return item * (sum(tables) + peak) + 8 * 2 * sum(tables) + BUFFER_BYTES


def host_grad_seconds(plan: Plan | HostWalk, memory_limit: int | None = None) -> float:
    """The host cost model's time for one `host_value_and_grad` of ``plan``.

    With ``memory_limit``, the forward steps its `recompute_schedule` runs
    again are added.
    """
    schedule = recompute_schedule(plan, memory_limit)
    return GRAD_PER_FORWARD * host_seconds(plan) + schedule.replay_seconds


Splits = Mapping[tuple[int, int], int]


@dataclass(frozen=True)
class RecomputeSchedule:
    """Which ranges of steps a "log" gradient recomputes rather than keeps.

    ``splits[(a, b)] = m``: the backward walk over steps ``a..b-1`` runs
    ``a..m-1`` forward again, keeping only the nodes alive at ``m``, instead
    of keeping every node of the range from the forward walk (see
    `_log_value_and_grad`). Empty: every node kept (no recomputing).
    ``replay_seconds``: the host model's time of the steps run again.
    """

    splits: Splits
    replay_seconds: float = 0.0


_KEEP_ALL = RecomputeSchedule({})


@lru_cache(maxsize=64)
def recompute_schedule(
    plan: Plan | HostWalk, memory_limit: int | None
) -> RecomputeSchedule:
    """The fewest recomputed steps whose "log" gradient fits ``memory_limit``.

    Every node is kept (no splits) when that fits, or without a limit.
    Otherwise ranges are split where the nodes kept at once would exceed a
    budget, halved until the walk's bound (`host_grad_peak_bytes`) fits; a
    long chain of large nodes (a pedigree's spine: linkage_15 holds 4.1 GB
    of nodes, each alive until the backward walk passes it, while at most
    201 MB are alive at once in the forward walk) then costs a few more
    forward walks instead of its every node. When nothing fits, the
    schedule of the least peak (the caller's check then refuses it).

    Example:
        >>> import einslice
        >>> p = einslice.plan("ab,bc,cd,de->", *[(64, 64)] * 4, semiring="log")
        >>> recompute_schedule(p, None).splits, recompute_schedule(p, 2**40).splits
        ({}, {})
    """
    if memory_limit is None or plan.semiring != "log":
        return _KEEP_ALL
    best, least = _KEEP_ALL, _log_peak_bytes(plan, {})
    if least <= memory_limit:
        return best
    node = _node_entries(plan)
    outputs = node[len(plan.equation.shapes) :]
    budget = sum(outputs) // 2
    while budget >= 1:
        splits = _split_ranges(plan, budget)
        peak = _log_peak_bytes(plan, splits)
        if peak < least:
            best, least = RecomputeSchedule(splits, _replay_seconds(plan, splits)), peak
        if peak <= memory_limit or budget < min(outputs, default=1):
            break
        budget //= 2
    return best


def _split_ranges(plan: Plan | HostWalk, budget: int) -> dict[tuple[int, int], int]:
    """Splits of the steps into ranges whose results hold at most ``budget`` entries.

    A range is split in two where the fewest entries are alive between them
    (the nodes kept at the split), among the points that leave each part a
    quarter of the range's results at least; a single step is never split.
    """
    node = _node_entries(plan)
    n_operands, steps = len(plan.equation.shapes), plan.steps
    stored = list(itertools.accumulate(node[n_operands:], initial=0))
    alive = [0]  # entries of step results alive before each step
    for s, step in enumerate(steps):
        freed = sum(node[c] for c in (step.left, step.right) if c >= n_operands)
        alive.append(alive[-1] + node[n_operands + s] - freed)
    splits: dict[tuple[int, int], int] = {}
    pending = [(0, len(steps))]
    while pending:
        a, b = pending.pop()
        total = stored[b] - stored[a]
        if b - a < 2 or total <= budget:
            continue
        inner = [
            m
            for m in range(a + 1, b)
            if total / 4 <= stored[m] - stored[a] <= 3 * total / 4
        ]
        if inner:
            m = min(inner, key=lambda m: alive[m])
        else:
            m = min(
                range(a + 1, b), key=lambda m: abs(2 * (stored[m] - stored[a]) - total)
            )
        splits[(a, b)] = m
        pending += [(a, m), (m, b)]
    return splits


def _replay_seconds(plan: Plan | HostWalk, splits: Splits) -> float:
    """The host model's time of the forward steps ``splits`` runs a second time."""
    seconds = step_seconds(plan)
    replayed = sum(sum(seconds[a:m]) for (a, _), m in splits.items())
    return replayed * plan.n_chunks


def host_value_and_grad(
    plan: Plan | HostWalk, operands: Sequence, memory_limit: int | None = None
) -> tuple[float, tuple[np.ndarray, ...]] | None:
    """The scalar ``plan(*operands)`` and its gradient, in numpy.

    "log" runs in float64; "max" in the plan's dtype (it only adds).

    Args:
        plan: a plan (or `HostWalk`) with `host_grad_supported`.
        operands: arrays of the planned shapes.
        memory_limit: bytes the walk may hold (`host_grad_peak_bytes` at this
            limit): "log" then recomputes ranges of steps instead of keeping
            all their nodes where that is needed (`recompute_schedule`).
            None: every node kept.

    Returns:
        ``(value, grads)``, one gradient per operand in its shape (float64);
        for "max", the indicator of one maximizing state. When the value is
        ``-inf`` (Z = 0, or no state possible) or NaN the gradient is zero,
        as ``jax.grad`` of the compiled plan gives it (a small change of
        the operands leaves their -inf entries -inf and Z at 0: log Z is
        constant there). None when a "log" network's scaled form could
        underflow, or an operand holds +inf or NaN: compile the gradient
        instead.

    Raises:
        EinsliceError: for a plan that `host_grad_supported` refuses, or
            operands of other shapes than the plan's.
    """
    if not host_grad_supported(plan):
        raise EinsliceError(
            "host_value_and_grad takes plans of one device with a scalar output "
            "in the 'log' or 'max' semiring; this one has "
            f"{plan.devices} device(s) (sharded={plan.sharded}), output indices "
            f"{list(plan.equation.output)} and semiring {plan.semiring!r}. Take "
            "the gradient with jax.grad of the plan instead."
        )
    # Why: "max" only adds, exact to rounding in the plan's dtype (half the
    # memory in float32); "log" sums exponentials, in float64
    dtype = np.float64 if plan.semiring == "log" else np.dtype(plan.dtype)
    arrays = _squeezed(plan, operands, dtype)
    splits = recompute_schedule(plan, memory_limit).splits
    eq = plan.equation
    chunks = dict(plan.chunks)
    ranges = [
        [slice(s, min(s + c, eq.sizes[i])) for s in range(0, eq.sizes[i], c)]
        for i, c in chunks.items()
    ]
    value = -math.inf
    grads = [np.zeros(x.shape) for x in arrays]
    for where in itertools.product(*ranges):
        cut = dict(zip(chunks, where, strict=True))
        blocks = [tuple(cut.get(i, slice(None)) for i in t) for t in eq.terms]
        pieces = [x[block] for x, block in zip(arrays, blocks, strict=True)]
        if plan.semiring == "log":
            found = _log_value_and_grad(plan, pieces, splits)
            if found is None:
                return None
            value = _add_log_chunk(value, grads, blocks, *found)
        else:
            found = _max_value_and_grad(plan, pieces)
            # the first best chunk's state; a NaN chunk makes the value NaN
            # (as the compiled program's maximum) with a zero gradient
            if found[0] > value or math.isnan(found[0]):
                value = found[0]
                for grad, block, piece in zip(grads, blocks, found[1], strict=True):
                    grad.fill(0.0)
                    grad[block] = piece
    return value, tuple(
        np.expand_dims(g, drop) if drop else g
        for g, drop in zip(grads, eq.squeezed, strict=True)
    )


def _add_log_chunk(
    total: float,
    grads: list[np.ndarray],
    blocks: list[tuple],
    value: float,
    pieces: list[np.ndarray],
) -> float:
    """The log Z so far with one chunk's ``value`` added; ``grads`` updated in place.

    A chunk's gradient of its own log-value enters weighted by its share,
    ``e^{value - new total}``; what was summed before is rescaled by
    ``e^{total - new total}``. A chunk of value ``-inf`` adds nothing.
    """
    if value == -math.inf:
        return total
    new = float(np.logaddexp(total, value))
    if total != -math.inf:
        for grad in grads:
            grad *= math.exp(total - new)
    weight = math.exp(value - new)
    for grad, block, piece in zip(grads, blocks, pieces, strict=True):
        grad[block] += weight * piece
    return new


def _squeezed(
    plan: Plan | HostWalk, operands: Sequence, dtype: np.dtype | type
) -> list[np.ndarray]:
    """The operands in ``dtype``, their broadcast size-1 axes squeezed out."""
    arrays = [np.asarray(x) for x in operands]
    shapes = tuple(x.shape for x in arrays)
    if shapes != plan.equation.shapes:
        raise EinsliceError(
            f"this plan was made for shapes {list(plan.equation.shapes)} but got "
            f"{list(shapes)}; make a new plan with einslice.plan(...) for these "
            "shapes."
        )
    return [
        np.squeeze(x, drop).astype(dtype) if drop else x.astype(dtype)
        for x, drop in zip(arrays, plan.equation.squeezed, strict=True)
    ]


# -- "log": the scaled forward walk, then its cotangents in reverse -------------------


def _log_value_and_grad(
    plan: Plan | HostWalk, arrays: list[np.ndarray], splits: Splits
) -> tuple[float, list[np.ndarray]] | None:
    """One chunk's log-value and gradient, its ranges recomputed as ``splits`` say.

    `_walk_ranges` takes the steps ``a..b-1`` backward given ``state``,
    the nodes alive before step ``a``: a range that ``splits``
    divides at ``m`` runs ``a..m-1`` forward keeping only what is alive at
    ``m``, takes ``m..b`` backward from there, drops that, and then takes
    ``a..m`` backward from ``state``; any other range runs its steps forward,
    every node kept, and then backward (`leaf`). Ranges are taken last to
    first, so a node's cotangent is there when its range is.
    """
    leaves: list = []
    for x, term, kept in zip(arrays, plan.equation.terms, plan.prepared, strict=True):
        scaled = _to_scaled(x, term, kept, single=False)
        if scaled is None:
            return None
        leaves.append(scaled)
    n_operands, steps, terms = len(arrays), plan.steps, plan.node_terms()
    root = n_operands + len(steps) - 1
    cotangents: dict[int, np.ndarray] = {}
    found: list[float] = []  # the root's log-value, once its range has run

    def node(values: dict, n: int):
        return leaves[n] if n < n_operands else values[n]

    def forward(s: int, values: dict) -> None:
        step = steps[s]
        values[n_operands + s] = _scaled_step(
            step,
            node(values, step.left),
            terms[step.left],
            node(values, step.right),
            terms[step.right],
        )

    def advance(a: int, m: int, state: dict) -> dict:
        values = dict(state)
        for s in range(a, m):
            forward(s, values)
            for child in (steps[s].left, steps[s].right):
                values.pop(child, None)  # (an operand is not in values)
        return values

    def leaf(a: int, b: int, state: dict) -> None:
        values = dict(state)
        for s in range(a, b):
            forward(s, values)
        if b == len(steps):
            m, shift, _ = node(values, root)
            top = float(m)
            if top == 0.0:  # Z = 0: log Z is -inf, its gradient zero
                raise _ZeroValue
            found.append(math.log(top) + shift)
            cotangents[root] = np.array(1.0 / top)
        for s in range(b - 1, a - 1, -1):
            step, n = steps[s], n_operands + s
            g, shift = cotangents.pop(n), values.pop(n)[1]
            # Why: its consumer's backward step was the last use of its value
            for this, other in ((step.left, step.right), (step.right, step.left)):
                m_other, shift_other, _ = node(values, other)
                scale = math.exp(node(values, this)[1] + shift_other - shift)
                # Why: scaled on the smaller side, not on the (strided) result
                if g.size <= m_other.size:
                    scaled, m_scaled = g * scale, m_other
                else:
                    scaled, m_scaled = g, m_other * scale
                cotangents[this] = _cotangent(
                    scaled, step.result, m_scaled, terms[other], terms[this]
                )

    try:
        _walk_ranges(splits, leaf, advance, dict.clear, 0, len(steps), {})
    except _Underflow:
        return None
    except _ZeroValue:
        return -math.inf, [np.zeros(x.shape) for x in arrays]
    grads = []
    for k, (x, term) in enumerate(zip(arrays, plan.equation.terms, strict=True)):
        shift = leaves[k][1]
        grads.append(_table_grad(x, term, terms[k], cotangents.pop(k), shift))
        leaves[k] = None
    return found[0], grads


def _walk_ranges(splits: Splits, leaf, advance, release, a: int, b: int, state):
    """Take steps ``a..b-1`` backward as ``splits`` say, from ``state`` (alive at a).

    One driver for the walk (`_log_value_and_grad`) and its bound
    (`_log_peak_bytes`), so that the bound counts the schedule the walk runs:
    a split range runs ``a..m-1`` forward (``advance``: what is alive at
    ``m``), takes ``m..b`` backward from that, ``release``-s it, and then takes
    ``a..m`` backward from ``state``; any other range is a ``leaf``.
    """
    m = splits.get((a, b))
    if m is None:
        leaf(a, b, state)
        return
    later = advance(a, m, state)
    _walk_ranges(splits, leaf, advance, release, m, b, later)
    release(later)  # (the walk's: its nodes go before the first half's walk)
    del later
    _walk_ranges(splits, leaf, advance, release, a, m, state)


class _ZeroValue(Exception):
    """The contraction is 0 (log Z is -inf): no gradient to take."""


def _cotangent(
    g: np.ndarray,
    result_term: tuple[int, ...],
    other: np.ndarray,
    other_term: tuple[int, ...],
    this_term: tuple[int, ...],
) -> np.ndarray:
    """The einsum of a step's output cotangent with the other side, onto this side.

    An index of this side that neither the output nor the other side has (the
    forward summed it alone) gets the cotangent broadcast along it.
    """
    present = set(result_term) | set(other_term)
    target = tuple(i for i in this_term if i in present)
    contracted = tuple(i for i in result_term if i in other_term and i not in target)
    step = Step(left=0, right=0, result=target, contracted=contracted)
    sizes = dict(zip(result_term, g.shape, strict=True))
    sizes.update(zip(other_term, other.shape, strict=True))
    rows = prod(sizes[i] for i in target if i in result_term and i not in other_term)
    cols = prod(sizes[i] for i in target if i in other_term and i not in result_term)
    inner = prod(sizes[i] for i in contracted)
    matrix = min(rows, cols, inner) >= MATMUL_MIN_SIDE
    small = g.size * other.size <= EINSUM_MAX_ENTRIES
    fits = len(set(result_term + other_term)) <= len(_LETTERS)
    if fits and (small or not matrix):
        # Why: einsum's loops over strided sides of many 2-entry axes (the
        # transposed views steps return) ran 3-4x slower than a copy of
        # each into C order and einsum on those (CSP_11: 21 ms vs 6 ms)
        g, other = _c_order(g), _c_order(other)
        out = _einsum_pair(step, g, result_term, other, other_term)
    else:
        out = _step(_SUM, step, g, result_term, other, other_term)
    out = np.asarray(out, dtype=np.float64)
    if target != this_term:  # a private index: broadcast along it
        shape = [out.shape[target.index(i)] if i in target else 1 for i in this_term]
        out = out.reshape(shape)
    return out


def _c_order(x: np.ndarray) -> np.ndarray:
    """``x`` in C order: itself, or a copy (``ascontiguousarray`` makes 0-d 1-d)."""
    return x if x.flags.c_contiguous else x.copy(order="C")


def _table_grad(
    x: np.ndarray,
    term: tuple[int, ...],
    kept: tuple[int, ...],
    g: np.ndarray,
    shift: float,
) -> np.ndarray:
    """``∂ log Z / ∂ x`` of a log-table: its linear entries times their cotangent.

    ``g`` is the cotangent of the prepared node (indices ``kept``, the table's
    distinct indices less its private ones, in order); private indices take
    it broadcast, repeated ones only on their diagonal.
    """
    unique = tuple(dict.fromkeys(term))
    sizes = dict(zip(term, x.shape, strict=True))
    g = np.broadcast_to(
        g.reshape([sizes[i] if i in kept else 1 for i in unique]),
        [sizes[i] for i in unique],
    )
    local = {i: k for k, i in enumerate(unique)}
    if len(unique) < len(term):  # the gradient lives on the diagonal only
        out: np.ndarray | None = np.zeros(x.shape, dtype=np.float64)
        diagonal = np.einsum(out, [local[i] for i in term], list(range(len(unique))))
        x = np.einsum(x, [local[i] for i in term], list(range(len(unique))))
    else:
        out, diagonal = None, None
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        linear = np.exp(x - shift)
        grad = np.where(linear > 0, linear * g, 0.0)
    if out is None:
        return grad
    assert diagonal is not None
    diagonal[...] = grad
    return out


# -- "max": the forward walk, then the maximizing state traced back -----------------


def _max_value_and_grad(
    plan: Plan | HostWalk, arrays: list[np.ndarray]
) -> tuple[float, list[np.ndarray]]:
    eq = plan.equation
    nodes: list = [
        _prepare(_MAX, x, t, k)
        for x, t, k in zip(arrays, eq.terms, plan.prepared, strict=True)
    ]

    rules = chunk_rules(_MAX, arrays)

    def record(step, left, left_term, right, right_term):
        nodes.append(_step(_MAX, step, left, left_term, right, right_term, rules))
        return nodes[-1]

    root, _ = plan.walk_steps(list(nodes), record)
    value = float(root)
    if value == -math.inf or math.isnan(value):
        return value, [np.zeros(x.shape) for x in arrays]
    terms = plan.node_terms()
    state: dict[int, int] = {}
    for s in range(len(plan.steps) - 1, -1, -1):
        step = plan.steps[s]
        left, right = nodes[step.left], nodes[step.right]
        sides = [(left, terms[step.left]), (right, terms[step.right])]
        _choose(state, sides, rules.times)
        nodes[len(arrays) + s] = None
    grads = []
    for x, term in zip(arrays, eq.terms, strict=True):
        unique = tuple(dict.fromkeys(term))
        local = {i: k for k, i in enumerate(unique)}
        diagonal = np.einsum(x, [local[i] for i in term], list(range(len(unique))))
        _choose(state, [(diagonal, unique)], rules.times)
        grad = np.zeros(x.shape)
        grad[tuple(state[i] for i in term)] = 1.0
        grads.append(grad)
    return value, grads


def _choose(state: dict[int, int], parts: list[tuple[np.ndarray, tuple]], add) -> None:
    """Fix the indices of these nodes that ``state`` lacks, maximizing their sum.

    Each node is indexed at the states already fixed; what remains of them is
    added (by ``add``, the forward walk's product) over the grid of the free
    indices, and the first maximum is taken.
    """
    free = list(dict.fromkeys(i for _, term in parts for i in term if i not in state))
    if not free:
        return
    total: np.ndarray = np.zeros(())
    sizes: dict[int, int] = {}
    for x, term in parts:
        sizes.update(zip(term, x.shape, strict=True))
        x = x[tuple(state[i] if i in state else slice(None) for i in term)]
        rest = [i for i in term if i not in state]
        x = np.transpose(x, sorted(range(len(rest)), key=lambda a: free.index(rest[a])))
        x = x.reshape([sizes[i] if i in rest else 1 for i in free])
        # Why: -inf meeting +inf is -inf, as the forward's product; a NaN
        # there would pass for the maximum (np.argmax takes the first NaN)
        total = add(total, x)
    grid = np.broadcast_to(total, [sizes[i] for i in free])
    where = np.unravel_index(int(np.argmax(grid)), grid.shape)
    state.update(zip(free, (int(w) for w in where), strict=True))
