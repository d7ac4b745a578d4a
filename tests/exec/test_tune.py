"""Autotuning, wisdom, calibration: measured choices and what is remembered."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import einslice
from einslice._exec import _background, _calibrate, _choose, _run, _tune
from einslice._plan import _wisdom
from einslice._plan._planner import with_other_executors
from einslice._plan._profile import CPU_DEFAULT
from strategies import (
    assert_close_to_einsum,
    limit_from_fraction,
    random_operands,
    request_of,
    seeds,
    sliceable_equations,
)

CHAIN = "ij,jk,kl->il"


def _chain_operands(n: int = 48):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((n, n)) for _ in range(3)]


@settings(max_examples=6)
@given(sliceable_equations(max_operands=4), seeds)
def test_measured_choice_equals_the_estimated_one(eq, seed):
    ops = random_operands(eq, seed)
    limit = limit_from_fraction(eq.subscripts, eq.shapes, 0.5)
    try:
        untuned = einslice.einsum(
            eq.subscripts, *ops, memory_limit=limit, tune="estimate"
        )
    except einslice.MemoryLimitError as error:
        limit = error.smallest_limit
        untuned = einslice.einsum(
            eq.subscripts, *ops, memory_limit=limit, tune="estimate"
        )
    tuned = einslice.einsum(eq.subscripts, *ops, memory_limit=limit, tune="measure")
    assert tuned.dtype == untuned.dtype == jnp.float64
    assert_close_to_einsum(tuned, eq, ops)
    np.testing.assert_allclose(tuned, untuned, rtol=1e-10, atol=1e-10)


def test_measure_reports_every_candidate_and_remembers_the_fastest():
    ops = _chain_operands()
    p = einslice.plan(CHAIN, *ops, memory_limit="40kB", tune="measure")
    choice = p.choice
    assert choice is not None and choice.how == "measure"
    assert len(choice.labels) >= 2
    timed = [s for s in choice.seconds if s is not None]
    assert choice.seconds[choice.chosen] == min(timed)
    assert "Chosen: candidate" in str(p) and "measured fastest" in str(p)
    again = einslice.plan(CHAIN, *ops, memory_limit="40kB", tune="auto")
    assert again == p and again.choice is not None and again.choice.how == "wisdom"
    assert "remembered measurement" in str(again)


def test_measure_never_picks_a_candidate_whose_compiled_temporaries_exceed_the_limit():
    ops = [jnp.asarray(x) for x in _chain_operands()]
    limit = 40_000
    ranked = einslice.plan(CHAIN, *ops, memory_limit=limit, tune="measure")
    assert ranked.choice is not None
    from einslice._exec._run import Config, _run

    compiled = jax.jit(lambda *xs: _run(ranked, Config(), *xs)).lower(*ops).compile()
    analysis = compiled.memory_analysis()
    assert analysis is not None and analysis.temp_size_in_bytes <= limit
    # A candidate whose compiled temporaries exceed its limit is rejected.
    plans = (
        replace(einslice.plan(CHAIN, *ops, memory_limit=limit), memory_limit=1),
        einslice.plan(CHAIN, *ops, memory_limit=limit),
    )
    chosen = _tune.measure(
        plans,
        ops,
        lambda plan, xs: _run(plan, Config(), *xs),
        "test",
    )
    assert chosen.choice is not None
    assert chosen.choice.chosen == 1 and chosen.choice.seconds[0] is None
    assert "exceed the limit" in chosen.choice.notes[0]


def test_plain_lowering_is_a_candidate_of_unsliced_sum_plans():
    ops = _chain_operands()
    p = einslice.plan(CHAIN, *ops, tune="measure")
    assert p.choice is not None
    assert any("via jnp.einsum" in label for label in p.choice.labels)
    plain = replace(einslice.plan(CHAIN, *ops), executor="xla")
    np.testing.assert_allclose(plain(*ops), np.einsum(CHAIN, *ops), rtol=1e-10)
    assert "jnp.einsum" in str(plain)


def test_jnp_einsums_own_greedy_program_is_a_candidate_when_its_path_differs():
    eq = "abc,ia,jb,kc->ijk"  # tucker: einslice's model and greedy differ
    shapes = [(4, 4, 4), (16, 4), (16, 4), (16, 4)]
    ours = einslice.plan(eq, *shapes, optimize=[(3, 0), (1, 2), (0, 1)])
    greedy = einslice.plan(eq, *shapes, optimize="greedy")
    assert ours.path != greedy.path
    ours_request = request_of(ours, optimize=((3, 0), (1, 2), (0, 1)))
    greedy_request = request_of(greedy, optimize="greedy")
    plans = with_other_executors(ours_request, 1, greedy_request)
    assert [(p.path, p.executor) for p in plans] == [
        (ours.path, "einslice"),
        (ours.path, "xla"),
        (greedy.path, "xla"),
    ]
    assert len(with_other_executors(greedy_request, 1, greedy_request)) == 2  # no twin
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal(s) for s in shapes]
    tuned = einslice.plan(eq, *ops, tune="measure")
    assert tuned.choice is not None
    assert any(
        "via jnp.einsum" in label and str(list(greedy.path)) in label
        for label in tuned.choice.labels
    ), tuned.choice.labels
    # A path the caller chose is not second-guessed.
    chosen = einslice.plan(eq, *ops, optimize=list(ours.path), tune="measure")
    assert chosen.choice is not None
    assert not any(str(list(greedy.path)) in label for label in chosen.choice.labels)


def test_auto_estimates_short_calls_and_tracing_falls_back():
    ops = _chain_operands(8)
    p = einslice.plan(CHAIN, *ops, tune="auto")
    assert p.choice is None  # a few microseconds: not worth measuring
    assert p.cost.time < _choose.AUTO_MEASURE_SECONDS

    @jax.jit
    def traced(a, b, c):
        return einslice.einsum(CHAIN, a, b, c, tune="measure")

    np.testing.assert_allclose(traced(*ops), np.einsum(CHAIN, *ops), rtol=1e-10)
    assert not _wisdom.export()["entries"]


def test_bad_tune_is_an_error():
    with pytest.raises(einslice.EinsliceError, match=r"tune='fast' is not one of"):
        einslice.plan(CHAIN, (2, 2), (2, 2), (2, 2), tune="fast")


def test_wisdom_round_trip(tmp_path):
    ops = _chain_operands()
    einslice.plan(CHAIN, *ops, memory_limit="40kB", tune="measure")
    saved = einslice.wisdom.export(tmp_path / "w.json")
    assert len(saved["entries"]) == 1
    einslice.wisdom.clear()
    assert not einslice.wisdom.export()["entries"]
    assert not _wisdom.wisdom_path().exists()
    assert einslice.wisdom.import_(tmp_path / "w.json") == 1
    p = einslice.plan(CHAIN, *ops, memory_limit="40kB", tune="auto")
    assert p.choice is not None and p.choice.how == "wisdom"
    assert json.loads(_wisdom.wisdom_path().read_text())["entries"] == saved["entries"]


def test_corrupt_wisdom_is_ignored_with_a_warning():
    ops = _chain_operands()
    path = _wisdom.wisdom_path()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.warns(UserWarning, match="ignoring the wisdom file.*cannot be read"):
        p = einslice.plan(CHAIN, *ops, memory_limit="40kB", tune="auto")
    assert p.choice is None


def test_wisdom_of_other_versions_is_ignored_with_a_warning(tmp_path):
    ops = _chain_operands()
    einslice.plan(CHAIN, *ops, memory_limit="40kB", tune="measure")
    data = einslice.wisdom.export()
    foreign = {**data, "jax": "0.0.1"}
    with pytest.warns(UserWarning, match="measured with"):
        assert einslice.wisdom.import_(foreign) == 0
    einslice.wisdom.clear()
    (tmp_path / "old.json").write_text(json.dumps({**data, "einslice": "0.0.0"}))
    with pytest.warns(UserWarning, match="measured with"):
        assert einslice.wisdom.import_(tmp_path / "old.json") == 0
    malformed = {**data, "entries": {"key": {"path": []}}}
    with pytest.warns(UserWarning, match="malformed"):
        assert einslice.wisdom.import_(malformed) == 0


def test_calibrate_stores_a_profile_that_later_plans_use():
    profile = einslice.calibrate(size=64, seconds=1e-3)
    assert profile.device_kind == _calibrate.device_kind()
    assert profile.matmul_flops > 0 and profile.loop_seconds > 0
    assert _calibrate.current_profile() == profile
    assert _calibrate.profile_path().exists()


def test_a_foreign_or_corrupt_profile_is_ignored_with_a_warning():
    path = _calibrate.profile_path()
    path.parent.mkdir(parents=True)
    path.write_text(replace(CPU_DEFAULT, device_kind="some other chip").to_json())
    _calibrate._load.cache_clear()
    with pytest.warns(UserWarning, match="describes 'some other chip'"):
        assert _calibrate.current_profile().matmul_flops == CPU_DEFAULT.matmul_flops
    path.write_text("garbage")
    _calibrate._load.cache_clear()
    with pytest.warns(UserWarning, match="cannot be read"):
        _calibrate.current_profile()
    _calibrate._load.cache_clear()


def test_enable_compilation_cache_keeps_a_directory_the_caller_set(tmp_path):
    before = getattr(jax.config, "jax_compilation_cache_dir", None)
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        chosen = einslice.enable_compilation_cache()
        assert chosen == str(_wisdom.cache_dir() / "xla")
        jax.config.update("jax_compilation_cache_dir", str(tmp_path))
        assert einslice.enable_compilation_cache() == str(tmp_path)
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_candidates_are_timed_in_interleaved_rounds_so_a_burst_hits_all_alike():
    # A burst of other work (calls 16-24 here run 20x slower) falls mostly on
    # one candidate when each is timed in a row (the second one's 15 calls,
    # and the slower candidate wins): in rounds it is shared, the medians hold.
    calls = []

    def program(seconds):
        def run(*operands):
            burst = 16 <= len(calls) <= 24
            calls.append(seconds)
            time.sleep(seconds * (20 if burst else 1))
            return 0

        return run

    slow, fast = program(0.004), program(0.002)
    slow_s, none, fast_s = _tune._interleaved_medians([slow, None, fast], [[]] * 3)
    assert none is None and slow_s is not None and fast_s is not None
    assert fast_s < slow_s < 0.04  # a burst call takes 0.04 s or more
    assert calls.count(0.002) == calls.count(0.004) == _tune._ROUNDS + 1


def test_long_sliced_candidates_are_timed_on_a_probe_of_their_chunks(monkeypatch):
    # Every candidate counts as long here: the sliced ones are timed on a few
    # chunks and scaled; the winner is still the whole plan, within the limit.
    monkeypatch.setattr(_tune, "_TIMING_BUDGET_SECONDS", 0.0)
    monkeypatch.setattr(_tune, "_PROBE_SECONDS", 0.0)  # probes of one chunk
    ops = [jnp.asarray(x) for x in _chain_operands(64)]
    limit = 40_000
    p = einslice.plan(CHAIN, *ops, memory_limit=limit, tune="measure")
    choice = p.choice
    assert choice is not None and choice.how == "measure"
    probed = [n for n in choice.notes if n.startswith("timed on")]
    assert probed, choice.notes
    assert all(s is not None and s > 0 for s in choice.seconds)
    assert "timed on" in str(p)
    from einslice._exec._run import Config, _run

    compiled = jax.jit(lambda *xs: _run(p, Config(), *xs)).lower(*ops).compile()
    analysis = compiled.memory_analysis()
    assert analysis is not None and analysis.temp_size_in_bytes <= limit
    np.testing.assert_allclose(p(*ops), np.einsum(CHAIN, *ops), rtol=1e-10)


def test_a_probed_winner_over_the_limit_once_whole_is_rejected(monkeypatch):
    monkeypatch.setattr(_tune, "_TIMING_BUDGET_SECONDS", 0.0)
    monkeypatch.setattr(_tune, "_PROBE_SECONDS", 0.0)
    ops = [jnp.asarray(x) for x in _chain_operands(64)]
    sliced = einslice.plan(CHAIN, *ops, memory_limit=40_000)
    assert sliced.chunks
    # The probe (a cut equation) compiles within the limit; the whole sliced
    # plan, checked once its probe wins, is made to exceed it.
    compile_within_limit = _tune._compile_within_limit

    def checked(plan, operands, run):
        if plan is sliced:
            return None, "rejected: compiled temporaries exceed the limit"
        return compile_within_limit(plan, operands, run)

    monkeypatch.setattr(_tune, "_compile_within_limit", checked)
    monkeypatch.setattr(_tune, "_interleaved_medians", lambda *a: [1e-6, 1.0])
    whole = einslice.plan(CHAIN, *ops, memory_limit=10**8)
    from einslice._exec._run import Config, _run

    chosen = _tune.measure(
        (sliced, whole), ops, lambda plan, xs: _run(plan, Config(), *xs), "test"
    )
    assert chosen.choice is not None and chosen.choice.chosen == 1
    assert "exceed the limit" in chosen.choice.notes[0]


def _unused(plan, operands):
    raise AssertionError("measure is replaced here; nothing runs")


def test_auto_measures_only_when_tuning_costs_a_tenth_of_a_call(monkeypatch):
    measured = []
    monkeypatch.setattr(_tune, "measure", lambda plans, *a: measured.append(plans))
    ops = _chain_operands(64)
    sliced = einslice.plan(CHAIN, *ops, memory_limit=40_000)
    unsliced = einslice.plan(CHAIN, *ops)
    assert sliced.chunks and not unsliced.chunks

    def with_time(plan, seconds):
        return replace(plan, cost=replace(plan.cost, time=seconds))

    def auto(best, *others):
        measured.clear()
        got = _choose.tuned(
            best, "auto", ops, lambda: (best, *others), _unused, lambda: "sig"
        )
        return got, bool(measured)

    long_sliced = with_time(sliced, 100.0)
    # 100 s, sliced: probes cost ~1 s each, well under 10 s: measured.
    assert auto(long_sliced, with_time(sliced, 120.0))[1]
    # A 100 s unsliced candidate cannot be probed: timing it costs a call, so
    # it is left out; the sliced best is still measured without it.
    assert auto(long_sliced, with_time(unsliced, 100.0))[1]
    assert len(measured[0]) == 1
    # The estimate's own choice cannot be probed: auto keeps the estimate.
    best = with_time(unsliced, 100.0)
    assert auto(best, long_sliced) == (best, False)
    # 12 s: five candidates' tuning (~1.2 s each) is over 10% of the call.
    twelve = with_time(sliced, 12.0)
    assert auto(twelve, *[with_time(sliced, 13.0 + k) for k in range(4)]) == (
        twelve,
        False,
    )


def test_measure_measures_a_signature_once_then_uses_its_wisdom(monkeypatch):
    # Measuring at every call cost ~0.35 s per call of a 3-matrix chain.
    calls = []
    measure = _tune.measure

    def counted(*args):
        calls.append(1)
        return measure(*args)

    monkeypatch.setattr(_tune, "measure", counted)
    ops = _chain_operands(32)
    first = einslice.einsum(CHAIN, *ops, tune="measure")
    second = einslice.einsum(CHAIN, *ops, tune="measure")
    assert len(calls) == 1
    np.testing.assert_array_equal(first, second)
    p = einslice.plan(CHAIN, *ops, tune="measure")
    assert p.choice is not None and p.choice.how == "wisdom" and len(calls) == 1
    einslice.wisdom.clear()
    einslice.plan(CHAIN, *ops, tune="measure")
    assert len(calls) == 2


def test_auto_on_a_gpu_measures_every_call_long_enough_to_time(monkeypatch):
    # GPU timing is cheap and precise: calls from 1 ms on are measured, with
    # up to ~10 s of tuning once per signature (the CPU rule, 10% of one
    # call, would never measure the seed formula's 16 ms there).
    measured = []
    monkeypatch.setattr(_tune, "measure", lambda plans, *a: measured.append(plans))
    ops = _chain_operands(64)
    sliced = einslice.plan(CHAIN, *ops, memory_limit=40_000)

    def auto(seconds, platform, count=4):
        best = replace(sliced, cost=replace(sliced.cost, time=seconds))
        measured.clear()
        others = [
            replace(best, cost=replace(best.cost, time=seconds * (2 + k)))
            for k in range(count)
        ]
        _choose.tuned(
            best, "auto", ops, lambda: (best, *others), _unused, lambda: "s", platform
        )
        return bool(measured)

    assert auto(2e-3, "gpu") and auto(2e-3, "cuda") and auto(12.0, "gpu")
    assert not auto(2e-3, "cpu") and not auto(12.0, "cpu")
    assert not auto(5e-4, "gpu")  # below 1 ms: launch noise, estimated
    # ~20 candidates (each compiled and timed, ~0.8 s) exceed the 10 s allowance
    assert not auto(2e-3, "gpu", count=20)


def test_einsum_tells_the_tuner_its_platform(monkeypatch):
    seen = []

    def tuned(best, tune, arrays, candidates, run, signature, platform, later):
        seen.append(platform)
        assert later is not None  # einsum's eager call: measuring off its path
        return best

    monkeypatch.setattr(_choose, "tuned", tuned)
    monkeypatch.setattr(einslice._api, "platform", lambda: "gpu")
    einslice.einsum(CHAIN, *_chain_operands(8), tune="auto")
    assert seen == ["gpu"]


def _gpu_auto(monkeypatch):
    """einsum's calls as on a GPU, with every call long enough to measure.

    (The runners of earlier tests' plans are dropped: one may hold a switch.)
    """
    monkeypatch.setattr(einslice._api, "platform", lambda: "gpu")
    monkeypatch.setattr(_choose, "GPU_AUTO_MEASURE_SECONDS", 0.0)
    _run._top_level_run.cache_clear()


def test_auto_measures_off_the_call_path_then_runs_the_winner(monkeypatch):
    # A first call of the seed formula at n=1536 on a TPU took 26.1 s measuring
    # its candidates on the call path, against 2.8 s for jnp.einsum.
    _gpu_auto(monkeypatch)
    threads, seen = [], []
    measure = _tune.measure

    def slowest(plans, *args):
        threads.append(threading.current_thread().name)
        seen.extend(plans)
        measure(plans, *args)  # (times them, remembers its wisdom)
        return plans[-1]  # another candidate than the estimate's: a switch

    monkeypatch.setattr(_tune, "measure", slowest)
    ops = _chain_operands(64)
    best = einslice.plan(CHAIN, *ops, memory_limit=40_000)
    out = einslice.einsum(CHAIN, *ops, memory_limit=40_000)
    assert _background.drain(120)
    assert threads == ["einslice-background"]
    assert len(seen) > 1 and seen[-1] != best
    assert einslice.running_plan(best) == seen[-1]
    again = einslice.einsum(CHAIN, *ops, memory_limit=40_000)
    np.testing.assert_allclose(out, np.einsum(CHAIN, *ops), rtol=1e-10)
    np.testing.assert_allclose(again, out, rtol=1e-10)
    assert _wisdom.export()["entries"]  # the next process starts from it


def test_a_measurement_stops_where_its_guard_says_so():
    # off the call path the guard is _background.jax_work, which raises at exit
    ops = _chain_operands(8)
    p = einslice.plan(CHAIN, *ops)

    def exiting(work):
        raise _background.Exiting

    with pytest.raises(_background.Exiting):
        _tune.measure((p, p), ops, _unused, "sig", guard=exiting)
    assert not _wisdom.export()["entries"]
