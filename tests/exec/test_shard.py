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
from collections import Counter

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

PRELUDE = r"""
import json, re, sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import einslice

np.seterr(invalid="ignore")

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
"""

SCRIPT = (
    PRELUDE
    + r"""
cases = json.loads(sys.argv[1])
devices = json.loads(sys.argv[2])
grad_cases = json.loads(sys.argv[3])
out = {"n_devices": len(jax.devices()), "values": {}, "grads": {}, "chunks": {}}

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

# The same for "max" gradients, whose devices also report where they took a
# maximum (a carry of the primal values, kept out of reverse mode's residuals).
out["max_limit"] = max_limit = 459_000
ops = [jnp.asarray(x, jnp.float32) for x in operands([(64, 64)] * 6, "sum", 1)]
for d in [1, 4]:
    f = lambda *o: jnp.sum(einslice.einsum(
        SEED, *o, memory_limit=max_limit, semiring="max", devices=d))
    grad = jax.jit(jax.grad(f, argnums=tuple(range(6))))
    out[f"max_grad_temp/{d}"] = int(
        grad.lower(*ops).compile().memory_analysis().temp_size_in_bytes)
print(json.dumps(out))
""".replace("SEED", repr(SEED))
)


def _run_script(script: str, *args: str) -> dict:
    """Run ``script`` on 4 simulated CPU devices; its last line is JSON."""
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def sharded() -> dict:
    return _run_script(
        SCRIPT, json.dumps(CASES), json.dumps(DEVICES), json.dumps(GRAD_CASES)
    )


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


@pytest.mark.parametrize("devices", [1, 4])
def test_per_device_max_gradient_memory_within_limit(sharded, devices):
    # main compiled 8.6 MB (1 device) and 2.35 MB (4) for this 459 kB limit
    assert sharded[f"max_grad_temp/{devices}"] <= sharded["max_limit"]


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
        # deliberately not a Mesh: the check under test
        einslice.plan("ij,jk->ik", (2, 2), (2, 2), mesh="x")  # pyright: ignore[reportArgumentType]


