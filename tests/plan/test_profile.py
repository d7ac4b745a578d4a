"""The device profile and the split cost model: pure Python, no JAX."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

import einslice
from einslice._exec import _choose
from einslice._plan import _cost
from einslice._plan._cost import Body, estimate_time, evaluate, peak_bytes
from einslice._plan._equation import build_equation, parse_subscripts
from einslice._plan._order import to_steps
from einslice._plan._planner import (
    make_plan,
    prepare_terms,
    rank_plans,
    with_other_executors,
)
from einslice._plan._profile import (
    CPU_DEFAULT,
    GPU_DEFAULT,
    TPU_DEFAULT,
    Profile,
    built_in,
    figures_problem,
)
from einslice._plan._request import PlanRequest
from einslice._plan._types import Placement

SEED = "ij,ik,il,jk,jl,kl->ij"


def _equation(subscripts: str, n: int):
    spec = parse_subscripts(subscripts, subscripts.count(",") + 1)
    terms = subscripts.split("->")[0].split(",")
    return build_equation(spec, tuple((n,) * len(t) for t in terms))


def test_cpu_default_reproduces_the_constants_the_model_was_tuned_with():
    # The figures _cost.py used before profiles existed, in units of one FLOP.
    units = _cost._units(CPU_DEFAULT)
    assert (units.byte_dram, units.byte_transpose, units.byte_cache) == (10, 30, 2.5)
    assert (units.byte_shared_cache, units.fresh_page, units.chunk) == (5, 40, 2e5)
    assert (units.thin_result, units.thin_operand, units.log_entry) == (336, 44, 250)
    assert units.launch == 0
    assert (CPU_DEFAULT.cache_bytes, CPU_DEFAULT.shared_cache_bytes) == (2**22, 2**23)
    assert CPU_DEFAULT.last_level_cache_bytes == CPU_DEFAULT.fresh_pages_from == 2**25
    assert (CPU_DEFAULT.small_gemm_side, CPU_DEFAULT.small_gemm_output) == (32, 2**16)
    assert CPU_DEFAULT.output_slice_penalty == 1.3


def test_profile_json_round_trip_and_rejection():
    for profile in (CPU_DEFAULT, GPU_DEFAULT):
        assert Profile.from_json(profile.to_json()) == profile
    assert GPU_DEFAULT.fresh_page_bandwidth == math.inf
    with pytest.raises(ValueError, match="differ"):
        Profile.from_json('{"device_kind": "cpu"}')
    bad = CPU_DEFAULT.to_json().replace("300000000000.0", '"fast"')
    with pytest.raises(ValueError, match="matmul_flops"):
        Profile.from_json(bad)
    with pytest.raises(ValueError, match="JSON object"):
        Profile.from_json("[1, 2]")
    assert built_in("cuda") is GPU_DEFAULT and built_in("cpu") is CPU_DEFAULT


def test_peak_bytes_is_device_free_and_time_is_not():
    eq = _equation(SEED, 64)
    prepared = prepare_terms(eq)
    steps = to_steps(prepared, eq.output, ((0, 1), (0, 1), (0, 1), (0, 1), (0, 1)))[0]
    body = Body(eq.terms, prepared, steps, eq.output, "sum")
    chunks = {2: 8}
    peak = peak_bytes(body, eq.sizes, chunks, 4)
    for profile in (CPU_DEFAULT, GPU_DEFAULT):
        cost = evaluate(body, eq.sizes, chunks, 4, profile=profile)
        assert cost.peak_bytes == peak
        assert (cost.flops, cost.time) == estimate_time(
            body, eq.sizes, chunks, 4, profile
        )
    cpu = estimate_time(body, eq.sizes, chunks, 4, CPU_DEFAULT)[1]
    gpu = estimate_time(body, eq.sizes, chunks, 4, GPU_DEFAULT)[1]
    assert gpu != cpu
    # Launch and loop costs scale with the chunk count, FLOPs do not.
    slow_loop = replace(CPU_DEFAULT, loop_seconds=1e-3)
    assert estimate_time(body, eq.sizes, chunks, 4, slow_loop)[1] > cpu + 7e-3


def test_profile_is_part_of_the_plan_cache_key():
    eq = _equation(SEED, 48)
    args = (eq, 4, "float32", 100_000, "auto", "sum")
    cpu = make_plan(PlanRequest(*args, profile=CPU_DEFAULT))
    # A loop that costs a second per iteration: slice as little as possible.
    slow = make_plan(PlanRequest(*args, profile=replace(CPU_DEFAULT, loop_seconds=1.0)))
    assert cpu.n_chunks > slow.n_chunks, (str(cpu), str(slow))
    assert make_plan(PlanRequest(*args, profile=CPU_DEFAULT)) is cpu


@pytest.mark.parametrize(
    ("subscripts", "n", "limit"),
    [(SEED, 32, 60_000), ("ij,jk,kl->il", 64, 2**20), ("abc,cd,de->abe", 12, 8000)],
)
def test_ranked_candidates_are_distinct_and_all_within_the_limit(subscripts, n, limit):
    eq = _equation(subscripts, n)
    args = (eq, 4, "float32", limit, "auto", "sum")
    plans = rank_plans(PlanRequest(*args, profile=CPU_DEFAULT), 4)
    assert plans[0] == make_plan(PlanRequest(*args, profile=CPU_DEFAULT))
    assert len(plans) >= 2
    assert all(p.peak_bytes <= limit for p in plans), [p.peak_bytes for p in plans]
    assert len({(p.steps, p.chunks) for p in plans}) == len(plans)


def test_placement_is_a_planning_input_copied_into_the_plan():
    # Placement is planned for, not patched in afterwards: the devices that
    # split the chunks change the slicing; a mesh (opaque here) and an
    # in-place split are carried into the Plan the planner returns.
    eq = _equation(SEED, 32)
    args = (eq, 4, "float32", 10**6, "auto", "sum")
    one = make_plan(PlanRequest(*args, profile=CPU_DEFAULT))
    assert not one.chunks and one.placement == Placement()
    four = make_plan(PlanRequest(*args, Placement(devices=4, mesh="m", mesh_axis="x")))
    assert four.placement == Placement(4, "m", "x", None)
    assert four.n_chunks % 4 == 0, str(four)  # each device gets summed chunks
    in_place = make_plan(PlanRequest(*args, Placement(devices=4, mesh="m", sharded=2)))
    assert in_place.placement == Placement(4, "m", None, 2)
    assert in_place.chunks == one.chunks  # whole shards: nothing to spread
    spread = rank_plans(PlanRequest(*args, Placement(devices=4)))
    assert [p.placement for p in spread] == [Placement(devices=4)] * len(spread)


def test_plain_lowerings_only_for_unsliced_sum_plans_on_one_device():
    eq = _equation("ij,jk,kl->il", 16)
    args = (eq, 4, "float32", 2**20, "auto", "sum")
    plain = [p.executor for p in with_other_executors(PlanRequest(*args), 1)]
    assert plain == ["einslice", "xla"]
    spread = PlanRequest(*args, Placement(devices=2))
    assert [p.executor for p in with_other_executors(spread, 1)] == ["einslice"]
    log = PlanRequest(eq, 4, "float32", 2**20, "auto", "log")
    assert [p.executor for p in with_other_executors(log, 1)] == ["einslice"]


class _Named:
    """Stands for a lax.Precision or lax.DotAlgorithmPreset (they have names)."""

    def __init__(self, name: str):
        self.name = name


def test_a_rate_per_precision_with_the_default_for_the_unmeasured():
    rate = GPU_DEFAULT.matmul_rate
    assert rate(None) == rate("default") == rate("fastest") == 3.5e14
    assert rate("highest") == rate("float32") == rate(_Named("HIGHEST")) == 5e13
    assert rate("TF32_TF32_F32_X3") == rate(_Named("TF32_TF32_F32_X3")) == 1.2e14
    assert rate(_Named("DEFAULT")) == 3.5e14  # DotAlgorithmPreset.DEFAULT
    # one precision per operand: the slower one's rate
    assert rate(("default", "highest")) == rate(["highest", "highest"]) == 5e13
    # never measured: the default precision's rate
    assert rate("high") == rate("F16_F16_F32") == rate(object()) == 3.5e14
    assert CPU_DEFAULT.matmul_rate("highest") == CPU_DEFAULT.matmul_flops


def test_for_precision_sets_the_rate_plans_are_costed_with():
    highest = GPU_DEFAULT.for_precision("highest")
    assert (highest.precision, highest.matmul_flops) == ("highest", 5e13)
    assert highest.matmul_rate(None) == 3.5e14  # the default's rate is kept
    assert highest.for_precision(None) == GPU_DEFAULT
    assert GPU_DEFAULT.for_precision("bfloat16") is GPU_DEFAULT
    assert hash(highest) != hash(GPU_DEFAULT)  # another plan-cache key
    assert Profile.from_json(highest.to_json()) == highest
    # A profile without rates costs every precision at its one rate.
    assert CPU_DEFAULT.for_precision("highest").matmul_flops == 3e11


def test_a_stored_profile_from_before_the_rates_still_loads():
    data = json.loads(CPU_DEFAULT.to_json())
    for added in ("peak_preference", "matmul_rates", "precision"):
        del data[added]
    assert Profile.from_json(json.dumps(data)) == CPU_DEFAULT
    for bad in ({"highest": "fast"}, [1e12], {"highest": -1.0}):
        text = json.dumps({**data, "matmul_rates": bad})
        with pytest.raises(ValueError, match="matmul_rates"):
            Profile.from_json(text)


def test_a_plan_for_highest_is_costed_at_the_highest_rate():
    eq = _equation("ij,jk->ik", 4096)
    args = (eq, 4, "float32", 2**30, "auto", "sum")
    default = make_plan(PlanRequest(*args, profile=GPU_DEFAULT))
    highest = make_plan(
        PlanRequest(*args, profile=GPU_DEFAULT.for_precision("highest"))
    )
    x3 = make_plan(
        PlanRequest(*args, profile=GPU_DEFAULT.for_precision("TF32_TF32_F32_X3"))
    )
    flops = 2 * 4096**3
    assert default.cost.time == pytest.approx(flops / 3.5e14, rel=0.2)
    assert highest.cost.time == pytest.approx(flops / 5e13, rel=0.05)
    assert x3.cost.time == pytest.approx(flops / 1.2e14, rel=0.1)
    # On the CPU profile every precision is costed alike (one rate).
    cpu = make_plan(PlanRequest(*args, profile=CPU_DEFAULT))
    cpu_highest = make_plan(
        PlanRequest(*args, profile=CPU_DEFAULT.for_precision("highest"))
    )
    assert cpu_highest.cost == cpu.cost and cpu_highest.path == cpu.path


def test_a_tpu_gets_its_own_profile_and_the_plan_measured_faster_there():
    # Measured on a TPU v5e (benchmarks/results/tpu_v5e.md): the seed formula
    # at n=4096 within 1 GB ran in 6.3 s planned for the CPU (k in chunks of
    # 1: each chunk re-reads the 64 MB accumulator) and in 2.96 s planned
    # for the TPU (i in chunks of 4), where jnp.einsum's greedy took 3.36 s.
    assert built_in("tpu") is TPU_DEFAULT is einslice.profiles.TPU
    assert built_in("cuda") is GPU_DEFAULT and built_in("METAL") is CPU_DEFAULT
    assert TPU_DEFAULT.matmul_rate("highest") < TPU_DEFAULT.matmul_flops
    seed, shapes = "ij,ik,il,jk,jl,kl->ij", [(4096, 4096)] * 6
    on_cpu = einslice.plan(seed, *shapes, memory_limit="1GB", profile=CPU_DEFAULT)
    on_tpu = einslice.plan(seed, *shapes, memory_limit="1GB", profile=TPU_DEFAULT)
    assert on_cpu.sliced == {"k": 1}
    assert on_tpu.sliced == {"i": 4} and on_tpu.peak_bytes <= 10**9
    assert "tpu" in _choose.GPU_PLATFORMS  # tuned as an accelerator


def test_compile_figures_are_the_devices():
    # the TPU compiles far slower than the CPU per program and per step; a
    # value-and-gradient program costs more than its forward one everywhere
    for steps in (1, 10, 200):
        assert TPU_DEFAULT.compile_estimate(steps) > CPU_DEFAULT.compile_estimate(steps)
    for profile in (CPU_DEFAULT, GPU_DEFAULT, TPU_DEFAULT):
        forward = profile.compile_estimate(50)
        assert profile.compile_estimate(50, gradient=True) > forward
        assert profile.compile_estimate(0) == profile.compile_estimate(1)
        assert figures_problem(profile) is None
    assert CPU_DEFAULT.compile_estimate(100) == pytest.approx(3.0)
    assert math.isinf(CPU_DEFAULT.host_transfer_bandwidth)
    assert TPU_DEFAULT.host_transfer_bandwidth < math.inf


def test_a_stored_profile_without_compile_figures_takes_its_platforms():
    data = json.loads(TPU_DEFAULT.to_json())
    for added in ("compile_seconds", "compile_step_seconds", "host_transfer_bandwidth"):
        del data[added]
    assert Profile.from_json(json.dumps(data), defaults=TPU_DEFAULT) == TPU_DEFAULT
    cpu_figures = Profile.from_json(json.dumps(data))  # no defaults: the CPU's
    assert cpu_figures.compile_step_seconds == CPU_DEFAULT.compile_step_seconds
