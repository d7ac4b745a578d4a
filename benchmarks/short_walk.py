"""Short "sum" plans: walk their first calls on the host, or compile at once?

Issue 36, point 3 ("run small chains on the host's BLAS"): einsum-benchmark's
12-matrix chains (fresh seeds 7 and 11 of ``networks.py``) and its 40-matrix
chain, each configuration in a fresh interpreter so that its first call is a
first call, operands already on the default device:

- ``jnp``: ``jnp.einsum(optimize="greedy")`` called as a user calls it;
- ``compile``: ``einslice.plan`` and its calls, never walking first;
- ``walk``: the library as it is, where a plan walks first when its walk is
  estimated to pay (until 2026-12-07 only "sum" plans of 16 steps or more
  did: this mode then lifted the step count).

Prints the totals for N = 1, 10 and 100 calls (planning included, each call
waited for), the warm call (median of the last 20) and the first call,
medians of ``--reps`` interpreters. Machines without einsum-benchmark (the
lent TPU) read the chains from ``--cases FILE``, written here by
``--write-cases FILE``.

Usage:
    python benchmarks/short_walk.py [--reps 3] [--cases FILE | --write-cases FILE]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
from typing import Any

# name -> (number of matrices, einsum-benchmark seed), as networks.py makes them
CHAINS = {"chain12-fresh7": (12, 15), "chain12-fresh11": (12, 19), "chain40": (40, 12)}

CHILD = r"""
import json, statistics, sys, time
import numpy as np, jax, jax.numpy as jnp
eq, shapes = json.loads(sys.argv[1])
mode = sys.argv[2]
rng = np.random.default_rng(0)
ops = [jnp.asarray(rng.random(s, dtype=np.float32) / max(s)) for s in shapes]
ops = jax.block_until_ready([jax.device_put(x) for x in ops])
import einslice
from einslice._exec import _run
if mode == "compile":
    _run.host_first_seconds = lambda *a, **k: 0.0
start = time.perf_counter()
if mode == "jnp":
    f = lambda *o: jnp.einsum(eq, *o, optimize="greedy")
else:
    f = einslice.plan(eq, *shapes)
setup = time.perf_counter() - start
times = []
for _ in range(100):
    s = time.perf_counter()
    jax.block_until_ready(f(*ops))
    times.append(time.perf_counter() - s)
got = {f"n{n}": setup + sum(times[:n]) for n in (1, 10, 100)}
got.update(warm=statistics.median(times[-20:]), first=times[0])
print("RESULT", json.dumps(got))
"""


def chains() -> dict[str, Any]:
    gen: Any = importlib.import_module("einsum_benchmark.generators")
    out = {}
    for name, (n, seed) in CHAINS.items():
        eq, *shapes = gen.structured.matrix_chain(
            n, 10, 600, is_shuffle=True, seed=seed
        )[:2]
        out[name] = [eq, [[int(d) for d in s] for s in shapes[0]]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", help="read the chains from this JSON file")
    parser.add_argument("--write-cases", help="write the chains to this file and stop")
    args = parser.parse_args()
    cases = json.load(open(args.cases)) if args.cases else chains()
    if args.write_cases:
        json.dump(cases, open(args.write_cases, "w"))
        return
    for name, case in cases.items():
        rows: dict[str, list[dict]] = {}
        for _ in range(args.reps):
            for mode in ("jnp", "compile", "walk"):
                run = subprocess.run(
                    [sys.executable, "-c", CHILD, json.dumps(case), mode],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                lines = [x for x in run.stdout.splitlines() if x.startswith("RESULT ")]
                if not lines:
                    print(name, mode, "failed:", run.stderr[-1500:])
                    continue
                rows.setdefault(mode, []).append(json.loads(lines[0][7:]))
        for mode, got in rows.items():
            m = {k: 1e3 * statistics.median(r[k] for r in got) for k in got[0]}
            print(
                f"{name:16s} {mode:8s} N=1 {m['n1']:8.1f} ms  N=10 {m['n10']:8.1f} ms  "
                f"N=100 {m['n100']:8.1f} ms  warm {m['warm']:6.2f} ms  "
                f"first call {m['first']:7.1f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
