"""What a plan is made from: one frozen, hashable request, resolved once.

The public layer (``_api._plan``) resolves a call's options once, into a
`PlanRequest`: the memory limit parsed, defaulted and less the operands'
promotion copies, the profile at the call's precision, the placement, and a
tree searched already (``einslice.pgm``'s) in its own field rather than on
``optimize``. The planner (``_planner.make_plan``, ``rank_plans``,
``tuning_candidates``) takes it whole, is cached on it, and makes each
`Plan` from it in one place: nothing is patched into a plan afterwards.

Example:
    >>> from einslice._plan._equation import build_equation, parse_subscripts
    >>> eq = build_equation(parse_subscripts("ij,jk->ik", 2), ((4, 5), (5, 6)))
    >>> request = PlanRequest(eq, 4, "float32", 2**20)
    >>> request.optimize, request.tree is None, hash(request) == hash(request)
    ('auto', True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from ._profile import CPU_DEFAULT, Profile
from ._search import Found
from ._types import ONE_DEVICE, Equation, Placement


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """Everything a plan is made from (the planner's cache key).

    Attributes:
        equation: the parsed equation.
        itemsize: bytes per element of the computation dtype.
        dtype: the computation dtype's name (shown in the report).
        memory_limit: the bytes the plan's steps may hold: the caller's limit
            (parsed, or the device's default) less `cast_bytes`.
        optimize: the path strategy, as ``_order.optimize_key`` gives it: a
            name, a bool, an explicit path, a ``TreeSearch`` or an optimizer.
        semiring: a name in ``_semiring.SEMIRINGS``.
        placement: the devices the plan runs on (``_types.Placement``).
        profile: the device the times are estimated for, at the matmul rate
            of `precision` (``Profile.for_precision``).
        gradient: derivatives will be taken: the plan's derivative pass must
            fit the limit too.
        tree: a contraction tree searched already (``_search.Found``:
            ``einslice.pgm`` searches its merged networks itself); its path
            and sliced indices are taken instead of searching. `optimize` is
            then not used for that first tree.
        cast_bytes: bytes of the copies of operands promoted to the
            computation dtype: the plan reports its peaks with them (its
            derivative holds each copy's tangent too) and its memory limit
            as the caller's (`memory_limit` + `cast_bytes`).
        precision: the ``precision=`` a call of the plan without one runs at
            (opaque here, as a mesh is: a string, a ``lax.Precision`` or a
            ``lax.DotAlgorithmPreset``, all hashable). Part of the key: two
            requests that differ only in it give plans that run differently.
    """

    equation: Equation
    itemsize: int
    dtype: str
    memory_limit: int
    optimize: object = "auto"
    semiring: str = "sum"
    placement: Placement = ONE_DEVICE
    profile: Profile = CPU_DEFAULT
    gradient: bool = False
    tree: Found | None = None
    cast_bytes: int = 0
    precision: object = None
