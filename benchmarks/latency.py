"""The latency of a reused plan's calls over a minute, growth on and off.

A service or a training loop calls one plan again and again and waits for
each result; none of its calls may wait for work it did not ask for (a
growth search, the timing of a grown plan, the optimized recompile: issue
36, point 2). This script builds a network with ``einsum-benchmark``'s
generators (default: a random regular graph of 50 nodes, degree 4, bond 2,
seed 0: a call of about half a millisecond on 2 cores; or one of
``benchmarks/networks.py``'s by name, lattice-8x8-d4, say), plans it under
``optimize="auto"``, and calls the plan for ``--seconds`` in a loop, timing
each call to its result (``block_until_ready``). Each setting runs in a
fresh process with an empty tree cache (``EINSLICE_CACHE_DIR`` in a
temporary directory), growth on (the default) and off (``EINSLICE_GROW=0``),
alternating, ``--rounds`` times each.

Per run: the first call (host walk or compile: work the call asked for),
then the median, p99, p99.9 and maximum of every later call, the slowest
calls with their index, and the runner's growths (``_run._TopLevelRun
.growths``). The bound checked: growth on's p99.9 and maximum at most 2x
growth off's plus 50 ms.

Usage:
    python benchmarks/latency.py [--seconds 60] [--rounds 1]
        [--network randreg-50-4|lattice-8x8-d4|...] [--out FILE]
    python benchmarks/latency.py --save net.json   # on a machine with the generators
    python benchmarks/latency.py --load net.json   # on one without them
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

# The networks this script knows: name -> einsum_benchmark.generators.random
# .regular's (n, degree, d_min, d_max, seed).
NETWORKS = {
    "randreg-50-4": (50, 4, 2, 2, 0),  # 0.45-0.6 ms a call (2 cores)
    "randreg-50-3": (50, 3, 4, 6, 1),  # networks.py's randreg-50-d4-6: ~5 ms
}
# How many of the slowest calls a run reports, with their index.
SLOWEST = 8
# The last seconds of a run whose calls' median is reported apart (the warm
# call once growth has settled, or what growth still costs then).
TAIL = 10.0


def _network(name: str):
    import importlib

    import networks as nw

    if name.endswith(".json"):  # (saved by --save)
        saved = json.loads(Path(name).read_text())
        network = nw.Network(
            saved["name"],
            "randreg",
            [tuple(t) for t in saved["terms"]],
            tuple(saved["output"]),
            saved["sizes"],
        )
        return nw.with_arrays(network)

    if name not in NETWORKS:  # (one of benchmarks/networks.py's, by name)
        return nw.with_arrays(next(n for n in nw.networks() if n.name == name))
    # Any: some generators are defined as raisers when an extra is missing
    gen: Any = importlib.import_module("einsum_benchmark.generators")
    n, degree, lo, hi, seed = NETWORKS[name]
    format_string, shapes = gen.random.regular(n, degree, d_min=lo, d_max=hi, seed=seed)
    return nw.with_arrays(nw._from_format(name, "randreg", format_string, shapes))


def child(name: str, seconds: float) -> dict:
    """Plan ``name``, call it for ``seconds``; the latencies' summary."""
    import jax.numpy as jnp

    import einslice
    import networks as nw
    from einslice._exec import _run

    network = _network(name)
    ops = [jnp.asarray(a, dtype=np.float32) for a in network.arrays]
    start = time.perf_counter()
    plan = einslice.plan(*nw.interleaved(network, ops))
    planning = time.perf_counter() - start
    runner = _run._top_level_run(plan)
    times, stamps = [], []
    end = time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        plan(*ops).block_until_ready()
        now = time.perf_counter()
        times.append(now - start)
        stamps.append(now)
        if now > end:
            break
    first, later = times[0], np.asarray(times[1:])
    # the calls of the last TAIL seconds: where growth has settled, if it has
    tail = [t for t, at in zip(times, stamps, strict=True) if at > end - TAIL]
    slowest = np.argsort(later)[::-1][:SLOWEST]
    settle = getattr(_run, "settle", None)
    if settle is not None:  # (growth's pending background work, if any)
        settle(plan)
    return {
        "planning": planning,
        "first": first,
        "calls": len(times),
        "median": float(np.median(later)),
        "tail": float(np.median(tail)),
        "p99": float(np.quantile(later, 0.99)),
        "p999": float(np.quantile(later, 0.999)),
        "max": float(later.max()),
        "slowest": [(int(k) + 2, float(later[k])) for k in slowest],
        "estimated": plan.cost.time,
        "held": einslice.running_plan(plan).cost.time,
        "growths": [
            {
                "call": g.call,
                "budget": g.budget,
                "seconds": g.seconds,
                "before": g.before,
                "found": g.found,
                "switched": g.switched,
                "timed": list(g.timed),
            }
            for g in runner.growths
        ],
        "load": os.getloadavg()[0],
    }


