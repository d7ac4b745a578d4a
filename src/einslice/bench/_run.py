"""Running a benchmark: every method on every formula, guarded and checked.

For each formula (a size of the seed's formula, or a suite entry) and method:
prepare (search a path, compile; not timed), refuse what would not fit in the
device's memory (``OOM (needs X GB)``) or would take longer than
``max_seconds`` (``skipped (est. X s)``, extrapolated from the method's time on
the previous formula), else time it and check its result against einslice's.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ._measure import Device, time_call
from ._methods import Context, Method, NotApplicable, Operands
from ._suite import Formula, make_operands, work_flops

RESULT_TOLERANCE = 1e-2
"""Relative Frobenius error above which a result is reported as wrong.

Loose enough for float32 sums of millions of terms and for TF32, JAX's default
matmul precision on recent GPUs.
"""


@dataclass
class Cell:
    """One method on one formula: what happened and what was measured.

    Attributes:
        formula: the formula's name.
        n: the size parameter of a sweep (None in the suite).
        method: the method's name.
        status: ``ok``, ``wrong`` (ran, result differs), ``oom``, ``skipped``,
            ``n/a`` (cannot express the formula), ``missing`` (not installed),
            ``error`` (raised).
        seconds: median run time.
        runs: number of timed runs.
        memory: temporary bytes (compiled, or measured while running).
        memory_source: ``compiled``, ``tracemalloc`` or ``rss`` (see Runner).
        needs: bytes the run needs in all, as the OOM guard saw them.
        estimate: estimated seconds of a skipped run.
        flops: the work in FLOPs (the same for every method on a formula).
        rel_error: relative error against the reference result.
        over_limit: temporary memory above the limit: the method's own (einslice's
            resolved ``memory_limit``), else ``--memory-limit``.
        note: the reason for ``n/a``, ``missing`` or ``error``.
    """

    formula: str
    n: int | None
    method: str
    status: str
    seconds: float | None = None
    runs: int = 0
    memory: int | None = None
    memory_source: str = ""
    needs: int | None = None
    estimate: float | None = None
    flops: float | None = None
    rel_error: float | None = None
    over_limit: bool = False
    note: str = ""

    @property
    def gflops(self) -> float | None:
        """Work FLOPs per second, in GFLOP/s."""
        if self.seconds is None or not self.flops or self.seconds <= 0:
            return None
        return self.flops / self.seconds / 1e9

    @property
    def ran(self) -> bool:
        """The method ran to completion (its result may still be wrong)."""
        return self.status in ("ok", "wrong")


@dataclass
class _Previous:
    """A method's last time (or estimate) and the cost it was for."""

    seconds: float
    cost: float


def run(
    formulas: Sequence[Formula],
    methods: Sequence[Method],
    ctx: Context,
    device: Device,
    *,
    matmul_gflops: float,
    max_seconds: float = 60.0,
    repeats: int = 5,
    budget: float = 2.0,
    deadline: float | None = None,
    dtype: str = "float32",
    progress: bool = True,
) -> list[Cell]:
    """Run every method on every formula; never raises for a method's failure.

    Args:
        formulas: in order; a method's time on one formula predicts the next's.
        methods: the methods, run in this order on each formula.
        ctx: the memory limit and shared caches.
        device: where it runs, and how much memory a run may use.
        matmul_gflops: this device's matmul throughput (for lower-bound estimates).
        max_seconds: a method estimated to take longer than this is skipped.
        repeats: most timed runs after the warm-up.
        budget: seconds the timed runs of one cell may take together; a run
            slower than this is measured once (its warm-up run).
        deadline: a ``time.monotonic()`` instant; a run estimated to end after
            it is skipped too, so that the whole benchmark ends in time.
        dtype: operand dtype.
        progress: show a tqdm progress bar on stderr.

    Returns:
        One :class:`Cell` per formula and method, formulas outer.
    """
    missing = {m.name: m.missing() for m in methods}
    previous: dict[str, _Previous] = {}
    cells: list[Cell] = []
    bar = _progress_bar(len(formulas) * len(methods), progress)
    try:
        for formula in formulas:
            operands = Operands(make_operands(formula, dtype))
            flops = work_flops(formula)
            results: dict[str, np.ndarray] = {}
            row: list[Cell] = []
            for method in methods:
                bar.set_description(f"{formula.name} {method.name}")
                cell = Cell(formula.name, formula.n, method.name, "ok", flops=flops)
                if missing[method.name] is not None:
                    cell.status, cell.note = "missing", str(missing[method.name])
                else:
                    cost = formula.naive_flops() if method.naive else flops
                    limit = max_seconds
                    if deadline is not None:
                        limit = min(limit, deadline - time.monotonic())
                    result = _run_one(
                        cell, method, formula, operands, ctx, device,
                        estimate=_estimate(previous.get(method.name), cost,
                                           matmul_gflops * method.speed),
                        max_seconds=limit, repeats=repeats, budget=budget,
                    )  # fmt: skip
                    if result is not None:
                        results[method.name] = result
                    if cell.ran and cell.seconds is not None:
                        previous[method.name] = _Previous(cell.seconds, cost)
                    elif cell.status == "skipped" and cell.estimate is not None:
                        previous[method.name] = _Previous(cell.estimate, cost)
                row.append(cell)
                bar.update(1)
            _check_results(row, results, methods)
            cells.extend(row)
    finally:
        bar.close()
    return cells


