"""A `PlanRequest` → ranked Plans: the planner's front door (cached, pure).

`make_plan` gives the best plan, `rank_plans` the best few, and
`tuning_candidates` adds each other compiling executor's variants; each
`Plan` is made once, by `_plan_of`, from the request and the parts found
(`_Parts`), and never patched afterwards.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from math import prod

from .._errors import EinsliceError, MemoryLimitError
from ._cost import (
    Body,
    cached_cost,
    chunked_sizes,
    evaluate,
    naive_flops,
    output_bytes,
)
from ._executors import EXECUTOR_FACTS
from ._memory import format_bytes
from ._order import Path, cached_steps, find_path, jnp_greedy_path, two_group_paths
from ._profile import Profile
from ._request import PlanRequest
from ._search import PLAN_RUNS, TreeSearch, clock, search_tree
from ._search import Found as SearchFound
from ._semiring import semiring_named
from ._slice import (
    EXPLORE_MIN_SECONDS,
    REPLANNED_EXPLORE_MIN_SECONDS,
    Slicing,
    biased_ranking,
    choose_slicing,
    spread_chunks,
)
from ._types import ONE_DEVICE, Cost, Derivative, Equation, Plan

# "auto"-style named strategies re-plan the path for each chunking (cheap for
# few operands); explicit paths and optimizer objects are called once.
_REPLAN_MAX_OPERANDS = 12
# For large networks only the indices of the biggest intermediates are tried.
_MAX_CANDIDATES = 12
# How many runners-up of the forward search are kept for ranking.
_MAX_RUNNERS_UP = 16


def prepare_terms(equation: Equation) -> tuple[tuple[int, ...], ...]:
    """Each operand's indices after its diagonal and its private sums.

    An index repeated within a term becomes one; an index that no other operand
    and not the output has is summed out before any pairwise step.

    Example:
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> eq = build_equation(parse_subscripts("iij,jk->k", 2), ((2, 2, 3), (3, 4)))
        >>> [eq.names[i] for i in prepare_terms(eq)[0]]
        ['j']
    """
    # an index is kept where another operand or the output holds it too:
    # count each term's holders once (not a union per term: quadratic in
    # the operand count, 1 ms for a 104-table graphical model)
    holders = Counter(i for term in equation.terms for i in set(term))
    holders.update(dict.fromkeys(equation.output, 2))  # the output's are kept
    return tuple(
        tuple(i for i in dict.fromkeys(term) if holders[i] > 1)
        for term in equation.terms
    )


@lru_cache(maxsize=1024)
def make_plan(request: PlanRequest) -> Plan:
    """Plan a contraction: pairwise path, sliced indices and chunk sizes.

    ``request`` holds everything the plan is made from (see `PlanRequest`);
    plans are cached on it. With ``placement.spread`` > 1 a summed index is
    sliced (finer) until each device has a chunk; with ``gradient`` the
    forward plan is chosen so that the derivative pass fits the limit too
    (see `_fit_derivative`), not only the fastest forward pass.

    Returns:
        The fastest plan found whose predicted peak fits the limit (with
        ``gradient``, whose derivative's peak fits it too), made by `_plan_of`.

    Raises:
        MemoryLimitError: no plan fits (with ``gradient``: none whose
            derivative fits); states the smallest feasible limit of the steps
            (the caller adds ``cast_bytes``).

    Example:
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> eq = build_equation(parse_subscripts("ij,jk->ik", 2), ((64, 64),) * 2)
        >>> make_plan(PlanRequest(eq, 4, "float32", 2**20)).flops
        524288
    """
    plan = _plan_of(request, _planned(request))
    remember_growable(plan, request)
    return _peer_path(request, plan) or plan


# Two trees whose estimates differ by less than this share are a tie: the
# model cannot tell them apart. On a TPU v5e (benchmarks/results/
# unsliced_parity.md) Tucker's tie (the same FLOPs and traffic, another
# order) ran 2.75x slower along einslice's tree than along jnp.einsum's
# greedy one, while the seed formula at n=512, estimated 0.8% faster along
# einslice's tree, ran 1.14x faster there.
PATH_TIE = 1e-6


def _peer_path(request: PlanRequest, plan: Plan) -> Plan | None:
    """The plan along ``jnp.einsum``'s greedy path, where the model ties them.

    Where the profile runs unsliced plans as ``jnp.einsum`` does (its
    ``unsliced_executor`` is "xla"), ``plan`` runs on it, and its path was
    einslice's to choose (``optimize="auto"``, no tree given): a plan along
    the path ``jnp.einsum(optimize="greedy")`` takes (`jnp_greedy_path`),
    when it too runs unsliced on "xla" and is estimated within `PATH_TIE`
    of ``plan``. Its program is then jnp's own, bit for bit. None otherwise.
    """
    if not (
        plan.executor == "xla"
        and request.profile.unsliced_executor == "xla"
        and request.optimize in ("auto", True)
        and request.tree is None
    ):
        return None
    eq = request.equation
    path = jnp_greedy_path(eq.terms, eq.output, eq.sizes)
    if path == tuple(tuple(pair) for pair in plan.path):
        return None
    peer = replace(request, optimize=path)
    try:
        other = _plan_of(peer, _planned(peer))
    except EinsliceError:  # (a limit its derivative does not fit)
        return None
    if other.executor != "xla" or other.cost.time > plan.cost.time * (1 + PATH_TIE):
        return None
    return other


# The requests of plans whose tree may grow (`growable`), by the plan's
# identity (an equal plan from a path the caller gave must not grow): the
# runner (``_exec._run``) searches again from them. A plan no one holds goes.
_GROWABLE: dict[int, tuple[weakref.ref[Plan], PlanRequest]] = {}


def remember_growable(plan: Plan, request: PlanRequest) -> None:
    """Note ``request`` as ``plan``'s, when its tree may grow (`growable`)."""
    if growable(request):
        key = id(plan)
        gone = lambda _, key=key: _GROWABLE.pop(key, None)  # noqa: E731
        _GROWABLE[key] = (weakref.ref(plan, gone), request)


def growable(request: PlanRequest) -> bool:
    """Whether a plan of ``request`` may get a longer tree search later.

    Only a tree from the large-network search under ``optimize="auto"``
    (more than 12 operands after preparation, no tree given, one device): a
    path, strategy or optimizer the caller chose is kept, and opt_einsum's
    exact dynamic programming below 12 operands has nothing to grow.

    Example:
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> eq = build_equation(parse_subscripts("ij,jk->ik", 2), ((4, 5), (5, 6)))
        >>> growable(PlanRequest(eq, 4, "float32", 2**20))
        False
    """
    return (
        request.optimize in ("auto", True)
        and request.tree is None
        and request.placement.single
        and len(prepare_terms(request.equation)) > _REPLAN_MAX_OPERANDS
    )


def runner_up_request(request: PlanRequest) -> PlanRequest | None:
    """``request`` along its tree search's runner-up tree (None: there is none).

    The tree the search ranked second (`_search.Found.runner_up`): a plan
    that grows with use times it beside the winner's (``_exec._run``).
    """
    other = _found(request).other_tree
    return None if other is None else replace(request, tree=other)


def grown_plans(request: PlanRequest, search: TreeSearch) -> tuple[Plan, Plan | None]:
    """The plans of ``request`` searched by ``search``, and of its runner-up tree.

    The same request (limit, semiring, dtype, profile, devices) with
    ``optimize=search``; the runner-up is the tree that search ranked second,
    sliced again for the limit (`runner_up_request`; None when there is none
    or its slicing does not fit). What a plan that grows with use searches
    (``_exec._grow.grown_plans``, in a child process: pure Python).

    Example:
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> eq = build_equation(parse_subscripts("ij,jk->ik", 2), ((4, 5), (5, 6)))
        >>> grown_plans(PlanRequest(eq, 4, "float32", 2**20), TreeSearch())[0].flops
        240
    """
    grown = replace(request, optimize=search)
    other = runner_up_request(grown)
    try:
        second = None if other is None else make_plan(other)
    except MemoryLimitError:  # (its slicing at the limit may not fit)
        second = None
    return make_plan(grown), second


def grown_request(plan: Plan) -> PlanRequest | None:
    """The request ``plan`` was made from, if its tree may grow (`growable`)."""
    entry = _GROWABLE.get(id(plan))
    return entry[1] if entry is not None and entry[0]() is plan else None


@lru_cache(maxsize=1024)
def _planned(request: PlanRequest, probe: bool = False) -> _Parts:
    """`make_plan`'s parts (``probe``: skip finding ``gradient_limit``)."""
    try:
        found = _found(request)
    except MemoryLimitError as error:
        if not request.gradient:
            raise
        # The forward pass alone does not fit: name a limit under which the
        # derivative fits too, not the forward's (retried, that one was
        # refused again: `bb->` on a 2x2 float32 matrix at 112 bytes named
        # 196, then 1192).
        needed = _gradient_limit(request, error.smallest_limit, gradient=True)
        raise _derivative_error(request, needed, error.flops) from None
    if not request.gradient:
        return _finish(request, found.body, found.forward, probe)
    parts = _finish(request, found.body, found.forward, True)
    limit = request.memory_limit
    if parts.tangent.cost.peak_bytes <= limit:
        return parts
    fitted = _fit_derivative(request, found)
    if fitted is not None:
        return fitted
    if probe:
        return parts  # its gradient_limit: a lower bound
    needed = _gradient_limit(request, parts.gradient_limit, gradient=True)
    raise _derivative_error(request, needed, parts.tangent.cost.flops)


def _derivative_error(
    request: PlanRequest, needed: int, flops: int
) -> MemoryLimitError:
    """The error for a ``gradient=True`` request whose derivative needs ``needed``."""
    limit = request.memory_limit
    return MemoryLimitError(
        f"the derivative of {request.equation.brief()} needs at least "
        f"{format_bytes(needed)} ({needed} bytes) but memory_limit is "
        f"{format_bytes(limit)}, under every plan found; raise "
        "memory_limit to at least that, or plan without gradient=True if no "
        "derivative is taken.",
        smallest_limit=needed,
        flops=flops,
    )


@dataclass(frozen=True, slots=True)
class _Derived:
    """The derivative's parts: its slicing and the gradient limit.

    ``gradient_limit``: the smallest limit under which the derivative fits.
    Both in the steps' own figures, as `_Parts`'s.
    """

    tangent: Slicing
    gradient_limit: int


@dataclass(frozen=True, slots=True)
class _Parts:
    """What a `Plan` is made of, as the planner finds it (the steps' own figures).

    ``forward`` and ``tangent`` are the two passes' slicings and costs,
    ``hoisted`` the steps run once after the chunk loop, ``gradient_limit``
    the smallest limit under which the derivative fits: all within the
    request's ``memory_limit``, without the operands' promotion copies
    (`_plan_of` adds them). ``derived``: the derivative's parts, or (a
    value-only plan's, see `_finish`) what finds them on first use.
    """

    body: Body
    forward: Slicing
    hoisted: int
    derived: _Derived | Deferred

    @property
    def tangent(self) -> Slicing:
        """The derivative pass's slicing and cost (found now if deferred)."""
        return _derived_of(self.derived).tangent

    @property
    def gradient_limit(self) -> int:
        """The smallest limit under which the derivative fits (ditto)."""
        return _derived_of(self.derived).gradient_limit


@dataclass(frozen=True, slots=True)
class Deferred:
    """A value-only plan's derivative, found on first use (a `DerivativeSource`).

    Planning the value alone (no ``gradient=True``) used to slice the
    derivative too, for a derivative that is then never taken (Grids_15's
    partition function: `make_plan` 1.32 s, 0.41 s deferred). The derivative's
    slicing and gradient limit are a pure function of what this holds: the
    request, the body and the chunks the derivative's search may descend from
    (the forward's, in their order); `resolve` finds them once (cached),
    exactly as `_finish` would have. Only plans whose forward pass does not
    depend on them are deferred (no hoistable steps: see `_finish`).

    Hashed and compared by those three, which fix the derivative: plans that
    compare equal take the same derivative (the hash is kept: jit hashes a
    plan, a static argument, at each call).
    """

    request: PlanRequest
    body: Body
    seeds: tuple[tuple[int, int], ...]
    key: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", hash((self.request, self.body, self.seeds)))

    def __hash__(self) -> int:
        return self.key

    def resolve(self) -> Derivative:
        """The plan's `Derivative` (its figures with the promotion copies)."""
        return _plan_derivative(self)

    def unsliced_peak(self) -> int:
        """The derivative's predicted peak unsliced, with the promotion copies.

        One cost evaluation, not the derivative's slicing search.
        """
        request = self.request
        cost = cached_cost(
            self.body,
            request.equation.sizes,
            {},
            request.itemsize,
            request.profile,
            tangent=True,
        )
        return cost.peak_bytes + 2 * request.cast_bytes


@lru_cache(maxsize=1024)
def _deferred_parts(deferred: Deferred) -> _Derived:
    """What `_finish` finds for the derivative of a value-only plan.

    The same calls in the same order: the slicing (descending from the
    forward's chunks too when none fits), re-spread over the devices, and
    the gradient limit re-planned when the derivative does not fit. (No
    hoisting: only bodies without hoistable steps are deferred.)
    """
    request, body = deferred.request, deferred.body
    sizes, itemsize = request.equation.sizes, request.itemsize
    limit, profile = request.memory_limit, request.profile
    seeds = dict(deferred.seeds)
    tangent = _tangent_slicing(body, sizes, itemsize, limit, profile, seeds)
    if request.placement.spread > 1:
        tangent = _spread_pass(request, body, tangent, is_tangent=True)
    return _Derived(tangent, _gradient_limit_of(request, tangent, probe=False))


def _derived_of(derived: _Derived | Deferred) -> _Derived:
    """The derivative's parts, found now when they were deferred."""
    return _deferred_parts(derived) if isinstance(derived, Deferred) else derived


@lru_cache(maxsize=1024)
def _plan_derivative(deferred: Deferred) -> Derivative:
    """A deferred derivative in the plan's figures (`_derivative_of`)."""
    return _derivative_of(_deferred_parts(deferred), deferred.request.cast_bytes)


def _derivative_of(derived: _Derived, cast: int) -> Derivative:
    """The derivative's parts as a plan states them: with the promotion copies.

    The derivative holds each operand's copy and its tangent.
    """
    tangent = derived.tangent
    return Derivative(
        chunks=tuple(sorted(tangent.chunks.items())),
        cost=replace(tangent.cost, peak_bytes=tangent.cost.peak_bytes + 2 * cast),
        gradient_limit=derived.gradient_limit + 2 * cast,
    )


def _plan_of(request: PlanRequest, parts: _Parts, executor: str | None = None) -> Plan:
    """The one place a `Plan` is made: ``parts`` and what ``request`` says.

    The operands' promotion copies (``cast_bytes``) are temporaries too: the
    forward pass holds each copy, the derivative each copy and its tangent.
    A deferred derivative stays deferred (the plan holds `Deferred`).
    ``executor`` None: the default one (`default_executor`).
    """
    if executor is None:
        plan = _plan_of(request, parts, "einslice")
        chosen = default_executor(plan, request.profile.unsliced_executor)
        return plan if chosen == "einslice" else _plan_of(request, parts, chosen)
    cast, equation, placement = request.cast_bytes, request.equation, request.placement
    forward, derived = parts.forward, parts.derived
    return Plan(
        equation=equation,
        semiring=request.semiring,
        itemsize=request.itemsize,
        prepared=parts.body.prepared,
        steps=parts.body.steps,
        path=_path_of(parts.body),
        chunks=tuple(sorted(forward.chunks.items())),
        derivative=(
            derived if isinstance(derived, Deferred) else _derivative_of(derived, cast)
        ),
        cost=replace(forward.cost, peak_bytes=forward.cost.peak_bytes + cast),
        naive_flops=naive_flops(equation.terms, equation.sizes),
        memory_limit=request.memory_limit + cast,
        dtype=request.dtype,
        devices=placement.devices,
        mesh=placement.mesh,
        mesh_axis=placement.mesh_axis,
        sharded=placement.sharded,
        hoisted=parts.hoisted,
        executor=executor,
        precision=request.precision,
        profile=request.profile,
    )


def default_executor(plan: Plan, unsliced: str) -> str:
    """The executor a plan runs on unless tuning picks another.

    ``unsliced`` (the profile's ``unsliced_executor``) for a plan that
    slices nothing, in neither pass: its forward chunks are none, and its
    derivative is known unsliced or, deferred, predicted to fit unsliced
    (``jnp.einsum``'s derivative holds every intermediate at once); where
    that executor runs the plan (one device, a semiring ``jnp.einsum``
    computes), but for 8-byte types on a device that emulates float64
    (``Profile.wide_step_factor`` > 1). Else "einslice", which runs every
    plan.

    Example:
        >>> import einslice
        >>> tpu = einslice.profiles.TPU
        >>> p = einslice.plan("ij,jk->ik", (64, 64), (64, 64), profile=tpu)
        >>> p.executor, default_executor(p, "einslice")
        ('xla', 'einslice')
        >>> einslice.plan("ij,jk->ik", (64, 64), (64, 64)).executor
        'einslice'
    """
    facts = EXECUTOR_FACTS.get(unsliced)
    if facts is None or unsliced == "einslice" or plan.chunks:
        return "einslice"
    if plan.itemsize > 4 and plan.profile and plan.profile.wide_step_factor > 1:
        # float64 emulated (a TPU): jnp.einsum's own program for the seed
        # formula at n=32 held 539 MB of temporaries there, einslice's steps
        # none (tpu_v5e.md); the peak model counts einslice's steps
        return "einslice"
    if not (facts.compiles and facts.runs(plan)):
        return "einslice"
    derivative = plan.derivative
    if isinstance(derivative, Deferred):
        fits = derivative.unsliced_peak() <= plan.memory_limit
    else:
        fits = not derivative.resolve().chunks  # (a Derivative resolves to itself)
    return unsliced if fits else "einslice"


@dataclass(frozen=True, slots=True)
class _Found:
    """The forward search's winner and its runners-up (best first), all fitting.

    ``other_tree``: the tree search's runner-up tree (`_search.Found`), if a
    tree search ran and ranked another tree below the winner's.
    """

    body: Body
    forward: Slicing
    runners_up: tuple[tuple[Body, Slicing], ...]
    other_tree: SearchFound | None = None


def _found(request: PlanRequest) -> _Found:
    """`_search` for ``request``, keyed on what the search depends on only.

    (Its dtype name, placement, gradient, casts and precision do not change
    the forward search: plans that differ in them share it.)
    """
    return _search(
        replace(
            request,
            dtype="",
            placement=ONE_DEVICE,
            gradient=False,
            cast_bytes=0,
            precision=None,
        )
    )


@lru_cache(maxsize=256)
def _search(request: PlanRequest) -> _Found:
    """Path and forward slicing: the fastest estimate within the limit.

    A ``request.tree`` (searched already) is taken instead of searching one.
    """
    equation, memory_limit = request.equation, request.memory_limit
    semiring_named(request.semiring)  # refuses an unknown name
    run = _ForwardSearch(request)
    forward = run.slicing(run.tree_path)
    fixed = request.tree is not None or not isinstance(request.optimize, str | bool)
    if not forward.fits and not fixed:
        forward = run.frugal(forward)
    if not forward.fits:
        raise MemoryLimitError(
            f"memory_limit={format_bytes(memory_limit)} ({memory_limit} bytes) is "
            "below the smallest feasible plan "
            f"({format_bytes(forward.cost.peak_bytes)}, "
            f"{forward.cost.peak_bytes} bytes, slicing "
            f"{sorted(equation.names[i] for i in forward.chunks)}); raise the "
            "limit or pass memory_limit=None.",
            smallest_limit=forward.cost.peak_bytes,
            flops=forward.cost.flops,
        )
    body, forward = run.refined(forward)
    return _Found(body, forward, run.runners_up(body, forward), run.other_tree)


class _ForwardSearch:
    """One forward search: paths and chunkings tried, the best body of each.

    ``bodies`` maps each chunking of the current slicing search to the best
    body (path) found for it; ``fitting`` keeps every (path, chunking) tried
    that fits the limit, across searches: the runners-up of the ranking.
    """

    def __init__(self, request: PlanRequest):
        self.equation = equation = request.equation
        self.itemsize = itemsize = request.itemsize
        self.memory_limit = memory_limit = request.memory_limit
        self.optimize = optimize = request.optimize
        self.semiring = semiring = request.semiring
        self.profile = profile = request.profile
        tree = request.tree
        self.prepared = prepare_terms(equation)
        self.bodies: dict[tuple[int, ...], Body] = {}
        self.fitting: dict[tuple, tuple[Body, dict[int, int], Cost]] = {}
        n_operands = len(self.prepared)
        # Re-planning for each trial chunking uses the fast greedy search when
        # the strategy is "auto"; the chosen chunking then gets one full search.
        self.replan = (
            tree is None
            and isinstance(optimize, str | bool)
            and n_operands <= _REPLAN_MAX_OPERANDS
        )
        self.replanner = "greedy" if optimize in ("auto", True) else optimize
        sizes, output = equation.sizes, equation.output
        self.grouped = (
            two_group_paths(self.prepared, output, sizes) if self.replan else []
        )
        # Large networks under "auto": cotengra's hyper-search, slicing inside it
        # (_search.py); the indices it sliced seed einslice's chunk sizing.
        self.searched: tuple[int, ...] = ()
        self.other_tree: SearchFound | None = None  # the tree search's runner-up
        search = optimize if isinstance(optimize, TreeSearch) else None
        since = None  # (a search the caller asked for keeps its own settings)
        if optimize in ("auto", True) and n_operands > _REPLAN_MAX_OPERANDS:
            search, since = TreeSearch(), clock()  # bounded: `planning_bound`
        if tree is not None:  # a tree searched already (pgm's)
            self.tree_path, self.searched = tree.path, tree.sliced
        elif search is not None:
            found = search_tree(
                self.prepared,
                output,
                sizes,
                itemsize,
                memory_limit,
                semiring=semiring,
                seed=search.seed,
                trials=search.trials,
                patience=search.patience,
                search_seconds=search.seconds,
                profile=profile,
                given=equation.terms,
                runs=PLAN_RUNS if search.runs is None else search.runs,
                budget=search.budget,
                since=since,
            )
            self.tree_path, self.searched = found.path, found.sliced
            self.other_tree = found.runner_up
        else:
            self.tree_path = self.path(sizes, optimize)

    def path(self, local: Sequence[int], strategy: object) -> Path:
        """A path over the prepared operands for index sizes ``local``."""
        output = self.equation.output
        return find_path(self.prepared, output, dict(enumerate(local)), strategy)

    def body_of(self, path: Path, local: Sequence[int]) -> Body:
        """The per-chunk program of ``path`` with chunk sizes ``local``."""
        eq = self.equation
        steps = cached_steps(self.prepared, eq.output, path, tuple(local))
        return Body(eq.terms, self.prepared, steps, eq.output, self.semiring)

    def slicing(self, base_path: Path) -> Slicing:
        """The best chunking of ``base_path`` (re-planned per chunking if allowed)."""
        sizes = self.equation.sizes
        self.bodies.clear()
        base_body = self.body_of(base_path, sizes)
        candidates = _candidates(base_body, sizes)
        candidates = list(dict.fromkeys([*self.searched, *candidates]))
        seeds = self.searched if base_path == self.tree_path else ()

        def cost(chunks: dict[int, int]) -> Cost:
            return self.chunking_cost(base_path, base_body, chunks)

        found = choose_slicing(
            cost,
            sizes,
            candidates,
            self.memory_limit,
            start=dict.fromkeys(seeds, 1),
            profile=self.profile,
            steps=len(base_body.steps),
            explore_from=(
                REPLANNED_EXPLORE_MIN_SECONDS if self.replan else EXPLORE_MIN_SECONDS
            ),
        )
        if _key(found.chunks) not in self.bodies:
            cost(found.chunks)
        return found

    def chunking_cost(
        self, base_path: Path, base_body: Body, chunks: dict[int, int]
    ) -> Cost:
        """The best cost of a chunking over the base path and its re-plans.

        Records the best body in ``bodies`` and every fitting one in ``fitting``.
        """
        sizes, limit = self.equation.sizes, self.memory_limit
        best_body = base_body
        best = cached_cost(base_body, sizes, chunks, self.itemsize, self.profile)
        if best.peak_bytes <= limit:
            self.fitting[(base_body.steps, _key(chunks))] = (base_body, chunks, best)
        local = chunked_sizes(sizes, chunks)
        paths = [base_path] if chunks else []
        if self.replan:
            paths.append(self.path(local, self.replanner))
            paths.extend(self.grouped)
        for path in paths:
            body = self.body_of(path, local)
            cost = cached_cost(body, sizes, chunks, self.itemsize, self.profile)
            if cost.peak_bytes <= limit:
                self.fitting[(body.steps, _key(chunks))] = (body, chunks, cost)
            if _better(cost, best, limit):
                best_body, best = body, cost
        self.bodies[_key(chunks)] = best_body
        return best

    def frugal(self, forward: Slicing) -> Slicing:
        """Retry with orders that keep few intermediates alive, when none fit.

        A FLOPs-optimal order can keep many intermediates alive that no
        slicing shrinks; orders that keep few alive may fit where it cannot.
        The smallest peak is kept when none fits.
        """
        for strategy in ("greedy", False):
            path = self.path(self.equation.sizes, strategy)
            kept = (forward, dict(self.bodies))
            forward = self.slicing(path)
            if forward.fits:
                break
            if kept[0].cost.peak_bytes <= forward.cost.peak_bytes:
                forward = kept[0]
                self.bodies.clear()
                self.bodies.update(kept[1])
        return forward

    def refined(self, forward: Slicing) -> tuple[Body, Slicing]:
        """The chosen chunking's body, re-planned with the full path search.

        Trial chunkings re-plan with the fast replanner; the chosen one gets
        the strategy asked for, kept when it is better.
        """
        body = self.bodies[_key(forward.chunks)]
        if self.replan and forward.chunks and self.replanner != self.optimize:
            sizes = self.equation.sizes
            local = chunked_sizes(sizes, forward.chunks)
            full_search = self.body_of(self.path(local, self.optimize), local)
            cost = evaluate(
                full_search, sizes, forward.chunks, self.itemsize, profile=self.profile
            )
            if _better(cost, forward.cost, self.memory_limit):
                body, forward = full_search, Slicing(forward.chunks, cost, True)
        return body, forward

    def runners_up(
        self, body: Body, forward: Slicing
    ) -> tuple[tuple[Body, Slicing], ...]:
        """The best fitting (body, slicing) pairs tried, other than the chosen."""
        chosen = (body.steps, _key(forward.chunks))
        others = [
            (b, Slicing(dict(chunks), cost, True))
            for key, (b, chunks, cost) in self.fitting.items()
            if key != chosen
        ]
        others.sort(key=lambda o: biased_ranking(o[1].cost, o[1].chunks, self.profile))
        return tuple(others[:_MAX_RUNNERS_UP])


def _finish(
    request: PlanRequest,
    body: Body,
    forward: Slicing,
    probe: bool = False,
    tangent_seeds: dict[int, int] | None = None,
) -> _Parts:
    """The derivative's slicing, placement, hoisting and gradient limit.

    ``probe``: the gradient limit is left a lower bound (not re-planned).
    ``tangent_seeds``: where the derivative's slicing may descend from
    besides none when that does not fit (default the forward's chunks).

    A request without ``gradient`` (not probing) whose body has no hoistable
    steps gets its derivative deferred (`Deferred`, found on first use):
    the forward pass does not depend on it then. (Hoisting does: the final
    products leave the loop only when the derivative's slicing fits beside
    their buffers, so a body with hoistable steps slices its derivative now.)
    """
    sizes, itemsize = request.equation.sizes, request.itemsize
    limit, profile = request.memory_limit, request.profile
    seeds = forward.chunks if tangent_seeds is None else tangent_seeds
    if not request.gradient and not probe and not hoistable_steps(body):
        if request.placement.spread > 1:
            forward = _spread_pass(request, body, forward, is_tangent=False)
        key = replace(request, precision=None)  # (it changes no derivative)
        return _Parts(body, forward, 0, Deferred(key, body, tuple(seeds.items())))
    tangent = _tangent_slicing(body, sizes, itemsize, limit, profile, seeds)
    if request.placement.spread > 1:
        forward, tangent = _spread(request, body, forward, tangent)
    hoisted = 0
    if forward.chunks or tangent.chunks:
        hoisted, forward, tangent = _hoist(
            body, sizes, itemsize, limit, forward, tangent, profile
        )
    gradient_limit = _gradient_limit_of(request, tangent, probe)
    return _Parts(body, forward, hoisted, _Derived(tangent, gradient_limit))


def _gradient_limit_of(request: PlanRequest, tangent: Slicing, probe: bool) -> int:
    """The gradient limit of a derivative sliced as ``tangent``.

    The request's limit when it fits; else re-planned (`_gradient_limit`),
    or when probing its peak (a lower bound).
    """
    limit = request.memory_limit
    if tangent.cost.peak_bytes <= limit:
        return limit
    if probe:
        return tangent.cost.peak_bytes
    return _gradient_limit(request, tangent.cost.peak_bytes)


def _tangent_slicing(
    body: Body,
    sizes: tuple[int, ...],
    itemsize: int,
    memory_limit: int,
    profile: Profile,
    seeds: dict[int, int] | None = None,
) -> Slicing:
    """The derivative pass's slicing of ``body``, leaving room for hoisting.

    Hoisting keeps the loop's result and its cotangent beside the derivative
    pass: room is left for them, else the slicing would fill the limit first.
    When no slicing of the largest nodes' indices fits, the descent is tried
    again from ``seeds`` (the forward pass's chunks, which may slice indices
    of smaller nodes: a tree search's slices of a large network).
    """
    room = (
        2 * output_bytes(body, sizes, itemsize, profile) if hoistable_steps(body) else 0
    )

    def cost(chunks: dict[int, int]) -> Cost:
        return cached_cost(body, sizes, chunks, itemsize, profile, tangent=True)

    limit = max(memory_limit - room, 0)
    steps = len(body.steps)
    candidates = _candidates(body, sizes)
    found = choose_slicing(cost, sizes, candidates, limit, profile=profile, steps=steps)
    if found.fits or not seeds:
        return found
    wider = list(dict.fromkeys([*seeds, *candidates]))
    seeded = choose_slicing(
        cost, sizes, wider, limit, start=dict(seeds), profile=profile, steps=steps
    )
    if seeded.fits or seeded.cost.peak_bytes < found.cost.peak_bytes:
        return seeded
    return found


# How many forward searches under ever smaller limits `_fit_derivative` tries.
_TIGHTER_SEARCHES = 4


def _fit_derivative(request: PlanRequest, found: _Found) -> _Parts | None:
    """A plan whose forward and derivative passes both fit (the best's does not).

    The derivative pass slices its own indices but shares the forward's path,
    and keeps about twice the forward chunk's buffers plus every operand's
    cotangent: a path whose intermediates are small enough when sliced may
    not be the fastest forward one. Tried in order: the forward search's
    runners-up (fastest first), then paths searched for a smaller forward
    peak (the limit less the operands' cotangents, halved; then halved
    again), each with its forward slicing chosen again under the real limit.
    None when none fits.
    """
    equation, itemsize, limit = request.equation, request.itemsize, request.memory_limit
    profile = request.profile

    def finish(body: Body, forward: Slicing, seeds=None) -> _Parts:
        return _finish(request, body, forward, True, seeds)

    for body, forward in found.runners_up:
        parts = finish(body, forward)
        if parts.tangent.cost.peak_bytes <= limit:
            return parts
    # a tree the caller searched is searched again with the default settings
    research = request.optimize if request.tree is None else TreeSearch()
    if not isinstance(research, str | bool | TreeSearch):
        return None  # an explicit path or optimizer: the path is the caller's
    operands = itemsize * sum(prod(s) for s in equation.shapes)
    target = (limit - 2 * operands) // 2
    for _ in range(_TIGHTER_SEARCHES):
        if target <= 0:
            break
        try:
            tight = _found(
                replace(request, memory_limit=target, optimize=research, tree=None)
            )
        except MemoryLimitError:
            break
        body, sizes = tight.body, equation.sizes
        seeds = tight.forward.chunks
        forward = choose_slicing(
            lambda c, body=body, sizes=sizes: cached_cost(
                body, sizes, c, itemsize, profile
            ),
            sizes,
            list(dict.fromkeys([*seeds, *_candidates(body, sizes)])),
            limit,
            start=dict(seeds),
            profile=profile,
            steps=len(body.steps),
        )
        # the derivative descends from the tight search's chunks, under
        # which about twice the forward chunk's buffers fit
        parts = finish(body, forward, seeds)
        if parts.tangent.cost.peak_bytes <= limit:
            return parts
        target //= 2
    return None


def _gradient_limit(request: PlanRequest, needed: int, gradient: bool = False) -> int:
    """A memory limit under which the re-planned derivative fits.

    A larger limit changes the forward plan and with it the derivative's
    needs: starting from what the derivative ``needed``, raise the limit until
    it holds once re-planned (at most 8 tries), so that retrying with it works
    (``gradient``: re-planned with ``gradient=True``).
    """
    limit = needed
    for _ in range(8):
        retry = _planned(
            replace(request, memory_limit=limit, gradient=gradient), probe=True
        )
        if retry.tangent.cost.peak_bytes <= limit:
            break
        limit = retry.tangent.cost.peak_bytes
    return limit


@lru_cache(maxsize=256)
def rank_plans(request: PlanRequest, count: int = 4) -> tuple[Plan, ...]:
    """The best few distinct plans within the limit, best estimate first.

    The first is ``make_plan``'s (with ``gradient``, as it plans for
    derivatives); the others are the search's runners-up (other paths or
    chunkings), each with its own derivative slicing, keeping only those
    whose derivative fits where the first one's does.

    Example:
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> eq = build_equation(parse_subscripts("ij,jk,kl->il", 3), ((64, 64),) * 3)
        >>> plans = rank_plans(PlanRequest(eq, 4, "float32", 2**20))
        >>> len(plans) > 1 and all(p.peak_bytes <= 2**20 for p in plans)
        True
    """
    return tuple(_plan_of(request, parts) for parts in _ranked(request, count))


@lru_cache(maxsize=256)
def _ranked(request: PlanRequest, count: int) -> tuple[_Parts, ...]:
    """`rank_plans`'s parts."""
    limit = request.memory_limit
    best = _planned(request)
    ranked = [best]
    seen = {(best.body.steps, _key(best.forward.chunks))}
    gradient_fits = best.tangent.cost.peak_bytes <= limit
    for body, forward in _found(request).runners_up:
        if len(ranked) >= count:
            break
        parts = _finish(request, body, forward, True)
        key = (parts.body.steps, _key(parts.forward.chunks))
        if key in seen or parts.forward.cost.peak_bytes > limit:
            continue
        if gradient_fits and parts.tangent.cost.peak_bytes > limit:
            continue
        seen.add(key)
        ranked.append(parts)
    return tuple(ranked)


def tuning_candidates(request: PlanRequest, count: int = 4) -> tuple[Plan, ...]:
    """What tuning measures: the best ``count`` plans, and other executors'.

    `with_other_executors`, offered the plan along ``jnp.einsum``'s greedy
    path (`jnp_greedy_path`) too when ``optimize`` is "auto" (a path or
    strategy the caller chose is not second-guessed).

    Example:
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> eq = build_equation(parse_subscripts("ij,jk->ik", 2), ((8, 8),) * 2)
        >>> request = PlanRequest(eq, 4, "float32", 2**20)
        >>> [p.executor for p in tuning_candidates(request, count=1)]
        ['einslice', 'xla']
    """
    greedy = None
    if request.optimize == "auto" and request.tree is None:
        eq = request.equation
        path = jnp_greedy_path(eq.terms, eq.output, eq.sizes)
        greedy = replace(request, optimize=path)
    return with_other_executors(request, count, greedy)


def with_other_executors(
    request: PlanRequest, count: int, greedy: PlanRequest | None = None
) -> tuple[Plan, ...]:
    """The first ``count`` ranked plans, and the best unsliced one on other executors.

    Every other executor that compiles and runs a plan (its ``ExecutorFacts``:
    the plain ``jnp.einsum`` lowering, executor ``"xla"``, for unsliced
    plans of a semiring it computes, two or more operands, one device; and
    einslice's own steps where the profile runs unsliced plans on "xla",
    `default_executor`) is offered the best unsliced plan, and every other
    executor than einslice's own ``greedy``'s first plan (a request for
    opt_einsum's greedy path: with the plain lowering, the program
    ``jnp.einsum(optimize="greedy")`` runs) where its path differs:
    measuring then never keeps a program slower than the peer's own. Each is
    made as a plan of its own (`_plan_of`), not a copy with its executor
    changed.

    Example (a "max" plan: ``jnp.einsum`` computes sums only):
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> eq = build_equation(parse_subscripts("ij,jk->ik", 2), ((8, 8),) * 2)
        >>> request = PlanRequest(eq, 4, "float32", 2**20, semiring="max")
        >>> [p.executor for p in with_other_executors(request, count=1)]
        ['einslice']
    """
    ranked = _ranked(request, count)
    chosen = [_plan_of(request, parts) for parts in ranked]
    offered = [(request, next((p for p in ranked if not p.forward.chunks), None))]
    if greedy is not None:
        try:
            offered.append((greedy, _ranked(greedy, 1)[0]))
        except EinsliceError:  # MemoryLimitError: greedy's path needs more
            pass
    for source, parts in offered:
        if parts is None:
            continue
        for facts in EXECUTOR_FACTS.values():
            # (greedy's path on einslice's own steps is no peer's program)
            if not facts.compiles or (source is greedy and facts.name == "einslice"):
                continue
            plan = _plan_of(source, parts, facts.name)
            if facts.runs(plan) and not any(
                c.executor == plan.executor and c.path == plan.path for c in chosen
            ):
                chosen.append(plan)
    return tuple(chosen)


def hoistable_steps(body: Body) -> int:
    """How many final steps multiply in operands that hold output indices only.

    Such a chain of elementwise products can run once after the chunk loop
    (the semiring's sum distributes over it). The steps before it must leave a
    result holding every output index, so that the loop accumulates a block of
    the output's shape.

    Example:
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> from einslice._plan._order import to_steps
        >>> eq = build_equation(parse_subscripts("ij,ik,jk->ij", 3), ((2, 2),) * 3)
        >>> steps, _ = to_steps(eq.terms, eq.output, ((1, 2), (0, 1)))
        >>> hoistable_steps(Body(eq.terms, eq.terms, steps, eq.output, "sum"))
        1
    """
    n, steps = len(body.prepared), body.steps
    output = set(body.output)
    count, node = 0, n + len(steps) - 1
    for s in reversed(range(1, len(steps))):
        step = steps[s]
        if n + s != node or step.contracted:
            break
        sides = (step.left, step.right)
        hoisted = [x for x in sides if x < n and set(body.prepared[x]) <= output]
        rest = [x for x in sides if x not in hoisted[:1]]
        if not hoisted or rest[0] < n:
            break
        count, node = count + 1, rest[0]
    while count and set(steps[node - n].result) != output:
        count -= 1  # the loop's result must have the output's shape
        node = n + len(steps) - 1 - count
    return count


def _hoist(
    body: Body,
    sizes: tuple[int, ...],
    itemsize: int,
    limit: int,
    forward: Slicing,
    tangent: Slicing,
    profile: Profile,
) -> tuple[int, Slicing, Slicing]:
    """Hoist the final products out of the loop when the extra buffers fit.

    The loop's result is then a temporary of the output's size (and, for the
    derivative, its cotangent too).
    """
    count = hoistable_steps(body)
    if not count:
        return 0, forward, tangent
    extra = output_bytes(body, sizes, itemsize, profile)
    grown = [
        Slicing(
            s.chunks, replace(s.cost, peak_bytes=s.cost.peak_bytes + k * extra), s.fits
        )
        for s, k in ((forward, 1), (tangent, 2))
    ]
    if any(
        g.cost.peak_bytes > max(limit, s.cost.peak_bytes)
        for g, s in zip(grown, (forward, tangent), strict=True)
    ):
        return 0, forward, tangent
    return count, grown[0], grown[1]


def _spread(
    request: PlanRequest, body: Body, forward: Slicing, tangent: Slicing
) -> tuple[Slicing, Slicing]:
    """Re-slice both passes so that every device gets summed chunks to scan."""
    return (
        _spread_pass(request, body, forward, is_tangent=False),
        _spread_pass(request, body, tangent, is_tangent=True),
    )


def _spread_pass(
    request: PlanRequest, body: Body, chosen: Slicing, is_tangent: bool
) -> Slicing:
    """One pass re-sliced so that every device gets summed chunks to scan.

    Kept only within the limit (else this pass runs on one device).
    """
    sizes, itemsize = request.equation.sizes, request.itemsize
    limit, devices = request.memory_limit, request.placement.spread
    indices = [i for t in body.terms for i in t]
    chunks = spread_chunks(sizes, body.output, indices, chosen.chunks, devices)
    if chunks != chosen.chunks:
        cost = evaluate(
            body,
            sizes,
            chunks,
            itemsize,
            tangent=is_tangent,
            profile=request.profile,
        )
        if cost.peak_bytes <= max(limit, chosen.cost.peak_bytes):
            chosen = Slicing(chunks, cost, chosen.fits)
    return chosen


def _key(chunks: dict[int, int]) -> tuple[int, ...]:
    return tuple(sorted(chunks.items()))  # type: ignore[arg-type]


def _better(a: Cost, b: Cost, limit: int) -> bool:
    a_fits, b_fits = a.peak_bytes <= limit, b.peak_bytes <= limit
    if a_fits != b_fits:
        return a_fits
    return a.time < b.time if a_fits else a.peak_bytes < b.peak_bytes


def _path_of(body: Body) -> tuple[tuple[int, ...], ...]:
    """The node-id pairs of a body's steps, as an opt_einsum path."""
    n = len(body.prepared)
    alive = list(range(n))
    path = []
    for s, step in enumerate(body.steps):
        path.append((alive.index(step.left), alive.index(step.right)))
        alive.remove(step.left)
        alive.remove(step.right)
        alive.append(n + s)
    return tuple(path)


def _candidates(body: Body, sizes: tuple[int, ...]) -> list[int]:
    """Indices worth slicing: all of them, or for big networks the largest nodes'."""
    every = list(dict.fromkeys(i for t in body.terms for i in t))
    if len(every) <= _MAX_CANDIDATES:
        return every
    nodes = [*body.prepared, *(s.result for s in body.steps)]

    def numel(term: tuple[int, ...]) -> int:
        total = 1
        for i in term:
            total *= sizes[i]
        return total

    ranked: list[int] = []
    for node in sorted(nodes, key=numel, reverse=True):
        for i in sorted(node, key=lambda i: -sizes[i]):
            if i not in ranked:
                ranked.append(i)
        if len(ranked) >= _MAX_CANDIDATES:
            break
    return ranked[:_MAX_CANDIDATES]
