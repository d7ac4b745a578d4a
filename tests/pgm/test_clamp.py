"""Which query variables marginal MAP clamps, and the width bounds (pure Python)."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from einslice.pgm._clamp import choose_clamped, table_entries
from einslice.pgm._width import elimination_bits, interaction_graph, minor_min_width


@st.composite
def boundaries(draw):
    n = draw(st.integers(1, 7))
    cards = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    scopes = draw(
        st.lists(
            st.lists(st.integers(0, n - 1), min_size=1, max_size=5, unique=True),
            min_size=1,
            max_size=5,
        )
    )
    # (every table keeps one entry at least, all its variables clamped)
    budget = draw(st.integers(len(scopes), table_entries(scopes, cards)))
    return scopes, cards, budget


def fewest_states(scopes, cards, budget) -> int:
    """The least product of clamped states that fits, by enumeration."""
    variables = sorted({v for s in scopes for v in s})
    best = math.inf
    for k in range(len(variables) + 1):
        for subset in itertools.combinations(variables, k):
            if table_entries(scopes, cards, frozenset(subset)) <= budget:
                best = min(best, math.prod(cards[v] for v in subset))
    return int(best)


@settings(max_examples=200, derandomize=True)
@given(boundaries())
def test_the_clamped_variables_fit_and_none_is_idle(case):
    scopes, cards, budget = case
    clamped, entries = choose_clamped(scopes, cards, budget)
    assert entries == table_entries(scopes, cards, frozenset(clamped)) <= budget
    for v in clamped:  # each one is needed: without it the tables do not fit
        assert table_entries(scopes, cards, frozenset(clamped) - {v}) > budget
    # greedy, not optimal: never more than the optimum's states squared here
    states = math.prod(cards[v] for v in clamped)
    least = fewest_states(scopes, cards, budget)
    assert least <= states <= least**2


def test_one_wide_table_clamps_the_fewest_states():
    # 2^27 entries in a 2^26 budget: one binary variable (Grids_26 at 1 GB)
    clamped, entries = choose_clamped([tuple(range(27))], [2] * 27, 2**26)
    assert len(clamped) == 1 and entries == 2**26
    # a 2-state variable before a 3-state one when either is enough
    assert choose_clamped([(0, 1)], [3, 2], 3) == ((1,), 3)


def test_most_states_stops_the_clamping_short():
    clamped, entries = choose_clamped([tuple(range(10))], [2] * 10, 4, most_states=8)
    assert len(clamped) == 3 and entries == 2**7


def test_width_bounds_of_a_grid():
    side = 5
    edges = [(r * side + c, r * side + c + 1) for r in range(side) for c in range(4)]
    edges += [(r * side + c, (r + 1) * side + c) for r in range(4) for c in range(side)]
    graph = interaction_graph(edges)
    lower = minor_min_width(graph)
    upper = elimination_bits(graph, [2] * 25)
    # a 5x5 grid has treewidth 5: the bounds bracket it (the order's clique
    # holds its variable and its neighbours: treewidth + 1 variables at least)
    assert 2 <= lower <= 5 and upper >= 6
