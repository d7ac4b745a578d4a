"""A reused plan's host walk against its optimized program, warm, side by side.

For each network of ``benchmarks/networks.py`` (the 17, or a fresh seed's),
the plan ``networks.py`` makes (``einslice.plan(..., memory_limit=256MB)``,
float32 / complex64, operands on JAX's default device), then in one process,
interleaved round by round: the host walk as the runner makes it
(``EXECUTORS["host"]``, the result put back on the device) on one BLAS
thread and on BLAS's own threads, and the optimized program
(``_run._optimized``: the program the runner swaps in after the walks),
each in blocks of ``--block`` calls in a row (the first of a block not
counted: XLA's and OpenBLAS's threads spin after their work, so a call
right after the other side's runs slower than either side's steady calls).
Medians after one warm-up round; the load average is printed with them.
*walks first*: whether the runner walks this plan's first calls at all
(``_choose.host_first_seconds`` > 0 and the host runs it).

Usage:
    python benchmarks/walk_vs_program.py [--fresh SEED] [--only NAME ...]
        [--rounds 7] [--seconds 6] [--block 4] [--networks-file FILE]
        [--calls N]

Runs on an accelerator as well (operands on the chip: the walk pays their
copies to the host and the result's back, as the runner's walks do).
``--calls N`` then calls a fresh plan (growth off, its rental ended at
once) until its runner has judged, N calls at most, and says what it
chose: the walk kept, the program, or still walking.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

LIMIT = 256 * 2**20


def probe(network, rounds: int, seconds: float, block: int, calls: int) -> dict:
    import jax
    import jax.numpy as jnp

    import einslice
    import networks as nw
    from einslice._exec import _host, _run
    from einslice._exec._choose import host_first_seconds
    from einslice._exec._executors import EXECUTORS
    from einslice._exec._semiring import Config

    low = (
        np.complex64 if any(np.iscomplexobj(a) for a in network.arrays) else np.float32
    )
    ops = [jnp.asarray(a, dtype=low) for a in network.arrays]
    plan = einslice.plan(*nw.interleaved(network, ops), memory_limit=LIMIT)
    config = Config()
    host = EXECUTORS["host"]
    row = {
        "name": network.name,
        "steps": len(plan.steps),
        "flops": plan.flops,
        "estimate": plan.cost.time,
        "walks_first": host_first_seconds(
            plan, on_device=jax.default_backend() != "cpu"
        )
        > 0
        and host.runs(plan),
    }
    program = _run._optimized(plan)
    start = time.perf_counter()
    jax.block_until_ready(program(plan, config, *ops))
    row["compile"] = time.perf_counter() - start
    if not host.runs(plan):
        return row
    _host.prepare_one_thread()

    def walk(single: bool):
        def call():
            if single:
                with _host.one_blas_thread():
                    out = host.run(plan, config, ops)
            else:
                out = host.run(plan, config, ops)
            return jax.block_until_ready(_run._on_device(out))

        return call

    def compiled():
        return jax.block_until_ready(program(plan, config, *ops))

    sides = {"walk1": walk(True), "walk": walk(False), "program": compiled}
    times: dict[str, list[float]] = {k: [] for k in sides}
    began = time.perf_counter()
    for r in range(rounds + 1):
        for key, call in sides.items():
            for k in range(block):
                start = time.perf_counter()
                call()
                if r and k:  # (a block's first call follows the other side's)
                    times[key].append(time.perf_counter() - start)
        if r >= 2 and time.perf_counter() - began > seconds:
            break
    for key, values in times.items():
        row[key] = statistics.median(values)
    row["rounds"] = len(times["program"]) // max(1, block - 1)
    if calls:
        row["runner"] = runner_verdict(network, ops, calls)
    return row


def runner_verdict(network, ops, calls: int) -> str:
    """What a fresh runner of the plan chose, within ``calls`` calls (``_keep``).

    Growth off: the walk-or-program rule alone, on a new plan whose rental
    ends at its first walk (its budget counted spent: the background
    compile starts at once), called until the rule has judged.
    """
    import einslice
    import networks as nw
    from einslice._exec import _run

    os.environ["EINSLICE_GROW"] = "0"
    try:
        nw._forget_trees()
        plan = einslice.plan(*nw.interleaved(network, ops), memory_limit=LIMIT)
        runner = _run._top_level_run(plan)
        runner.host_spent = runner.host_budget
        for _ in range(calls):
            plan(*ops).block_until_ready()
            keep = runner.stage.keep
            if not runner.stage.host or (keep is not None and keep.verdict):
                break
    finally:
        os.environ.pop("EINSLICE_GROW", None)
    stage = runner.stage
    keep = getattr(stage, "keep", None)
    if keep is not None and keep.verdict == "walk":
        return (
            f"walk kept ({min(keep.walks) * 1e3:.3g} ms, "
            f"program {keep.program * 1e3:.3g} ms)"
        )
    if stage.host:
        return "walking (not judged yet)"
    return "program"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--fresh", type=int)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--block", type=int, default=4)
    parser.add_argument("--networks-file", metavar="FILE")
    parser.add_argument(
        "--calls",
        type=int,
        default=0,
        help="then call a fresh plan this often and say what its runner chose",
    )
    args = parser.parse_args()
    import networks as nw

    if args.networks_file:  # (``networks.py --save-networks``: an offline machine)
        chosen = nw.load_networks(args.networks_file)
    elif args.fresh is None:
        chosen = nw.networks()
    else:
        chosen = nw.fresh_networks(args.fresh)
    if args.only:
        chosen = [n for n in chosen if n.name in args.only]
    print(
        "| network | steps | FLOPs | est. ms | walks first | compile s | walk 1 thread "
        "ms | walk BLAS threads ms | program ms | best walk / program | rounds | load "
        "| runner after --calls |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for network in chosen:
        nw.with_arrays(network)
        row = probe(network, args.rounds, args.seconds, args.block, args.calls)
        load = os.getloadavg()[0]
        if "program" not in row:
            print(f"| {row['name']} | {row['steps']} | | | no host walk |" + " |" * 8)
            continue
        best = min(row["walk1"], row["walk"])
        flops = np.log10(max(row["flops"], 1))
        ms = {k: row[k] * 1e3 for k in ("estimate", "walk1", "walk")}
        print(
            f"| {row['name']} | {row['steps']} | 10^{flops:.1f} "
            f"| {ms['estimate']:.3g} | {'yes' if row['walks_first'] else 'no'} "
            f"| {row['compile']:.2f} | {ms['walk1']:.3g} | {ms['walk']:.3g} "
            f"| {row['program'] * 1e3:.3g} | {best / row['program']:.2f} "
            f"| {row['rounds']} | {load:.2f} | {row.get('runner', '')} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
