"""Exact inference on a `FactorGraph` as one einsum of every log-factor to a scalar.

log Z is an ``einslice`` contraction in the ``"log"`` semiring of all log-tables
(interleaved form, one int label per variable) to ``[]``; every marginal is the
gradient of log Z with respect to the log-tables (one forward and one backward
pass, both planned under the memory limit); the MAP value is the same contraction
in the ``"max"`` semiring, and a MAP state comes from its gradient. The network is
first simplified exactly in numpy (see ``_network.py``).

log Z and the MAP value need the contraction run once: a small network's
greedy tree is walked in numpy unplanned (`_quick_walk`), and a plan whose
numpy walk is estimated to beat XLA's compilation of it (small models,
whose hundreds of tiny steps compile in seconds and run in milliseconds)
runs on the host, uncompiled. Marginals and MAP states need derivatives:
the same holds for them (a numpy backward walk, or the maximizing state
traced back, when it fits the limit and beats compiling the
value-and-gradient program); otherwise the plan's derivative is compiled.
Every such decision, and the figures behind it, is the core's choosing
stage's (``_exec/_choose.py``), reached through ``einslice._internal``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import cast

import jax
import jax.numpy as jnp
import numpy as np

import einslice
from einslice import (
    EinsliceError,
    MemoryLimitError,
    Profile,
    TreeSearch,
    parse_memory_limit,
)

from .._internal import (
    Equation,
    Found,
    HostWalk,
    build_equation,
    cheap,
    choose,
    clock,
    compile_options,
    current_profile,
    default_memory_limit,
    greedy_path,
    host_grad_pays,
    host_profile,
    host_value_and_grad,
    host_walk,
    plan_with_tree,
    prepare_terms,
    run_on_host,
    search_tree,
    tree_seconds,
    walk_pays,
)
from ._model import Evidence, FactorGraph
from ._network import Network, build_network, cluster_groups, merge, tree_groups

__all__ = [
    "MapResult",
    "Marginals",
    "log_partition",
    "map_assignment",
    "map_value",
    "marginals",
]


@dataclass(frozen=True, slots=True)
class Marginals:
    """The result of `marginals`: log Z and every variable's (and factor's) marginal.

    Attributes:
        log_partition: natural log of Z (of p(evidence)·Z with evidence).
        variables: maps each variable's name to its marginal (float64, sums to 1);
            an observed variable gets a point mass on its observed state.
        factors: when requested, each factor's marginal over its scope (in the
            original model's order and shape), else None.
    """

    log_partition: float
    variables: dict[Hashable, np.ndarray]
    factors: tuple[np.ndarray, ...] | None


@dataclass(frozen=True, slots=True)
class MapResult:
    """The result of `map_assignment`: the MAP value and an assignment attaining it.

    Attributes:
        log_value: ``max_x Σ_f log φ_f(x)``, the unnormalized log-score of the
            most probable state (``-inf`` when every state is impossible).
        assignment: maps every variable's name to its state (observed ones
            included).
    """

    log_value: float
    assignment: dict[Hashable, int]


@dataclass(frozen=True, slots=True, eq=False)
class _Prepared:
    """A network with its plan (or its host walk), ready to run.

    ``plan`` and ``walk`` both None: nothing to contract (the network
    vanished); ``walk``: a value (or, for marginals and MAP states, a value
    and gradient) walked on the host unplanned (see `_quick_walk`). The CLI
    reports them. ``replan``: how a derivative's walk gets a plan after all,
    for when the host cannot take it (`planned`).
    """

    network: Network
    plan: einslice.Plan | None
    dtype: np.dtype
    walk: HostWalk | None = None
    derivative_fits: bool = True
    replan: Callable[[], _Prepared] | None = None
    # Whether the host's derivative may recompute ranges of steps to fit the
    # plan's limit (`_host_grad.recompute_schedule`): only where no plan's
    # derivative fits by keeping every node (see `_prepare`).
    recompute: bool = False

    @property
    def trivial(self) -> bool:
        """Whether there is nothing to contract (the value is the offset)."""
        return self.plan is None and self.walk is None

    def operands(self, tables=None) -> tuple[jax.Array, ...]:
        tables = self.network.tables if tables is None else tables
        return tuple(jnp.asarray(t, dtype=self.dtype) for t in tables)

    def run(self, operands) -> jax.Array:
        assert self.plan is not None  # Why: callers check for a trivial network
        return self.plan(*operands)

    @property
    def on_host(self) -> bool:
        """Whether `value` runs in numpy instead of compiling the plan."""
        if self.walk is not None:
            return True
        return self.plan is not None and choose(self.plan, once=True).how == "host"

    @property
    def derivative_on_host(self) -> bool:
        """Whether `host_derivative` takes the gradient in numpy, not compiled.

        A walk made for derivatives was checked when it was made (`_quick_walk`);
        a plan's host derivative must fit its limit and beat compiling it
        (``_choose.host_grad_pays``).
        """
        if self.walk is not None:
            return True
        return self.plan is not None and host_grad_pays(
            self.plan, self.plan.memory_limit, recompute=self.recompute
        )

    def host_derivative(self) -> tuple[float, tuple[np.ndarray, ...]] | None:
        """The contraction's value and gradient by the tables, in numpy.

        None when the host does not take it (`derivative_on_host`), or cannot
        (a "log" network whose scaled form could underflow): compile it then,
        from `planned`. For "max" the gradient marks one maximizing state.
        """
        if not self.derivative_on_host:
            return None
        if self.walk is not None:  # (checked keeping every node: `_quick_walk`)
            return host_value_and_grad(self.walk, self.network.tables)
        assert self.plan is not None  # Why: derivative_on_host says one is there
        limit = self.plan.memory_limit if self.recompute else None
        return host_value_and_grad(self.plan, self.network.tables, memory_limit=limit)

    def planned(self) -> _Prepared:
        """This network with a plan: itself, or `replan`'s when it has a walk only."""
        if self.plan is not None or self.replan is None:
            return self
        return self.replan()

    def value(self) -> float:
        """The contraction's value, once: on the host when that beats compiling.

        A `HostWalk` always runs on the host. log Z and the MAP value run the
        plan a single time, so a plan whose
        numpy walk is estimated to cost less than XLA's compilation of it
        (`on_host`: small graphical models, whose hundreds of tiny steps
        compile in seconds and run in milliseconds) is not compiled.
        """
        if self.walk is not None:
            return float(run_on_host(self.walk, self.network.tables))
        assert self.plan is not None
        if self.on_host:
            return float(run_on_host(self.plan, self.network.tables))
        return float(self.run(self.operands()))

    def jit(self, fun: Callable) -> Callable:
        """``fun`` compiled as the plan's own calls are (see ``compile_options``).

        A derivative traces the plan inside ``fun``, where only a top-level jit
        can pass compiler options, so a plan that gets options is compiled as
        one program of forward and backward with them. Other plans keep ``fun``
        un-jitted: with XLA's default options one program raised the peak RSS
        of compiling it (Grids_15 MAR 1450 -> 1708 MiB, CSP_11 MAR 880 -> 959
        MiB); without the fusion emitters Grids_15's took 661 MiB.
        """
        assert self.plan is not None
        options = compile_options(self.plan)
        if options is None:
            return fun
        return jax.jit(fun, compiler_options=options)


