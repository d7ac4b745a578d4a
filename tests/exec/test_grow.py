"""A top-level plan's tree search grows with its use (`_run._TopLevelRun`, `_grow`).

A ring of 16 small matrices is planned by the large-network search under
``optimize="auto"``; the tests make its first growth come early (the least
search cost patched to zero: growth at `PLAN_RUNS` calls) and, where a
switch is wanted, hand the runner a cheaper plan along another path and
timings (`_grow.timed_call`) that say which program is faster. A growth
runs in the background (`_run.settle` waits for it), and its plans are then
timed on the next calls (`_grow.Trial`): the tests make those calls.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import jax
import numpy as np
import pytest

import einslice
from einslice._exec import _background, _grow, _run
from einslice._plan import _planner

N = 16  # more than 12 operands: the large-network search


def _ring(seed: int = 0):
    """``einslice.plan`` arguments (interleaved) of tr(A0 A1 ... A15), operands."""
    rng = np.random.default_rng(seed)
    ops = [rng.uniform(0.5, 1.0, (3, 3)) for _ in range(N)]
    args = []
    for i, x in enumerate(ops):
        args += [x, [i, (i + 1) % N]]
    return [*args, []], ops


def _reference(ops) -> float:
    return float(np.trace(np.linalg.multi_dot(ops)))


@pytest.fixture
def early(monkeypatch):
    """Growth from the PLAN_RUNS-th call on, for any plan: fresh runners.

    Compiled from the first call (no host walk first: the ring's walk
    beats its compile), so that growth times and paces compiled programs.
    """
    monkeypatch.setattr(_grow, "least_search_cost", lambda n_terms: 0.0)
    monkeypatch.setattr(_run, "host_first_seconds", lambda p, on_device=False: 0.0)
    monkeypatch.delenv("EINSLICE_GROW", raising=False)
    _run._top_level_run.cache_clear()
    yield
    assert _background.drain(60)  # (no background work outlives the patches)
    _run._top_level_run.cache_clear()


def _cheaper(p, args):
    """A plan of ``p``'s equation along another path, estimated 100x faster."""
    reversed_path = [(0, 1)] * (len(p.prepared) - 1)
    other = einslice.plan(*args, optimize=reversed_path)
    assert other.path != p.path
    return dataclasses.replace(
        other, cost=dataclasses.replace(other.cost, time=p.cost.time / 100)
    )


def _timings(seconds: dict):
    """A `_grow.timed_call` stand-in: each plan's call takes ``seconds[plan]``."""

    def timed(program, plan, config, args):
        return jax.block_until_ready(program(plan, config, *args)), seconds[plan]

    return timed


def _calls(p, ops, until, most=200):
    """Call ``p`` (each result exact) until ``until()``, settling each time."""
    expected = _reference(ops)
    for _ in range(most):
        if until():
            return
        np.testing.assert_allclose(float(p(*ops)), expected, rtol=1e-12)
        assert _run.settle(p, 60)
    raise AssertionError(f"not done after {most} calls")


