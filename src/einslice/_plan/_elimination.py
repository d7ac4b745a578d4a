"""Variable-elimination orders as a cotengra hyper-search method.

Graphical models are hypergraphs (a variable in many tables), where classic
elimination heuristics (min-fill, min-weight, random tie-breaks) often beat
graph partitioning: on the UAI instances they found orders kahypar and greedy
needed many more trials for. Registered with cotengra as
``"einslice-elimination"``, so ``_search.py``'s hyper-optimizer picks between
it, kahypar and greedy per network; its tie-breaks draw from Python's
``random`` (seeded by the search).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

METHOD = "einslice-elimination"


def elimination_order(
    inputs: Sequence[Sequence[int]],
    sizes: dict[int, int],
    criterion: str,
    rng: random.Random | None = None,
) -> list[int]:
    """A greedy elimination order (min-fill or min-weight), ties broken at random.

    Example:
        >>> order = elimination_order([(0, 1), (1, 2), (2, 3)],
        ...     dict.fromkeys(range(4), 2), "fill", random.Random(0))
        >>> order[0] in (0, 3)  # a chain's ends add no fill-in
        True
    """
    rng = rng or random.Random(0)
    adjacent: dict[int, set[int]] = {}
    for term in inputs:
        for v in term:
            adjacent.setdefault(v, set()).update(u for u in term if u != v)

    def score(v: int) -> float:
        near = adjacent[v]
        if criterion == "weight":
            return math.prod(sizes[u] for u in near)
        listed = list(near)
        return sum(
            1
            for i, a in enumerate(listed)
            for b in listed[i + 1 :]
            if b not in adjacent[a]
        )

    scores = {v: score(v) for v in adjacent}
    order = []
    while scores:
        best = min(scores.values())
        v = rng.choice(sorted(u for u, s in scores.items() if s == best))
        near = adjacent.pop(v)
        del scores[v]
        for u in near:
            adjacent[u].discard(v)
            adjacent[u].update(w for w in near if w != u)
        touched = set(near)
        for u in near:
            touched |= adjacent[u]
        for u in touched:  # only these scores can have changed
            scores[u] = score(u)
        order.append(v)
    return order


def trial_elimination(inputs, output, size_dict, criterion="fill"):
    """Cotengra trial function: the tree contracting variables in that order."""
    from cotengra import AutoOptimizer, ContractionTree

    rng = random.Random(random.getrandbits(32))  # seeded by the search
    kept = set(output)
    order = elimination_order(inputs, size_dict, criterion, rng)
    order = [v for v in order if v not in kept]
    # Eliminating a variable shared by many tables merges them all at once;
    # cotengra orders such a merge with its "auto" preset, whose hyper-search
    # runs in a process pool (a fork next to JAX's threads can deadlock), so
    # the same optimizer is given here without the pool. A fresh one per trial:
    # its cache would otherwise carry one search's random choices into another.
    merge = AutoOptimizer(parallel=False)  # pyright: ignore[reportArgumentType]
    # cotengra is unannotated: pyright takes autocomplete's type (str) from its
    # default "auto", though it accepts a bool.
    return ContractionTree.from_path(
        inputs,
        output,
        size_dict,
        edge_path=order,
        optimize=merge,  # pyright: ignore[reportArgumentType]
        autocomplete=True,  # pyright: ignore[reportArgumentType]
    )


def register() -> None:
    """Make ``METHOD`` available to cotengra's ``HyperOptimizer`` (idempotent)."""
    from cotengra.hyperoptimizers.hyper import register_hyper_function

    space = {"criterion": {"type": "STRING", "options": ["fill", "weight"]}}
    register_hyper_function(METHOD, trial_elimination, space)