def log_partition(
    model: FactorGraph,
    evidence: Evidence | None = None,
    *,
    memory_limit: int | str | None = None,
    optimize: object = "auto",
    dtype: jax.typing.DTypeLike = jnp.float32,
    profile: Profile | None = None,
) -> float:
    """The natural log of the partition function Z, computed exactly.

    With evidence, the result is log Σ over the unobserved variables, i.e.
    ``log(Z · p(evidence))``; for a normalized network (a BAYES file) that is
    ``log p(evidence)``.

    Args:
        model: the graphical model.
        evidence: maps variable names (positions, for UAI files) to observed states.
        memory_limit: bytes or a string like ``"256MB"`` bounding the temporary
            memory of the contraction; None takes einslice's device default.
        optimize: ``"auto"`` (the planner's seeded cotengra search, with slicing,
            for large networks), an ``einslice.TreeSearch(seed=..., ...)`` for
            that search with other settings, any ``einslice.einsum`` strategy
            name, or a path optimizer object such as
            ``cotengra.HyperOptimizer(...)``.
        dtype: the dtype of the contraction (float32 or float64; float64 needs
            ``jax_enable_x64``). Constants are always accumulated in float64.
        profile: the device to plan for, as for ``einslice.plan``: default
            this device's; ``einslice.profiles.GPU`` plans (and runs here)
            what a GPU would run, e.g. to check that it fits a GPU's memory.

    Returns:
        log Z as a float; ``-inf`` when Z = 0 (no state has positive probability).

    Raises:
        MemoryLimitError: when no exact plan fits ``memory_limit``; it states the
            smallest feasible limit and the contraction's FLOPs.
        EinsliceError: on bad evidence or options.

    Example:
        >>> import numpy as np
        >>> from einslice.pgm import FactorGraph, log_partition
        >>> g = FactorGraph.from_factors([(0, 1)], [np.ones((2, 3))])
        >>> round(log_partition(g), 4)  # ln 6
        1.7918
    """
    prepared = _prepare(
        model, evidence, "log", memory_limit, optimize, dtype, profile, value_only=True
    )
    return _log_partition(prepared)


