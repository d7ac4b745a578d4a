"""Chunks across a mesh: each device scans its share, then one all-reduce.

A plan's summed chunks are independent, so the summed chunk grid is cut into
contiguous shares, one per device along a mesh axis. Under ``jax.shard_map``
every device gets the whole (replicated) operands, scans chunk numbers
[d·share, (d+1)·share) with ``sweep``'s ``part`` (numbers past the grid are
dropped), and the per-device partial outputs are combined in the semiring:
``psum`` ("sum"), a log-add-exp all-reduce ("log") or ``pmax`` ("max"): each
semiring's ``all_reduce`` rule (``_semiring.RULES``). Each
device keeps within the plan's ``memory_limit``; the communication is one
all-reduce of the output (two for "log": its max, then the shifted sum). The
same works across hosts under ``jax.distributed``, as the mesh spans them.

Operands the caller already split along a summed index over the mesh axis
(``Plan.sharded``, found by ``in_place``) enter ``shard_map`` with that
split instead: each device contracts its own shard of the index (all of that
shard's chunks) and the same all-reduce combines the devices. Every other
operand holding the index is split the same way (a local slice, no traffic);
the rest stay replicated. Operands split along an output index need no
communication at all: each device computes its own block of the output, which
leaves ``shard_map`` split along that output dimension.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from .._plan._semiring import Semiring
from .._plan._slice import shard_plan, summed_chunk_count
from .._plan._types import Equation, Plan
from . import _semiring
from ._scan import Part

# The axis name of the 1-D mesh built for ``devices=N``.
DEVICES_AXIS = "devices"


def splits(plan: Plan, chunks: tuple[tuple[int, int], ...]) -> bool:
    """Whether a pass over ``chunks`` runs across devices.

    Only when the plan has several devices and slices a summed index (or
    the operands arrive split along one): a formula that sums nothing has no
    grid to split and runs on one device.
    """
    if plan.devices <= 1:
        return False
    eq = plan.equation
    return plan.sharded is not None or any(i not in eq.output for i, _ in chunks)


def mesh_of(plan: Plan) -> tuple[Mesh | AbstractMesh, str]:
    """The plan's mesh and axis, or a 1-D mesh of the first ``devices`` devices.

    A mesh taken from traced operands (``in_place`` under ``jax.jit``) is an
    ``AbstractMesh``, which ``shard_map`` accepts there.
    """
    if plan.mesh is not None:
        assert isinstance(plan.mesh, Mesh | AbstractMesh) and plan.mesh_axis
        return plan.mesh, plan.mesh_axis
    devices = np.array(jax.devices()[: plan.devices])
    return Mesh(devices, (DEVICES_AXIS,)), DEVICES_AXIS


def operand_specs(plan: Plan) -> tuple[PartitionSpec, ...]:
    """How each (squeezed) operand enters ``shard_map``.

    Split along ``plan.sharded`` where it has that index, else replicated.
    """
    if plan.sharded is None or plan.devices <= 1:
        return (PartitionSpec(),) * len(plan.equation.terms)
    _, axis = mesh_of(plan)
    return tuple(
        PartitionSpec(*(axis if i == plan.sharded else None for i in term))
        for term in plan.equation.terms
    )


def output_spec(plan: Plan) -> PartitionSpec:
    """How the result leaves ``shard_map``.

    Split along ``plan.sharded`` when that is an output index (each device
    holds its block), else replicated (all-reduced).
    """
    eq = plan.equation
    if plan.sharded not in eq.output or plan.devices <= 1:
        return PartitionSpec()
    _, axis = mesh_of(plan)
    return PartitionSpec(*(axis if i == plan.sharded else None for i in eq.output))


def split(
    plan: Plan,
    tangent: bool,
    run: Callable[..., Any],
    reduce: Callable[[Any, str], jax.Array],
    args: Sequence[object],
    specs: Sequence[object],
) -> jax.Array:
    """Run ``run(plan, part, *args)`` on each device, combine with ``reduce``.

    Args:
        plan: the plan; its mesh (or ``devices``) says where to run.
        tangent: whether this is the derivative pass (``tangent_chunks``).
        run: one device's sweep over the summed chunk numbers of ``part``
            (None: all of them), under the plan it gets (one device's, for
            in-place operands).
        reduce: combines the devices' results along the mesh axis name.
        args: arrays (or tuples of arrays).
        specs: each arg's ``PartitionSpec`` (a matching tuple for a tuple).

    Returns:
        The combined result, replicated on every device; or, with operands
        split along an output index, each device's block (no ``reduce``),
        split along that output dimension.
    """
    mesh, axis = mesh_of(plan)
    # Operands arriving split: each device scans every chunk of its shard.
    inner = plan if plan.sharded is None else shard_plan(plan)
    eq = inner.equation
    chunks = inner.tangent_chunks if tangent else inner.chunks
    total = summed_chunk_count(eq.sizes, eq.output, dict(chunks))
    share = total if plan.sharded is not None else -(-total // mesh.shape[axis])
    blocks = plan.sharded in eq.output

    def local(*args):
        if blocks:  # disjoint blocks of the output: nothing to combine
            return run(inner, None, *args)
        first = jnp.int32(0) if plan.sharded is not None else lax.axis_index(axis)
        return reduce(run(inner, Part(first * share, share), *args), axis)

    # check_vma=False: scans inside (ours and the semirings') start from
    # constant carries that become device-varying, which the check rejects.
    # Outputs are replicated by construction (all-reduced) or split blocks.
    sharded = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=tuple(specs),
        out_specs=output_spec(plan),
        check_vma=False,
    )
    return sharded(*args)


def all_reduce(ring: Semiring, x: jax.Array, axis: str) -> jax.Array:
    """Combine partial results across ``axis`` in the semiring."""
    return _semiring.RULES[ring.name].all_reduce(x, axis)


def tangent_reduce(ring: Semiring, x, axis: str) -> jax.Array:
    """Combine per-device output tangents across ``axis``.

    "sum" and "log" add them (each "log" chunk was already weighted against
    the global output). "max" gets ``(tangent, taken)`` per device and keeps
    the tangent of the lowest device that attains the maximum: devices hold
    ascending chunk numbers, so ties resolve as on one device (first chunk).
    (With operands used in place they hold ascending shards of the split
    index instead, so ties between devices may resolve differently.)
    """
    if not ring.selective:
        return lax.psum(x, axis)
    tangent, taken = x
    me = lax.axis_index(axis)
    first = lax.pmin(jnp.where(taken, me, lax.axis_size(axis)), axis)
    return lax.psum(jnp.where(first == me, tangent, jnp.zeros_like(tangent)), axis)


def sharding_of(x) -> NamedSharding | None:
    """The ``NamedSharding`` of an array, tracer or ShapeDtypeStruct, if any.

    A concrete array's is the real one. A tracer's comes from its type: the
    mesh is abstract and only Explicit mesh axes show (Auto ones read as
    replicated, so such operands cannot be found under ``jax.jit``).
    """
    if not isinstance(x, jax.Array | jax.ShapeDtypeStruct):
        return None
    try:
        sharding = x.sharding
    except AttributeError:  # a tracer
        sharding = jax.typeof(x).sharding
    return sharding if isinstance(sharding, NamedSharding) else None


Target = tuple[int, object, str | None]


def in_place(
    eq: Equation, arrays: Sequence[object], asked: Target | None
) -> tuple[Target, int | None]:
    """Whether operands split by the caller can be used as they are.

    They can when every split operand axis is split along one and the same
    mesh axis of one mesh, all of them hold the same index (summed or in the
    output), that index is on no operand twice (a diagonal) and splits
    evenly, and the mesh fits what was ``asked``: ``mesh=`` and
    ``mesh_axis=`` name that mesh and axis, ``devices=N`` has N devices on
    that axis, or nothing was asked (None).
    Then returns ``((axis size, mesh, axis), index)``; otherwise ``(asked or
    one device, None)``, and such operands are gathered (see ``place``).
    """
    target = asked or (1, None, None)
    found = set()
    for x, term, dropped in zip(arrays, eq.terms, eq.squeezed, strict=True):
        sharding = sharding_of(x)
        if sharding is None:
            continue
        spec = _padded(sharding.spec, len(term) + len(dropped))
        kept = [entry for a, entry in enumerate(spec) if a not in dropped]
        if any(spec[a] is not None for a in dropped):
            return target, None
        for entry, index in zip(kept, term, strict=True):
            if entry is None:
                continue
            names = (entry,) if isinstance(entry, str) else entry
            if not isinstance(names, tuple) or len(names) != 1:
                return target, None  # split over several mesh axes
            found.add((sharding.mesh, names[0], index))
    if len(found) != 1:
        return target, None
    ((mesh, axis, index),) = found
    n = int(mesh.shape[axis])
    devices, asked_mesh, asked_axis = target
    if asked_mesh is not None:  # mesh=, or the active mesh for devices=N
        same = mesh in (asked_mesh, getattr(asked_mesh, "abstract_mesh", None))
        fits = same and asked_axis == axis
    else:  # devices=N: that mesh axis has N devices; nothing asked: any
        fits = asked is None or n == devices
    if (
        not fits
        or n < 2
        or eq.sizes[index] % n
        or any(term.count(index) > 1 for term in eq.terms)
    ):
        return target, None
    return (n, asked_mesh if asked_mesh is not None else mesh, axis), index


def place(plan: Plan, operands: Sequence[jax.Array]) -> list[jax.Array]:
    """Reshard operands whose type says otherwise into the layout used.

    Under Explicit mesh axes an array's split is part of its type, and
    ``shard_map`` and ``dot_general`` refuse one that differs from what they
    are given; so operands split in a way not used in place are gathered
    here (``jax.reshard`` to replicated), and, with ``plan.sharded``, the
    ones holding that index are split (a local slice). Under Auto axes XLA
    does the same by itself.
    """
    placed = []
    for x, want in zip(operands, operand_specs(plan), strict=True):
        have = jax.typeof(x).sharding
        # Replicated: on the mesh it is on; split: on the plan's.
        mesh = have.mesh if want == PartitionSpec() else mesh_of(plan)[0]
        if _explicit(mesh) and _padded(have.spec, x.ndim) != _padded(want, x.ndim):
            x = jax.reshard(x, NamedSharding(mesh, want))
        placed.append(x)
    return placed


def _explicit(mesh) -> bool:
    return AxisType.Explicit in tuple(getattr(mesh, "axis_types", ()))


def _padded(spec: PartitionSpec, ndim: int) -> tuple:
    return tuple(spec) + (None,) * (ndim - len(spec))
