"""Path candidates and layouts the planner builds (pure planning, no arrays)."""

from __future__ import annotations

import einslice
from einslice._plan._order import needs_transpose, to_steps, two_group_paths

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


def test_seed_chunks_keep_each_products_operands_in_the_cores_l2():
    # Chunks of 1 at n=512 keep the 1 MB operands of each product in the two
    # cores' L2 (measured 0.99-1.01x scan_einsum; chunks of 2: 0.91-0.97x).
    plan = einslice.plan(SEED, *[(512, 512)] * 6, memory_limit="64MB")
    assert dict(plan.sliced) == {"k": 1}, str(plan)
    # Past the 32 MB last-level cache the peak is nudged down: at n=1024 the
    # default limit takes chunks of 2 (44 MB), not 4 (76 MB).
    assert dict(einslice.plan(SEED, *[(1024, 1024)] * 6).sliced) == {"k": 2}


def test_log_chunks_amortize_the_per_chunk_exponentials():
    # A "log" chunk exponentiates every operand entry and logs its block:
    # chunks of 1 measured 1.94x "sum", of 4-8 1.26-1.30x.
    shapes = [(512, 512)] * 6
    log = einslice.plan(SEED, *shapes, memory_limit="64MB", semiring="log")
    assert dict(log.sliced)["k"] >= 4, str(log)


def test_cost_model_constants_mirror_the_executors():
    # The planner imports no JAX, so it keeps a copy of an executor limit. (Which
    # "log" steps reduce the union is the Semiring's, read by both.)
    from einslice._exec import _scaled
    from einslice._plan import _cost

    assert _cost.LOG_SCALED_MAX_STEPS == _scaled.MAX_STEPS


def test_a_product_scaling_its_larger_side_keeps_that_sides_order():
    # jt-message abcd,ab,bc->cd: abcd * bc, then (a, b) contracted. Written
    # as cdab the product transposed all of abcd (0.4-0.9x jnp.einsum-greedy
    # on a CPU); as abcd, dot_general reads a, b leading where they lie.
    steps, _ = to_steps([(0, 1, 2, 3), (0, 1), (1, 2)], (2, 3), ((0, 2), (0, 1)))
    assert steps[0].result == (0, 1, 2, 3) and not steps[0].contracted
    assert steps[1].contracted == (0, 1)
    assert not needs_transpose(steps[0].result, (), steps[1].contracted)


def test_a_product_its_consumer_cannot_read_in_place_is_laid_out_for_it():
    # abcd * bd, then (a, c) contracted: in abcd's order a and c are not one
    # run, so the product writes the consumer's order (free, then contracted)
    steps, _ = to_steps([(0, 1, 2, 3), (1, 3), (0, 2)], (1, 3), ((0, 1), (0, 1)))
    assert steps[0].result == (1, 3, 0, 2)
    assert not needs_transpose(steps[0].result, (), steps[1].contracted)
