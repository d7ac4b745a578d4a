"""The seed formula on a TPU: the plan for the CPU profile, the TPU profile, jnp greedy.

Side by side in one process on whatever device JAX picks: the seed formula
``ij,ik,il,jk,jl,kl->ij`` at each n (256 MB at n <= 1024, else 1 GB), planned
with ``profile=einslice.profiles.CPU`` (what a TPU got before it had a
profile) and ``profiles.TPU``, each jitted: its slicing, estimate, predicted
peak, compiled temporaries, warm time (median of 2 after one call),
TFLOP/s (2 n^4 FLOPs) and relative difference from the CPU-profile plan's
result; then ``jnp.einsum(optimize="greedy")`` jitted.

Usage (on a TPU machine, einslice's dependencies on the path):
``python benchmarks/tpu_seed.py 1024,2048,4096``; prints one JSON line per
row and writes ``tpu_profile.json`` into ``$OUT`` (default /tmp). Results:
``benchmarks/results/tpu_v5e.md``.
"""

import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp

import einslice
from einslice._exec._calibrate import current_profile
from einslice.profiles import CPU, TPU

SEED = "ij,ik,il,jk,jl,kl->ij"
sizes = (
    [int(x) for x in sys.argv[1].split(",")]
    if len(sys.argv) > 1
    else [1024, 2048, 4096]
)
print(
    "devices",
    jax.devices(),
    "current profile kind",
    current_profile().device_kind,
    "matmul",
    current_profile().matmul_flops,
    flush=True,
)


def timed(f, args, k=2):
    t = time.perf_counter()
    jax.block_until_ready(f(*args))
    first = time.perf_counter() - t
    ts = []
    for _ in range(k):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t)
    return first, statistics.median(ts)


res = []
for n in sizes:
    lim = "256MB" if n <= 1024 else "1GB"
    ops = [jax.random.uniform(jax.random.key(i), (n, n), jnp.float32) for i in range(6)]
    ref = None
    for name, prof in [("cpu-profile", CPU), ("tpu-profile", TPU)]:
        try:
            p = einslice.plan(SEED, *ops, memory_limit=lim, profile=prof)
            f = jax.jit(lambda *o, p=p: p(*o))
            temp = f.lower(*ops).compile().memory_analysis().temp_size_in_bytes
            first, warm = timed(f, ops)
            out = f(*ops)
            ref = out if ref is None else ref
            err = float(jnp.max(jnp.abs(out - ref)) / jnp.max(jnp.abs(ref)))
            row = dict(
                n=n,
                plan=name,
                sliced=p.sliced,
                est=p.cost.time,
                peak_mb=p.peak_bytes / 2**20,
                temp_mb=temp / 2**20,
                warm=warm,
                tflops=2 * n**4 / warm / 1e12,
                err=err,
            )
        except Exception as e:
            row = dict(n=n, plan=name, error=repr(e)[:300])
        print(json.dumps(row), flush=True)
        res.append(row)
    try:
        g = jax.jit(lambda *o: jnp.einsum(SEED, *o, optimize="greedy"))
        temp = g.lower(*ops).compile().memory_analysis().temp_size_in_bytes
        first, warm = timed(g, ops)
        row = dict(
            n=n,
            plan="jnp-greedy",
            temp_mb=temp / 2**20,
            warm=warm,
            tflops=2 * n**4 / warm / 1e12,
        )
    except Exception as e:
        row = dict(n=n, plan="jnp-greedy", error=repr(e)[:300])
    print(json.dumps(row), flush=True)
    res.append(row)
out = os.environ.get("OUT", "/tmp")
json.dump(res, open(os.path.join(out, "tpu_profile.json"), "w"), indent=1)
