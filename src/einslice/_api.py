"""The public entry points: einsum, plan, naive_einsum; plan cache; jit boundary."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from functools import cache, partial
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from ._errors import (
    EinsliceError,
    EinsliceNotImplementedError,
    EinsliceTypeError,
    MemoryLimitError,
)
from ._exec import _choose, _semiring
from ._exec._calibrate import current_profile, platform
from ._exec._run import _run, execute_plan, tune_later
from ._exec._semiring import Config
from ._exec._shard import Target, in_place
from ._exec._step import take_diagonals
from ._plan._equation import (
    Spec,
    build_equation,
    parse_interleaved,
    parse_subscripts,
)
from ._plan._memory import format_bytes, parse_memory_limit
from ._plan._order import optimize_key
from ._plan._planner import make_plan, remember_growable
from ._plan._profile import Profile, figures_problem
from ._plan._request import PlanRequest
from ._plan._search import Found
from ._plan._semiring import Semiring, semiring_named
from ._plan._types import Placement, Plan

# Share of the device's free memory taken as the default memory_limit: on a GPU
# 80% of the free device memory (XLA needs some for itself); on a CPU 50% of
# the available RAM (the rest is left to the inputs, outputs and other work).
GPU_DEFAULT_FRACTION = 0.8
CPU_DEFAULT_FRACTION = 0.5


def einsum(
    subscripts,
    /,
    *operands,
    out: None = None,
    memory_limit: int | str | None = None,
    optimize: object = "auto",
    precision=None,
    preferred_element_type=None,
    semiring: str = "sum",
    devices: int | None = None,
    mesh: jax.sharding.Mesh | None = None,
    mesh_axis: str | None = None,
    tune: str = "auto",
    profile: Profile | None = None,
    gradient: bool = False,
    out_sharding=None,
    _dot_general=None,
) -> jax.Array:
    """Evaluate an einsum like ``jnp.einsum``, within a memory limit.

    Args:
        subscripts: ``"ij,jk->ik"``; or the first operand of the interleaved
            form ``einsum(A, [0, 1], B, [1, 2], [0, 2])``.
        *operands: the arrays (and, interleaved, their index lists).
        out: unsupported, as in ``jnp.einsum``; must be None.
        memory_limit: bytes (int) or a string like ``"512MB"`` or ``"4GiB"``
            bounding the compiled program's temporary memory (inputs and output
            excluded); None takes a default from the device (see
            ``default_memory_limit``).
        optimize: path search: ``"auto"`` (dynamic programming up to 12
            operands, the large-network tree search above), ``"greedy"``,
            ``"optimal"``, ``"dp"``, ``True``, ``False`` (left to right), an
            explicit path, an ``einslice.TreeSearch(seed=..., trials=...,
            seconds=...)`` for the tree search with those settings, or a path
            optimizer object such as ``cotengra.HyperOptimizer()``.
        precision: passed to every ``lax.dot_general`` (as in jnp: None,
            ``"highest"``, a ``lax.Precision``, a ``lax.DotAlgorithmPreset``
            such as ``TF32_TF32_F32_X3``, ...); plans are costed at the
            profile's matrix-multiply rate for it (``docs/precision.md``).
        preferred_element_type: accumulation and result dtype, as in jnp.
        semiring: ``"sum"``; ``"log"`` (operands are logs: log Σ exp Σ);
            ``"max"`` (max-plus: max Σ); ``"min"`` (min-plus: min Σ, as
            in shortest paths).
        devices: split the summed chunks across the first ``devices`` of
            ``jax.devices()`` (each within ``memory_limit``), then all-reduce.
        mesh: or split them along one axis of this ``jax.sharding.Mesh``
            (it may span hosts under ``jax.distributed``).
        mesh_axis: the mesh axis to use; default the mesh's first axis.
        out_sharding: as in ``jnp.einsum``: a ``NamedSharding``, or a
            ``PartitionSpec`` under ``jax.set_mesh``, over explicit mesh axes;
            the result is given that sharding (the contraction itself runs
            with those axes in auto mode, as jnp.einsum runs its paths).
        tune: ``"estimate"`` (the time model's best plan), ``"measure"``
            (compile and time the best few candidates on this device, keep
            the fastest within the limit, remember it as wisdom; later calls
            of the same signature use the wisdom instead of measuring) or
            ``"auto"`` (remembered wisdom, else measure when that is
            estimated to cost at most 10% of one call, on a GPU when one
            call is estimated at 1 ms or more; else estimate). One device
            only.
        profile: the device profile to plan for; default the calibrated one
            (``einslice.calibrate()``) or the platform's built-in one
            (``einslice.profiles``: a plan for another device can be made here).
        gradient: derivatives will be taken (``jax.grad``, ``jax.jvp``):
            choose a plan whose derivative pass fits ``memory_limit`` too,
            rather than the fastest forward pass, whose derivative may not.

    Returns:
        What ``jnp.einsum`` returns for the same arguments (for "sum").

    Raises:
        EinsliceError: malformed subscripts, wrong operand count, mismatched
            sizes, bad options.
        MemoryLimitError: no plan fits ``memory_limit``; the message and
            ``.smallest_limit`` state the smallest limit that does.

    Example:
        >>> import jax.numpy as jnp, einslice
        >>> x = jnp.arange(6.0).reshape(2, 3)
        >>> einslice.einsum("ij,ij->i", x, x, memory_limit="1MB").tolist()
        [5.0, 50.0]
    """
    if out is not None:
        raise EinsliceNotImplementedError(
            "einsum's out= argument is not supported (JAX arrays are immutable); "
            "use the returned array."
        )
    del _dot_general  # jnp.einsum's private hook; einslice plans its own steps
    arrays, spec = _split(subscripts, operands)

    def run(*arrays):
        target = _target(devices, mesh, mesh_axis)
        p = _plan(
            spec,
            arrays,
            memory_limit,
            optimize,
            semiring,
            preferred_element_type,
            target,
            tune=tune,
            profile=profile,
            precision=precision,
            gradient=gradient,
            background=True,
        )
        return execute_plan(p, arrays, precision, preferred_element_type)

    sharding = _out_sharding(out_sharding)
    return run(*arrays) if sharding is None else _placed_as(sharding, run)(*arrays)


def _without_private(fn: Callable, name: str) -> None:
    """Hide the keyword ``name`` from ``fn``'s signature (help, inspect, IDEs).

    ``jnp.einsum`` has a private keyword, ``_dot_general``, and code written
    for it that takes an einsum function (``einsum_fn=``) may pass it along;
    ``einsum`` accepts and ignores it so that such code keeps working, but it
    is no part of einslice's interface, so the signature users see leaves it
    out. (A ``**kwargs`` catch would hide every misspelt keyword as well.)
    """
    sig = inspect.signature(fn)
    kept = [p for p in sig.parameters.values() if p.name != name]
    fn.__signature__ = sig.replace(parameters=kept)  # type: ignore[attr-defined]


_without_private(einsum, "_dot_general")


def log_einsum(subscripts, /, *operands, **kwargs) -> jax.Array:
    """``einsum(..., semiring="log")``: log Σ exp(Σ operands) over summed indices.

    Example:
        >>> import jax.numpy as jnp, einslice
        >>> round(float(einslice.log_einsum("i,i->", jnp.zeros(4), jnp.zeros(4))), 6)
        1.386294
    """
    return einsum(subscripts, *operands, semiring="log", **kwargs)


def max_einsum(subscripts, /, *operands, **kwargs) -> jax.Array:
    """``einsum(..., semiring="max")``: max Σ operands over summed indices.

    Example:
        >>> import jax.numpy as jnp, einslice
        >>> float(einslice.max_einsum("i,i->", jnp.arange(3.0), jnp.ones(3)))
        3.0
    """
    return einsum(subscripts, *operands, semiring="max", **kwargs)


def min_einsum(subscripts, /, *operands, **kwargs) -> jax.Array:
    """``einsum(..., semiring="min")``: min Σ operands over summed indices.

    Example (the shortest paths of two hops; inf: no edge):
        >>> import jax.numpy as jnp, einslice
        >>> inf = jnp.inf
        >>> d = jnp.array([[0.0, 1.0, inf], [inf, 0.0, 2.0], [5.0, inf, 0.0]])
        >>> einslice.min_einsum("ik,kj->ij", d, d).tolist()
        [[0.0, 1.0, 3.0], [7.0, 0.0, 2.0], [5.0, 6.0, 0.0]]
    """
    return einsum(subscripts, *operands, semiring="min", **kwargs)


def plan(
    subscripts,
    /,
    *operands,
    memory_limit: int | str | None = None,
    optimize: object = "auto",
    semiring: str = "sum",
    dtype=None,
    preferred_element_type=None,
    devices: int | None = None,
    mesh: jax.sharding.Mesh | None = None,
    mesh_axis: str | None = None,
    tune: str = "estimate",
    profile: Profile | None = None,
    precision=None,
    gradient: bool = False,
) -> Plan:
    """Plan an einsum without running it; call the plan to run it.

    Args:
        subscripts: as for ``einsum`` (string or interleaved form).
        *operands: arrays, ``jax.ShapeDtypeStruct`` s, or shape tuples.
        memory_limit: as for ``einsum``.
        optimize: as for ``einsum``.
        semiring: as for ``einsum``.
        dtype: the dtype of operands given as shape tuples (default float32).
        preferred_element_type: as for ``einsum``.
        devices: as for ``einsum``; calling the plan then runs on them.
        mesh: as for ``einsum``.
        mesh_axis: as for ``einsum``.
        tune: as for ``einsum`` (default "estimate"); measuring runs the
            candidates on ones of the given shapes when no arrays are given.
        profile: as for ``einsum``.
        precision: as for ``einsum``: the time is estimated at the profile's
            matrix-multiply rate for it, and calling the plan without a
            precision runs with it.
        gradient: as for ``einsum``: the plan's derivative fits
            ``memory_limit`` too (MemoryLimitError here if no plan's does).

    Returns:
        A Plan: ``.path``, ``.sliced``, ``.flops``, ``.naive_flops``,
        ``.peak_bytes``; ``str(plan)`` reports it; ``plan(*arrays)`` runs it.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (64, 64), (64, 64), memory_limit="1MB")
        >>> p.flops
        524288
    """
    arrays, spec = _structs(subscripts, operands, dtype)
    target = _target(devices, mesh, mesh_axis)
    return _plan(
        spec,
        arrays,
        memory_limit,
        optimize,
        semiring,
        preferred_element_type,
        target,
        tune=tune,
        profile=profile,
        precision=precision,
        gradient=gradient,
    )


def plan_with_tree(
    subscripts,
    /,
    *operands,
    tree: Found | None,
    memory_limit: int | str | None = None,
    optimize: object = "auto",
    semiring: str = "sum",
    dtype=None,
    profile: Profile | None = None,
    gradient: bool = False,
) -> Plan:
    """`plan` (one device, estimated) along a contraction tree searched already.

    ``einslice.pgm`` searches its merged networks itself (``search_tree``)
    and passes the tree found here (``einslice._internal``): it becomes the
    request's ``tree``, not a value of ``optimize``. None: as `plan`.

    Example:
        >>> p = plan_with_tree("ij,jk->ik", (4, 5), (5, 6), tree=None)
        >>> p.path
        ((0, 1),)
    """
    arrays, spec = _structs(subscripts, operands, dtype)
    return _plan(
        spec,
        arrays,
        memory_limit,
        optimize,
        semiring,
        None,
        profile=profile,
        gradient=gradient,
        tree=tree,
    )


def _structs(subscripts, operands, dtype) -> tuple[list, Spec]:
    """`plan`'s operands (arrays, shape-dtype structs or shapes) and spec."""
    if isinstance(subscripts, str):
        items = list(operands)
        spec = parse_subscripts(subscripts, len(items))
    else:
        items, spec = parse_interleaved([subscripts, *operands])
    return [_as_struct(x, dtype, k) for k, x in enumerate(items)], spec


def _target(devices, mesh, mesh_axis) -> Target | None:
    """Check the device arguments: (device count, mesh or None, mesh axis).

    None when none was given.
    """
    if devices is not None and mesh is not None:
        raise EinsliceError(
            f"devices={devices!r} and mesh={mesh!r} were both given; pass one: "
            "devices=N for the first N devices, or mesh= (with mesh_axis=)."
        )
    if mesh is not None:
        if not isinstance(mesh, jax.sharding.Mesh):
            raise EinsliceError(
                f"mesh={mesh!r} is not a jax.sharding.Mesh; build one with "
                "jax.make_mesh((n,), ('x',)) or pass devices=n instead."
            )
        axis = mesh.axis_names[0] if mesh_axis is None else mesh_axis
        if axis not in mesh.axis_names:
            raise EinsliceError(
                f"mesh_axis={mesh_axis!r} is not an axis of the mesh "
                f"{list(mesh.axis_names)}; pass one of those names."
            )
        return int(mesh.shape[axis]), mesh, str(axis)
    if mesh_axis is not None:
        raise EinsliceError(
            f"mesh_axis={mesh_axis!r} was given without mesh=; pass the mesh too, "
            "or use devices=N (a 1-D mesh of the first N devices)."
        )
    if devices is None:
        return None
    available = len(jax.devices())
    if (
        isinstance(devices, bool)
        or not isinstance(devices, int | np.integer)
        or not 1 <= devices <= available
    ):
        raise EinsliceError(
            f"devices={devices!r} is not a device count between 1 and the "
            f"{available} available (jax.devices()); pass such an int, or None "
            "for one device. (On CPU, XLA_FLAGS=--xla_force_host_platform_"
            "device_count=N set before importing jax simulates N devices.)"
        )
    context = _context_mesh()
    if context is None or devices == 1:
        return int(devices), None, None
    # Inside jax.set_mesh, JAX lets shard_map use only the active mesh, so
    # devices=N means N devices of it: its first axis of that size.
    axis = next((a for a in context.axis_names if context.shape[a] == devices), None)
    if axis is None:
        raise EinsliceError(
            f"devices={devices!r} but the active mesh (jax.set_mesh) has axes "
            f"{dict(context.shape)}, none of {devices} devices; pass one of those "
            "sizes, or mesh=jax.sharding.get_mesh() with mesh_axis=."
        )
    return int(devices), context, str(axis)


def _out_sharding(out_sharding) -> NamedSharding | None:
    """Check ``out_sharding`` as jnp.einsum does; None when there is nothing to do.

    A PartitionSpec needs an active mesh (``jax.set_mesh``); the axes it names
    must be explicit ones (``AxisType.Explicit``), since only those are part of
    an array's type. The errors have the types jnp.einsum raises.
    """
    if out_sharding is None:
        return None
    if not isinstance(out_sharding, NamedSharding | PartitionSpec):
        raise EinsliceTypeError(
            f"out_sharding={out_sharding!r} is a {type(out_sharding).__name__}; "
            "as with jnp.einsum pass a jax.sharding.NamedSharding, or a "
            "PartitionSpec under jax.set_mesh(...)."
        )
    context = jax.sharding.get_abstract_mesh()
    if isinstance(out_sharding, PartitionSpec):
        if context.empty:
            raise EinsliceError(
                f"out_sharding={out_sharding!r} is a PartitionSpec but no mesh is "
                "active; call einsum under jax.set_mesh(mesh), or pass "
                "NamedSharding(mesh, spec)."
            )
        out_sharding = NamedSharding(context, out_sharding)
    mesh = out_sharding.mesh
    if mesh.empty:
        return None
    axis_types = dict(zip(mesh.axis_names, mesh.axis_types, strict=True))
    for spec_entry in out_sharding.spec:
        names = spec_entry if isinstance(spec_entry, tuple) else (spec_entry,)
        for name in names:
            if name is not None and axis_types[name] != AxisType.Explicit:
                raise EinsliceError(
                    f"out_sharding={out_sharding!r} names the mesh axis {name!r} "
                    f"of type {axis_types[name]}; name only explicit axes "
                    "(jax.make_mesh(..., axis_types=(AxisType.Explicit, ...))), "
                    "or leave out_sharding None."
                )
    if not _explicit_axes(mesh):
        return None  # no axis that is part of the result's type
    return out_sharding


def _placed_as(
    sharding: NamedSharding, fn: Callable[..., jax.Array]
) -> Callable[..., jax.Array]:
    """``fn``, its result given ``sharding``.

    As jnp.einsum does for a path of several steps, ``fn`` (planning included,
    so that it sees operands and mesh as they are there) runs with the mesh's
    explicit axes in auto mode (``jax.sharding.auto_axes``): the layouts of
    its steps are the compiler's choice; only the result's is fixed.
    """
    placed = jax.sharding.auto_axes(
        fn, axes=_explicit_axes(sharding.mesh), out_sharding=sharding
    )
    return cast("Callable[..., jax.Array]", placed)


def _explicit_axes(mesh) -> tuple[str, ...]:
    return tuple(
        name
        for name, kind in zip(mesh.axis_names, mesh.axis_types, strict=True)
        if kind == AxisType.Explicit
    )


def _context_mesh():
    """The mesh of an active ``jax.set_mesh``, or None.

    Concrete outside ``jax.jit``; inside, JAX only gives its abstract form
    (which ``shard_map`` accepts there).
    """
    abstract = jax.sharding.get_abstract_mesh()
    if abstract.empty:
        return None
    try:
        mesh = jax.sharding.get_mesh()
    except ValueError:  # inside jax.jit
        return abstract
    # (inside jax.sharding.auto_axes, as for out_sharding=, the abstract mesh
    # has other axis types than the concrete one: shard_map wants the former)
    return abstract if mesh.empty or mesh.abstract_mesh != abstract else mesh


def _plan(
    spec: Spec,
    arrays,
    memory_limit,
    optimize,
    semiring,
    pet,
    target: Target | None = None,
    tune: str = "estimate",
    profile: Profile | None = None,
    precision=None,
    gradient: bool = False,
    tree: Found | None = None,
    background: bool = False,
) -> Plan:
    """Plan for these operands (arrays or ShapeDtypeStructs) and devices.

    The call's options are resolved here, once, into a `PlanRequest` (the
    memory limit parsed or defaulted, less the operands' promotion copies;
    the profile at the call's precision); the planner makes the plan from
    it, and the choosing stage may pick another of its ranked plans
    (``tune=``); with ``background`` (``einsum``'s calls) ``"auto"``
    measures off the call path (``_run.tune_later``). ``tree``: a
    contraction tree searched already
    (``einslice.pgm``'s), taken instead of searching; a ``Found`` passed as
    ``optimize`` is taken so too.

    Operands already split along one index (summed or output) over a mesh
    axis are used in place (``_shard.in_place``): the plan is then the
    one-device plan, run by each device on its shard. The active mesh
    (``jax.set_mesh``) alone is not consulted: as with ``jnp.einsum``,
    replicated operands under it are not split, since nothing in them says
    to; operands split over it are.
    """
    ring = semiring_named(semiring)
    shapes = tuple(tuple(int(d) for d in np.shape(x)) for x in arrays)
    equation = build_equation(spec, shapes)
    dtype = _compute_dtype(arrays, ring)
    itemsize = max(dtype.itemsize, jnp.dtype(pet).itemsize if pet else 0)
    limit = (
        default_memory_limit()
        if memory_limit is None
        else parse_memory_limit(memory_limit)
    )
    (devices, mesh, mesh_axis), sharded = in_place(equation, arrays, target)
    if isinstance(optimize, Found):  # how pgm passed its trees before `tree`
        tree, optimize = optimize, "auto"
    key = optimize_key(optimize)
    tune = _choose.check_tune(tune)
    profile = current_profile() if profile is None else _checked_profile(profile)
    if not isinstance(gradient, bool):
        raise EinsliceError(
            f"gradient={gradient!r} is not True or False; pass True when "
            "derivatives of the contraction will be taken."
        )
    # Operands of another dtype are copied in the result's before the plan
    # runs: those copies are temporaries too, so the steps get what is left.
    cast = _cast_bytes(arrays, dtype)
    request = PlanRequest(
        equation,
        itemsize,
        dtype.name,
        max(limit - cast, 1),  # 1: the error then says what the steps need
        key,
        semiring,
        Placement(devices, mesh, mesh_axis, sharded),
        profile.for_precision(_effective_precision(precision)),
        gradient,
        tree,
        cast,
        precision,
    )
    # Plans are cached on the request (an unhashable optimizer object is
    # keyed by its identity: ``_order.optimize_key``).
    try:
        p = make_plan(request)
    except MemoryLimitError as error:
        if not cast:
            raise
        raise _cast_limit_error(error, limit, cast, dtype) from None
    if request.placement.single and tune != "estimate":
        # wisdom for the default limit is kept as "default": the limit itself
        # depends on the free memory, which differs from one process to the next
        limit_key = "default" if memory_limit is None else limit
        made, p = p, _tuned(p, request, arrays, tune, limit_key, pet, background)
        if p is not made and p == made:  # (the same plan, its choice noted)
            remember_growable(p, request)
    return p


def _effective_precision(precision):
    """``precision``, or JAX's default matmul precision when it is None."""
    if precision is None:
        return getattr(jax.config, "jax_default_matmul_precision", None)
    return precision


def _cast_bytes(arrays, dtype: np.dtype) -> int:
    """Bytes of the copies of the operands not already of ``dtype``."""
    return sum(
        int(np.prod(np.shape(x))) * dtype.itemsize
        for x in arrays
        if np.dtype(getattr(x, "dtype", None) or jnp.result_type(x)) != dtype
    )


def _cast_limit_error(
    error: MemoryLimitError, limit: int, cast: int, dtype: np.dtype
) -> MemoryLimitError:
    """``error`` for a plan whose operands' promotion copies take ``cast`` bytes."""
    smallest = error.smallest_limit + cast
    return MemoryLimitError(
        f"memory_limit={format_bytes(limit)} ({limit} bytes) is below the smallest "
        f"feasible plan ({format_bytes(smallest)}, {smallest} bytes), "
        f"{format_bytes(cast)} of which are copies of operands promoted to "
        f"{dtype.name}; raise the limit, pass the operands as {dtype.name}, or "
        "pass memory_limit=None.",
        smallest_limit=smallest,
        flops=error.flops,
    )


def _checked_profile(profile: object) -> Profile:
    """``profile`` if the planner can use it; else an error naming what is wrong."""
    problem = figures_problem(profile)
    if problem is None:
        return cast("Profile", profile)
    error = EinsliceTypeError if not isinstance(profile, Profile) else EinsliceError
    raise error(
        f"profile={_short_repr(profile)} cannot be planned for: {problem}; pass "
        "an einslice.Profile (einslice.calibrate() measures one), or None for "
        "this device's."
    )


def _tuned(
    p: Plan,
    request: PlanRequest,
    arrays,
    tune: str,
    limit_key: object,
    pet,
    background: bool = False,
) -> Plan:
    """``p``, or the candidate that tuning picks (see ``_exec/_choose.py``)."""
    config = Config(request.precision, pet)
    tuning = _choose.Tuning(
        arrays,
        request,
        run=lambda plan, ops: _run(plan, config, *ops),
        limit_key=limit_key,
        platform=platform(),
        later=tune_later(p, config, arrays) if background else None,
    )
    return _choose.choose(p, tune, tuning).plan


def _compute_dtype(arrays, ring: Semiring) -> np.dtype:
    dtype = jnp.result_type(*arrays) if arrays else jnp.dtype(jnp.float32)
    if ring.needs_inexact and not jnp.issubdtype(dtype, jnp.inexact):
        dtype = jnp.result_type(dtype, jnp.float32)
    if ring.shifted_exp_dot and jnp.issubdtype(dtype, jnp.complexfloating):
        # (its compiled steps raised a TypeError deep in lax, and the host
        # walk dropped the imaginary parts: refused where the call enters)
        raise EinsliceError(
            f"semiring={ring.name!r} takes real operands (logarithms of "
            f"nonnegative values), not {dtype}; pass their real parts, or "
            "contract exp() of them with semiring='sum'."
        )
    return np.dtype(dtype)


def _split(subscripts, operands) -> tuple[list, Spec]:
    if isinstance(subscripts, str):
        arrays = [_as_array(x, k) for k, x in enumerate(operands)]
        return arrays, parse_subscripts(subscripts, len(arrays))
    items, spec = parse_interleaved([subscripts, *operands])
    return [_as_array(x, k) for k, x in enumerate(items)], spec


def _as_array(x, k: int):
    """An operand as jnp.einsum takes it: an array or a scalar, nothing else."""
    if isinstance(x, jax.Array | np.ndarray) or hasattr(x, "__jax_array__"):
        return x
    if isinstance(x, int | float | complex | bool | np.generic):
        return jnp.asarray(x)
    raise EinsliceTypeError(
        f"operand {k} is a {type(x).__name__} ({_short_repr(x)}), not an array "
        "or scalar; as with jnp.einsum, convert it first (jnp.asarray(x)), or in "
        "the interleaved form pass array, index list, array, index list, ..."
    )


def _short_repr(x) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def _as_struct(x, dtype, k: int):
    if isinstance(x, tuple | list) and all(isinstance(d, int | np.integer) for d in x):
        if any(d < 0 for d in x):
            raise EinsliceError(
                f"operand {k} has the shape {_short_repr(x)} with a negative size; "
                "axis sizes are ints >= 0."
            )
        return jax.ShapeDtypeStruct(tuple(int(d) for d in x), dtype or jnp.float32)
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return x
    return _as_array(x, k)


@cache
def default_memory_limit() -> int:
    """The memory_limit used when None is given, fixed at first use per process.

    On a GPU or TPU: ``GPU_DEFAULT_FRACTION`` of the first device's free memory.
    On a CPU: ``CPU_DEFAULT_FRACTION`` of the available RAM.
    """
    device = jax.devices()[0]
    stats = None
    if device.platform != "cpu":
        try:
            stats = device.memory_stats()
        except Exception:  # some backends have no memory stats
            stats = None
    if stats and "bytes_limit" in stats:
        free = stats["bytes_limit"] - stats.get("bytes_in_use", 0)
        return max(int(GPU_DEFAULT_FRACTION * free), 1)
    return max(int(CPU_DEFAULT_FRACTION * available_ram()), 1)


def available_ram() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def naive_einsum(subscripts, /, *operands, semiring: str = "sum") -> jax.Array:
    """The loop-nest einsum: vmap over output indices, scan over summed ones.

    Builds no intermediate at all (the seed's ``vmap_einsum`` for any formula):
    the zero-memory reference, and a baseline for benchmarks.

    Example:
        >>> import jax.numpy as jnp, einslice
        >>> x = jnp.arange(6.0).reshape(2, 3)
        >>> einslice.naive_einsum("ij,ij->i", x, x).tolist()
        [5.0, 50.0]
    """
    arrays, spec = _split(subscripts, operands)
    ring = semiring_named(semiring)
    shapes = tuple(tuple(int(d) for d in np.shape(x)) for x in arrays)
    eq = build_equation(spec, shapes)
    dtype = _compute_dtype(arrays, ring)
    ops, terms = [], []
    for x, term, drop in zip(arrays, eq.terms, eq.squeezed, strict=True):
        x = jnp.asarray(x).astype(dtype)
        x = lax.squeeze(x, drop) if drop else x
        x, labels = take_diagonals(x, term)
        ops.append(x)
        terms.append(tuple(labels))
    summed = [
        i for i in dict.fromkeys(i for t in terms for i in t) if i not in eq.output
    ]
    return _naive(ring, tuple(terms), tuple(eq.output), tuple(summed), eq.sizes, *ops)


@partial(jax.jit, static_argnums=(0, 1, 2, 3, 4))
def _naive(ring: Semiring, terms, out_indices, summed, sizes, *ops):
    def loop(ops, terms, out_indices, summed):
        if out_indices:
            index, rest = out_indices[0], out_indices[1:]
            axes = tuple(t.index(index) if index in t else None for t in terms)
            inner_terms = tuple(tuple(i for i in t if i != index) for t in terms)
            return jax.vmap(
                lambda *o: loop(o, inner_terms, rest, summed), in_axes=axes
            )(*ops)
        if summed:
            index, rest = summed[0], summed[1:]
            inner_terms = tuple(tuple(i for i in t if i != index) for t in terms)

            def body(acc, position):
                sliced = [
                    lax.dynamic_index_in_dim(x, position, t.index(index), False)
                    if index in t
                    else x
                    for x, t in zip(ops, terms, strict=True)
                ]
                value = loop(sliced, inner_terms, (), rest)
                return _semiring.combine(ring, acc, value), None

            init = _semiring.zero(ring, ops[0].dtype if ops else jnp.float32)
            return lax.scan(body, init, jnp.arange(sizes[index]))[0]
        value = ops[0]
        for x in ops[1:]:
            value = _semiring.elementwise(ring, value, x)
        return value

    return loop(ops, terms, out_indices, summed)
