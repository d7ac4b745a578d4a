"""A walking plan keeps its walk where it times clearly faster than its program.

The rule's bookkeeping (`_keep.WalkOrProgram`) with made-up timings, and
the runner (`_run._TopLevelRun`) that follows it, its clock replaced by
the same made-up timings: no test here times anything.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import jax
import numpy as np
import pytest

import einslice
from einslice._exec import _grow, _keep, _run
from einslice._exec._keep import KEEP_RATIO, KEEP_TIMED_CALLS, WalkOrProgram


def _calls(keep: WalkOrProgram, n: int, walk: float, program: float) -> list[str]:
    """``n`` calls: the sides they took ("p" or "w"); each side takes its seconds."""
    sides = []
    for _ in range(n):
        side = keep.next()
        keep.record(side, program if side else walk)
        sides.append("p" if side else "w")
    return sides


def test_a_program_as_fast_as_the_rental_walks_is_held_without_more_walks():
    keep = WalkOrProgram(walks=[0.010, 0.012])
    sides = _calls(keep, 1 + KEEP_TIMED_CALLS, walk=0.010, program=0.011)
    assert sides == ["p"] * (1 + KEEP_TIMED_CALLS) and keep.verdict == "program"
    assert keep.next()  # (and every later call)


def test_a_program_clearly_slower_than_fresh_walks_keeps_the_walk():
    keep = WalkOrProgram(walks=[0.040])
    block = 1 + KEEP_TIMED_CALLS  # (the first call of each side's block not counted)
    sides = _calls(keep, 2 * block, walk=0.040, program=0.100)
    assert sides == ["p"] * block + ["w"] * block
    assert keep.verdict == "walk" and keep.program == 0.100


def test_the_first_verdict_is_taken_on_fresh_walks_not_the_rentals():
    # the rental's walks (40 ms) said the program (100 ms) was slower; fresh
    # walks, timed after it as it was (here 90 ms: the load changed), decide
    keep = WalkOrProgram(walks=[0.040])
    sides = _calls(keep, 2 * (1 + KEEP_TIMED_CALLS), walk=0.090, program=0.100)
    assert sides.count("w") == 1 + KEEP_TIMED_CALLS
    assert keep.verdict == "program"  # (not KEEP_RATIO times slower)
    assert 0.100 < KEEP_RATIO * 0.090


def test_the_first_call_of_each_block_is_not_counted():
    keep = WalkOrProgram()
    keep.record(True, 5.0)  # (the first after the walks: XLA's threads cold)
    for _ in range(KEEP_TIMED_CALLS):
        keep.record(True, 0.1)
    assert keep.program == 0.1 and keep.verdict is None and not keep.next()
    keep.record(False, 9.0)  # (the first walk after the program's calls)
    for _ in range(KEEP_TIMED_CALLS):
        keep.record(False, 0.01)
    assert keep.verdict == "walk" and min(keep.walks) == 0.01


def test_calls_beside_background_work_are_not_counted():
    keep = WalkOrProgram()
    for _ in range(10):
        keep.record(True, 0.1, counted=False)
    assert keep.program is None and keep.next()


def test_a_kept_walk_retimes_the_program_at_a_bounded_share():
    keep = WalkOrProgram(walks=[0.040])
    _calls(keep, 2 * (1 + KEEP_TIMED_CALLS), walk=0.040, program=0.100)
    assert keep.verdict == "walk"
    sides = _calls(keep, 1000, walk=0.040, program=0.100)
    retimed = sides.count("p")
    walked = sides.count("w") * 0.040
    # each re-timing is one block of program calls, after walks of at least
    # the block's time over the share; the walk stays kept
    assert retimed % (1 + KEEP_TIMED_CALLS) == 0 and retimed > 0
    assert (
        retimed * 0.100
        <= _keep.KEEP_RECHECK_SHARE * walked + (1 + KEEP_TIMED_CALLS) * 0.1
    )
    assert keep.verdict == "walk"


def test_a_retiming_that_finds_the_program_as_fast_holds_it_for_good():
    keep = WalkOrProgram(walks=[0.040])
    _calls(keep, 2 * (1 + KEEP_TIMED_CALLS), walk=0.040, program=0.100)
    verdicts = set()
    for _ in range(10_000):  # (the load changed: the program now runs 35 ms)
        side = keep.next()
        verdicts.add(keep.record(side, 0.035 if side else 0.040))
        if keep.verdict == "program":
            break
    assert keep.verdict == "program" and verdicts == {None, "program"}
    # a hair slower than the walk is not enough once the walk is kept
    keep = WalkOrProgram(walks=[0.040])
    _calls(keep, 2 * (1 + KEEP_TIMED_CALLS), walk=0.040, program=0.100)
    _calls(keep, 10_000, walk=0.040, program=0.045)
    assert keep.verdict == "walk"


def test_a_program_timed_already_skips_its_block():
    # (a growth's trial timed the chosen plan's program)
    assert WalkOrProgram(walks=[0.05], program=0.05).verdict == "program"
    keep = WalkOrProgram(program=0.100)  # (a new plan: its walks not timed yet)
    assert keep.verdict is None and not keep.next()
    sides = _calls(keep, 1 + KEEP_TIMED_CALLS, walk=0.040, program=0.100)
    assert sides == ["w"] * (1 + KEEP_TIMED_CALLS) and keep.verdict == "walk"


# -- the runner: its calls' seconds replaced by made-up ones ---------------------


def _chain():
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal((3, 3)) for _ in range(40)]
    args = []
    for i, x in enumerate(ops):
        args += [x, [i, i + 1]]
    return [*args, [0, 40]], ops


@pytest.fixture
def timings(monkeypatch):
    """Made-up seconds per side for the runner's walk-or-program records,
    and a spy on the roads its calls take ("host" or "program")."""
    seconds = {"walk": 0.040, "program": 0.100}
    record = WalkOrProgram.record

    def made_up(self, program, _seconds, counted=True):
        return record(self, program, seconds["program" if program else "walk"], counted)

    monkeypatch.setattr(WalkOrProgram, "record", made_up)
    monkeypatch.delenv("EINSLICE_GROW", raising=False)
    _run._top_level_run.cache_clear()
    yield seconds
    _run._top_level_run.cache_clear()


def _roads(monkeypatch, p):
    used = []
    host = _run.EXECUTORS["host"]

    def walking(*a):
        if threading.current_thread() is threading.main_thread():
            used.append("host")
        return host.run(*a)

    monkeypatch.setitem(_run.EXECUTORS, "host", replace(host, run=walking))
    return used


def _landed(p, ops):
    """Call ``p`` until the rental's compile has landed; the runner."""
    runner = _run._top_level_run(p)
    runner.host_spent = runner.host_budget  # (the rental's end)
    p(*ops)
    assert _run.settle(p, 60) and runner.stage.keep is not None
    return runner


