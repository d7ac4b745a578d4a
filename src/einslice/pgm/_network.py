"""The einsum behind a model: simplified log-tables and their terms.

Design constraints: numpy only, no JAX (this is planning, not running). Every
simplification is exact and done in float64:

- a factor whose scope lies inside another's is added into it (unary factors
  vanish into pairwise ones); an empty-scope factor becomes a constant;
- each table is shifted by its maximum (added back to the constant), so the
  contraction runs near zero and float32 keeps log Z ~ 10³ accurate;
- tables the contraction tree multiplies together before summing anything are
  added together here (`tree_groups`, `merge`), because each table is one step
  of the contraction and the core's per-step cost (compilation above all)
  dwarfs the arithmetic on tables this small.

The tree itself is not searched here: it is the core's search
(``einslice/_plan/_search.py``: cotengra's hyper-optimizer with slicing inside
the search), seeded, so a model gets the same order on any machine, and cached,
so log Z, marginals and MAP on one model search once.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._model import FactorGraph

__all__ = ["Network", "build_network", "cluster_groups", "merge", "tree_groups"]

# Tables a tree multiplies before any sum are merged up to this many entries.
MERGE_MAX_ENTRIES = 1024
# Neighbours merged regardless of the order while the union has at most this
# many (for a caller's own path optimizer, whose tree is not known beforehand).
CLUSTER_MAX_ENTRIES = 64


@dataclass(frozen=True, slots=True, eq=False)
class Network:
    """The simplified einsum of a model's log-tables to a scalar.

    Attributes:
        model: the (conditioned) model it came from.
        tables: float64 log-tables, each shifted so its maximum is 0.
        terms: the variables (positions in ``model``) of each table's axes.
        offset: the constant: shifts plus empty-scope factors (``-inf`` if some
            table is all ``-inf``, i.e. Z = 0).
        host: for each factor of ``model``, the table it was added into (-1: it
            became part of ``offset``).
        cover: for each variable, the smallest table containing it.
    """

    model: FactorGraph
    tables: tuple[np.ndarray, ...]
    terms: tuple[tuple[int, ...], ...]
    offset: float
    host: tuple[int, ...]
    cover: tuple[int, ...]

    def sizes(self) -> dict[int, int]:
        """The cardinality of every variable that appears in a term."""
        cards = self.model.cardinalities
        return {v: cards[v] for term in self.terms for v in term}


def build_network(model: FactorGraph) -> Network:
    """Absorbs nested scopes, folds constants and shifts tables (no merging yet)."""
    order = sorted(
        range(len(model.factors)), key=lambda i: -len(model.factors[i].scope)
    )
    tables: list[np.ndarray] = []
    terms: list[tuple[int, ...]] = []
    by_variable: dict[int, list[int]] = {}
    host = [-1] * len(model.factors)
    offset = 0.0
    for i in order:
        factor = model.factors[i]
        scope = factor.scope
        if not scope:
            offset += float(factor.log_table)
            continue
        h = next(
            (h for h in by_variable.get(scope[0], ()) if set(scope) <= set(terms[h])),
            None,
        )
        if h is None:
            h = len(tables)
            tables.append(np.array(factor.log_table, dtype=np.float64))
            terms.append(scope)
            for v in scope:
                by_variable.setdefault(v, []).append(h)
        else:
            tables[h] = tables[h] + _broadcast(factor.log_table, scope, terms[h])
        host[i] = h
    for v, card in enumerate(model.cardinalities):
        if v not in by_variable:  # in no factor: a uniform table keeps it in log Z
            by_variable[v] = [len(tables)]
            tables.append(np.zeros(card))
            terms.append((v,))
    shifted = []
    for table in tables:
        top = float(table.max())
        if top == -math.inf:  # a factor that forbids everything: Z = 0
            offset, top = -math.inf, 0.0
        shifted.append(table - top)
        offset += top
    return _with_cover(model, shifted, terms, offset, host)


def merge(network: Network, groups: Sequence[Sequence[int]]) -> Network:
    """Adds each group of tables into one table over the union of their terms.

    Args:
        network: the network.
        groups: a partition of the table indices; each group becomes one table.

    Returns:
        The network with one table per group (exact: log-tables are added).
    """
    if len(groups) == len(network.tables):
        return network
    cards = network.model.cardinalities
    tables, terms, new_index = [], [], [0] * len(network.tables)
    for g, group in enumerate(groups):
        term: tuple[int, ...] = ()
        for k in group:
            term += tuple(v for v in network.terms[k] if v not in term)
        table = np.zeros([cards[v] for v in term])
        for k in group:
            table = table + _broadcast(network.tables[k], network.terms[k], term)
            new_index[k] = g
        tables.append(table)
        terms.append(term)
    host = [new_index[h] if h >= 0 else -1 for h in network.host]
    return _with_cover(network.model, tables, terms, network.offset, host)


def tree_groups(
    terms: Sequence[tuple[int, ...]],
    sizes: dict[int, int],
    path: Sequence[tuple[int, ...]],
    max_entries: int = MERGE_MAX_ENTRIES,
) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Groups of tables a path multiplies before summing anything, and the rest.

    A step whose operands are products of tables only, which sums no variable
    and whose result has at most ``max_entries`` entries, can be done once in
    numpy (log-tables are added): the groups are the largest such products.

    Args:
        terms: each table's variables.
        sizes: each variable's cardinality.
        path: a pairwise path over the tables (opt_einsum format).
        max_entries: the largest merged table.

    Returns:
        (groups, path): a partition of the tables (the ``merge`` argument) and
        the same path over the merged tables, its merged-away steps dropped.

    Example:
        >>> terms = [(0, 1), (0, 2), (0, 3), (1, 2, 3)]  # 0 is in three tables
        >>> tree_groups(terms, dict.fromkeys(range(4), 2), [(0, 1), (0, 2), (0, 1)])
        ([[2], [3], [0, 1]], [(0, 2), (0, 1)])
    """
    groups_of, products, steps = _find_products(terms, sizes, path, max_entries)
    return _drop_products(groups_of, products, steps)


