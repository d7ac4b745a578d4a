"""Running a benchmark: every method on every formula, guarded and checked.

For each formula (a size of the seed's formula, or a suite entry) and method:
prepare (search a path, compile; not timed), refuse what would not fit in the
device's memory (``OOM (needs X GB)``) or would take longer than
``max_seconds`` (``skipped (est. X s)``, extrapolated from the method's time on
the previous formula), then time the rest in rounds (one turn per method per
round, the order rotating) and check every result against the others'.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ._measure import Device, time_call, timed_runs
from ._methods import Context, Method, NotApplicable, Operands, OutOfMemory, Runner
from ._suite import Formula, make_operands, work_flops

RESULT_TOLERANCE = 1e-2
"""Relative Frobenius error above which a result is reported as wrong.

Loose enough for float32 sums of millions of terms and for TF32, JAX's default
matmul precision on recent GPUs.
"""

ESTIMATE_MARGIN = 2.0
"""How far a time extrapolated from the previous size may fall short. Measured
here: vmap_einsum at n=512 was estimated at 45-59 s from n=256 and took
61-106 s. A run is skipped when its estimate times this exceeds
``max_seconds``, since a call that has started cannot be interrupted."""


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
        rounds: the fastest call of each round's turn, in round order (the
            warm-up alone when the method was too slow to repeat); round ``r``
            of two methods on one formula ran back to back.
        over_time: a call took longer than ``max_seconds``; it ran to its end
            (a started call cannot be interrupted) and was not repeated.
        memory: temporary bytes (compiled, or measured while running).
        memory_source: ``compiled``, ``tracemalloc`` or ``rss`` (see Runner).
        needs: bytes the run needs in all, as the OOM guard saw them.
        estimate: estimated seconds of a skipped run.
        flops: the work in FLOPs (the same for every method on a formula).
        rel_error: relative error against the reference result.
        limit: the temporary-memory limit the run was held to: the method's
            own (einslice's resolved ``memory_limit``), else ``--memory-limit``.
        over_limit: temporary memory above ``limit``.
        note: the reason for ``n/a``, ``missing`` or ``error``.
    """

    formula: str
    n: int | None
    method: str
    status: str
    seconds: float | None = None
    runs: int = 0
    rounds: list[float] = field(default_factory=list)
    over_time: bool = False
    memory: int | None = None
    memory_source: str = ""
    needs: int | None = None
    estimate: float | None = None
    flops: float | None = None
    rel_error: float | None = None
    limit: int | None = None
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
    rounds: int = 10,
    budget: float = 10.0,
    deadline: float | None = None,
    dtype: str = "float32",
    progress: bool = True,
) -> list[Cell]:
    """Run every method on every formula; never raises for a method's failure.

    On each formula every method is prepared and run once (the warm-up), then
    timed in rounds: A B C, B C A, C A B ... so that load coming and going on a
    shared machine falls on all alike, and round ``r`` of any two methods can
    be compared as a pair.

    Args:
        formulas: in order; a method's time on one formula predicts the next's.
        methods: the methods, run in this order on each formula.
        ctx: the memory limit and shared caches.
        device: where it runs, and how much memory a run may use.
        matmul_gflops: this device's matmul throughput (for lower-bound estimates).
        max_seconds: a call estimated to take longer than this is skipped, and
            a method whose call took longer is not called again.
        rounds: most timing rounds per formula.
        budget: seconds the timed runs of one method on one formula may take
            together (fewer rounds for slow calls; a call slower than this is
            measured once, by its warm-up).
        deadline: a ``time.monotonic()`` instant; a run estimated to end after
            it is skipped too, so that the whole benchmark ends in time.
        dtype: operand dtype.
        progress: show a tqdm progress bar on stderr.

    Returns:
        One :class:`Cell` per formula and method, formulas outer.
    """
    opts = _Options(matmul_gflops, max_seconds, max(rounds, 1), budget, deadline, dtype)
    missing = {m.name: m.missing() for m in methods}
    previous: dict[str, _Previous] = {}
    cells: list[Cell] = []
    bar = _progress_bar(len(formulas) * len(methods), progress)
    try:
        for formula in formulas:
            row = _run_formula(
                formula, methods, missing, previous, ctx, device, opts, bar
            )
            cells.extend(row)
        bar.set_description("done")
    finally:
        bar.close()
    return cells


@dataclass(frozen=True)
class _Options:
    """The settings of `run` that every formula's and method's run reads."""

    matmul_gflops: float
    max_seconds: float
    rounds: int
    budget: float
    deadline: float | None
    dtype: str


def _label(formula: Formula) -> str:
    """How the progress bar names a formula: ``ij,jk->ik n=512`` or its name."""
    if formula.n is not None and formula.subscripts is not None:
        return f"{formula.subscripts} n={formula.n}"
    return formula.name


