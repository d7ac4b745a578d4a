"""Autotuning: time the best few candidate plans on the device, keep the fastest.

``tune="estimate"`` takes the time model's first candidate. ``"measure"``
compiles the top ``TOP_K`` candidates (and the plain ``jnp.einsum`` lowering
of unsliced "sum" paths), rejects any whose compiled temporaries
(``memory_analysis().temp_size_in_bytes``) exceed the memory limit, times the
rest in interleaved rounds (median after a warm-up) and keeps the fastest;
the choice is remembered as wisdom, which later calls of the same signature
use instead of measuring again (as FFTW's planner uses its wisdom;
``einslice.wisdom.clear()`` forgets it). A sliced candidate whose call is long is
timed on a probe of a few of its chunks, scaled by its chunk count
(``_plan/_probe.py``): the same program per chunk, a fraction of the cost.

``"auto"`` uses wisdom when there is some for this signature; otherwise it
measures when tuning is estimated to cost at most ``_AUTO_SHARE`` (10%) of
one call (compiling each candidate ~0.3 s, timing a probe or a short
candidate ~0.5 s; a long candidate that cannot be probed is left out, and if
that is the estimate's own choice, "auto" estimates). With five candidates
that is sliced calls from about 45 s on, tuned in ~4.5 s once per signature;
shorter calls are estimated (the test suite's thousands of small calls never
measure); ask for "measure" to tune small calls that repeat. On a GPU (or a
TPU) timing is cheap and precise, and the time model has seen one device of
each only (an H200, a TPU v5e), so "auto" measures every call estimated at
``GPU_AUTO_MEASURE_SECONDS`` (1 ms) or more, spending up to
``GPU_TUNING_SECONDS`` (or 10% of a call if more) once per signature.
Measuring needs concrete operands: under ``jax.jit`` tracing (abstract
operands) "measure" and "auto" fall back to wisdom, else the estimate.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from statistics import median

import jax
import jax.numpy as jnp
from jax import core

from .._errors import EinsliceError
from .._plan import _wisdom
from .._plan._info import candidate_label
from .._plan._memory import format_bytes
from .._plan._probe import probe
from .._plan._types import Choice, Plan

TUNE_MODES = ("estimate", "measure", "auto")
TOP_K = 4
# "auto" measures only when tuning is estimated to cost at most this share of
# one call; below AUTO_MEASURE_SECONDS it never can (compiling the candidates
# alone takes about a second), so shorter calls are not even considered.
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
# A guess of one candidate's compile time, for that estimate.
_COMPILE_SECONDS = 0.3
# A sliced candidate estimated at _TIMING_BUDGET_SECONDS or more is timed on a
# probe of its chunks that runs about this long.
_PROBE_SECONDS = 0.05
# Timing: rounds of one call per candidate, at most this many, or this much
# time per candidate.
_ROUNDS = 15
_TIMING_BUDGET_SECONDS = 0.5

Runner = Callable[[Plan, Sequence], jax.Array]


def check_tune(tune: object) -> str:
    """``tune`` if it is a valid mode, else an EinsliceError saying which are."""
    if not isinstance(tune, str) or tune not in TUNE_MODES:
        raise EinsliceError(
            f"tune={tune!r} is not one of {list(TUNE_MODES)}; 'estimate' trusts "
            "the time model, 'measure' times the best candidates on the device, "
            "'auto' uses remembered measurements or measures long calls."
        )
    return tune


def choose(
    best: Plan,
    tune: str,
    arrays: Sequence,
    candidates: Callable[[], tuple[Plan, ...]],
    run: Runner,
    signature: Callable[[], str],
    platform: str = "cpu",
) -> Plan:
    """The plan to run: ``best`` (the estimate), remembered, or measured.

    Args:
        best: the time model's first candidate.
        tune: "estimate", "measure" or "auto".
        arrays: the operands (arrays, or shapes-and-dtypes for ``plan``).
        candidates: the ranked candidates (called only when needed).
        run: runs a plan on operands, as ``Plan.__call__`` does.
        signature: makes the wisdom key of this call (called only when needed).
        platform: the JAX platform the plans run on ("cpu", "gpu", ...):
            what "auto" deems worth measuring.
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
        remembered = _from_wisdom(signature(), candidates)
        if remembered is not None:
            return remembered
    concrete = not any(isinstance(x, core.Tracer) for x in arrays)
    if not concrete or (tune == "auto" and short):
        return best
    plans = candidates()
    if tune == "auto":  # measure only if tuning costs under ~10% of one call
        share = _AUTO_SHARE * best.cost.time
        if gpu:  # or, on a GPU, a few seconds once per signature
            share = max(share, GPU_TUNING_SECONDS)
        plans = tuple(p for p in plans if _timing_cost(p) < share)
        tuning = sum(_COMPILE_SECONDS + _timing_cost(p) for p in plans)
        if any(_probed(p) for p in plans):
            tuning += _COMPILE_SECONDS  # the probed winner, compiled whole
        if not plans or plans[0] != best or tuning > share:
            return best
    return measure(plans, arrays, run, signature())