def _estimate(prev: _Previous | None, cost: float, matmul_gflops: float) -> float:
    """Predicted seconds: the previous time scaled by cost, at least cost / peak.

    ``matmul_gflops`` is the best this method reaches (the device's matmul
    throughput times the method's ``speed``); the bound it gives decides for
    the first formula a method sees.
    """
    bound = cost / (matmul_gflops * 1e9) if matmul_gflops > 0 else 0.0
    if prev is None or prev.cost <= 0:
        return bound
    return max(bound, prev.seconds * cost / prev.cost)


def _run_one(
    cell: Cell,
    method: Method,
    formula: Formula,
    operands: Operands,
    ctx: Context,
    device: Device,
    *,
    estimate: float,
    max_seconds: float,
    repeats: int,
    budget: float,
) -> np.ndarray | None:
    """Prepare, guard and time one method; fill ``cell``; return its result."""
    if estimate > max_seconds:
        cell.status, cell.estimate = "skipped", estimate
        return None
    try:
        runner = method.prepare(formula, operands, ctx)
    except NotApplicable as e:
        cell.status, cell.note = "n/a", str(e)
        return None
    except Exception as e:  # report, keep benchmarking
        cell.status, cell.note = "error", _one_line(e)
        return None
    cell.needs, cell.memory, cell.memory_source = (
        runner.needs, runner.memory, runner.memory_source,
    )  # fmt: skip
    if runner.needs > device.memory:
        cell.status = "oom"
        return None
    try:
        timing = time_call(
            runner.call,
            repeats=repeats,
            budget=min(budget, max(max_seconds, 0.0)),
            probe=None if runner.memory is not None else runner.memory_source,
        )
    except Exception as e:  # report, keep benchmarking
        cell.status, cell.note = "error", _one_line(e)
        return None
    cell.seconds, cell.runs = timing.median, timing.runs
    if runner.memory is None:
        out_bytes = int(np.prod(formula.out_shape)) * operands.numpy[0].itemsize
        if timing.peak_bytes is not None:
            cell.memory = max(0, timing.peak_bytes - out_bytes)
    limit = runner.limit if runner.limit is not None else ctx.memory_limit_bytes
    if limit is not None and cell.memory is not None:
        cell.over_limit = cell.memory > limit
    return _to_numpy(timing.result)


def _to_numpy(result: object) -> np.ndarray:
    """A method's result as a float64 numpy array (torch, jax or numpy)."""
    if hasattr(result, "detach"):
        result = result.detach().cpu().numpy()  # type: ignore[attr-defined]
    return np.asarray(result, dtype=np.float64)


def _check_results(
    row: list[Cell], results: dict[str, np.ndarray], methods: Sequence[Method]
) -> None:
    """Compare every result with the one most others agree with.

    Ties go to einslice's own methods, then to table order; a method that alone
    disagrees with everybody else is the one reported as wrong.
    """
    if not results:
        return
    ours = {m.name for m in methods if m.ours}
    names = list(results)

    def error(a: np.ndarray, b: np.ndarray) -> float:
        if a.shape != b.shape:
            return math.inf
        return float(np.linalg.norm(a - b)) / max(float(np.linalg.norm(b)), 1e-300)

    def votes(name: str) -> tuple[int, bool]:
        agree = sum(
            error(results[other], results[name]) <= RESULT_TOLERANCE for other in names
        )
        return agree, name in ours

    best = max(names, key=votes)  # max keeps the first of equals: table order
    reference = results[best]
    for cell in row:
        if cell.method in results:
            cell.rel_error = error(results[cell.method], reference)
            if not cell.rel_error <= RESULT_TOLERANCE:
                cell.status = "wrong"


def _one_line(e: BaseException) -> str:
    """An exception as one short line."""
    text = " ".join(str(e).split())
    text = f"{type(e).__name__}: {text}"
    return text if len(text) <= 160 else text[:157] + "..."


class _Bar(Protocol):
    """The part of tqdm's interface the runner uses."""

    def set_description(self, desc: str) -> None:
        """Say what runs now."""

    def update(self, n: int) -> object:
        """Advance by ``n`` runs."""

    def close(self) -> None:
        """Remove the bar."""


class _NoBar:
    """Stands in for tqdm when the progress bar is off or tqdm is missing."""

    def set_description(self, desc: str) -> None:
        """Do nothing."""

    def update(self, n: int) -> None:
        """Do nothing."""

    def close(self) -> None:
        """Do nothing."""


def _progress_bar(total: int, enabled: bool) -> _Bar:
    """A tqdm bar on stderr, or a silent stand-in."""
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, file=sys.stderr, leave=False, unit="run")
