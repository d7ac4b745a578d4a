"""A path made into a `HostWalk`: steps to run once in numpy, nothing costed.

A one-shot value of a small network (a graphical model's log Z) is cheaper
to walk on the host than to plan: laying out every step for ``dot_general``
and costing the forward and derivative passes take longer than the walk.
`host_walk` keeps only what the walk needs, and a bound on its memory.
"""

from __future__ import annotations

from math import prod

from ._order import Path, plain_steps
from ._planner import prepare_terms
from ._semiring import semiring_named
from ._types import Equation, HostWalk

# The host walk's working precision (its scaled "log" form runs in float64).
WALK_ITEMSIZE = 8
# The product of a selective semiring ("max", and "min" as its negation)
# broadcasts a block of its contracted axis at a time; its entries are bounded
# by ``_exec/_host.MAX_BLOCK_ENTRIES`` (counted here too).
MAX_BLOCK_ENTRIES = 1 << 20


def host_walk(equation: Equation, path: Path, semiring: str, dtype: str) -> HostWalk:
    """The walk of ``path`` over ``equation``, with its FLOPs and a memory bound.

    The bound counts every node alive at once, at 8 bytes an entry, beside
    each step's copies of its two sides and a selective product's block.

    Example:
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> eq = build_equation(parse_subscripts("ij,jk->ik", 2), ((2, 3), (3, 4)))
        >>> w = host_walk(eq, ((0, 1),), "sum", "float64")
        >>> w.steps[0].result, w.flops
        ((0, 2), 48)
    """
    prepared = prepare_terms(equation)
    steps = plain_steps(prepared, equation.output, path)
    sizes = equation.sizes

    def numel(term) -> int:
        return prod(sizes[i] for i in term)

    nodes = [*prepared, *(step.result for step in steps)]
    flops, largest = 0, 0
    for step in steps:
        union = numel((*step.result, *step.contracted))
        flops += union * (2 if step.contracted else 1)
        largest = max(largest, numel(nodes[step.left]) + numel(nodes[step.right]))
    inputs = sum(numel(dict.fromkeys(t)) for t in equation.terms)
    entries = inputs + sum(numel(t) for t in nodes) + largest
    if semiring_named(semiring).selective:
        entries += MAX_BLOCK_ENTRIES
    return HostWalk(
        equation=equation,
        prepared=prepared,
        steps=steps,
        semiring=semiring,
        dtype=dtype,
        flops=flops,
        peak_bytes=WALK_ITEMSIZE * entries,
    )
