r"""Which query variables marginal MAP clamps so that its sum tables fit.

Pure Python (no numpy, no JAX): this is planning. Maximization commutes with
clamping a query variable, ``max_q f(q) = max_s max_{q \ q1} f(q1 = s, ...)``,
so where the tables the sums leave over the query variables do not fit the
memory limit, marginal MAP clamps some query variables and solves one smaller
marginal MAP per joint state of them (exact; the time grows with the number
of those sub-problems, `MAX_SUBPROBLEMS` at most).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["MAX_SUBPROBLEMS", "choose_clamped", "table_entries"]

# The most sub-problems (joint states of the clamped query variables) marginal
# MAP runs before it says the limit is out of reach. Each one re-sums the
# components that hold a clamped variable and solves the MAP of the reduced
# model: even on a 5x5 or 6x6 grid's border (4-128 sub-problems, caches warm)
# that cost 0.12-0.17 s each (2026-12-07, 2 cores at load 10), so 4096 of
# them are ~10 minutes before any real work; more are refused with the limit
# at which they would not be needed.
MAX_SUBPROBLEMS = 4096


def table_entries(
    boundaries: Sequence[Sequence[int]],
    cardinalities: Sequence[int],
    clamped: frozenset[int] = frozenset(),
) -> int:
    """The entries of every boundary table once ``clamped`` are fixed.

    Example:
        >>> table_entries([(0, 1), (1, 2)], [2, 3, 4])
        18
        >>> table_entries([(0, 1), (1, 2)], [2, 3, 4], frozenset({1}))
        6
    """
    return sum(
        math.prod(cardinalities[v] for v in b if v not in clamped) for b in boundaries
    )


def choose_clamped(
    boundaries: Sequence[Sequence[int]],
    cardinalities: Sequence[int],
    budget: int,
    most_states: int | None = None,
) -> tuple[tuple[int, ...], int]:
    """Query variables to clamp so the tables keep at most ``budget`` entries.

    Greedy: each step clamps the variable that removes the most table entries
    per doubling of the sub-problems (entries removed over ``log2`` of its
    states), until the tables fit ``budget``, or until clamping one more
    would make more than ``most_states`` sub-problems. Then a clamped variable
    that is no longer needed (the others alone fit) is released, the one with
    the most states first.

    Args:
        boundaries: each component's query variables (its table's axes).
        cardinalities: the states of every variable.
        budget: the entries the tables may keep in all.
        most_states: stop before the sub-problems (the product of the clamped
            variables' states) exceed this; None: no bound.

    Returns:
        ``(clamped, entries)``: the clamped variables (sorted) and the entries
        the tables keep with them clamped; ``entries > budget`` when
        ``most_states`` stopped the clamping first.

    Example:
        >>> # one table over four binary variables, room for four entries
        >>> choose_clamped([(0, 1, 2, 3)], [2, 2, 2, 2], 4)
        ((0, 1), 4)
        >>> # variable 1 is in both tables: clamping it halves both
        >>> choose_clamped([(0, 1), (1, 2)], [2, 2, 2], 4)
        ((1,), 4)
    """
    clamped: set[int] = set()
    states = 1
    entries = table_entries(boundaries, cardinalities)
    candidates = sorted({v for b in boundaries for v in b})
    while entries > budget:
        best = None
        for v in candidates:
            card = cardinalities[v]
            if v in clamped or card < 2:
                continue
            if most_states is not None and states * card > most_states:
                continue
            after = table_entries(boundaries, cardinalities, frozenset(clamped | {v}))
            gain = (entries - after) / math.log2(card)
            if best is None or gain > best[0]:
                best = (gain, v, after)
        if best is None:  # nothing left to clamp within most_states
            break
        _, v, entries = best
        clamped.add(v)
        states *= cardinalities[v]
    if entries <= budget:
        for v in sorted(clamped, key=lambda v: (-cardinalities[v], v)):
            rest = frozenset(clamped - {v})
            after = table_entries(boundaries, cardinalities, rest)
            if after <= budget:
                clamped.discard(v)
                entries = after
    return tuple(sorted(clamped)), entries
