"""Run a plan's chunks inside one traced program: ``lax.scan`` over the chunks.

Summed sliced indices are looped by an inner scan that combines each chunk
into an accumulator of one output block; output sliced indices by an outer
scan that writes each finished block in place. A chunk size that does not
divide its index is handled by clamping the last chunk's start (so it stays
in bounds) and masking the entries an earlier chunk already covered; output
blocks need no mask, since rewriting the same values is harmless.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from math import prod
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from .._plan._types import Plan
from . import _scaled, _semiring
from ._semiring import Config
from ._step import run_step, take_diagonals

Starts = dict[int, jax.Array]
Valid = dict[int, jax.Array]


def chunk_body(
    plan: Plan,
    chunks: dict[int, int],
    operands: Sequence[jax.Array],
    starts: Starts,
    valid: Valid,
    config: Config,
) -> jax.Array:
    """One chunk's contribution: one output block, in output index order."""
    eq = plan.equation
    ring = plan.ring
    owners = {i: next(k for k, t in enumerate(eq.terms) if i in t) for i in valid}
    nodes: list[jax.Array] = []
    for k, (x, term) in enumerate(zip(operands, eq.terms, strict=True)):
        for axis, index in enumerate(term):
            if index in chunks:
                x = lax.dynamic_slice_in_dim(x, starts[index], chunks[index], axis)
        x, labels = take_diagonals(x, term)
        for index, mask in valid.items():
            if owners[index] == k:
                axis = labels.index(index)
                shape = [1] * x.ndim
                shape[axis] = mask.shape[0]
                x = jnp.where(mask.reshape(shape), x, _semiring.zero(ring, x.dtype))
        private = [a for a, i in enumerate(labels) if i not in plan.prepared[k]]
        if private and ring.widens:
            x = _semiring.widened(x, config)
        nodes.append(_semiring.reduce(ring, x, private))
    robust = partial(run_steps, plan, config)
    if ring.scaled_form and _scaled.applies(plan, chunks):
        return _scaled.log_steps(plan, chunks, config, robust, nodes)
    return robust(nodes)


def run_steps(plan: Plan, config: Config, prepared: Sequence[jax.Array]) -> jax.Array:
    """Run a plan's pairwise steps on its prepared operands; output order."""
    ring = plan.ring
    result, term = plan.walk_steps(
        prepared,
        lambda step, left, lt, right, rt: run_step(
            ring, step, left, lt, right, rt, config
        ),
    )
    order = [term.index(i) for i in plan.equation.output]
    return jnp.transpose(result, order) if order != sorted(order) else result


