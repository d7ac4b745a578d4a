"""Marginal MAP against brute force, and its errors."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from einslice import EinsliceError, MemoryLimitError
from einslice.pgm import (
    FactorGraph,
    _mmap,
    log_partition,
    map_assignment,
    marginal_map,
    parse_query,
)
from einslice.pgm._clamp import table_entries


def brute_mmap(model: FactorGraph, query, evidence=None):
    """max over the query's states of ln Σ over the rest, by enumeration."""
    evidence = dict(evidence or {})
    fixed = {**evidence}
    free = [v for v in range(model.num_variables) if v not in fixed]
    rest = [v for v in free if v not in query]
    values = {}
    for qs in itertools.product(*[range(model.cardinalities[v]) for v in query]):
        scores = []
        for rs in itertools.product(*[range(model.cardinalities[v]) for v in rest]):
            x = [0] * model.num_variables
            for v, s in [
                *fixed.items(),
                *zip(query, qs, strict=True),
                *zip(rest, rs, strict=True),
            ]:
                x[v] = s
            scores.append(model.log_score(x))
        top = max(scores)
        values[qs] = (
            top + math.log(sum(math.exp(s - top) for s in scores))
            if top > -math.inf
            else -math.inf
        )
    return values


@st.composite
def cases(draw):
    n = draw(st.integers(1, 6))
    cards = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    scopes = draw(
        st.lists(
            st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True),
            min_size=1,
            max_size=6,
        )
    )
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    tables = [
        rng.choice([0.0, 0.2, 0.7, 1.0, 3.0], size=[cards[v] for v in s])
        for s in scopes
    ]
    model = FactorGraph.from_factors(scopes, tables, cards)
    observed = draw(st.lists(st.integers(0, n - 1), max_size=1, unique=True))
    evidence = {v: draw(st.integers(0, cards[v] - 1)) for v in observed}
    free = [v for v in range(n) if v not in evidence]
    query = draw(st.lists(st.sampled_from(free), unique=True) if free else st.just([]))
    return model, query, evidence


@settings(max_examples=25)
@given(cases())
def test_random_models_equal_brute_force(case):
    model, query, evidence = case
    values = brute_mmap(model, query, evidence)
    best = max(values.values())
    if best == -math.inf:
        with pytest.raises(EinsliceError, match=re.escape("Z = 0")):
            marginal_map(model, query, evidence, dtype="float64")
        return
    got = marginal_map(model, query, evidence, dtype="float64")
    assert got.log_value == pytest.approx(best, rel=1e-9, abs=1e-9)
    assert set(got.assignment) == set(query)
    state = tuple(got.assignment[v] for v in query)
    assert values[state] == pytest.approx(best, rel=1e-9, abs=1e-9)


def grid(seed: int = 0, side: int = 4) -> FactorGraph:
    rng = np.random.default_rng(seed)
    edges = [
        (r * side + c, r * side + c + 1) for r in range(side) for c in range(side - 1)
    ]
    edges += [
        (r * side + c, (r + 1) * side + c) for r in range(side - 1) for c in range(side)
    ]
    tables = [np.exp(rng.normal(0, 1, (2, 2))) for _ in edges]
    return FactorGraph.from_factors(edges, tables)


def test_a_grid_equals_brute_force_and_its_clamped_log_z():
    model = grid()
    query = [0, 5, 6, 10, 15]  # summed variables link them: one component
    values = brute_mmap(model, query)
    got = marginal_map(model, query, dtype="float64")
    assert got.log_value == pytest.approx(max(values.values()), rel=1e-10)
    clamped = log_partition(model, got.assignment, dtype="float64")
    assert clamped == pytest.approx(got.log_value, rel=1e-10)
    # float32: the same state, its value to float32's precision
    single = marginal_map(model, query)
    assert single.log_value == pytest.approx(got.log_value, rel=1e-5)


def test_no_query_is_log_z_and_every_variable_is_map():
    model = grid(1, 3)
    assert marginal_map(model, []).log_value == pytest.approx(
        log_partition(model, dtype="float64"), rel=1e-6
    )
    everything = marginal_map(model, range(9), dtype="float64")
    map_ = map_assignment(model, dtype="float64")
    assert everything.log_value == pytest.approx(map_.log_value, rel=1e-10)


def test_names_and_evidence():
    p = {("A", "B"): np.array([[0.3, 0.0], [0.25, 0.25]]), ("B", "C"): np.ones((2, 2))}
    model = FactorGraph.from_cliques(p)
    got = marginal_map(model, ["A"])
    assert got.assignment == {"A": 1}
    assert got.log_value == pytest.approx(math.log(0.5 * 2), rel=1e-6)
    given_b = marginal_map(model, ["A"], {"B": 0})
    assert given_b.assignment == {"A": 0}


def test_bad_queries_are_refused():
    model = grid()
    with pytest.raises(EinsliceError, match="not variables of the model"):
        marginal_map(model, [99])
    with pytest.raises(EinsliceError, match="more than once"):
        marginal_map(model, [1, 1])
    with pytest.raises(EinsliceError, match="also observed"):
        marginal_map(model, [1], {1: 0})


def border_query(side: int = 5) -> list[int]:
    """A grid's border: summing the interior leaves one table over its ring."""
    return [
        v
        for v in range(side * side)
        if v // side in (0, side - 1) or v % side in (0, side - 1)
    ]