def test_the_runner_walks_on_where_its_program_is_clearly_slower(timings, monkeypatch):
    args, ops = _chain()
    p = einslice.plan(*args, optimize="greedy")  # (no growth: steady once kept)
    used = _roads(monkeypatch, p)
    runner = _landed(p, ops)
    expected = np.linalg.multi_dot(ops)
    for _ in range(2 * (1 + KEEP_TIMED_CALLS) + 20):
        np.testing.assert_allclose(np.asarray(p(*ops)), expected, rtol=1e-10)
    assert runner.stage.keep is not None and runner.stage.keep.verdict == "walk"
    assert runner.stage.host and runner.steady and runner.pacing is None
    # the rental's walk, the program's block, then walks
    assert used.count("host") == 1 + 20 + 1 + KEEP_TIMED_CALLS
    assert einslice.running_plan(p) is p


def test_the_runner_holds_a_program_that_is_not_clearly_slower(timings, monkeypatch):
    timings["program"] = 0.050  # (1.25x the walk: a near tie goes to the program)
    args, ops = _chain()
    p = einslice.plan(*args, optimize="greedy")
    used = _roads(monkeypatch, p)
    runner = _landed(p, ops)
    expected = np.linalg.multi_dot(ops)
    for _ in range(30):
        np.testing.assert_allclose(np.asarray(p(*ops)), expected, rtol=1e-10)
    assert not runner.stage.host and runner.stage.keep is None and runner.steady
    assert used.count("host") <= 2 + 1 + KEEP_TIMED_CALLS  # (walks timed once)


