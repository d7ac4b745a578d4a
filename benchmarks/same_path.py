"""Per-step overhead on one path: einslice, jnp.einsum and opt_einsum (issue 23.2).

For each network of ``benchmarks/networks.py`` named on the command line,
opt_einsum's greedy path (the one ``jnp.einsum(optimize="greedy")`` takes)
is given to all three: ``einslice.plan(..., optimize=path)`` at the memory
limit, ``jax.jit(jnp.einsum(..., optimize=path))`` and
``opt_einsum.contract_expression(..., optimize=path)`` on numpy. einslice is
called until its runner is steady (host walk, compiled, then optimized at
its 100th compiled call; an explicit path never grows); then the three are
timed in interleaved rounds of one block of calls each (``--settle`` +
``--keep`` seconds, the calls of the first ``--settle`` not kept; see
`_rounds`), float32, and the median per method is reported with
einslice's ratio to the faster peer (> 1: einslice faster). Where the path
does not fit the limit unsliced, einslice slices it and the row says so.

Usage:
    python benchmarks/same_path.py [--rounds 9] [--settle 0.2] [--keep 0.3]
        [--limit 256MB] NAME...
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import networks as nets


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="+")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--settle", type=float, default=0.2)
    ap.add_argument("--keep", type=float, default=0.3)
    ap.add_argument("--limit", default="256MB")
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import opt_einsum

    import einslice
    from einslice._exec._run import _top_level_run

    by_name = {n.name: n for n in nets.networks()}
    load = os.getloadavg()[0]
    print(
        f"load average {load:.2f}; jax {jax.__version__}; {args.rounds} rounds "
        f"of {args.settle + args.keep:g} s per method, the first {args.settle:g} s "
        "of each not kept"
    )
    print(
        "| network | steps | sliced | einslice ms | jnp same path ms "
        "| oe-numpy same path ms | einslice ÷ faster peer |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.names:
        network = nets.with_arrays(by_name[name])
        low, _ = nets._dtypes(network)
        text = nets.subscripts(network)
        host = [np.asarray(a, dtype=low) for a in network.arrays]
        ops = [jnp.asarray(a) for a in host]
        path, _ = opt_einsum.contract_path(text, *host, optimize="greedy")
        plan = einslice.plan(
            *nets.interleaved(network, ops), memory_limit=args.limit, optimize=path
        )
        runner = _top_level_run(plan)
        while not runner.steady:
            plan(*ops).block_until_ready()
        plan(*ops).block_until_ready()
        jitted = jax.jit(
            lambda *xs, text=text, path=path: jnp.einsum(text, *xs, optimize=path)
        )
        jitted(*ops).block_until_ready()
        expr = opt_einsum.contract_expression(
            text, *[a.shape for a in host], optimize=path
        )
        expr(*host)
        calls = {
            "einslice": (lambda p, xs: p(*xs).block_until_ready(), plan, ops),
            "jnp": (lambda f, xs: f(*xs).block_until_ready(), jitted, ops),
            "oe": (lambda f, xs: f(*xs), expr, host),
        }
        times = _rounds(calls, args.rounds, args.settle, args.keep)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        peer = min(med["jnp"], med["oe"])
        print(
            f"| {name} | {len(plan.steps)} | {plan.n_chunks > 1} "
            f"| {med['einslice']:.3f} | {med['jnp']:.3f} | {med['oe']:.3f} "
            f"| {peer / med['einslice']:.2f}x |",
            flush=True,
        )
    return 0


def _rounds(
    calls: dict, rounds: int, settle: float, keep: float
) -> dict[str, list[float]]:
    """Each call's times over ``rounds`` rounds of one block of each method.

    A block calls one method for ``settle + keep`` seconds and keeps the
    times of the calls that start after ``settle`` (and at least one).
    Switching methods costs: OpenBLAS's threads spin for a while after a
    numpy product and slow the next XLA program on 2 cores (one call of
    each per round made random-connected-60's XLA programs 1.6x slower;
    1.0x with OPENBLAS_NUM_THREADS=1), and a program called again after a
    pause runs slower for a while (tree-100, 1 ms a call: 1.16 ms in blocks
    of 20 calls after a 0.25 s pause, 0.85 ms in blocks of 100). A user
    calls one of them, not all three in turn. Each round starts one method
    later than the one before, so no method always follows the same one.
    """
    times: dict[str, list[float]] = {k: [] for k in calls}
    keys = list(calls)
    for r in range(rounds):
        for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
            call, fn, operands = calls[key]
            begin = time.perf_counter()
            kept = []
            while not kept or time.perf_counter() - begin < settle + keep:
                start = time.perf_counter()
                call(fn, operands)
                if start - begin >= settle:
                    kept.append(time.perf_counter() - start)
            times[key].extend(kept)
    return times


if __name__ == "__main__":
    raise SystemExit(main())