def test_a_searched_plan_switches_to_a_faster_grown_plan_and_stays_exact(
    early, monkeypatch
):
    args, ops = _ring()
    p = einslice.plan(*args)
    path_before = p.path
    cheaper = _cheaper(p, args)
    asked = []

    def grown(request, budget, calls):
        asked.append((budget, calls))
        return cheaper, None

    monkeypatch.setattr(_grow, "grown_plans", grown)
    monkeypatch.setattr(_grow, "timed_call", _timings({p: 1.0, cheaper: 0.01}))
    monkeypatch.setattr(_grow, "compile_seconds", lambda plan: 0.0)
    # cheap plans: compiled for compile time first, optimized later
    monkeypatch.setattr(_run, "CHEAP_MIN_STEPS", 1)
    runner = _run._top_level_run(p)
    expected = _reference(ops)
    for call in range(1, _grow.PLAN_RUNS):
        np.testing.assert_allclose(float(p(*ops)), expected, rtol=1e-12)
        assert einslice.running_plan(p) is p and not runner.steady, call
    np.testing.assert_allclose(float(p(*ops)), expected, rtol=1e-12)
    assert _run.settle(p, 60)  # the PLAN_RUNS-th call grew, in the background
    assert len(asked) == 1 and asked[0][1] == _grow.PLAN_RUNS
    # its budget: half the estimated run time of the calls so far
    assert asked[0][0] == pytest.approx(_grow.PLAN_RUNS * p.cost.time / 2, rel=0.05)
    trial = runner.stage.trial
    assert trial is not None and trial.plans == (p, cheaper)
    assert einslice.running_plan(p) is p  # until the calls have timed both
    _calls(p, ops, lambda: runner.stage.trial is None)
    assert runner.top_calls == _grow.PLAN_RUNS + 2 * (1 + _grow.GROW_TIMED_CALLS)
    assert einslice.running_plan(p) is cheaper
    for _ in range(3 * _grow.PLAN_RUNS):
        np.testing.assert_allclose(float(p(*ops)), expected, rtol=1e-12)
    assert p.path == path_before  # the caller's plan is what describe() says
    assert [g.switched for g in runner.growths][:1] == [True]
    assert runner.growths[0].timed == (1.0, 0.01)
    # the program timed is the one run: no second compile of the new plan
    assert runner.stage.optimized and runner.stage.program is trial.programs[1]
    assert trial.programs[1] is _run._jitted(
        _run.compile_options(cheaper, optimized=True)
    )


def test_a_plan_slower_than_its_estimate_grows_sooner(early, monkeypatch):
    # its calls' run time counts at its pace: the first growth, due at call
    # 20 * PLAN_RUNS by the estimate, comes once the paced calls add up to it
    args, ops = _ring()
    p = einslice.plan(*args)
    due = 20 * _grow.PLAN_RUNS
    monkeypatch.setattr(_grow, "least_search_cost", lambda n: due / 2 * p.cost.time)
    monkeypatch.setattr(_grow, "pace", lambda plan, seconds: 8.0)
    monkeypatch.setattr(_grow, "grown_plans", lambda *args: (p, None))
    runner = _run._top_level_run(p)
    assert _grow.first_growth_call(p) == due
    _calls(p, ops, lambda: len(runner.growths) >= 1, most=due)
    assert runner.pace == 8.0 and runner.pacing is None
    first = runner.growths[0].call
    assert _grow.PLAN_RUNS <= first <= due / 8 + _grow.PACE_CALLS + 1


def _held_search(monkeypatch):
    """A ring's plan whose growth search finds a 100x faster plan once let go.

    Returns the plan, the faster one, the operands, and the events: set
    ``go`` to let the search return; ``searching`` is set once it began.
    """
    args, ops = _ring()
    p = einslice.plan(*args)
    cheaper = _cheaper(p, args)
    go, searching = threading.Event(), threading.Event()

    def grown(request, budget, calls):
        searching.set()
        assert go.wait(60)
        return cheaper, None

    monkeypatch.setattr(_grow, "grown_plans", grown)
    monkeypatch.setattr(_grow, "timed_call", _timings({p: 1.0, cheaper: 0.01}))
    return p, cheaper, ops, go, searching


def test_no_call_waits_for_a_growth_search(early, monkeypatch):
    # the search blocks until the test lets it go: the calls go on meanwhile
    p, cheaper, ops, go, searching = _held_search(monkeypatch)
    monkeypatch.setattr(_grow, "compile_seconds", lambda plan: 0.0)
    runner = _run._top_level_run(p)
    for _ in range(_grow.PLAN_RUNS):
        p(*ops)
    assert searching.wait(60)  # the PLAN_RUNS-th call started it and returned
    expected = _reference(ops)
    for _ in range(3 * _grow.PLAN_RUNS):  # calls while it searches: the held plan
        np.testing.assert_allclose(float(p(*ops)), expected, rtol=1e-12)
    assert runner.busy.locked() and runner.growths == []
    assert einslice.running_plan(p) is p and not _run.settle(p, 0.01)
    go.set()
    _calls(p, ops, lambda: einslice.running_plan(p) is cheaper)
    assert runner.growths[0].call == _grow.PLAN_RUNS