# Operands the caller already split (issue 6): used in place, not gathered.
# The seed formula at n=12 with k split 4 ways in ik, jk and kl (operands 1,
# 3, 5); "40kB" makes the one-device plan slice k, so each device's grid is
# over its local k extent of 3.
IN_PLACE_SCRIPT = (
    PRELUDE
    + r"""
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

SEED = "ij,ik,il,jk,jl,kl->ij"
LIMIT = "40kB"
K_AXES = {1: 1, 3: 1, 5: 0}  # operand -> its axis holding k
out = {"limit": einslice.parse_memory_limit(LIMIT)}

def split(ops, mesh, axes, name="x"):
    ops = list(ops)
    for k, a in axes.items():
        spec = [None] * np.ndim(ops[k])
        spec[a] = name
        ops[k] = jax.device_put(ops[k], NamedSharding(mesh, P(*spec)))
    return ops

def sharded(p):
    return None if p.sharded is None else p.equation.names[p.sharded]

def entry_shapes(text):
    # Per-device argument shapes of the partitioned program.
    entry = re.search(r"ENTRY [^(]*\((.*)\) ->", text).group(1)
    return re.findall(r"f64\[([\d,]*)\]", entry)

def hlo(compiled):
    text = compiled.as_text()
    return {"all-gather": "all-gather" in text, "all-reduce": "all-reduce" in text,
            "shapes": entry_shapes(text),
            "temp": int(compiled.memory_analysis().temp_size_in_bytes)}

mesh = jax.make_mesh((4,), ("x",))  # Explicit axes: JAX 0.10's default

# Largest difference of the split call's derivative from the unsplit one: a
# JVP for "max", else the gradient of a weighted sum (returned too, with its
# function). JAX differentiates explicitly split arrays only inside their mesh.
def derivative_error(call, split_ops, ops, semiring):
    with jax.set_mesh(mesh):
        if semiring == "max":
            tangents = operands([(12, 12)] * 6, "sum", 7)
            t = jax.jvp(call, split_ops, tangents)[1]
            return err(t, jax.jvp(call, ops, tangents)[1]), None, None
        weights = np.random.default_rng(3).standard_normal((12, 12))
        def loss(*o):
            y = call(*o)
            return jnp.sum(jnp.where(jnp.isfinite(y), y, 0.0) * weights)
        grads = jax.grad(loss, tuple(range(6)))
        g, g_ref = grads(*split_ops), grads(*ops)
        return max(err(a, b) for a, b in zip(g, g_ref)), grads, g
for semiring in ["sum", "log", "max"]:
    ops = operands([(12, 12)] * 6, semiring, 0)
    split_ops = split(ops, mesh, K_AXES)
    def call(*o):
        return einslice.einsum(SEED, *o, memory_limit=LIMIT, semiring=semiring)
    ref = call(*ops)
    p = einslice.plan(SEED, *split_ops, memory_limit=LIMIT, semiring=semiring)
    out[f"value/{semiring}"] = [sharded(p), err(p(*split_ops), ref)]
    out[f"grad/{semiring}"], grads, _ = derivative_error(call, split_ops, ops, semiring)
    if semiring == "sum":
        out["report"] = str(p)
        compiled = jax.jit(call).lower(*split_ops).compile()
        text = compiled.as_text()
        out["hlo/all-gather"] = "all-gather" in text
        out["hlo/shapes"] = entry_shapes(text)
        out["hlo/temp"] = int(compiled.memory_analysis().temp_size_in_bytes)
        with jax.set_mesh(mesh):
            text = jax.jit(grads).lower(*split_ops).compile().as_text()
        out["hlo/grad-all-gather"] = "all-gather" in text
        out["hlo/grad-shapes"] = entry_shapes(text)

# Split along an output index (i of ij and ik; il is cut on each device):
# each device computes its rows of the output, which comes back split.
for semiring in ["sum", "log", "max"]:
    ops = operands([(12, 12)] * 6, semiring, 0)
    split_ops = split(ops, mesh, {0: 0, 1: 0})
    def call(*o):
        return einslice.einsum(SEED, *o, memory_limit=LIMIT, semiring=semiring)
    p = einslice.plan(SEED, *split_ops, memory_limit=LIMIT, semiring=semiring)
    y = p(*split_ops)
    out[f"rows/value/{semiring}"] = [sharded(p), err(y, call(*ops)),
                                     list(y.sharding.spec)]
    error, grads, g = derivative_error(call, split_ops, ops, semiring)
    out[f"rows/grad/{semiring}"] = error
    if semiring == "max":
        continue
    out[f"rows/grad-specs/{semiring}"] = [list(a.sharding.spec)[:1] for a in g]
    if semiring == "sum":
        out["rows/report"] = str(p)
        out["rows/hlo"] = hlo(jax.jit(call).lower(*split_ops).compile())
        with jax.set_mesh(mesh):
            out["rows/grad-hlo"] = hlo(jax.jit(grads).lower(*split_ops).compile())

ops = operands([(12, 12)] * 6, "sum", 0)
ref = einslice.einsum(SEED, *ops, memory_limit=LIMIT)

def check(name, split_ops, **kw):
    p = einslice.plan(SEED, *split_ops, memory_limit=LIMIT, **kw)
    out[name] = [sharded(p), p.devices, err(p(*split_ops), ref)]

# Only jk split: the other operands holding k are sliced on each device.
check("only-jk", split(ops, mesh, {3: 1}))
check("mesh=", split(ops, mesh, K_AXES), mesh=mesh)
check("devices=4", split(ops, mesh, K_AXES), devices=4)
mesh2 = jax.make_mesh((2, 2), ("a", "b"))
check("2d/b", split(ops, mesh2, K_AXES, "b"), mesh=mesh2, mesh_axis="b")
check("output", split(ops, mesh, {0: 0}))
check("output+mesh=", split(ops, mesh, {0: 0}), mesh=mesh)
# Fallbacks, gathered: split along another mesh axis than the one asked
# for, two indices (k of jk, l of kl), a summed and an output index (i, k).
check("2d/a", split(ops, mesh2, K_AXES, "b"), mesh=mesh2, mesh_axis="a")
check("inconsistent", split(ops, mesh, {3: 1, 5: 1}))
check("output+summed", split(ops, mesh, {0: 0, 3: 1}))
# A formula summing nothing, split along an output index.
x, y = operands([(8, 3), (3, 5)], "sum", 2)
p = einslice.plan("ij,jk->ijk", *split([x, y], mesh, {0: 0}))
out["outer"] = [sharded(p), err(p(*split([x, y], mesh, {0: 0})),
                                np.einsum("ij,jk->ijk", x, y))]
# Plans from ShapeDtypeStructs: uneven (6 over 4) and diagonal (kk) splits.
S = lambda shape, spec: jax.ShapeDtypeStruct(
    shape, np.float64, sharding=NamedSharding(mesh, spec))
out["uneven"] = sharded(einslice.plan("ij,jk->ik", S((4, 6), P(None, "x")), (6, 3)))
out["diagonal"] = sharded(einslice.plan("kk,k->", S((8, 8), P("x")), (8,)))
out["struct"] = sharded(einslice.plan("ij,jk->ik", S((4, 8), P(None, "x")), (8, 3)))

# Auto mesh axes: found on the concrete arrays, so plan outside jax.jit.
auto = jax.make_mesh((4,), ("x",), axis_types=(AxisType.Auto,))
split_ops = split(ops, auto, K_AXES)
p = einslice.plan(SEED, *split_ops, memory_limit=LIMIT)
text = jax.jit(p).lower(*split_ops).compile().as_text()
out["auto"] = [sharded(p), err(p(*split_ops), ref), "all-gather" in text,
               entry_shapes(text)]

# An active mesh: devices=N runs on it; alone it splits nothing.
with jax.set_mesh(mesh):
    p = einslice.plan(SEED, *ops, memory_limit=LIMIT, devices=4)
    out["context"] = [p.mesh_axis, err(p(*ops), ref)]
    out["context/none"] = einslice.plan(SEED, *ops, memory_limit=LIMIT).devices
    try:
        einslice.plan(SEED, *ops, devices=2)
    except einslice.EinsliceError as error:
        out["context/error"] = str(error)
print(json.dumps(out))
"""
)


