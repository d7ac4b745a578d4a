"""Short "log" and "max" plans: walk their first calls on the host, or compile at once?

Issue 36, point 3, for the semirings other than "sum": a 12-matrix chain of
40x40 (11 steps) and a cycle of 9 tables of 4-state variables (8 steps),
float32, each configuration in a fresh interpreter (and a fresh cache
directory) so that its first call is a first call, operands already on the
default device:

- ``compile``: ``einslice.einsum(..., semiring=...)`` never walking first;
- ``walk``: the library as it is: a plan walks first where its walk is
  estimated to pay, against the whole compile estimate (until 2026-12-08
  short plans of these semirings compiled at once on an accelerator).

Prints the totals for N = 1, 10 and 100 calls (planning, compiles and walks
included, each call waited for), medians of ``--reps`` interpreters, the
configurations alternating. No data files; runs as is on the lent TPU.

Usage:
    python benchmarks/short_semiring_walk.py [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CASES = ("chain-max", "chain-log", "cycle-max", "cycle-log")
HORIZONS = (1, 10, 100)

CHILD = r"""
import json, sys, time
import numpy as np, jax, jax.numpy as jnp
case, mode = sys.argv[1], sys.argv[2]
shape, ring = case.split("-")
rng = np.random.default_rng(0)
if shape == "chain":  # 12 matrices of 40x40: 11 steps
    eq = ",".join(f"{chr(97 + k)}{chr(98 + k)}" for k in range(12)) + "->am"
    arrays = [rng.normal(size=(40, 40)) for _ in range(12)]
else:  # a cycle of 8 pairwise tables of 4-state variables and a chord
    eq = "ab,bc,cd,de,ef,fg,gh,ha,ae->"
    arrays = [rng.normal(size=(4, 4)) for _ in range(9)]
ops = jax.block_until_ready([jax.device_put(x.astype(np.float32)) for x in arrays])
import einslice
from einslice._exec import _run
if mode == "compile":
    _run.host_first_seconds = lambda *a, **k: 0.0
start = time.perf_counter()
totals = {}
for n in range(1, 101):
    jax.block_until_ready(einslice.einsum(eq, *ops, semiring=ring))
    if n in (1, 10, 100):
        totals[n] = time.perf_counter() - start
print(json.dumps(totals))
"""


def _run(case: str, mode: str) -> dict[str, float]:
    env = dict(os.environ, EINSLICE_CACHE_DIR=tempfile.mkdtemp(prefix="escache-"))
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CHILD, case, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"{case} {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    args = parser.parse_args()
    for case in args.cases:
        got: dict[str, list] = {"compile": [], "walk": []}
        for rep in range(args.reps):
            modes = ("compile", "walk") if rep % 2 == 0 else ("walk", "compile")
            for mode in modes:
                got[mode].append(_run(case, mode))
        cells = []
        for n in HORIZONS:
            c = statistics.median(t[str(n)] for t in got["compile"])
            w = statistics.median(t[str(n)] for t in got["walk"])
            cells.append(f"N={n}: walk {w * 1e3:7.1f} ms, compile {c * 1e3:7.1f} ms")
        print(f"{case:10s} " + " | ".join(cells), flush=True)
    print("load average:", os.getloadavg())


if __name__ == "__main__":
    main()