def _run_formula(
    formula: Formula,
    methods: Sequence[Method],
    missing: dict[str, str | None],
    previous: dict[str, _Previous],
    ctx: Context,
    device: Device,
    opts: _Options,
    bar: _Bar,
) -> list[Cell]:
    """Every method on one formula; ``previous`` learns their times."""
    operands = Operands(make_operands(formula, opts.dtype))
    flops = work_flops(formula)
    label = _label(formula)
    row: list[Cell] = []
    prepared: list[tuple[Cell, Runner]] = []
    for method in methods:
        bar.set_description(f"{label} {method.name}: preparing")
        cell = Cell(formula.name, formula.n, method.name, "ok", flops=flops)
        limit = opts.max_seconds
        if opts.deadline is not None:
            limit = min(limit, opts.deadline - time.monotonic())
        runner = None
        if missing[method.name] is not None:
            cell.status, cell.note = "missing", str(missing[method.name])
        else:
            runner = _prepare(cell, method, formula, operands, ctx, device,
                              previous=previous.get(method.name), opts=opts,
                              max_seconds=limit)  # fmt: skip
        row.append(cell)
        if runner is None:
            bar.update(1)
            if cell.status == "skipped" and cell.estimate is not None:
                cost = _cost(formula, method, cell.flops or flops)
                previous[method.name] = _Previous(cell.estimate, cost)
        else:
            prepared.append((cell, runner))
    results = _time_rounds(prepared, formula, operands, ctx, opts, bar, label)
    for method, cell in zip(methods, row, strict=True):
        if cell.ran and cell.seconds is not None:
            previous[method.name] = _Previous(
                cell.seconds, _cost(formula, method, cell.flops or flops)
            )
    _check_results(row, results, methods)
    return row


def _cost(formula: Formula, method: Method, flops: float) -> float:
    """The FLOPs a method does on a formula: the full nested loop for naive ones."""
    return formula.naive_flops() if method.naive else flops


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


def _prepare(
    cell: Cell,
    method: Method,
    formula: Formula,
    operands: Operands,
    ctx: Context,
    device: Device,
    *,
    previous: _Previous | None,
    opts: _Options,
    max_seconds: float,
) -> Runner | None:
    """Prepare, guard and skip one method; a runner when it may run.

    Otherwise ``cell`` says why not: n/a, error, oom (checked first: a program
    that does not fit is OOM however long it would take), or skipped (its
    estimate from ``previous``, times :data:`ESTIMATE_MARGIN`, is over
    ``max_seconds``).
    """
    try:
        runner = method.prepare(formula, operands, ctx)
    except NotApplicable as e:
        cell.status, cell.note = "n/a", str(e)
        return None
    except Exception as e:  # report, keep benchmarking
        _failed(cell, e)
        return None
    cell.needs, cell.memory, cell.memory_source = (
        runner.needs, runner.memory, runner.memory_source,
    )  # fmt: skip
    if runner.flops is not None:  # a reference's own work, not the formula's
        cell.flops = runner.flops
    if runner.needs > device.memory:
        cell.status = "oom"
        return None
    cost = _cost(formula, method, cell.flops or 0.0)
    estimate = _estimate(previous, cost, opts.matmul_gflops * method.speed)
    if estimate * ESTIMATE_MARGIN > max_seconds:
        cell.status, cell.estimate = "skipped", estimate
        return None
    return runner


def _record_memory(
    cell: Cell,
    runner: Runner,
    formula: Formula,
    operands: Operands,
    ctx: Context,
    peak: int | None,
) -> None:
    """Measured memory (less the result) when not compiled; over the limit?"""
    if runner.memory is None and peak is not None:
        out_bytes = int(np.prod(formula.out_shape)) * operands.numpy[0].itemsize
        cell.memory = max(0, peak - out_bytes)
    cell.limit = runner.limit if runner.limit is not None else ctx.memory_limit_bytes
    if cell.limit is not None and cell.memory is not None:
        cell.over_limit = cell.memory > cell.limit


QUIET_SECONDS = 0.1
"""Pause before each method's turn. Other runtimes' worker threads keep
spinning after a call (torch's OpenMP, numpy's OpenBLAS, XLA's own pool): on 2
cores the jitted call right after a torch.einsum ran up to 4x slower (suite
attention: 20.6 ms after torch, 4.2 ms after jnp.einsum), and since turns
rotate in a fixed cycle the same method always followed torch."""

LEAD_IN_BELOW = 0.05
"""Calls faster than this (seconds) get one untimed call at the start of each
turn: the previous method's data left the caches cold (measured: the first of
two identical einslice plans ran 1.5x slower at n=128)."""