def marginals(
    model: FactorGraph,
    evidence: Evidence | None = None,
    *,
    factors: bool = False,
    memory_limit: int | str | None = None,
    optimize: object = "auto",
    dtype: jax.typing.DTypeLike = jnp.float32,
    profile: Profile | None = None,
) -> Marginals:
    """Every variable's exact marginal, from the gradient of log Z.

    ``∂ log Z / ∂ log φ_f(x_f) = p(x_f)``: one forward and one backward pass give
    every factor's marginal at once; a variable's marginal is summed out of the
    smallest factor containing it.

    Args:
        model: the graphical model.
        evidence: maps variable names to observed states.
        factors: also return every factor's marginal.
        memory_limit: as for `log_partition`; bounds both passes.
        optimize: as for `log_partition`.
        dtype: as for `log_partition`.
        profile: as for `log_partition`.

    Returns:
        A `Marginals` with log Z, the variable marginals and, if asked, the factor
        marginals.

    Raises:
        EinsliceError: when Z = 0 under the evidence (marginals are undefined).
        MemoryLimitError: as for `log_partition`.

    Example:
        >>> import numpy as np
        >>> from einslice.pgm import FactorGraph, marginals
        >>> g = FactorGraph.from_factors([(0,)], [np.array([1.0, 3.0])])
        >>> marginals(g).variables[0].round(3).tolist()
        [0.25, 0.75]
    """
    prepared = _prepare(model, evidence, "log", memory_limit, optimize, dtype, profile)
    return _marginals(prepared, model, evidence, factors)


def map_value(
    model: FactorGraph,
    evidence: Evidence | None = None,
    *,
    memory_limit: int | str | None = None,
    optimize: object = "auto",
    dtype: jax.typing.DTypeLike = jnp.float32,
    profile: Profile | None = None,
) -> float:
    """The MAP value ``max_x Σ_f log φ_f(x)`` (the most probable state's log-score).

    Args:
        model: the graphical model.
        evidence: maps variable names to observed states.
        memory_limit: as for `log_partition`.
        optimize: as for `log_partition`.
        dtype: as for `log_partition`.
        profile: as for `log_partition`.

    Returns:
        The maximum unnormalized log-score (subtract `log_partition` for the log
        probability); ``-inf`` when every state is impossible.

    Example:
        >>> import numpy as np
        >>> from einslice.pgm import FactorGraph, map_value
        >>> g = FactorGraph.from_factors([(0,)], [np.array([1.0, 3.0])])
        >>> round(map_value(g), 4)  # ln 3
        1.0986
    """
    prepared = _prepare(
        model, evidence, "max", memory_limit, optimize, dtype, profile, value_only=True
    )
    return _map_value(prepared)


def map_assignment(
    model: FactorGraph,
    evidence: Evidence | None = None,
    *,
    memory_limit: int | str | None = None,
    optimize: object = "auto",
    dtype: jax.typing.DTypeLike = jnp.float32,
    profile: Profile | None = None,
) -> MapResult:
    """A most probable state, from the gradient of the ``"max"`` contraction.

    The gradient of the max-plus contraction with respect to the log-tables marks
    the entries an optimal state uses. When states tie, it is spread over them;
    the tables are then perturbed by a tiny amount to break the tie, and the
    assignment is checked against the unperturbed MAP value. If that still fails
    (or the max-semiring gradient is unavailable, or its derivative would not
    fit ``memory_limit``), variables are fixed one at a time, keeping a state
    that preserves the maximum (exact, ``Σ cardinalities`` contractions).

    Args:
        model: the graphical model.
        evidence: maps variable names to observed states (kept in the result).
        memory_limit: as for `log_partition`.
        optimize: as for `log_partition`.
        dtype: as for `log_partition`.
        profile: as for `log_partition`.

    Returns:
        A `MapResult`: the MAP value and an assignment whose score attains it (to
        the dtype's precision).

    Raises:
        EinsliceError: when every state is impossible (the value is ``-inf``).

    Example:
        >>> import numpy as np
        >>> from einslice.pgm import FactorGraph, map_assignment
        >>> g = FactorGraph.from_factors([(0, 1)], [[[1.0, 5.0], [2.0, 1.0]]])
        >>> map_assignment(g).assignment
        {0: 0, 1: 1}
    """
    prepared = _prepare(model, evidence, "max", memory_limit, optimize, dtype, profile)
    return _map_assignment(prepared, model, evidence)