def test_a_boundary_table_over_the_limit_is_clamped_to_fit():
    model = grid(0, 5)
    # the border queried: summing the 3x3 interior leaves a table over the 12
    # border variables next to it, 2^12 float64 entries (32.8 kB)
    query = border_query()
    whole = marginal_map(model, query, memory_limit="64MB", dtype="float64")
    assert len(whole.assignment) == 16
    assert (whole.clamped, whole.subproblems) == ((), 1)
    # 10 kB holds 1250 entries: two of the 12 clamped, 4 sub-problems of 2^10
    got = marginal_map(model, query, memory_limit="10kB", dtype="float64")
    assert len(got.clamped) == 2 and got.subproblems == 4
    assert set(got.clamped) <= set(query)
    assert got.log_value == pytest.approx(whole.log_value, rel=1e-12)
    assert got.assignment == whole.assignment
    clamped_z = log_partition(model, got.assignment, dtype="float64")
    assert clamped_z == pytest.approx(got.log_value, rel=1e-10)


def test_clamping_beyond_reach_states_the_limit_that_needs_less(monkeypatch):
    model = grid(0, 5)
    query = border_query()
    monkeypatch.setattr(_mmap, "MAX_SUBPROBLEMS", 2)
    # 10 kB needs 2 clamped (4 sub-problems); 2 allow one: 2^11 entries
    with pytest.raises(MemoryLimitError, match="over 12 query variables") as e:
        marginal_map(model, query, memory_limit="10kB")
    assert "clamping 2 query variables (4 sub-problems" in str(e.value)
    assert e.value.smallest_limit == 8 * 2**11
    got = marginal_map(model, query, memory_limit=e.value.smallest_limit)
    assert got.subproblems == 2


@st.composite
def tight_cases(draw):
    """A random model, a query, and a limit below its tables: clamping needed.

    Variable 0 is summed and shares a factor with 6 query variables, so one
    boundary table has 64-729 entries; the limit is at least 1 kB, above what
    the core's MAP of such a small model needs (264-480 bytes).
    """
    n = 8
    cards = draw(st.lists(st.integers(2, 3), min_size=n, max_size=n))
    query = draw(st.lists(st.integers(1, n - 1), min_size=6, unique=True))
    hub = [0, *draw(st.permutations(query))[:6]]
    more = st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True)
    scopes = [hub, *draw(st.lists(more, max_size=4))]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    tables = [
        rng.choice([0.0, 0.2, 0.7, 1.0, 3.0], size=[cards[v] for v in s])
        for s in scopes
    ]
    model = FactorGraph.from_factors(scopes, tables, cards)
    components, _ = _mmap._components(model, set(query))
    entries = table_entries([b for _, b, _ in components], cards)
    fraction = draw(st.sampled_from([0.3, 0.6, 0.9]))
    limit = max(1024, int(8 * entries * fraction))
    assume(8 * entries > limit)
    return model, query, {}, limit


@pytest.mark.slow
@settings(max_examples=40, derandomize=True, deadline=None)
@given(tight_cases())
def test_clamped_random_models_equal_brute_force(case):
    model, query, evidence, limit = case
    values = brute_mmap(model, query, evidence)
    best = max(values.values())
    if best == -math.inf:
        with pytest.raises(EinsliceError, match=re.escape("Z = 0")):
            marginal_map(model, query, evidence, memory_limit=limit, dtype="float64")
        return
    got = marginal_map(model, query, evidence, memory_limit=limit, dtype="float64")
    assert got.clamped and got.subproblems > 1
    assert got.log_value == pytest.approx(best, rel=1e-9, abs=1e-9)
    state = tuple(got.assignment[v] for v in query)
    assert values[state] == pytest.approx(best, rel=1e-9, abs=1e-9)


def test_a_max_stage_out_of_reach_is_refused_unplanned(monkeypatch):
    model = grid(0, 4)
    monkeypatch.setattr(_mmap, "REACH_BITS", 3)
    with pytest.raises(EinsliceError, match="out of reach") as e:
        marginal_map(model, range(16))
    # a 4x4 grid has treewidth 4: the minor-min-width bound finds at least 2
    assert re.search(r"treewidth at least [2-4] ", str(e.value))
    # any other optimize= is the user's choice of search: no refusal
    got = marginal_map(model, range(16), optimize="greedy", dtype="float64")
    assert got.log_value == pytest.approx(
        map_assignment(model, dtype="float64").log_value, rel=1e-10
    )


def test_a_sum_out_of_reach_is_refused_unplanned(monkeypatch):
    model = grid(0, 5)
    query = border_query()  # the 3x3 interior summed onto 12 border variables
    monkeypatch.setattr(_mmap, "REACH_BITS", 12)
    with pytest.raises(EinsliceError, match="summing out a component of 9 non") as e:
        marginal_map(model, query)
    assert "a table of 4.1e+03 entries" in str(e.value)
    # the greedy order's step: an interior variable, its neighbours and more
    found = re.search(r"a step of 2\^(\d+) entries", str(e.value))
    assert found is not None
    step = int(found[1])
    assert step > 12
    monkeypatch.setattr(_mmap, "REACH_BITS", step)
    assert len(marginal_map(model, query).assignment) == 16


def test_query_files_parse_and_name_bad_lines():
    assert parse_query("3 2 5 9\n") == [2, 5, 9]
    with pytest.raises(EinsliceError, match="line 1: the query declares 3"):
        parse_query("3 2 5\n", "q.query")
    with pytest.raises(EinsliceError, match="listed twice"):
        parse_query("2 4 4")
    with pytest.raises(EinsliceError, match="empty"):
        parse_query("")