def test_the_calls_made_while_it_searched_pay_for_the_compile(early, monkeypatch):
    # a compile dearer than twice the calls' run time when the search began,
    # but not than the calls made by the time it returned: compiled and timed
    p, cheaper, ops, go, searching = _held_search(monkeypatch)
    compile_ = 2 * 4 * _grow.PLAN_RUNS * p.cost.time
    monkeypatch.setattr(_grow, "compile_seconds", lambda plan: compile_)
    runner = _run._top_level_run(p)
    for _ in range(_grow.PLAN_RUNS):
        p(*ops)
    assert searching.wait(60)
    assert compile_ > _grow.GROW_MEASURED_PER_ESTIMATED * runner.spent
    for _ in range(5 * _grow.PLAN_RUNS):  # while it searches
        p(*ops)
    assert compile_ <= _grow.GROW_MEASURED_PER_ESTIMATED * runner.spent
    go.set()
    _calls(p, ops, lambda: einslice.running_plan(p) is cheaper)
    assert runner.growths[0].call == _grow.PLAN_RUNS
    assert runner.growths[0].switched


@pytest.mark.parametrize("which", ["grown", "runner-up"])
def test_growth_takes_the_plan_that_times_fastest_not_the_best_estimate(
    early, monkeypatch, which
):
    # the grown plan is estimated 100x faster; the runner-up tree's plan 1.5x
    # slower (within GROW_TIME_WITHIN of the best estimate: timed too)
    args, ops = _ring()
    p = einslice.plan(*args)
    cheaper = _cheaper(p, args)
    second = einslice.plan(*args, optimize=[(1, 2)] * (N - 2) + [(0, 1)])
    second = dataclasses.replace(
        second, cost=dataclasses.replace(second.cost, time=cheaper.cost.time * 1.5)
    )
    assert len({p.path, cheaper.path, second.path}) == 3
    monkeypatch.setattr(_grow, "grown_plans", lambda *a: (cheaper, second))
    # measured: held 1.0, grown 2.0 (the model was wrong), runner-up 0.5 or 3.0
    medians = (1.0, 2.0, 0.5) if which == "runner-up" else (1.0, 0.9, 3.0)
    timings = dict(zip((p, cheaper, second), medians, strict=True))
    monkeypatch.setattr(_grow, "timed_call", _timings(timings))
    monkeypatch.setattr(_grow, "compile_seconds", lambda plan: 0.0)
    runner = _run._top_level_run(p)
    _calls(p, ops, lambda: bool(runner.growths))
    assert runner.growths[0].timed == medians
    assert einslice.running_plan(p) is (second if which == "runner-up" else cheaper)


def test_a_plan_estimated_faster_but_timed_slower_is_not_taken(early, monkeypatch):
    args, ops = _ring()
    p = einslice.plan(*args)
    cheaper = _cheaper(p, args)
    monkeypatch.setattr(_grow, "grown_plans", lambda *a: (cheaper, None))
    monkeypatch.setattr(_grow, "timed_call", _timings({p: 1.0, cheaper: 1.5}))
    monkeypatch.setattr(_grow, "compile_seconds", lambda plan: 0.0)
    monkeypatch.setattr(_grow, "GROW_PATIENT_TRIALS", 0)  # any budget counts
    runner = _run._top_level_run(p)
    _calls(p, ops, lambda: runner.steady, most=8 * _grow.PLAN_RUNS)
    assert einslice.running_plan(p) is p
    assert len(runner.growths) == _grow.GROW_FRUITLESS  # each found nothing faster
    assert not any(g.switched for g in runner.growths)
    # a plan is timed once: the second search found it again, untimed
    assert [len(g.timed) for g in runner.growths] == [2, 0]


