"""Running a plan: operand casts, the jitted program, compile options.

Kept apart from ``_api`` so that ``Plan.__call__`` runs a plan without
importing the public entry points (no import cycle through ``_api``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from functools import cache, lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import core, lax

from .._errors import EinsliceError
from .._plan._planner import grown_request
from .._plan._types import Plan, register_runner
from . import _background, _grow, _host
from ._choose import Later, host_first_seconds, host_slow_seconds
from ._compat import CONCRETE_ARRAYS, as_weak, supported_options
from ._executors import EXECUTORS, executor_of
from ._grow import Growth, Trial
from ._keep import KEEP_TIMED_CALLS, WalkOrProgram
from ._semiring import Config
from ._threads import BlasChoice


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
        return _on_device(executor.run(p, config, operands))
    run = _run if traced else _top_level_run(p)
    return run(p, config, *operands)


def _on_device(out) -> jax.Array:
    """A host run's numpy result as a JAX array (dtypes as ``jnp.asarray``'s).

    ``jax.device_put``, not ``jnp.asarray``: that compiles a conversion
    program for each new shape (~50 ms on a CPU, JAX 0.10); the first host
    call of a 12-matrix chain (issue 36) took 150 ms, 110 of them there,
    against ~0.4 ms to copy.
    """
    return jax.device_put(out)


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
# jax.jit a plan never gets these options: the user's jit compiles it. The
# optimized compile runs in the background (`_TopLevelRun`): the calls go on
# with the compile-time program until it is ready (a 49-step network's call
# waited 1.9 s for it on the call path).
OPTIMIZE_AFTER_CALLS = 100


@dataclasses.dataclass(frozen=True)
class _Stage:
    """What a runner's calls run now; swapped whole, so a call reads one.

    Attributes:
        plan: the plan held (the caller's, or a grown one).
        program: its compiled program (jitted `_run_impl`, with options).
        host: whether calls that the host walk can match run it instead
            (the ski rental's first calls; with ``keep``, those it keeps).
        optimized: whether ``program`` is the optimized one (no recompile due).
        trial: a growth's timing (`_grow.Trial`): calls of its config run it.
        keep: once ``program`` has landed after the walks, which of the walk
            and the program the calls the walk can match run
            (`_keep.WalkOrProgram`); None: the rental's walks (``host``),
            or the program for good.
    """

    plan: Plan
    program: Callable
    host: bool
    optimized: bool
    trial: Trial | None = None
    keep: WalkOrProgram | None = None


class _TopLevelRun:
    """A plan's runner outside any trace: host walk, compiled, optimized, grown.

    A plan first runs in numpy (the "host" executor) while those
    runs have cost less than its compile is estimated to
    (`_choose.host_first_seconds`: a one-shot call pays no compile; on an
    accelerator, its operands' copies to the host count; a host run far
    slower than estimated, `_choose.host_slow_seconds`, starts the compile
    at once); then the optimized program (compiled in the background while
    the walks go on), unless its first calls, timed against the walks,
    take `_keep.KEEP_RATIO` times as long: then the calls walk on, and
    re-time the program now and then (``_keep``: a re-timing that finds it
    as fast holds it for good). A plan with no walk runs the compile-time program,
    and the optimized one from its `OPTIMIZE_AFTER_CALLS`-th compiled call
    on (the same program when the plan is not cheap).

    **No call waits for work it did not ask for.** The compile that ends the
    host walk, the optimized recompile and growth (searches, in a child
    process: ``_apart``; compiles) run on the background thread
    (``_background``), on the operands of the call
    that found them due; meanwhile calls run what the runner holds (the host
    walk, the compile-time program, the held plan), and the runner swaps in
    the result whole (a `_Stage`) between two calls. Only calls that ask for
    a program not compiled yet compile on the call path: the first
    compiled call of a plan that has no host walk (one whose walk does not
    beat its compile, integers, a precision the walk does not match), or
    operands of another kind. Calls from several threads stay exact: each
    reads one stage. `settle` waits for the background work;
    ``EINSLICE_BACKGROUND=0`` runs it on the call that finds it due
    (`_background.enabled`).

    **Growth** (ski rental on the tree search; rules and constants in
    ``_grow``). A plan whose tree came from the large-network search under
    ``optimize="auto"`` (``_planner.growable``) searches again at top-level
    call `c` = `first_growth_call`, and again each time the estimated run
    time of its calls so far (``spent``: each call adds the held plan's
    ``cost.time``) has doubled since the last growth: a search whose own
    trials may cost half of ``spent`` and cotengra's reference as much
    (`grown_plans`), so all of them cost at most twice the estimated run time
    of the calls made so far (each call's estimate scaled by the held plan's
    measured pace, `_grow.pace`, where it runs slower than estimated). The
    plans it finds that are worth timing (`_grow.contenders`: programs not
    timed before) are compiled in the background
    with the held plan's optimized program, then timed on the next calls
    (`_grow.Trial`: one call per plan in turn, `GROW_TIMED_CALLS` rounds
    after one to warm up); the runner takes the fastest when it is
    `GROW_MIN_GAIN` faster than the held plan. Growth stops (the runner is
    then `steady` once its program is the optimized one) after
    `GROW_FRUITLESS` growths in a row that took no new plan (counting those
    whose budget afforded `GROW_PATIENT_TRIALS` trials), once a search's
    budget affords every trial it may run (`GROW_MAX_TRIALS` own and
    reference trials), past `GROW_LAST_CALL`, when a search fails, or when
    ``EINSLICE_GROW=0``. ``plan`` is what the runner holds now
    (`running_plan`); the caller's `Plan` is unchanged.
    """

    def __init__(self, p: Plan) -> None:
        first = _jitted(compile_options(p))
        optimized = first is _optimized(p)
        self.host_budget = host_first_seconds(
            p, on_device=jax.default_backend() != "cpu"
        )
        # (calls check the rest: `_host_call`)
        host = self.host_budget > 0 and EXECUTORS["host"].runs(p)
        self.host_slow = host_slow_seconds(p) if host else 0.0
        # the fastest walk on BLAS's own threads (False) and on one (True),
        # and which the walks take (`_walk`, ``_threads``)
        self.host_best = {False: math.inf, True: math.inf}
        self.blas = BlasChoice()
        # the recent walks' seconds (not beside background work): where the
        # program's first calls take about as long, it is held untimed against
        # fresh walks (``_keep``)
        self.walks: deque[float] = deque(maxlen=KEEP_TIMED_CALLS)
        self._keeping = threading.Lock()  # (a `WalkOrProgram` is not thread-safe)
        self._swapping = threading.Lock()  # (stage swaps that read the stage)
        self._preparing = False  # (the one-thread controller asked for)
        self.stage = _Stage(p, first, host, optimized)
        self.calls = 0  # compiled calls
        self.top_calls = 0  # every call, host or compiled (growth counts them)
        self.host_spent = 0.0
        self.request = grown_request(p) if _grow.growth_enabled() else None
        self.spent = 0.0  # the held plans' estimated seconds, summed over calls
        # ... each call's scaled by the held plan's pace (`_grow.pace`), from
        # its first optimized calls, timed (`pacing`: None once it is known)
        self.pace = 1.0
        self.pacing: list[float] | None = [] if self.request is not None else None
        call = None if self.request is None else _grow.first_growth_call(p)
        # the ``spent`` at which the next growth runs (None: no more growth)
        self.grow_at = None if call is None else (call - 0.5) * p.cost.time
        self.growths: list[Growth] = []
        self.fruitless = 0
        self.tried: set[tuple] = set()  # the programs timed (`_grow.program_key`)
        self.busy = threading.Lock()  # held while background work is queued or runs
        self._deciding = threading.Lock()

    @property
    def plan(self) -> Plan:
        """The plan the runner holds now (`running_plan`)."""
        return self.stage.plan

    @property
    def steady(self) -> bool:
        """Whether the next call runs what every later call runs.

        The optimized program, or the walk kept instead of it (which re-times
        the program now and then: ``_keep``).
        """
        stage = self.stage
        keep = stage.keep
        return (
            (not stage.host or (keep is not None and keep.verdict == "walk"))
            and stage.optimized
            and stage.trial is None
            and self.grow_at is None
            and not self.busy.locked()
        )

    def __call__(self, p: Plan, config: Config, *args):
        stage = self.stage  # (one read: this call runs one stage)
        # (a lost count or sum under threads only delays what they schedule)
        self.top_calls += 1
        self.spent += stage.plan.cost.time * self.pace
        trial = stage.trial
        if trial is not None:
            if config == trial.config:
                out = trial.call(args)
                if trial.complete:
                    self._decide(stage)
                return out
        elif (
            self.grow_at is not None
            and self.spent >= self.grow_at
            and self.top_calls >= _grow.PLAN_RUNS
            and self.busy.acquire(blocking=False)
        ):
            self._submit(partial(self._grow, self.top_calls, self.spent), config, args)
        if stage.host and _host_call(stage.plan, config, args):
            if stage.keep is not None:
                return self._kept(stage, stage.keep, config, args)
            out, seconds, single = self._walk(stage.plan, config, args)
            self.host_spent += seconds
            if not self.busy.locked():
                self.walks.append(seconds)
            # (a run far slower than the fastest is not what the rental
            # weighed: compile; but one on BLAS's own threads where one
            # thread can be set tells only that those are oversubscribed,
            # and the next walks take one thread: ``_threads``)
            slow = seconds > self.host_slow and (
                single or _host.one_thread_state() == "none"
            )
            if (
                (self.host_spent >= self.host_budget or slow)
                and trial is None
                and self.busy.acquire(blocking=False)
            ):
                self._submit(self._compile, config, args)
            if seconds <= min(self.host_best.values()):  # (the fastest so far)
                self.host_slow = host_slow_seconds(stage.plan, seconds)
            return _on_device(out)
        self.calls += 1
        if (
            not stage.optimized
            and self.calls >= OPTIMIZE_AFTER_CALLS
            and trial is None
            and self.busy.acquire(blocking=False)
        ):
            self._submit(self._optimize, config, args)
        if self.pacing is not None and stage.optimized and trial is None:
            return self._paced(stage, config, args)
        return stage.program(stage.plan, config, *args)

    def _kept(self, stage: _Stage, keep: WalkOrProgram, config: Config, args: tuple):
        """A call once the program has landed: walked or run, as ``keep`` says.

        Timed to its result (the walk's put on the device included: on an
        accelerator its copies are the walk's cost) and recorded; not
        counted while the runner's background work runs beside it. The call
        that decides sets the runner's pace from the side kept
        (`_grow.pace`), and one that holds the program swaps it in for good.
        """
        with self._keeping:
            program = keep.next()
        busy = self.busy.locked()
        start = time.perf_counter()
        if program:
            out = jax.block_until_ready(stage.program(stage.plan, config, *args))
        else:
            # (the first walk after program calls is not timed for BLAS's
            # choice either: XLA's threads still spin)
            after = keep.last is True
            walked, _, _ = self._walk(stage.plan, config, args, counted=not after)
            out = jax.block_until_ready(_on_device(walked))
        seconds = time.perf_counter() - start
        counted = not busy and not self.busy.locked()
        with self._keeping:
            verdict = keep.record(program, seconds, counted)
            if verdict is not None:  # (the side kept: its calls' seconds)
                kept = keep.program if verdict == "program" else min(keep.walks)
                assert kept is not None
                self.pace = _grow.pace(stage.plan, kept)
                self.pacing = None
        if verdict == "program":
            with self._swapping:
                now = self.stage
                if now.keep is keep:  # (not swapped meanwhile)
                    self.stage = dataclasses.replace(now, host=False, keep=None)
        return out

    def _walk(
        self, p: Plan, config: Config, args: tuple, counted: bool = True
    ) -> tuple[object, float, bool]:
        """A host run of ``p`` on the BLAS threads that time faster.

        Returns its result, its seconds and whether it ran on one thread;
        ``counted`` False: not timed for the BLAS threads' choice.

        The runner's first walk on one thread where that can be set (on
        BLAS's own threads while it cannot yet), then each side in turn,
        then the faster, re-timed now and then (``_threads.BlasChoice``;
        one thread once that can be controlled: ``_host.prepare_one_thread``,
        made on the background thread); on one thread while the runner's
        background work runs (not timed for the choice).
        """
        single = self._blas_mode()
        # (while its background work runs, a walk's BLAS threads would wait
        # for a core: a 4 ms walk took 87 ms during its plan's compile)
        busy = self.busy.locked() and _host.one_thread_state() == "ready"
        start = time.perf_counter()
        with _host.one_blas_thread() if single or busy else contextlib.nullcontext():
            out = EXECUTORS["host"].run(p, config, args)
        seconds = time.perf_counter() - start
        single = single or busy
        self.blas.record(
            single, seconds, counted=counted and not busy and self.blas.walks > 1
        )
        if seconds < self.host_best[single]:  # (the fastest: noise only slows)
            self.host_best[single] = seconds
        return out, seconds, single

    @property
    def host_single(self) -> bool | None:
        """Whether the walks run on one BLAS thread (None: not chosen yet)."""
        return self.blas.chosen

    def _blas_mode(self) -> bool:
        """Whether the next walk runs on one BLAS thread (`_threads.BlasChoice`)."""
        state = _host.one_thread_state()
        if state == "unmade" and self.blas.walks >= 1 and not self._preparing:
            self._preparing = True
            try:
                _background.submit(_host.prepare_one_thread)
            except RuntimeError:  # (exiting)
                pass
        return self.blas.next(state == "ready")

    def _paced(self, stage: _Stage, config: Config, args: tuple):
        """A call timed (waited for) to learn the held plan's pace (`_grow.pace`)."""
        start = time.perf_counter()
        out = jax.block_until_ready(stage.program(stage.plan, config, *args))
        seconds = time.perf_counter() - start
        pacing = self.pacing
        if pacing is not None:  # (another thread may have just finished it)
            pacing.append(seconds)
            if len(pacing) >= _grow.PACE_CALLS:
                self.pace = _grow.pace(stage.plan, sorted(pacing)[len(pacing) // 2])
                self.pacing = None
        return out

    # -- the background work: queued by a call (`busy` acquired), run by
    # -- ``_background``'s thread; each swaps in a new stage when it is done

    def _submit(self, job: Callable[[Config, tuple], None], config, args) -> None:
        """Queue ``job(config, args)``; `busy` is held, and released after it."""

        def run() -> None:
            try:
                job(config, args)
            except _background.Exiting:
                pass
            finally:
                self.busy.release()

        try:
            _background.submit(run)
        except RuntimeError:  # (no new thread while the interpreter exits)
            self.busy.release()

    def _compile(self, config: Config, args: tuple) -> None:
        """End the rental's walks: compile the optimized program, then time it.

        Against the walks (`_keep.WalkOrProgram`, seeded with the recent
        walks): the calls run whichever it keeps.

        The optimized one, not the compile-time one (`cheap_to_run`): this
        compile is off the call path, and the calls walk meanwhile. Fresh
        seed 7's 81-tensor lattice (80 steps, cheap) walked at 8-14 ms a
        call, then ran its compile-time program at 59-68 ms from call ~84
        until its optimized one came 100 compiled calls later: 2.8-3.0 s
        for its first 100 calls against 1.8-1.95 s walking them all
        (2026-12-07, load 1.2-1.6).
        """
        # (no walk timed apart from background work: the fastest walk, which
        # ran beside it; a program within KEEP_RATIO of it times no more walks)
        fastest = min(self.host_best.values())
        walks = tuple(self.walks) or ((fastest,) if math.isfinite(fastest) else ())
        self._optimize(config, args, keep=WalkOrProgram(walks))

    def _optimize(self, config: Config, args: tuple, **changes) -> None:
        """Compile the optimized program (`OPTIMIZE_AFTER_CALLS`), then run it.

        ``changes``: to the stage, swapped in with the program (one swap).
        """
        stage = self.stage
        later = _background.jax_work(lambda: _optimized(stage.plan))
        try:
            _compiled(later, stage.plan, config, args)
        except _background.Exiting:
            raise
        except Exception:  # (a call compiles it, and raises what is wrong)
            pass
        with self._swapping:
            self.stage = dataclasses.replace(
                self.stage, program=later, optimized=True, **changes
            )

    def adopt(self, chosen: Plan, config: Config, args: tuple) -> None:
        """Run ``chosen`` from the next call on (tuning's winner, `tune_later`).

        Called on the background thread: ``chosen``'s optimized program is
        compiled there first, then swapped in whole, so that no call waits
        for it.
        """
        program = _background.jax_work(lambda: _optimized(chosen))
        _compiled(program, chosen, config, args)
        self.stage = _Stage(chosen, program, False, True)

    def _grow(self, calls: int, spent: float, config: Config, args: tuple) -> None:
        """Search with the budget of ``calls``; compile what may be faster.

        The plans to time and the held plan's optimized program are
        compiled here; the calls then time them (`_grow.Trial`), and the
        call that completes the trial decides (`_decide`).
        """
        assert self.request is not None
        held = self.stage.plan
        # two significant digits: the same request in a new process reaches
        # the same budget (and the disk's tree) despite summation order
        budget = float(f"{spent / 2:.2g}")
        start = time.perf_counter()
        try:
            new, other = _grow.grown_plans(self.request, budget, calls)
            seconds = time.perf_counter() - start
            # (the calls made while it searched are spent too: a search of
            # 11 s beside 8 ms calls, load 4-5, found fresh seed 11's
            # lattice-9x9 a tree estimated 2.4x faster, which the spent of
            # its start, 1.1 s, would not compile)
            paid = max(spent, self.spent)
            plans = [held, *_grow.contenders(held, (new, other), paid, self.tried)]
            programs = _background.jax_work(lambda: [_optimized(q) for q in plans])
            compiled = ()
            if len(plans) > 1:  # (else nothing new to time: a fruitless growth)
                compiled = tuple(
                    _compiled(program, q, config, args)
                    for q, program in zip(plans, programs, strict=True)
                )
        except _background.Exiting:
            raise
        except Exception as error:  # (no call may fail for it)
            self.grow_at = None
            _warn(
                f"einslice: the growth of a plan failed ({error!r}); the plan "
                "keeps its tree."
            )
            return
        growth = Growth(
            calls,
            budget,
            seconds,
            held.cost.time,
            new.cost.time,
            False,
            chosen=held.cost.time,
            compiled=compiled,
        )
        if len(plans) == 1:
            self._grown(growth, spent)
        else:
            trial = Trial(plans, programs, config, growth, spent)
            with self._swapping:
                self.stage = dataclasses.replace(self.stage, trial=trial)

    def _decide(self, stage: _Stage) -> None:
        """End ``stage``'s trial (on the call that completed it): hold the choice."""
        if not self._deciding.acquire(blocking=False):
            return
        try:
            trial = stage.trial
            if trial is None or self.stage is not stage:  # (decided already)
                return
            keep = stage.keep
            # a walk kept instead of the held program is what a plan must beat
            with self._keeping:
                walk = min(keep.walks) if keep and keep.verdict == "walk" else None
            k = trial.choice(held=walk)
            self.tried.update(map(_grow.program_key, trial.plans[1:]))
            growth = dataclasses.replace(
                trial.growth,
                switched=k > 0,
                timed=trial.medians(),
                chosen=trial.plans[k].cost.time,
            )
            # the programs timed are optimized: no recompile. A runner that
            # judges its walk against its program (``_keep``) goes on with
            # it where it keeps its plan, and times a new plan's program
            # (timed by the trial already) against that plan's walks
            if keep is None:
                chosen = _Stage(trial.plans[k], trial.programs[k], False, True)
            elif k == 0:
                chosen = dataclasses.replace(stage, trial=None)
            else:
                keep = WalkOrProgram(program=growth.timed[k])
                chosen = _Stage(
                    trial.plans[k], trial.programs[k], True, True, keep=keep
                )
            with self._swapping:
                self.stage = chosen
            seconds = walk if k == 0 and walk is not None else growth.timed[k]
            self.pace = _grow.pace(trial.plans[k], seconds)
            self._grown(growth, trial.spent)
        finally:
            self._deciding.release()

    def _grown(self, growth: Growth, spent: float) -> None:
        """Record ``growth``; schedule the next one, or none (the stopping rule)."""
        self.fruitless = _grow.fruitless_after(growth, self.fruitless, self.plan)
        # (``spent`` over the pace: the calls' estimated run time, unscaled)
        more = _grow.grows_again(growth, self.fruitless, self.plan, spent / self.pace)
        self.grow_at = 2 * spent if more else None
        self.growths.append(growth)


def _optimized(p: Plan) -> Callable:
    """``p``'s optimized program (jitted; compiled on its first call)."""
    return _jitted(compile_options(p, optimized=True))


def _compiled(program: Callable, plan: Plan, config: Config, args: tuple) -> float:
    """Compile ``program`` for ``args`` by running it (background); its seconds.

    A run, not ``lower().compile()``: jit's own cache then holds the program,
    so the calls' dispatch finds it (JAX 0.10's AOT compile does not fill
    that cache).
    """
    start = time.perf_counter()
    _background.jax_work(lambda: jax.block_until_ready(program(plan, config, *args)))
    return time.perf_counter() - start


def _warn(message: str) -> None:
    """Warn from the background thread (a warning filter may raise: dropped)."""
    try:
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    except Warning:
        pass


def settle(p: Plan, timeout: float | None = None) -> bool:
    """Wait for the background work of ``p``'s runner; whether it ended in time.

    What the runner compiles or searches off the call path (the compile that
    ends the host walk, the optimized recompile, a growth's search and
    compiles) is swapped in by then. A growth's timing runs on the calls
    after it (`_grow.Trial`): ``settle`` does not make calls. For tests and
    benchmarks.

    Example:
        >>> import einslice
        >>> settle(einslice.plan("ij,jk->ik", (2, 3), (3, 4)))
        True
    """
    busy = _top_level_run(p).busy
    if not busy.acquire(timeout=-1 if timeout is None else timeout):
        return False
    busy.release()
    return True


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
    enough (searched and compiled in the background, timed on its calls,
    swapped in between two calls: docs/search.md, "Growing with use");
    ``p`` itself never changes, and calls inside ``jax.jit``, ``grad`` or
    ``vmap`` always run it. ``EINSLICE_GROW=0`` turns growth off.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (2, 3), (3, 4))
        >>> einslice.running_plan(p) == p  # (an equal plan made earlier may be the one)
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
