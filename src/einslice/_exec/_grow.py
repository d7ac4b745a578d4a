"""Growing a plan's tree search with its use: the rules (`_run._TopLevelRun` runs them).

Ski rental on the tree search: a plan whose tree came from the large-network
search under ``optimize="auto"`` searches again as the estimated run time
of its calls adds up (`first_growth_call`, then at each doubling), with a
budget of half of it (`grown_plans`); the plans it finds that may beat the
held one (`contenders`) are compiled in the background, then timed on the
user's own calls, interleaved with the held plan (`Trial`); the runner takes
the fastest when it is faster by `GROW_MIN_GAIN` (`choice`). Growth stops
when searches stop finding faster trees (`GROW_FRUITLESS`). docs/search.md,
"Growing with use", says it in prose.

Example:
    >>> import einslice
    >>> first_growth_call(einslice.plan("ij,jk->ik", (2, 2), (2, 2))) is None
    True
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence

import jax

from .._plan import _planner
from .._plan._request import PlanRequest
from .._plan._search import (
    PLAN_RUNS,
    REFERENCE_TRIAL_COST_PER_TENSOR,
    TRIAL_COST_PER_TENSOR,
    TreeSearch,
    least_search_cost,
    rule_scale,
)
from .._plan._types import Plan
from . import _apart
from ._executors import compile_seconds
from ._semiring import Config

# Growth searches own trials at most GROW_MAX_TRIALS (the reference at most
# as many): cotengra's peer in benchmarks/networks.py runs 32 hyper-trials;
# einslice's trials cost about a fifth of cotengra's (REFERENCE_TRIAL_COST_
# PER_TENSOR), so 64 of its own and up to 64 of the reference's.
GROW_MAX_TRIALS = 64
# Growth stops after this many growths in a row that were fruitless (the
# runner took no new plan: the search found no plan that had not been timed
# before, or none timed `GROW_MIN_GAIN` faster than the held one): with the
# same seed a larger budget replays the trials before and adds some, so two
# that found nothing mean the trials have run out of ideas (patience).
GROW_FRUITLESS = 2
# ... counting only searches whose budget affords GROW_PATIENT_TRIALS own and
# reference trials: the first growths of a plan come at small budgets (half
# the calls' run time so far) and replay a trial or two. random-hyper-50
# (einsum-benchmark) stopped after growths of 0.53 and 1.1 s found its tree
# again, at 38 ms estimated; a 2.2 s budget finds one of 18.8 ms (10^8.45
# FLOPs, cotengra's 32 trials: 10^8.5) and 4.4-17.6 s no better.
GROW_PATIENT_TRIALS = 8
# No growth is scheduled past this call: a plan so cheap that its first growth
# would wait longer (the least search cost over its estimated run time) is
# steady at once. At 10^5 the einsum-benchmark networks all grow (a 190-tensor
# QAOA circuit, estimated 0.15 ms, first at ~8400 calls) while a 40-matrix
# chain of 3x3 matrices (microseconds) never does.
GROW_LAST_CALL = 10**5
# The model's estimated seconds read about this much below measured times of
# einsum-benchmark networks on this CPU: the grown plans of
# benchmarks/results/networks.md ran 2.0-3.7x their estimates (lattice-8x8
# 0.99 -> 1.97 ms, randreg-60 15.4 -> 32.6 ms, mera-p-first-last 3.3 -> 8.0
# ms, ctg-lattice-10x10 0.94 -> 3.5 ms; loaded machine). A growth compiles and
# times a plan only when its estimated compile (`_executors.compile_seconds`,
# wall seconds) is at most this times ``spent``, the estimated run time of the
# calls so far: about what they took (ski rental). 2, the low end, errs
# towards not compiling.
GROW_MEASURED_PER_ESTIMATED = 2.0
# ... and where a plan runs slower than that, its calls' run time counts at
# its pace (`pace`): its estimated time times how much more than
# GROW_MEASURED_PER_ESTIMATED times its estimate its calls measured. A runner
# times PACE_CALLS calls of its held plan's optimized program (waited for:
# the trials' way, `timed_call`) and its trials' winner gives the next pace.
# randreg-50 (einsum-benchmark) ran 98-172 ms a call on a tree estimated at
# 23.4 ms: its first growth, due at call 44 by the estimate, came 13 s into
# its calls (2 loaded cores), and its 15 s of benchmark calls never switched.
# Calls of PACE_MIN_SECONDS or less keep pace 1: their fixed costs (dispatch,
# per-step overhead: tree-100's 99 steps run 1-2 ms, estimated 0.24 ms) are
# what no tree improves. PACE_MAX bounds a pace measured under heavy load.
PACE_CALLS = 3
PACE_MIN_SECONDS = 0.005
PACE_MAX = 8.0
# A growth times, beside the held plan, the grown search's plan and the plan
# of its runner-up tree (the other side's best: `_search.Found.runner_up`)
# when estimated within this factor of the best estimate of the three: the
# model ranks close trees wrongly by that much (randreg-50, einsum-benchmark:
# einslice's own tree estimated 4.65 ms ran 6.8 ms; cotengra's, estimated
# 6.94 ms, ran 5.9 ms, as fast as cotengra's own jax backend).
GROW_TIME_WITHIN = 2.0
# A `Trial` runs each program once more (discarded: its first call on the
# call path) and then this many calls, interleaved one call per program per
# round; the median is kept.
GROW_TIMED_CALLS = 5
# A candidate whose median over its first GROW_DROP_AFTER timed calls is
# more than GROW_DROP_SLOWER times the held plan's median so far is dropped
# from its trial: its later turns run the held plan, so that a candidate the
# model misjudged (estimated within `GROW_TIME_WITHIN`, so up to twice as
# slow) slows three of the user's calls (warm-up and two), not six. 1.5: far
# above the trial's noise (the held plan's median moved 35% between trials,
# see `GROW_MIN_GAIN`, but interleaved calls move together), and a plan that
# slow could not be taken anyway.
GROW_DROP_AFTER = 2
GROW_DROP_SLOWER = 1.5
# The runner takes a timed plan only when its median is at least this
# fraction below the held plan's: a hair's win is noise, which would switch
# trees (changing the rounding) and restart growth for nothing. On a
# 50-tensor random regular graph (1.3-2.4 ms a call on 2 quiet cores,
# benchmarks/results/latency.md) a growth timed a candidate 0.7% faster
# (1.786 vs 1.799 ms), which reset the count of fruitless growths: growth
# went on. The held plan's median moved by 35% between two trials a few
# seconds apart (1.76, 2.37 ms): interleaving makes the ratio steadier than
# that, but a margin much below 5% would be luck.
# The compile is spent by then (the timing compiled it): any real gain pays.
GROW_MIN_GAIN = 0.05
# Growth searches in a child process (``_apart``), not on the background
# thread: there a search held the GIL the calls need (lattice-8x8's 2.9 ms
# call took 14.7 ms while one ran). False: in this process (tests that watch
# the search from inside).
SEARCH_APART = True
_OFF = ("0", "false", "no", "off")


def growth_enabled() -> bool:
    """Whether top-level runners may grow their plan's tree (``EINSLICE_GROW``).

    ``EINSLICE_GROW=0`` turns growth off: every call runs the plan's own tree
    (a switch of trees changes floating-point rounding between calls).

    Example:
        >>> import os
        >>> growth_enabled() == (os.environ.get("EINSLICE_GROW", "1") != "0")
        True
    """
    return os.environ.get("EINSLICE_GROW", "1").strip().lower() not in _OFF


def first_growth_call(p: Plan) -> int | None:
    """The top-level call at which ``p``'s tree search first grows (None: never).

    The first call `c` >= `PLAN_RUNS` (the runs the first search assumed)
    at which a growth search's budget, ``c // 2`` runs of ``p``'s estimated
    time, affords the search's minimum trials (`_search.least_search_cost`);
    None past `GROW_LAST_CALL`.

    Example:
        >>> import einslice
        >>> first_growth_call(einslice.plan("ij,jk->ik", (2, 2), (2, 2))) is None
        True
    """
    least = least_search_cost(len(p.prepared))
    time_ = max(p.cost.time * scale(p), 1e-12)
    call = max(PLAN_RUNS, 2 * math.ceil(least / time_))
    return call if call <= GROW_LAST_CALL else None


def scale(p: Plan) -> float:
    """What one second of ``p``'s estimate weighs against trial costs (`rule_scale`).

    1 on the CPU profile (and a plan without one); above where the device's
    estimates read further below measured times: ``p``'s first growth comes
    at the calls that pay for a search as measured, and its budget (its
    estimated seconds) affords the trials it would on a CPU.

    Example:
        >>> import einslice
        >>> cpu, tpu = einslice.profiles.CPU, einslice.profiles.TPU
        >>> p = einslice.plan("ij,jk->ik", (2, 2), (2, 2), profile=cpu)
        >>> scale(p), scale(einslice.plan("ij,jk->ik", (2, 2), (2, 2), profile=tpu))
        (1.0, 6.666666666666667)
    """
    return 1.0 if p.profile is None else rule_scale(p.profile)


def pace(p: Plan, seconds: float) -> float:
    """How much faster a runner holding ``p`` counts its calls' run time (``spent``).

    ``seconds``, a call of ``p`` as measured, over `GROW_MEASURED_PER_ESTIMATED`
    times its estimate (and its device's `scale`), between 1 and `PACE_MAX`;
    1 for a call of at most `PACE_MIN_SECONDS`.

    Example:
        >>> import dataclasses, einslice
        >>> p = einslice.plan("ij,jk->ik", (2, 2), (2, 2))
        >>> p = dataclasses.replace(p, cost=dataclasses.replace(p.cost, time=0.01))
        >>> pace(p, 0.08), pace(p, 0.01), pace(p, 0.004)
        (4.0, 1.0, 1.0)
    """
    if seconds <= PACE_MIN_SECONDS:
        return 1.0
    measured = GROW_MEASURED_PER_ESTIMATED * scale(p)
    ratio = seconds / (measured * max(p.cost.time, 1e-12))
    return min(PACE_MAX, max(1.0, ratio))


def grown_plans(
    request: PlanRequest, budget: float, calls: int
) -> tuple[Plan, Plan | None]:
    """The plans of a grown tree search and of its runner-up tree (or None).

    The search may cost ``budget`` (the cost model's seconds): the same
    request (limit, semiring, dtype, profile, devices) with
    ``optimize=TreeSearch(trials=GROW_MAX_TRIALS, runs=calls, budget=...)``,
    seed 0 as ``"auto"``'s: reproducible, and cached on disk as any search
    (the budget is part of the key). The runner-up is the tree the search
    ranked second, sliced again for the limit (`_planner.grown_plans`). In a
    child process (`SEARCH_APART`, ``_apart``): on this process's background
    thread the search would hold the GIL the calls need.
    """
    search = TreeSearch(trials=GROW_MAX_TRIALS, runs=calls, budget=budget)
    if SEARCH_APART and _apart.available():
        return _apart.grown_plans_apart(request, search)
    return _planner.grown_plans(request, search)


def contenders(
    held: Plan, found: Sequence[Plan | None], spent: float, tried: set[tuple]
) -> list[Plan]:
    """The plans of ``found`` worth compiling and timing beside ``held``.

    Each whose program differs from ``held``'s, from the others' and from
    every plan timed before (``tried``: their `program_key`; a program is
    timed once), fits ``held``'s memory limit, is estimated within
    `GROW_TIME_WITHIN` of the best estimate (``held``'s included), and whose
    estimated compile is at most `GROW_MEASURED_PER_ESTIMATED` (times the
    device's `scale`) times ``spent`` (the runner's, when the search
    returned: the calls made while it searched count).

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (2, 2), (2, 2))
        >>> contenders(p, [p, None], 1.0, set())
        []
    """
    best = min(p.cost.time for p in (held, *found) if p is not None)
    seen = {program_key(held), *tried}
    chosen = []
    for p in found:
        if p is None or program_key(p) in seen:
            continue
        seen.add(program_key(p))
        if (
            p.peak_bytes <= held.memory_limit
            and p.cost.time <= GROW_TIME_WITHIN * best
            and compile_seconds(p) <= GROW_MEASURED_PER_ESTIMATED * scale(held) * spent
        ):
            chosen.append(p)
    return chosen


def program_key(p: Plan) -> tuple:
    """What ``p``'s calls run: its fields but the source of its derivative.

    Two plans of one tree from different requests (the held plan's
    ``optimize="auto"``, growths' searches of other budgets) differ only
    there (``_planner.Deferred`` holds the request), so they are unequal: a
    growth that found the held tree again, or the one timed by the growth
    before, compiled and timed it again (lattice-8x8: 3 s of compile each).

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (2, 3), (3, 4))
        >>> q = einslice.plan("ij,jk->ik", (2, 3), (3, 4), optimize=[(0, 1)])
        >>> program_key(p) == program_key(q)
        True
    """
    fields = dataclasses.fields(p)
    return tuple(
        getattr(p, f.name) for f in fields if f.compare and f.name != "derivative"
    )


def trial_cost(p: Plan) -> float:
    """The estimated seconds of one own and one reference trial on ``p``'s network.

    Example:
        >>> import einslice
        >>> trial_cost(einslice.plan("ij,jk->ik", (2, 2), (2, 2))) > 0
        True
    """
    per_tensor = TRIAL_COST_PER_TENSOR + REFERENCE_TRIAL_COST_PER_TENSOR
    return len(p.prepared) * per_tensor / scale(p)


def fruitless_after(growth: Growth, fruitless: int, held: Plan) -> int:
    """The count of fruitless growths in a row once ``growth`` is done.

    Zero when the runner took a new plan; one more when it did not and the
    search afforded `GROW_PATIENT_TRIALS` trials; else unchanged.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (2, 2), (2, 2))
        >>> fruitless_after(Growth(10, 1.0, 0.1, 1.0, 1.0, switched=True), 1, p)
        0
    """
    if growth.switched:
        return 0
    if growth.budget >= GROW_PATIENT_TRIALS * trial_cost(held):
        return fruitless + 1
    return fruitless


def grows_again(growth: Growth, fruitless: int, held: Plan, spent: float) -> bool:
    """Whether a runner holding ``held`` grows again after ``growth`` (at 2 ``spent``).

    Not after `GROW_FRUITLESS` fruitless growths in a row (`fruitless_after`),
    once a search's budget affords every trial (`GROW_MAX_TRIALS` own and
    reference trials), nor when the next growth would come past
    `GROW_LAST_CALL`.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (2, 2), (2, 2))
        >>> grows_again(Growth(10, 1e-9, 0.1, 1.0, 1.0, switched=True), 0, p, 1.0)
        False
    """
    return not (
        fruitless >= GROW_FRUITLESS
        or growth.budget >= GROW_MAX_TRIALS * trial_cost(held)
        or growth.call + spent / held.cost.time > GROW_LAST_CALL
    )


def timed_call(program: Callable, plan: Plan, config: Config, args: tuple):
    """``program(plan, config, *args)`` waited for, and the seconds it took."""
    start = time.perf_counter()
    out = jax.block_until_ready(program(plan, config, *args))
    return out, time.perf_counter() - start


@dataclasses.dataclass(frozen=True)
class Growth:
    """One growth of a top-level runner (`_run._TopLevelRun.growths`).

    Attributes:
        call: the top-level call that started it.
        budget: its search's budget, in the cost model's seconds.
        seconds: its search's wall time (search and planning).
        before: the estimated time of the plan the runner held.
        found: the estimated time of the grown search's plan.
        switched: whether the runner took a new plan (the grown search's or
            its runner-up tree's).
        timed: the median seconds per call of the plans timed (`Trial`),
            the held plan's first; empty when none was timed.
        chosen: the estimated time of the plan held after this growth.
        compiled: the wall seconds of the timed plans' compiles (and first
            run), in the background, in the order of ``timed``.
    """

    call: int
    budget: float
    seconds: float
    before: float
    found: float
    switched: bool
    timed: tuple[float, ...] = ()
    chosen: float = math.nan
    compiled: tuple[float, ...] = ()


class Trial:
    """A growth's plans timed on the user's calls, one call per plan in turn.

    The programs are compiled (in the background) before a trial starts; a
    call during it runs the next plan in turn (the held plan first) and waits
    for its result (`timed_call`). Timing on the user's own calls costs no
    run the user did not ask for: a background thread timing copies would
    take a core from the calls on a machine of two. A trial's calls give the
    user the result of whichever plan ran (equal up to rounding). A
    candidate timed far slower than the held plan is dropped (its turns run
    the held plan: `GROW_DROP_SLOWER`).

    Attributes:
        plans: the held plan, then the contenders.
        programs: their compiled programs, in that order.
        config: the calls the programs were compiled for (others run the
            held program untimed).
        growth: the `Growth` so far (search, budget, compiles): the runner
            completes it with the timings and its `choice`.
        spent: the runner's ``spent`` when the growth started.
        dropped: the indices of the candidates dropped.
    """

    def __init__(
        self,
        plans: Sequence[Plan],
        programs: Sequence[Callable],
        config: Config,
        growth: Growth,
        spent: float,
    ) -> None:
        self.plans = tuple(plans)
        self.programs = tuple(programs)
        self.config = config
        self.growth = growth
        self.spent = spent
        self.times: list[list[float]] = [[] for _ in self.plans]
        self.dropped: set[int] = set()  # candidates timed too slow to go on
        self._turns = itertools.count()  # (next() is atomic in CPython)

    def call(self, args: tuple):
        """Run the next plan in turn (the held for a dropped one) on ``args``."""
        turn = next(self._turns)
        k = turn % len(self.plans)
        if k in self.dropped:
            k = 0
        out, seconds = timed_call(self.programs[k], self.plans[k], self.config, args)
        if turn >= len(self.plans):  # (the first round warms the programs up)
            self.times[k].append(seconds)  # (list.append is atomic)
            if k and self._too_slow(k):
                self.dropped.add(k)  # (set.add is atomic)
        return out

    def _too_slow(self, k: int) -> bool:
        """Whether candidate ``k`` has timed `GROW_DROP_SLOWER` slower than the held."""
        mine, held = self.times[k], self.times[0]
        return (
            len(mine) >= GROW_DROP_AFTER
            and len(held) > 0
            and statistics.median(mine) > GROW_DROP_SLOWER * statistics.median(held)
        )

    @property
    def complete(self) -> bool:
        """Whether every plan not dropped has `GROW_TIMED_CALLS` timed calls."""
        return all(
            len(t) >= GROW_TIMED_CALLS
            for k, t in enumerate(self.times)
            if k not in self.dropped
        )

    def medians(self) -> tuple[float, ...]:
        """Each plan's median call, in seconds (held plan first)."""
        return tuple(statistics.median(t) for t in self.times)

    def choice(self, held: float | None = None) -> int:
        """The plan to hold: the fastest kept when `GROW_MIN_GAIN` faster, else 0.

        ``held``: the held plan's seconds where its calls run faster than
        its program (a walk kept instead of it: ``_keep``), which the others
        must beat. The compiles are spent by now, so no saving has to pay
        for them.
        """
        medians = self.medians()
        base = medians[0] if held is None else min(medians[0], held)
        kept = [k for k in range(len(medians)) if k not in self.dropped]
        fastest = min(kept, key=medians.__getitem__)
        return fastest if medians[fastest] <= (1 - GROW_MIN_GAIN) * base else 0