def test_a_tree_found_again_by_another_search_is_not_compiled_or_timed_again(
    early, monkeypatch
):
    # plans of one tree from different requests (another budget's search)
    # are unequal (their derivative's source holds the request) but run the
    # same program: neither the held tree nor one timed before is timed again
    args, ops = _ring()
    p = einslice.plan(*args)
    cheaper = _cheaper(p, args)
    again = dataclasses.replace(cheaper, derivative=p.derivative)
    held_again = einslice.plan(*args, optimize=list(p.path))
    assert again != cheaper and held_again != p
    assert _grow.program_key(again) == _grow.program_key(cheaper)
    assert _grow.program_key(held_again) == _grow.program_key(p)
    found = iter([(cheaper, None), (again, held_again), (held_again, again)])
    monkeypatch.setattr(_grow, "grown_plans", lambda *a: next(found))
    monkeypatch.setattr(_grow, "timed_call", _timings({p: 1.0, cheaper: 1.5}))
    monkeypatch.setattr(_grow, "compile_seconds", lambda plan: 0.0)
    monkeypatch.setattr(_grow, "GROW_PATIENT_TRIALS", 0)  # any budget counts
    monkeypatch.setattr(_grow, "GROW_FRUITLESS", 3)
    runner = _run._top_level_run(p)
    _calls(p, ops, lambda: runner.steady, most=12 * _grow.PLAN_RUNS)
    assert einslice.running_plan(p) is p
    # the first growth timed (and compiled) the held plan and the new one;
    # the next two found only those programs again: nothing compiled, no trial
    assert [len(g.timed) for g in runner.growths] == [2, 0, 0]
    assert [len(g.compiled) for g in runner.growths] == [2, 0, 0]


def test_a_candidate_timed_far_slower_is_dropped_from_its_trial(monkeypatch):
    # the trial's decision logic alone: plans are labels, programs return them
    seconds = {"held": 1.0, "slow": 3.0, "fast": 0.5}
    ran = []

    def timed(program, plan, config, args):
        ran.append(plan)
        return plan, seconds[plan]

    monkeypatch.setattr(_grow, "timed_call", timed)
    plans = ("held", "slow", "fast")
    trial = _grow.Trial(plans, plans, None, None, 0.0)  # type: ignore[arg-type]
    while not trial.complete:
        trial.call(())
        assert len(ran) < 100
    assert trial.dropped == {1}
    # "slow" ran once to warm up and GROW_DROP_AFTER times timed, no more
    assert ran.count("slow") == 1 + _grow.GROW_DROP_AFTER
    assert len(trial.times[1]) == _grow.GROW_DROP_AFTER
    assert min(len(trial.times[0]), len(trial.times[2])) >= _grow.GROW_TIMED_CALLS
    assert trial.choice() == 2  # the fastest kept, timed 2x faster than held
    seconds["fast"] = 0.99  # (a hair faster: the held plan stays)
    trial = _grow.Trial(plans, plans, None, None, 0.0)  # type: ignore[arg-type]
    while not trial.complete:
        trial.call(())
    assert trial.dropped == {1} and trial.choice() == 0


def test_a_candidate_within_the_drop_margin_is_timed_to_the_end(monkeypatch):
    monkeypatch.setattr(_grow, "timed_call", lambda p, plan, c, a: (plan, plan))
    plans = (1.0, 1.4)  # (its own seconds: 1.4x the held's, under GROW_DROP_SLOWER)
    assert 1.4 < _grow.GROW_DROP_SLOWER
    trial = _grow.Trial(plans, plans, None, None, 0.0)  # type: ignore[arg-type]
    while not trial.complete:
        trial.call(())
    assert trial.dropped == set() and len(trial.times[1]) >= _grow.GROW_TIMED_CALLS
    assert trial.choice() == 0


