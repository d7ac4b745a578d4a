"""The large-network tree search (_plan/_search.py) and its use by the planner."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import multiprocessing.process
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import opt_einsum
import pytest
from cotengra.utils import lattice_equation, randreg_equation

import einslice
from einslice._plan import _kahypar, _planner, _search
from einslice._plan._order import label_indices, labelled
from einslice._plan._profile import CPU_DEFAULT
from einslice._plan._search import search_tree

if TYPE_CHECKING:
    from cotengra import ContractionTree

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "uai"


def _network(equation):
    """cotengra's (inputs, output, sizes) as int terms, int output, size list."""
    inputs, output, _, size_dict = equation
    labels = {x: i for i, x in enumerate(dict.fromkeys(x for t in inputs for x in t))}
    terms = [tuple(labels[x] for x in t) for t in inputs]
    sizes = [size_dict[x] for x in labels]
    return terms, tuple(labels[x] for x in output), sizes


def _interleaved(terms, output, sizes):
    args = []
    for term in terms:
        args += [tuple(sizes[i] for i in term), list(term)]
    return [*args, list(output)]


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("EINSLICE_CACHE_DIR", str(tmp_path))
    _search._cached.cache_clear()
    _planner.make_plan.cache_clear()


@pytest.mark.parametrize(
    ("name", "equation", "limit"),
    [
        ("randreg-30", randreg_equation(30, 3, d_min=2, d_max=4, seed=3), 2**13),
        ("lattice-6x6", lattice_equation([6, 6], d_min=2, d_max=3, seed=1), 2**13),
        ("randreg-100", randreg_equation(100, 3, d_min=2, d_max=2, seed=1), 2**16),
    ],
)
def test_plans_through_the_search_fit_the_limit(name, equation, limit):
    terms, output, sizes = _network(equation)
    plan = einslice.plan(*_interleaved(terms, output, sizes), memory_limit=limit)
    assert plan.cost.peak_bytes <= limit
    assert plan.chunks, f"{name}: the limit is meant to force slicing"
    assert _search._cached.cache_info().misses >= 1  # "auto" went through the search


@pytest.mark.slow
def test_a_300_tensor_network_gets_a_tree_and_a_plan_within_the_limit(monkeypatch):
    terms, output, sizes = _network(lattice_equation([15, 20], d_min=2, seed=0))
    limit = 2**19
    monkeypatch.setattr(_search, "default_trials", lambda n: 1)  # a quick search
    found = search_tree(terms, output, sizes, 4, limit)
    assert found.trials == 1 and len(found.path) == len(terms) - 1
    assert found.sliced, "a 15x20 lattice must be sliced to fit 512 kB"
    plan = einslice.plan(*_interleaved(terms, output, sizes), memory_limit=limit)
    assert plan.cost.peak_bytes <= limit
    assert plan.chunks


def _refuse_worker_processes(monkeypatch):
    # cotengra's own "kahypar" orders its top level in a process pool (fork, or
    # loky's spawn): unsafe next to JAX's threads, so no method of einslice's may.
    def refuse(process):
        raise AssertionError(f"the search started a worker process: {process!r}")

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)


@pytest.mark.parametrize("method", _search.METHODS)
def test_the_search_starts_no_worker_processes(method, monkeypatch):
    _refuse_worker_processes(monkeypatch)
    monkeypatch.setattr(_search, "METHODS", (method,))
    terms, output, sizes = _network(randreg_equation(60, 3, d_min=2, seed=4))
    found = search_tree(terms, output, sizes, 4, 2**14, trials=2)
    assert len(found.path) == len(terms) - 1


def test_kahypar_trees_are_complete_and_built_in_this_process(monkeypatch):
    _refuse_worker_processes(monkeypatch)
    inputs, output, _, size_dict = randreg_equation(60, 3, d_min=2, seed=4)
    tree = _kahypar.trial_kahypar(inputs, output, size_dict, parts=8)
    assert tree.is_complete()


# (seeds whose networks need slicing at 2**13 bytes: seed 0's greedy tree,
# sliced to fit by the quick trees, runs unsliced within it)
@pytest.mark.parametrize("seed", [5, 7])
def test_results_equal_a_float64_numpy_contraction(seed):
    equation = randreg_equation(30, 3, d_min=2, d_max=3, seed=seed)
    terms, output, sizes = _network(equation)
    output = terms[0][:1]  # keep one index: a vector, not just a scalar
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(0.5, 1.0, [sizes[i] for i in t]) for t in terms]
    args = []
    for array, term in zip(arrays, terms, strict=True):
        args += [array, list(term)]
    # opt_einsum's BackendType Literal omits "numpy", which it accepts
    expected = opt_einsum.contract(*args, list(output), backend="numpy")  # pyright: ignore[reportCallIssue, reportArgumentType]
    got = einslice.einsum(*args, list(output), memory_limit=2**13)
    assert einslice.plan(
        *_interleaved(terms, output, sizes), memory_limit=2**13
    ).chunks, "the limit is meant to force slicing"
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10)