def measure(
    plans: tuple[Plan, ...], arrays: Sequence, run: Runner, signature: str
) -> Plan:
    """Compile and time each plan; the fastest within the limit, with a Choice.

    A sliced plan estimated to run ``_TIMING_BUDGET_SECONDS`` or more is
    timed on a probe of a few of its chunks (``_plan/_probe.py``), scaled by
    its chunk count; the whole plan is then compiled only if it wins, to
    check its temporaries against the limit.
    """
    start = time.perf_counter()
    operands = [_concrete(x) for x in arrays]
    timed = [_prepare_timing(plan, operands, run) for plan in plans]
    notes = [t.note for t in timed]
    medians = _interleaved_medians(
        [t.program for t in timed], [t.operands for t in timed]
    )
    seconds = [
        None if m is None else m * t.scale for m, t in zip(medians, timed, strict=True)
    ]
    chosen = None
    for _, k in sorted((s, k) for k, s in enumerate(seconds) if s is not None):
        if not timed[k].probed:
            chosen = k
            break
        whole, rejected = _compile_within_limit(plans[k], operands, run)
        if whole is not None:
            chosen = k
            break
        notes[k] = rejected
    choice = Choice(
        how="estimate" if chosen is None else "measure",
        chosen=0 if chosen is None else chosen,
        labels=tuple(candidate_label(p) for p in plans),
        seconds=tuple(seconds),
        notes=tuple(notes),
        tuning_seconds=time.perf_counter() - start,
    )
    if chosen is not None:
        _wisdom.remember(signature, _entry(plans[chosen], choice))
    return replace(plans[choice.chosen], choice=choice)


@dataclass(frozen=True, slots=True)
class _Timing:
    """What is timed for one candidate: a compiled program on its operands.

    ``program`` is None for a rejected candidate (``note`` says why);
    ``scale`` turns the program's seconds into the whole plan's (the chunk
    count over the probe's; 1 when the whole plan is timed).
    """

    program: object
    operands: list
    scale: float
    note: str
    probed: bool = False


def _prepare_timing(plan: Plan, operands: list, run: Runner) -> _Timing:
    """Compile ``plan``, or a probe of its chunks when a whole call is long."""
    cut = None
    if plan.cost.time >= _TIMING_BUDGET_SECONDS:
        cut = probe(plan, _PROBE_SECONDS)
    if cut is None:
        program, note = _compile_within_limit(plan, operands, run)
        return _Timing(program, operands, 1.0, note)
    leading = [
        x[tuple(slice(0, n) for n in shape)]
        for x, shape in zip(operands, cut.shapes, strict=True)
    ]
    program, note = _compile_within_limit(cut.plan, leading, run)
    where = f"timed on {cut.plan.n_chunks} of {plan.n_chunks} chunks"
    return _Timing(program, leading, cut.scale, note or where, probed=True)


def _timing_cost(plan: Plan) -> float:
    """Estimated seconds that timing ``plan`` takes (compiling aside)."""
    if plan.cost.time < _TIMING_BUDGET_SECONDS:
        return _TIMING_BUDGET_SECONDS + plan.cost.time  # rounds and warm-up
    if _probed(plan):
        return _TIMING_BUDGET_SECONDS + _PROBE_SECONDS
    return plan.cost.time  # its one call is the measurement


def _probed(plan: Plan) -> bool:
    """Whether ``measure`` times ``plan`` on a probe of its chunks."""
    return plan.cost.time >= _TIMING_BUDGET_SECONDS and (
        probe(plan, _PROBE_SECONDS) is not None
    )


