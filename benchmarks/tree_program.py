"""Tree quality apart from program quality (issue 36, point 3): warm calls.

For each network of ``benchmarks/networks.py`` named on the command line
(``--fresh SEED``: of its fresh networks), the trees: einslice's own
(``einslice.plan`` at the limit, ``optimize="auto"``: the first plan),
growth's (``--budget`` > 0: the search a reused plan's runner makes at that
budget, ``_planner.grown_plans`` as ``_grow.grown_plans`` calls it, and its
runner-up tree: the trees a runner times after ~2 x budget estimated
seconds of calls; ``--matmul-rate R``: the same search again under the CPU
profile with that matmul rate, its trees planned under the default profile,
as growth would time them) and cotengra's (the ``HyperOptimizer`` search
``networks.py`` gives its ``ctg-jax`` peer, ``--cotengra-seconds``). On each
tree, the programs (``--executors``):

- ``einslice``: einslice's own steps (executor "einslice"), jitted with the
  options its runner's optimized program gets;
- ``xla``: the plain lowering (executor "xla": one ``jnp.einsum`` along the
  plan's path), jitted the same way;
- ``ctg-jax``: cotengra's own ``tree.contract(..., backend="jax")``, as
  ``networks.py`` calls it (eager: one dispatch per contraction);
- ``ctg-jit``: the same under ``jax.jit``.

All are timed in interleaved rounds (each program called for ``--keep``
seconds per round after one discarded call), float32; the median per
program is printed with the load average.

Usage:
    python benchmarks/tree_program.py [--rounds 7] [--keep 0.3]
        [--cotengra-seconds 5] [--limit 256MB] [--budget 0] [--fresh SEED]
        [--matmul-rate R] [--executors einslice,xla] NAME...
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import networks as nets


def programs(
    network,
    limit: int,
    seconds: float,
    budget: float = 0.0,
    executors: tuple[str, ...] = ("einslice", "xla"),
    matmul_rate: float = 0.0,
) -> dict:
    """name -> (zero-argument call, note) for each tree and program.

    ``budget`` > 0: growth's trees too, searched at that budget (estimated
    seconds), as a runner's growth would (`_grow.GROW_MAX_TRIALS` trials);
    ``matmul_rate`` > 0: also under the CPU profile with that rate.
    """
    import jax
    import jax.numpy as jnp

    import einslice
    from einslice._exec._grow import GROW_MAX_TRIALS
    from einslice._exec._run import _optimized
    from einslice._exec._semiring import Config
    from einslice._plan import _planner
    from einslice._plan._profile import CPU_DEFAULT
    from einslice._plan._search import TreeSearch

    ops = [jnp.asarray(a, dtype=np.float32) for a in network.arrays]
    args = nets.interleaved(network, ops)
    own = einslice.plan(*args, memory_limit=limit)
    trees = [("own", own)]
    request = _planner.grown_request(own)
    if budget > 0 and request is not None:
        search = TreeSearch(trials=GROW_MAX_TRIALS, runs=10**4, budget=budget)
        start = time.perf_counter()
        grown, second = _planner.grown_plans(request, search)
        print(
            f"  (growth's search at budget {budget:g}: "
            f"{time.perf_counter() - start:.1f} s)"
        )
        trees += [("grown", grown)] + ([("runner-up", second)] if second else [])
    if budget > 0 and request is not None and matmul_rate > 0:
        profile = dataclasses.replace(CPU_DEFAULT, matmul_flops=matmul_rate)
        other = dataclasses.replace(request, profile=profile)
        search = TreeSearch(trials=GROW_MAX_TRIALS, runs=10**4, budget=budget)
        for label, found in zip(
            ("grown@rate", "runner-up@rate"),
            _planner.grown_plans(other, search),
            strict=True,
        ):
            if found is not None:  # (the tree, planned as growth would time it)
                plan = einslice.plan(*args, memory_limit=limit, optimize=found.path)
                trees.append((label, plan))
    tree: Any = nets.cotengra_tree(network, limit, 4, seconds)[0]
    theirs = einslice.plan(*args, memory_limit=limit, optimize=tree.get_path())
    trees.append(("ctg", theirs))
    config = Config()
    out: dict = {}
    for label, plan in trees:
        note = (
            f"est {plan.cost.time * 1e3:.3g} ms, 10^{math.log10(plan.flops):.2f} "
            f"FLOPs, {len(plan.chunks)} sliced"
        )
        for executor in executors:
            p = dataclasses.replace(plan, executor=executor)
            program = _optimized(p)
            out[f"{label}/{executor}"] = (
                lambda program=program, p=p: program(p, config, *ops),
                note,
            )
    ctg_note = (
        f"{tree.nslices} slices, 10^{math.log10(2 * tree.contraction_cost()):.2f} FLOPs"
    )
    out["ctg/ctg-jax"] = (lambda: tree.contract(ops, backend="jax"), ctg_note)
    jitted = jax.jit(lambda *xs: tree.contract(xs, backend="jax"))
    out["ctg/ctg-jit"] = (lambda: jitted(*ops), ctg_note)
    return out


def timed(calls: dict, rounds: int, keep: float) -> dict[str, float]:
    """Median seconds per call of each, interleaved rounds after warm-up."""
    import jax

    for call, _ in calls.values():  # compile and warm
        for _ in range(3):
            jax.block_until_ready(call())
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, (call, _) in calls.items():
            jax.block_until_ready(call())
            start = time.perf_counter()
            while True:
                t = time.perf_counter()
                jax.block_until_ready(call())
                times[name].append(time.perf_counter() - t)
                if time.perf_counter() - start >= keep:
                    break
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("names", nargs="+")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--keep", type=float, default=0.3)
    ap.add_argument("--cotengra-seconds", type=float, default=5.0)
    ap.add_argument("--limit", default="256MB")
    ap.add_argument("--budget", type=float, default=0.0)
    ap.add_argument("--fresh", type=int, default=None)
    ap.add_argument("--executors", default="einslice,xla")
    ap.add_argument("--matmul-rate", type=float, default=0.0)
    args = ap.parse_args()

    import jax

    from einslice._plan._memory import parse_memory_limit

    limit = parse_memory_limit(args.limit)
    pool = nets.networks() if args.fresh is None else nets.fresh_networks(args.fresh)
    by_name = {n.name: n for n in pool}
    executors = tuple(args.executors.split(","))
    print(f"jax {jax.__version__}; {args.rounds} rounds of {args.keep:g} s each")
    for name in args.names:
        network = nets.with_arrays(by_name[name])
        print(f"\n{name}:")
        calls = programs(
            network,
            limit,
            args.cotengra_seconds,
            args.budget,
            executors,
            args.matmul_rate,
        )
        load = os.getloadavg()[0]
        medians = timed(calls, args.rounds, args.keep)
        fastest = min(medians.values())
        print(f"{name} (load {load:.2f} -> {os.getloadavg()[0]:.2f})")
        for key, seconds in medians.items():
            print(
                f"  {key:16s} {seconds * 1e3:9.3f} ms  {seconds / fastest:5.2f}x  "
                f"{calls[key][1]}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
