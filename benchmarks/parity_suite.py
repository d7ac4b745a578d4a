"""einslice's default vs jax.jit(jnp.einsum(..., optimize="greedy")): the parity suite.

Issue 35 points 1 and 2, on the formulas of ``einslice.bench._parity``
(16 everyday einsums, CPU sizes on a CPU and accelerator sizes elsewhere):

- warm parity: each program compiled once, timed in interleaved rounds
  (medians, minima), and whether the two optimized HLOs are the same program
  (then the ratio is 1 by construction);
- first calls (``--first``): plan, trace, compile and run of einslice's
  default call and of jnp's, each from emptied caches in this one process
  (``_parity.fresh``; JAX's persistent compilation cache off), after both
  libraries were imported and warmed on an unrelated formula.

    PYTHONPATH=src python benchmarks/parity_suite.py [--only tucker,cp]
        [--rounds 15] [--first] [--repeats 3] [--platform tpu] [--budget 170]

``--tuned`` times the program that ``tune="auto"`` settles on (measured now,
as the background measurement of a first call would); default: the
estimate's, which every call runs until then. Prints one line per formula
as it goes, then the geometric means; ``--budget`` seconds stop it early (the
parity part at 70% of it when first calls follow).
"""

from __future__ import annotations

import argparse
import math
import os
import time

import jax

from einslice.bench import _parity


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--platform", default=jax.default_backend())
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--first", action="store_true", help="also first calls")
    ap.add_argument("--first-only", action="store_true")
    ap.add_argument("--first-of", default="", help="first calls of these only")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--tuned", action="store_true")
    ap.add_argument("--budget", type=float, default=math.inf)
    args = ap.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    start = time.perf_counter()
    formulas = [
        f
        for f in _parity.parity_suite(args.platform)
        if not args.only or f.name in args.only.split(",")
    ]
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip

    def within_budget(share: float = 1.0) -> bool:
        return time.perf_counter() - start < args.budget * share

    rows = []
    if not args.first_only:
        for f in formulas:
            if not within_budget(0.7 if args.first else 1.0):
                print("(budget spent)", flush=True)
                break
            rows += _parity.parity(
                [f], args.rounds, log=lambda s: print(s, flush=True), tuned=args.tuned
            )
        if rows:
            print(_summary([r.ratio for r in rows], "greedy/einslice (HLO-equal: 1)"))
            same = sum(r.same_program for r in rows)
            print(f"{same} of {len(rows)} compile to jnp greedy's program", flush=True)
    if args.first or args.first_only:
        firsts = []
        chosen = args.first_of.split(",") if args.first_of else None
        for f in [f for f in formulas if chosen is None or f.name in chosen]:
            if not within_budget():
                print("(budget spent)", flush=True)
                break
            firsts += _parity.first_calls(
                [f], log=lambda s: print(s, flush=True), repeats=args.repeats
            )
        if firsts:
            print(_summary([r.ratio for r in firsts], "first call einslice/jnp"))
    print(f"load {os.getloadavg()[0]:.1f}; {time.perf_counter() - start:.0f} s")


def _summary(ratios: list[float], what: str) -> str:
    mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return (
        f"{what}: geometric mean {mean:.2f}x, min {min(ratios):.2f}x, "
        f"max {max(ratios):.2f}x over {len(ratios)}"
    )


if __name__ == "__main__":
    main()
