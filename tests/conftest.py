"""Test-wide configuration: float64 references and hypothesis profiles.

``jax_enable_x64`` is on so that float64 operands stay float64 and properties can
be checked against ``numpy.einsum`` to ~1e-12. Hypothesis profiles:

* ``ci`` (default): modest example counts and no deadline (the first call of
  each formula compiles), derandomized so CI runs are reproducible. Properties
  whose every example compiles a derivative set fewer examples themselves.
* ``dev``: a handful of examples, for quick local iteration.
* ``thorough``: many random examples, for hunting bugs before a release.

Pick one with ``HYPOTHESIS_PROFILE=thorough pytest tests``.
"""

from __future__ import annotations

import ctypes
import gc
import os

import jax
import pytest
from hypothesis import HealthCheck, settings

jax.config.update("jax_enable_x64", True)

_COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}
settings.register_profile("ci", max_examples=25, derandomize=True, **_COMMON)
settings.register_profile("dev", max_examples=8, **_COMMON)
settings.register_profile("thorough", max_examples=500, **_COMMON)
# On an accelerator every example compiles programs of its own (~0.2-1 s each
# on a TPU v5e): a few examples per property, so that the accelerator subset
# (`ACCELERATOR_TESTS`) runs in minutes.
settings.register_profile("accelerator", max_examples=3, derandomize=True, **_COMMON)
ON_ACCELERATOR = jax.default_backend() != "cpu"
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "accelerator" if ON_ACCELERATOR else "ci")
)
if ON_ACCELERATOR:
    # float32 products at JAX's default precision are one bf16 pass on a TPU
    # (three digits): the tests compare with float64 references, so every
    # product runs at "highest" there, as on a CPU.
    jax.config.update("jax_default_matmul_precision", "highest")


@pytest.fixture(autouse=True)
def _private_cache_dir(tmp_path, monkeypatch):
    """Every test gets its own einslice cache directory (profiles, wisdom).

    No test reads a profile or wisdom that another test or the user stored,
    or writes into the user's cache.
    """
    monkeypatch.setenv("EINSLICE_CACHE_DIR", str(tmp_path / "einslice-cache"))


@pytest.fixture(autouse=True)
def _background_work_ends_with_its_test():
    """A runner's background work ends with the test that started it.

    (``_exec._background``: the compile that ends a host walk, the optimized
    recompile, growth): none sees the next test's patches or cache directory.
    """
    yield
    from einslice._exec import _background

    assert _background.drain(300), "einslice's background work did not end"


