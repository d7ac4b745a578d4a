"""Measuring: time the best few candidate plans on the device, keep the fastest.

The measuring machinery of the choosing stage (``_choose.py`` decides when
to measure). `measure` compiles the candidates, rejects any whose compiled
temporaries (``memory_analysis().temp_size_in_bytes``) exceed the memory
limit, times the rest in interleaved rounds (median after a warm-up) and
keeps the fastest; the choice is remembered as wisdom (`from_wisdom` finds
it again; ``einslice.wisdom.clear()`` forgets it), as FFTW's planner keeps
its wisdom. A sliced candidate whose call is long is timed on a probe of a
few of its chunks, scaled by its chunk count (``_plan/_probe.py``): the same
program per chunk, a fraction of the cost.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from statistics import median
from typing import TypeVar

import jax
import jax.numpy as jnp

from .._plan import _wisdom
from .._plan._info import candidate_label
from .._plan._memory import format_bytes
from .._plan._probe import probe
from .._plan._types import Choice, Plan

# A sliced candidate estimated at _TIMING_BUDGET_SECONDS or more is timed on a
# probe of its chunks that runs about this long.
_PROBE_SECONDS = 0.05
# Timing: rounds of one call per candidate, at most this many, or this much
# time per candidate.
_ROUNDS = 15
_TIMING_BUDGET_SECONDS = 0.5

Runner = Callable[[Plan, Sequence], jax.Array]
T = TypeVar("T")


Guard = Callable[[Callable[[], T]], T]


def _unguarded(work: Callable[[], T]) -> T:
    return work()


def measure(
    plans: tuple[Plan, ...],
    arrays: Sequence,
    run: Runner,
    signature: str,
    guard: Guard = _unguarded,
) -> Plan:
    """Compile and time each plan; the fastest within the limit, with a Choice.

    A sliced plan estimated to run ``_TIMING_BUDGET_SECONDS`` or more is
    timed on a probe of a few of its chunks (``_plan/_probe.py``), scaled by
    its chunk count; the whole plan is then compiled only if it wins, to
    check its temporaries against the limit. Each compile and each round of
    timing runs through ``guard`` (``_background.jax_work`` off the call
    path: at exit it raises there, and nothing is remembered).
    """
    start = time.perf_counter()
    operands = guard(lambda: [_concrete(x) for x in arrays])
    timed = [
        guard(lambda plan=plan: _prepare_timing(plan, operands, run)) for plan in plans
    ]
    notes = [t.note for t in timed]
    medians = _interleaved_medians(
        [t.program for t in timed], [t.operands for t in timed], guard
    )
    seconds = [
        None if m is None else m * t.scale for m, t in zip(medians, timed, strict=True)
    ]
    chosen = None
    for _, k in sorted((s, k) for k, s in enumerate(seconds) if s is not None):
        if not timed[k].probed:
            chosen = k
            break
        whole, rejected = guard(
            lambda k=k: _compile_within_limit(plans[k], operands, run)
        )
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
    return with_choice(plans[choice.chosen], choice)


def with_choice(plan: Plan, choice: Choice) -> Plan:
    """``plan`` annotated with how tuning chose it (``describe`` shows it).

    The one field set on a plan after it is made, and why: the candidates'
    measurements exist only once the plans were made and timed, and they
    are a record of the choice, not part of the program (``Plan.choice`` is
    left out of equality and hashing, so the annotated plan is the same
    static argument of ``jax.jit``; wisdom finds it again by path, chunks
    and executor). Carrying them beside the plan instead (in
    ``_choose.Chosen``) would leave ``einslice.plan(tune="measure")``, whose
    report shows them, to copy them into the plan it returns: the same
    annotation, made one layer up.
    """
    return replace(plan, choice=choice)


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


def timing_cost(plan: Plan) -> float:
    """Estimated seconds that timing ``plan`` takes (compiling aside)."""
    if plan.cost.time < _TIMING_BUDGET_SECONDS:
        return _TIMING_BUDGET_SECONDS + plan.cost.time  # rounds and warm-up
    if probed(plan):
        return _TIMING_BUDGET_SECONDS + _PROBE_SECONDS
    return plan.cost.time  # its one call is the measurement


def probed(plan: Plan) -> bool:
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
    compiled: Sequence, operands: Sequence[list], guard: Guard = _unguarded
) -> list[float | None]:
    """Median seconds per compiled program on its operands (None: no program).

    The programs run in rounds, one call each per round, each round starting
    one program later: a burst of other work on a shared machine then slows
    every candidate alike instead of deciding the choice (timing candidates
    one after another once picked a 0.24 ms plan over a 0.2 ms one that a
    burst had made read 7.6 ms). A program whose first call takes
    ``_TIMING_BUDGET_SECONDS`` or more is timed by that call alone; the first
    call of the others is their warm-up. Each program's first call, and
    each round, runs through ``guard``.
    """
    first = [
        None if c is None else guard(lambda c=c, ops=ops: _seconds(c, ops))
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

        def one_round(turn=turn) -> None:
            for k in short[turn:] + short[:turn]:
                times[k].append(_seconds(compiled[k], operands[k]))

        guard(one_round)
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


def from_wisdom(
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
            return with_choice(plan, choice)
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