def _time_rounds(
    prepared: list[tuple[Cell, Runner]],
    formula: Formula,
    operands: Operands,
    ctx: Context,
    opts: _Options,
    bar: _Bar,
    label: str,
) -> dict[str, np.ndarray]:
    """Warm each runner up, then time them in rounds: A B C, B C A, C A B ...

    Each method gets the timed runs :func:`_runs` gives it (``rounds``, more
    for fast calls, fewer when ``budget`` is short), spread over at most
    ``rounds`` turns, so load coming and going falls on all alike. A turn
    starts with a :data:`QUIET_SECONDS` pause and, for fast calls, an untimed
    call, so no method pays for the one before it. A method slower than
    ``budget`` keeps its warm-up run as the measurement; one slower than
    ``max_seconds`` is marked ``over_time``.

    Returns:
        Each method's result (from its warm-up run), by name.
    """
    results: dict[str, np.ndarray] = {}
    runs: dict[str, int] = {}
    warm_time: dict[str, float] = {}
    ready: list[tuple[Cell, Runner]] = []
    for cell, runner in prepared:
        bar.set_description(f"{label} {cell.method}: warm-up")
        try:
            warm = time_call(
                runner.call, repeats=0, budget=0.0,
                probe=None if runner.memory is not None else runner.memory_source,
            )  # fmt: skip
        except Exception as e:  # report, keep benchmarking
            _failed(cell, e)
            bar.update(1)
            continue
        _record_memory(cell, runner, formula, operands, ctx, warm.peak_bytes)
        results[cell.method] = _to_numpy(warm.result)
        warm_time[cell.method] = warm.median
        cell.over_time = warm.median > opts.max_seconds
        slow = cell.over_time or warm.median >= opts.budget
        runs[cell.method] = 0 if slow else _runs(warm.median, opts)
        ready.append((cell, runner))

    def show(text: str) -> None:
        bar.set_description(f"{label} {text}")

    turns = _timed_turns(ready, runs, warm_time, opts.rounds, opts.max_seconds, show)
    for cell, _ in ready:
        mine = [t for t in turns[cell.method] if t]
        timed = [s for t in mine for s in t]
        if not timed:  # too slow to repeat: the warm-up is the measurement
            timed, mine = [warm_time[cell.method]], [[warm_time[cell.method]]]
        cell.seconds, cell.runs = statistics.median(timed), len(timed)
        cell.rounds = [min(t) for t in mine]
        bar.update(1)
    return results


TURN_SECONDS = 0.05
"""Fast calls are repeated within a turn for about this long, and the turn's
fastest call is its round's time: load on a shared machine comes in bursts
that only add time, and a lone sub-millisecond call can fall inside one (on
2 busy cores, einslice vs scan_einsum at n=128 read 1.99x and 1.04x in two
runs of one call per turn)."""


def _runs(seconds: float, opts: _Options) -> int:
    """Timed runs of a call of ``seconds``, within the budget.

    Enough for every round's turn to last :data:`TURN_SECONDS`, and at least
    what :func:`timed_runs` gives.
    """
    per_run = max(seconds, 1e-9)
    per_turn = max(1, math.ceil(TURN_SECONDS / per_run))
    wanted = max(timed_runs(seconds, opts.rounds, opts.budget), opts.rounds * per_turn)
    return max(1, min(wanted, int(opts.budget / per_run)))


def _timed_turns(
    ready: list[tuple[Cell, Runner]],
    runs: dict[str, int],
    warm_time: dict[str, float],
    max_turns: int,
    max_seconds: float = math.inf,
    show: Callable[[str], object] | None = None,
) -> dict[str, list[list[float]]]:
    """Each method's timed runs, one list per turn, in up to ``max_turns`` turns.

    A method whose call takes longer than ``max_seconds`` gets no further calls
    (its cell is marked ``over_time``). ``show`` is told what runs now (for
    the progress bar).
    """
    turns = {m: min(n, max_turns) for m, n in runs.items()}
    total = max(turns.values(), default=0)
    times: dict[str, list[list[float]]] = {cell.method: [] for cell, _ in ready}
    for t in range(total):
        # Each round starts one method later, so none is always first.
        shift = t % max(len(ready), 1)
        for cell, runner in ready[shift:] + ready[:shift]:
            method = cell.method
            if t >= turns[method] or cell.over_time:
                continue
            if show is not None:
                show(f"{method}: round {t + 1}/{total}")
            # this turn's share of the runs: the first turns take the remainder
            count = runs[method] // turns[method] + (t < runs[method] % turns[method])
            time.sleep(QUIET_SECONDS)
            if warm_time[method] < LEAD_IN_BELOW:
                runner.call()
            turn: list[float] = []
            for _ in range(count):
                start = time.perf_counter()
                runner.call()
                turn.append(time.perf_counter() - start)
                if turn[-1] > max_seconds:
                    cell.over_time = True
                    break
            times[method].append(turn)
    return times


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
    unchecked = {m.name for m in methods if not m.check}
    names = [name for name in results if name not in unchecked]
    if not names:
        return

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
        if cell.method in names:
            cell.rel_error = error(results[cell.method], reference)
            if not cell.rel_error <= RESULT_TOLERANCE:
                cell.status = "wrong"


def _failed(cell: Cell, e: BaseException) -> None:
    """Mark ``cell`` failed: ``oom`` for XLA's out-of-memory, else ``error``."""
    if isinstance(e, OutOfMemory):
        cell.status, cell.needs = "oom", e.needs
    else:
        cell.status = "error"
    cell.note = _one_line(e)


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
    # left on screen when done: the last line says every run finished
    return tqdm(total=total, file=sys.stderr, leave=True, unit="run")