# -- building and planning the network -------------------------------------------------


def _prepare(
    model: FactorGraph,
    evidence: Evidence | None,
    semiring: str,
    memory_limit: int | str | None,
    optimize: object,
    dtype: jax.typing.DTypeLike,
    profile: Profile | None = None,
    value_only: bool = False,
    *,
    host: bool = True,
) -> _Prepared:
    """Conditions, simplifies and plans: everything before running.

    ``value_only``: the plan will be run once for its value, no derivatives
    (log Z, the MAP value): a small network's greedy tree is then walked on
    the host unplanned (`_quick_walk`), and a cheap tree's network is not
    merged further (see `_resolve`). Otherwise the plan is made with
    ``gradient=True``: its derivative fits the limit too; unless (``host``
    and no ``profile``) the value and gradient walk on the host within the
    limit and faster than compiling: the greedy tree's (`_quick_walk`
    again), else the forward plan's.
    ``profile``: the device to plan for (default this one's).
    """
    dtype_ = _check_dtype(dtype)
    network = build_network(model.condition(evidence))
    if not network.tables or network.offset == -math.inf:
        return _Prepared(network, None, dtype_)
    derivative_on_host = host and not value_only and profile is None
    replan = None
    if derivative_on_host:  # Why: a network the host cannot take compiles
        replan = partial(
            _prepare,
            model,
            evidence,
            semiring,
            memory_limit,
            optimize,
            dtype,
            profile,
            value_only,
            host=False,
        )
    if optimize == "auto" and host and (value_only or profile is None):
        quick = _quick_walk(network, semiring, memory_limit, dtype_, not value_only)
        if quick is not None:
            return _Prepared(*quick[:1], None, dtype_, quick[1], replan=replan)
    recomputed = None
    if derivative_on_host:
        # The host's derivative needs only the forward plan (the one log Z and
        # the MAP value run): quicker to make than one whose compiled
        # derivative fits (Grids_15 "max": 23 s, the derivative over the limit).
        forward = _plan_network(
            network, optimize, semiring, memory_limit, dtype_, True, host_profile()
        )
        if forward.derivative_on_host:
            return replace(forward, replan=replan)
        # Its walk recomputing ranges of steps is the last resort: slower than
        # a plan sliced for its derivative whose walk keeps every node
        # (Grids_15 MAR at 256 MB: 40-48 s against 10-11 s), but faster than
        # compiling (at 1 GB: 27-46 s against 50-53 s), and the only way
        # within the limit where no derivative plan fits (linkage_15: 4.87 GB).
        candidate = replace(forward, replan=replan, recompute=True)
        recomputed = candidate if candidate.derivative_on_host else None
    plan_for = partial(
        _plan_network, network, optimize, semiring, memory_limit, dtype_, value_only
    )
    if semiring == "max" and not value_only:
        plan_for = partial(_plan_map, plan_for, network, optimize, memory_limit, dtype_)
    if profile is not None:
        return plan_for(profile)
    if recomputed is not None:
        try:
            prepared = plan_for(current_profile())
        except MemoryLimitError:
            return recomputed
        return prepared if prepared.derivative_on_host else recomputed
    if value_only:
        # A plan walked on the host is planned for the host's profile; asking
        # JAX for the device would start its backend (~6 ms, as long as
        # pgmpy's whole query of Promedus_24). Only a plan that compiles is
        # planned again, for the device, unless that is the host itself.
        here = host_profile()
        prepared = plan_for(here)
        if prepared.on_host or current_profile() == here:
            return prepared
    return plan_for(current_profile())


