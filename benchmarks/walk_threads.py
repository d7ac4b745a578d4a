"""The host walk's BLAS threads: one against BLAS's own, and what a runner chooses.

Self-contained (numpy, JAX, einslice; no network generators): a 2D lattice
of bond 4 (8x8), one of bond 3 (10x10) and a 12-matrix chain, each planned
at 256 MB. For each: a walk (``_host.run_on_host``, operands on the host)
on BLAS's own threads and on one (``_host.one_blas_thread``), interleaved,
medians of ``--rounds`` after one warm-up; then a fresh runner's first
``--calls`` calls of the plan on device operands (the walk's choice,
``_exec/_threads.py``), each timed, with the side each walk took.

Usage:
    python benchmarks/walk_threads.py [--rounds 7] [--calls 30]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import opt_einsum as oe

import einslice
from einslice._exec import _host
from einslice._exec._run import _top_level_run


def lattice(side: int, bond: int, rng) -> tuple[str, list[np.ndarray]]:
    """An open ``side`` x ``side`` lattice, one tensor a site, bond ``bond``."""
    edges: dict[tuple, str] = {}

    def edge(a, b) -> str:
        key = (min(a, b), max(a, b))
        if key not in edges:
            edges[key] = oe.get_symbol(len(edges))
        return edges[key]

    terms, arrays = [], []
    for r in range(side):
        for c in range(side):
            near = [(r + dr, c + dc) for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1))]
            term = "".join(
                edge((r, c), n) for n in near if 0 <= n[0] < side and 0 <= n[1] < side
            )
            terms.append(term)
            arrays.append(rng.uniform(0.5, 1.0, (bond,) * len(term)) / bond)
    return ",".join(terms) + "->", arrays


def chain(n: int, rng) -> tuple[str, list[np.ndarray]]:
    """``n`` matrices of sizes 50-400 multiplied in a row."""
    sizes = rng.integers(50, 400, n + 1)
    terms = [oe.get_symbol(k) + oe.get_symbol(k + 1) for k in range(n)]
    arrays = [
        rng.uniform(0.5, 1.0, (sizes[k], sizes[k + 1])) / sizes[k] for k in range(n)
    ]
    return ",".join(terms) + "->" + oe.get_symbol(0) + oe.get_symbol(n), arrays


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(11)
    cases = {
        "lattice-8x8-d4": lattice(8, 4, rng),
        "lattice-10x10-d3": lattice(10, 3, rng),
        "matrix-chain-12": chain(12, rng),
    }
    print(
        f"backend {jax.default_backend()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    _host.prepare_one_thread()
    print("one-thread control:", _host.one_thread_state())
    for name, (eq, arrays) in cases.items():
        host = [a.astype(np.float32) for a in arrays]
        plan = einslice.plan(eq, *host, memory_limit=256 * 2**20)
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds + 1):
            for one in (False, True):
                with _host.one_blas_thread() if one else contextlib.nullcontext():
                    start = time.perf_counter()
                    _host.run_on_host(plan, host)
                    times[one].append(time.perf_counter() - start)
        own, single = (statistics.median(times[k][1:]) * 1e3 for k in (False, True))
        print(
            f"{name}: {len(plan.steps)} steps; walk on BLAS's own threads "
            f"{own:.2f} ms, on one {single:.2f} ms (medians of {args.rounds})"
        )
        device = [jnp.asarray(a) for a in host]
        # (another limit: a plan, and a runner, of its own)
        fresh = einslice.plan(eq, *device, memory_limit=256 * 2**20 - 1)
        runner = _top_level_run(fresh)
        line = []
        for _ in range(args.calls):
            start = time.perf_counter()
            jax.block_until_ready(fresh(*device))
            line.append(f"{(time.perf_counter() - start) * 1e3:.1f}")
        print(
            f"  first {args.calls} calls (ms): {' '.join(line)}\n"
            f"  walks {runner.blas.walks}, chosen one thread: {runner.host_single}, "
            f"fastest walk own/one: {runner.host_best[False] * 1e3:.2f}/"
            f"{runner.host_best[True] * 1e3:.2f} ms"
        )


if __name__ == "__main__":
    main()
