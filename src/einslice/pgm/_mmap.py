"""Marginal MAP: ``max_q Σ_rest Π φ``, exactly, sum before max.

Every summed (non-query) variable must be eliminated before any query
variable it interacts with is maximized. The summed variables fall into
connected components (linked through the factors that hold them); summing a
component out of the product of its factors leaves one table over its
boundary, the query variables those factors hold, and no order that sums
first can leave less: the component's boundary becomes one clique. So:

1. each component is one ``einslice.log_einsum`` of its factors to its
   boundary (the core's search, slicing and memory limit; a component that
   touches no query variable is a constant);
2. the query-only factors and the boundary tables form a model over the
   query variables, whose MAP (`map_assignment`: the ``"max"`` semiring, its
   state decoded and checked) is the marginal MAP.

Where the boundary tables do not fit the limit together, some query
variables are clamped (`_clamp.choose_clamped`: the fewest clamped states
that bring the tables under the limit): the max commutes with clamping, so
one marginal MAP per joint state of them, each with smaller tables, and the
best of them is the answer (exact; components that hold no clamped variable
are summed once). More than `_clamp.MAX_SUBPROBLEMS` such states is out of
reach, and the error says the limit that would need no more.

Before any stage is planned, quick bounds on its width (`_width`, a second
or two) decide whether planning it can pay: where a greedy elimination
order's largest step, for a component's sum or for the max over the query
variables, has more than 2^`REACH_BITS` entries, no tree search is run and
the error gives the bounds (the treewidth's lower bound, the order's step),
as MAR states the smallest limit. On Promedas_11 a single trial of the
core's search took minutes on such a network, and the best tree cotengra's
kahypar found in 200 s still had a step of 2^83 entries.
``optimize=einslice.TreeSearch(...)`` searches anyway.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import einslice
from einslice import EinsliceError, MemoryLimitError, Profile, parse_memory_limit

from .._internal import default_memory_limit, format_bytes
from ._clamp import MAX_SUBPROBLEMS, choose_clamped, table_entries
from ._infer import MapResult
from ._model import Evidence, Factor, FactorGraph
from ._network import _broadcast
from ._width import elimination_bits, interaction_graph, minor_min_width

__all__ = ["MarginalMapResult", "marginal_map"]

# A component whose variables have at most this many joint states is summed in
# numpy, its product laid out whole (float64, 8 MB): calling the core per
# component cost ~0.5 s each in planning and compiling, and Promedas_11 has
# 601 components of 2 to 6 factors.
HOST_ENTRIES = 1 << 20
# A stage is refused unplanned where a greedy elimination order's largest
# step has more than 2^REACH_BITS entries. Measured on the UAI 2014 MMAP
# Promedas networks' reduced models (2026-12-07, 1 GB, load ~9 on 2 cores):
# the core's search solved every one it was given, up to 2^55 (Promedas_67,
# 2^55: 186 s; Promedas_46, 2^51: 321 s; Promedas_60, 2^37: 8 s), as it
# finds far better trees than the greedy order there (Promedas_60: kahypar's
# has a step of 2^29); far beyond, one trial of the search took minutes and
# its best tree stayed out of any device's reach (Promedas_11: order 2^169,
# kahypar's tree 2^83 after 200 s). Orders of 2^57 to 2^100 were not tried.
REACH_BITS = 56


@dataclass(frozen=True, slots=True)
class MarginalMapResult(MapResult):
    """The result of `marginal_map`: a `MapResult` and the clamping it took.

    Attributes:
        log_value: ``ln max_q Σ_rest Π φ``.
        assignment: maps each query variable to its state.
        clamped: the query variables clamped to fit the memory limit (empty
            when the tables fit): one sub-problem was solved per joint state
            of them (``subproblems``).
        subproblems: how many (1 when nothing was clamped).
    """

    clamped: tuple[Hashable, ...] = ()
    subproblems: int = 1


def marginal_map(
    model: FactorGraph,
    query: Iterable[Hashable],
    evidence: Evidence | None = None,
    *,
    memory_limit: int | str | None = None,
    optimize: object = "auto",
    dtype: jax.typing.DTypeLike = jnp.float32,
    profile: Profile | None = None,
) -> MarginalMapResult:
    """The most probable state of the query variables, the others summed out.

    ``max_q Σ_rest Π_f φ_f(x)`` (given the evidence): the sum over every
    non-query variable is taken before the max (see the module docstring).

    Args:
        model: the graphical model.
        query: the names of the query variables (positions, for UAI files).
        evidence: maps variable names to observed states; a query variable
            may not be observed.
        memory_limit: bytes or a string like ``"256MB"``; bounds each
            component's sum, the tables it leaves over the query variables
            (together; query variables are clamped until they fit), and the
            MAP over them.
        optimize: as for `log_partition`; anything but ``"auto"`` also skips
            the check that the max stage is within reach (the search runs).
        dtype: as for `log_partition`.
        profile: as for `log_partition`.

    Returns:
        A `MarginalMapResult`: ``assignment`` maps each query variable to its
        state, ``log_value`` is ``ln max_q Σ_rest Π φ`` (with evidence, of the
        unnormalized joint with it; ``log_partition`` with the query clamped
        to ``assignment`` gives the same), ``clamped`` names the query
        variables clamped to fit the limit.

    Raises:
        EinsliceError: on an unknown, repeated or observed query variable,
            when every state has probability zero, or when the max over the
            query variables is out of reach (its width bounds, see the module
            docstring).
        MemoryLimitError: when a component's sum or the MAP over the query
            variables does not fit ``memory_limit``, or the tables fit it only
            with more than `MAX_SUBPROBLEMS` clamped states; it says which,
            and the smallest limit.

    Example:
        >>> import numpy as np
        >>> from einslice.pgm import FactorGraph, marginal_map
        >>> # p(a, b): MAP is (0, 0), but b summed out, a = 1 is likelier
        >>> p = np.array([[0.3, 0.0], [0.25, 0.25]])
        >>> r = marginal_map(FactorGraph.from_factors([(0, 1)], [p]), [0])
        >>> r.assignment, round(float(np.exp(r.log_value)), 2), r.clamped
        ({0: 1}, 0.5, ())
    """
    from ._infer import _check_dtype, _zero_partition

    dtype_ = _check_dtype(dtype)
    limit = (
        default_memory_limit()
        if memory_limit is None
        else parse_memory_limit(memory_limit)
    )
    names = _query(model, query, evidence)
    cond = model.condition(evidence)
    position = {name: i for i, name in enumerate(cond.variables)}
    queried = {position[name] for name in names}
    components, query_only = _components(cond, queried)
    clamped = _clamped(cond, components, limit)
    if optimize == "auto":
        _check_reach(cond, components, query_only, queried, clamped)
    solve = _Subproblem(
        cond, queried, components, query_only, limit, optimize, dtype_, profile
    )
    best: tuple[float, dict[int, int]] | None = None
    states = [range(cond.cardinalities[v]) for v in clamped]
    for joint in itertools.product(*states):
        value, assignment = solve(dict(zip(clamped, joint, strict=True)))
        if value > -math.inf and (best is None or value > best[0]):
            best = value, assignment
    if best is None:
        raise _zero_partition("the marginal MAP")
    by_position = best[1]
    return MarginalMapResult(
        best[0],
        {name: by_position[position[name]] for name in names},
        tuple(cond.variables[v] for v in clamped),
        math.prod(len(s) for s in states),
    )


def _query(model: FactorGraph, query: Iterable[Hashable], evidence) -> list:
    """The query's names, checked: in the model, once each, not observed."""
    names = list(query)
    known = set(model.variables)
    unknown = [q for q in names if q not in known]
    if unknown:
        raise EinsliceError(
            f"query names {unknown[:5]!r}, not variables of the model (it has "
            f"{model.num_variables}, named e.g. {list(model.variables[:5])!r})."
        )
    if len(set(names)) != len(names):
        repeated = sorted({q for q in names if names.count(q) > 1}, key=str)
        raise EinsliceError(
            f"query lists {repeated[:5]!r} more than once; list each variable once."
        )
    observed = [q for q in names if q in (evidence or {})]
    if observed:
        raise EinsliceError(
            f"query variables {observed[:5]!r} are also observed; a query "
            "variable's state is what marginal MAP finds, so leave it out of "
            "the evidence (or out of the query)."
        )
    return names