def _plan_network(
    network: Network,
    optimize: object,
    semiring: str,
    memory_limit: int | str | None,
    dtype: np.dtype,
    value_only: bool,
    profile: Profile,
) -> _Prepared:
    """`_resolve` and ``einslice.plan`` for the device ``profile`` describes."""
    network, order = _resolve(
        network, optimize, semiring, memory_limit, dtype, value_only, profile
    )
    args: list = []
    for table, term in zip(network.tables, network.terms, strict=True):
        args += [table.shape, list(term)]
    searched = isinstance(order, Found)
    plan = plan_with_tree(
        *args,
        [],
        tree=order if searched else None,
        memory_limit=memory_limit,
        optimize="auto" if searched else order,
        semiring=semiring,
        dtype=dtype,
        profile=profile,
        gradient=not value_only,
    )
    return _Prepared(network, plan, dtype)


def _plan_map(
    plan_for: Callable[[Profile], _Prepared],
    network: Network,
    optimize: object,
    memory_limit: int | str | None,
    dtype: np.dtype,
    profile: Profile,
) -> _Prepared:
    """A MAP assignment's plan: with its derivative when that fits the limit.

    Why: the max-plus derivative reduces each step's union of indices, so it can
    need far more than the forward pass (Grids_15 at 256 MB: 208 MB forward,
    2.18 GB derivative). A MAP state can still be found within the limit by
    fixing variables one at a time (`_fix_one_at_a_time`: forward passes only),
    slower but exact, so the limit is kept and only the forward pass planned.
    """
    try:
        return plan_for(profile)
    except MemoryLimitError:
        prepared = _plan_network(
            network, optimize, "max", memory_limit, dtype, True, profile
        )
        return replace(prepared, derivative_fits=False)


def _resolve(
    network: Network,
    optimize: object,
    semiring: str,
    memory_limit: int | str | None,
    dtype: np.dtype,
    value_only: bool,
    profile: Profile,
) -> tuple[Network, object]:
    """Merges tables and turns ``optimize`` into what the planner gets.

    For a `TreeSearch`, or ``"auto"`` on more than `AUTO_CORE_MAX_TABLES`
    tables (``TreeSearch()``), the core's tree search (the one ``einsum``
    uses, slicing inside it, under the same limit) runs on the tables as they
    are; tables its tree multiplies before summing anything are then added
    together (fewer steps to compile), and the planner gets the tree (its
    `Found`: path and sliced indices, the seeds of its chunk sizing). A path
    optimizer object is called once, on the network with tiny neighbouring
    tables merged.
    Under ``"auto"`` each variant's search is bounded from its start
    (``_search.planning_bound``), not all of them together: the variants
    weigh compile time too, and a merged one's search is cheaper (Grids_15
    MAR: the 64-entry variant's 1.7 s search found the plan that ran in
    17 s; without it, 65 s).
    """
    if isinstance(optimize, list | tuple):
        raise EinsliceError(
            "optimize= cannot be an explicit path here: the network is simplified "
            "(tables merged) before planning, so its positions are not the model's "
            "factors. Pass a strategy name such as 'greedy', or a path optimizer "
            "such as cotengra.HyperOptimizer(...)."
        )
    search = optimize if isinstance(optimize, TreeSearch) else None
    bounded = False  # (a search the caller asked for keeps its own settings)
    if optimize == "auto" and len(network.tables) > AUTO_CORE_MAX_TABLES:
        search, bounded = TreeSearch(), True
    if search is not None:
        limit = (
            default_memory_limit()
            if memory_limit is None
            else parse_memory_limit(memory_limit)
        )
        options = []
        for entries in CLUSTER_OPTIONS:
            variant = merge(network, cluster_groups(network, entries))
            if any(len(v.tables) == len(variant.tables) for _, v, _ in options):
                continue
            since = clock() if bounded else None  # (``planning_bound``)
            found = _search(
                variant, semiring, limit, dtype.itemsize, search, profile, since
            )
            groups, path = tree_groups(variant.terms, variant.sizes(), found.path)
            merged = merge(variant, groups)
            tree = _for_planner(found, variant, merged, path)
            # A tree over the limit at its own slicing loses to any that fits
            # (Grids_15 "max": the 64-entry variant's tree, 272 MB at 256 MB,
            # had the least compile time and left the planner nothing to fit).
            over = found.peak_bytes > limit
            options.append(
                ((over, tree_seconds(found.time, len(groups))), merged, tree)
            )
            walked = profile == host_profile()  # (a device plan compiles)
            if value_only and (
                found.trials == 0 or (walked and cheap(found.time, len(variant.tables)))
            ):
                # The tree was cheap enough to end the search (the plain greedy
                # one, _search._quick_trees, or one found in a few trials): run
                # once, such a plan is walked on the host, not compiled, and
                # fewer tables would save only microseconds, while searching
                # them costs seconds (CSP_11 log Z: 9 s of its 13 s in the
                # 16- and 64-entry variants' searches after a cheap tree).
                # Only for the host's profile beyond the quick tree: planned
                # for a device (a GPU profile) the plan compiles, and fewer
                # tables compile faster. (Derivatives compile too.)
                # Its own merges stay: the walk then multiplies small tables
                # together once instead of into large intermediates (Grids_15
                # unmerged walked in 2.6 s, merged in 0.3 s).
                break
        _, merged, tree = min(options, key=lambda o: o[0])
        return merged, tree
    if optimize == "auto":
        return network, optimize
    network = merge(network, cluster_groups(network))
    if isinstance(optimize, str | bool) or not callable(optimize):
        return network, optimize
    sizes = network.sizes()
    path = cast(  # a cotengra or opt_einsum path optimizer: search once
        "Sequence[Sequence[int]]",
        optimize([tuple(t) for t in network.terms], (), sizes),
    )
    return network, [tuple(int(i) for i in step) for step in path]


