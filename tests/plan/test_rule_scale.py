"""The search's rules weigh a device's estimates by how far they read low."""

import dataclasses

import einslice
from einslice._exec import _grow
from einslice._plan import _search
from einslice._plan._profile import CPU_DEFAULT, TPU_DEFAULT

RING = [(i, (i + 1) % 16) for i in range(16)]  # a ring of 16 matrices


def test_the_cpu_profile_keeps_its_rules_and_the_tpu_weighs_more():
    assert _search.rule_scale(CPU_DEFAULT) == 1.0
    ratio = TPU_DEFAULT.measured_per_estimated / CPU_DEFAULT.measured_per_estimated
    assert _search.rule_scale(TPU_DEFAULT) == ratio > 1
    zero = dataclasses.replace(CPU_DEFAULT, measured_per_estimated=0.0)
    assert _search.rule_scale(zero) > 0  # (a stored profile may say 0)


def test_a_tree_cheap_by_its_estimate_is_searched_where_the_device_runs_it_far_slower():
    # the same network and estimates: only the profile's measured ratio differs
    slow = dataclasses.replace(CPU_DEFAULT, measured_per_estimated=3e8)
    args = (RING, (), [4] * 16, 4, 2**20)
    cheap = _search.search_tree(*args, profile=CPU_DEFAULT, runs=10)
    searched = _search.search_tree(*args, profile=slow, runs=10)
    assert cheap.trials == 0 and searched.trials > 0


def test_growth_comes_sooner_and_paces_by_the_device_ratio():
    shapes = [(4, 4)] * 16
    text = ",".join(f"{chr(97 + i)}{chr(97 + (i + 1) % 16)}" for i in range(16)) + "->"
    cpu = einslice.plan(text, *shapes, profile=CPU_DEFAULT)
    slow = dataclasses.replace(CPU_DEFAULT, measured_per_estimated=3e5)
    scaled = dataclasses.replace(cpu, profile=slow)
    assert _grow.scale(cpu) == 1.0 and _grow.scale(scaled) == 1e5
    first, sooner = _grow.first_growth_call(cpu), _grow.first_growth_call(scaled)
    assert sooner is not None and (first is None or sooner < first)
    assert _grow.trial_cost(scaled) == _grow.trial_cost(cpu) / 1e5
    # (a call of 10 ms: far above the CPU's estimate, as expected on the other)
    assert _grow.pace(scaled, 0.01) < _grow.pace(cpu, 0.01)