def _cotengra_tree(terms, output, sizes, limit, seed, trials):
    """cotengra's HyperOptimizer as the issue configures it, built here.

    kahypar (the same trees as cotengra's "kahypar", top level ordered in this
    process) and greedy, optuna seeded, default subtree reconfiguration,
    slicing with reconfiguration to the limit in float32 entries, ``trials``
    trials, Python's random seeded: the search's reference at its budget.
    """
    import random

    import cotengra

    _kahypar.register()
    optimizer = cotengra.HyperOptimizer(
        methods=[_kahypar.METHOD, "greedy"],
        max_repeats=trials,
        parallel=False,  # pyright: ignore[reportArgumentType]
        optlib="optuna",
        optlib_opts={"sampler_opts": {"seed": seed}},
        reconf_opts={},  # pyright: ignore[reportArgumentType]
        slicing_reconf_opts={"target_size": limit // 4},  # pyright: ignore[reportArgumentType]
        progbar=False,
    )
    state = random.getstate()
    random.seed(seed)
    try:  # pyright reads search()'s result as its float default
        # labelled as einslice's search labels them (one character per index)
        tree = optimizer.search(*labelled(terms, output, sizes))
        return cast("ContractionTree", tree)
    finally:
        random.setstate(state)


# Networks whose trees are not cheap (see _search.cheap), so that the search
# runs trials and the reference; bonds large enough to need slicing.
NEVER_WORSE_CASES = [
    ("randreg-30", randreg_equation(30, 3, d_min=10, d_max=16, seed=1), 2**24, 0),
    # (seed 4: seed 2's network has a random-greedy tree cheap enough for rule 0)
    ("randreg-40", randreg_equation(40, 3, d_min=6, d_max=10, seed=4), 2**23, 1),
    # the example: bonds 5-8 at 256 MB (einslice's own tree, 6
    # trials: estimated 289 ms; cotengra's, one trial: 166 ms)
    ("randreg-60", randreg_equation(60, 3, d_min=5, d_max=8, seed=2), 256 * 10**6, 0),
]


def _mps_inner(sites, phys, bond):
    """<a|b> of two open matrix product states: 2 * sites tensors, a chain."""
    sizes = []

    def index(size):
        sizes.append(size)
        return len(sizes) - 1

    physical = [index(phys) for _ in range(sites)]
    terms = []
    for _ in range(2):  # a, then b: their own bonds, shared physical indices
        bonds = [index(bond) for _ in range(sites - 1)]
        for i in range(sites):
            left = (bonds[i - 1],) if i > 0 else ()
            right = (bonds[i],) if i < sites - 1 else ()
            terms.append((physical[i], *left, *right))
    # in cotengra's equation form, as _network reads it
    return terms, (), None, dict(enumerate(sizes))


# slow: a 300-tensor network (two 150-site MPS, bond 128: a tree estimated at
# 0.17 s, so the search and its reference run; under a second here, but a
# 300-tensor search can take minutes on a loaded machine)
NEVER_WORSE_SLOW_CASES = [("mps-300", _mps_inner(150, 16, 128), 256 * 10**6, 0)]


def _searched_as_before(monkeypatch):
    """The search runs wherever its tree is not cheap (rule 0 alone): these
    networks' quick trees cost less than the minimum trials, which a first
    search no longer spends (`_search.search_pays`), and the guarantees
    tested are those of a search that runs."""
    monkeypatch.setattr(
        _search,
        "search_pays",
        lambda spend, n, semiring="sum": not _search.cheap(spend, n),
    )


def _never_worse(equation, limit, seed, monkeypatch):
    _searched_as_before(monkeypatch)
    terms, output, sizes = _network(equation)
    found = search_tree(terms, output, sizes, 4, limit, seed=seed)
    assert found.trials > 0, "meant to be searched, not the quick greedy tree"
    ran = found.by == "cotengra" or math.isfinite(found.reference_time)
    assert ran, "meant to run the reference search"
    budget = found.reference_trials  # the search's budget rule, stated in _search
    assert budget >= 1
    # the other side's best tree is kept for growth to time (`_run`), and
    # survives the disk's JSON
    assert found.runner_up is not None and found.runner_up.runner_up is None
    assert {found.by, found.runner_up.by} == {"einslice", "cotengra"}
    stored = json.loads(json.dumps(_search._to_json(found)))
    assert _search._from_json(stored) == found
    tree = _cotengra_tree(terms, output, sizes, limit, seed, budget)
    path = tuple(tuple(int(p) for p in step) for step in tree.get_path())
    index = label_indices(len(sizes))
    chunks = dict.fromkeys((index[i] for i in tree.sliced_inds), 1)
    cost = _search.estimate(terms, output, sizes, 4, "sum", path, chunks)
    theirs = _search.Found(
        path, tuple(chunks), cost.flops, cost.time, 1, cost.peak_bytes
    )
    assert not _search.better(theirs, found, limit, CPU_DEFAULT), (found, theirs)
    if theirs.peak_bytes <= limit:
        assert found.peak_bytes <= limit
        assert found.time <= theirs.time * 1.2, "within the peak nudge of ranking"
    return found


# With cotengrust installed, cotengra's greedy trials draw their noise from
# cotengrust's own generator, which the search's seed does not reach: a seed
# then no longer pins the tree (docs/search.md). CI's Python 3.13 step runs
# the suite with cotengrust ([fast]); the tests of that guarantee (and the reruns of
# cotengra at the same seed below) skip there.
needs_seeded_greedy = pytest.mark.skipif(
    importlib.util.find_spec("cotengrust") is not None,
    reason="cotengrust's greedy noise is not seeded by the search",
)


@needs_seeded_greedy
@pytest.mark.parametrize(("name", "equation", "limit", "seed"), NEVER_WORSE_CASES)
def test_the_search_is_never_worse_than_cotengras_at_the_same_budget(
    name, equation, limit, seed, monkeypatch
):
    # The trees are scored as the search scores them: einslice's estimated time
    # under the limit, penalised per doubling of a peak over it.
    _never_worse(equation, limit, seed, monkeypatch)


@needs_seeded_greedy
@pytest.mark.parametrize(("name", "equation", "limit", "seed"), NEVER_WORSE_SLOW_CASES)
def test_large_searches_are_never_worse_than_cotengras_at_the_same_budget(
    name, equation, limit, seed, monkeypatch
):
    _never_worse(equation, limit, seed, monkeypatch)


@pytest.mark.slow
def test_a_tree_from_cotengras_reference_gives_float64_results(monkeypatch):
    _searched_as_before(monkeypatch)
    equation = randreg_equation(30, 3, d_min=10, d_max=16, seed=1)
    terms, output, sizes = _network(equation)
    output = terms[0][:1]  # a vector, not just a scalar
    limit = 2**24  # float64 (conftest turns x64 on)
    found = search_tree(terms, output, sizes, 8, limit)
    assert found.by == "cotengra" and found.sliced  # the reference's, sliced
    rng = np.random.default_rng(3)
    arrays = [rng.uniform(0.5, 1.0, [sizes[i] for i in t]) for t in terms]
    args = []
    for array, term in zip(arrays, terms, strict=True):
        args += [array, list(term)]
    # opt_einsum's BackendType Literal omits "numpy", which it accepts
    expected = opt_einsum.contract(*args, list(output), backend="numpy")  # pyright: ignore[reportCallIssue, reportArgumentType]
    got = einslice.einsum(*args, list(output), memory_limit=limit)
    assert got.dtype == np.float64
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10)