def _find_products(
    terms: Sequence[tuple[int, ...]],
    sizes: dict[int, int],
    path: Sequence[tuple[int, ...]],
    max_entries: int,
) -> tuple[dict[int, list[int]], set[int], list[tuple[int, int, int]]]:
    """Walk the path, marking the steps that only multiply small tables.

    Returns:
        (groups_of, products, steps): the tables under each maximal product
        node (or a lone table), the nodes the marked steps make, and every
        step as (left node, right node, result node).
    """
    n = len(terms)
    alive = list(range(n))
    labels: dict[int, set[int]] = {k: set(t) for k, t in enumerate(terms)}
    groups_of: dict[int, list[int]] = {k: [k] for k in range(n)}  # maximal so far
    products: set[int] = set()  # nodes made by a merged-away step
    holders: dict[int, int] = {}  # variable -> how many alive nodes hold it
    for term in terms:
        for v in term:
            holders[v] = holders.get(v, 0) + 1
    steps: list[tuple[int, int, int]] = []
    for entry in path:
        a, b = (alive[p] for p in entry)
        node = n + len(steps)
        union = labels[a] | labels[b]
        for v in labels[a] & labels[b]:
            holders[v] -= 1
        summed = {v for v in union if holders[v] == 1}  # the output is empty
        labels[node] = union - summed
        if (
            a in groups_of
            and b in groups_of
            and not summed
            and math.prod(sizes[v] for v in union) <= max_entries
        ):
            groups_of[node] = groups_of.pop(a) + groups_of.pop(b)
            products.add(node)
        steps.append((a, b, node))
        alive.remove(a)
        alive.remove(b)
        alive.append(node)
    return groups_of, products, steps


def _drop_products(
    groups_of: dict[int, list[int]],
    products: set[int],
    steps: list[tuple[int, int, int]],
) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """The groups, and the path renumbered over them without the marked steps."""
    ids = {node: g for g, node in enumerate(sorted(groups_of))}
    groups = [sorted(groups_of[node]) for node in sorted(groups_of)]
    current = list(range(len(groups)))
    merged_path: list[tuple[int, int]] = []
    for a, b, node in steps:
        if node in products:
            continue  # done by merging the tables
        i, j = current.index(ids[a]), current.index(ids[b])
        merged_path.append((min(i, j), max(i, j)))
        ids[node] = len(groups) + len(merged_path) - 1
        current = [c for c in current if c not in (ids[a], ids[b])] + [ids[node]]
    return groups, merged_path


def cluster_groups(network: Network, max_entries: int = CLUSTER_MAX_ENTRIES):
    """Groups neighbouring tables greedily while each union stays small.

    The order is the planner's, unknown here, so only merges cheap under any
    order are made.
    """
    return _cluster(network.terms, network.sizes(), max_entries)


def _cluster(
    terms: Sequence[tuple[int, ...]], sizes: dict[int, int], max_entries: int
) -> list[list[int]]:
    """Merges neighbouring tables, smallest union first, while it stays small."""
    if max_entries < 1:  # no union of two tables is that small: nothing to merge
        return [[k] for k in range(len(terms))]
    members: dict[int, list[int]] = {k: [k] for k in range(len(terms))}
    scope: dict[int, tuple[int, ...]] = dict(enumerate(terms))
    by_variable: dict[int, set[int]] = {}
    for k, term in enumerate(terms):
        for v in term:
            by_variable.setdefault(v, set()).add(k)

    def union(a: int, b: int) -> tuple[int, ...]:
        return scope[a] + tuple(v for v in scope[b] if v not in scope[a])

    heap: list[tuple[int, int, int]] = []

    def push(a: int) -> None:
        for b in {b for v in scope[a] for b in by_variable[v]} - {a}:
            size = math.prod(sizes[v] for v in union(a, b))
            if size <= max_entries:
                heapq.heappush(heap, (size, min(a, b), max(a, b)))

    for a in range(len(terms)):
        push(a)
    next_id = len(terms)
    while heap:
        _, a, b = heapq.heappop(heap)
        if a not in scope or b not in scope:
            continue
        k, next_id = next_id, next_id + 1
        scope[k] = union(a, b)
        members[k] = members.pop(a) + members.pop(b)
        for v in scope[a] + scope[b]:
            by_variable[v] -= {a, b}
        for v in scope[k]:
            by_variable[v].add(k)
        del scope[a], scope[b]
        push(k)
    return list(members.values())


def _with_cover(model, tables, terms, offset, host) -> Network:
    by_variable: dict[int, list[int]] = {}
    for h, term in enumerate(terms):
        for v in term:
            by_variable.setdefault(v, []).append(h)
    cover = tuple(
        min(by_variable[v], key=lambda h: tables[h].size)
        for v in range(model.num_variables)
    )
    return Network(model, tuple(tables), tuple(terms), offset, tuple(host), cover)


def _broadcast(table: np.ndarray, scope: tuple[int, ...], target: tuple[int, ...]):
    """``table`` over ``scope``, laid out to broadcast against a table over target."""
    inner = [v for v in target if v in scope]
    moved = np.transpose(table, [scope.index(v) for v in inner])
    return moved.reshape(
        [moved.shape[inner.index(v)] if v in scope else 1 for v in target]
    )
