"""A small typed discrete graphical model: variables with cardinalities, log-factors.

Design constraints: pure Python + numpy (no JAX import), so that reading and
conditioning a model costs nothing on import and the model can be built, checked and
printed without an accelerator. Tables are held in log space (float64; a zero is
``-inf``), which is what every inference routine consumes and what mbi users hold.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np

from einslice import EinsliceError

__all__ = ["Evidence", "Factor", "FactorGraph"]

# Variable name → observed state. Keys are Any, not Hashable, because Mapping is
# invariant in its key type: a dict[int, int] must be accepted as it is.
Evidence: TypeAlias = Mapping[Any, int]


@dataclass(frozen=True, slots=True, eq=False)
class Factor:
    """One factor: a scope (variable positions) and its table in log space.

    Attributes:
        scope: the positions (into `FactorGraph.variables`) of the variables the
            factor depends on, in the order of the table's axes.
        log_table: float64 array of shape ``[cardinality of v for v in scope]``;
            ``-inf`` marks an impossible assignment (a zero potential).
    """

    scope: tuple[int, ...]
    log_table: np.ndarray

    def __post_init__(self) -> None:
        # Why: the graph is immutable; a table edited in place would go unchecked.
        table = np.asarray(self.log_table, dtype=np.float64)  # 0-d stays an array
        object.__setattr__(self, "log_table", table)
        table.flags.writeable = False

    def __repr__(self) -> str:
        return f"Factor(scope={self.scope}, shape={self.log_table.shape})"


@dataclass(frozen=True, slots=True, eq=False)
class FactorGraph:
    """A discrete Markov network: ``p(x) ∝ exp(Σ_f log_table_f[x_scope_f])``.

    Build one with `FactorGraph.from_factors` (scopes + tables),
    `FactorGraph.from_cliques` (a dict of cliques → arrays, as mbi users hold
    them) or `einslice.pgm.read_uai`. The graph is immutable;
    `FactorGraph.condition` returns a new one with observed variables removed.

    Attributes:
        cardinalities: the number of states of each variable.
        factors: the factors; each scope holds positions into ``cardinalities``.
        variables: a name for each variable (the positions ``0..n-1`` unless the
            graph was built from named cliques or conditioned on evidence, where
            the names are the original variables' names).
    """

    cardinalities: tuple[int, ...]
    factors: tuple[Factor, ...]
    variables: tuple[Hashable, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.variables:
            object.__setattr__(self, "variables", tuple(range(len(self.cardinalities))))
        _check(self)

    # -- construction -----------------------------------------------------------------

    @classmethod
    def from_factors(
        cls,
        scopes: Sequence[Sequence[int]],
        tables: Sequence[np.typing.ArrayLike],
        cardinalities: Sequence[int] | None = None,
        *,
        log: bool = False,
    ) -> FactorGraph:
        """Builds a graph from factor scopes (variable positions) and their tables.

        Args:
            scopes: for each factor, the positions of its variables (ints from 0).
            tables: for each factor, an array whose axes follow its scope.
            cardinalities: the number of states of each variable; inferred from the
                table shapes when omitted (a variable in no factor then needs it).
            log: whether ``tables`` already hold log-potentials; otherwise they are
                non-negative potentials and zeros become ``-inf``.

        Returns:
            The `FactorGraph`.

        Raises:
            EinsliceError: when a table's shape disagrees with its scope or with the
                cardinalities, or a potential is negative or NaN.

        Example:
            >>> import numpy as np
            >>> g = FactorGraph.from_factors([(0, 1)], [np.ones((2, 3))])
            >>> g.cardinalities
            (2, 3)
        """
        if len(scopes) != len(tables):
            raise EinsliceError(
                f"from_factors got {len(scopes)} scopes but {len(tables)} tables; "
                "pass one table per scope."
            )
        arrays = [np.asarray(t, dtype=np.float64) for t in tables]
        scopes_ = [tuple(int(v) for v in s) for s in scopes]
        if cardinalities is None:
            cardinalities = _cardinalities_from_tables(scopes_, arrays)
        factors = tuple(
            Factor(scope, _to_log(table, i, log))
            for i, (scope, table) in enumerate(zip(scopes_, arrays, strict=True))
        )
        return cls(tuple(int(c) for c in cardinalities), factors)

    @classmethod
    def from_cliques(
        cls,
        cliques: Mapping[Any, np.typing.ArrayLike],
        cardinalities: Mapping[Any, int] | None = None,
        *,
        log: bool = False,
    ) -> FactorGraph:
        """Builds a graph from a dict of cliques (tuples of names) to tables.

        This is how mbi (private-pgm) holds a model: ``{("A", "B"): array, ...}``
        with log-potentials, so pass ``log=True`` for those.

        Args:
            cliques: maps each clique, a tuple of variable names, to an array whose
                axes follow the clique.
            cardinalities: the number of states of each name; inferred from the
                table shapes when omitted. Names listed here but in no clique become
                free variables.
            log: whether the arrays hold log-potentials.

        Returns:
            The `FactorGraph`, whose ``variables`` are the names in first-seen order
            (then the names only in ``cardinalities``).

        Example:
            >>> import numpy as np
            >>> g = FactorGraph.from_cliques({("A", "B"): np.zeros((2, 3))}, log=True)
            >>> g.variables, g.cardinalities
            (('A', 'B'), (2, 3))
        """
        names = _number_names(cliques, cardinalities or {})
        sizes: list[int | None] = [None] * len(names)
        for name, n in (cardinalities or {}).items():
            sizes[names[name]] = int(n)
        scopes = [tuple(names[name] for name in clique) for clique in cliques]
        tables = [
            _clique_table(clique, table, names, sizes)
            for clique, table in cliques.items()
        ]
        graph = cls.from_factors(
            scopes, tables, [s if s is not None else 0 for s in sizes], log=log
        )
        return cls(graph.cardinalities, graph.factors, tuple(names))

    # -- derived views -----------------------------------------------------------------

    @property
    def num_variables(self) -> int:
        """The number of variables."""
        return len(self.cardinalities)

    def condition(self, evidence: Evidence | None) -> FactorGraph:
        """Observes some variables: slices every table, then drops those variables.

        Args:
            evidence: maps variable names (positions for graphs read from UAI files)
                to their observed state.

        Returns:
            A graph over the unobserved variables only (``variables`` keeps their
            original names). A factor whose whole scope is observed becomes a
            constant (empty scope), so log Z still equals ``log p(evidence)·Z``.

        Raises:
            EinsliceError: on an unknown variable or a state out of range.

        Example:
            >>> import numpy as np
            >>> g = FactorGraph.from_factors([(0, 1)], [[[1.0, 2.0], [3.0, 4.0]]])
            >>> g.condition({0: 1}).factors[0].log_table.round(3).tolist()
            [1.099, 1.386]
        """
        if not evidence:
            return self
        position = {name: i for i, name in enumerate(self.variables)}
        observed: dict[int, int] = {}
        for name, state in evidence.items():
            if name not in position:
                raise EinsliceError(
                    f"evidence names variable {name!r}, which is not in the model "
                    f"(variables are {_abbrev(self.variables)})."
                )
            i = position[name]
            if not 0 <= int(state) < self.cardinalities[i]:
                raise EinsliceError(
                    f"evidence sets variable {name!r} to state {state!r} but it has "
                    f"{self.cardinalities[i]} states (0..{self.cardinalities[i] - 1})."
                )
            observed[i] = int(state)
        kept = [i for i in range(self.num_variables) if i not in observed]
        renumber = {old: new for new, old in enumerate(kept)}
        factors = []
        for factor in self.factors:
            index = tuple(
                observed.get(v, slice(None)) for v in factor.scope
            )  # an int takes one state (dropping the axis); a slice keeps the axis
            scope = tuple(renumber[v] for v in factor.scope if v not in observed)
            factors.append(Factor(scope, np.array(factor.log_table[index])))
        return FactorGraph(
            tuple(self.cardinalities[i] for i in kept),
            tuple(factors),
            tuple(self.variables[i] for i in kept),
        )

    def log_score(self, assignment: Sequence[int]) -> float:
        """The unnormalized log-probability ``Σ_f log_table_f[x_scope_f]`` of a state.

        Args:
            assignment: one state per variable, in the order of ``variables``.

        Returns:
            The score as a float (``-inf`` for an impossible assignment).
        """
        x = tuple(int(s) for s in assignment)
        return math.fsum(
            float(f.log_table[tuple(x[v] for v in f.scope)]) for f in self.factors
        )

    def __repr__(self) -> str:
        return (
            f"FactorGraph({self.num_variables} variables, {len(self.factors)} "
            f"factors, max cardinality {max(self.cardinalities, default=0)})"
        )


def _cardinalities_from_tables(
    scopes: list[tuple[int, ...]], arrays: list[np.ndarray]
) -> list[int]:
    """Each variable's number of states, read off the tables' shapes."""
    sizes: dict[int, int] = {}
    for i, (scope, table) in enumerate(zip(scopes, arrays, strict=True)):
        if table.ndim != len(scope):
            raise EinsliceError(
                f"factor {i} has scope {scope} ({len(scope)} variables) but "
                f"its table has shape {table.shape}; give the table one axis "
                "per variable."
            )
        for v, n in zip(scope, table.shape, strict=True):
            if sizes.setdefault(v, n) != n:
                raise EinsliceError(
                    f"variable {v} has {sizes[v]} states in one factor but "
                    f"{n} in factor {i} (scope {scope}, shape {table.shape}); "
                    "every table must agree on a variable's cardinality."
                )
    n_vars = max(sizes, default=-1) + 1
    missing = [v for v in range(n_vars) if v not in sizes]
    if missing:
        raise EinsliceError(
            f"variables {missing} appear in no factor, so their cardinality "
            "is unknown; pass cardinalities=."
        )
    return [sizes[v] for v in range(n_vars)]


def _number_names(
    cliques: Mapping[Any, np.typing.ArrayLike], cardinalities: Mapping[Any, int]
) -> dict[Hashable, int]:
    """Number the names in first-seen order, then those only in ``cardinalities``."""
    names: dict[Hashable, int] = {}
    for clique in cliques:
        for name in clique:
            names.setdefault(name, len(names))
    for name in cardinalities:
        names.setdefault(name, len(names))
    return names


def _clique_table(
    clique: Any,
    table: np.typing.ArrayLike,
    names: dict[Hashable, int],
    sizes: list[int | None],
) -> np.ndarray:
    """A clique's table as an array, checked against (and recorded in) ``sizes``."""
    array = np.asarray(table, dtype=np.float64)
    if array.ndim != len(clique):
        raise EinsliceError(
            f"clique {clique!r} has {len(clique)} variables but its table has "
            f"shape {array.shape}; give the table one axis per variable."
        )
    for name, n in zip(clique, array.shape, strict=True):
        known = sizes[names[name]]
        if known is not None and known != n:
            raise EinsliceError(
                f"variable {name!r} has {known} states elsewhere but {n} in "
                f"clique {clique!r} (shape {array.shape}); every table must "
                "agree on a variable's cardinality."
            )
        sizes[names[name]] = n
    return array


def _to_log(table: np.ndarray, i: int, log: bool) -> np.ndarray:
    # Why: zeros are hard constraints and legal; NaN or negative potentials are bugs.
    if log:
        if np.isnan(table).any() or np.isposinf(table).any():
            raise EinsliceError(
                f"factor {i}'s log-table holds NaN or +inf; log-potentials must be "
                "finite or -inf."
            )
        return table.copy()
    if np.isnan(table).any() or (table < 0).any() or np.isinf(table).any():
        raise EinsliceError(
            f"factor {i}'s table holds a negative, NaN or infinite value; potentials "
            "must be finite and non-negative (pass log=True for log-potentials)."
        )
    with np.errstate(divide="ignore"):
        return np.log(table)


def _check(graph: FactorGraph) -> None:
    # Why: every routine downstream trusts scopes and shapes; check once, here.
    if len(graph.variables) != len(graph.cardinalities):
        raise EinsliceError(
            f"{len(graph.variables)} variable names for {len(graph.cardinalities)} "
            "cardinalities; give one name per variable."
        )
    for v, n in enumerate(graph.cardinalities):
        if n < 1:
            raise EinsliceError(
                f"variable {graph.variables[v]!r} has cardinality {n}; every "
                "variable needs at least one state."
            )
    for i, f in enumerate(graph.factors):
        if len(set(f.scope)) != len(f.scope):
            raise EinsliceError(
                f"factor {i} has scope {f.scope} with a repeated variable; list each "
                "variable once."
            )
        n = len(graph.cardinalities)
        bad = [v for v in f.scope if not 0 <= v < n]
        if bad:
            raise EinsliceError(
                f"factor {i} has scope {f.scope} naming variables {bad}, but the "
                f"model has {n} (0..{n - 1})."
            )
        want = tuple(graph.cardinalities[v] for v in f.scope)
        if f.log_table.shape != want:
            raise EinsliceError(
                f"factor {i} has scope {f.scope} with cardinalities {want} but its "
                f"table has shape {f.log_table.shape}."
            )


def _abbrev(items: Iterable[Hashable], limit: int = 8) -> str:
    items = list(items)
    head = ", ".join(repr(x) for x in items[:limit])
    return f"[{head}{', ...' if len(items) > limit else ''}] ({len(items)} in all)"