def _run_child(name: str, seconds: float, grow: bool) -> dict:
    env = dict(os.environ, EINSLICE_GROW="1" if grow else "0")
    env["EINSLICE_CACHE_DIR"] = tempfile.mkdtemp(prefix="einslice-latency-")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])]
    )
    command = [sys.executable, __file__, "--child", name, "--seconds", str(seconds)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}"


def report(name, seconds, runs, command) -> str:
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    lines = [
        f"# Latency of a reused plan's calls ({name}, {seconds:g} s a run)",
        "",
        f"- command: `{command}`",
        f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}; commit {commit}; "
        f"{os.cpu_count()} cores",
        "- each run: a fresh process, an empty tree cache; every call timed to "
        "its result; the first call (host walk or compile) apart",
        "",
        "| growth | load | calls | first ms | median ms | last 10 s median ms "
        "| p99 ms | p99.9 ms | max ms | slowest calls (index: ms) "
        "| growths (call: s, switched) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for grow, r in runs:
        slow = ", ".join(f"{k}: {_ms(t)}" for k, t in r["slowest"][:4])
        growths = ", ".join(
            f"{g['call']}: {g['seconds']:.1f}{' ✓' if g['switched'] else ''}"
            for g in r["growths"]
        )
        lines.append(
            f"| {'on' if grow else 'off'} | {r['load']:.2f} | {r['calls']} "
            f"| {_ms(r['first'])} | {_ms(r['median'])} | {_ms(r.get('tail', np.nan))} "
            f"| {_ms(r['p99'])} "
            f"| {_ms(r['p999'])} | {_ms(r['max'])} | {slow} | {growths or '-'} |"
        )
    on = [r for g, r in runs if g]
    off = [r for g, r in runs if not g]
    if on and off:
        lines.append("")
        for key, label in (("p999", "p99.9"), ("max", "maximum")):
            worst_on = max(r[key] for r in on)
            bound = 2 * max(r[key] for r in off) + 0.050
            verdict = "holds" if worst_on <= bound else "does NOT hold"
            lines.append(
                f"- {label}: growth on {_ms(worst_on)} ms, bound 2x off + 50 ms "
                f"= {_ms(bound)} ms: {verdict}"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--network",
        default="randreg-50-4",
        help=f"{', '.join(NETWORKS)} or a name in benchmarks/networks.py "
        "(lattice-8x8-d4, randreg-50-d4-6, ...)",
    )
    parser.add_argument("--only", choices=("on", "off"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--save", type=Path, help="write the network as JSON, exit")
    parser.add_argument("--load", type=Path, help="the network from --save's JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.seconds)))
        return 0
    if args.save:
        network = _network(args.network)
        fields = ("name", "terms", "output", "sizes")
        args.save.write_text(json.dumps({k: getattr(network, k) for k in fields}))
        return 0
    name = str(args.load.resolve()) if args.load else args.network
    runs = []
    for _ in range(args.rounds):
        for grow in (False, True):
            if args.only and args.only != ("on" if grow else "off"):
                continue
            runs.append((grow, _run_child(name, args.seconds, grow)))
            print(json.dumps(runs[-1]), flush=True)
    command = "python benchmarks/latency.py " + " ".join(sys.argv[1:])
    text = report(Path(name).stem, args.seconds, runs, command)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