@needs_seeded_greedy
def test_the_same_seed_gives_the_same_tree_and_another_may_not(tmp_path, monkeypatch):
    # bond 3, not 2: the bond-2 network's greedy tree is cheap enough to end the
    # search before any seeded trial (see the quick-tree test below)
    terms, output, sizes = _network(randreg_equation(40, 3, d_min=3, seed=7))
    first = search_tree(terms, output, sizes, 4, 2**14, seed=1, trials=3)
    for run in range(2):  # no cache in memory nor on disk: searched again
        _search._cached.cache_clear()
        monkeypatch.setenv("EINSLICE_CACHE_DIR", str(tmp_path / f"again{run}"))
        again = search_tree(terms, output, sizes, 4, 2**14, seed=1, trials=3)
        assert again == first
    others = {
        search_tree(terms, output, sizes, 4, 2**14, seed=s, trials=3).path
        for s in range(2, 6)
    }
    assert others - {first.path}, "the seed should matter"


@pytest.mark.slow
def test_a_cheap_greedy_tree_ends_the_search_before_any_trial():
    terms, output, sizes = _network(randreg_equation(40, 3, d_min=2, seed=7))
    found = search_tree(terms, output, sizes, 4, 2**14, seed=1, trials=3)
    assert found.trials == 0 and found.sliced == ()
    trial_cost = len(terms) * _search.TRIAL_COST_PER_TENSOR
    assert found.time < _search.CHEAP_TREE_SHARE * trial_cost
    expected = _search.estimate(terms, output, sizes, 4, "sum", found.path, {})
    assert (found.flops, found.time) == (expected.flops, expected.time)
    # a limit the unsliced greedy tree misses: the hyper-search runs
    searched = search_tree(terms, output, sizes, 4, 2**8, seed=1, trials=3)
    assert searched.trials >= 1 and searched.sliced


