"""Many devices (``_exec/_shard.py``): sharded results equal one device's.

The checks need several devices, so they run in a fresh interpreter with
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` set before JAX is
imported; the rest of the suite keeps one device. One subprocess computes every
case and prints JSON; the tests below assert on it. Argument errors need no
extra devices and run here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

import einslice

SEED = "ij,ik,il,jk,jl,kl->ij"

# (id, formula, shapes, memory_limit): small sizes keep compilation quick.
CASES = [
    ("seed", SEED, [(10, 10)] * 6, "1MB"),
    # Sliced output rows (outer scan) and a summed index split within each.
    ("seed-sliced", SEED, [(12, 12)] * 6, "40kB"),
    # j=5 on 4 devices: 5 chunks, 2 per device, 3 padding chunks skipped.
    ("matmul-5", "ij,jk->ik", [(6, 5), (5, 4)], None),
    # j=3 on 4 devices: one device has only padding.
    ("matmul-3", "ij,jk->ik", [(4, 3), (3, 2)], None),
]
DEVICES = [1, 2, 4]
SEMIRINGS = ["sum", "log", "max"]
# Gradients (JVP for "max") on 4 devices only: each compile costs seconds.
GRAD_CASES = ["seed-sliced", "matmul-5"]

SCRIPT = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import einslice

cases = json.loads(sys.argv[1])
devices = json.loads(sys.argv[2])
grad_cases = json.loads(sys.argv[3])
np.seterr(invalid="ignore")
out = {"n_devices": len(jax.devices()), "values": {}, "grads": {}, "chunks": {}}

def operands(shapes, semiring, seed):
    rng = np.random.default_rng(seed)
    ops = [rng.standard_normal(s) for s in shapes]
    if semiring == "log":  # -inf entries: some outputs -inf, none NaN
        ops[0][0] = -np.inf
    return ops

def err(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if np.isnan(a).any() or np.isnan(b).any():
        return float("nan")
    if not np.array_equal(np.isinf(a), np.isinf(b)):
        return float("inf")
    finite = np.isfinite(a)
    return float(np.max(np.abs(a - b)[finite], initial=0.0))

for cid, formula, shapes, limit in cases:
    for semiring in ["sum", "log", "max"]:
        ops = operands(shapes, semiring, len(cid))
        call = lambda *o, d=None: einslice.einsum(
            formula, *o, memory_limit=limit, semiring=semiring, devices=d)
        ref = call(*ops)
        for d in devices:
            key = f"{cid}/{semiring}/{d}"
            out["values"][key] = err(call(*ops, d=d), ref)
            p = einslice.plan(formula, *ops, memory_limit=limit,
                              semiring=semiring, devices=d)
            out["chunks"][key] = [p.n_chunks, str(p)]
        # Gradients (reverse mode) and, for "max", the JVP with its ties.
        if cid not in grad_cases:
            continue
        if semiring == "max":
            tangents = operands(shapes, "sum", 7)
            _, ref_t = jax.jvp(call, ops, tangents)
            for d in [4]:
                _, t = jax.jvp(lambda *o: call(*o, d=d), ops, tangents)
                out["grads"][f"{cid}/{semiring}/{d}"] = err(t, ref_t)
            continue
        weights = np.random.default_rng(3).standard_normal(np.shape(ref))
        def loss(*o, d=None):
            y = call(*o, d=d)
            return jnp.sum(jnp.where(jnp.isfinite(y), y, 0.0) * weights)
        argnums = tuple(range(len(ops)))
        ref_g = jax.grad(loss, argnums)(*ops)
        for d in [4]:
            g = jax.grad(lambda *o: loss(*o, d=d), argnums)(*ops)
            out["grads"][f"{cid}/{semiring}/{d}"] = max(
                err(a, b) for a, b in zip(g, ref_g))

# A 2-D mesh, split along its second axis.
mesh = jax.make_mesh((2, 2), ("a", "b"))
ops = operands([(10, 10)] * 6, "sum", 0)
ref = einslice.einsum(SEED, *ops, memory_limit="1MB")
out["mesh"] = err(einslice.einsum(SEED, *ops, memory_limit="1MB", mesh=mesh,
                                  mesh_axis="b"), ref)
p = einslice.plan(SEED, *ops, memory_limit="1MB", mesh=mesh, mesh_axis="b")
out["mesh_plan"] = err(p(*ops), ref)
out["mesh_jit"] = err(jax.jit(lambda *o: p(*o))(*ops), ref)

# Per-device compiled temporary memory within the limit, one and four devices.
limit = einslice.parse_memory_limit("200kB")
ops = [jnp.asarray(x) for x in operands([(48, 48)] * 6, "sum", 1)]
out["limit"] = limit
for d in [1, 4]:
    f = lambda *o: einslice.einsum(SEED, *o, memory_limit=limit, devices=d)
    compiled = jax.jit(f).lower(*ops).compile()
    out[f"temp/{d}"] = int(compiled.memory_analysis().temp_size_in_bytes)
    out[f"temp_err/{d}"] = err(f(*ops), einslice.einsum(SEED, *ops))
print(json.dumps(out))
""".replace("SEED", repr(SEED))


