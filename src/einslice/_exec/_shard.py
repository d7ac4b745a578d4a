"""Chunks across a mesh: each device scans its share, then one all-reduce.

A plan's summed chunks are independent, so the summed chunk grid is cut into
contiguous shares, one per device along a mesh axis. Under ``jax.shard_map``
every device gets the whole (replicated) operands, scans chunk numbers
[d·share, (d+1)·share) with ``sweep``'s ``part`` (numbers past the grid are
dropped), and the per-device partial outputs are combined in the semiring:
``psum`` ("sum"), a log-add-exp all-reduce ("log") or ``pmax`` ("max"). Each
device keeps within the plan's ``memory_limit``; the communication is one
all-reduce of the output (two for "log": its max, then the shifted sum). The
same works across hosts under ``jax.distributed``, as the mesh spans them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec

from .._plan._slice import summed_chunk_count
from .._plan._types import Plan
from ._scan import Part

# The axis name of the 1-D mesh built for ``devices=N``.
DEVICES_AXIS = "devices"


def splits(plan: Plan, chunks: tuple[tuple[int, int], ...]) -> bool:
    """Whether a pass over ``chunks`` runs across devices.

    Only when the plan has several devices and slices a summed index: a
    formula that sums nothing has no grid to split and runs on one device.
    """
    eq = plan.equation
    return plan.devices > 1 and any(i not in eq.output for i, _ in chunks)


def mesh_of(plan: Plan) -> tuple[Mesh, str]:
    """The plan's mesh and axis, or a 1-D mesh of the first ``devices`` devices."""
    if plan.mesh is not None:
        assert isinstance(plan.mesh, Mesh) and plan.mesh_axis is not None
        return plan.mesh, plan.mesh_axis
    devices = np.array(jax.devices()[: plan.devices])
    return Mesh(devices, (DEVICES_AXIS,)), DEVICES_AXIS


def split(
    plan: Plan,
    chunks: tuple[tuple[int, int], ...],
    run: Callable[..., object],
    reduce: Callable[[object, str], jax.Array],
    args: Sequence[object],
) -> jax.Array:
    """Run ``run(part, *args)`` on each device's share, combine with ``reduce``.

    Args:
        plan: the plan; its mesh (or ``devices``) says where to run.
        chunks: the pass's chunk sizes (forward or tangent), as in the plan.
        run: one device's sweep over the chunk numbers of ``part``.
        reduce: combines the devices' results along the mesh axis name.
        args: arrays (or tuples of arrays), replicated on every device.

    Returns:
        The combined result, replicated on every device.
    """
    mesh, axis = mesh_of(plan)
    eq = plan.equation
    total = summed_chunk_count(eq.sizes, eq.output, dict(chunks))
    share = -(-total // mesh.shape[axis])

    def local(*args):
        part = Part(lax.axis_index(axis) * share, share)
        return reduce(run(part, *args), axis)

    # check_vma=False: scans inside (ours and the semirings') start from
    # constant carries that become device-varying, which the check rejects.
    # Outputs are replicated by construction (every result is all-reduced).
    spec = PartitionSpec()
    sharded = jax.shard_map(
        local, mesh=mesh, in_specs=(spec,) * len(args), out_specs=spec, check_vma=False
    )
    return sharded(*args)


def all_reduce(semiring: str, x: jax.Array, axis: str) -> jax.Array:
    """Combine partial results across ``axis`` in the semiring."""
    if semiring == "sum":
        return lax.psum(x, axis)
    if semiring == "max":
        return lax.pmax(x, axis)
    # log Σ_d exp(x_d), shifted by the max; all -inf gives -inf, never NaN.
    shift = lax.pmax(x, axis)
    shift = jnp.where(jnp.isfinite(shift), shift, jnp.zeros_like(shift))
    return jnp.log(lax.psum(jnp.exp(x - shift), axis)) + shift


def tangent_reduce(semiring: str, x, axis: str) -> jax.Array:
    """Combine per-device output tangents across ``axis``.

    "sum" and "log" add them (each "log" chunk was already weighted against
    the global output). "max" gets ``(tangent, taken)`` per device and keeps
    the tangent of the lowest device that attains the maximum: devices hold
    ascending chunk numbers, so ties resolve as on one device (first chunk).
    """
    if semiring != "max":
        return lax.psum(x, axis)
    tangent, taken = x
    me = lax.axis_index(axis)
    first = lax.pmin(jnp.where(taken, me, lax.axis_size(axis)), axis)
    return lax.psum(jnp.where(first == me, tangent, jnp.zeros_like(tangent)), axis)