@needs_seeded_greedy
def test_found_trees_are_cached_on_disk_and_corrupt_files_ignored(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(_search, "_quick_trees", lambda *args: None)  # search
    terms, output, sizes = _network(lattice_equation([4, 5], d_min=2, seed=0))
    found = search_tree(terms, output, sizes, 4, 2**12)
    files = list((tmp_path / "trees").glob("*.json"))
    assert len(files) == 1
    assert json.loads(files[0].read_text())["path"] == [list(p) for p in found.path]

    _search._cached.cache_clear()

    def no_search(*args, **kwargs):
        raise AssertionError("should have been read from disk")

    monkeypatch.setattr(_search, "_search", no_search)
    assert search_tree(terms, output, sizes, 4, 2**12) == found

    files[0].write_text("{not json")
    _search._cached.cache_clear()
    monkeypatch.undo()
    monkeypatch.setenv("EINSLICE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_search, "_quick_trees", lambda *args: None)
    with pytest.warns(UserWarning, match="corrupt search-tree cache file"):
        again = search_tree(terms, output, sizes, 4, 2**12)
    assert again == found
    assert json.loads(files[0].read_text())["path"] == [list(p) for p in found.path]


def test_a_cheap_network_stops_after_the_minimum_of_trials():
    # Searching longer than the tree takes to run cannot pay: a ring of 20
    # 512x512 matrices (~17 ms estimated: above the quick-tree share of a
    # trial, below 13 trials) takes its quick tree on a first search (the
    # minimum trials would cost more than one run of it), and with a budget
    # a little above them (a growth search's) the trials that budget affords
    # and one more (rule 2 stops once they cost more), not its 32 trials.
    terms = [(i, (i + 1) % 20) for i in range(20)]
    least = _search.least_search_cost(20)
    first = search_tree(terms, (), [512] * 20, 4, 2**30, trials=32, patience=32)
    assert first.trials == 0 and first.time < least
    found = search_tree(
        terms, (), [512] * 20, 4, 2**30, trials=32, patience=32, budget=least * 1.05
    )
    assert found.trials == math.ceil(_search.MIN_TENSOR_TRIALS / 20) + 1


@needs_seeded_greedy  # (the own tree, and so its slices, must be the seed's)
def test_the_reference_budget_counts_a_sliced_trees_slicing_rounds():
    # a 6x6 periodic lattice of bond 4 at 256 MB (einsum-benchmark's
    # lattice-6x6-periodic-d4): its own tree is sliced 16 ways, so one of
    # cotengra's reference trials reconfigures it in 5 rounds; counted per
    # tensor only, 3 trials ran (2.5-3.5 s of a 3.4-5.6 s planning)
    terms, output, sizes = _network(lattice_equation([6, 6], d_min=4, cyclic=True))
    found = search_tree(terms, output, sizes, 4, 256 * 10**6, runs=_search.PLAN_RUNS)
    own = found if found.by == "einslice" else found.runner_up
    assert own is not None and own.sliced and found.trials >= 1
    slices = math.prod(sizes[i] for i in own.sliced)
    trial = _search.reference_trial_seconds(len(terms), slices)
    assert own.time < 2 * trial  # (the premise: one trial affordable, not two)
    assert own.time >= 2 * len(terms) * _search.REFERENCE_TRIAL_COST_PER_TENSOR
    assert found.reference_trials == 1


def test_a_30_tensor_search_runs_no_trial_when_its_quick_tree_is_cheap():
    # (~0.2 s on a quiet 2-core CPU: the work is counted, not timed, as the
    # suite never times; a tree whose run is microseconds pays no trial)
    terms, output, sizes = _network(randreg_equation(30, 3, d_min=2, d_max=4, seed=2))
    found = search_tree(terms, output, sizes, 4, 2**14)
    assert found.trials == 0 and found.reference_trials == 0


def test_optimize_still_takes_a_cotengra_optimizer():
    import cotengra

    terms, output, sizes = _network(lattice_equation([4, 4], d_min=2, seed=0))
    # cotengra is unannotated: pyright takes parallel's type (str) from its default
    # methods: cotengra's own "kahypar" orders its top level in a process pool
    # even with parallel=False (see _plan/_kahypar.py): a fork next to JAX's
    # threads, which JAX warns about (an error here) when the sampler picks it.
    optimizer = cotengra.HyperOptimizer(
        methods=["greedy"],
        max_repeats=2,
        parallel=False,  # pyright: ignore[reportArgumentType]
    )
    plan = einslice.plan(*_interleaved(terms, output, sizes), optimize=optimizer)
    assert len(plan.path) == len(terms) - 1
    assert _search._cached.cache_info().misses == 0  # the search did not run


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"no UAI instances at {SHARED}")
@pytest.mark.parametrize(
    "name", sorted(p.stem for p in SHARED.glob("*.uai")) if SHARED.is_dir() else []
)
def test_uai_instances_plan_within_256mb(name, monkeypatch):
    from einslice.pgm import read_uai

    limit = 256 * 10**6
    from einslice.pgm import _infer

    _refuse_worker_processes(monkeypatch)  # Alchemy_11 forked once, in CI
    # Test time: two trials, one merged variant (the limit is the point here).
    monkeypatch.setattr(_search, "default_trials", lambda n: 2)
    monkeypatch.setattr(_infer, "CLUSTER_OPTIONS", (16,))
    prepared = _infer._prepare(read_uai(SHARED / f"{name}.uai"), None, "log", limit,
                        "auto", np.dtype(np.float32))  # fmt: skip
    if prepared.trivial:  # the network vanished (Z = 0 or all observed)
        assert prepared.network.offset == -math.inf or not prepared.network.tables
        return
    if prepared.walk is not None:  # walked on the host, unplanned (small ones)
        assert prepared.walk.peak_bytes <= limit
        return
    assert prepared.plan is not None
    assert prepared.plan.cost.peak_bytes <= limit  # log Z (PR); the gradient
    # pass of MAR may need more: the plan's gradient_limit says how much.


def test_tree_search_settings_reach_the_search_and_auto_is_its_default(monkeypatch):
    terms, output, sizes = _network(randreg_equation(30, 3, d_min=2, d_max=3, seed=1))
    args = _interleaved(terms, output, sizes)
    calls = []

    def spy(*a, **kw):
        calls.append(kw)
        return search_tree(*a, **kw)

    monkeypatch.setattr(_planner, "search_tree", spy)
    chosen = einslice.TreeSearch(seed=3, trials=2, patience=1, seconds=5.0)
    tuned = einslice.plan(*args, memory_limit=2**16, optimize=chosen)
    assert {k: calls[-1][k] for k in ("seed", "trials", "patience")} == {
        "seed": 3,
        "trials": 2,
        "patience": 1,
    }
    assert calls[-1]["search_seconds"] == 5.0
    found = search_tree(terms, output, sizes, 4, 2**16, seed=3, trials=2, patience=1)
    assert tuned.cost.peak_bytes <= 2**16 and len(tuned.path) == len(found.path)
    auto = einslice.plan(*args, memory_limit=2**16)
    default = einslice.plan(*args, memory_limit=2**16, optimize=einslice.TreeSearch())
    assert auto.path == default.path and auto.chunks == default.chunks
    assert calls[-1]["seed"] == 0 and calls[-1]["trials"] is None


def test_tree_search_also_serves_small_networks():
    ring = [x for i in range(6) for x in ((3, 3), [i, (i + 1) % 6])]
    p = einslice.plan(*ring, [], optimize=einslice.TreeSearch(trials=1))
    arrays = [np.full((3, 3), 0.5)] * 6
    got = p(*arrays)
    np.testing.assert_allclose(
        float(got), np.trace(np.linalg.matrix_power(arrays[0], 6))
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"seed": -1}, "seed must be an int >= 0"),
        ({"seed": 1.5}, "seed must be an int >= 0"),
        ({"trials": 0}, "trials must be an int >= 1 or None"),
        ({"patience": True}, "patience must be an int >= 1 or None"),
        ({"seconds": 0}, "seconds must be a positive number"),
        ({"seconds": "10"}, "seconds must be a positive number"),
        ({"runs": 0}, "runs must be an int >= 1 or None"),
    ],
)
def test_tree_search_refuses_bad_settings_by_name(setting, message):
    with pytest.raises(einslice.EinsliceError, match=message):
        einslice.TreeSearch(**setting)