# Tests of more than a few seconds each on 2 cores (pytest --durations, summed
# over parameters): the README's command skips them (`-m "not slow"`), .ci/run
# runs them. Listed here, by test function, rather than decorated one by one,
# so that the whole split is visible in one place; a new slow test may also
# carry `@pytest.mark.slow` itself.
SLOW_TESTS = {
    "tests/cli/test_cli.py": {
        "test_bench_suite_on_tiny_shapes",
        "test_bench_writes_table_csv_and_plot",
        "test_python_dash_m_einslice",  # 5.5 s: a fresh interpreter
    },
    "tests/exec/test_host.py": {
        "test_sliced_plans_loop_over_their_chunks",
        "test_the_walk_holds_at_most_its_bound",  # 26 s: 30 examples, 4 walks each
    },
    "tests/exec/test_host_grad.py": {
        "test_sliced_plans_agree_with_jax_grad_of_the_compiled_plan"
    },
    "tests/plan/test_search.py": {
        "test_large_searches_are_never_worse_than_cotengras_at_the_same_budget",
    },
    "tests/pgm/test_infer.py": {"test_grids_15_map_value_fits_256mb_and_bounds_log_z"},
    "tests/pgm/test_sample.py": {  # 35 s: samples at the smallest limit that fits
        "test_a_limit_below_every_layout_states_the_smallest",
        # 7 s each (quiet): 2-3 x 10^4 samples down a recomputing walk
        "test_a_limit_below_the_kept_nodes_walks_down_recomputing_them",
        "test_a_limit_below_the_walk_conditions_on_variables",
    },
    # 5-6 s each serial (quiet, 2026-12-07): with these the README's command
    # took 318 s in two processes, over its 5 minutes
    "tests/pgm/test_uai_cli.py": {"test_sample_writes_csv_and_npy"},
    "tests/test_cache_files.py": {
        "test_a_built_library_and_its_directory_are_private_whatever_the_umask",
        "test_a_planted_library_in_a_group_writable_file_is_never_loaded",
    },
    "tests/exec/test_native.py": {
        "test_the_cached_library_is_reused",
        "test_a_compiler_that_refuses_march_native_still_builds",
    },
    "tests/exec/test_pallas.py": {"test_special_values_follow_the_semiring"},
    "tests/exec/test_tune.py": {"test_measured_choice_equals_the_estimated_one"},
    "tests/plan/test_derivative_fit.py": {"test_error_messages_cut_long_equations"},
    "tests/test_conformance.py": {
        "test_grad_matches_jnp",
        "test_out_sharding_on_two_devices",
    },
    "tests/test_gradients.py": {
        "test_log_check_grads",
        "test_log_grad_matches_materialized_reference",
        "test_log_grad_matches_materialized_reference_when_sliced",
        "test_log_grad_has_no_nan_with_neg_inf_entries_and_rows",
        "test_output_only_operand_multiplied_after_the_loop",
        "test_sum_check_grads",
        "test_sum_check_grads_to_second_order",
        "test_sum_grad_matches_materialized_reference",
        "test_sum_hessian_matches_jnp",
        "test_sum_jvp_and_vjp_match_jnp",
    },
    "tests/test_memory.py": {
        "test_a_many_step_log_gradient_counts_every_steps_exponentials",  # 12 s
        "test_compiled_temporaries_within_the_limit",
        "test_seed_formula_n128_under_other_limits",
        "test_seed_formula_n256_log_semiring_fits_16MB",
    },
    "tests/test_every_semiring.py": {  # derivatives of every executor; 2 devices
        "test_a_hoisted_plan_on_every_executor_matches_float64",
        "test_every_differentiable_executor_matches_float64_gradients",
        "test_sharded_chain_on_two_devices_matches_float64",
    },
    "tests/test_regressions.py": {"test_equation"},
    "tests/test_semirings.py": {
        "test_log_float64_is_accurate",
        "test_log_matches_logsumexp",
        "test_log_matches_logsumexp_when_sliced",
        "test_log_of_all_neg_inf_is_neg_inf",
        "test_log_scaled_form_alone_matches_logsumexp",
    },
    "tests/test_transforms.py": {
        "test_grad",
        "test_grad_matches_jnp_on_random_equations",
        "test_grad_matches_jnp_when_sliced",
    },
}


# Tests that use these module fixtures are slow too (the fixture's time falls
# on whichever test of the module runs first).
SLOW_FIXTURES = {
    # each runs every case in a 4-device process: 36 s and 33 s on 2 cores
    "tests/exec/test_shard.py": {"sharded", "in_place"},
}