def _components(cond: FactorGraph, queried: set[int]):
    """The summed variables' components: (summed, boundary, factor indices).

    Returns ``(components, query_only)``: each component's summed variables,
    its boundary (the query variables its factors hold, sorted) and its
    factors; and the factors with no summed variable. A summed variable in
    no factor is a component of its own (a factor of ones over it).
    """
    parent = list(range(cond.num_variables))

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for f in cond.factors:
        summed = [v for v in f.scope if v not in queried]
        for v in summed[1:]:
            parent[find(v)] = find(summed[0])
    members: dict[int, list[int]] = {}
    query_only: list[Factor] = []
    for i, f in enumerate(cond.factors):
        summed = [v for v in f.scope if v not in queried]
        if summed:
            members.setdefault(find(summed[0]), []).append(i)
        else:
            query_only.append(f)
    held = {v for f in cond.factors for v in f.scope}
    components = []
    for factors in members.values():
        scope = {v for i in factors for v in cond.factors[i].scope}
        summed = sorted(v for v in scope if v not in queried)
        boundary = tuple(sorted(v for v in scope if v in queried))
        components.append((summed, boundary, factors))
    for v in range(cond.num_variables):
        if v not in held and v not in queried:  # Σ over its states of 1
            components.append(([v], (), []))
    return components, query_only


