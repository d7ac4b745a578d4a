"""The einsum behind a model: simplified log-tables, their terms, and an order.

Design constraints: numpy + cotengra only, no JAX (this is planning, not running).
Every simplification is exact and done in float64:

- a factor whose scope lies inside another's is added into it (unary factors
  vanish into pairwise ones); an empty-scope factor becomes a constant;
- each table is shifted by its maximum (added back to the constant), so the
  contraction runs near zero and float32 keeps log Z ~ 10³ accurate;
- tables the chosen order multiplies together anyway, before summing anything,
  are added together here (`merge`), because each table is one step of the
  contraction and the core's per-step cost (compilation above all) dwarfs the
  arithmetic on tables this small.

The order: for many tables, variable elimination orders (min-fill and min-weight,
random tie-breaks) and a short cotengra greedy hyper-search compete on an estimate
of the time they take; the winner is cached per network structure, so calling
log Z, marginals and MAP on one model searches once and reuses one compiled plan.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import cast

import cotengra
import numpy as np

from ._model import FactorGraph

__all__ = ["Network", "build_network", "choose_orders"]

# At or below this many tables the core's "auto" (dynamic programming) is optimal.
AUTO_CORE_MAX_TABLES = 12
# Tables merged (before any sum) while their union has at most this many entries.
MERGE_MAX_ENTRIES = 1024
# Neighbours merged regardless of the order while the union has at most this many.
CLUSTER_MAX_ENTRIES = 64
# Time estimate used to rank orders: FLOPs at this rate plus this much per table
# (a step of the core's "log" program costs ~0.1 s to compile on a CPU).
_FLOPS_PER_S = 1e9
_SECONDS_PER_TABLE = 0.1
# Budget of the order search, in seconds (each family gets at least one try).
_SEARCH_TIME_S = 2.0
# Orders offered to the planner, best first, in case no slicing fits the best.
ORDER_OPTIONS = 3


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


def choose_orders(network: Network) -> list[tuple[Network, list[tuple[int, ...]]]]:
    """Merges tables and finds contraction paths for ``optimize="auto"``.

    Returns:
        Up to `ORDER_OPTIONS` (merged network, explicit path in opt_einsum
        format) pairs, best first; or ``[(network, [])]`` when the core's own
        "auto" should choose.
    """
    if len(network.tables) <= AUTO_CORE_MAX_TABLES:
        return [(network, [])]
    key = (network.terms, tuple(sorted(network.sizes().items())))
    return [
        (merge(network, groups), [tuple(step) for step in path])
        for groups, path in _search(*key)[:ORDER_OPTIONS]
    ]


def cluster_groups(network: Network, max_entries: int = CLUSTER_MAX_ENTRIES):
    """Groups neighbouring tables greedily while each union stays small.

    Used when the caller brings its own optimizer: the order is unknown, so only
    merges cheap under any order are made.
    """
    return _cluster(network.terms, network.sizes(), max_entries)


@lru_cache(maxsize=32)
def _search(
    terms: tuple[tuple[int, ...], ...], sizes_key: tuple[tuple[int, int], ...]
) -> tuple[tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]], ...]:
    """The (groups, path) found in about `_SEARCH_TIME_S`, best first; cached."""
    sizes = dict(sizes_key)
    rng = random.Random(0)
    deadline = time.perf_counter() + _SEARCH_TIME_S
    candidates = []
    # Variable elimination orders, merging tables the order multiplies anyway.
    for k in range(64):
        criterion = ("fill", "weight")[k % 2]
        if k >= 2 and time.perf_counter() > deadline:
            break
        order = _elimination_order(terms, sizes, rng, criterion)
        groups = _bucket_groups(terms, sizes, order, MERGE_MAX_ENTRIES)
        merged = [_union(terms, g) for g in groups]
        options: dict = {"edge_path": order, "autocomplete": True}
        tree = cotengra.ContractionTree.from_path(merged, (), sizes, **options)
        candidates.append((_estimate(tree, len(groups)), groups, tree.get_path()))
    # A cotengra greedy hyper-search on tables clustered regardless of the order.
    groups = _cluster(terms, sizes, CLUSTER_MAX_ENTRIES)
    merged = [_union(terms, g) for g in groups]
    settings: dict = {
        "methods": ["greedy"],  # kahypar is not a dependency; greedy is the best
        "max_repeats": 32,  # of the rest on these networks
        "max_time": _SEARCH_TIME_S,
        "reconf_opts": {"subtree_size": 4},  # larger subtrees are slow in Python
        "optlib": "random",  # no optuna dependency
        "parallel": False,
        "progbar": False,
    }
    optimizer = cotengra.HyperOptimizer(**settings)
    tree = cast(cotengra.ContractionTree, optimizer.search(merged, (), sizes))
    candidates.append((_estimate(tree, len(groups)), groups, tree.get_path()))
    ranked = []
    for _, groups, path in sorted(candidates, key=lambda c: c[0]):
        option = (
            tuple(tuple(g) for g in groups),
            tuple(tuple(int(i) for i in step) for step in path),
        )
        if option not in ranked:
            ranked.append(option)
    return tuple(ranked)


def _estimate(tree: cotengra.ContractionTree, n_tables: int) -> float:
    return float(tree.contraction_cost()) / _FLOPS_PER_S + n_tables * _SECONDS_PER_TABLE


def _elimination_order(
    terms: Sequence[tuple[int, ...]],
    sizes: dict[int, int],
    rng: random.Random,
    criterion: str,
) -> list[int]:
    """A greedy elimination order (min-fill or min-weight), ties broken at random."""
    adjacent: dict[int, set[int]] = {}
    for term in terms:
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
        v = rng.choice([u for u, s in scores.items() if s == best])
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


def _bucket_groups(
    terms: Sequence[tuple[int, ...]],
    sizes: dict[int, int],
    order: Sequence[int],
    max_entries: int,
) -> list[list[int]]:
    """Groups tables by the first variable the order eliminates from them.

    Elimination multiplies everything in a bucket before summing its variable, so
    adding a bucket's tables beforehand changes no cost beyond the bucket's own.
    """
    position = {v: i for i, v in enumerate(order)}
    buckets: dict[int, list[int]] = {}
    for k, term in enumerate(terms):
        buckets.setdefault(min(term, key=position.__getitem__), []).append(k)
    groups: list[list[int]] = []
    for members in buckets.values():
        members = sorted(members, key=lambda k: -math.prod(sizes[v] for v in terms[k]))
        open_: list[tuple[set[int], list[int]]] = []
        for k in members:
            for variables, group in open_:
                union = variables | set(terms[k])
                if math.prod(sizes[v] for v in union) <= max_entries:
                    variables |= union
                    group.append(k)
                    break
            else:
                open_.append((set(terms[k]), [k]))
        groups += [group for _, group in open_]
    return groups


def _cluster(
    terms: Sequence[tuple[int, ...]], sizes: dict[int, int], max_entries: int
) -> list[list[int]]:
    """Merges neighbouring tables, smallest union first, while it stays small."""
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


def _union(terms: Sequence[tuple[int, ...]], group: Sequence[int]) -> tuple[int, ...]:
    out: tuple[int, ...] = ()
    for k in group:
        out += tuple(v for v in terms[k] if v not in out)
    return out


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
