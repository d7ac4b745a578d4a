"""The choosing stage: which plan runs, on which executor, and how that was decided.

The planner ranks plans (pure data); `choose` picks one and its executor
(``_executors.EXECUTORS``) and says how, in a `Chosen`:

- ``"estimate"``: the time model's first plan, on the executor it names;
- ``"wisdom"``, ``"measure"``: tuning (``tune=``, `tuned`) remembered or
  timed the candidates the planner made (``_planner.tuning_candidates``:
  the ranked plans, and the best unsliced one and the greedy path's on
  every other compiling executor that runs them); ``_tune.py`` is the
  measuring machinery;
- ``"host"``: a plan run once (``once=True``) whose numpy walk is estimated
  to beat compiling it (`pays_on_host`).

Every host-vs-compile rule lives here, with the figures it uses: one value
(`pays_on_host`), a value and its gradient (`host_grad_pays`), the first
calls of a reused plan (`host_first_seconds`, `host_slow_seconds`), a graphical model's
unplanned walk (`walk_pays`) and the run and compile time of its trees
(`tree_seconds`). The executors estimate what they spend
(``_executors.Estimate``: the compiled chain's compile from the device's
profile, ``Profile.compile_estimate``; the host walk's cost model in
``_host.py``, and ``_executors.transfer_seconds`` for operands on a device);
this module only compares.
``einsum``, ``plan`` (through ``_api``) and ``einslice.pgm`` (through
``_internal``) all choose here.

Example:
    >>> import einslice
    >>> tiny = einslice.plan("ij,jk->ik", (2, 2), (2, 2))
    >>> choose(tiny, once=True).how, choose(tiny).how
    ('host', 'estimate')
    >>> big = einslice.plan("ij,jk->ik", (2048, 2048), (2048, 2048))
    >>> choose(big, once=True).executor.name
    'einslice'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jax import core

from .._errors import EinsliceError
from .._plan import _wisdom
from .._plan._planner import tuning_candidates
from .._plan._request import PlanRequest
from .._plan._search import MEASURED_PER_ESTIMATED, cheap
from .._plan._types import HostWalk, Plan
from .._plan._walk import walk_peak_bytes
from . import _background, _tune
from ._calibrate import current_profile, host_profile
from ._executors import EXECUTORS, Executor, compile_seconds, transfer_seconds
from ._host import host_seconds
from ._host_grad import host_grad_peak_bytes, host_grad_seconds, host_grad_supported

TUNE_MODES = ("estimate", "measure", "auto")
HOWS = ("estimate", "wisdom", "measure", "host")

# -- the figures: what the rules below compare ------------------------------------

# A plan called outside any trace runs its first calls in numpy when one walk
# is estimated to beat its compile (`host_first_seconds`), whatever its step
# count and semiring, on a CPU and on an accelerator. Plans of fewer than
# SHORT_PLAN_STEPS steps are "short": on a CPU a short "sum" plan weighs its
# walks against a share of its compile estimate (`RENTAL_SUM_COMPILE_SHARE`).
# Until 2026-12-07 short plans compiled at once, on this measurement: a fresh
# 12-matrix chain (11 steps, compile ~120-240 ms, walk estimated 6.3 ms)
# walked from 2 steps on lost at 10 and 100 calls in 5 of 5 process pairs at
# load 9-10 (N=10: 0.42-0.65 s against 0.14-0.39 s compiled at once; numpy's
# BLAS threads oversubscribed: ~40-60 ms a walk) and won the first call in 3
# (0.09-0.11 s against 0.13-0.26 s). At load 0.5-2.3, fresh seed 7's chain
# walks in 4 ms (opt_einsum on numpy 4 ms, XLA 4-8 ms, compile 60-100 ms);
# compiled at once it lost 0.09x and 0.28x to opt_einsum at 1 and 10 calls,
# walked first 0.62x and 0.67x; its first 100 calls cost 573 ms against 528
# compiled at once (benchmarks/results/networks_fresh.md, "Small chains").
# Slow walks now end the rental by their measured pace (`host_slow_seconds`)
# and take one BLAS thread where that times faster (``_run``). On a TPU v5e
# (operands on the chip, copied to the host and back; 2026-12-07,
# benchmarks/short_walk.py, fresh interpreters, medians of 3) short "sum"
# plans walked first win at every horizon measured: seed 7's chain 20/35/145
# ms at 1/10/100 calls against 180/186/236 compiled at once (jnp.einsum
# 296/309/426), seed 11's 25/41/169 against 206/212/262. The other
# semirings compiled short plans at once while their numpy walk differed
# from XLA's program at infinities beside empty sums; it no longer does
# (tests/exec/test_semiring_corners.py), and their programs compile far
# above the estimate (an 11-step 12-matrix chain of 40x40 float32: 3.7 s in
# "max", 2.0 s in "log", 0.03 s in "sum", against 0.33 s estimated on this
# CPU; 11.9 s and 4.1 s on the TPU). What N calls of einslice.einsum cost
# in fresh interpreters, planning and compiles included, walked first
# against compiled at once (benchmarks/short_semiring_walk.py), at N = 1 /
# 10 / 100, on this CPU (medians of 3, load 1.4-5.6, 2026-12-07) and on a
# TPU v5e (one interpreter each, 2026-12-08; results/short_semiring_walk.md):
# that chain in "max" 16 / 59 / 355 ms against 4030 / 4039 / 4115 (TPU: 34 /
# 101 / 600 against 11917 / 11924 / 11995), in "log" 13 / 63 / 259 against
# 2022 / 2029 / 2098 (TPU: 14 / 67 / 261 against 4089 / 4098 / 4164); a
# cycle of 9 tables of 4-state variables (8 steps) in "max" 17 / 38 / 173
# against 1530 / 1533 / 1560 (TPU: 31 / 65 / 308 against 3326 / 3334 /
# 3404), in "log" 16 / 31 / 145 against 650 / 655 / 695 (TPU: 17 / 37 / 150
# against 987 / 994 / 1059).
SHORT_PLAN_STEPS = 16
# The share of the CPU profile's compile estimate (``Profile.compile_estimate``,
# 0.03 s a step, measured on "log" plans of UAI networks) that a
# "sum" plan's ski rental weighs its walks against: "sum" programs compile in
# about a quarter of it (fresh seed 7's 12-matrix chain: 60-100 ms against
# 330 ms; einsum-benchmark networks of 39-199 steps: 0.3-1.5 s, 7.5 ms a
# step). At the whole estimate the chain walked ~60 calls before compiling
# and its first 100 calls took 0.64-0.89 s, against 0.52-0.70 s compiled at
# once (load 2-2.6). Only for plans of fewer than SHORT_PLAN_STEPS
# steps: on fresh seed 7's 81-tensor lattice (80 steps) the share started
# the compile at call ~45, and the walks beside it ran at 13-35 ms instead
# of 8-14 (the compile holds a core and the interpreter): 2.8-3.0 s for the
# first 100 calls against 1.8-1.95 s at the whole estimate (load 1.2-1.6).
RENTAL_SUM_COMPILE_SHARE = 0.25
# A host call that takes this many times the fastest walk so far (before
# one: the walk's estimate), plus HOST_SLOW_SECONDS (a first call's one-off
# costs), ends the ski rental at once: the compile starts in the background
# (`host_slow_seconds`). Other processes can oversubscribe numpy's BLAS
# threads: at load 8-11 on 2 cores a 12-matrix chain's walk (estimated 6.3 ms;
# 3-8 ms with one BLAS thread) took ~90 ms a call, and opt_einsum on numpy
# 520 ms, while XLA's calls took 1-4 ms; at load 2 the same walk took 4 ms
# with spikes to 7-10 ms, and to 90 ms while another engineer's job ran.
HOST_SLOW_FACTOR = 8.0
HOST_SLOW_SECONDS = 0.01
# Graphical models' trees (``pgm``'s choice among merged variants): measured
# seconds per estimated second (``Cost.time``) of these "log" plans of small
# tables (``_search.MEASURED_PER_ESTIMATED``, which the planning bound uses
# too: the model's CPU profile counts 3e11 FLOP/s, they ran at ~1e10). And
# what one table adds to the compile time of a "log" plan (Segmentation_11:
# 510 tables, ~19 s).
COMPILE_SECONDS_PER_TABLE = 0.04

# Tuning ("auto"): the best TOP_K candidates are measured, only when tuning is
# estimated to cost at most _AUTO_SHARE of one call; below AUTO_MEASURE_SECONDS
# it never can (compiling the candidates alone takes about a second), so
# shorter calls are not even considered.
TOP_K = 4
_AUTO_SHARE = 0.1
AUTO_MEASURE_SECONDS = 10.0
# On a GPU, "auto" measures calls estimated at this long or longer: launch
# and timer noise (tens of us) are then a few percent of a call. It spends up
# to GPU_TUNING_SECONDS on it (or _AUTO_SHARE of a call, if more): compiling
# and timing five candidates takes a few seconds, once per signature.
GPU_AUTO_MEASURE_SECONDS = 1e-3
GPU_TUNING_SECONDS = 10.0
# The accelerators tuned as a GPU is: a TPU too (its calls are as short and
# its compiles as dear; a v5e ran the seed formula at n=2048 in 0.19 s).
GPU_PLATFORMS = ("gpu", "cuda", "rocm", "tpu")


# Runs a measurement (a function giving the measured plan) off the call path.
Later = Callable[[Callable[[], Plan]], object]


@dataclass(frozen=True, slots=True)
class Chosen:
    """What the choosing stage returns: a plan, its executor, and how.

    ``how`` is one of `HOWS`: "estimate", "wisdom", "measure" or "host".
    (A tuned plan also carries its measurements, ``plan.choice``: see
    ``_types.Plan`` for why that one annotation is added after planning.)
    """

    plan: Plan
    executor: Executor
    how: str


@dataclass(frozen=True, slots=True)
class Tuning:
    """What tuning needs beyond the plan: the call's operands and options.

    Attributes:
        arrays: the operands (arrays, or shapes-and-dtypes for ``plan``).
        request: what the plans were made from (the candidates are made
            from it; its optimize, profile and precision key the wisdom).
        run: runs a plan on operands, as ``Plan.__call__`` does.
        limit_key: stands for the memory limit in the wisdom key.
        platform: the JAX platform ("cpu", "gpu", ...).
        later: takes a measurement "auto" decided on, to run off the call
            path (``_run.tune_later``); None: "auto" measures at once.
    """

    arrays: Sequence
    request: PlanRequest
    run: _tune.Runner
    limit_key: object = None
    platform: str = "cpu"
    later: Later | None = None


def choose(
    best: Plan, tune: str = "estimate", tuning: Tuning | None = None, once: bool = False
) -> Chosen:
    """The plan to run, its executor and how it was chosen.

    Args:
        best: the planner's first plan.
        tune: "estimate", "measure" or "auto" (see `tuned`); measuring needs
            ``tuning``.
        tuning: the call's operands and options, for measuring.
        once: the plan runs a single time, outside any trace: the host walk
            is chosen when it is estimated to beat compiling (`pays_on_host`).
    """
    host = EXECUTORS["host"]
    if once and host.runs(best) and pays_on_host(best):
        return Chosen(best, host, "host")
    plan = best
    if tune != "estimate" and tuning is not None:
        request = tuning.request
        plan = tuned(
            best,
            tune,
            tuning.arrays,
            lambda: tuning_candidates(request, TOP_K),
            tuning.run,
            lambda: _tune.signature(
                best,
                request.optimize if request.tree is None else request.tree,
                request.profile.device_kind,
                request.precision,
                tuning.limit_key,
            ),
            tuning.platform,
            tuning.later,
        )
    how = "estimate" if plan.choice is None else plan.choice.how
    return Chosen(plan, EXECUTORS[plan.executor], how)


def check_tune(tune: object) -> str:
    """``tune`` if it is a valid mode, else an EinsliceError saying which are."""
    if not isinstance(tune, str) or tune not in TUNE_MODES:
        raise EinsliceError(
            f"tune={tune!r} is not one of {list(TUNE_MODES)}; 'estimate' trusts "
            "the time model, 'measure' times the best candidates on the device, "
            "'auto' uses remembered measurements or measures long calls."
        )
    return tune


# -- host or compile ------------------------------------------------------------------


def pays_on_host(plan: Plan | HostWalk, on_device: bool = False) -> bool:
    """Whether one host run of ``plan`` is estimated to beat compiling it.

    Compiling is estimated for this process's device (its profile's compile
    figures, ``Profile.compile_estimate``). ``on_device``: the operands live
    on that device, so the walk also copies them to the host and its result
    back (``_executors.transfer_seconds``). Operands on the host are checked
    against the host CPU's compile figures first, the lowest of any device's
    (a device compiles on the host, for a backend of its own), so that a
    walk that beats them does not start JAX's backend to ask for the device.
    And, for a plan, whether the walk keeps its memory limit
    (``_walk.walk_peak_bytes``): the host walk holds only the nodes alive at
    each step, but in float64 and beside copies of the step's sides.

    Example:
        >>> import einslice
        >>> pays_on_host(einslice.plan("ij,jk->ik", (2, 2), (2, 2)))
        True
        >>> pays_on_host(einslice.plan("ij,jk->ik", (2048, 2048), (2048, 2048)))
        False
    """
    if plan.devices != 1 or plan.sharded is not None:
        return False
    if isinstance(plan, Plan) and walk_peak_bytes(plan) > plan.memory_limit:
        return False  # (a `HostWalk`'s bound is checked where it is taken)
    walk = host_seconds(plan)
    if not on_device and walk < compile_seconds(plan, host_profile()):
        return True
    device = current_profile()
    if on_device:
        walk += transfer_seconds(plan, device)
    return walk < compile_seconds(plan, device)


def host_first_seconds(plan: Plan, on_device: bool = False) -> float:
    """Seconds of host runs a top-level ``plan`` spends before it is compiled.

    Ski rental: while the host runs so far (their transfers included) have
    cost less than compiling is estimated to (``_executors.compile_seconds``,
    this device's figures; `RENTAL_SUM_COMPILE_SHARE` of them for a short
    "sum" plan on a CPU), the next call runs on the host too; after that the plan
    is compiled. Zero (compile at once) when one host run is not
    estimated to beat the compile (`pays_on_host`; ``on_device``: the
    operands live on an accelerator, and the walk copies them). The caller
    (``_run._TopLevelRun``) checks the call itself: outside a trace, default
    precision, a float or complex result.

    Example:
        >>> import einslice
        >>> host_first_seconds(einslice.plan("ij,jk->ik", (2, 2), (2, 2))) > 0
        True
        >>> host_first_seconds(einslice.plan("ij,jk->ik", (2048, 2048), (2048, 2048)))
        0.0
    """
    if not pays_on_host(plan, on_device):
        return 0.0
    # (the share was measured on short "sum" programs on a CPU)
    short = len(plan.steps) < SHORT_PLAN_STEPS
    summed = plan.semiring == "sum"
    share = RENTAL_SUM_COMPILE_SHARE if short and summed and not on_device else 1.0
    return share * compile_seconds(plan)


def host_slow_seconds(plan: Plan, fastest: float | None = None) -> float:
    """Seconds a host run of ``plan`` may take before the compile starts.

    `HOST_SLOW_FACTOR` times the fastest walk so far (``fastest``; None:
    the walk's estimate, ``_host.host_seconds``, if that is lower) plus
    `HOST_SLOW_SECONDS`: a run slower than that is not the run the ski
    rental (`host_first_seconds`) weighed against the compile.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk,kl->il", (2, 2), (2, 2), (2, 2))
        >>> 0.01 < host_slow_seconds(p) < 0.02
        True
        >>> round(host_slow_seconds(p, fastest=1e-4), 6)  # (below the estimate)
        0.0108
    """
    walk = host_seconds(plan)
    if fastest is not None:
        walk = min(walk, fastest)
    return HOST_SLOW_FACTOR * walk + HOST_SLOW_SECONDS


def host_grad_pays(
    plan: Plan | HostWalk, memory_limit: int, recompute: bool = True
) -> bool:
    """Whether ``plan``'s value and gradient should be taken on the host.

    When it can be (``_host_grad.host_grad_supported``), fits
    ``memory_limit`` (``host_grad_peak_bytes``) and is estimated to take less
    than compiling the value-and-gradient program
    (``Profile.grad_compile_step_seconds`` a step: the host CPU's figures
    first, the lowest, then this device's). ``recompute``: the walk may
    recompute ranges of steps to fit the limit (``host_value_and_grad``
    must then get the same ``memory_limit``); else every node is kept.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->", (3, 4), (4, 5), semiring="log")
        >>> host_grad_pays(p, 2**22), host_grad_pays(p, 100)
        (True, False)
    """
    limit = memory_limit if recompute else None
    if not (
        host_grad_supported(plan) and host_grad_peak_bytes(plan, limit) <= memory_limit
    ):
        return False
    walk = host_grad_seconds(plan, limit)
    return walk < compile_seconds(plan, host_profile(), gradient=True) or (
        walk < compile_seconds(plan, current_profile(), gradient=True)
    )


def walk_pays(
    walk: HostWalk, memory_limit: int, operands: int, derivative: bool = False
) -> bool:
    """Whether an unplanned host walk beats searching, planning and compiling.

    ``einslice.pgm``'s rule for a small network's greedy tree: its walk is
    taken when it fits ``memory_limit``, beats compiling (`pays_on_host`, or
    `host_grad_pays` for a value and its gradient) and is too cheap for a
    tree search over ``operands`` tables to pay (``_search.cheap``: less
    than a trial).

    Example:
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> from einslice._plan._walk import host_walk
        >>> eq = build_equation(parse_subscripts("ij,jk->", 2), ((2, 3), (3, 4)))
        >>> w = host_walk(eq, ((0, 1),), "log", "float64")
        >>> walk_pays(w, 2**22, 2), walk_pays(w, 8, 2)  # fits, does not fit
        (True, False)
    """
    if derivative:
        # (a walk's gradient keeps every node: `_Prepared.host_derivative`)
        return host_grad_pays(walk, memory_limit, recompute=False) and cheap(
            host_grad_seconds(walk), operands
        )
    return (
        walk.peak_bytes <= memory_limit
        and pays_on_host(walk)
        and cheap(host_seconds(walk), operands)
    )


def tree_seconds(estimated_seconds: float, tables: int) -> float:
    """A graphical model's tree: its run (the model's seconds, measured) and compile.

    Example:
        >>> tree_seconds(0.01, 10)
        0.7
    """
    return (
        estimated_seconds * MEASURED_PER_ESTIMATED + COMPILE_SECONDS_PER_TABLE * tables
    )


# -- tuning: estimate, wisdom or measure ----------------------------------------------


def tuned(
    best: Plan,
    tune: str,
    arrays: Sequence,
    ranked: Callable[[], tuple[Plan, ...]],
    run: _tune.Runner,
    signature: Callable[[], str],
    platform: str = "cpu",
    later: Later | None = None,
) -> Plan:
    """The plan to run: ``best`` (the estimate), remembered, or measured.

    ``"estimate"`` takes ``best``. ``"measure"`` compiles and times the
    candidates (``_tune.measure``) and remembers the fastest as wisdom, which
    later calls of the same signature use instead of measuring again.
    ``"auto"`` uses wisdom when there is some for this signature; otherwise
    it measures when tuning is estimated to cost at most ``_AUTO_SHARE``
    (10%) of one call (compiling each candidate the device profile's
    ``candidate_compile_seconds``,
    timing a probe or a short candidate ~0.5 s; a long candidate that cannot
    be probed is left out, and if that is the estimate's own choice, "auto"
    estimates). With five candidates that is sliced calls from about 45 s
    on; shorter calls are estimated. On a GPU (or a TPU) timing is cheap and
    precise, so "auto" measures every call estimated at
    ``GPU_AUTO_MEASURE_SECONDS`` (1 ms) or more, spending up to
    ``GPU_TUNING_SECONDS`` (or 10% of a call if more) once per signature.
    Under ``jax.jit`` tracing (abstract operands) "measure" and "auto" fall
    back to wisdom, else the estimate. With ``later`` (``einsum``'s eager
    calls), "auto" does not measure on the call path: it hands the
    measurement to ``later`` and returns ``best``; later calls run the
    winner once it is known, and wisdom gives it to the next process (a
    first call of the seed formula at n=1536 on a TPU v5e took 26.1 s
    measuring there, against 5.3 s estimated and 2.8 s for jnp.einsum).

    Args:
        best: the time model's first candidate.
        tune: "estimate", "measure" or "auto".
        arrays: the operands (arrays, or shapes-and-dtypes for ``plan``).
        ranked: the candidates (called only when needed;
            ``_planner.tuning_candidates``).
        run: runs a plan on operands, as ``Plan.__call__`` does.
        signature: makes the wisdom key of this call (called only when needed).
        platform: the JAX platform the plans run on ("cpu", "gpu", ...):
            what "auto" deems worth measuring.
        later: runs "auto"'s measurement off the call path (see above).
    """
    if tune == "estimate":
        return best
    gpu = platform in GPU_PLATFORMS
    shortest = GPU_AUTO_MEASURE_SECONDS if gpu else AUTO_MEASURE_SECONDS
    short = best.cost.time < shortest
    if tune == "auto" and short and not _wisdom.has_any():
        return best  # the common case, kept cheap: most calls are small
    # Wisdom answers "measure" too (as FFTW's does its planner): a signature
    # is measured once, not at every call; wisdom.clear() measures afresh.
    if _wisdom.has_any():
        remembered = _tune.from_wisdom(signature(), ranked)
        if remembered is not None:
            return remembered
    concrete = not any(isinstance(x, core.Tracer) for x in arrays)
    if not concrete or (tune == "auto" and short):
        return best
    if tune == "auto" and later is not None:
        key = signature()

        def job() -> Plan:  # (the candidates too are made off the call path)
            plans = _auto_plans(best, ranked(), gpu)
            if len(plans) < 2:  # (one candidate: nothing to choose between)
                return best
            return _tune.measure(plans, arrays, run, key, _background.jax_work)

        later(job)
        return best
    plans = ranked()
    if tune == "auto":
        plans = _auto_plans(best, plans, gpu)
        if not plans:
            return best
    return _tune.measure(plans, arrays, run, signature())


def _auto_plans(best: Plan, plans: tuple[Plan, ...], gpu: bool) -> tuple[Plan, ...]:
    """The candidates "auto" measures; none when tuning is not worth it.

    Measured only if tuning costs under ~10% of one call (on a GPU or TPU, a
    few seconds once per signature), and the estimate's own plan is among
    those timed.
    """
    share = _AUTO_SHARE * best.cost.time
    if gpu:
        share = max(share, GPU_TUNING_SECONDS)
    plans = tuple(p for p in plans if _tune.timing_cost(p) < share)
    each = current_profile().candidate_compile_seconds
    tuning = sum(each + _tune.timing_cost(p) for p in plans)
    if any(_tune.probed(p) for p in plans):
        tuning += each  # the probed winner, compiled whole
    if not plans or plans[0] != best or tuning > share:
        return ()
    return plans
