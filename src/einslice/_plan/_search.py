"""Contraction-tree search for large networks, with slicing inside the search.

One path finder for every network too large for opt_einsum's exact dynamic
programming (``einsum`` with ``optimize="auto"`` and ``einslice.pgm``): a
cotengra ``HyperOptimizer`` over kahypar partitions and greedy orders, its
hyper-parameters tuned by optuna, each trial tree improved by subtree
reconfiguration and then sliced and re-configured (``slicing_reconf_opts``)
until its largest intermediate fits a target derived from the memory limit.
einslice's own chunk sizing (``_slice.py``) then starts from the indices
cotengra sliced.

The objective is einslice's estimated time under the limit (``_cost.py``), not
FLOPs: each trial tree is turned into einslice's pairwise steps and costed with
its sliced indices at chunk 1, and a tree whose predicted peak is over the limit
is penalised by how far it is over. Why this and not ranking the trials
afterwards: cotengra's hyper-optimizer keeps only its best tree, so the score it
optimizes must already be einslice's; the local moves inside a trial (subtree
reconfiguration, choosing which index to slice) keep cotengra's flops + write
"combo" cost, which is what einslice's traffic-aware model mostly sees and is
cheap per node.

Stopping rule (what a user can state): *stop as soon as the best tree's
estimated run time is below a tenth of one trial's cost (``CHEAP_TREE_SHARE``:
no further trial can save more than that); otherwise, after
``MIN_TENSOR_TRIALS / tensors`` trials (at least one), stop when the trials so
far cost more than the best tree's estimated run time, counting each trial as
``TRIAL_COST_PER_TENSOR`` per tensor, or after ``patience`` trials in a row
that did not improve it; stop after ``trials`` trials in any case, and never
later than ``search_seconds`` of wall time*. A default search (``optimize=
"auto"``, ``einslice.pgm``) is also bounded: *planning stops once it has
taken its best tree's estimated run time, as measured here, plus a few
seconds* (`planning_bound`).
Then cotengra's own ``HyperOptimizer``, configured as its users run it at this
limit (`reference_search`), gets the same seed and as many trials, fewer when
they would cost more than the best tree's estimated run time
(`reference_budget`; none for a cheap tree or beyond `REFERENCE_MAX_SLICES`),
and the search returns whichever of the two trees ranks better under the
limit (`better`): never a tree worse than the reference's.
All but the wall-time cap count trials, not seconds, so a given seed gives the
same tree on any machine, loaded or not; the wall-time cap is a safety net only (a
search it cuts short is not reproducible, so it is not stored on disk).
Before any trial, quick greedy trees may end the search (rule 0 of
docs/search.md), improved by subtree reconfiguration when the tree is to
serve many runs (``runs``, `reconfigured`).
A growth search (``TreeSearch(budget=...)``: a reused plan's runner searches
again as its calls add up, ``_exec._run``) reads "the best tree's estimated
run time" in these rules as its budget where that is larger (`allowance`).

Found trees are cached in memory and as JSON files under
``cache_dir() / "trees"`` (a corrupt file is ignored with a warning).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import random
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import TYPE_CHECKING, cast

from .._errors import EinsliceError
from . import _elimination as elimination
from . import _kahypar as kahypar
from ._cachedir import CacheWarning, cache_dir, read_json, write_atomic
from ._cost import Body, cached_cost, chunked_sizes, evaluate, ranking
from ._order import cached_steps, label_indices, labelled, to_steps
from ._profile import CPU_DEFAULT, Profile
from ._types import Cost

if TYPE_CHECKING:
    from cotengra import ContractionTree

Path = tuple[tuple[int, ...], ...]

# The path finders optuna chooses between (registered with cotengra on use).
METHODS = (kahypar.METHOD, "greedy", elimination.METHOD)
# Bump when the search changes what it returns, so old disk entries are ignored.
_VERSION = 9
# cotengra's "size" is its largest intermediate; einslice's peak also counts
# the operands of a step, its result and a possible transpose copy alive at
# once: slice to this fraction of the limit's entries, chunk sizing grows back.
_TARGET_FRACTION = 1 / 8
# What one trial costs per tensor, in the cost model's estimated seconds
# (``Cost.time``): measured 0.6 ms per tensor per trial on the suite's
# 36-tensor random network, 5.5 ms on CSP_11's 390 tables (kahypar, greedy or
# elimination, then subtree reconfiguration and slicing). The model's seconds
# (CPU_DEFAULT profile) read ~3x below measured times of these trees (the
# random network's best tree: estimated 4.3e9 FLOP-units = 14 ms, ran in ~20 ms
# here; a larger trial cost made Grids_15 search ~100 s for a 4 s
# contraction), so a ~5 ms trial counts as 5e8 FLOP-units at the CPU profile's
# 3e11 FLOP/s.
TRIAL_COST_PER_TENSOR = 5e8 / CPU_DEFAULT.matmul_flops
# The search runs at least ceil(MIN_TENSOR_TRIALS / tensors) trials: fewer
# leave kahypar's and greedy's luck to decide on small networks (the suite's
# 36-tensor random network: 3 trials gave trees estimated 5x slower than 8),
# while on large ones each trial costs seconds (CSP_11, 390 tables: ~2 s).
MIN_TENSOR_TRIALS = 256
# A tree estimated to run in less than this share of one trial's cost ends the
# search at once, before MIN_TENSOR_TRIALS: even a free tree would save less.
# Small graphical models (Promedus_24: 51 tables, 3e3 FLOPs) spent 0.7 s on the
# minimum trials of three searches for a microsecond contraction; the suite's
# random network (14 ms estimated, 60 ms a trial) still searches its 8 trials.
CHEAP_TREE_SHARE = 0.1
# A tree reconfigured from another quick tree (`reconfigured`) with more
# FLOPs than the best so far replaces it only when estimated this many times
# faster: the model ranks close trees wrongly by up to 2x (`_exec._grow.
# GROW_TIME_WITHIN`), FLOPs are the steadier tie-break.
OTHER_TREE_MARGIN = 2.0
# What reconfiguring one more quick tree costs, in trials (`reconfigures_others`):
# one objective ("combo") of one tree took 0.2-0.5 s on einsum-benchmark's
# 50- to 100-tensor networks (2 cores, load 2-5), about one trial at the
# ~5 ms per tensor measured for `TRIAL_COST_PER_TENSOR`. Counted as both
# objectives' two trials, fresh11-randreg-70-d3's others were never tried
# (ten runs of 16.5 ms against 233 ms), where the plain greedy tree
# reconfigures to 1.72 ms (2026-12-08).
RECONFIGURE_TRIALS = 1
# The runs a tree of ``einsum`` or ``plan`` is expected to serve (a plan is
# reused, and einsum caches plans): rule 0 weighs a quick tree's run time by
# it. A quick tree cheap for one run but not for PLAN_RUNS is improved by
# subtree reconfiguration (`reconfigured`; 1-2.6 ms per tensor here) instead
# of a full search. On einsum-benchmark's networks the quick trees were
# estimated 1.2-7x slower than reconfigured (a 100-tensor random regular
# graph: 13.9 -> 1.9 ms; ctg-lattice-10x10 10.4 -> 5.5 ms) and ran 1.6-3.5x
# slower, for 0.1-0.3 s more planning.
PLAN_RUNS = 10
# Rule 0 tries QUICK_REPEAT_TENSORS / tensors seeded random-greedy orders (at
# most QUICK_MAX_REPEATS) besides the plain greedy one: 20-60 us per tensor
# and repeat here, so 40-120 ms in all. On einsum-benchmark's networks the
# plain greedy tree was estimated 2-10x slower than the best of 32 (QAOA
# max-cut 20 qubits: 1.04 -> 0.09 ms, 10^8.0 -> 10^6.6 FLOPs; a 40-matrix
# chain 4.7 -> 2.0 ms; cotengra's 40-tensor hypernetwork 2.4 -> 1.2 ms) and
# such cheap trees end the search, so nothing else would improve them.
QUICK_REPEAT_TENSORS = 2048
QUICK_MAX_REPEATS = 32
# Where none of those fits the limit, rule 0 tries opt_einsum's greedy order
# and the fewest-FLOPs of OE_REPEAT_TENSORS / tensors (at most OE_MAX_REPEATS)
# of its random-greedy orders (`oe_quick_paths`): its greedy cost ("memory-
# removed", with jitter) keeps intermediates small where cotengra's does not.
# On einsum-benchmark's networks at 256 MB: mera-likelihood-d2's cotengra
# trees were 1.1 and 2.4 s estimated at 1.6-2.5 GB, so the search ran 7
# trials for a sliced tree of 81 ms (80 ms a call), where opt_einsum's greedy
# fits at 27 ms (10^9.17 FLOPs, 2 ms to find; reconfigured 9.4 ms, 17 ms a
# call); randreg-60-d5-8's were 1.0-1.3 s over the limit, and 6 trials found
# a sliced 166-263 ms (0.48 s a call) where 8 of opt_einsum's repeats find 80
# ms unsliced (54 ms; reconfigured 64 ms, and from cotengra's quick trees, as
# `reconfigures_others` asks, 19 ms: 58 ms a call). About 1 ms per repeat per
# 10 tensors here: 25-100 ms in all.
OE_REPEAT_TENSORS = 512
OE_MAX_REPEATS = 8
# One trial of cotengra's reference search (its default subtree
# reconfiguration, slicing reconfigured per doubling of slices) took 5-6x one
# of einslice's own trials here (randreg-60 bonds 5-8 at 256 MB: 6 trials 5.1
# s against 1.0 s; randreg-100 bonds 3-6: 14 trials 73 s against 13 s).
REFERENCE_TRIAL_COST_PER_TENSOR = 5 * TRIAL_COST_PER_TENSOR
# cotengra's reference search runs when einslice's own tree has at most this
# many slices (chunks at chunk size 1), see `needs_reference`.
REFERENCE_MAX_SLICES = 256
# One reference trial may cost at most this many times einslice's own search
# (its trials) plus its tree's run time, see `needs_reference`. Graphical
# models at 256 MB made one trial far dearer than its share per tensor says:
# cotengra reconfigures the tree once per doubling of the slices (Grids_15,
# 370 tables, 256 slices: 43 s for one trial after 1.4 s of own search, a
# 0.1 s contraction; PR's planning went 3 s -> 51 s), while the issue's
# randreg-60 (0.9 s a trial) and the tests' randreg-30/40 (estimated at 4.1x
# and 4.8x their own search and run time) stay within it.
REFERENCE_BUDGET_FACTOR = 6.0
# Simulated annealing of whole trees (cotengra's `simulated_anneal_tree`,
# after Kalachev et al. and OMEinsumContractionOrders' TreeSA), slicing to the
# search's target inside the annealing, from the plain greedy tree. Where the
# quick trees are dear, it finds trees no number of hyper-optimizer trials did:
# UAI 2014's linkage_15 (938 tables, 1 GB) 10^9.3-10^10.8 FLOPs from one
# anneal of 16 s (two seeds), against 10^13.4 from einslice's trials within
# their 60 s cap and 10^12.5 after 53 uncapped trials (108 s); its log Z then
# took 30 s where the trials' tree ran past 2400 s. One anneal measured ~17 ms
# per tensor (load 3-4), ~4.6x one trial per tensor: counted as 5 trials.
ANNEAL_COST_PER_TENSOR = 5 * TRIAL_COST_PER_TENSOR
# Its wall time per tensor, for the search's cap (cotengra cannot stop inside
# an anneal): measured 17 ms here, loaded.
ANNEAL_WALL_PER_TENSOR = 0.02
# At most this many anneals (seeds seed, seed + 1, ...): one anneal's result
# varies with its seed (linkage_15: 10^9.3 and 10^10.8).
ANNEAL_MAX = 4
# The first anneal runs only when the best tree so far is estimated at this
# many anneals or more: what an anneal saves is uncertain, and where trials
# already found a fair tree it did not pay. CSP_11's 390- and 121-table
# variants (trees at 2.1x and 1.7x an anneal) annealed for 11 s of a 22 s log Z
# (loaded machine); Grids_15 MAR's trial tree (over the limit, ~9000x) and
# linkage_15's (~70x) are where it pays.
ANNEAL_MIN_SHARE = 10
# cotengra's schedule defaults: 50 temperatures of 50 sweeps each.
ANNEAL_TEMPERATURES = 50
ANNEAL_SWEEPS = 50
# A tree over the limit scores its time times this per doubling of excess.
_OVER_LIMIT_PENALTY = 16.0
# An anneal runs only after the trials have cost as much as one (ski rental
# between the two: the cheaper step first). UAI 2014's DBN_16 (484 tables, a
# 22x22 RBM) annealed after its one minimum trial, from a quick tree
# estimated at 677 s: four anneals, 40 s (141 s under load) for a 1460 s
# tree, where its second trial, 1.3 s, found a 0.05 s one.
ANNEAL_AFTER_TRIALS = round(ANNEAL_COST_PER_TENSOR / TRIAL_COST_PER_TENSOR)
# Measured seconds per estimated second (``Cost.time``) on the CPU: "sum"
# plans ~3x (the trees of TRIAL_COST_PER_TENSOR's comment); graphical models'
# "log" and "max" plans of small tables ~30x (the CPU profile counts 3e11
# FLOP/s, they ran at ~1e10; DBN_16's log Z tree: 0.049 s estimated, 1.4 s).
# The "sum" figure is the CPU profile's own (``Profile.measured_per_estimated``,
# which `rule_scale` compares other devices' with): one number, one place.
SUM_MEASURED_PER_ESTIMATED = CPU_DEFAULT.measured_per_estimated
MEASURED_PER_ESTIMATED = 30.0
# Planning's bound (`planning_bound`): a default search stops once planning
# has taken its best tree's run time, as measured here, plus this. DBN_16
# searched 42 s (265 s under load 12+) for a 1.4 s contraction.
PLAN_ALLOWANCE_SECONDS = 3.0
# The planning bound's clock: this thread's CPU seconds, which other
# processes' load does not inflate, as it does not the estimates (a wall
# clock at load 10-12 cut ObjectDetection_11's search after 1 of its 2
# minimum trials: its 0.036 s tree lost to a 0.128 s one, run 10x slower).
# Tests replace it with a fake one. The wall-time cap keeps ``_wall``.
_clock = time.thread_time
_wall = time.perf_counter


def clock() -> float:
    """The planning bound's clock's reading (``_clock``), in seconds."""
    return _clock()


@dataclass(frozen=True, slots=True)
class TreeSearch:
    """The large-network tree search and its settings, passed as ``optimize=``.

    ``optimize="auto"`` runs ``TreeSearch()`` above 12 operands (dynamic
    programming below); pass one to choose the seed, the trial budget or the
    wall-time cap, or to search a smaller network this way. ``einslice.pgm``
    takes it too.

    Attributes:
        seed: seeds kahypar, the greedy orders, the elimination orders and
            optuna's sampler; a seed gives the same tree on any machine.
        trials: most trials; None: a budget growing with the network
            (`default_trials`).
        patience: stop after this many trials without improvement; None: half
            of ``trials``.
        seconds: a cap on the search's wall time (a safety net: a search it
            cuts short is not reproducible, so it is not cached on disk).
        runs: how many runs the tree is expected to serve, which rule 0
            weighs a quick tree's run time by (`_quick_trees`); None: the
            caller's (`PLAN_RUNS` for ``einsum`` and ``plan``, whose plans
            are reused; 1 for ``einslice.pgm``'s one-shot values).
        budget: the cost model's seconds the search may spend (`allowance`):
            every rule that compares trials with the best tree's estimated
            run time (rule 0's and the trials' cheap-tree share, rule 2, the
            reference's budget) compares them with this, where larger. None:
            the best tree's time, a search that costs about one run; the
            runner's growth searches raise it with the calls a plan has
            served (``_exec._run``, docs/search.md).

    Example:
        >>> import einslice
        >>> ring = [x for i in range(16) for x in ((4, 4), [i, (i + 1) % 16])]
        >>> p = einslice.plan(*ring, [], optimize=einslice.TreeSearch(seed=1))
        >>> len(p.path)
        15
    """

    seed: int = 0
    trials: int | None = None
    patience: int | None = None
    seconds: float = 60.0
    runs: int | None = None
    budget: float | None = None

    def __post_init__(self) -> None:
        for name in ("seed", "trials", "patience", "runs"):
            value = getattr(self, name)
            least = 0 if name == "seed" else 1
            if value is None and name != "seed":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise EinsliceError(
                    f"TreeSearch({name}={value!r}): {name} must be an int >= "
                    f"{least}" + ("" if name == "seed" else " or None") + "."
                )
        budget = self.budget
        if budget is not None and (
            not isinstance(budget, int | float) or not 0 < budget < math.inf
        ):
            raise EinsliceError(
                f"TreeSearch(budget={budget!r}): budget must be a positive "
                "number of estimated seconds or None."
            )
        if not isinstance(self.seconds, int | float) or not self.seconds > 0:
            raise EinsliceError(
                f"TreeSearch(seconds={self.seconds!r}): seconds must be a positive "
                "number (the search's wall-time cap)."
            )


@dataclass(frozen=True, slots=True)
class Found:
    """A searched contraction tree.

    Attributes:
        path: the pairwise path, opt_einsum format.
        sliced: the indices cotengra sliced (best first for einslice's chunking).
        flops: the tree's FLOPs summed over its slices (cotengra's count).
        time: einslice's estimated time with ``sliced`` at chunk 1.
        peak_bytes: einslice's predicted peak with ``sliced`` at chunk 1 (over
            the limit when no tree the search found fits: chunk sizing may
            still slice more).
        trials: how many trials the search ran (0: the plain greedy tree was
            cheap enough, see `_quick_trees`); cotengra's reference search ran
            as many (see `reference_search`).
        by: whose tree this is: "einslice" (its own search, or the quick
            greedy tree) or "cotengra" (the reference search's, when einslice's
            cost model scored it faster).
        reference_time: einslice's estimate of the reference search's best tree
            with its sliced indices at chunk 1 (``inf``: no reference ran).
        reference_trials: how many trials the reference search ran (0: none,
            see `needs_reference` and `reference_budget`).
        runner_up: the best tree of the other side, which ranked below this
            one: the reference's when einslice's won, einslice's own when the
            reference's won, the search's when a quick tree won (None: no
            other tree ran). The cost model can rank two close trees wrongly
            (randreg-50: einslice's own estimated 4.65 ms, measured 6.8;
            cotengra's estimated 6.94, measured 5.9), so a plan that grows
            with use times both (``_exec._run``).
    """

    path: Path
    sliced: tuple[int, ...]
    flops: float
    time: float
    trials: int
    peak_bytes: int
    by: str = "einslice"
    reference_time: float = math.inf
    reference_trials: int = 0
    runner_up: Found | None = None


def default_trials(n_operands: int) -> int:
    """The trial budget: a few for small networks, more for large ones.

    Example:
        >>> default_trials(30), default_trials(300)
        (8, 32)
    """
    return max(8, min(32, n_operands // 8 + 4))


def search_tree(
    terms: Sequence[tuple[int, ...]],
    output: tuple[int, ...],
    sizes: Sequence[int],
    itemsize: int,
    memory_limit: int,
    *,
    semiring: str = "sum",
    seed: int = 0,
    trials: int | None = None,
    patience: int | None = None,
    search_seconds: float = 60.0,
    profile: Profile = CPU_DEFAULT,
    given: Sequence[tuple[int, ...]] | None = None,
    runs: int = 1,
    budget: float | None = None,
    since: float | None = None,
) -> Found:
    """Search a contraction tree (and sliced indices) for a large network.

    Args:
        terms: each operand's indices (ints, no repeats within a term).
        output: the indices kept.
        sizes: size of every index (``sizes[i]``).
        itemsize: bytes per element.
        memory_limit: peak temporary bytes allowed.
        semiring: a name in ``_semiring.SEMIRINGS`` (the cost model differs
            slightly).
        seed: seeds kahypar, the greedy orders and optuna's sampler.
        trials: most trials; default `default_trials`.
        patience: stop after this many trials without improvement; default
            half of ``trials``.
        search_seconds: a cap on the search's wall time (safety only).
        profile: the device the trees are scored for (the cost model's times);
            part of the cache key.
        given: the operands' indices before their diagonals and private sums,
            when ``terms`` are the prepared ones (the planner's): the cost of
            preparing them is then counted, as the planner counts it.
        runs: how many runs the tree is expected to serve (rule 0 weighs a
            quick tree by it, see `_quick_trees`); part of the cache key.
        budget: the estimated seconds the search may cost where more than
            its best tree's run time (`TreeSearch.budget`, `allowance`); part
            of the cache key.
        since: when planning began (a reading of `clock`): the search is
            bounded, it stops once planning has taken `planning_bound` of
            its best tree so far, from its minimum trials on (what
            ``optimize="auto"`` and ``einslice.pgm`` run; a search it cuts
            short is not stored on disk). None: not bounded (a `TreeSearch`
            the caller gave, a growth search: their own settings and
            budgets).

    Returns:
        The best tree found, as a `Found`.

    Example:
        >>> terms = [(i, (i + 1) % 16) for i in range(16)]  # a ring of matrices
        >>> found = search_tree(terms, (), [4] * 16, 4, 2**20, trials=2)
        >>> len(found.path), found.sliced
        (15, ())
    """
    trials = default_trials(len(terms)) if trials is None else trials
    patience = max(1, trials // 2) if patience is None else patience
    terms = tuple(tuple(t) for t in terms)
    given_terms = None if given is None else tuple(tuple(t) for t in given)
    key = (
        terms,
        tuple(output),
        tuple(sizes),
        itemsize,
        memory_limit,
        semiring,
        seed,
        trials,
        patience,
        None if budget is None else float(budget),
        profile,
        None if given_terms == terms else given_terms,
    )
    since_ = None if since is None else _Since(since)
    with _recursion_room(len(terms)):
        return _cached(key, search_seconds, runs, since_)


@dataclass(frozen=True, slots=True)
class _Since:
    """When a bounded search's planning began; equal to any other `_Since`.

    `_cached` memoizes on its arguments: a bounded search is one memo entry,
    whenever its planning began (a memoized tree is returned at once).
    """

    at: float = dataclasses.field(compare=False)


@contextlib.contextmanager
def _recursion_room(n_terms: int):
    """Python's recursion limit raised to what cotengra's trees need, then put back.

    cotengra walks a contraction tree recursively (``get_involved``,
    ``slice``): a greedy tree of a chain-like network is about as deep as it
    has tensors, and Promedas_49's and Promedas_64's marginal-MAP max stages
    (~400 tables) hit ``RecursionError`` at Python's default of 1000 while
    their quick tree was sliced (2026-12-07).
    """
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, RECURSION_PER_TERM * n_terms + old))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


# Frames per tensor of the network that cotengra's recursive tree walks may
# take (a node's walk calls a few functions per level; 4 leaves room).
RECURSION_PER_TERM = 4


@lru_cache(maxsize=256)
def _cached(
    key: tuple, search_seconds: float, runs: int = 1, since: _Since | None = None
) -> Found:
    """A cheap greedy tree, else the disk's tree, else a search (then stored).

    The quick tree takes milliseconds (its reconfiguration a tenth of a
    second): it is not worth a file in the cache directory (one per network:
    a user conditioning on new evidence per query would fill it), nor the
    reading of one. A search never returns a tree that ranks worse than the
    best quick tree, which it already costed.
    """
    terms, output, sizes, itemsize, limit, semiring, seed, *_, profile, given = key
    budget = key[9]
    quick = _quick_trees(
        terms, output, sizes, itemsize, limit, semiring, profile, given, seed
    )
    scale = rule_scale(profile)  # (the rules' seconds: the CPU's estimates')
    if quick is not None and not search_pays(
        allowance(quick.time, budget) * scale, len(terms), semiring
    ):
        found = quick
    else:
        found = _searched(key, search_seconds, quick, since)
    # (the quick tree, also when it beat the trials: a growth search of
    # mera-p-first-last, einsum-benchmark, ran 6 trials, kept its quick tree
    # and returned it unreconfigured, estimated 14.8 ms against the 9.7 ms
    # of the reconfigured tree the plan held, and compiled and timed it)
    quick_won = quick is not None and (found.path, found.sliced) == (
        quick.path,
        quick.sliced,
    )
    if (
        runs > 1
        and (found.trials == 0 or quick_won)
        and not found.sliced
        and not cheap(runs * found.time * scale, len(terms))
    ):
        # a quick tree no search could pay for or improve on, not cheap for
        # ``runs`` runs: worth a reconfiguration; then the other quick trees'
        # too, where ``runs`` runs of the reconfigured tree still cost what
        # that costs (`reconfigures_others`: what it can save at most)
        args = (terms, output, sizes, itemsize, limit, semiring, profile, given)
        others = quick_paths(*_hashable(terms, output, sizes), seed)
        found = reconfigured(found, *args, others, runs=runs, scale=scale)
    return found


def _searched(
    key: tuple, search_seconds: float, quick: Found | None, since: _Since | None
) -> Found:
    """The disk's tree, else a search's (then stored), else ``quick`` if better.

    ``since``: a bounded search's start (`search_tree`).
    """
    terms, _, sizes, _, limit, *_, profile, _ = key
    disk = cache_dir() / "trees" / f"{_digest(key)}.json"
    found = _load(disk, len(terms), len(sizes))
    if found is not None:
        return found
    quick_time = math.inf if quick is None else quick.time
    found, complete = _search(
        *key,
        search_seconds=search_seconds,
        quick_time=quick_time,
        since=None if since is None else since.at,
    )
    if quick is not None and better(quick, found, limit, profile):
        found = dataclasses.replace(
            quick,
            trials=found.trials,
            reference_time=found.reference_time,
            reference_trials=found.reference_trials,
            runner_up=_alone(found),
        )
    if complete:
        _store(disk, found)
    return found


def _digest(key: tuple) -> str:
    def plain(value):  # the profile, field by field
        return {"profile": dataclasses.asdict(value)}

    # (a first search, no budget, keeps the digest it had before growth)
    fields = [*key[:9], *key[10:]] if key[9] is None else list(key)
    text = json.dumps([_VERSION, *fields], separators=(",", ":"), default=plain)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _load(file, n_terms: int, n_indices: int) -> Found | None:
    """The tree stored in ``file``, if there is one and it fits the network."""
    try:
        found = _from_json(read_json(file))  # pyright: ignore[reportArgumentType]
        _check_found(found, n_terms, n_indices)
    except OSError:  # (none stored, or unreadable: searched and stored again)
        return None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as error:
        warnings.warn(
            f"ignoring the corrupt search-tree cache file {str(file)!r} ({error}); "
            "the tree is searched again and the file rewritten.",
            CacheWarning,
            stacklevel=4,
        )
        return None
    return found


def _from_json(data: dict) -> Found:
    """A `Found` from `_to_json`'s dict (KeyError, ValueError... if malformed)."""
    other = data["runner_up"]
    return Found(
        path=tuple(tuple(int(p) for p in step) for step in data["path"]),
        sliced=tuple(int(i) for i in data["sliced"]),
        flops=float(data["flops"]),
        time=float(data["time"]),
        trials=int(data["trials"]),
        peak_bytes=int(data["peak_bytes"]),
        by=str(data["by"]),
        reference_time=float(data["reference_time"]),
        reference_trials=int(data["reference_trials"]),
        runner_up=None if other is None else _from_json(other),
    )


def _check_found(found: Found, n_terms: int, n_indices: int) -> None:
    """ValueError unless ``found`` is a whole pairwise path with valid figures."""
    if found.runner_up is not None:
        _check_found(found.runner_up, n_terms, n_indices)
    alive = n_terms
    for step in found.path:
        if (
            len(step) != 2
            or step[0] == step[1]
            or not 0 <= min(step) <= max(step) < alive
        ):
            raise ValueError(f"step {list(step)} is not a pair of {alive} nodes")
        alive -= 1
    if n_terms > 1 and alive != 1:
        raise ValueError(f"the path leaves {alive} nodes, not 1")
    if not all(0 <= i < n_indices for i in found.sliced):
        raise ValueError(f"sliced indices {list(found.sliced)} out of range")
    figures = (found.flops, found.time, found.peak_bytes, found.trials)
    if not all(math.isfinite(x) and x >= 0 for x in figures):
        raise ValueError(f"figures {figures} are not finite and >= 0")
    if found.by not in ("einslice", "cotengra") or not found.reference_time >= 0:
        raise ValueError(f"by={found.by!r}, reference_time={found.reference_time}")


def _store(file, found: Found) -> None:
    write_atomic(file, json.dumps(_to_json(found)))  # unwritable: one warning


def _to_json(found: Found) -> dict:
    other = found.runner_up
    return {
        "path": [list(step) for step in found.path],
        "sliced": list(found.sliced),
        "flops": found.flops,
        "time": found.time,
        "trials": found.trials,
        "peak_bytes": found.peak_bytes,
        "by": found.by,
        "reference_time": found.reference_time,  # Python's json keeps inf
        "reference_trials": found.reference_trials,
        "runner_up": None if other is None else _to_json(other),
    }


def _objective(terms, output, sizes, itemsize, memory_limit, semiring, profile):
    """The search's objective: whole trees scored by einslice's estimated time.

    Subclassing cotengra's combo objective keeps its cheap per-node cost for the
    moves inside a trial (subtree reconfiguration, which index to slice).
    """
    from cotengra.scoring import ComboObjective

    index = label_indices(len(sizes))

    class EinsliceTime(ComboObjective):
        def __call__(self, trial):
            tree = trial["tree"]
            path = tuple(tuple(int(p) for p in step) for step in tree.get_path())
            chunks = {index[i]: 1 for i in tree.sliced_inds}
            cost = estimate(
                terms, output, sizes, itemsize, semiring, path, chunks, profile
            )
            score = limited_score(cost, memory_limit, profile)
            trial["einslice_time"] = cost.time
            trial["einslice_peak"] = cost.peak_bytes
            # cotengra transforms scores as if positive and > 1 (a log of a
            # sub-second time went complex): score in FLOP-time units.
            return math.log2(max(score * profile.matmul_flops, 2.0))

    return EinsliceTime()


def limited_score(cost: Cost, memory_limit: int, profile: Profile) -> float:
    """What the search minimizes: estimated time, penalised above the limit.

    The time is `ranking`'s (nudged towards smaller peaks), multiplied by
    `_OVER_LIMIT_PENALTY` per doubling of the peak over the limit.

    Example:
        >>> fits = Cost(flops=0, peak_bytes=2**20, time=1.0)
        >>> over = Cost(flops=0, peak_bytes=2**22, time=1.0)
        >>> score = lambda cost: limited_score(cost, 2**21, CPU_DEFAULT)
        >>> score(over) / score(fits)
        16.0
    """
    score = ranking(cost, profile)
    if cost.peak_bytes > memory_limit:
        score *= _OVER_LIMIT_PENALTY ** math.log2(cost.peak_bytes / memory_limit)
    return score


def estimate(
    terms: Sequence[tuple[int, ...]],
    output: tuple[int, ...],
    sizes: Sequence[int],
    itemsize: int,
    semiring: str,
    path: Path,
    chunks: dict[int, int],
    profile: Profile = CPU_DEFAULT,
    cached: bool = False,
    given: Sequence[tuple[int, ...]] | None = None,
) -> Cost:
    """The cost model's verdict on a path over prepared terms, sliced by ``chunks``.

    ``cached``: lay out and cost through the planner's caches, for a tree the
    planner is about to lay out and cost itself (not for the many trees of
    a search's trials, which would fill them). ``given``: the terms before
    preparation, as for `search_tree`.

    Example:
        >>> estimate([(0, 1), (1, 2)], (0, 2), [4, 4, 4], 4, "sum", ((0, 1),), {}).flops
        128
    """
    terms, output = tuple(map(tuple, terms)), tuple(output)
    local = chunked_sizes(sizes, chunks)
    if cached:
        steps = cached_steps(terms, output, path, tuple(local))
    else:
        steps = to_steps(terms, output, path, local)[0]
    given = terms if given is None else tuple(map(tuple, given))
    body = Body(given, terms, steps, output, semiring)
    if cached:
        return cached_cost(body, sizes, chunks, itemsize, profile)
    return evaluate(body, sizes, chunks, itemsize, profile=profile)


def _search(
    terms,
    output,
    sizes,
    itemsize,
    memory_limit,
    semiring,
    seed,
    trials,
    patience,
    budget,
    profile,
    given,
    *,
    search_seconds,
    quick_time: float = math.inf,
    since: float | None = None,
) -> tuple[Found, bool]:
    """Anneal, run the hyper-optimizer; also say whether it finished in time.

    The arguments are `search_tree`'s cache key; ``given`` serves only the
    quick tree tried before (`_cached`), the trials score prepared terms.
    ``quick_time``: the best quick tree's estimate (inf: none fits), which
    decides whether annealing can pay (`_annealed`) and counts as the best
    so far for the planning bound. ``since``: a bounded search's start
    (`search_tree`); the search then ends by `planning_bound` of its best
    tree after it, and a search it cuts short is not complete.
    """
    del given
    elimination.register()
    kahypar.register()
    started = _wall()
    deadline = started + search_seconds

    def left(best_time: float, bounded: bool = True) -> float:
        """Seconds left to the cap and (``bounded``) to the planning bound.

        The bound's are `clock`'s seconds, given the best tree's estimate so
        far (and the quick tree's).
        """
        seconds = deadline - _wall()
        if since is not None and bounded:
            bound = planning_bound(min(best_time, quick_time) * scale, semiring)
            seconds = min(seconds, since + bound - _clock())
        return seconds

    scale = rule_scale(profile)
    objective = _objective(
        terms, output, sizes, itemsize, memory_limit, semiring, profile
    )
    optimizer = _optimizer(len(terms), itemsize, memory_limit, objective, seed)
    annealed: list[Found] = []  # the annealed tree, if annealing ran

    def anneal(best_time: float) -> float:
        found = _annealed(
            terms,
            output,
            sizes,
            itemsize,
            memory_limit,
            semiring,
            profile,
            seed,
            min(best_time, quick_time),
            deadline,
            left,
        )
        annealed.extend([] if found is None else [found])
        return math.inf if found is None else found.time

    complete = _run_trials(
        optimizer,
        terms,
        output,
        sizes,
        seed,
        trials,
        patience,
        left,
        anneal,
        budget,
        scale,
    )
    own = _found(optimizer, len(sizes))
    if annealed and better(annealed[0], own, memory_limit, profile):
        own = dataclasses.replace(annealed[0], trials=own.trials)
    if not complete or not needs_reference(own, sizes, len(terms), budget, scale):
        return own, complete  # (cut short by the wall-time cap: no time left)
    seconds_left = left(own.time)
    own_trial_seconds = (_wall() - started) / max(own.trials, 1)
    if reference_trial_wall(own_trial_seconds, own, sizes) > seconds_left:
        # cotengra checks its time cap only between trials: one trial that
        # cannot end before the deadline would overrun it, so the wall-time
        # cap (or the planning bound) ends the search here (not
        # reproducible: not stored on disk).
        return own, False
    trials_ = reference_budget(own, len(terms), budget, sizes, scale)
    tree, reference_complete = reference_search(
        terms, output, sizes, itemsize, memory_limit, seed, trials_, seconds_left
    )
    reference = _reference_found(
        tree, terms, output, sizes, itemsize, memory_limit, semiring, profile
    )
    complete = complete and reference_complete
    if better(reference, own, memory_limit, profile):
        kept = dataclasses.replace(reference, trials=own.trials, runner_up=_alone(own))
    else:
        kept = dataclasses.replace(
            own, reference_time=reference.time, runner_up=_alone(reference)
        )
    return dataclasses.replace(kept, reference_trials=trials_), complete


def _alone(found: Found) -> Found:
    """``found`` without a runner-up of its own (a runner-up is one tree)."""
    return dataclasses.replace(found, runner_up=None)


def reference_budget(
    own: Found,
    n_terms: int,
    budget: float | None = None,
    sizes: Sequence[int] | None = None,
    scale: float = 1.0,
) -> int:
    """The reference search's trials: at most as many as einslice's own ran.

    Fewer when they would cost more than einslice's best tree's estimated run
    time (searching longer cannot pay): each reference trial is counted as
    `reference_trial_seconds`, `REFERENCE_TRIAL_COST_PER_TENSOR` per tensor
    and slicing round of ``own``'s sliced indices (their ``sizes``; None:
    one round), as `needs_reference` and the wall-time check count it (the
    rule that ends einslice's own trials, with cotengra's heavier trial; a
    growth search's ``budget`` where larger, see `allowance`; times
    ``scale``, `rule_scale`); at least one.
    Counted per tensor only, lattice-6x6-periodic-d4 (einsum-benchmark, 36
    tensors, its tree sliced 16 ways) was given 3 reference trials, 0.3 s
    estimated each, which took 2.5-3.5 s of its 3.4-5.6 s of planning
    (1.17 s each at load 1; its 8 own trials 1.1 s), for a tree estimated
    7x slower than its own; with its 5 rounds a trial counts 1.5 s, and one
    runs (2026-12-07 22:40, benchmarks/results/networks.md).

    Example:
        >>> own = Found(((0, 1),), (), 1e9, 10.0, 12, 10**6)  # 10 s, 12 trials
        >>> reference_budget(own, 60), reference_budget(own, 300)
        (12, 4)
        >>> sliced = dataclasses.replace(own, sliced=(0,))  # 16 slices: 5 rounds
        >>> reference_budget(sliced, 60, sizes=[16, 2])
        4
    """
    slices = 1 if sizes is None else math.prod(sizes[i] for i in own.sliced)
    trial = reference_trial_seconds(n_terms, slices)
    affordable = int(allowance(own.time, budget) * scale // trial)
    return max(1, min(own.trials, affordable))


def needs_reference(
    own: Found,
    sizes: Sequence[int],
    n_terms: int,
    budget: float | None = None,
    scale: float = 1.0,
) -> bool:
    """Whether cotengra's reference search runs after einslice's own trials.

    Not when no trial ran (the wall-time cap struck first), when the tree is
    cheap (`cheap`: no search can save more than it costs), nor when
    einslice's tree needs more than `REFERENCE_MAX_SLICES` slices: cotengra's
    slicing reconfigures the whole tree once per doubling of the slices, and
    there a single trial took minutes (a 15x20 lattice at 512 kB: 225 s); nor
    when one trial (`reference_trial_seconds`) is estimated to cost more than
    `REFERENCE_BUDGET_FACTOR` times einslice's own trials and its tree's run
    time together (a search that cannot pay for itself). A growth search
    counts its ``budget`` where larger than the tree's run time (`allowance`);
    both times ``scale`` (`rule_scale`).

    Example:
        >>> own = Found(((0, 1),), (0,), 1e9, 1.0, 4, 10**6)
        >>> needs_reference(own, [8, 8], 2), needs_reference(own, [1024, 8], 2)
        (True, False)
    """
    slices = math.prod(sizes[i] for i in own.sliced)
    own_search = own.trials * n_terms * TRIAL_COST_PER_TENSOR
    spend = allowance(own.time, budget) * scale
    most = REFERENCE_BUDGET_FACTOR * (own_search + spend)
    return (
        own.trials > 0
        and not cheap(spend, n_terms)
        and slices <= REFERENCE_MAX_SLICES
        and reference_trial_seconds(n_terms, slices) <= most
    )


def reference_trial_seconds(n_terms: int, slices: int) -> float:
    """The estimated cost of one reference trial: per tensor, per slicing round.

    cotengra's slicing reconfigures the tree once per doubling of the slices
    (on top of the trial's own reconfiguration).

    Example:
        >>> round(reference_trial_seconds(60, 8) / reference_trial_seconds(60, 1))
        4
    """
    rounds = 1 + math.log2(max(slices, 1))
    return n_terms * REFERENCE_TRIAL_COST_PER_TENSOR * rounds


def reference_trial_wall(
    own_trial_seconds: float, own: Found, sizes: Sequence[int]
) -> float:
    """Wall seconds one reference trial is expected to take here.

    One of einslice's own trials, as measured in this search, times the
    reference trial's estimated cost relative to it (`reference_trial_seconds`
    over an own trial's: `REFERENCE_TRIAL_COST_PER_TENSOR` per tensor and
    slicing round). The search's wall-time cap compares it with the seconds
    left, since cotengra cannot stop inside a trial (linkage_11, 824 tables:
    own trials ~4 s, one reference trial ran 399 s past a 60 s cap).

    Example:
        >>> own = Found(((0, 1),), (0,), 1e9, 1.0, 4, 10**6)
        >>> reference_trial_wall(2.0, own, [8, 8])  # 5x the trial, 4 rounds
        40.0
    """
    slices = math.prod(sizes[i] for i in own.sliced)
    ratio = reference_trial_seconds(1, slices) / TRIAL_COST_PER_TENSOR
    return own_trial_seconds * ratio


def better(a: Found, b: Found, memory_limit: int, profile: Profile) -> bool:
    """Whether tree ``a`` beats ``b``: fits when ``b`` does not, else scores less.

    The score is `limited_score` of each tree's estimate with its sliced
    indices at chunk 1 (what the search minimizes).
    """
    a_over, b_over = a.peak_bytes > memory_limit, b.peak_bytes > memory_limit
    if a_over != b_over:
        return b_over
    scores = [
        limited_score(Cost(int(f.flops), f.peak_bytes, f.time), memory_limit, profile)
        for f in (a, b)
    ]
    return scores[0] < scores[1]


def reference_search(
    terms: Sequence[tuple[int, ...]],
    output: tuple[int, ...],
    sizes: Sequence[int],
    itemsize: int,
    memory_limit: int,
    seed: int,
    trials: int,
    seconds: float = math.inf,
) -> tuple[ContractionTree, bool]:
    """The reference search: cotengra's own hyper-optimizer at this limit.

    The reference the tree search must not lose to: ``HyperOptimizer`` over
    kahypar (`_kahypar.METHOD`: cotengra's kahypar trees, built in this
    process) and greedy trees, optuna seeded by ``seed``, cotengra's default
    subtree reconfiguration (``reconf_opts={}``) and slicing with
    reconfiguration to the limit in entries (``slicing_reconf_opts``), its
    default objective (FLOPs), ``trials`` trials: the same budget as the
    search's own trials. Python's ``random`` is seeded with ``seed`` for the
    run and put back after, so a seed gives the same tree on any machine;
    ``seconds`` caps the wall time (then not reproducible: the second value
    says whether all trials ran).

    Example:
        >>> terms = [(i, (i + 1) % 16) for i in range(16)]
        >>> tree, complete = reference_search(terms, (), [4] * 16, 4, 2**20, 0, 2)
        >>> len(tree.get_path()), complete
        (15, True)
    """
    import cotengra

    kahypar.register()
    optimizer = cotengra.HyperOptimizer(
        methods=[kahypar.METHOD, "greedy"],
        max_repeats=trials,
        max_time=None if math.isinf(seconds) else seconds,
        parallel=False,  # pyright: ignore[reportArgumentType]
        optlib="optuna",
        optlib_opts={"sampler_opts": {"seed": seed}},
        reconf_opts={},  # pyright: ignore[reportArgumentType]
        slicing_reconf_opts={"target_size": max(2, memory_limit // itemsize)},  # pyright: ignore[reportArgumentType]
        on_trial_error="raise",
        progbar=False,
    )
    state = random.getstate()
    random.seed(seed)
    try:
        tree = optimizer.search(*labelled(terms, output, sizes))
    finally:
        random.setstate(state)
    return cast("ContractionTree", tree), len(optimizer.scores) >= trials


# The reference's tree is sliced to the limit in cotengra's entries; einslice's
# peak also counts a step's operands and copies. When that is over the limit,
# the tree is sliced further, to these fractions of it, until one fits.
_RESLICE_FRACTIONS = (1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 64)


def _reference_found(
    tree,
    terms,
    output,
    sizes,
    itemsize,
    memory_limit,
    semiring,
    profile,
    by: str = "cotengra",
) -> Found:
    """A sliced cotengra tree as a `Found`: as sliced, or sliced further.

    The tree as cotengra sliced it and, while over the limit in einslice's
    peak model, the same tree sliced further: the first that fits, else the
    one `limited_score` scores best (as `better` ranks trees, so the
    reference never ranks below cotengra's own tree). ``by``: whose tree
    (the reference's, or an annealed one of einslice's search).
    """
    path = tuple(tuple(int(p) for p in step) for step in tree.get_path())
    index = label_indices(len(sizes))
    variants = []
    for fraction in (1.0, *_RESLICE_FRACTIONS):
        if fraction < 1.0:
            target = max(2, int(memory_limit // itemsize * fraction))
            tree = tree.slice(target_size=target, seed=0)
        sliced = tuple(index[i] for i in tree.sliced_inds)
        cost = estimate(
            terms,
            output,
            sizes,
            itemsize,
            semiring,
            path,
            dict.fromkeys(sliced, 1),
            profile,
        )
        over = cost.peak_bytes > memory_limit
        score = limited_score(cost, memory_limit, profile)
        variants.append((over, score, sliced, cost, float(tree.contraction_cost())))
        if not over:
            break  # the least slicing that fits: more only adds work
    # one that fits, else the best score (as `better` ranks trees)
    _, _, sliced, cost, flops = min(variants, key=lambda v: v[:2])
    return Found(
        path=path,
        sliced=sliced,
        flops=flops,
        time=cost.time,
        trials=0,
        peak_bytes=cost.peak_bytes,
        by=by,
        reference_time=cost.time if by == "cotengra" else math.inf,
    )


def _annealed(
    terms,
    output,
    sizes,
    itemsize,
    memory_limit,
    semiring,
    profile,
    seed,
    best_time: float,
    deadline: float,
    left: Callable[[float], float] | None = None,
) -> Found | None:
    """The best of a few simulated annealings of the greedy tree, if they can pay.

    Each anneal (cotengra's `simulated_anneal_tree`, minimizing FLOPs, slicing
    to the search's target inside the schedule; seeds ``seed``, ``seed`` + 1,
    ...) costs `ANNEAL_COST_PER_TENSOR` per tensor. The first runs when the
    best tree so far (``best_time``: the minimum trials' and the quick
    tree's) is estimated at `ANNEAL_MIN_SHARE` anneals or more; the next ones
    while the best annealed tree is estimated dearer than the anneals so far,
    up to `ANNEAL_MAX`. None when none ran: an anneal whose estimated wall time
    (`ANNEAL_WALL_PER_TENSOR`, then the first one's measured) would end past
    ``deadline`` (a `_wall` time) does not start, nor one longer than
    ``left(best time)``, where given: the seconds the search has left given
    its best tree so far (the planning bound's).
    Each tree is costed by einslice's model and sliced further where its
    peak is over the limit (`_reference_found`).
    """
    from cotengra import ContractionTree
    from cotengra.pathfinders.path_simulated_annealing import simulated_anneal_tree

    cost = len(terms) * ANNEAL_COST_PER_TENSOR / rule_scale(profile)  # (profile's)
    if best_time < ANNEAL_MIN_SHARE * cost:
        return None
    inputs, labels, size_dict = labelled(terms, output, sizes)
    start = ContractionTree.from_path(
        inputs, labels, size_dict, path=greedy_path(terms, output, sizes)
    )
    target = max(2, int(memory_limit // itemsize * _TARGET_FRACTION))
    costed = partial(  # a sliced tree as a Found, costed by einslice's model
        _reference_found,
        terms=terms,
        output=output,
        sizes=sizes,
        itemsize=itemsize,
        memory_limit=memory_limit,
        semiring=semiring,
        profile=profile,
    )
    # The greedy tree, sliced to the target: where even it is within reach,
    # the trials will do (Grids_15 MAR: an anneal added 10 s to a 5.6 s run).
    sliced = costed(start.slice(target_size=target, seed=seed))
    if sliced.time < ANNEAL_MIN_SHARE * cost:
        return None
    wall = len(terms) * ANNEAL_WALL_PER_TENSOR
    best = None
    for k in range(ANNEAL_MAX):
        best_time = best_time if best is None else min(best_time, best.time)
        if _wall() + wall > deadline or (left is not None and wall > left(best_time)):
            break
        began = _wall()
        tree = simulated_anneal_tree(
            start,
            tsteps=ANNEAL_TEMPERATURES,
            numiter=ANNEAL_SWEEPS,
            minimize="flops",
            target_size=target,
            seed=seed + k,
        )
        wall = _wall() - began
        found = costed(tree, by="einslice")
        if best is None or better(found, best, memory_limit, profile):
            best = found
        if best.time <= (k + 1) * cost:
            break
    return best


def _quick_trees(
    terms, output, sizes, itemsize, memory_limit, semiring, profile, given, seed=0
) -> Found | None:
    """The best quick greedy tree that fits the limit (None: none fits).

    A hyper-optimizer trial costs far more than a greedy order (Segmentation_11,
    618 tables: 0.3 s a trial, mostly subtree reconfiguration, against 0.02 s),
    so before any trial a few greedy trees are costed, unsliced: cotengra's
    plain greedy order and the best (by FLOPs) of `quick_repeats` seeded
    random-greedy orders; where neither fits the limit, opt_einsum's
    (`oe_quick_paths`). When none fits, the faster of cotengra's is sliced to
    fit (`_sliced_quick`). The quick tree ends the search where no search
    can pay for itself (`search_pays`, applied before the first trial; see
    `_cached`).

    Why opt_einsum's only where cotengra's do not fit: its trees were
    estimated faster elsewhere too but not always ran faster (randreg-100-d2-4,
    einsum-benchmark: reconfigured, 1.94 against 1.88 ms estimated, with
    fewer FLOPs, ran 5.1 against 3.5 ms a call, interleaved, load 1.8;
    lattice-4x4x4-d2's, 17.7 against 45 ms with 8.7x the FLOPs, reconfigured
    to 7.0 ms where cotengra's came to 1.7), while where cotengra's are over
    the limit the alternative was a search's sliced tree (`OE_REPEAT_TENSORS`).
    """
    hashable = _hashable(terms, output, sizes)
    network = (terms, output, sizes, itemsize, memory_limit, semiring, profile, given)
    best, fastest = _best_fitting(quick_paths(*hashable, seed), *network)
    if best is None:
        best, _ = _best_fitting(oe_quick_paths(*hashable), *network)
    if best is None:
        assert fastest is not None
        return _sliced_quick(
            fastest[0], terms, output, sizes, itemsize, memory_limit, semiring, profile
        )
    path, cost = best
    return Found(
        path=path,
        sliced=(),
        flops=cost.flops,
        time=cost.time,
        trials=0,
        peak_bytes=cost.peak_bytes,
    )


def _best_fitting(
    paths, terms, output, sizes, itemsize, memory_limit, semiring, profile, given
) -> tuple[tuple[Path, Cost] | None, tuple[Path, Cost] | None]:
    """The fastest of ``paths`` that fits the limit (or None), and the fastest."""
    best = fastest = None
    for path in paths:
        # cached: the planner lays out and costs the chosen tree next
        cost = estimate(
            terms, output, sizes, itemsize, semiring, path, {}, profile, True, given
        )
        if cost.peak_bytes <= memory_limit and (
            best is None or cost.time < best[1].time
        ):
            best = path, cost
        if fastest is None or cost.time < fastest[1].time:
            fastest = path, cost
    return best, fastest


def _sliced_quick(
    path, terms, output, sizes, itemsize, memory_limit, semiring, profile
) -> Found | None:
    """A quick tree over the limit, sliced by cotengra to fit (None: it does not).

    Sliced as the reference is (to the limit in entries, then further while
    einslice's peak is over the limit: `_reference_found`, the least slicing
    that fits); no reconfiguration. Without it a network whose greedy trees
    do not fit always ran its minimum trials (einsum-benchmark's
    mera-likelihood-d2: 7 trials for a tree estimated at 81 ms).
    """
    from cotengra import ContractionTree

    tree = ContractionTree.from_path(*labelled(terms, output, sizes), path=path)
    target = max(2, memory_limit // itemsize)
    found = _reference_found(
        tree.slice(target_size=target, seed=0),
        terms,
        output,
        sizes,
        itemsize,
        memory_limit,
        semiring,
        profile,
        by="einslice",
    )
    return found if found.peak_bytes <= memory_limit else None


def reconfigured(
    quick: Found,
    terms,
    output,
    sizes,
    itemsize,
    memory_limit,
    semiring,
    profile,
    given,
    others: Sequence[Path] = (),
    runs: int = 1,
    scale: float = 1.0,
) -> Found:
    """``quick`` improved by cotengra's subtree reconfiguration, if that helps.

    Three steps, each a ``subtree_reconfigure`` of a whole tree
    (`subtree_reconfigured`), costed by einslice's model; the fastest tree
    that fits the limit is kept:

    1. ``quick``'s tree, minimizing cotengra's flops + write "combo" cost;
    2. where ``runs`` runs of the best so far pay for it (their estimate
       times ``scale``, the profile's `rule_scale`), weighted by the share
       of ``quick``'s time that step 1 left (`reconfigures_others`),
       each of ``others`` (rule 0's other quick trees, `quick_paths`),
       minimizing "combo";
    3. the start whose tree is best, minimizing FLOPs alone.

    Deterministic: no random choices.

    Why the others too: the quick tree that ranks first need not reconfigure
    best. On einsum-benchmark's randreg-50-d4-6 the plain greedy tree
    (estimated 1.18 s, 10^11.3 FLOPs) reconfigured to 9.9 ms (10^9.2) where
    the random-greedy one it lost to (24.0 ms) reconfigured to 23.4 ms
    (10^9.65); measured 43 against 172 ms a call (load 4.4, 2 cores;
    benchmarks/results/networks.md, 2026-12-07 15:30); fresh11-randreg-70-d3
    (`RECONFIGURE_TRIALS`) 35.8 ms -> 1.72 ms where the random-greedy tree
    stayed at 16.5 ms. A tree reconfigured from one of ``others`` replaces
    the best only with no more FLOPs as well, or when estimated
    `OTHER_TREE_MARGIN` times faster: on lattice-4x4x4-d2 one estimated 2%
    faster with 2.4x the FLOPs (10^8.32) ran 8.3 against 5.8 ms; the trees
    taken (randreg-50, peps-5x5 and random-network of the suite) have fewer
    FLOPs and ran 1.4-3.9x faster.
    Why FLOPs from the best start only: each objective wins on some
    networks (lattice-8x8-d4: 2.51 ms by "combo", 1.99 ms by FLOPs), but
    both objectives from every start (four reconfigurations for two quick
    trees) found a faster tree than these steps on 3 of the 25 distinct
    networks whose quick tree is reconfigured (the 17 and fresh seeds
    7-17), by 2-10%, for twice the reconfiguration time (55 against 27 s).

    Example:
        >>> terms = [(i, (i + 1) % 8) for i in range(8)]  # a ring of matrices
        >>> args = (terms, (), [64] * 8, 4, 2**30, "sum", CPU_DEFAULT, None)
        >>> quick = _quick_trees(*args)
        >>> reconfigured(quick, *args).time <= quick.time
        True
    """
    labels = labelled(terms, output, sizes)
    network = (terms, output, sizes, itemsize, semiring, profile, given)
    best, winner = quick, quick.path

    def consider(start: Path, minimize: str) -> None:
        nonlocal best, winner
        path, cost = subtree_reconfigured(labels, start, minimize, *network)
        if (
            cost.peak_bytes <= memory_limit
            and cost.time < best.time
            and (
                start == quick.path
                or cost.flops <= best.flops
                or cost.time * OTHER_TREE_MARGIN <= best.time
            )
        ):
            best = dataclasses.replace(
                quick,
                path=path,
                flops=cost.flops,
                time=cost.time,
                peak_bytes=cost.peak_bytes,
            )
            winner = start

    consider(quick.path, "combo")
    spend = runs * best.time * scale  # (the rules' seconds, `rule_scale`)
    if reconfigures_others(spend, len(terms), best.time / quick.time):
        for start in dict.fromkeys(others):
            if start != quick.path:
                consider(start, "combo")
    consider(winner, "flops")
    return best


def subtree_reconfigured(
    labels,
    start: Path,
    minimize: str,
    terms,
    output,
    sizes,
    itemsize,
    semiring,
    profile,
    given,
) -> tuple[Path, Cost]:
    """The tree of ``start`` after cotengra's subtree reconfiguration, and its cost.

    ``labels``: `labelled`'s network; ``minimize``: cotengra's objective
    ("combo" or "flops"), its default subtree size and iterations.

    Example:
        >>> terms, sizes = [(0, 1), (1, 2), (2, 3)], [64, 64, 2, 64]
        >>> start = ((1, 2), (0, 1))  # the outer product's 64 x 64 first
        >>> labels = labelled(terms, (0, 3), sizes)
        >>> network = (terms, (0, 3), sizes, 4, "sum", CPU_DEFAULT, None)
        >>> path, cost = subtree_reconfigured(labels, start, "flops", *network)
        >>> path, cost.flops < estimate(terms, (0, 3), sizes, 4, "sum", start, {}).flops
        (((0, 1), (0, 1)), True)
    """
    from cotengra import ContractionTree

    tree = ContractionTree.from_path(*labels, path=start)
    tree = tree.subtree_reconfigure(minimize=minimize)
    path = tuple(tuple(int(p) for p in step) for step in tree.get_path())
    cost = estimate(
        terms, output, sizes, itemsize, semiring, path, {}, profile, False, given
    )
    return path, cost


@lru_cache(maxsize=64)
def quick_paths(
    terms: tuple[tuple[int, ...], ...],
    output: tuple[int, ...],
    sizes: tuple[int, ...],
    seed: int = 0,
) -> tuple[Path, ...]:
    """Rule 0's quick trees: the plain greedy order and the best random-greedy ones.

    Distinct paths only (the same tree is costed once). Cached: rule 0 costs
    them, and `reconfigured` starts from each.

    Example:
        >>> quick_paths(((0, 1), (1, 2), (2, 3)), (0, 3), (2, 2, 2, 2))
        (((0, 1), (0, 1)),)
    """
    candidates = (
        greedy_path(terms, output, sizes),
        random_greedy_path(terms, output, sizes, seed, quick_repeats(len(terms))),
    )
    return tuple(dict.fromkeys(candidates))


@lru_cache(maxsize=64)
def oe_quick_paths(
    terms: tuple[tuple[int, ...], ...],
    output: tuple[int, ...],
    sizes: tuple[int, ...],
) -> tuple[Path, ...]:
    """Rule 0's trees by opt_einsum: its greedy order and its best random-greedy one.

    None from `RUST_GREEDY_MIN_TENSORS` tensors on (they run in Python only).
    Distinct paths only; cached as `quick_paths`.

    Example:
        >>> oe_quick_paths(((0, 1), (1, 2), (2, 3)), (0, 3), (2, 2, 2, 2))
        (((0, 1), (0, 1)),)
    """
    if len(terms) >= RUST_GREEDY_MIN_TENSORS:
        return ()
    from opt_einsum import paths

    # int indices, not `labelled`'s strings: opt_einsum breaks ties in the
    # order it iterates sets, which for strings varies with each process's
    # hash seed (three processes, three trees); ints hash as themselves
    sets, size_dict = [frozenset(t) for t in terms], dict(enumerate(sizes))
    greedy = paths.greedy(sets, frozenset(output), size_dict)  # pyright: ignore[reportArgumentType]
    repeats = max(1, min(OE_MAX_REPEATS, OE_REPEAT_TENSORS // max(len(terms), 1)))
    candidates = (
        _pairwise(*labelled(terms, output, sizes), greedy),
        oe_random_greedy_path(terms, output, sizes, repeats),
    )
    return tuple(dict.fromkeys(candidates))


def _hashable(terms, output, sizes):
    """``terms``, ``output`` and ``sizes`` as tuples (`quick_paths`' cache keys)."""
    return tuple(map(tuple, terms)), tuple(output), tuple(sizes)


def quick_repeats(n_terms: int) -> int:
    """How many random-greedy orders rule 0 tries: ``QUICK_REPEAT_TENSORS / n``.

    Counted in tensors, not seconds, so a seed gives the same tree anywhere.

    Example:
        >>> quick_repeats(40), quick_repeats(190), quick_repeats(5000)
        (32, 10, 1)
    """
    return max(1, min(QUICK_MAX_REPEATS, QUICK_REPEAT_TENSORS // max(n_terms, 1)))


def random_greedy_path(
    terms: Sequence[tuple[int, ...]],
    output: tuple[int, ...],
    sizes: Sequence[int],
    seed: int,
    repeats: int,
) -> Path:
    """The fewest-FLOPs of ``repeats`` seeded random-greedy orders (cotengra's).

    Example:
        >>> random_greedy_path([(0, 1), (1, 2), (2, 3)], (0, 3), [2, 2, 2, 2], 0, 4)
        ((0, 1), (0, 1))
    """
    from cotengra.pathfinders import path_basic

    inputs, labels, size_dict = labelled(terms, output, sizes)
    path, _ = _fastest(
        path_basic.optimize_random_greedy_track_flops,
        path_basic.get_optimize_random_greedy_track_flops,
        inputs,
        labels,
        size_dict,
        ntrials=repeats,
        seed=seed,
    )
    return _pairwise(inputs, labels, size_dict, path)


def oe_random_greedy_path(
    terms: Sequence[tuple[int, ...]],
    output: tuple[int, ...],
    sizes: Sequence[int],
    repeats: int,
) -> Path:
    """The fewest-FLOPs of ``repeats`` of opt_einsum's random-greedy orders.

    opt_einsum seeds each repeat with its number (the first chooses no
    contraction at random, only its cost is jittered), so the paths are the
    same on any machine; Python's ``random`` state, which that seeding moves,
    is put back.

    Example:
        >>> oe_random_greedy_path([(0, 1), (1, 2), (2, 3)], (0, 3), [2, 2, 2, 2], 2)
        ((0, 1), (0, 1))
    """
    from opt_einsum.path_random import RandomGreedy

    sets, size_dict = [frozenset(t) for t in terms], dict(enumerate(sizes))
    state = random.getstate()
    try:  # (int indices: see `oe_quick_paths`)
        path = RandomGreedy(max_repeats=repeats)(sets, frozenset(output), size_dict)  # pyright: ignore[reportArgumentType]
    finally:
        random.setstate(state)
    return _pairwise(*labelled(terms, output, sizes), path)


def greedy_path(
    terms: Sequence[tuple[int, ...]], output: tuple[int, ...], sizes: Sequence[int]
) -> Path:
    """The plain greedy order of cotengra, as a pairwise path (opt_einsum format).

    Example:
        >>> greedy_path([(0, 1), (1, 2), (2, 3)], (0, 3), [2, 2, 2, 2])
        ((0, 1), (0, 1))
    """
    from cotengra.pathfinders import path_basic

    inputs, labels, size_dict = labelled(terms, output, sizes)
    greedy = _fastest(
        path_basic.optimize_greedy,
        path_basic.get_optimize_greedy,
        inputs,
        labels,
        size_dict,
    )
    return _pairwise(inputs, labels, size_dict, greedy)


# From this many tensors on, rule 0's greedy orders run in cotengrust (Rust)
# where it is installed: relational_5 (UAI 2014, 60,000 tables) took 3.5 s
# there, over 180 s in Python. Below, Python's (milliseconds): the same trees
# with or without cotengrust, and no exposure to its panics (0.2.1 panicked on
# a merged Promedus_24 variant of 51 tables).
RUST_GREEDY_MIN_TENSORS = 2000


def _fastest(python, get_accelerated, inputs, *args, **kwargs):
    """``python(inputs, ...)``, or cotengrust's version for many tensors.

    A cotengrust panic (pyo3's ``PanicException``, a ``BaseException``) falls
    back to Python's.
    """
    if len(inputs) >= RUST_GREEDY_MIN_TENSORS:
        accelerated = get_accelerated()  # cotengra's pick: Rust if installed
        if accelerated is not python:
            try:
                return accelerated(inputs, *args, **kwargs)
            except BaseException as e:
                if type(e).__name__ != "PanicException":
                    raise
    return python(inputs, *args, **kwargs)


def _pairwise(inputs, output, size_dict, path) -> Path:
    """A cotengra path as pairs only (opt_einsum format)."""
    from cotengra import ContractionTree

    if any(len(step) != 2 for step in path):
        # it took single tensors alone (or several at once): the tree's path
        # gives pairs only
        tree = ContractionTree.from_path(inputs, output, size_dict, path=path)
        path = tree.get_path()
    return tuple(tuple(int(p) for p in step) for step in path)


def rule_scale(profile: Profile) -> float:
    """What one second of ``profile``'s estimates weighs in the search's rules.

    The rules (trials' costs, the cheap-tree share, rule 0's reconfiguration,
    the reference's budget, the planning bound) were fixed on the CPU, whose
    estimates read ``CPU_DEFAULT.measured_per_estimated`` below measured
    times; a device whose estimates read further below counts its trees'
    estimates this much dearer (``Profile.measured_per_estimated``): on a
    TPU v5e they read 9-70x below (fixed per-step costs of small tiled
    steps), and its lattices' quick trees counted as cheap, were neither
    reconfigured nor searched, and ran 1.8x slower on the chip than the
    CPU profile's trees.

    Example:
        >>> from einslice._plan._profile import TPU_DEFAULT
        >>> rule_scale(CPU_DEFAULT), rule_scale(TPU_DEFAULT) > 1
        (1.0, True)
    """
    ratio = profile.measured_per_estimated / CPU_DEFAULT.measured_per_estimated
    return max(ratio, 1e-3)  # (a stored profile may say 0)


def allowance(best_time: float, budget: float | None) -> float:
    """What a search may spend, in the cost model's seconds: its stopping rules.

    The best tree's estimated run time (a first search costs about one run),
    or ``budget`` where larger (a growth search, ``TreeSearch.budget``).

    Example:
        >>> allowance(0.5, None), allowance(0.5, 4.0), allowance(8.0, 4.0)
        (0.5, 4.0, 8.0)
    """
    return best_time if budget is None else max(best_time, budget)


def planning_bound(best_time: float, semiring: str = "sum") -> float:
    """The wall seconds a bounded search's planning may take, given its best tree.

    The tree's estimated run time as measured here
    (`SUM_MEASURED_PER_ESTIMATED`, or `MEASURED_PER_ESTIMATED` on graphical
    models' "log" and "max" semirings, times ``best_time``) plus
    `PLAN_ALLOWANCE_SECONDS`: planning spends no more than the contraction
    it plans is estimated to take, plus a few seconds (issue 36), unless the
    caller asked for a search (``optimize=TreeSearch(...)``).

    Example:
        >>> planning_bound(1.0), planning_bound(1.0, "log")
        (6.0, 33.0)
    """
    measured = MEASURED_PER_ESTIMATED
    if semiring == "sum":
        measured = SUM_MEASURED_PER_ESTIMATED
    return best_time * measured + PLAN_ALLOWANCE_SECONDS


def least_search_cost(n_terms: int) -> float:
    """What a search that runs any trial costs at least: its minimum trials.

    ``ceil(MIN_TENSOR_TRIALS / n)`` trials of `TRIAL_COST_PER_TENSOR` per
    tensor (rule 1), in the cost model's seconds; a growth search
    (``_exec._run``) waits until it can afford that.

    Example:
        >>> least_search_cost(64) == 4 * 64 * TRIAL_COST_PER_TENSOR
        True
    """
    return -(-MIN_TENSOR_TRIALS // n_terms) * n_terms * TRIAL_COST_PER_TENSOR


def search_pays(spend: float, n_terms: int, semiring: str = "sum") -> bool:
    """Whether a search may run, given what it may spend (rules 0 and 1).

    Not for a tree cheaper than `CHEAP_TREE_SHARE` of a trial (rule 0), and,
    on the "sum" semiring, not when the minimum trials (`least_search_cost`)
    cost more than ``spend`` (`allowance`: one run of the best quick tree,
    or a growth search's budget): ski rental from the first call, a plan's
    first search costs about one run, and its growth searches more as its
    calls add up (``_exec._run``). Measured on einsum-benchmark's networks
    (benchmarks/results/networks.md, 2026-12-07): the minimum trials cost
    3-30x the quick tree's estimate on mera-p-first-last (5 trials, 433 ms
    estimated, for a 14.8 ms tree they did not improve), random-hyper-50
    and the fresh 5x5 periodic lattice, and made einslice's first result
    0.54-0.70x the fastest peer's there. Graphical models' "log" and "max"
    plans keep the minimum trials: they run ~30x their estimate
    (``_exec._choose.MEASURED_PER_ESTIMATED``), so a quick tree's estimate
    understates what a search saves there.

    Example:
        >>> n = 64
        >>> search_pays(least_search_cost(n), n), search_pays(0.02, n)
        (True, False)
        >>> search_pays(0.02, n, "log")
        True
    """
    if cheap(spend, n_terms):
        return False
    return semiring != "sum" or spend >= least_search_cost(n_terms)


def reconfigures_others(seconds: float, n_terms: int, share: float = 1.0) -> bool:
    """Whether runs of a reconfigured quick tree (``seconds``) pay for the others'.

    Reconfiguring one more quick tree (`reconfigured`'s ``others``, one
    objective) took 0.05-0.5 s on einsum-benchmark's 38- to 100-tensor
    networks (2 cores, load 2-5), about one trial (`TRIAL_COST_PER_TENSOR`,
    ~5 ms per tensor measured), so it counts as `RECONFIGURE_TRIALS` trials
    and is done only when the tree's runs, weighted by ``share``, are
    estimated to cost at least that. ``seconds`` is the quick tree's runs
    *after* its own reconfiguration (`reconfigured`'s step 1), ``share``
    that tree's time over the quick tree's (at most 1): what the others
    can save is at most those runs, and where the quick tree's own
    reconfiguration moved it little it sits where subtree moves cannot
    leave, so another start may reconfigure far better. On the 17 networks
    of benchmarks/networks.py and fresh seeds 7 and 11 (2026-12-08), where
    the share was 0.8-1.0, another start's tree replaced it on 3 of 7
    (randreg-50-d4-6 23.4 -> 9.9 ms, randreg-60-d5-8 64 -> 19 ms,
    fresh11-randreg-70-d3 16.5 -> 1.72 ms); below 0.66, on none of 10
    (mera-likelihood-d2, share 0.34: 9.4 ms against the others' 97 and 565
    ms, for 0.16 s more planning where its first result was 0.94x the
    fastest peer's). Judged on the quick tree before its reconfiguration,
    lattice-4x4x4-d2 (45 ms quick, 3.4 ms reconfigured) and random-hyper-50
    spent 2.2-2.5 s planning instead of 1.1-1.2 s for the same trees
    (2026-12-07 17:50, load ~2).

    Example:
        >>> reconfigures_others(0.165, 70), reconfigures_others(0.034, 64)
        (True, False)
        >>> reconfigures_others(0.094, 38), reconfigures_others(0.094, 38, 0.34)
        (True, False)
    """
    return seconds * share >= RECONFIGURE_TRIALS * n_terms * TRIAL_COST_PER_TENSOR


def cheap(seconds: float, n_terms: int) -> bool:
    """Whether a tree this fast ends the search: below `CHEAP_TREE_SHARE` of a trial.

    A search runs at least one trial, so it cannot pay for itself.
    """
    return seconds < CHEAP_TREE_SHARE * n_terms * TRIAL_COST_PER_TENSOR


def _optimizer(n_terms, itemsize, memory_limit, objective, seed):
    """Cotengra's hyper-optimizer, set to run one trial per ``search`` call."""
    import cotengra

    reconf_iterations = max(16, n_terms)
    target = max(2, int(memory_limit // itemsize * _TARGET_FRACTION))
    # cotengra is unannotated: pyright takes each option's type from its default
    # (str for "size", "auto", None-or-str...), so the ignores below are its, not ours.
    return cotengra.HyperOptimizer(
        methods=list(METHODS),
        minimize=objective,  # pyright: ignore[reportArgumentType]
        max_repeats=1,  # one trial per call: _run_trials decides when to stop
        parallel=False,  # pyright: ignore[reportArgumentType]
        optlib="optuna",
        optlib_opts={"sampler_opts": {"seed": seed}},
        reconf_opts={"subtree_size": 5, "maxiter": reconf_iterations},  # pyright: ignore[reportArgumentType]
        slicing_reconf_opts={  # pyright: ignore[reportArgumentType]
            "target_size": target,
            # Slice 16x per round (not cotengra's 2x) and reconfigure lightly:
            # the reconfiguration after each round dominates the trial's time.
            "step_size": 16,
            "max_repeats": 4,  # slice-finder attempts per round (cotengra: 16)
            "reconf_opts": {"subtree_size": 4, "maxiter": reconf_iterations // 4},
        },
        on_trial_error="raise",
        progbar=False,
    )


def _run_trials(
    optimizer,
    terms,
    output,
    sizes,
    seed,
    trials,
    patience,
    left: Callable[[float, bool], float],
    anneal: Callable[[float], float] | None = None,
    budget: float | None = None,
    scale: float = 1.0,
) -> bool:
    """Search trial by trial until good enough or out of patience; False on timeout.

    ``left(best, bounded)``: the seconds the search has left, given the
    best estimate so far (to the wall-time cap, and where ``bounded`` the
    planning bound, `planning_bound`), checked after each trial: the bound
    from the minimum trials on (they are the search's floor; on large
    networks a single trial). ``anneal``: called once,
    with the best estimate so far, when the minimum trials and
    `ANNEAL_AFTER_TRIALS` (or all ``trials``) have run; it returns the
    estimate of the tree it found (inf: none), which the stopping rules then
    count as the best so far. ``budget``: what the trials may cost where
    more than the best tree's estimate (the cheap-tree share and rule 2,
    `allowance`); ``scale``: what they weigh in the trials' cost units
    (`rule_scale`).
    """
    inputs, labels, size_dict = labelled(terms, output, sizes)
    bound = math.inf
    # cotengra draws every random choice (greedy jitter, kahypar's seed, random
    # subtrees) from Python's global ``random`` when given no seed: seed it for
    # the search and put the caller's state back afterwards.
    state = random.getstate()
    random.seed(seed)
    try:
        for done in range(1, trials + 1):
            optimizer.search(inputs, labels, size_dict)
            best_time = min(bound, optimizer.best.get("einslice_time", math.inf))
            trial_cost = len(terms) * TRIAL_COST_PER_TENSOR
            if cheap(allowance(best_time, budget) * scale, len(terms)):
                return True
            minimum = done * len(terms) >= MIN_TENSOR_TRIALS or done == trials
            if minimum:
                if anneal is not None and (
                    done >= ANNEAL_AFTER_TRIALS or done == trials
                ):
                    bound = anneal(best_time)
                    best_time = min(bound, best_time)
                    anneal = None
                if allowance(best_time, budget) * scale < done * trial_cost or (
                    optimizer.trials_since_best >= patience
                ):
                    return True
            if left(best_time, minimum) < 0:
                return False
    finally:
        random.setstate(state)
    return True


def _found(optimizer, n_indices: int) -> Found:
    """The hyper-optimizer's best tree, as a `Found` (indices back to ints)."""
    # ``tree`` is ``best["tree"]``; pyright infers ``best`` as dict[str, float]
    # from cotengra's initial {"score": inf, ...}.
    tree = cast("ContractionTree", optimizer.tree)
    path = tuple(tuple(int(p) for p in step) for step in tree.get_path())
    best = optimizer.best
    return Found(
        path=path,
        sliced=tuple(map(label_indices(n_indices).__getitem__, tree.sliced_inds)),
        flops=float(tree.contraction_cost()),
        time=float(best.get("einslice_time", math.inf)),
        peak_bytes=int(best.get("einslice_peak", 0)),
        trials=len(optimizer.scores),
    )
