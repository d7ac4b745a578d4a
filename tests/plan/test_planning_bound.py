"""Planning's bound (issue 36): a default search stops once planning has taken
its best tree's estimated run time plus a few seconds; an explicit TreeSearch
keeps its own settings. Time is a fake clock here, never measured."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cotengra.utils import randreg_equation

import einslice
from einslice._plan import _planner, _search
from einslice._plan._search import planning_bound, search_tree
from einslice.pgm import FactorGraph, _infer
from einslice.pgm._network import build_network


class FakeClock:
    """A clock that moves only when told (``per_trial`` seconds per trial)."""

    def __init__(self, per_trial: float) -> None:
        self.now = 1000.0
        self.per_trial = per_trial
        self.trials = 0

    def __call__(self) -> float:
        return self.now


def _network(n: int, seed: int):
    inputs, output, _, size_dict = randreg_equation(n, 3, d_min=2, d_max=4, seed=seed)
    labels = {x: i for i, x in enumerate(dict.fromkeys(x for t in inputs for x in t))}
    terms = [tuple(labels[x] for x in t) for t in inputs]
    return terms, tuple(labels[x] for x in output), [size_dict[x] for x in labels]


@pytest.fixture
def clock(tmp_path, monkeypatch):
    """A fake clock for the search; each trial takes ``clock.per_trial`` on it."""
    monkeypatch.setenv("EINSLICE_CACHE_DIR", str(tmp_path))
    _search._cached.cache_clear()
    _planner.make_plan.cache_clear()
    fake = FakeClock(per_trial=10.0)
    monkeypatch.setattr(_search, "_clock", fake)
    optimizer = _search._optimizer

    def timed(*args, **kwargs):
        made = optimizer(*args, **kwargs)
        search = made.search

        def trial(*a, **k):
            fake.now += fake.per_trial
            fake.trials += 1
            return search(*a, **k)

        made.search = trial
        return made

    monkeypatch.setattr(_search, "_optimizer", timed)
    # search, whatever the quick tree (these networks' would end it at once)
    monkeypatch.setattr(_search, "cheap", lambda seconds, n: False)
    monkeypatch.setattr(_search, "search_pays", lambda *args: True)
    monkeypatch.setattr(_search, "needs_reference", lambda *args: False)
    yield fake
    _search._cached.cache_clear()


def test_the_bound_is_the_trees_measured_run_time_plus_a_few_seconds():
    allowance = _search.PLAN_ALLOWANCE_SECONDS
    assert planning_bound(0.0) == allowance
    assert planning_bound(2.0) == 2.0 * _search.SUM_MEASURED_PER_ESTIMATED + allowance
    log = 2.0 * _search.MEASURED_PER_ESTIMATED + allowance
    assert planning_bound(2.0, "log") == log
    assert planning_bound(math.inf) == math.inf


def test_a_bounded_search_stops_once_planning_passes_the_bound(
    clock, tmp_path, monkeypatch
):
    # 30 tensors, 2 minimum trials here, each 10 s on the fake clock, for a
    # tree estimated in milliseconds: the bound (~3 s) ends the search after
    # the minimum trials (the search's floor), and the search, cut short, is
    # not stored on disk. (A budget keeps rule 2 from ending it first.)
    monkeypatch.setattr(_search, "MIN_TENSOR_TRIALS", 60)
    terms, output, sizes = _network(30, seed=1)
    settings = {"patience": 8, "budget": 1e9}
    found = search_tree(terms, output, sizes, 4, 2**16, **settings, since=clock())
    assert clock.trials == 2 and found.trials == 2
    assert planning_bound(found.time) < clock.per_trial
    assert not list((tmp_path / "trees").glob("*.json"))


def test_an_explicit_search_keeps_its_own_settings(clock, tmp_path):
    # the same search unbounded (an explicit TreeSearch): its minimum trials
    # at least, whatever the clock says, and stored on disk
    terms, output, sizes = _network(30, seed=1)
    found = search_tree(terms, output, sizes, 4, 2**16)
    least = min(math.ceil(_search.MIN_TENSOR_TRIALS / 30), _search.default_trials(30))
    assert clock.trials == found.trials >= least > 1
    assert list((tmp_path / "trees").glob("*.json"))


def test_a_search_within_the_bound_runs_its_trials(clock):
    # Trials of a millisecond stay within the bound (a few seconds): it does
    # not end them (here the trial budget does).
    terms, output, sizes = _network(30, seed=1)
    clock.per_trial = 1e-3
    found = search_tree(terms, output, sizes, 4, 2**16, trials=3, since=clock())
    assert found.trials == 3


@pytest.mark.slow
def test_the_wait_for_an_anneal_is_the_trials_it_costs(clock, monkeypatch):
    # 100 tensors: 3 minimum trials, but an anneal costs ANNEAL_AFTER_TRIALS
    # (5) trials, so it is considered only once that many have run (DBN_16:
    # four anneals, 40 s, after one trial, where the second trial found a
    # tree 10^4x faster).
    terms, output, sizes = _network(100, seed=2)
    clock.per_trial = 1e-3
    at = []

    def annealed(*args, **kwargs):
        at.append(clock.trials)

    monkeypatch.setattr(_search, "_annealed", annealed)
    assert math.ceil(_search.MIN_TENSOR_TRIALS / 100) < _search.ANNEAL_AFTER_TRIALS
    settings = {"patience": 8, "budget": 1e9}  # (no rule but the trials' stops)
    found = search_tree(terms, output, sizes, 4, 2**16, trials=8, **settings)
    assert at == [_search.ANNEAL_AFTER_TRIALS] and found.trials == 8
    _search._cached.cache_clear()
    at.clear()
    clock.trials = 0
    # fewer trials than that: considered after the last one
    search_tree(terms, output, sizes, 4, 2**16, trials=2, **settings)
    assert at == [2]


def test_the_planner_bounds_auto_and_not_an_explicit_search(monkeypatch, tmp_path):
    monkeypatch.setenv("EINSLICE_CACHE_DIR", str(tmp_path))
    _planner.make_plan.cache_clear()
    terms, output, sizes = _network(30, seed=3)
    args = []
    for term in terms:
        args += [tuple(sizes[i] for i in term), list(term)]
    args.append(list(output))
    seen = []

    def spy(*a, **kw):
        seen.append(kw["since"])
        return search_tree(*a, **kw)

    monkeypatch.setattr(_planner, "search_tree", spy)
    einslice.plan(*args, memory_limit=2**16)
    einslice.plan(*args, memory_limit=2**16, optimize=einslice.TreeSearch())
    assert seen[0] is not None and seen[1] is None


def _grid(side: int = 5) -> FactorGraph:
    rng = np.random.default_rng(0)
    edges = [(r * side + c, r * side + c + 1) for r in range(side) for c in range(4)]
    edges += [(r * side + c, (r + 1) * side + c) for r in range(4) for c in range(side)]
    tables = [np.exp(rng.normal(0, 1, (2, 2))) for _ in edges]
    return FactorGraph.from_factors(edges, tables)


@pytest.mark.parametrize("optimize", ["auto", "explicit"])
def test_pgm_bounds_each_variants_search_under_auto_only(optimize, monkeypatch):
    # Each merged variant's search is bounded from its own start (the
    # variants weigh compile time too; Grids_15 MAR's best plan came from the
    # last, cheapest search); an explicit TreeSearch is not bounded.
    fake = FakeClock(per_trial=100.0)
    monkeypatch.setattr(_search, "_clock", fake)
    searched = []

    def search(network, semiring, limit, itemsize, search, profile, since=None):
        searched.append(since)
        fake.now += fake.per_trial
        path = tuple((0, 1) for _ in network.tables[1:])
        return _search.Found(path, (), 1e3, 1e-3, 1, 2**10)

    monkeypatch.setattr(_infer, "_search", search)
    network = build_network(_grid())
    chosen = "auto" if optimize == "auto" else einslice.TreeSearch()
    profile = _infer.host_profile()
    _infer._resolve(network, chosen, "log", 2**30, np.dtype("float64"), False, profile)
    assert len(searched) > 1
    if optimize == "auto":
        assert searched == sorted(searched) and None not in searched
        assert len(set(searched)) == len(searched)  # each from its own start
    else:
        assert set(searched) == {None}
