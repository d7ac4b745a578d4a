"""jt-message's product in its larger side's order (after) or its consumer's (before).

``abcd,ab,bc->cd`` (a junction-tree message) multiplies ``abcd`` by ``bc``
and then contracts ``a, b``. einslice wrote that product as ``cdab`` (the
contracted indices last: "before", main up to 003709f), which transposes
the whole clique table, and now writes it as ``abcd`` ("after"), which
``dot_general`` reads with its contracting dimensions leading. This times
both layouts of the plan the device's profile chooses (its chunks, and
unsliced), and ``jax.jit(jnp.einsum(..., optimize="greedy"))``, compiled
once each and timed in interleaved rounds (medians, and the median of the
per-round ratios to greedy), with each program's compiled temporaries; and
the plan's estimate. Default sizes: the parity suite's (``n`` = 48 on a
CPU, 128 elsewhere: a 1 GB table on a TPU v5e).

    PYTHONPATH=src python benchmarks/product_layout.py [--n 128] [--rounds 15]

About 1 minute on a TPU v5e or a 2-core CPU. Prints only.
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np

import einslice
from einslice.bench._parity import LIMIT, interleaved_times

SUBSCRIPTS = "abcd,ab,bc->cd"


def variants(plan) -> dict:
    """The plan (after), the same with main's ``cdab`` product (before); unsliced."""
    (product, contraction) = plan.steps
    assert product.result == (0, 1, 2, 3) and contraction.contracted == (0, 1), plan
    cdab = (replace(product, result=(2, 3, 0, 1)), contraction)
    before = replace(plan, steps=cdab)
    found = {"after": plan, "before": before}
    if plan.chunks:
        found["after unsliced"] = replace(plan, chunks=())
        found["before unsliced"] = replace(before, chunks=())
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--n", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    n = args.n or (48 if jax.default_backend() == "cpu" else 128)
    rng = np.random.default_rng(0)
    shapes = [(n,) * 4, (n, n), (n, n)]
    ops = [jnp.asarray(rng.uniform(size=s).astype(np.float32)) for s in shapes]
    plan = einslice.plan(SUBSCRIPTS, *ops, memory_limit=LIMIT, tune="estimate")
    print(
        f"{SUBSCRIPTS} n={n} on {jax.devices()[0].device_kind}, jax "
        f"{jax.__version__}; the plan: chunks {plan.chunks}, executor "
        f"{plan.executor}, estimated {plan.cost.time * 1e3:.3g} ms"
    )
    programs = {}
    for name, p in variants(plan).items():
        run = einslice.running_plan(p)
        programs[name] = jax.jit(lambda *o, run=run: run(*o)).lower(*ops).compile()

    def greedy(*o):
        return jnp.einsum(SUBSCRIPTS, *o, optimize="greedy")

    programs["jnp-greedy"] = jax.jit(greedy).lower(*ops).compile()
    want = np.asarray(programs["jnp-greedy"](*ops), np.float64)
    for name, program in programs.items():
        got = np.asarray(program(*ops), np.float64)
        error = np.abs(got - want).max() / np.abs(want).max()
        assert error < 1e-3, (name, error)
    names = list(programs)
    times = interleaved_times([programs[k] for k in names], ops, args.rounds)
    peer = times[-1]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.rounds} rounds, load {load:.1f}")
    for name, t in zip(names, times, strict=True):
        paired = statistics.median(g / m for g, m in zip(peer, t, strict=True))
        temp = programs[name].memory_analysis().temp_size_in_bytes
        print(
            f"{name:16s} median {statistics.median(t) * 1e3:8.3f} ms (min "
            f"{min(t) * 1e3:.3f})  greedy/this {paired:5.2f}x (paired)  temp "
            f"{temp / 2**20:.1f} MB"
        )


if __name__ == "__main__":
    main()
