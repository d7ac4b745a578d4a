"""The semirings as data: what planning, costing and execution ask of one.

This is the registry: a semiring exists when it is in ``SEMIRINGS``. Plans
name their semiring by a string (``"sum"``, ``"log"``, ``"max"``: what users
pass, JSON-friendly in cache keys); ``semiring_named`` turns the name into a
`Semiring`, whose attributes answer every question that code used to answer
by comparing names. Pure Python: no JAX, no numpy.

Each executor runs a semiring by its rules (reduce, combine, product, one
contracting step, all-reduce), written as arrays of its own kind: the JAX
rules in ``_exec/_semiring.py``, the numpy rules of the host walk in
``_exec/_host.py``. Each keeps one table of them, keyed by name, made complete
by `rules_for_every_semiring` when it is imported: a semiring without rules
there is an error naming it and the executor. A semiring declared as the
`negation` of another (min-plus of max-plus) needs no rules of its own: every
executor derives them, ``-rule(-x)``, which is exact in floating point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from .._errors import EinsliceError

# A "log" step contracting at most this many entries sums the materialized
# union exactly (no matrix unit, no underflow repair): cheaper to compile and
# run for the binary and small domains of graphical models.
SMALL_CONTRACTION = 16
# ... and so does one whose union (result entries times contracted entries)
# holds at most this many: its max, exponentials and sums take microseconds,
# while the matrix-unit rule compiles two conditionals and a loop for its
# underflow repair. On a 7x7 lattice of binary variables (48 steps) the last
# step, a scalar over 64 entries, took that rule and was the only step with
# control flow in the program (benchmarks/log_compile.py).
SMALL_UNION = 4096


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
            all of them), or whose union holds at most ``SMALL_UNION``
            entries, add the two sides into their materialized union and
            reduce it instead of using the matrix unit; None: never.
        shifted_exp_dot: whether other contracting steps shift each side by
            its max, exponentiate, ``dot_general`` and take the log (with
            transients of several times both sides).
        scaled_form: whether a chunk may run in scaled linear form, one
            exponential per entry (``_exec/_scaled.py``; costed per entry).
        weights_tangents: whether each chunk's tangent counts by its share
            ``exp(chunk - total)`` of the sum; the tangent is 0 where the sum
            is not finite.
        selective: whether the sum picks one of its terms (a max or a min),
            whose derivative follows the first attaining entry, chunk or
            device; the tangent is 0 where the sum is NaN.
        all_reduce: the collective that combines devices' partial outputs.
        all_reduce_passes: how many all-reduces of the output that takes.
        negation_of: the name of the semiring whose rules, on negated operands
            and negated back, compute this one (``"max"`` for min-plus); the
            executors derive its rules from that one's. None: it has its own.
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
    negation_of: str | None = None

    @property
    def needs_inexact(self) -> bool:
        """Whether integer operands compute in a float type (the zero is -inf).

        Example:
            >>> SUM.needs_inexact, LOG.needs_inexact
            (False, True)
        """
        return math.isinf(self.zero)

    def contracts_by_union(self, entries: int, union: float = math.inf) -> bool:
        """Whether a step contracting ``entries`` entries reduces the sides' union.

        ``union``: the union's entries (the result's times ``entries``).

        Example:
            >>> LOG.contracts_by_union(16), LOG.contracts_by_union(17)
            (True, False)
            >>> LOG.contracts_by_union(64, union=64), SUM.contracts_by_union(2, 2)
            (True, False)
        """
        if self.union_up_to is None:
            return False
        return entries <= self.union_up_to or union <= SMALL_UNION


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


def negation(base: Semiring, name: str, description: str, all_reduce: str) -> Semiring:
    """The semiring that ``base`` computes on negated operands, negated back.

    ``-base(-x, -y)``: min-plus is max-plus so mirrored (and the negation of
    "log" would be the soft minimum of energies, ``-log Σ exp(-x)``). Its zero
    is ``base``'s negated; how it contracts, costs and differentiates is
    ``base``'s (the executors run ``base``'s rules), so those facts are copied,
    not restated. ``base``'s product must be ``+``, which negation preserves
    (``-(-a + -b) = a + b``); a product ``*`` would change sign.

    Example:
        >>> ring = negation(MAX, "min", "min-plus", "pmin")
        >>> ring.zero, ring.selective, ring.negation_of
        (inf, True, 'max')
    """
    if base.multiplies:
        raise EinsliceError(
            f"negation({base.name!r}): its product is *, and -((-a) * (-b)) is "
            "-(a * b), not a * b; only semirings whose product is + (log, max) "
            "can be negated."
        )
    if base.negation_of is not None:
        raise EinsliceError(
            f"negation({base.name!r}): {base.name!r} is itself the negation of "
            f"{base.negation_of!r}; negate {base.negation_of!r} instead."
        )
    return replace(
        base,
        name=name,
        description=description,
        zero=-base.zero,
        all_reduce=all_reduce,
        negation_of=base.name,
    )


# Min-plus (tropical min): shortest paths, ``min_k d[i, k] + d[k, j]``. Run as
# max-plus of the negated operands, negated; its gradient is the indicator of
# the first minimizing entry (an argmin, as max's is an argmax).
MIN = negation(
    MAX,
    name="min",
    description="min-plus (tropical: shortest paths)",
    all_reduce="pmin",
)

SEMIRINGS: dict[str, Semiring] = {s.name: s for s in (SUM, LOG, MAX, MIN)}


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


RuleSet = TypeVar("RuleSet")  # one executor's rules of one semiring


def rules_for_every_semiring(
    executor: str,
    written: Mapping[str, RuleSet],
    negated: Callable[[RuleSet], RuleSet],
    where: str,
) -> dict[str, RuleSet]:
    """One executor's rules for every registered semiring, or an error naming the gap.

    Args:
        executor: the executor's name, for the error.
        written: its rules, by semiring name (those it writes out).
        negated: how it derives a `negation`'s rules from its base's.
        where: the module and table to add missing rules to, for the error.

    Raises:
        EinsliceError: a semiring in ``SEMIRINGS`` that ``written`` lacks and
            that is no negation of one it has; or rules for an unknown name.

    Example:
        >>> table = rules_for_every_semiring(
        ...     "demo", {"sum": "+", "log": "lse", "max": "max"}, "-{}".format, "here"
        ... )
        >>> table["max"]
        'max'
    """
    unknown = sorted(set(written) - set(SEMIRINGS))
    if unknown:
        raise EinsliceError(
            f"the {executor} has rules for {unknown}, which are not registered "
            f"semirings ({list(SEMIRINGS)}); register them in _plan/_semiring.py."
        )
    table: dict[str, RuleSet] = {}
    for ring in SEMIRINGS.values():
        if ring.name in written:
            table[ring.name] = written[ring.name]
        elif ring.negation_of is not None and ring.negation_of in written:
            table[ring.name] = negated(written[ring.negation_of])
        else:
            raise EinsliceError(
                f"the {executor} has no rules for the semiring {ring.name!r} "
                f"({ring.description}); add them to {where}, or declare "
                f"{ring.name!r} in _plan/_semiring.py as the negation() of a "
                "semiring that has them."
            )
    return table
