"""Plans for the H200 profile (GPU_DEFAULT), made on the CPU: pure Python.

On an H200 a large temporary costs its traffic at HBM bandwidth (the
allocator reuses device memory) and every scan iteration ~5 us, so where an
unsliced plan fits the limit it is the one to run: jnp.einsum's greedy
program (unsliced) ran the seed formula at n=1024 in 11.4 ms where a sliced
plan took 16.2 ms, and the suite's seed-6 in 0.37 ms against 0.58 ms.
"""

from __future__ import annotations

import pytest

from einslice._plan._cost import Body, estimate_time, ranking
from einslice._plan._equation import build_equation, parse_subscripts
from einslice._plan._memory import parse_memory_limit
from einslice._plan._planner import make_plan, rank_plans
from einslice._plan._profile import CPU_DEFAULT, GPU_DEFAULT
from einslice._plan._request import PlanRequest

SEED = "ij,ik,il,jk,jl,kl->ij"


def _plan(n: int, limit: str, optimize: str = "auto", profile=GPU_DEFAULT):
    spec = parse_subscripts(SEED, 6)
    eq = build_equation(spec, ((n, n),) * 6)
    args = (eq, 4, "float32", parse_memory_limit(limit), optimize, "sum")
    return make_plan(PlanRequest(*args, profile=profile))


def test_the_seed_formula_at_1024_runs_unsliced_where_100gb_allow_it():
    p = _plan(1024, "100GB")
    assert not p.chunks, str(p)
    assert p.peak_bytes > 2**30  # GBs of temporaries: cheap on the GPU
    # The CPU profile, whose fresh pages and caches make them dear, slices.
    assert _plan(1024, "100GB", profile=CPU_DEFAULT).chunks


def test_the_seed_formula_at_4096_slices_within_1gb():
    p = _plan(4096, "1GB")
    assert p.chunks and p.peak_bytes <= 10**9, str(p)


def test_seed_6_at_1gb_runs_the_unsliced_greedy_program():
    # The suite's seed-6 (n=320): jnp.einsum-greedy's unsliced program (296
    # MB compiled) fits 1 GB and ran 1.55x faster than the sliced plan.
    p = _plan(320, "1GB")
    greedy = _plan(320, "1GB", optimize="greedy")
    assert not p.chunks and not greedy.chunks, str(p)
    assert p.cost.time <= greedy.cost.time
    assert p.peak_bytes <= 10**9


@pytest.mark.parametrize("n", [512, 1024, 2048])
def test_every_chunk_costs_a_scan_iteration_and_nothing_nudges_large_peaks(n):
    # (einslice's own tree: "auto" may take jnp.einsum's where they tie)
    p = _plan(n, "100GB", optimize="dp")
    body = Body(p.equation.terms, p.prepared, p.steps, p.equation.output, "sum")
    sizes = p.equation.sizes
    whole = estimate_time(body, sizes, {}, 4, GPU_DEFAULT)[1]
    sliced = estimate_time(body, sizes, {0: n // 16}, 4, GPU_DEFAULT)[1]
    assert sliced - whole >= 16 * GPU_DEFAULT.loop_seconds
    assert ranking(p.cost, GPU_DEFAULT) == p.cost.time  # no peak preference
    assert ranking(p.cost, CPU_DEFAULT) > p.cost.time or p.peak_bytes < 2**25


def test_the_ranked_candidates_put_the_unsliced_plan_first_where_it_fits():
    spec = parse_subscripts(SEED, 6)
    eq = build_equation(spec, ((1024, 1024),) * 6)
    request = PlanRequest(eq, 4, "float32", 10**11, profile=GPU_DEFAULT)
    plans = rank_plans(request)
    assert not plans[0].chunks and plans[0] == _plan(1024, "100GB")


def test_the_matmul_rates_are_the_h200_measurements():
    rates = dict(GPU_DEFAULT.matmul_rates)
    measured = {
        "default": 350,
        "highest": 50,
        "TF32_TF32_F32": 354,
        "TF32_TF32_F32_X3": 120,
        "BF16_BF16_F32_X3": 211,
        "BF16_BF16_F32_X6": 107,
    }
    assert {k: round(rates[k] / 1e12) for k in measured} == measured
    assert GPU_DEFAULT.matmul_flops == rates["default"]
    assert (GPU_DEFAULT.loop_seconds, GPU_DEFAULT.launch_seconds) == (4.3e-6, 4.6e-7)
    assert GPU_DEFAULT.dram_bandwidth == 4.3e12