def test_a_cheap_greedy_tree_is_not_written_to_disk(tmp_path):
    # milliseconds to find again; a file per network would fill the cache
    terms = [(i, (i + 1) % 16) for i in range(16)]
    found = search_tree(terms, (), [4] * 16, 4, 2**20)
    assert found.trials == 0
    assert not list(tmp_path.glob("trees/*.json"))


def test_trees_are_scored_for_the_device_profile_and_cached_per_profile(
    tmp_path, monkeypatch
):
    from einslice._plan._profile import CPU_DEFAULT, GPU_DEFAULT

    monkeypatch.setattr(_search, "_quick_trees", lambda *args: None)  # search

    terms, output, sizes = _network(randreg_equation(30, 3, d_min=2, d_max=3, seed=1))
    cpu = search_tree(terms, output, sizes, 4, 2**16, trials=2, profile=CPU_DEFAULT)
    gpu = search_tree(terms, output, sizes, 4, 2**16, trials=2, profile=GPU_DEFAULT)
    assert cpu.time != gpu.time  # each tree's time is its own profile's estimate
    assert len(list((tmp_path / "trees").glob("*.json"))) == 2


def _cheap_for_one_run_only():
    """A network whose quick tree is cheap for one run but not for ten."""
    for seed in range(20):
        terms, output, sizes = _network(lattice_equation([8, 8], d_min=4, seed=seed))
        quick = _search._quick_trees(
            terms, output, sizes, 4, 2**28, "sum", CPU_DEFAULT, None
        )
        n = len(terms)
        if quick and _search.cheap(quick.time, n):
            if not _search.cheap(_search.PLAN_RUNS * quick.time, n):
                return (terms, output, sizes), quick
    raise AssertionError("no 8x8 lattice of bond 4 is cheap for one run only")


def test_a_tree_cheap_for_one_run_only_is_reconfigured_for_many():
    (terms, output, sizes), quick = _cheap_for_one_run_only()
    once = search_tree(terms, output, sizes, 4, 2**28, runs=1)
    assert once == quick  # a one-shot value (pgm's) takes the quick tree as is
    many = search_tree(terms, output, sizes, 4, 2**28, runs=_search.PLAN_RUNS)
    assert many.trials == 0 and many.path != quick.path
    assert many.time < quick.time / 1.5 and many.peak_bytes <= 2**28
    expected = _search.estimate(terms, output, sizes, 4, "sum", many.path, {})
    assert (many.flops, many.time) == (expected.flops, expected.time)
    # einsum and plan expect PLAN_RUNS runs; their plan follows that tree
    p = einslice.plan(*_interleaved(terms, output, sizes), memory_limit=2**28)
    assert [sorted(s) for s in p.path] == [sorted(s) for s in many.path]


def test_runs_that_pay_for_it_reconfigure_the_other_quick_trees_too(tmp_path):
    # the quick tree that ranks first need not reconfigure best (randreg-50
    # of einsum-benchmark, this network: 23.4 ms reconfigured from the
    # random-greedy tree, 9.9 ms from the plain greedy one it beat); judged
    # on the reconfigured tree's runs (23.4 ms, ten of them: three trials),
    # weighted by the share of the quick tree's time they left (0.97)
    terms, output, sizes = _network(randreg_equation(50, 3, d_min=4, d_max=6, seed=1))
    n, args = len(terms), (4, 2**28, "sum", CPU_DEFAULT, None)
    quick = _search._quick_trees(terms, output, sizes, *args)
    assert quick is not None and quick.trials == 0
    alone = _search.reconfigured(quick, terms, output, sizes, *args)
    share = alone.time / quick.time
    assert _search.reconfigures_others(_search.PLAN_RUNS * alone.time, n, share)
    found = search_tree(terms, output, sizes, 4, 2**28, runs=_search.PLAN_RUNS)
    assert found.trials == 0 and found.time < alone.time
    expected = _search.estimate(terms, output, sizes, 4, "sum", found.path, {})
    assert (found.flops, found.time) == (expected.flops, expected.time)
    paths = _search.quick_paths(*_search._hashable(terms, output, sizes))
    assert len(paths) == 2 and quick.path in paths
    for path in paths:  # no single start's reconfiguration beats it
        start = dataclasses.replace(quick, path=path)
        one = _search.reconfigured(start, terms, output, sizes, *args)
        assert found.time <= one.time


@pytest.mark.slow
def test_another_quick_tree_close_in_estimate_but_with_more_flops_is_not_taken(
    monkeypatch,
):
    # lattice-4x4x4 of bond 2: the other quick tree reconfigures to one
    # estimated 2% faster with 2.4x the FLOPs, which ran 1.4x slower
    terms, output, sizes = _network(lattice_equation([4, 4, 4], d_min=2, d_max=2))
    args = (4, 2**28, "sum", CPU_DEFAULT, None)
    quick = _search._quick_trees(terms, output, sizes, *args)
    assert quick is not None
    alone = _search.reconfigured(quick, terms, output, sizes, *args)
    paths = _search.quick_paths(*_search._hashable(terms, output, sizes))
    (other,) = [p for p in paths if p != quick.path]
    start = dataclasses.replace(quick, path=other)
    rival = _search.reconfigured(start, terms, output, sizes, *args)
    assert rival.time < alone.time < rival.time * _search.OTHER_TREE_MARGIN
    assert rival.flops > alone.flops  # (the premise)
    # the best so far is the quick tree's, reconfigured (its FLOPs tree);
    # runs enough to pay for reconfiguring the others
    seen = _recording_reconfigurations(monkeypatch)
    both = _search.reconfigured(alone, terms, output, sizes, *args, paths, runs=10**6)
    assert (other, "combo") in seen  # the rival was found again, and lost:
    assert seen[-1] == (alone.path, "flops")  # FLOPs from the best start
    assert both.path != rival.path and both.flops <= alone.flops