# The accelerator subset (``pytest -m accelerator``): correctness against
# float64 references, memory within the limit, gradients, semirings and pgm
# on a shared instance, few enough to run on a TPU v5e in one process in
# minutes. There each program compiles for the chip (~0.2-1 s): the subset is
# sized by the programs it compiles, at most ~150 (benchmarks/compile_count.py
# counted 206 on the CPU before the cases below were picked, 40 of them one
# gradient op by op; 125 after). Every test here also runs on the CPU, as any
# other.
ACCELERATOR_TESTS = {
    # (a test's id with its parameters picks those only: every executor's
    # "log" programs on the six-operand and the iijb formulas took 61 s and
    # 54 s of a TPU v5e's 330 s for the subset, 2026-12-07)
    "tests/test_every_semiring.py": {
        "test_every_executor_matches_float64[ij,jk->ik-sum]",
        "test_every_executor_matches_float64[ij,jk->ik-log]",
        "test_every_executor_matches_float64[ij,jk->ik-max]",
        "test_every_executor_matches_float64[ij,jk->ik-min]",
        "test_every_executor_matches_float64[ij,ik,il,jk,jl,kl->ij-sum]",
        "test_every_executor_matches_float64[ij,ik,il,jk,jl,kl->ij-max]",
        "test_every_executor_matches_float64[iijb,jkc,k->ik-sum]",
        "test_every_executor_matches_float64[i,j,ij->ij-log]",
        "test_min_plus_squaring_gives_floyd_warshall",
    },
    "tests/test_semirings.py": {
        "test_log_matches_logsumexp",
        "test_log_keeps_terms_whose_shifted_product_underflows",
        "test_log_of_equal_entries_counts_them",
        "test_log_chunks_that_are_all_neg_inf",
        "test_max_matches_brute_force",
        # sliced only (the chunks' first maximizer); unsliced: 18 programs
        "test_max_gradient_is_the_indicator_of_the_maximizer[distinct-sliced]",
        "test_max_gradient_is_the_indicator_of_the_maximizer[ties-sliced]",
        "test_semirings_under_jit_and_vmap",
    },
    "tests/test_gradients.py": {
        "test_log_grad_is_the_marginal_probability",
        "test_grad_of_broadcast_and_repeated_operands",
    },
    "tests/test_memory.py": {
        "test_seed_formula_n256_fits_16MB",
        "test_seed_formula_n256_gradient_fits_16MB",
        "test_unsliced_matmul_is_one_dot_general_and_no_loop",
        "test_sliced_seed_formula_loops",
    },
    "tests/test_maxplus.py": {
        "test_blocked_matches_numpy",
        "test_gradient_is_the_union_rule",
    },
    "tests/exec/test_pallas.py": {"test_the_compiled_kernel_on_a_tpu"},
    "tests/test_precision.py": {
        "test_jaxs_default_matmul_precision_is_the_one_costed_when_none_is_given",
    },
    "tests/pgm/test_infer.py": {
        "test_log_partition_matches_enumeration",
        "test_marginals_match_enumeration",
        "test_map_matches_enumeration",
    },
    "tests/pgm/test_shared_marginals.py": {
        "test_promedus_marginals_satisfy_the_identities",
    },
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        name = getattr(item, "originalname", item.name)
        slow_fixtures = SLOW_FIXTURES.get(path, set())
        uses_one = bool(slow_fixtures.intersection(getattr(item, "fixturenames", ())))
        if name in SLOW_TESTS.get(path, ()) or uses_one:
            item.add_marker(pytest.mark.slow)
        chosen = ACCELERATOR_TESTS.get(path, ())
        if name in chosen or item.name in chosen:
            item.add_marker(pytest.mark.accelerator)
        if ON_ACCELERATOR and item.get_closest_marker("cpu") is not None:
            item.add_marker(
                pytest.mark.skip(reason="assumes XLA's CPU backend (marked cpu)")
            )


@pytest.fixture(autouse=True, scope="module")
def _drop_compiled_programs():
    """Free each module's compiled programs once it is done.

    JAX keeps every compiled executable for the life of the process; over the
    whole suite that held 4.2 GB. Modules rarely share a program, so dropping
    them after each costs little compile time and bounds the peak.
    """
    yield
    _free_compiled_programs()


# Within a module, programs are dropped only once the process holds this much:
# dropping them after every test bounded the README's test command at 0.77 GB
# but doubled its time (3:50 -> 8:36, the tests of a module share programs and
# JAX's own jitted helpers), while module by module alone it peaked at 2.17 GB.
RESIDENT_BYTES_BEFORE_DROPPING = 1 << 30


@pytest.fixture(autouse=True)
def _drop_compiled_programs_when_large():
    yield
    if _resident_bytes() > RESIDENT_BYTES_BEFORE_DROPPING:
        _free_compiled_programs()


def _free_compiled_programs() -> None:
    jax.clear_caches()
    gc.collect()
    _return_freed_memory()


def _resident_bytes() -> int:
    """This process's resident memory now (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _return_freed_memory() -> None:
    """Hand the C heap's freed pages back to the system (glibc's malloc_trim).

    Freed executables otherwise stay in the process's heap.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (macOS, musl): nothing to trim
        return
    libc.malloc_trim(0)
