"""The three semirings as data: what planning, costing and execution ask of one.

Plans name their semiring by a string (``"sum"``, ``"log"``, ``"max"``: what
users pass, JSON-friendly in cache keys); ``semiring_named`` turns the name
into a `Semiring`, whose attributes answer every question that code used to
answer by comparing names. The JAX operations of each semiring (reduce,
combine, pair) live in ``_exec/_semiring.py``, keyed by these objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._errors import EinsliceError

# A "log" step contracting at most this many entries sums the materialized
# union exactly (no matrix unit, no underflow repair): cheaper to compile and
# run for the binary and small domains of graphical models.
SMALL_CONTRACTION = 16


@dataclass(frozen=True, slots=True)
class Semiring:
    """One semiring's facts, as the planner, cost model and executor read them.

    Attributes:
        name: how users spell it (``semiring="log"``).
        description: one phrase for error messages and reports.
        zero: the additive identity (0, or -inf on log-values and scores).
        multiplies: whether the product is ``*``; else ``+`` (operands are
            log-values or scores).
        widens: whether sums and products outside ``dot_general`` run in
            ``preferred_element_type``, as ``jnp.einsum`` runs them.
        jnp_einsum: whether ``jnp.einsum`` computes it, so that one call of it
            along the plan's path is a tuning candidate.
        union_up_to: contracting steps over at most this many entries (math.inf:
            all of them) add the two sides into their materialized union and
            reduce it instead of using the matrix unit; None: never.
        shifted_exp_dot: whether other contracting steps shift each side by
            its max, exponentiate, ``dot_general`` and take the log (with
            transients of several times both sides).
        scaled_form: whether a chunk may run in scaled linear form, one
            exponential per entry (``_exec/_scaled.py``; costed per entry).
        weights_tangents: whether each chunk's tangent counts by its share
            ``exp(chunk - total)`` of the sum; the tangent is 0 where the sum
            is not finite.
        selective: whether the sum is a max, whose derivative follows the first
            maximizing entry, chunk or device; the tangent is 0 where the sum
            is NaN.
        all_reduce: the collective that combines devices' partial outputs.
        all_reduce_passes: how many all-reduces of the output that takes.
    """

    name: str
    description: str
    zero: float
    multiplies: bool
    widens: bool
    jnp_einsum: bool
    union_up_to: float | None
    shifted_exp_dot: bool
    scaled_form: bool
    weights_tangents: bool
    selective: bool
    all_reduce: str
    all_reduce_passes: int

    @property
    def needs_inexact(self) -> bool:
        """Whether integer operands compute in a float type (the zero is -inf).

        Example:
            >>> SUM.needs_inexact, LOG.needs_inexact
            (False, True)
        """
        return math.isinf(self.zero)

    def contracts_by_union(self, entries: int) -> bool:
        """Whether a step contracting ``entries`` entries reduces the sides' union.

        Example:
            >>> LOG.contracts_by_union(16), LOG.contracts_by_union(17)
            (True, False)
        """
        return self.union_up_to is not None and entries <= self.union_up_to


SUM = Semiring(
    name="sum",
    description="the ordinary einsum",
    zero=0,
    multiplies=True,
    widens=True,
    jnp_einsum=True,
    union_up_to=None,
    shifted_exp_dot=False,
    scaled_form=False,
    weights_tangents=False,
    selective=False,
    all_reduce="psum",
    all_reduce_passes=1,
)
LOG = Semiring(
    name="log",
    description="log-sum-exp of sums of log-values",
    zero=-math.inf,
    multiplies=False,
    widens=False,
    jnp_einsum=False,
    union_up_to=SMALL_CONTRACTION,
    shifted_exp_dot=True,
    scaled_form=True,
    weights_tangents=True,
    selective=False,
    all_reduce="pmax + psum (log-add-exp)",
    all_reduce_passes=2,
)
MAX = Semiring(
    name="max",
    description="max-plus (tropical)",
    zero=-math.inf,
    multiplies=False,
    widens=False,
    jnp_einsum=False,
    union_up_to=math.inf,
    shifted_exp_dot=False,
    scaled_form=False,
    weights_tangents=False,
    selective=True,
    all_reduce="pmax",
    all_reduce_passes=1,
)

SEMIRINGS: dict[str, Semiring] = {s.name: s for s in (SUM, LOG, MAX)}


def semiring_named(name: object) -> Semiring:
    """The semiring users call ``name``.

    Raises:
        EinsliceError: ``name`` is not one of ``SEMIRINGS``; the message lists
            them.

    Example:
        >>> semiring_named("log") is LOG
        True
    """
    found = SEMIRINGS.get(name) if isinstance(name, str) else None
    if found is None:
        known = "; ".join(f"{s.name!r} is {s.description}" for s in SEMIRINGS.values())
        raise EinsliceError(
            f"semiring={name!r} is not one of {list(SEMIRINGS)} ({known})."
        )
    return found