@pytest.fixture(scope="module")
def in_place() -> dict:
    return _run_script(IN_PLACE_SCRIPT)


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_split_operands_used_in_place(in_place, semiring):
    index, error = in_place[f"value/{semiring}"]
    assert index == "k"
    assert error <= 1e-10
    assert in_place[f"grad/{semiring}"] <= 1e-10


def test_split_operands_not_gathered(in_place):
    # Each device's arguments are its shards (12x3 / 3x12), nothing gathered.
    local = ["12,12", "12,3", "12,12", "12,3", "12,12", "3,12"]
    assert not in_place["hlo/all-gather"]
    assert in_place["hlo/shapes"] == local
    assert in_place["hlo/temp"] <= in_place["limit"]
    assert not in_place["hlo/grad-all-gather"]
    # The gradient program's parameters hold the same shards; their order is
    # XLA's (JAX 0.12.1 puts a 12x12 one first), so compare them as a multiset.
    assert not Counter(local) - Counter(in_place["hlo/grad-shapes"])
    assert "operands split along k are used in place" in in_place["report"]
    assert "(k: 3 of 12) in 1 summed chunk per output block" in in_place["report"]


@pytest.mark.parametrize(
    "case, index, devices",
    [
        ("only-jk", "k", 4),
        ("mesh=", "k", 4),
        ("devices=4", "k", 4),
        ("2d/b", "k", 2),
        ("output", "i", 4),
        ("output+mesh=", "i", 4),
    ],
)
def test_split_operands_in_place_with_device_arguments(in_place, case, index, devices):
    assert in_place[case] == [index, devices, pytest.approx(0, abs=1e-10)]


@pytest.mark.parametrize("semiring", ["sum", "log", "max"])
def test_split_along_output_index_used_in_place(in_place, semiring):
    index, error, spec = in_place[f"rows/value/{semiring}"]
    assert index == "i"
    assert error <= 1e-10
    assert spec == ["x", None]  # the result stays split along i
    assert in_place[f"rows/grad/{semiring}"] <= 1e-10
    if semiring != "max":
        # Cotangents of the operands holding i come back split the same way.
        specs = in_place[f"rows/grad-specs/{semiring}"]
        assert specs[:3] == [["x"]] * 3


def test_split_along_output_index_needs_no_communication(in_place):
    # Each device's arguments are its rows (3x12); nothing gathered or reduced.
    forward = in_place["rows/hlo"]
    assert forward["shapes"] == ["3,12", "3,12", "3,12", "12,12", "12,12", "12,12"]
    assert not forward["all-gather"]
    assert not forward["all-reduce"]
    assert forward["temp"] <= in_place["limit"]
    # Gradients gather nothing (the replicated jk, jl, kl sum their cotangents).
    assert not in_place["rows/grad-hlo"]["all-gather"]
    assert in_place["rows/grad-hlo"]["shapes"][:3] == ["3,12"] * 3
    report = in_place["rows/report"]
    assert "split along i are used in place: each computes its own output" in report
    assert "All-reduce: none (the result stays split along i)" in report
    assert in_place["outer"] == ["i", pytest.approx(0, abs=1e-10)]


@pytest.mark.parametrize(
    "case, devices",
    [("2d/a", 2), ("inconsistent", 1), ("output+summed", 1)],
)
def test_split_operands_gathered_when_not_usable(in_place, case, devices):
    assert in_place[case] == [None, devices, pytest.approx(0, abs=1e-10)]


def test_split_found_on_shape_structs(in_place):
    assert in_place["struct"] == "j"
    assert in_place["uneven"] is None
    assert in_place["diagonal"] is None


def test_split_operands_on_auto_mesh_axes(in_place):
    index, error, gathered, shapes = in_place["auto"]
    assert (index, gathered) == ("k", False)
    assert error <= 1e-10
    assert shapes == ["12,12", "12,3", "12,12", "12,3", "12,12", "3,12"]


def test_active_mesh(in_place):
    assert in_place["context"] == ["x", pytest.approx(0, abs=1e-10)]
    assert in_place["context/none"] == 1
    assert "devices=2 but the active mesh (jax.set_mesh)" in in_place["context/error"]
