"""precision=: plans are costed at its matmul rate, remember it and say so."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import einslice
from einslice._plan._profile import CPU_DEFAULT, GPU_DEFAULT

MATMUL = "ij,jk->ik"
BIG = ((4096, 4096), (4096, 4096))


def test_a_plan_for_highest_is_costed_at_the_gpus_highest_rate():
    default = einslice.plan(MATMUL, *BIG, profile=GPU_DEFAULT)
    highest = einslice.plan(MATMUL, *BIG, profile=GPU_DEFAULT, precision="highest")
    x3 = lax.DotAlgorithmPreset.TF32_TF32_F32_X3
    fast_f32 = einslice.plan(MATMUL, *BIG, profile=GPU_DEFAULT, precision=x3)
    assert highest.cost.time / default.cost.time == pytest.approx(7.0, rel=0.1)
    assert fast_f32.cost.time / default.cost.time == pytest.approx(2.9, rel=0.1)
    assert highest.profile is not None and highest.profile.precision == "highest"
    assert highest.precision == "highest" and fast_f32.precision is x3
    assert "on gpu at precision=highest (matmul 50 TFLOP/s)" in str(highest)
    assert "at precision=TF32_TF32_F32_X3 (matmul 120 TFLOP/s)" in str(fast_f32)
    assert "at precision=default (matmul 350 TFLOP/s)" in str(default)


def test_jaxs_default_matmul_precision_is_the_one_costed_when_none_is_given():
    with jax.default_matmul_precision("highest"):
        p = einslice.plan(MATMUL, *BIG, profile=GPU_DEFAULT)
    assert p.profile is not None and p.profile.matmul_flops == 5e13


def test_an_unmeasured_precision_is_costed_at_the_default_rate_and_says_so():
    p = einslice.plan(MATMUL, *BIG, profile=CPU_DEFAULT, precision="highest")
    assert p.cost == einslice.plan(MATMUL, *BIG, profile=CPU_DEFAULT).cost
    assert "the default precision's: none measured for it" in str(p)


@pytest.mark.cpu  # XLA:CPU rejects TF32 (a GPU runs it)
def test_a_plan_runs_with_the_precision_it_was_planned_for():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((8, 8)), jnp.float32)
    x3 = lax.DotAlgorithmPreset.TF32_TF32_F32_X3
    p = einslice.plan(MATMUL, x, x, precision=x3)
    # XLA's CPU backend rejects the TF32 algorithms: the call passed it on.
    with pytest.raises(Exception, match="TF32_TF32_F32_X3"):
        p(x, x)
    want = np.asarray(x, np.float64) @ np.asarray(x, np.float64)
    np.testing.assert_allclose(p(x, x, precision="highest"), want, rtol=1e-5)


def test_explain_takes_a_precision(capsys):
    from einslice._cli import main

    main(["explain", MATMUL, "--shape", "i=64,j=64,k=64", "--precision", "highest"])
    assert "at precision=highest" in capsys.readouterr().out
    bad = ["explain", MATMUL, "--shape", "i=4,j=4,k=4", "--precision", "fast"]
    assert main(bad) == 2
    assert "'fast' is not a precision" in capsys.readouterr().err
