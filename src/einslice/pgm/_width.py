"""Quick bounds on the largest step of any exact contraction of a network.

Pure Python (no numpy, no JAX), a second or two on thousands of variables:
marginal MAP checks with them, before planning, whether the max over the
query variables is within reach (`_mmap`). A contraction tree is a tree
decomposition of the network's interaction graph (variables joined when a
table holds both), so

- every exact contraction has a step over at least ``treewidth + 1``
  variables, and `minor_min_width` bounds the treewidth from below (MMD+,
  Gogate & Dechter 2004: repeatedly record the least degree and contract
  that vertex into its neighbour of least degree);
- an elimination order is a contraction tree: `elimination_bits` follows the
  one that eliminates, each time, the variable whose clique (it and its
  neighbours) has the fewest entries, and returns that clique's size; for
  a sum that keeps some variables (marginal MAP's components), only the
  summed ones are eliminated.

``benchmarks/treewidth_bounds.py`` reports the same bounds for whole models.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Iterable, Sequence

__all__ = ["elimination_bits", "interaction_graph", "minor_min_width"]


def interaction_graph(scopes: Iterable[Sequence[int]]) -> dict[int, set[int]]:
    """Each variable's neighbours: the variables it shares a table with.

    Example:
        >>> interaction_graph([(0, 1), (1, 2), (3,)])
        {0: {1}, 1: {0, 2}, 2: {1}, 3: set()}
    """
    graph: dict[int, set[int]] = {}
    for scope in scopes:
        for v in scope:
            graph.setdefault(v, set()).update(u for u in scope if u != v)
    return dict(sorted(graph.items()))


def minor_min_width(graph: dict[int, set[int]]) -> int:
    """A lower bound on the treewidth (MMD+, "min-d").

    Treewidth never grows when an edge is contracted and is at least the
    least degree, so the largest least degree met along the contractions
    bounds it from below.

    Example:
        >>> ring = {i: {(i - 1) % 6, (i + 1) % 6} for i in range(6)}
        >>> minor_min_width(ring)  # a cycle has treewidth 2
        2
    """
    graph = {v: set(n) for v, n in graph.items()}
    heap = [(len(n), v) for v, n in graph.items()]
    heapq.heapify(heap)
    bound = 0
    while heap:
        degree, v = heapq.heappop(heap)
        if v not in graph or degree != len(graph[v]):
            continue  # a stale entry
        bound = max(bound, degree)
        neighbours = graph.pop(v)
        if not neighbours:
            continue
        u = min(neighbours, key=lambda w: (len(graph[w]), w))
        graph[u].discard(v)
        for w in neighbours:
            if w != u:
                graph[w].discard(v)
                graph[w].add(u)
                graph[u].add(w)
        for w in neighbours:
            heapq.heappush(heap, (len(graph[w]), w))
    return bound


def elimination_bits(
    graph: dict[int, set[int]],
    cardinalities: Sequence[int],
    eliminated: Collection[int] | None = None,
) -> float:
    """log2 of the entries of the largest clique a greedy elimination order forms.

    The order eliminates, each time, the variable whose clique (itself and
    its neighbours) has the fewest entries; a contraction along it has a
    step over that many entries, so the best contraction needs no more.
    ``eliminated``: only these (a sum that keeps the others, whose cliques
    then hold every kept variable they reach); None: all.

    Example:
        >>> chain = {0: {1}, 1: {0, 2}, 2: {1}}
        >>> elimination_bits(chain, [2, 4, 2])  # the clique {0, 1}: 8 entries
        3.0
        >>> elimination_bits(chain, [2, 4, 2], [1])  # keeping 0 and 2: {0, 1, 2}
        4.0
    """
    bits = {v: math.log2(cardinalities[v]) for v in graph}
    graph = {v: set(n) for v, n in graph.items()}
    allowed = set(graph) if eliminated is None else set(eliminated) & set(graph)

    def clique(v: int) -> float:
        return bits[v] + sum(bits[u] for u in graph[v])

    current = {v: clique(v) for v in allowed}  # each variable's latest key
    heap = [(size, v) for v, size in current.items()]
    heapq.heapify(heap)
    largest = 0.0
    while heap:
        size, v = heapq.heappop(heap)
        if v not in graph or size != current[v]:
            continue  # a stale entry
        largest = max(largest, size)
        neighbours = graph.pop(v)
        for w in neighbours:
            graph[w].discard(v)
            graph[w] |= neighbours - {w}
        for w in neighbours & allowed:
            current[w] = clique(w)
            heapq.heappush(heap, (current[w], w))
    return largest
