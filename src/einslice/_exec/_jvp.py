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

from collections.abc import Sequence
from functools import partial
from typing import cast

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import DTypeLike

from .._errors import MemoryLimitError
from .._plan._memory import format_bytes
from .._plan._types import Plan
from . import _scaled, _semiring
from ._scan import Part, chunk_body, sweep
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

        reduce = partial(all_reduce, plan.semiring)
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
    semiring = plan.semiring
    dtype = _out_dtype(plan, config, operands)

    def init(shape, _starts):
        return jnp.full(shape, _semiring.zero(semiring, dtype))

    def step(acc, starts, valid):
        block = chunk_body(plan, chunks, operands, starts, valid, config)
        return _semiring.combine(semiring, acc, block.astype(dtype))

    if not chunks:  # (astype to the same dtype would drop a weak type)
        out = chunk_body(plan, chunks, operands, {}, {}, config)
        return out if out.dtype == dtype else out.astype(dtype)
    return sweep(plan, chunks, dtype, init, step, lambda acc, _: acc, part=part)


@contract.defjvp
def _contract_jvp(plan: Plan, config: Config, primals, tangents):
    if plan.tangent_cost.peak_bytes > plan.memory_limit:
        raise MemoryLimitError(
            f"the derivative of {plan.equation.text()!r} needs at least "
            f"{format_bytes(plan.gradient_limit)} "
            f"({plan.gradient_limit} bytes) but memory_limit is "
            f"{format_bytes(plan.memory_limit)}; raise memory_limit to at least "
            "that for gradients (the forward pass alone fits).",
            smallest_limit=plan.gradient_limit,
            flops=plan.tangent_cost.flops,
        )
    if _one_pass(plan):
        return _unsliced_jvp(plan, config, primals, tangents)
    out = contract(plan, config, *primals)
    if splits(plan, plan.tangent_chunks):

        def run(inner, part, primals, tangents, out):
            return tangent_sweep(inner, config, primals, tangents, out, part)

        reduce = partial(tangent_reduce, plan.semiring)
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
    return plan.semiring != "log" or not _scaled.applies(plan, {})


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
    if plan.semiring == "log":
        tangent = jnp.where(jnp.isfinite(value), tangent, 0)
    elif plan.semiring == "max":
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
    """
    chunks = dict(plan.tangent_chunks)
    semiring = plan.semiring
    eq = plan.equation

    def chunk_jvp(starts, valid):
        def body(*ops):
            return chunk_body(plan, chunks, ops, starts, valid, config)

        value, tangent = jax.jvp(body, tuple(primals), tuple(tangents))
        return value.astype(out.dtype), tangent.astype(out.dtype)

    def out_block(starts):
        if not any(i in eq.output for i in chunks):
            return out
        where = [starts.get(i, jnp.int32(0)) for i in eq.output]
        shape = [chunks.get(i, eq.sizes[i]) for i in eq.output]
        return lax.dynamic_slice(out, where, shape)

    def init(shape, _starts):
        tangent = jnp.zeros(shape, out.dtype)
        return (tangent, jnp.zeros(shape, bool)) if semiring == "max" else tangent

    def step(carry, starts, valid):
        value, tangent = chunk_jvp(starts, valid)
        if semiring == "sum":
            return carry + tangent
        total = out_block(starts)
        if semiring == "log":
            finite = jnp.isfinite(total)
            weight = jnp.exp(value - jnp.where(finite, total, 0))
            return carry + jnp.where(finite, weight, 0) * tangent
        acc, taken = carry
        hit = (value == total) & ~taken
        return acc + jnp.where(hit, tangent, 0), taken | hit

    keep_taken = semiring == "max" and part is not None

    def finish(carry, _starts):
        return carry[0] if semiring == "max" and not keep_taken else carry

    if not chunks:
        return finish(step(init(out.shape, {}), {}, {}), {})
    dtype = (out.dtype, jnp.dtype(bool)) if keep_taken else out.dtype
    return sweep(plan, chunks, dtype, init, step, finish, checkpoint=True, part=part)


def _out_dtype(plan: Plan, config: Config, operands: Sequence[jax.Array]):
    if config.preferred_element_type is not None:
        return jnp.dtype(cast("DTypeLike", config.preferred_element_type))
    return jnp.result_type(*operands) if operands else jnp.float32