def _clamped(cond: FactorGraph, components, limit: int) -> tuple[int, ...]:
    """The query variables to clamp so that the boundary tables fit the limit.

    The tables are kept in float64, all at once (the MAP over them needs
    them together). Raises MemoryLimitError when more than `MAX_SUBPROBLEMS`
    clamped states would be needed, with the limit at which that many do.
    """
    cards = cond.cardinalities
    boundaries = [b for _, b, _ in components]
    need = 8 * table_entries(boundaries, cards)
    if need <= limit:
        return ()
    budget = limit // 8
    clamped, entries = choose_clamped(boundaries, cards, budget, MAX_SUBPROBLEMS)
    if entries <= budget:
        return clamped
    widest = max(boundaries, key=lambda b: math.prod(cards[v] for v in b))
    size = math.prod(cards[v] for v in widest)
    needed, _ = choose_clamped(boundaries, cards, budget)
    states = math.prod(cards[v] for v in needed)
    raise MemoryLimitError(
        f"exact marginal MAP needs the sums over the non-query variables as "
        f"tables over the query variables they touch: {format_bytes(need)} in "
        f"all, the largest over {len(widest)} query variables ({size:.3g} "
        f"states). Within the limit of {format_bytes(limit)} that takes "
        f"clamping {len(needed)} query variables ({states:.3g} sub-problems, "
        f"one per joint state), more than the {MAX_SUBPROBLEMS} marginal MAP "
        f"runs; raise memory_limit to at least {format_bytes(8 * entries)} "
        f"(then at most {MAX_SUBPROBLEMS} sub-problems).",
        8 * entries,
    )


def _check_reach(cond, components, query_only, queried, clamped) -> None:
    """Refuses, unplanned, a stage whose greedy elimination order is beyond reach.

    Each component's sum (its summed variables eliminated, the query
    variables it touches kept), then the max over the query variables.
    """
    fixed = set(clamped)
    cards = cond.cardinalities
    for summed, boundary, members in components:
        graph = interaction_graph(
            tuple(v for v in cond.factors[i].scope if v not in fixed) for i in members
        )
        upper = elimination_bits(graph, cards, summed)
        if upper > REACH_BITS:
            kept = math.prod(cards[v] for v in boundary if v not in fixed)
            raise EinsliceError(
                f"exact marginal MAP is out of reach here: summing out a "
                f"component of {len(summed)} non-query variables onto the query "
                f"variables it touches (a table of {kept:.3g} entries) "
                + _bounds(graph, cards, upper)
            )
    scopes = [f.scope for f in query_only] + [b for _, b, _ in components]
    graph = interaction_graph(
        [tuple(v for v in s if v not in fixed) for s in scopes]
        + [(v,) for v in queried if v not in fixed]
    )
    upper = elimination_bits(graph, cards)
    if upper > REACH_BITS:
        raise EinsliceError(
            f"exact marginal MAP is out of reach here: the max over the "
            f"{len(graph)} query variables, once the others are summed out, "
            + _bounds(graph, cards, upper)
        )


def _bounds(graph, cards, upper: float) -> str:
    """The rest of `_check_reach`'s message: the bounds, and what to do."""
    lower = minor_min_width(graph)
    least = min((cards[v] for v in graph), default=2)
    return (
        f"has treewidth at least {lower} (minor-min-width), so some step of "
        f"any exact contraction spans at least {lower + 1} variables (>= "
        f"{least}^{lower + 1} entries), and the greedy elimination order "
        f"found has a step of 2^{upper:.0f} entries, beyond the 2^{REACH_BITS} "
        f"a search could bring within reach (hours). Pass "
        f"optimize=einslice.TreeSearch(seconds=...) to search for a better "
        f"tree anyway (on such networks one trial can take minutes)."
    )