@pytest.fixture(scope="module")
def sharded() -> dict:
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            json.dumps(CASES),
            json.dumps(DEVICES),
            json.dumps(GRAD_CASES),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


KEYS = [f"{c[0]}/{s}/{d}" for c in CASES for s in SEMIRINGS for d in DEVICES]


def test_four_simulated_devices(sharded):
    assert sharded["n_devices"] == 4


@pytest.mark.parametrize("key", KEYS)
def test_sharded_equals_one_device(sharded, key):
    assert sharded["values"][key] <= 1e-10, key


@pytest.mark.parametrize("key", [f"{c}/{s}/4" for c in GRAD_CASES for s in SEMIRINGS])
def test_sharded_gradients_match(sharded, key):
    assert sharded["grads"][key] <= 1e-10, key


def test_chunk_counts_not_divisible_are_covered(sharded):
    n_chunks, report = sharded["chunks"]["matmul-5/sum/4"]
    assert n_chunks == 5
    assert "each scans 2 of the 5 summed chunks, 3 padding skipped" in report
    assert "All-reduce: 192 B per device" in report  # 6x4 float64 output
    assert "pmax + psum" in sharded["chunks"]["seed/log/4"][1]
    assert sharded["chunks"]["matmul-3/sum/4"][0] == 3


def test_mesh_axis_and_plan_call(sharded):
    assert sharded["mesh"] <= 1e-10
    assert sharded["mesh_plan"] <= 1e-10
    assert sharded["mesh_jit"] <= 1e-10


@pytest.mark.parametrize("devices", [1, 4])
def test_per_device_temporary_memory_within_limit(sharded, devices):
    assert sharded[f"temp/{devices}"] <= sharded["limit"]
    assert sharded[f"temp_err/{devices}"] <= 1e-10


def test_formula_summing_nothing_runs_unsharded():
    p = einslice.plan("ij,jk->ijk", (4, 5), (5, 6), devices=1)
    assert "Devices" not in str(p)
    x, y = np.ones((4, 5)), np.ones((5, 6))
    mesh = jax.make_mesh((1,), ("x",))
    p = einslice.plan("ij,jk->ijk", x, y, mesh=mesh)
    assert p.devices == 1


def test_error_too_many_devices():
    n = len(jax.devices())
    with pytest.raises(
        einslice.EinsliceError,
        match=re.escape(f"devices={n + 1} is not a device count between 1 and the"),
    ):
        einslice.einsum("ij,jk->ik", np.ones((2, 2)), np.ones((2, 2)), devices=n + 1)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_error_bad_device_count(bad):
    with pytest.raises(
        einslice.EinsliceError, match=re.escape(f"devices={bad!r} is not a device")
    ):
        einslice.plan("ij,jk->ik", (2, 2), (2, 2), devices=bad)


def test_error_devices_and_mesh():
    mesh = jax.make_mesh((1,), ("x",))
    with pytest.raises(
        einslice.EinsliceError, match=re.escape("devices=1 and mesh=")
    ) as info:
        einslice.plan("ij,jk->ik", (2, 2), (2, 2), devices=1, mesh=mesh)
    assert "pass one" in str(info.value)


def test_error_mesh_axis():
    mesh = jax.make_mesh((1,), ("x",))
    with pytest.raises(
        einslice.EinsliceError, match=re.escape("mesh_axis='y' is not an axis")
    ):
        einslice.plan("ij,jk->ik", (2, 2), (2, 2), mesh=mesh, mesh_axis="y")
    with pytest.raises(
        einslice.EinsliceError, match=re.escape("mesh_axis='x' was given without")
    ):
        einslice.plan("ij,jk->ik", (2, 2), (2, 2), mesh_axis="x")
    with pytest.raises(
        einslice.EinsliceError, match=re.escape("mesh='x' is not a jax.sharding")
    ):
        einslice.plan("ij,jk->ik", (2, 2), (2, 2), mesh="x")
