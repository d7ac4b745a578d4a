"""The contraction as one differentiable function with a memory-bounded JVP.

Plain autodiff through ``lax.scan`` stores a residual per chunk, so the
derivative would blow the budget. Instead the JVP rule runs a second sweep
over the chunks (with the plan's ``tangent_chunks``, sized for the derivative
pass), pushing tangents through each chunk with ``jax.jvp``. Its body is
checkpointed, so when JAX transposes it for reverse mode (grad, vjp) each
chunk's forward is recomputed rather than stored: only loop indices and the
(loop-invariant) operands are kept. Being plain JAX, the rule is itself
differentiable, which gives higher-order derivatives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import cast

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import DTypeLike

from .._errors import MemoryLimitError
from .._plan._memory import format_bytes
from .._plan._semiring import Semiring
from .._plan._types import Plan
from . import _scaled, _semiring
from ._scan import Part, Starts, Valid, chunk_body, sweep
from ._semiring import Config
from ._shard import (
    all_reduce,
    operand_specs,
    output_spec,
    split,
    splits,
    tangent_reduce,
)


@partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def contract(plan: Plan, config: Config, *operands: jax.Array) -> jax.Array:
    """Run ``plan`` on prepared operands (squeezed, in the compute dtype)."""
    if splits(plan, plan.chunks):

        def run(inner, part, *ops):
            return forward(inner, config, ops, part)

        reduce = partial(all_reduce, plan.ring)
        return split(plan, False, run, reduce, operands, operand_specs(plan))
    return forward(plan, config, operands)


def forward(
    plan: Plan,
    config: Config,
    operands: Sequence[jax.Array],
    part: Part | None = None,
) -> jax.Array:
    """The forward sweep: combine each chunk's block in the semiring.

    With ``part``, only that share of the summed chunks (one device's).
    """
    chunks = dict(plan.chunks)
    ring = plan.ring
    dtype = _out_dtype(plan, config, operands)

    def init(shape, _starts):
        return jnp.full(shape, _semiring.zero(ring, dtype))

    def step(acc, starts, valid):
        block = chunk_body(plan, chunks, operands, starts, valid, config)
        return _semiring.combine(ring, acc, block.astype(dtype))

    if not chunks:  # (astype to the same dtype would drop a weak type)
        out = chunk_body(plan, chunks, operands, {}, {}, config)
        return out if out.dtype == dtype else out.astype(dtype)
    return sweep(plan, chunks, dtype, init, step, lambda acc, _: acc, part=part)


@contract.defjvp
def _contract_jvp(plan: Plan, config: Config, primals, tangents):
    if plan.tangent_cost.peak_bytes > plan.memory_limit:
        raise MemoryLimitError(
            f"the derivative of {plan.equation.brief()} needs at least "
            f"{format_bytes(plan.gradient_limit)} "
            f"({plan.gradient_limit} bytes) but memory_limit is "
            f"{format_bytes(plan.memory_limit)} (the forward pass alone fits); "
            "pass gradient=True to einsum or plan to choose a plan whose "
            "derivative fits too, or raise memory_limit to at least that.",
            smallest_limit=plan.gradient_limit,
            flops=plan.tangent_cost.flops,
        )
    if _one_pass(plan):
        return _unsliced_jvp(plan, config, primals, tangents)
    out = contract(plan, config, *primals)
    if splits(plan, plan.tangent_chunks):

        def run(inner, part, primals, tangents, out):
            return tangent_sweep(inner, config, primals, tangents, out, part)

        reduce = partial(tangent_reduce, plan.ring)
        args = (tuple(primals), tuple(tangents), out)
        specs = (operand_specs(plan),) * 2 + (output_spec(plan),)
        return out, split(plan, True, run, reduce, args, specs)
    return out, tangent_sweep(plan, config, primals, tangents, out)


def _one_pass(plan: Plan) -> bool:
    """Whether one ``jax.jvp`` gives the value (as the forward computes it) and tangent.

    When neither pass is sliced (nor split) the tangent sweep is a single
    chunk; tracing a separate forward pass as well doubled the program (an
    unsliced 48-step "log" lattice: 3501 ops instead of 2091, trace 7.6 s
    instead of 2.9 s). Not for a "log" chunk in scaled form, whose value
    differs (within rounding) from the per-step rule its JVP runs.
    """
    if plan.chunks or plan.tangent_chunks or splits(plan, ()):
        return False
    return not plan.ring.scaled_form or not _scaled.applies(plan, {})


def _unsliced_jvp(plan: Plan, config: Config, primals, tangents):
    """The value and tangent of an unsliced contraction from one ``jax.jvp``.

    The tangent is the tangent sweep's with its single chunk: zero where the
    value is not finite ("log") or NaN ("max").
    """

    def body(*ops):
        return chunk_body(plan, {}, ops, {}, {}, config)

    value, tangent = jax.jvp(body, tuple(primals), tuple(tangents))
    dtype = _out_dtype(plan, config, primals)
    value, tangent = value.astype(dtype), tangent.astype(dtype)
    if plan.ring.weights_tangents:
        tangent = jnp.where(jnp.isfinite(value), tangent, 0)
    elif plan.ring.selective:
        tangent = jnp.where(value == value, tangent, 0)
    return value, tangent


def tangent_sweep(
    plan: Plan,
    config: Config,
    primals: Sequence[jax.Array],
    tangents: Sequence[jax.Array],
    out: jax.Array,
    part: Part | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """The output tangent, one chunk at a time.

    "sum" adds the chunks' tangents; "log" weights each by its share of the
    total, exp(chunk − out); "max" takes the tangent of the first chunk that
    attains the maximum. With ``part`` (one device's share of the summed
    chunks), "max" returns ``(tangent, taken)`` so that devices can agree on
    the first (see ``_shard.tangent_reduce``).

    "max" folds the chunks in from the last to the first, each attaining
    chunk overwriting the tangent, so the first one's stays. Folding them
    forwards, with a mask of the entries already taken in the carry, made
    that mask (primal values, changing per chunk) a residual of reverse mode
    for every chunk: the seed formula at n=64 under 459 kB compiled 8.6 MB
    (2048 chunks of a 4 kB mask), at n=256 under 9.96 MB 1.08 GB.
    """
    chunks = dict(plan.tangent_chunks)
    ring = plan.ring
    keep_taken = ring.selective and part is not None

    def init(shape, _starts):
        tangent = jnp.zeros(shape, out.dtype)
        return (tangent, jnp.zeros(shape, bool)) if keep_taken else tangent

    def step(carry, starts, valid):
        value, tangent = _chunk_jvp(
            plan, chunks, config, primals, tangents, out.dtype, starts, valid
        )
        block = partial(_out_block, plan, chunks, out, starts)
        return _fold_tangent(ring, carry, value, tangent, block)

    def finish(carry, _starts):
        return carry

    if not chunks:
        return finish(step(init(out.shape, {}), {}, {}), {})
    dtype = (out.dtype, jnp.dtype(bool)) if keep_taken else out.dtype
    return sweep(
        plan,
        chunks,
        dtype,
        init,
        step,
        finish,
        checkpoint=True,
        part=part,
        reverse=ring.selective,
    )


def _chunk_jvp(
    plan: Plan,
    chunks: dict[int, int],
    config: Config,
    primals: Sequence[jax.Array],
    tangents: Sequence[jax.Array],
    dtype,
    starts: Starts,
    valid: Valid,
) -> tuple[jax.Array, jax.Array]:
    """One chunk's block and its tangent (the forward recomputed), in ``dtype``."""

    def body(*ops):
        return chunk_body(plan, chunks, ops, starts, valid, config)

    value, tangent = jax.jvp(body, tuple(primals), tuple(tangents))
    return value.astype(dtype), tangent.astype(dtype)


def _out_block(
    plan: Plan, chunks: dict[int, int], out: jax.Array, starts: Starts
) -> jax.Array:
    """The block of the output ``out`` that the chunk at ``starts`` adds into."""
    eq = plan.equation
    if not any(i in eq.output for i in chunks):
        return out
    where = [starts[i] if i in starts else jnp.int32(0) for i in eq.output]
    shape = [chunks.get(i, eq.sizes[i]) for i in eq.output]
    return lax.dynamic_slice(out, where, shape)


def _fold_tangent(
    ring: Semiring,
    carry,
    value: jax.Array,
    tangent: jax.Array,
    total: Callable[[], jax.Array],
):
    """Add one chunk's tangent into the carry by the semiring's derivative rule.

    ``total()`` gives the output block the chunk's ``value`` was summed into
    (called only by the rules that need it). "max" replaces the carried
    tangent where the chunk attains the maximum (chunks come last first, see
    `tangent_sweep`); a carry ``(tangent, taken)`` also marks where any did.
    """
    if ring.selective:
        hit = value == total()
        if isinstance(carry, tuple):
            acc, taken = carry
            return jnp.where(hit, tangent, acc), taken | hit
        return jnp.where(hit, tangent, carry)
    if ring.weights_tangents:
        block = total()
        finite = jnp.isfinite(block)
        weight = jnp.exp(value - jnp.where(finite, block, 0))
        return carry + jnp.where(finite, weight, 0) * tangent
    return carry + tangent


def _out_dtype(plan: Plan, config: Config, operands: Sequence[jax.Array]):
    if config.preferred_element_type is not None:
        return jnp.dtype(cast("DTypeLike", config.preferred_element_type))
    return jnp.result_type(*operands) if operands else jnp.float32