def test_a_gain_within_the_noise_is_not_taken_and_growth_stops(early, monkeypatch):
    # each growth finds a new plan that times 3% faster: below GROW_MIN_GAIN
    args, ops = _ring()
    p = einslice.plan(*args)
    paths = iter([[(0, 1)] * (N - 1), [(1, 2)] * (N - 2) + [(0, 1)]] * 4)
    found = []

    def grown(request, budget, calls):
        found.append(einslice.plan(*args, optimize=next(paths)))
        return found[-1], None

    def timed(program, plan, config, args):
        out = jax.block_until_ready(program(plan, config, *args))
        return out, 1.0 if plan == p else 0.97

    monkeypatch.setattr(_grow, "grown_plans", grown)
    monkeypatch.setattr(_grow, "timed_call", timed)
    monkeypatch.setattr(_grow, "compile_seconds", lambda plan: 0.0)
    monkeypatch.setattr(_grow, "GROW_PATIENT_TRIALS", 0)  # any budget counts
    runner = _run._top_level_run(p)
    _calls(p, ops, lambda: runner.steady, most=8 * _grow.PLAN_RUNS)
    assert 0.97 > 1 - _grow.GROW_MIN_GAIN
    assert einslice.running_plan(p) is p
    assert [g.timed for g in runner.growths] == [(1.0, 0.97)] * _grow.GROW_FRUITLESS


def test_growth_runs_the_real_search_and_ends_steady(early, monkeypatch):
    args, ops = _ring(1)
    p = einslice.plan(*args)
    budgets = []
    search_tree = _planner.search_tree

    def recording(*a, **k):
        budgets.append(k.get("budget"))
        return search_tree(*a, **k)

    monkeypatch.setattr(_planner, "search_tree", recording)
    monkeypatch.setattr(_grow, "SEARCH_APART", False)  # (here, so that it is seen)
    monkeypatch.setattr(_grow, "GROW_PATIENT_TRIALS", 0)  # any budget counts
    runner = _run._top_level_run(p)
    _calls(p, ops, lambda: runner.steady, most=8 * _grow.PLAN_RUNS)
    # a tiny ring: the grown searches find its tree again, twice: growth ends
    assert len(runner.growths) == _grow.GROW_FRUITLESS
    assert not any(g.switched for g in runner.growths)
    assert [b for b in budgets if b is not None] == [g.budget for g in runner.growths]
    assert runner.growths[1].budget > runner.growths[0].budget  # doubling
    assert runner.top_calls == runner.growths[-1].call


def test_nothing_grows_inside_jit_or_grad(early, monkeypatch):
    args, ops = _ring()
    p = einslice.plan(*args)
    asked = []
    monkeypatch.setattr(_grow, "grown_plans", lambda *a: asked.append(a) or (p, None))
    expected = _reference(ops)
    jitted = jax.jit(p)
    gradient = jax.jit(jax.grad(lambda a, *rest: p(a, *rest)))
    for _ in range(3 * _grow.PLAN_RUNS):
        np.testing.assert_allclose(float(jitted(*ops)), expected, rtol=1e-12)
        gradient(*ops)
    assert asked == [] and einslice.running_plan(p) is p
    assert _run._top_level_run(p).top_calls == 0


def test_the_off_switch_keeps_the_plan(early, monkeypatch):
    monkeypatch.setenv("EINSLICE_GROW", "0")
    args, ops = _ring()
    p = einslice.plan(*args)
    asked = []
    monkeypatch.setattr(_grow, "grown_plans", lambda *a: asked.append(a) or (p, None))
    runner = _run._top_level_run(p)
    assert runner.steady  # nothing left to grow
    for _ in range(3 * _grow.PLAN_RUNS):
        p(*ops)
    assert asked == [] and einslice.running_plan(p) is p and runner.growths == []


@pytest.mark.parametrize("how", ["path", "greedy", "search"])
def test_a_tree_the_caller_chose_never_grows(early, monkeypatch, how):
    args, ops = _ring()
    auto = einslice.plan(*args)
    optimize = {
        "path": list(auto.path),  # equal to the "auto" plan, still the caller's
        "greedy": "greedy",
        "search": einslice.TreeSearch(seed=3),
    }[how]
    p = einslice.plan(*args, optimize=optimize)
    _run._top_level_run.cache_clear()  # (an equal plan shares a runner)
    asked = []
    monkeypatch.setattr(_grow, "grown_plans", lambda *a: asked.append(a) or (p, None))
    runner = _run._top_level_run(p)
    assert runner.steady
    for _ in range(3 * _grow.PLAN_RUNS):
        p(*ops)
    assert asked == [] and einslice.running_plan(p) is p