def _recording_reconfigurations(monkeypatch) -> list[tuple[tuple, str]]:
    """(start, objective) of each subtree reconfiguration rule 0 runs, in order."""
    seen = []
    reconfigure = _search.subtree_reconfigured

    def recording(labels, start, minimize, *args):
        seen.append((start, minimize))
        return reconfigure(labels, start, minimize, *args)

    monkeypatch.setattr(_search, "subtree_reconfigured", recording)
    return seen


def test_runs_too_cheap_for_it_reconfigure_the_quick_tree_alone(monkeypatch):
    (terms, output, sizes), quick = _cheap_for_one_run_only()
    assert not _search.reconfigures_others(_search.PLAN_RUNS * quick.time, len(terms))
    seen = _recording_reconfigurations(monkeypatch)
    search_tree(terms, output, sizes, 4, 2**28, runs=_search.PLAN_RUNS)
    assert seen == [(quick.path, "combo"), (quick.path, "flops")]


def test_others_are_judged_by_the_reconfigured_tree_not_the_quick_one(monkeypatch):
    # lattice-4x4x4 of bond 2: ten runs of its quick tree (45 ms estimated)
    # cost more than a trial, ten of its reconfigured tree (3.4 ms) do
    # not: reconfiguring the other quick trees took ~1 s of its 2.4 s of
    # planning and changed nothing
    terms, output, sizes = _network(lattice_equation([4, 4, 4], d_min=2, d_max=2))
    n, args = len(terms), (4, 2**28, "sum", CPU_DEFAULT, None)
    quick = _search._quick_trees(terms, output, sizes, *args)
    assert quick is not None
    assert _search.reconfigures_others(_search.PLAN_RUNS * quick.time, n)
    labels = labelled(terms, output, sizes)
    network = (terms, output, sizes, 4, "sum", CPU_DEFAULT, None)
    _, combo = _search.subtree_reconfigured(labels, quick.path, "combo", *network)
    assert not _search.reconfigures_others(_search.PLAN_RUNS * combo.time, n)
    assert not _search.reconfigures_others(
        _search.PLAN_RUNS * combo.time, n, combo.time / quick.time
    )
    seen = _recording_reconfigurations(monkeypatch)
    found = search_tree(terms, output, sizes, 4, 2**28, runs=_search.PLAN_RUNS)
    assert seen == [(quick.path, "combo"), (quick.path, "flops")]
    alone = _search.reconfigured(quick, terms, output, sizes, *args)
    assert (found.path, found.time) == (alone.path, alone.time)


def test_the_other_quick_tree_that_reconfigures_best_is_taken(monkeypatch):
    # fresh11-randreg-70-d3 (benchmarks/networks.py --fresh 11, this
    # network): the random-greedy quick tree (16.6 ms estimated, 10^9.43
    # FLOPs) reconfigures to nothing better, the plain greedy one it beat
    # (35.8 ms) to 1.72 ms (10^8.22). Ten runs of 16.5 ms were below the
    # two trials both objectives of the other tree were counted as (233
    # ms), so the plan kept a tree whose calls ran ~100 ms against
    # cotengra's 5.4 ms (0.31x the best peer over 100 calls); one
    # objective of the other is one trial (117 ms)
    terms, output, sizes = _network(randreg_equation(70, 3, 3, 3, seed=1000 + 1102))
    n, args = len(terms), (4, 2**28, "sum", CPU_DEFAULT, None)
    quick = _search._quick_trees(terms, output, sizes, *args)
    assert quick is not None and quick.trials == 0
    (greedy, random_greedy) = _search.quick_paths(
        *_search._hashable(terms, output, sizes)
    )
    assert quick.path == random_greedy  # (the premise: it beat plain greedy)
    labels = labelled(terms, output, sizes)
    network = (terms, output, sizes, 4, "sum", CPU_DEFAULT, None)
    _, own = _search.subtree_reconfigured(labels, quick.path, "combo", *network)
    share = own.time / quick.time
    assert share > 0.9  # (it reconfigures to nothing better: a poor start)
    assert _search.reconfigures_others(_search.PLAN_RUNS * own.time, n, share)
    seen = _recording_reconfigurations(monkeypatch)
    found = search_tree(terms, output, sizes, 4, 2**28, runs=_search.PLAN_RUNS)
    # the other's "combo" tree wins, so FLOPs are tried from it, not the quick one
    assert seen == [(quick.path, "combo"), (greedy, "combo"), (greedy, "flops")]
    assert found.trials == 0 and found.time < quick.time / 5
    assert found.flops < quick.flops / 10 and found.peak_bytes <= 2**28
    path, cost = _search.subtree_reconfigured(labels, greedy, "combo", *network)
    assert (found.path, found.time, found.flops) == (path, cost.time, cost.flops)


