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

Where a boundary table cannot fit the limit, exact marginal MAP is out of
reach at that limit, and the error says how many query variables and bytes
that component's table needs.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable

import jax
import jax.numpy as jnp
import numpy as np

import einslice
from einslice import EinsliceError, MemoryLimitError, Profile, parse_memory_limit

from .._internal import default_memory_limit, format_bytes
from ._model import Evidence, Factor, FactorGraph
from ._network import _broadcast

__all__ = ["marginal_map"]

# A component whose variables have at most this many joint states is summed in
# numpy, its product laid out whole (float64, 8 MB): calling the core per
# component cost ~0.5 s each in planning and compiling, and Promedas_11 has
# 601 components of 2 to 6 factors.
HOST_ENTRIES = 1 << 20


def marginal_map(
    model: FactorGraph,
    query: Iterable[Hashable],
    evidence: Evidence | None = None,
    *,
    memory_limit: int | str | None = None,
    optimize: object = "auto",
    dtype: jax.typing.DTypeLike = jnp.float32,
    profile: Profile | None = None,
):
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
            (together), and the MAP over them.
        optimize: as for `log_partition`.
        dtype: as for `log_partition`.
        profile: as for `log_partition`.

    Returns:
        A `MapResult`: ``assignment`` maps each query variable to its state,
        ``log_value`` is ``ln max_q Σ_rest Π φ`` (with evidence, of the
        unnormalized joint with it; ``log_partition`` with the query clamped
        to ``assignment`` gives the same).

    Raises:
        EinsliceError: on an unknown, repeated or observed query variable, or
            when every state has probability zero.
        MemoryLimitError: when a component's sum, its table over the query
            variables, or the MAP over them does not fit ``memory_limit``;
            it says which, and the smallest limit.

    Example:
        >>> import numpy as np
        >>> from einslice.pgm import FactorGraph, marginal_map
        >>> # p(a, b): MAP is (0, 0), but b summed out, a = 1 is likelier
        >>> p = np.array([[0.3, 0.0], [0.25, 0.25]])
        >>> r = marginal_map(FactorGraph.from_factors([(0, 1)], [p]), [0])
        >>> r.assignment, round(float(np.exp(r.log_value)), 2)
        ({0: 1}, 0.5)
    """
    from ._infer import MapResult, _check_dtype, _zero_partition, map_assignment

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
    _check_tables(cond, components, limit)
    offset = 0.0
    factors: list[Factor] = []
    for f in query_only:  # an empty scope (every variable observed) is a constant
        if f.scope:
            factors.append(f)
        else:
            offset += float(f.log_table)
    for summed, boundary, members in components:
        table = _sum_out(cond, members, boundary, limit, dtype_, optimize, summed)
        if not boundary:
            offset += float(table)
            continue
        factors.append(Factor(boundary, table))
    if offset == -math.inf:
        raise _zero_partition("the marginal MAP")
    if not queried:
        return MapResult(offset, {})
    order = sorted(queried)  # the reduced model's variables, in model order
    renumber = {v: k for k, v in enumerate(order)}
    reduced = FactorGraph(
        tuple(cond.cardinalities[v] for v in order),
        tuple(
            Factor(tuple(renumber[v] for v in f.scope), f.log_table) for f in factors
        ),
        tuple(cond.variables[v] for v in order),
    )
    try:
        best = map_assignment(
            reduced,
            memory_limit=limit,
            optimize=optimize,
            dtype=dtype_,
            profile=profile,
        )
    except MemoryLimitError as e:
        raise MemoryLimitError(
            f"the MAP over the {len(order)} query variables, once the others are "
            f"summed out, does not fit: {e}",
            e.smallest_limit,
            e.flops,
        ) from None
    assignment = {name: best.assignment[name] for name in names}
    return MapResult(offset + best.log_value, assignment)


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


def _check_tables(cond: FactorGraph, components, limit: int) -> None:
    """Refuses a limit the boundary tables (float64, all kept) cannot fit."""
    sizes = [
        (math.prod(cond.cardinalities[v] for v in boundary), boundary)
        for _, boundary, _ in components
    ]
    need = 8 * sum(size for size, _ in sizes)
    if need <= limit:
        return
    size, widest = max(sizes, key=lambda s: s[0])
    raise MemoryLimitError(
        f"exact marginal MAP needs the sum over the non-query variables as "
        f"tables over the query variables they touch: {format_bytes(need)} in "
        f"all, the largest over {len(widest)} query variables ({size:.3g} "
        f"states), over the limit of {format_bytes(limit)}; raise memory_limit "
        f"to at least {format_bytes(need)}.",
        need,
    )


def _sum_out(cond, members, boundary, limit, dtype, optimize, summed) -> np.ndarray:
    """``log Σ_summed Π`` of the component's factors, a float64 table over boundary.

    Each table is shifted by its maximum first (added back after), so the
    contraction runs near zero as `log_partition`'s does.
    """
    if not members:  # a variable in no factor: Σ over its states of 1
        return np.array(math.log(cond.cardinalities[summed[0]]))
    operands: list = []
    shift = 0.0
    for i in members:
        f = cond.factors[i]
        table = f.log_table
        top = float(table.max()) if table.size else 0.0
        if top == -math.inf:
            shift = -math.inf
            top = 0.0
        shift += top
        operands += [jnp.asarray(table - top, dtype), list(f.scope)]
    scope = tuple(boundary) + tuple(summed)
    if math.prod(cond.cardinalities[v] for v in scope) <= HOST_ENTRIES:
        product = np.zeros([cond.cardinalities[v] for v in scope])
        for i in members:
            f = cond.factors[i]
            product = product + _broadcast(f.log_table, f.scope, scope)
        axes = tuple(range(len(boundary), len(scope)))
        top = np.max(product, axis=axes, keepdims=True)
        top = np.where(np.isfinite(top), top, 0.0)
        with np.errstate(divide="ignore"):
            total = np.log(np.sum(np.exp(product - top), axis=axes))
        return total + np.squeeze(top, axes)
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
