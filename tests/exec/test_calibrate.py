"""Calibration's sizing on fake timers, and its profile's rate per precision."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import einslice
from einslice._exec import _calibrate
from einslice._exec._calibrate import TARGET_SECONDS, grow, largest_side


class FakeTimer:
    """Seconds of one call at each size, from a formula; records the sizes."""

    def __init__(self, seconds_at):
        self.seconds_at = seconds_at
        self.sizes: list[int] = []

    def __call__(self, size: int) -> float:
        self.sizes.append(size)
        return self.seconds_at(size)


def test_a_small_cpu_matmul_grows_to_the_first_side_lasting_ten_ms():
    # 300 GFLOP/s: 1024^3 takes 7 ms, 2048^3 57 ms.
    timer = FakeTimer(lambda n: 2 * n**3 / 3e11)
    side, seconds = grow(timer, 256, largest_side(2**34), exponent=3)
    assert side == 2048 and seconds >= TARGET_SECONDS
    assert timer.sizes == [256, 2048]  # jumps as far as the time says
    assert all(timer.seconds_at(n) < TARGET_SECONDS for n in timer.sizes[:-1])


def test_an_h200_matmul_grows_until_memory_caps_it():
    # 350 TFLOP/s and 5 us of launch: a 1024^3 product takes 11 us, and the
    # first side lasting 10 ms is 16384; 1 GB of memory caps the side at 8192.
    timer = FakeTimer(lambda n: 2 * n**3 / 3.5e14 + 5e-6)
    assert grow(timer, 256, largest_side(2**40), exponent=3)[0] == 16384
    capped = FakeTimer(timer.seconds_at)
    side, seconds = grow(capped, 256, largest_side(2**30), exponent=3)
    assert side == 8192 and seconds < TARGET_SECONDS  # the cap wins
    assert max(capped.sizes) == 8192


def test_a_timer_reading_zero_still_stops_at_the_cap():
    timer = FakeTimer(lambda n: 0.0)
    assert grow(timer, 1, 10**6) == (10**6, 0.0)
    assert len(timer.sizes) <= 5  # 64 times per step when nothing is measured


@settings(max_examples=60, deadline=None)
@given(
    rate=st.floats(1e3, 1e12),
    overhead=st.floats(0, 1e-3),
    start=st.integers(1, 4096),
    largest=st.integers(1, 2**26),
    exponent=st.sampled_from([1.0, 3.0]),
)
def test_growth_stops_at_the_first_long_enough_size_or_the_cap(
    rate, overhead, start, largest, exponent
):
    timer = FakeTimer(lambda n: n**exponent / rate + overhead)
    size, seconds = grow(timer, start, largest, exponent=exponent)
    assert size <= max(largest, 1) and seconds == timer.seconds_at(size)
    assert seconds >= TARGET_SECONDS or size == max(min(start, largest), largest)
    # every earlier size was too short, and sizes only grow
    assert all(timer.seconds_at(n) < TARGET_SECONDS for n in timer.sizes[:-1])
    assert timer.sizes == sorted(set(timer.sizes))
    assert len(timer.sizes) <= 2 + math.log2(max(largest, 1))


def test_largest_side_keeps_three_matrices_within_the_budget():
    for budget in (2**20, 2**28, 10**9, 2**33):
        side = largest_side(budget)
        assert 3 * 4 * side**2 <= budget < 3 * 4 * (2 * side) ** 2
    assert largest_side(2**50) == 16384


@pytest.mark.slow
def test_calibrate_measures_a_rate_per_precision_the_backend_accepts():
    profile = einslice.calibrate(save=False, size=64, seconds=1e-3)
    rates = dict(profile.matmul_rates)
    # XLA's CPU backend accepts the three precisions and F32_F32_F32, and
    # rejects the TF32 algorithms: those are skipped, not failed.
    assert {"default", "high", "highest", "F32_F32_F32"} <= set(rates)
    assert "TF32_TF32_F32_X3" not in rates
    assert rates["default"] == profile.matmul_flops > 0
    assert profile.precision == "default"
    assert profile.matmul_rate("float32") == rates["highest"]
    assert profile.dram_bandwidth > 0 and profile.transpose_bandwidth > 0
    assert 0 < profile.loop_seconds < 1e-3 and profile.launch_seconds >= 0


@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_the_memory_budget_is_a_quarter_of_what_is_free(platform, monkeypatch):
    class Device:
        def __init__(self, platform):
            self.platform = platform

        def memory_stats(self):
            return {"bytes_limit": 100 * 2**30, "bytes_in_use": 20 * 2**30}

    monkeypatch.setattr(_calibrate, "_available_ram", lambda: 8 * 2**30)
    budget = _calibrate._memory_budget(Device(platform))
    assert budget == (2 * 2**30 if platform == "cpu" else 20 * 2**30)


def test_the_dram_figure_is_the_best_of_many_calls_at_the_grown_size(monkeypatch):
    # 20 GB/s: a call's best of 3 while growing, then the best of DRAM_RUNS
    # at the size reached (on a loaded machine, the best of 3 read 2x low)
    timed = []

    def best(fn, shape, runs=3):
        timed.append((shape[0], runs))
        return 8 * shape[0] / 20e9 * (1.0 if runs == _calibrate.DRAM_RUNS else 2.0)

    monkeypatch.setattr(_calibrate, "_in_place_seconds", best)
    rate = _calibrate._dram_bandwidth(2**24, 2**33, TARGET_SECONDS)
    assert rate == pytest.approx(20e9)
    *growing, (grown, runs) = timed
    assert runs == _calibrate.DRAM_RUNS and grown == growing[-1][0]
    assert 8 * grown / 20e9 * 2 >= TARGET_SECONDS  # (as timed while growing)
    assert all(r == 3 for _, r in growing) and growing[0][0] == 2**22