def chunk_grid(
    sizes: Sequence[int],
    chunks: dict[int, int],
    indices: Sequence[int],
    t: jax.Array,
) -> tuple[Starts, Valid]:
    """Start of chunk number ``t`` of a grid over ``indices``, and masks.

    The last chunk of an index whose size its chunk does not divide starts
    early (clamped) so it stays in bounds; its mask is False where the
    previous chunk already covered.
    """
    starts: Starts = {}
    valid: Valid = {}
    for index in reversed(indices):
        size, chunk = sizes[index], chunks[index]
        count = -(-size // chunk)
        position = t % count
        t = t // count
        nominal = position * chunk
        start = jnp.minimum(nominal, size - chunk).astype(jnp.int32)
        starts[index] = start
        if size % chunk:
            valid[index] = start + jnp.arange(chunk) >= nominal
    return starts, valid


# A block's carry: an array or a tuple of arrays (a pytree), as ``init`` makes it.
Carry = Any
Init = Callable[[tuple[int, ...], Starts], Carry]
Step = Callable[[Carry, Starts, Valid], Carry]
Finish = Callable[[Carry, Starts], jax.Array]


@dataclass(frozen=True)
class Part:
    """One device's share of the summed grid: chunk numbers [start, start + count)."""

    start: jax.Array
    count: int


def sweep(
    plan: Plan,
    chunks: dict[int, int],
    out_dtype,
    init: Init,
    step: Step,
    finish: Finish,
    checkpoint: bool = False,
    part: Part | None = None,
    reverse: bool = False,
) -> jax.Array:
    """Loop ``step`` over all chunks and assemble the full output.

    For each output block: ``init`` makes a carry, ``step`` folds in each
    summed chunk, ``finish`` turns the carry into the block (an array, or a
    tuple of arrays with ``out_dtype`` a matching tuple of dtypes). With
    ``reverse``, the summed chunks are folded in from the last to the first.

    With ``part``, only summed chunk numbers [start, start + count) are
    folded in (one device's share, see ``_shard.py``); numbers past the grid
    are clamped to stay in bounds and their step is dropped, leaving the
    carry as it was (the semiring's zero when nothing else was folded in).
    """
    eq = plan.equation
    sizes = eq.sizes
    out_indices = [i for i in chunks if i in eq.output]
    sum_indices = [i for i in chunks if i not in eq.output]
    block_shape = tuple(chunks.get(i, sizes[i]) for i in eq.output)

    def block(out_starts: Starts) -> jax.Array:
        carry = init(block_shape, out_starts)
        if not sum_indices:
            return finish(step(carry, out_starts, {}), out_starts)
        carry = _fold_chunks(
            step,
            carry,
            out_starts,
            sizes,
            chunks,
            sum_indices,
            checkpoint,
            part,
            reverse,
        )
        return finish(carry, out_starts)

    if not out_indices:
        return block({})

    def outer(out, t):
        starts, _ = chunk_grid(sizes, chunks, out_indices, t)
        where = [starts[i] if i in starts else jnp.int32(0) for i in eq.output]
        write = partial(lax.dynamic_update_slice, start_indices=where)
        return jax.tree.map(write, out, block(starts)), None

    if checkpoint:
        outer = jax.checkpoint(outer)
    shape = tuple(sizes[i] for i in eq.output)
    full = jax.tree.map(partial(jnp.zeros, shape), out_dtype)
    length = _grid_size(sizes, chunks, out_indices)
    return _counted_scan(outer, full, jnp.int32(0), length)


def _grid_size(
    sizes: Sequence[int], chunks: dict[int, int], indices: Sequence[int]
) -> int:
    """How many chunks the grid over ``indices`` has."""
    return prod(-(-sizes[i] // chunks[i]) for i in indices)


def _fold_chunks(
    step: Step,
    carry: Carry,
    out_starts: Starts,
    sizes: Sequence[int],
    chunks: dict[int, int],
    sum_indices: Sequence[int],
    checkpoint: bool,
    part: Part | None,
    reverse: bool = False,
) -> Carry:
    """Fold the summed chunks of one output block into ``carry``, in one scan.

    With ``part``, only its share of the chunk numbers (see ``sweep``); with
    ``reverse``, from the last chunk number to the first.
    """
    total = _grid_size(sizes, chunks, sum_indices)

    def body(carry, t):
        starts, valid = chunk_grid(
            sizes, chunks, sum_indices, jnp.minimum(t, total - 1)
        )
        new = step(carry, {**out_starts, **starts}, valid)
        # Past the grid (a device's share, see ``part``) the carry stays as
        # it was. Without ``part`` the select is always true, and it is kept
        # for speed: XLA CPU runs a lone elementwise op (the accumulating
        # ``add`` after a dot) as a single-op fusion ~2.5x slower than a
        # fused add+select (47 vs 18 us for a 512x512 add, profiled; the
        # seed formula at n=512 runs 5% faster with it).
        new = jax.tree.map(partial(jnp.where, t < total), new, carry)
        return new, None

    if checkpoint:
        body = jax.checkpoint(body)
    first = jnp.int32(0) if part is None else part.start
    length = total if part is None else part.count
    return _counted_scan(body, carry, first, length, reverse)


def _counted_scan(body, carry, first: jax.Array, length: int, reverse: bool = False):
    """``lax.scan`` over chunk numbers first, first + 1, ... kept in the carry.

    Or, with ``reverse``, over first + length - 1, ..., first. Scanning over
    ``jnp.arange(length)`` would materialize 4 bytes per chunk.
    """
    stride = -1 if reverse else 1

    def counted(state, _):
        t, carry = state
        carry, _ = body(carry, t)
        return (t + stride, carry), None

    start = first + (length - 1) if reverse else first
    (_, carry), _ = lax.scan(counted, (start, carry), None, length=length)
    return carry