def test_calls_from_four_threads_stay_exact_while_the_walk_is_judged(
    timings, monkeypatch
):
    args, ops = _chain()
    p = einslice.plan(*args, optimize="greedy")
    runner = _landed(p, ops)
    expected = np.linalg.multi_dot(ops)
    errors = []

    def calls():
        try:
            for _ in range(40):
                got = np.asarray(p(*ops))
                if not np.allclose(got, expected, rtol=1e-10):
                    errors.append(got)
        except Exception as error:  # (reported below)
            errors.append(error)

    threads = [threading.Thread(target=calls) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert runner.stage.keep is not None and runner.stage.keep.verdict == "walk"


# -- growth: a walking runner takes a grown plan only where it beats the walk ------


def test_a_grown_plan_must_beat_the_kept_walk_not_the_held_program(monkeypatch):
    monkeypatch.setattr(_grow, "timed_call", lambda p, plan, c, a: (plan, plan))
    plans = (0.100, 0.060)  # (their programs' seconds: the held, a grown one)
    trial = _grow.Trial(plans, plans, None, None, 0.0)  # type: ignore[arg-type]
    while not trial.complete:
        trial.call(())
    assert trial.choice() == 1  # (faster than the held program)
    assert trial.choice(held=0.040) == 0  # (slower than the walk kept instead)
    assert trial.choice(held=0.070) == 1


def _ring():
    rng = np.random.default_rng(0)
    ops = [rng.uniform(0.5, 1.0, (3, 3)) for _ in range(16)]
    args = []
    for i, x in enumerate(ops):
        args += [x, [i, (i + 1) % 16]]
    return [*args, []], ops


@pytest.mark.parametrize("grown_seconds", [0.030, 0.060])
def test_a_walking_runner_grows_and_walks_or_runs_the_grown_plan(
    timings, monkeypatch, grown_seconds
):
    # the held plan walks in 40 ms, its program runs in 100; a growth finds
    # a plan whose program runs in 30 ms (taken: then timed against its own
    # walks, 40 ms, and held) or in 60 ms (faster than the held program,
    # slower than the walk: not taken, the walk goes on)
    monkeypatch.setattr(_grow, "least_search_cost", lambda n_terms: 0.0)
    args, ops = _ring()
    p = einslice.plan(*args)
    assert _run._top_level_run(p).request is not None  # (a plan that grows)
    grown = einslice.plan(*args, optimize=[(0, 1)] * 15)
    assert grown.path != p.path
    monkeypatch.setattr(_grow, "grown_plans", lambda *a: (grown, None))
    seconds = {p: 0.100, grown: grown_seconds}

    def timed(program, plan, config, args):
        return jax.block_until_ready(program(plan, config, *args)), seconds[plan]

    monkeypatch.setattr(_grow, "timed_call", timed)
    monkeypatch.setattr(_grow, "compile_seconds", lambda plan: 0.0)
    runner = _landed(p, ops)
    expected = float(np.trace(np.linalg.multi_dot(ops)))
    for _ in range(200):
        np.testing.assert_allclose(float(p(*ops)), expected, rtol=1e-12)
        assert _run.settle(p, 60)
        if runner.growths and runner.stage.trial is None:
            keep = runner.stage.keep
            if keep is None or keep.verdict is not None:
                break
    assert runner.growths and runner.growths[0].timed == (0.100, grown_seconds)
    if grown_seconds < 0.040:
        assert einslice.running_plan(p) is grown and runner.growths[0].switched
        assert not runner.stage.host  # (its program beat its walks: held)
    else:
        assert einslice.running_plan(p) is p and not runner.growths[0].switched
        assert runner.stage.host and runner.stage.keep is not None
        assert runner.stage.keep.verdict == "walk"