class _Subproblem:
    """One marginal MAP with some query variables fixed: ``(value, states)``.

    ``states`` maps every query variable's position to its state (the fixed
    ones included); the value is ``-inf`` when every state is impossible.
    Components that hold no fixed variable are summed once, on first use.
    """

    def __init__(
        self, cond, queried, components, query_only, limit, optimize, dtype, profile
    ):
        self.cond, self.queried = cond, queried
        self.components, self.query_only = components, query_only
        self.limit, self.optimize = limit, optimize
        self.dtype, self.profile = dtype, profile
        self.kept: dict[int, np.ndarray] = {}

    def __call__(self, fixed: dict[int, int]) -> tuple[float, dict[int, int]]:
        from ._infer import _decode, _prepare

        cond = self.cond
        offset = 0.0
        factors: list[Factor] = []
        for f in self.query_only:  # an empty scope is a constant
            scope, table = _fix(f.scope, f.log_table, fixed)
            if scope:
                factors.append(Factor(scope, table))
            else:
                offset += float(table)
        for k, (summed, boundary, members) in enumerate(self.components):
            args = (cond, members, boundary, self.limit, self.dtype, self.optimize)
            if any(v in fixed for v in boundary):
                table = _sum_out(*args, summed, fixed)
            else:
                if k not in self.kept:
                    self.kept[k] = _sum_out(*args, summed, {})
                table = self.kept[k]
            scope = tuple(v for v in boundary if v not in fixed)
            if scope:
                factors.append(Factor(scope, table))
            else:
                offset += float(table)
        states = dict(fixed)
        if offset == -math.inf:
            return offset, states
        order = sorted(v for v in self.queried if v not in fixed)
        if not order:
            return offset, states
        renumber = {v: k for k, v in enumerate(order)}
        reduced = FactorGraph(
            tuple(cond.cardinalities[v] for v in order),
            tuple(
                Factor(tuple(renumber[v] for v in f.scope), f.log_table)
                for f in factors
            ),
        )
        try:
            prepared = _prepare(
                reduced,
                None,
                "max",
                self.limit,
                self.optimize,
                self.dtype,
                self.profile,
            )
        except MemoryLimitError as e:
            raise MemoryLimitError(
                f"the MAP over the {len(order)} query variables, once the others "
                f"are summed out, does not fit: {e}",
                e.smallest_limit,
                e.flops,
            ) from None
        network = prepared.network
        if network.offset == -math.inf:
            return -math.inf, states
        value, x = (network.offset, []) if prepared.trivial else _decode(prepared)
        states.update(zip(order, x, strict=True))
        return offset + value, states


def _fix(scope, table: np.ndarray, fixed: dict[int, int]):
    """``table`` over ``scope`` with the ``fixed`` variables at their states."""
    if not any(v in fixed for v in scope):
        return tuple(scope), table
    index = tuple(fixed[v] if v in fixed else slice(None) for v in scope)
    return tuple(v for v in scope if v not in fixed), table[index]


def _sum_out(
    cond, members, boundary, limit, dtype, optimize, summed, fixed
) -> np.ndarray:
    """``log Σ_summed Π`` of the component's factors, a float64 table.

    Over ``boundary`` less the ``fixed`` query variables (whose states slice
    the factors first). Each table is shifted by its maximum first (added
    back after), so the contraction runs near zero as `log_partition`'s does.
    """
    if not members:  # a variable in no factor: Σ over its states of 1
        return np.array(math.log(cond.cardinalities[summed[0]]))
    boundary = tuple(v for v in boundary if v not in fixed)
    factors = [
        _fix(cond.factors[i].scope, cond.factors[i].log_table, fixed) for i in members
    ]
    scope = boundary + tuple(summed)
    if math.prod(cond.cardinalities[v] for v in scope) <= HOST_ENTRIES:
        product = np.zeros([cond.cardinalities[v] for v in scope])
        for f_scope, table in factors:
            product = product + _broadcast(table, f_scope, scope)
        axes = tuple(range(len(boundary), len(scope)))
        top = np.max(product, axis=axes, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)
        with np.errstate(divide="ignore"):
            total = np.log(np.sum(np.exp(product - top), axis=axes))
        return total + np.squeeze(top, axes)
    operands: list = []
    shift = 0.0
    for f_scope, table in factors:
        top = float(table.max()) if table.size else 0.0
        if top == -math.inf:
            shift = -math.inf
            top = 0.0
        shift += top
        operands += [jnp.asarray(table - top, dtype), list(f_scope)]
    try:
        out = einslice.log_einsum(
            *operands,
            list(boundary),
            memory_limit=limit,
            optimize=optimize,
        )
    except MemoryLimitError as e:
        raise MemoryLimitError(
            f"summing out a component of {len(summed)} non-query variables onto "
            f"{len(boundary)} query variables does not fit: {e}",
            e.smallest_limit,
            e.flops,
        ) from None
    return np.asarray(out, np.float64) + shift
