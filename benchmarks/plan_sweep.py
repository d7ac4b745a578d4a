"""Planning of two source trees side by side: time, chosen tree, warm calls.

For each network of ``benchmarks/networks.py`` (the 17 and ``--fresh``
seeds' networks, or those named), one worker process per source tree
(``--src A --src B``: directories put first on ``PYTHONPATH``, e.g. main's
``src`` and a branch's) plans it with ``einslice.plan(...,
memory_limit=LIMIT)`` from emptied caches (``networks._forget_trees``, a
new cache directory each time); the workers take turns per network (the
order alternating), for ``--rounds`` rounds. Printed: a markdown table of
each side's median planning seconds, its tree search's estimate and trials
and the plan's FLOPs, and whether the two trees differ. No call is made.

``--warm``: for each network whose trees differ, both trees (each side's
``plan.path``) are jitted here, ``einslice.einsum(..., optimize=path)``
under ``jax.jit``, checked to agree and called in ``--calls`` interleaved
rounds; the medians are printed. A timing: run it under the measurement
lock (``flock /tmp/einslice-measure.lock nice -n 5 python ...``).

Usage:
    python benchmarks/plan_sweep.py --src /work/main/src --src src
        [--fresh 7 --fresh 11] [--no-main17] [--rounds 2] [--warm]
        [--calls 40] [--limit 256MB] [NAME...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _network(name: str):
    import networks as nw

    if name.startswith("fresh"):
        chosen = nw.fresh_networks(int(name[5:].split("-")[0]))
    else:
        chosen = nw.networks()
    return nw.with_arrays(next(n for n in chosen if n.name == name))


def worker(limit_text: str) -> None:
    """Plan each network named on stdin; one JSON line each on stdout."""
    import jax.numpy as jnp

    import einslice
    import networks as nw
    from einslice._plan import _planner
    from einslice._plan._memory import parse_memory_limit

    limit = parse_memory_limit(limit_text)
    print("ready", flush=True)
    for line in sys.stdin:
        net = _network(line.strip())
        ops = [jnp.asarray(a, dtype=nw._dtypes(net)[0]) for a in net.arrays]
        nw._forget_trees()
        found, search = [], _planner.search_tree

        def recording(*args, search=search, found=found, **kwargs):
            found.append(search(*args, **kwargs))
            return found[-1]

        _planner.search_tree = recording
        try:
            start = time.perf_counter()
            plan = einslice.plan(*nw.interleaved(net, ops), memory_limit=limit)
            seconds = time.perf_counter() - start
        finally:
            _planner.search_tree = search
        tree = found[0] if found else None
        print(
            json.dumps(
                {
                    "name": net.name,
                    "seconds": seconds,
                    "flops": math.log10(max(plan.flops, 1)),
                    "path": [list(map(int, step)) for step in plan.path],
                    "est_ms": None if tree is None else tree.time * 1e3,
                    "trials": None if tree is None else tree.trials,
                }
            ),
            flush=True,
        )


def _start(src: str, limit: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{HERE}")
    env.setdefault("JAX_PLATFORMS", "cpu")
    process = subprocess.Popen(
        [sys.executable, __file__, "--worker", "--limit", limit],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def _ask(process: subprocess.Popen, name: str) -> dict:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(name + "\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())


def warm(name: str, paths: list, calls: int, limit_text: str) -> str:
    """Both trees of ``name`` jitted, interleaved calls: their medians."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import einslice
    import networks as nw
    from einslice._plan._memory import parse_memory_limit

    net, limit = _network(name), parse_memory_limit(limit_text)
    ops = [jnp.asarray(a, dtype=nw._dtypes(net)[0]) for a in net.arrays]
    functions = [
        jax.jit(
            lambda *o, path=[tuple(s) for s in path]: einslice.einsum(
                *nw.interleaved(net, list(o)), optimize=path, memory_limit=limit
            )
        )
        for path in paths
    ]
    values = [np.asarray(f(*ops).block_until_ready()) for f in functions]
    scale = float(np.abs(values[0]).max()) or 1.0
    agree = np.allclose(values[0], values[1], rtol=1e-3, atol=1e-6 * scale)
    times: list[list[float]] = [[], []]
    for r in range(calls):
        for k in (0, 1) if r % 2 == 0 else (1, 0):
            start = time.perf_counter()
            functions[k](*ops).block_until_ready()
            times[k].append(time.perf_counter() - start)
    a, b = (statistics.median(t[2:]) * 1e3 for t in times)
    return (
        f"{name}: warm median {a:.3g} ms (first source) and {b:.3g} ms "
        f"(second), {a / b:.2f}x; values agree: {agree} ({calls} rounds, "
        f"load {os.getloadavg()[0]:.2f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--src", action="append", default=[])
    parser.add_argument("--fresh", type=int, action="append", default=[])
    parser.add_argument("--no-main17", action="store_true")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--limit", default="256MB")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.worker:
        worker(args.limit)
        return 0
    if len(args.src) != 2:
        parser.error("give two source trees: --src A --src B")
    sys.path.insert(0, str(HERE))
    import networks as nw

    names = list(args.names)
    if not names:
        names = [] if args.no_main17 else [n.name for n in nw.networks()]
        for seed in args.fresh:
            names += [n.name for n in nw.fresh_networks(seed)]
    load = os.getloadavg()[0]
    workers = [_start(src, args.limit) for src in args.src]
    for w in workers:  # (imports and first-call costs, not counted)
        _ask(w, names[0])
    rows: dict[str, list[list[dict]]] = {n: [[], []] for n in names}
    for r in range(args.rounds):
        for i, name in enumerate(names):
            for k in (0, 1) if (i + r) % 2 == 0 else (1, 0):
                rows[name][k].append(_ask(workers[k], name))
    for w in workers:
        assert w.stdin is not None
        w.stdin.close()
        w.wait()
    print(
        f"sources: {args.src[0]} (a), {args.src[1]} (b); load {load:.2f} -> "
        f"{os.getloadavg()[0]:.2f}; median of {args.rounds} rounds\n"
    )
    print(
        "| network | planning a (s) | planning b (s) | est. a (ms) | est. b (ms) "
        "| FLOPs a | FLOPs b | trials a/b | tree |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    changed, logs = [], [[], []]
    for name, (a, b) in rows.items():
        med = [statistics.median(x["seconds"] for x in side) for side in (a, b)]
        for k in (0, 1):
            logs[k].append(math.log(med[k]))
        same = a[0]["path"] == b[0]["path"]
        if not same:
            changed.append(name)

        def est(x):
            return "-" if x["est_ms"] is None else f"{x['est_ms']:.3g}"

        print(
            f"| {name} | {med[0]:.2f} | {med[1]:.2f} | {est(a[0])} | {est(b[0])} "
            f"| 10^{a[0]['flops']:.2f} | 10^{b[0]['flops']:.2f} "
            f"| {a[0]['trials']}/{b[0]['trials']} | "
            f"{'same' if same else '**changed**'} |"
        )
    means = [math.exp(statistics.mean(x)) for x in logs]
    print(
        f"\nplanning, geometric mean: a {means[0]:.3f} s, b {means[1]:.3f} s; "
        f"trees changed: {', '.join(changed) or 'none'}"
    )
    if args.warm:
        for name in changed:
            paths = [rows[name][k][0]["path"] for k in (0, 1)]
            print(warm(name, paths, args.calls, args.limit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