def test_a_grown_search_budget_is_part_of_the_tree_cache_key():
    from einslice._plan import _search

    terms = [(i, (i + 1) % N) for i in range(N)]
    first = _search.search_tree(terms, (), [3] * N, 8, 2**20, trials=2)
    grown = _search.search_tree(terms, (), [3] * N, 8, 2**20, trials=2, budget=1.0)
    assert first.path and grown.path  # both searched, separately cached
    with pytest.raises(einslice.EinsliceError, match="budget"):
        einslice.TreeSearch(budget=0.0)


def test_growth_goes_on_past_searches_too_small_to_count(early):
    # two growths that found nothing, at budgets of a few trials: not the end
    args, ops = _ring(2)
    p = einslice.plan(*args)
    runner = _run._top_level_run(p)
    _calls(p, ops, lambda: len(runner.growths) >= 2)
    trial = _grow.trial_cost(p)
    assert all(g.budget < _grow.GROW_PATIENT_TRIALS * trial for g in runner.growths)
    assert not any(g.found < g.before for g in runner.growths)
    assert not runner.steady and runner.grow_at is not None


def test_calls_from_four_threads_during_a_switch_stay_exact(early, monkeypatch):
    # the growth is due at the PLAN_RUNS-th call of any thread; its trial's
    # calls and the switch to the timed-faster plan come while all four call
    args, ops = _ring()
    p = einslice.plan(*args)
    cheaper = _cheaper(p, args)
    monkeypatch.setattr(_grow, "grown_plans", lambda *a: (cheaper, None))
    timed_by = set()

    def timed(program, plan, config, args):
        timed_by.add(threading.get_ident())
        time.sleep(0.002)  # (so that the threads' calls overlap)
        out = jax.block_until_ready(program(plan, config, *args))
        return out, 1.0 if plan == p else 0.01

    monkeypatch.setattr(_grow, "timed_call", timed)
    monkeypatch.setattr(_grow, "compile_seconds", lambda plan: 0.0)
    runner = _run._top_level_run(p)
    expected = _reference(ops)
    start, errors, results = threading.Barrier(4), [], []
    after = 20  # calls per thread once the switch is seen

    def caller():
        try:
            start.wait()
            seen, deadline = 0, time.monotonic() + 120
            while seen < after and time.monotonic() < deadline:
                results.append(float(p(*ops)))
                seen += einslice.running_plan(p) is cheaper
        except BaseException as error:  # (reported below)
            errors.append(error)

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert einslice.running_plan(p) is cheaper
    assert [g.switched for g in runner.growths][:2] in ([True], [True, False])
    assert len(results) >= 4 * after + 2 * (1 + _grow.GROW_TIMED_CALLS)
    np.testing.assert_allclose(results, expected, rtol=1e-12)
    assert len(timed_by) > 1  # the trial's calls came from several threads


def test_with_the_background_off_the_call_that_finds_growth_due_runs_it(
    early, monkeypatch
):
    monkeypatch.setenv("EINSLICE_BACKGROUND", "0")
    args, ops = _ring()
    p = einslice.plan(*args)
    cheaper = _cheaper(p, args)
    monkeypatch.setattr(_grow, "grown_plans", lambda *a: (cheaper, None))
    monkeypatch.setattr(_grow, "timed_call", _timings({p: 1.0, cheaper: 0.01}))
    monkeypatch.setattr(_grow, "compile_seconds", lambda plan: 0.0)
    runner = _run._top_level_run(p)
    for _ in range(_grow.PLAN_RUNS):
        p(*ops)
    trial = runner.stage.trial  # searched and compiled by that call, no settle
    assert trial is not None and trial.plans == (p, cheaper)
    assert not runner.busy.locked()
    expected = _reference(ops)
    while runner.stage.trial is not None:
        np.testing.assert_allclose(float(p(*ops)), expected, rtol=1e-12)
    assert einslice.running_plan(p) is cheaper