# At or below this many tables the core's "auto" (dynamic programming) is optimal.
AUTO_CORE_MAX_TABLES = 12
# Before the search, neighbouring tables are merged while their union has at
# most this many entries (0: none). Fewer tables compile faster, but a merge can
# cost the tree dearly (CSP_11: 10^8.3 FLOPs unmerged, 10^10.1 at 64 entries):
# each variant is searched and the best estimate of run + compile time wins.
CLUSTER_OPTIONS = (0, 16, 64)


def _search(
    network: Network,
    semiring: str,
    limit: int,
    itemsize: int,
    search: TreeSearch,
    profile: Profile,
    since: float | None = None,
) -> Found:
    """The core's tree search on a network's tables (variables relabelled 0..).

    ``since``: when a bounded search began (``search_tree``).

    The search sees the tables as they are, variables of one table alone
    included (`_variables` numbers them): on these networks cotengra finds
    better trees so than on the planner's prepared terms (Grids_15: a
    5.9e9-FLOP tree walked in 0.4 s, against a 7.2e8-FLOP one in 4.6 s;
    CSP_11 5.2 s against 6.3 s end to end). `_for_planner` renumbers the
    tree for the planner.
    """
    variables = _variables(network)
    label = {v: i for i, v in enumerate(variables)}
    sizes = network.sizes()
    return search_tree(
        [tuple(label[v] for v in term) for term in network.terms],
        (),
        [sizes[v] for v in variables],
        itemsize,
        limit,
        semiring=semiring,
        seed=search.seed,
        trials=search.trials,
        patience=search.patience,
        search_seconds=search.seconds,
        profile=profile,
        runs=1 if search.runs is None else search.runs,
        since=since,
    )


def _variables(network: Network) -> list:
    """The network's variables in the order `_search` numbers them."""
    return sorted({v for term in network.terms for v in term})


def _equation(network: Network) -> Equation:
    """The network's tables as ``einslice.plan`` numbers them (cached there)."""
    spec = (tuple(tuple(term) for term in network.terms), ())
    return build_equation(spec, tuple(t.shape for t in network.tables))


def _quick_walk(
    network: Network,
    semiring: str,
    memory_limit: int | str | None,
    dtype: np.dtype,
    derivative: bool = False,
) -> tuple[Network, HostWalk] | None:
    """The greedy tree's host walk, when neither a search nor a plan can pay.

    A one-shot value (log Z, the MAP value) of a small network takes less to
    walk in numpy along cotengra's greedy order than a search's least cost
    (one trial), than compiling, and than making a plan: Promedus_24's 103
    steps walk in ~1.5 ms, where laying out and costing them took ~4 ms and
    pgmpy's whole query ~8 ms. Tables the tree multiplies before summing
    anything are merged first (fewer steps).
    The walk is taken when the choosing stage's `walk_pays` says so (its
    memory bound fits the limit and its estimated time is below both); else
    None (the search and the planner decide). Returns the merged network and
    its walk. ``derivative``: the same for a value and its gradient
    (marginals, MAP states).
    """
    limit = (
        default_memory_limit()
        if memory_limit is None
        else parse_memory_limit(memory_limit)
    )
    equation = _equation(network)
    terms = prepare_terms(equation)
    path = greedy_path(terms, equation.output, equation.sizes)
    groups, path = tree_groups(network.terms, network.sizes(), path)
    if len(groups) < len(network.tables):
        network = merge(network, groups)
        equation = _equation(network)
    walk = host_walk(equation, tuple(map(tuple, path)), semiring, dtype.name)
    if walk_pays(walk, limit, len(terms), derivative):
        return network, walk
    return None