def _compile_within_limit(plan: Plan, operands: list, run: Runner):
    """The compiled plan and "", or None and why it was rejected."""
    try:
        compiled = jax.jit(lambda *ops: run(plan, ops)).lower(*operands).compile()
    except Exception as error:  # a candidate that cannot compile is skipped
        return None, f"rejected: does not compile ({type(error).__name__})"
    analysis = compiled.memory_analysis()
    temp = getattr(analysis, "temp_size_in_bytes", None)
    if temp is not None and temp > plan.memory_limit:
        return None, (
            f"rejected: compiled temporaries {format_bytes(temp)} exceed the "
            f"limit {format_bytes(plan.memory_limit)}"
        )
    return compiled, ""


def _interleaved_medians(
    compiled: Sequence, operands: Sequence[list]
) -> list[float | None]:
    """Median seconds per compiled program on its operands (None: no program).

    The programs run in rounds, one call each per round, each round starting
    one program later: a burst of other work on a shared machine then slows
    every candidate alike instead of deciding the choice (timing candidates
    one after another once picked a 0.24 ms plan over a 0.2 ms one that a
    burst had made read 7.6 ms). A program whose first call takes
    ``_TIMING_BUDGET_SECONDS`` or more is timed by that call alone; the first
    call of the others is their warm-up.
    """
    first = [
        None if c is None else _seconds(c, ops)
        for c, ops in zip(compiled, operands, strict=True)
    ]
    times: list[list[float]] = [[] if s is None else [s] for s in first]
    short = [
        k for k, s in enumerate(first) if s is not None and s < _TIMING_BUDGET_SECONDS
    ]
    for k in short:
        times[k] = []  # the warm-up call does not count
    deadline = time.perf_counter() + _TIMING_BUDGET_SECONDS * len(short)
    for round_ in range(_ROUNDS if short else 0):
        if round_ and time.perf_counter() > deadline:
            break
        turn = round_ % len(short)
        for k in short[turn:] + short[:turn]:
            times[k].append(_seconds(compiled[k], operands[k]))
    return [median(t) if t else None for t in times]


def _seconds(program, operands: list) -> float:
    begin = time.perf_counter()
    jax.block_until_ready(program(*operands))
    return time.perf_counter() - begin


def _concrete(x):
    """An operand to time with: the array itself, or ones of a struct's shape."""
    if isinstance(x, jax.ShapeDtypeStruct):
        return jnp.ones(x.shape, x.dtype)
    return x


def _entry(plan: Plan, choice: Choice) -> dict:
    return {
        "path": [list(pair) for pair in plan.path],
        "chunks": [list(pair) for pair in plan.chunks],
        # the executor's name, under the key wisdom files have always used
        "lowering": plan.executor,
        "labels": list(choice.labels),
        "seconds": list(choice.seconds),
        "chosen": choice.chosen,
    }


def _from_wisdom(
    signature: str, candidates: Callable[[], tuple[Plan, ...]]
) -> Plan | None:
    """The remembered candidate, if it is still among the ranked ones."""
    entry = _wisdom.lookup(signature)
    if entry is None:
        return None
    want = (
        json.dumps(entry["path"]),
        json.dumps(entry["chunks"]),
        entry["lowering"],
    )
    for plan in candidates():
        have = (
            json.dumps([list(p) for p in plan.path]),
            json.dumps([list(p) for p in plan.chunks]),
            plan.executor,
        )
        if have == want:
            labels = tuple(str(x) for x in entry["labels"])
            seconds = tuple(
                float(s) if isinstance(s, int | float) else None
                for s in entry["seconds"]
            )
            notes = ("",) * len(labels)
            choice = Choice("wisdom", int(entry["chosen"]), labels, seconds, notes)
            return replace(plan, choice=choice)
    return None


def signature(
    plan: Plan,
    optimize_key: object,
    device_kind: str,
    precision: object,
    limit_key: object = None,
) -> str:
    """The wisdom key: what the measured choice depends on.

    ``limit_key`` stands for the memory limit when given ("default" for the
    device default, which changes with the free memory from run to run).
    """
    eq = plan.equation
    return json.dumps(
        [
            eq.text(),
            [list(s) for s in eq.shapes],
            plan.dtype,
            plan.semiring,
            plan.memory_limit if limit_key is None else limit_key,
            repr(optimize_key),
            plan.devices,
            device_kind,
            repr(precision),
        ]
    )
