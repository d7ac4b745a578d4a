"""Running a plan: operand casts, the jitted program, compile options.

Kept apart from ``_api`` so that ``Plan.__call__`` runs a plan without
importing the public entry points (no import cycle through ``_api``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from functools import cache, lru_cache

import jax
import jax.numpy as jnp
import numpy as np
from jax import core, lax

from .._errors import EinsliceError, MemoryLimitError
from .._plan._planner import grown_request, make_plan, runner_up_request
from .._plan._request import PlanRequest
from .._plan._search import (
    PLAN_RUNS,
    REFERENCE_TRIAL_COST_PER_TENSOR,
    TRIAL_COST_PER_TENSOR,
    TreeSearch,
    least_search_cost,
)
from .._plan._types import Plan, register_runner
from . import _background
from ._choose import Later, host_first_seconds
from ._compat import CONCRETE_ARRAYS, as_weak, supported_options
from ._executors import EXECUTORS, compile_seconds, executor_of
from ._semiring import Config


def execute_plan(
    p: Plan, operands: Sequence, precision=None, preferred_element_type=None
) -> jax.Array:
    """Run a plan on operands of the shapes it was made for."""
    config = Config(precision=precision, preferred_element_type=preferred_element_type)
    executor = executor_of(p)
    if executor.compiles and set(map(type, operands)) <= CONCRETE_ARRAYS:
        # The common call, kept to one pass over the operands (a per-operand
        # check cost 50-80 us of a 100-tensor tree's 0.85 ms call, caches
        # cold after the run): concrete arrays, whose shapes jit's dispatch
        # compares with the compiled program's, and `_run_impl` checks
        # against the plan's whenever it traces a new one.
        return _top_level_run(p)(p, config, *operands)
    _check_shapes(p, operands)
    traced = any(isinstance(x, core.Tracer) for x in operands)
    if not executor.compiles:
        if traced:
            raise EinsliceError(
                f"executor {executor.name!r} runs outside JAX's transformations "
                "(jit, vmap, grad) only; plan with the default executor "
                "'einslice' to run under one."
            )
        return jnp.asarray(executor.run(p, config, operands))
    run = _run if traced else _top_level_run(p)
    return run(p, config, *operands)


def _check_shapes(p: Plan, operands: Sequence) -> None:
    """EinsliceError unless ``operands`` have the shapes ``p`` was made for."""
    shapes = tuple(tuple(np.shape(x)) for x in operands)
    if shapes != p.equation.shapes:
        raise EinsliceError(
            f"this plan was made for shapes {list(p.equation.shapes)} but got "
            f"{list(shapes)}; make a new plan with einslice.plan(...) for these "
            "shapes."
        )


register_runner(execute_plan)


# A plan of at least this many steps and at most this many FLOPs (forward) is
# compiled with XLA's backend optimizations off: compiling, not running,
# dominates it. On a 48-step "log" lattice (bond 2) that halved the grad's
# compile time (27 -> 14 s, loaded machine) for 3 ms more per call; on a
# 512² "log" triangle it would make the run 5x slower, hence the FLOPs bound.
CHEAP_MIN_STEPS = 32
CHEAP_MAX_FLOPS = 10**8
# A plan of at least this many steps is compiled without XLA:CPU's newer
# (MLIR) fusion emitters, whose code generation holds most of the compile's
# memory. Measured on the grad programs of UAI networks: Segmentation_11's 109
# steps (cheap) 1049 -> 434 MiB peak RSS and 25 -> 6 s; Grids_15's 177 sliced
# steps 1439 -> 661 MiB, its run 2.52 -> 2.67 s. Below this the run loses up to
# 12% (suite: mixture 1.12x, random-network's 35 steps 1.08x slower), for
# compiles that take about a second anyway.
LARGE_MIN_STEPS = 64
_CPU_ONLY: dict[str, object] = {"xla_cpu_use_fusion_emitters": False}
CHEAP_COMPILE: dict[str, object] = {"xla_backend_optimization_level": 0, **_CPU_ONLY}
LARGE_COMPILE: dict[str, object] = dict(_CPU_ONLY)


def cheap_to_run(p: Plan) -> bool:
    """Whether ``p`` is compiled for compile time rather than run time.

    Example:
        >>> import einslice
        >>> cheap_to_run(einslice.plan("ij,jk->ik", (2, 2), (2, 2)))
        False
    """
    return len(p.steps) >= CHEAP_MIN_STEPS and p.flops <= CHEAP_MAX_FLOPS


def compile_options(p: Plan, optimized: bool = False) -> dict[str, object] | None:
    """The XLA compiler options ``p``'s program gets (None: XLA's defaults).

    ``CHEAP_COMPILE`` for a plan ``cheap_to_run`` (unless ``optimized``: its
    program for many calls, see `OPTIMIZE_AFTER_CALLS`), ``LARGE_COMPILE`` for
    one of ``LARGE_MIN_STEPS`` steps or more; XLA:CPU's flags only on a CPU
    backend, and only the options this JAX's XLA knows
    (``_compat.supported_options``: JAX 0.12 has no fusion-emitter switch).

    Example:
        >>> import einslice
        >>> compile_options(einslice.plan("ij,jk->ik", (2, 2), (2, 2))) is None
        True
    """
    if cheap_to_run(p) and not optimized:
        options = CHEAP_COMPILE
    elif len(p.steps) >= LARGE_MIN_STEPS:
        options = LARGE_COMPILE
    else:
        return None
    if jax.default_backend() != "cpu":
        options = {k: v for k, v in options.items() if k not in _CPU_ONLY}
    return supported_options(options) or None


def _run_impl(p: Plan, config: Config, *operands) -> jax.Array:
    _check_shapes(p, operands)  # (at trace time only)
    dtype = jnp.dtype(p.dtype)
    weak = config.preferred_element_type is None and _weak_result(operands)
    arrays = []
    for x, drop in zip(operands, p.equation.squeezed, strict=True):
        x = _weak_cast(x, dtype) if weak else jnp.asarray(x).astype(dtype)
        arrays.append(lax.squeeze(x, drop) if drop else x)
    with jax.named_scope(f"einslice[{p.equation.text()}]"):
        out = executor_of(p).run(p, config, arrays)
    return as_weak(out) if weak else out


_run = jax.jit(_run_impl, static_argnums=(0, 1), inline=True)


@cache
def _run_with(options: tuple[tuple[str, object], ...]):
    """``_run`` compiled with these XLA options (jit fixes them per function)."""
    return jax.jit(
        _run_impl, static_argnums=(0, 1), inline=True, compiler_options=dict(options)
    )


# A plan compiled for compile time (`cheap_to_run`) and called outside any
# trace is compiled again with XLA's optimizations on at its
# OPTIMIZE_AFTER_CALLS-th call (ski rental: by then its slower calls have cost
# about what the optimized compile costs). Measured eagerly on einsum-benchmark
# networks (2 cores): a 100-tensor tree 3.6 vs 1.25 ms a call for 0.9 s more
# compile (break-even ~360 calls), a 100-site MPS 18.6 vs 5.7 ms for 1.3 s
# (~100), QAOA max-cut 16.3 vs 10.7 ms for 0.6 s (~110). Inside a user's
# jax.jit a plan never gets these options: the user's jit compiles it.
OPTIMIZE_AFTER_CALLS = 100

# Growing the tree search with a plan's use (ski rental; `_TopLevelRun`).
# Growth searches own trials at most GROW_MAX_TRIALS (the reference at most
# as many): cotengra's peer in benchmarks/networks.py runs 32 hyper-trials;
# einslice's trials cost about a fifth of cotengra's (REFERENCE_TRIAL_COST_
# PER_TENSOR), so 64 of its own and up to 64 of the reference's.
GROW_MAX_TRIALS = 64
# Growth stops after this many growth searches in a row found no faster tree:
# with the same seed a larger budget replays the trials before and adds some,
# so two that found nothing mean the trials have run out of ideas (patience).
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
# A growth times, beside the held plan, the grown search's plan and the plan
# of its runner-up tree (the other side's best: `_search.Found.runner_up`)
# when estimated within this factor of the best estimate of the three: the
# model ranks close trees wrongly by that much (randreg-50, einsum-benchmark:
# einslice's own tree estimated 4.65 ms ran 6.8 ms; cotengra's, estimated
# 6.94 ms, ran 5.9 ms, as fast as cotengra's own jax backend).
GROW_TIME_WITHIN = 2.0
# Each timed program runs once to compile and warm up, then this many calls,
# interleaved one call per program per round; the median is kept.
GROW_TIMED_CALLS = 5
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
    time_ = max(p.cost.time, 1e-12)
    call = max(PLAN_RUNS, 2 * math.ceil(least / time_))
    return call if call <= GROW_LAST_CALL else None


def grown_plans(
    request: PlanRequest, budget: float, calls: int
) -> tuple[Plan, Plan | None]:
    """The plans of a grown tree search and of its runner-up tree (or None).

    The search may cost ``budget`` (the cost model's seconds): the same
    request (limit, semiring, dtype, profile, devices) with
    ``optimize=TreeSearch(trials=GROW_MAX_TRIALS, runs=calls, budget=...)``,
    seed 0 as ``"auto"``'s: reproducible, and cached in memory and on disk as
    any search (the budget is part of the key). The runner-up is the tree
    the search ranked second, sliced again for the limit
    (`_planner.runner_up_request`).
    """
    search = TreeSearch(trials=GROW_MAX_TRIALS, runs=calls, budget=budget)
    grown = dataclasses.replace(request, optimize=search)
    other = runner_up_request(grown)
    try:
        second = None if other is None else make_plan(other)
    except MemoryLimitError:  # (its slicing at the limit may not fit)
        second = None
    return make_plan(grown), second


@dataclasses.dataclass(frozen=True)
class Growth:
    """One growth search of a top-level runner (`_TopLevelRun.growths`).

    Attributes:
        call: the top-level call that ran it.
        budget: its budget, in the cost model's seconds.
        seconds: its wall time (search and planning).
        before: the estimated time of the plan the runner held.
        found: the estimated time of the grown search's plan.
        switched: whether the runner took a new plan (the grown search's or
            its runner-up tree's).
        timed: the measured seconds per call of the programs timed (`timed_
            programs`), the held plan's first; empty when none was timed.
        chosen: the estimated time of the plan held after this growth.
    """

    call: int
    budget: float
    seconds: float
    before: float
    found: float
    switched: bool
    timed: tuple[float, ...] = ()
    chosen: float = math.nan


class _TopLevelRun:
    """A plan's runner outside any trace: host walk, compiled, optimized, grown.

    A many-step plan first runs in numpy (the "host" executor) while those
    runs have cost less than its compile is estimated to
    (`_choose.host_first_seconds`: a one-shot call pays no compile; on an
    accelerator, its operands' copies to the host count); then the
    compile-time program, and the optimized one from its
    `OPTIMIZE_AFTER_CALLS`-th compiled call on (the same program when the
    plan is not cheap).

    **Growth** (ski rental on the tree search). A plan whose tree came from
    the large-network search under ``optimize="auto"``
    (``_planner.growable``) searches again at top-level call `c` =
    `first_growth_call`, and again each time the estimated run time of its
    calls so far (``spent``: each call adds the held plan's ``cost.time``)
    has doubled since the last growth: a search whose own trials may cost
    half of ``spent`` and cotengra's reference as much (`grown_plans`; the
    first search cost about one run). So each growth costs at most
    ``spent``, and all of them at most twice the estimated run time of the
    calls made so far (ski rental's bound); a larger budget replays the
    smaller one's trials (same seed) and adds more. The grown plan and the
    plan of the search's runner-up tree, where either differs from the held
    plan and is estimated within `GROW_TIME_WITHIN` of the best of the
    three, are compiled and timed beside the held one on this call's
    operands (`timed_programs`; when their estimated compile costs no more
    than the calls so far): the runner takes the fastest when its measured
    saving over as many calls again (`c`) exceeds its measured compile.
    Without a plan to time (none differs), nothing changes. Growth stops
    (the runner is then `steady`) after `GROW_FRUITLESS` searches in a
    row found no plan that timed faster (counting those that afforded
    `GROW_PATIENT_TRIALS` trials), once a search's budget affords every trial it
    may run (`GROW_MAX_TRIALS` own and reference trials), past
    `GROW_LAST_CALL`, or when ``EINSLICE_GROW=0``. Only growths time calls
    (timing blocks on each result); every other call adds the held plan's
    estimated time to ``spent``. ``plan`` stays what the runner holds now
    (`running_plan`); the caller's `Plan` is unchanged.
    """

    def __init__(self, p: Plan) -> None:
        self.plan = p
        self.calls = 0  # compiled calls
        self.top_calls = 0  # every call, host or compiled (growth counts them)
        self.host_budget = host_first_seconds(
            p, on_device=jax.default_backend() != "cpu"
        )
        self.host_spent = 0.0
        self.first = _jitted(compile_options(p))
        self.later = _jitted(compile_options(p, optimized=True))
        self.request = grown_request(p) if growth_enabled() else None
        self.spent = 0.0  # the held plans' estimated seconds, summed over calls
        first = None if self.request is None else first_growth_call(p)
        # the ``spent`` at which the next growth runs (None: no more growth)
        self.grow_at = None if first is None else (first - 0.5) * p.cost.time
        self.growths: list[Growth] = []
        self.fruitless = 0
        self._growing = threading.Lock()

    @property
    def steady(self) -> bool:
        """Whether the next call runs the program every later call runs."""
        on_host = self.host_spent < self.host_budget
        return (
            not on_host
            and self.grow_at is None
            and (self.first is self.later or self.calls + 1 >= OPTIMIZE_AFTER_CALLS)
        )

    def __call__(self, p: Plan, config: Config, *args):
        # (a lost count or sum under threads only delays growth)
        self.top_calls += 1
        self.spent += self.plan.cost.time
        due = self.grow_at is not None and self.spent >= self.grow_at
        if due and self._growing.acquire(blocking=False):
            try:
                if self.grow_at is not None:  # (not grown by another thread)
                    self._grow(config, args)
            finally:
                self._growing.release()
        p = self.plan
        if self.host_spent < self.host_budget and _host_call(p, config, args):
            start = time.perf_counter()
            out = EXECUTORS["host"].run(p, config, args)
            # (a lost sum under threads only delays the switch)
            self.host_spent += time.perf_counter() - start
            return jnp.asarray(out)
        self.calls += 1  # (a lost count under threads only delays the switch)
        run = self.first if self.calls < OPTIMIZE_AFTER_CALLS else self.later
        return run(p, config, *args)

    def adopt(self, chosen: Plan, config: Config, args: tuple) -> None:
        """Run ``chosen`` from the next call on (tuning's winner, `tune_later`).

        Its program is compiled here first (on the caller's thread, the
        background one), so that no call waits for it.
        """
        first = _jitted(compile_options(chosen))
        _background.jax_work(
            lambda: jax.block_until_ready(first(chosen, config, *args))
        )
        self.later = _jitted(compile_options(chosen, optimized=True))
        self.first = first
        self.host_budget = 0.0  # (compiled already: no host runs first)
        self.plan = chosen

    def _grow(self, config: Config, args: tuple) -> None:
        """Search again with this call's budget; time the plans; keep the fastest."""
        assert self.request is not None
        calls, held, spent = self.top_calls, self.plan, self.spent
        # two significant digits: the same request in a new process reaches
        # the same budget (and the disk's tree) despite summation order
        budget = float(f"{spent / 2:.2g}")
        start = time.perf_counter()
        try:
            new, other = grown_plans(self.request, budget, calls)
        except Exception as error:  # (a call must not fail for it)
            warnings.warn(
                f"einslice: the growth search of a plan failed ({error!r}); "
                "the plan keeps its tree.",
                RuntimeWarning,
                stacklevel=4,
            )
            self.grow_at = None
            return
        seconds = time.perf_counter() - start
        affordable = GROW_MEASURED_PER_ESTIMATED * spent
        best = min(p.cost.time for p in (held, new, other) if p is not None)
        contenders = [
            p
            for p in dict.fromkeys((new, other))  # (distinct, in order)
            if p is not None
            and p != held
            and p.peak_bytes <= held.memory_limit
            and p.cost.time <= GROW_TIME_WITHIN * best
            and compile_seconds(p) <= affordable
        ]
        timed: tuple[float, ...] = ()
        chosen = held
        if contenders:
            programs = [self.later] + [
                _jitted(compile_options(p, optimized=True)) for p in contenders
            ]
            timings = timed_programs([held, *contenders], programs, config, args)
            timed = tuple(t.seconds for t in timings)
            fastest = min(range(len(timings)), key=lambda k: timings[k].seconds)
            if fastest:
                saving = timings[0].seconds - timings[fastest].seconds
                if saving * calls > timings[fastest].compile_seconds:
                    chosen = contenders[fastest - 1]
        if chosen is not held:
            self.plan = chosen
            self.later = _jitted(compile_options(chosen, optimized=True))
        if timed:
            # the optimized program of the plan held now was compiled for the
            # timing: the compile-time one (a cheap plan's first
            # OPTIMIZE_AFTER_CALLS calls) would be a second compile
            self.first = self.later
        trial = len(held.prepared) * (
            TRIAL_COST_PER_TENSOR + REFERENCE_TRIAL_COST_PER_TENSOR
        )  # one own and one reference trial
        if timed and min(timed[1:]) < timed[0]:
            self.fruitless = 0  # faster than the held plan (paid for or not yet)
        elif budget >= GROW_PATIENT_TRIALS * trial:
            self.fruitless += 1
        most = GROW_MAX_TRIALS * trial
        done = (
            self.fruitless >= GROW_FRUITLESS
            or budget >= most
            or calls + spent / self.plan.cost.time > GROW_LAST_CALL
        )
        self.grow_at = None if done else 2 * spent
        self.growths.append(
            Growth(
                calls,
                budget,
                seconds,
                held.cost.time,
                new.cost.time,
                chosen is not held,
                timed,
                chosen.cost.time,
            )
        )


@dataclasses.dataclass(frozen=True)
class Timing:
    """One program's timing by `timed_programs`: median call, first call."""

    seconds: float
    compile_seconds: float


def timed_programs(
    plans: Sequence[Plan], programs: Sequence, config: Config, args: tuple
) -> list[Timing]:
    """Each plan's program timed on ``args``: its median call, its first call.

    The first call compiles (a program compiled already returns at once);
    then `GROW_TIMED_CALLS` rounds of one call per program, so that a drift
    of the machine's speed falls on all of them alike.
    """
    first = []
    for plan, program in zip(plans, programs, strict=True):
        start = time.perf_counter()
        jax.block_until_ready(program(plan, config, *args))
        first.append(time.perf_counter() - start)
    times: list[list[float]] = [[] for _ in plans]
    for _ in range(GROW_TIMED_CALLS):
        for k, (plan, program) in enumerate(zip(plans, programs, strict=True)):
            start = time.perf_counter()
            jax.block_until_ready(program(plan, config, *args))
            times[k].append(time.perf_counter() - start)
    return [Timing(statistics.median(t), f) for t, f in zip(times, first, strict=True)]


def tune_later(best: Plan, config: Config, args: Sequence) -> Later:
    """What takes ``tune="auto"``'s measurement of ``best``'s call off the call path.

    The measurement runs on the background thread (``_background``); when
    it picks another plan than ``best``, that plan is compiled there and
    ``best``'s calls outside a trace run it from then on
    (`_TopLevelRun.adopt`); the choice is remembered as wisdom either way.
    A measurement stopped by the process's exit changes nothing; one that
    fails warns.
    """

    def later(measure: Callable[[], Plan]) -> None:
        def job() -> None:
            try:
                chosen = measure()
                if chosen != best:
                    _top_level_run(best).adopt(chosen, config, tuple(args))
            except _background.Exiting:
                pass
            except Exception as error:  # (no call may fail for it)
                try:
                    warnings.warn(
                        f"einslice: measuring the candidate plans failed "
                        f"({error!r}); calls keep the estimate's plan.",
                        RuntimeWarning,
                        stacklevel=1,
                    )
                except Warning:  # (a filter that raises: dropped)
                    pass

        try:
            _background.submit(job)
        except RuntimeError:  # (no new work while the interpreter exits)
            pass

    return later


def _host_call(p: Plan, config: Config, operands) -> bool:
    """Whether this call may run on the host.

    A plan the host executor runs (one device, a float or complex result),
    default precision, a strongly typed result, operands on the host or on
    one device each (an accelerator's are copied to the host: the budget,
    `_choose.host_first_seconds`, counted that, and the time spent does).
    """
    if config != Config() or not EXECUTORS["host"].runs(p):
        return False
    if _weak_result(operands):
        return False
    return all(not isinstance(x, jax.Array) or len(x.devices()) == 1 for x in operands)


def _jitted(options: dict[str, object] | None):
    return _run if options is None else _run_with(tuple(sorted(options.items())))


@lru_cache(maxsize=1024)
def _top_level_run(p: Plan) -> _TopLevelRun:
    """The runner for ``p`` outside any trace, made once per plan."""
    return _TopLevelRun(p)


def running_plan(p: Plan) -> Plan:
    """The plan ``p``'s calls outside any trace run now: ``p``, or a grown one.

    A plan from the large-network search under ``optimize="auto"`` may be
    replaced by the plan of a longer search once it has been called often
    enough (docs/search.md, "Growing with use"); ``p`` itself never
    changes, and calls inside ``jax.jit``, ``grad`` or ``vmap`` always run
    it. ``EINSLICE_GROW=0`` turns growth off.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (2, 3), (3, 4))
        >>> einslice.running_plan(p) is p
        True
    """
    return _top_level_run(p).plan


def _weak_result(operands) -> bool:
    """Whether jnp.einsum's result would be weakly typed (JAX's promotion says)."""
    return jax.dtypes.result_type(*operands, return_weak_type_flag=True)[1]


# A Python zero of each dtype kind: adding it converts a weakly typed operand
# to that kind's default width and keeps it weak.
_PYTHON_ZERO = {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}


def _weak_cast(x, dtype: np.dtype) -> jax.Array:
    """An operand in the weakly typed result type ``dtype``, itself weak.

    jnp.einsum's result is weak when JAX's promotion of the operands says so
    (all operands Python scalars, say, or ints with a Python float): it then
    promotes as a Python scalar would. lax ops on weak operands keep that,
    but ``astype`` drops it, so the cast is an addition of a Python zero.
    """
    x = jnp.asarray(x)
    if x.dtype != dtype:  # a weak x, or a bool or int below a weak result type
        x = x + _PYTHON_ZERO[dtype.kind]
    return x if x.dtype == dtype else x.astype(dtype)