def _for_planner(found: Found, variant: Network, merged: Network, path) -> Found:
    """``found``, searched on ``variant``, for the planner on ``merged``'s tables.

    Its path over the merged tables, and its sliced indices numbered as
    ``build_equation`` numbers the labels the planner is given (in order of
    first appearance): the planner gets them as the seeds of its chunk sizing.
    """
    before = _variables(variant)
    after = {
        v: k for k, v in enumerate(dict.fromkeys(v for t in merged.terms for v in t))
    }
    sliced = tuple(after[before[i]] for i in found.sliced)
    return replace(found, path=tuple(map(tuple, path)), sliced=sliced)


def _check_dtype(dtype: jax.typing.DTypeLike) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise EinsliceError(
            f"dtype={dt.name!r} is not supported for inference; use float32 or float64."
        )
    if dt == np.float64 and not jax.config.read("jax_enable_x64"):
        raise EinsliceError(
            "dtype='float64' needs 64-bit JAX; call "
            "jax.config.update('jax_enable_x64', True) first, or use float32."
        )
    return dt


# -- running ---------------------------------------------------------------------------


def _log_partition(prepared: _Prepared) -> float:
    network = prepared.network
    if prepared.trivial:
        return network.offset
    return network.offset + prepared.value()


def _map_value(prepared: _Prepared) -> float:
    return _log_partition(prepared)  # the same sum of constants and one contraction


def _marginals(
    prepared: _Prepared,
    model: FactorGraph,
    evidence: Evidence | None,
    want_factors: bool,
) -> Marginals:
    if prepared.network.offset == -math.inf:
        raise _zero_partition("marginals")
    if prepared.trivial:
        value, grads = 0.0, ()
    else:
        found = prepared.host_derivative()
        if found is None:
            prepared = prepared.planned()
            value_, grads_ = prepared.jit(jax.value_and_grad(prepared.run))(
                prepared.operands()
            )
            found = float(value_), tuple(np.asarray(g, np.float64) for g in grads_)
        value, grads = found
    network = prepared.network
    log_z = network.offset + value
    if log_z == -math.inf:
        raise _zero_partition("marginals")

    cond = network.model
    variables: dict[Hashable, np.ndarray] = {}
    observed = _observed(model, evidence)
    for position, name in enumerate(model.variables):
        if position in observed:
            point = np.zeros(model.cardinalities[position])
            point[observed[position]] = 1.0
            variables[name] = point
    for v, name in enumerate(cond.variables):
        h = network.cover[v]
        term = network.terms[h]
        axes = tuple(a for a, u in enumerate(term) if u != v)
        p = grads[h].sum(axis=axes)
        variables[name] = p / p.sum()
    variables = {name: variables[name] for name in model.variables}

    factor_marginals = None
    if want_factors:
        factor_marginals = tuple(
            _factor_marginal(model, observed, network, grads, i)
            for i in range(len(model.factors))
        )
    return Marginals(log_z, variables, factor_marginals)


def _factor_marginal(
    model: FactorGraph,
    observed: dict[int, int],
    network: Network,
    grads: tuple[np.ndarray, ...],
    i: int,
) -> np.ndarray:
    """Factor ``i``'s marginal: its host's marginal summed onto its scope."""
    factor = model.factors[i]
    out = np.zeros(factor.log_table.shape)
    index = tuple(observed.get(v, slice(None)) for v in factor.scope)
    h = network.host[i]
    if h < 0:  # every variable observed (or an empty scope): probability one
        out[index] = 1.0
        return out
    kept = [v for v in factor.scope if v not in observed]
    position = {name: k for k, name in enumerate(network.model.variables)}
    inner = [position[model.variables[v]] for v in kept]  # conditioned positions
    term = network.terms[h]
    summed = tuple(a for a, u in enumerate(term) if u not in inner)
    p = grads[h].sum(axis=summed)
    remaining = [u for u in term if u in inner]
    out[index] = np.transpose(p, [remaining.index(u) for u in inner])
    return out


