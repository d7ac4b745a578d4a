"""Path candidates and layouts the planner builds (pure planning, no arrays)."""

from __future__ import annotations

import einslice
from einslice._plan._order import two_group_paths

SEED = "ij,ik,il,jk,jl,kl->ij"


def test_two_group_paths_split_the_seed_formula_like_the_seed():
    # ij,ik,il,jk,jl,kl: ij holds output indices only and is left for last;
    # the most balanced splits give two n^3 groups (i..kl and j..kl).
    terms = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    paths = two_group_paths(terms, (0, 1), [8, 8, 8, 8])
    assert len(paths) == 2
    for path in paths:
        assert len(path) == 5 and path[-1] == (0, 1)  # ij multiplied in last


def test_two_group_paths_need_three_operands_with_summed_indices():
    assert two_group_paths([(0, 1), (1, 2)], (0, 2), [4, 4, 4]) == []


def test_seed_plan_contracts_into_the_output_at_n512():
    # The big multiply writes the small ij block (K = chunk * n), like the
    # seed's per-k step, and ij is multiplied in once after the loop.
    plan = einslice.plan(SEED, *[(512, 512)] * 6, memory_limit="64MB")
    big = max(plan.steps, key=lambda s: len(s.contracted))
    assert plan.equation.term_text(big.result) == "ij", str(plan)
    assert plan.hoisted == 1