def test_opt_einsums_quick_tree_where_none_of_cotengras_fits():
    # randreg-60-d5-8 of einsum-benchmark (this network): cotengra's greedy
    # trees are over 256 MB, so the search ran 6 trials for a sliced tree
    # estimated at 166 ms (0.5 s a call); opt_einsum's random-greedy tree
    # fits unsliced at 80 ms estimated, and ends the search
    terms, output, sizes = _network(randreg_equation(60, 3, d_min=5, d_max=8, seed=2))
    args = (4, 2**28, "sum", CPU_DEFAULT, None)
    hashable = _search._hashable(terms, output, sizes)
    for path in _search.quick_paths(*hashable):
        cost = _search.estimate(terms, output, sizes, 4, "sum", path, {})
        assert cost.peak_bytes > 2**28  # (the premise)
    quick = _search._quick_trees(terms, output, sizes, *args)
    assert quick is not None and quick.sliced == () and quick.peak_bytes <= 2**28
    assert quick.path in _search.oe_quick_paths(*hashable)
    assert not _search.search_pays(quick.time, len(terms))
    found = search_tree(terms, output, sizes, 4, 2**28, runs=_search.PLAN_RUNS)
    assert found.trials == 0 and found.sliced == () and found.time <= quick.time


def test_opt_einsums_quick_trees_only_where_none_of_cotengras_fits(monkeypatch):
    # lattice-4x4x4 of bond 2: opt_einsum's tree is estimated faster than
    # cotengra's best (17.7 against 45 ms) with 8.7x its FLOPs; reconfigured,
    # it came to 7.0 ms, cotengra's to 1.7 ms (and randreg-100-d2-4's ran
    # 1.45x slower than cotengra's): where cotengra's fits, it is kept
    terms, output, sizes = _network(lattice_equation([4, 4, 4], d_min=2, d_max=2))
    hashable = _search._hashable(terms, output, sizes)

    def cost(path):
        return _search.estimate(terms, output, sizes, 4, "sum", path, {})

    ours = min(map(cost, _search.quick_paths(*hashable)), key=lambda c: c.time)
    theirs = [cost(p) for p in _search.oe_quick_paths(*hashable)]
    assert ours.peak_bytes <= 2**28
    assert any(c.time < ours.time for c in theirs)  # (the premise)
    asked = []
    oe_quick_paths = _search.oe_quick_paths
    monkeypatch.setattr(
        _search, "oe_quick_paths", lambda *a: asked.append(a) or oe_quick_paths(*a)
    )
    args = (4, 2**28, "sum", CPU_DEFAULT, None)
    quick = _search._quick_trees(terms, output, sizes, *args)
    assert quick is not None and (quick.time, quick.flops) == (ours.time, ours.flops)
    assert asked == []  # (not even found: 25-100 ms saved)


@pytest.mark.slow  # (a fresh interpreter: ~5 s)
def test_opt_einsums_quick_trees_do_not_depend_on_the_hash_seed():
    # opt_einsum breaks ties in set order: with string labels, three
    # processes gave this network (randreg-60-d5-8) three trees
    code = (
        "from cotengra.utils import randreg_equation\n"
        "from einslice._plan import _search\n"
        "inputs, output, _, sd = randreg_equation(60, 3, d_min=5, d_max=8, seed=2)\n"
        "named = dict.fromkeys(x for t in inputs for x in t)\n"
        "labels = {x: i for i, x in enumerate(named)}\n"
        "terms = tuple(tuple(labels[x] for x in t) for t in inputs)\n"
        "print(_search.oe_quick_paths(terms, (), tuple(sd[x] for x in labels)))\n"
    )
    here = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONHASHSEED": "1"},
        capture_output=True,
        text=True,
    )
    there = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONHASHSEED": "2"},
        capture_output=True,
        text=True,
    )
    assert here.returncode == there.returncode == 0, here.stderr + there.stderr
    assert here.stdout == there.stdout


def test_opt_einsums_random_greedy_orders_are_reproducible_and_keep_random():
    terms, output, sizes = _network(randreg_equation(30, 3, d_min=2, d_max=4, seed=0))
    hashable = _search._hashable(terms, output, sizes)
    state = random.getstate()
    first = _search.oe_random_greedy_path(*hashable, 4)
    assert random.getstate() == state
    assert _search.oe_random_greedy_path(*hashable, 4) == first
    assert len(first) == len(terms) - 1 and all(len(step) == 2 for step in first)


def test_a_search_never_returns_a_tree_worse_than_the_quick_one(monkeypatch):
    (terms, output, sizes), quick = _cheap_for_one_run_only()
    worse = _search.Found(quick.path, (), quick.flops, quick.time * 2, 3, 1)
    monkeypatch.setattr(_search, "cheap", lambda seconds, n: False)  # search
    monkeypatch.setattr(_search, "search_pays", lambda *args: True)
    monkeypatch.setattr(_search, "_search", lambda *a, **k: (worse, True))
    found = search_tree(terms, output, sizes, 4, 2**28)
    assert (found.path, found.time, found.trials) == (quick.path, quick.time, 3)


def test_a_quick_tree_that_beats_the_trials_is_reconfigured_as_without_them(
    monkeypatch,
):
    # else a search that ran trials returned a worse tree than one that ran
    # none (a growth search of mera-p-first-last: 14.8 ms against the held
    # plan's reconfigured 9.7 ms, then compiled and timed)
    (terms, output, sizes), quick = _cheap_for_one_run_only()
    many = search_tree(terms, output, sizes, 4, 2**28, runs=_search.PLAN_RUNS)
    assert many.trials == 0 and many.time < quick.time / 1.5  # (reconfigured)
    worse = _search.Found(quick.path, (), quick.flops, quick.time * 2, 3, 1)
    monkeypatch.setattr(_search, "search_pays", lambda *args: True)
    monkeypatch.setattr(_search, "_search", lambda *a, **k: (worse, True))
    _search._cached.cache_clear()
    found = search_tree(terms, output, sizes, 4, 2**28, runs=_search.PLAN_RUNS)
    assert found.trials == 3 and (found.path, found.time) == (many.path, many.time)