def _map_assignment(
    prepared: _Prepared, model: FactorGraph, evidence: Evidence | None
) -> MapResult:
    network = prepared.network
    cond = network.model
    observed = _observed(model, evidence)
    if network.offset == -math.inf:
        raise _zero_partition("a MAP assignment")
    if prepared.trivial:  # every variable observed
        value, x = network.offset, []
    else:
        value, x = _decode(prepared)
    if value == -math.inf:
        raise _zero_partition("a MAP assignment")
    assignment: dict[Hashable, int] = {}
    by_name = dict(zip(cond.variables, x, strict=True))
    for position, name in enumerate(model.variables):
        assignment[name] = observed[position] if position in observed else by_name[name]
    return MapResult(value, assignment)


def _decode(prepared: _Prepared) -> tuple[float, list[int]]:
    """The MAP value and a state attaining it: gradient first, then fallbacks.

    On the host (`_Prepared.host_derivative`) the state is traced back from
    the maximum, exact; its score is still checked against the value.
    """
    network = prepared.network
    found = prepared.host_derivative()
    if found is not None:
        value = network.offset + found[0]
        if value == -math.inf:
            return value, []
        x = _argmax_states(network, list(found[1]))
        if abs(network.model.log_score(x) - value) <= _tolerance(prepared.dtype, value):
            return value, x
    prepared = prepared.planned()
    network = prepared.network
    operands = prepared.operands()
    value = network.offset + float(prepared.run(operands))
    if value == -math.inf:
        return value, []
    tol = _tolerance(prepared.dtype, value)

    def attains(x: list[int]) -> bool:
        return abs(network.model.log_score(x) - value) <= tol

    if not prepared.derivative_fits:
        return value, _fix_one_at_a_time(prepared, value, tol)
    rng = np.random.default_rng(0)
    # Why: the noise breaks ties yet moves any state's score by at most tol / 10.
    for noise in (0.0, tol / (10 * len(network.tables))):
        tables = network.tables
        if noise:
            tables = tuple(t + rng.uniform(0, noise, t.shape) for t in tables)
        try:
            grads = prepared.jit(jax.grad(prepared.run))(prepared.operands(tables))
        except Exception:  # the max-semiring derivative is optional in the core
            break
        x = _argmax_states(network, [np.asarray(g) for g in grads])
        if attains(x):
            return value, x
    return value, _fix_one_at_a_time(prepared, value, tol)


def _argmax_states(network: Network, grads: list[np.ndarray]) -> list[int]:
    states = []
    for v in range(network.model.num_variables):
        h = network.cover[v]
        axes = tuple(a for a, u in enumerate(network.terms[h]) if u != v)
        states.append(int(np.argmax(grads[h].sum(axis=axes))))
    return states


def _fix_one_at_a_time(prepared: _Prepared, value: float, tol: float) -> list[int]:
    """Exact decoding: fix each variable to a state that keeps the maximum."""
    network = prepared.network
    tables = list(network.tables)
    states = []
    run: Callable = prepared.run
    for v, card in enumerate(network.model.cardinalities):
        h = network.cover[v]
        axis = network.terms[h].index(v)
        scores = []
        for s in range(card):
            mask = np.full(card, -np.inf)
            mask[s] = 0.0
            shape = [1] * tables[h].ndim
            shape[axis] = card
            trial = [*tables[:h], tables[h] + mask.reshape(shape), *tables[h + 1 :]]
            scores.append(network.offset + float(run(prepared.operands(trial))))
        s = int(np.argmax(scores))
        if scores[s] < value - tol:  # pragma: no cover - would be a core bug
            raise EinsliceError(
                f"MAP decoding lost the maximum at variable {v} ({scores[s]} < "
                f"{value}); please report this with the model."
            )
        mask = np.full(card, -np.inf)
        mask[s] = 0.0
        shape = [1] * tables[h].ndim
        shape[axis] = card
        tables[h] = tables[h] + mask.reshape(shape)
        states.append(s)
    return states


def _tolerance(dtype: np.dtype, value: float) -> float:
    eps = float(np.finfo(dtype).eps)
    return 64 * eps * max(1.0, abs(value))


def _observed(model: FactorGraph, evidence: Evidence | None):
    position = {name: i for i, name in enumerate(model.variables)}
    return {position[name]: int(s) for name, s in (evidence or {}).items()}


def _zero_partition(what: str) -> EinsliceError:
    return EinsliceError(
        f"Z = 0: no state has positive probability under this evidence, so {what} "
        "is undefined; check the evidence and the zeros in the tables (log "
        "Z is -inf)."
    )
