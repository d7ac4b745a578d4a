"""The executor protocol: one registry, plans that name their executor (issue 20)."""

from __future__ import annotations

from dataclasses import replace

import jax
import numpy as np
import pytest

import einslice
from einslice._exec._executors import EXECUTORS, compile_seconds
from einslice._exec._host import host_seconds
from einslice._plan._executors import EXECUTOR_FACTS

CHAIN = "ij,jk,kl->il"


def _ops(dtype=np.float64):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((6, 6)).astype(dtype) for _ in range(3)]


def test_every_executor_has_facts_and_code():
    assert set(EXECUTORS) == set(EXECUTOR_FACTS) == {"einslice", "xla", "host"}
    assert [e.name for e in EXECUTORS.values() if not e.compiles] == ["host"]


def test_a_plan_names_the_executor_that_runs_it():
    ops = _ops()
    plan = einslice.plan(CHAIN, *ops)
    assert plan.executor == "einslice"
    want = np.einsum(CHAIN, *ops)
    for name, executor in EXECUTORS.items():
        assert executor.runs(plan), name
        got = replace(plan, executor=name)(*ops)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, err_msg=name)


def test_describe_names_the_executor():
    plan = einslice.plan(CHAIN, *_ops())
    assert "Executor" not in str(plan)
    assert "one jnp.einsum call" in str(replace(plan, executor="xla"))
    assert "walked in numpy" in str(replace(plan, executor="host"))


def test_estimates_compile_and_run():
    plan = einslice.plan(CHAIN, *_ops())
    chain, host = EXECUTORS["einslice"].estimate(plan), EXECUTORS["host"].estimate(plan)
    assert chain.compile_seconds == compile_seconds(plan) > 0
    assert chain.run_seconds == plan.cost.time
    assert host.compile_seconds == 0.0 and host.run_seconds == host_seconds(plan)


def test_an_unknown_executor_is_named_with_the_known_ones():
    plan = replace(einslice.plan(CHAIN, *_ops()), executor="gpu-kernel")
    with pytest.raises(einslice.EinsliceError, match=r"'gpu-kernel'.*'einslice'"):
        plan(*_ops())


def test_an_executor_refuses_a_plan_it_cannot_run():
    seed = "ij,ik,il,jk,jl,kl->ij"
    sliced = einslice.plan(seed, *[(32, 32)] * 6, memory_limit="64kB")
    assert sliced.chunks
    ops = [np.ones((32, 32), np.float32)] * 6
    with pytest.raises(einslice.EinsliceError, match=r"'xla' cannot run.*'einslice'"):
        replace(sliced, executor="xla")(*ops)
    integer = einslice.plan(CHAIN, *[np.ones((6, 6), np.int32)] * 3)
    with pytest.raises(einslice.EinsliceError, match=r"'host' cannot run.*int32"):
        replace(integer, executor="host")(*[np.ones((6, 6), np.int32)] * 3)


def test_the_host_executor_refuses_transformations():
    ops = _ops()
    plan = replace(einslice.plan(CHAIN, *ops), executor="host")
    with pytest.raises(einslice.EinsliceError, match="outside JAX's transformations"):
        jax.jit(plan)(*ops)
    with pytest.raises(einslice.EinsliceError, match="default precision"):
        plan(*ops, precision=jax.lax.Precision.HIGHEST)