@pytest.mark.slow
def test_the_search_works_when_cotengra_hands_labels_to_cotengrust(monkeypatch):
    # cotengra runs its greedy trials through cotengrust when that is
    # installed, and cotengrust takes one-character labels only: int labels
    # made every search fail for its users. A stand-in with its strictness:
    from cotengra.pathfinders import path_greedy

    greedy, calls = path_greedy.ssa_greedy_optimize, []

    def strict(inputs, output, *args, **kwargs):
        calls.append(len(inputs))
        labels = [x for term in (*inputs, output) for x in term]
        if not all(isinstance(x, str) and len(x) == 1 for x in labels):
            raise TypeError("expected a string of length 1")
        return greedy(inputs, output, *args, **kwargs)

    monkeypatch.setattr(path_greedy, "ssa_greedy_optimize", strict)
    terms, output, sizes = _network(randreg_equation(30, 3, 10, 16, seed=1))
    monkeypatch.setattr(_search, "_quick_trees", lambda *args: None)  # search
    found = search_tree(terms, output, sizes, 4, 2**16, seed=0, trials=8)
    assert calls, "no greedy trial ran: the stand-in tested nothing"
    assert found.trials >= 1 and found.sliced
    assert all(0 <= i < len(sizes) for i in found.sliced)


def test_many_tensor_greedy_orders_go_to_cotengrust_and_survive_its_panics(
    monkeypatch,
):
    class PanicException(BaseException):  # pyo3's, as cotengrust raises it
        pass

    used = []

    def python(inputs, *args, **kwargs):
        used.append("python")
        return "python's"

    def rust(inputs, *args, **kwargs):
        used.append("rust")
        raise PanicException("called `Result::unwrap()` on an `Err` value: 0")

    few, many = [("a",)] * 3, [("a",)] * _search.RUST_GREEDY_MIN_TENSORS
    assert _search._fastest(python, lambda: rust, few) == "python's"
    assert used == ["python"]
    assert _search._fastest(python, lambda: rust, many) == "python's"
    assert used == ["python", "rust", "python"]
    # anything else it raises is not swallowed
    with pytest.raises(KeyboardInterrupt):
        _search._fastest(python, lambda: _raise(KeyboardInterrupt()), many)


def _raise(error):
    return lambda *args, **kwargs: (_ for _ in ()).throw(error)


@pytest.mark.slow
def test_an_annealed_tree_is_searched_only_where_the_best_tree_is_dear(monkeypatch):
    # Annealing pays on large dear networks (linkage_15: 10^13.4 -> 10^9.3
    # FLOPs); here it is made cheap, so that a 30-tensor network triggers it.
    terms, output, sizes = _network(randreg_equation(30, 3, d_min=2, d_max=4, seed=3))
    limit = 2**13
    args = (terms, output, sizes, 4, limit, "sum", CPU_DEFAULT, 0)
    never = _search._annealed(*args, math.inf, -math.inf)  # no time left
    cheap = _search._annealed(*args, 0.0, math.inf)  # a tree in hand is cheap
    assert never is None and cheap is None
    monkeypatch.setattr(_search, "ANNEAL_COST_PER_TENSOR", 1e-12)
    annealed = _search._annealed(*args, math.inf, math.inf)
    assert annealed is not None and annealed.by == "einslice"
    assert annealed.peak_bytes <= limit and annealed.trials == 0
    # the search takes it when it ranks better than its trials' tree
    calls = []
    annealing = _search._annealed
    monkeypatch.setattr(
        _search, "_annealed", lambda *a, **k: calls.append(a) or annealing(*a, **k)
    )
    monkeypatch.setattr(_search, "cheap", lambda seconds, n: False)  # search
    monkeypatch.setattr(_search, "search_pays", lambda *args: True)
    found = search_tree(terms, output, sizes, 4, limit, trials=2)
    assert len(calls) == 1 and found.peak_bytes <= limit
    assert not _search.better(annealed, found, limit, CPU_DEFAULT)
    plan = einslice.plan(*_interleaved(terms, output, sizes), memory_limit=limit)
    assert plan.peak_bytes <= limit


def test_greedy_trees_over_the_limit_are_sliced_to_fit_without_a_search():
    # Neither greedy tree of this network fits 8 kB: the faster is sliced by
    # cotengra to fit (no trials), and, estimated far below the minimum
    # trials' cost, it ends a first search.
    equation = randreg_equation(30, 3, d_min=2, d_max=3, seed=5)
    terms, output, sizes = _network(equation)
    output = terms[0][:1]
    limit = 2**13
    quick = _search._quick_trees(
        terms, output, sizes, 8, limit, "sum", CPU_DEFAULT, None, 0
    )
    assert quick is not None and quick.sliced and quick.trials == 0
    assert quick.peak_bytes <= limit
    unsliced = _search.estimate(terms, output, sizes, 8, "sum", quick.path, {})
    assert unsliced.peak_bytes > limit
    found = search_tree(terms, output, sizes, 8, limit)
    assert found == quick


def test_the_search_gets_recursion_room_and_gives_it_back():
    import sys

    from einslice._plan._search import RECURSION_PER_TERM, _recursion_room

    before = sys.getrecursionlimit()
    with _recursion_room(1000):
        # cotengra's recursive tree walks, ~one level per tensor, fit
        assert sys.getrecursionlimit() >= RECURSION_PER_TERM * 1000 + before
    assert sys.getrecursionlimit() == before
    with pytest.raises(KeyError), _recursion_room(10):
        raise KeyError  # put back on an error too
    assert sys.getrecursionlimit() == before
