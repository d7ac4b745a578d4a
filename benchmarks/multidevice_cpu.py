"""The seed formula on 1, 2 and 4 simulated CPU devices (issue 6's CPU figures).

Each device count runs in its own interpreter, since
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` must be set before JAX
is imported. Simulated CPU devices share this machine's cores: they test that
the sharded program is right and show its overhead, not extra hardware.

Usage: ``python benchmarks/multidevice_cpu.py [--sizes 256 512] [--reps 3]
[--memory-limit 64MB]``; writes ``benchmarks/results/multidevice_cpu.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace

from _common import HERE, RESULTS, environment_lines, import_einslice

FORMULA = "ij,ik,il,jk,jl,kl->ij"
DEVICES = (1, 2, 4)


def child(sizes, reps, limit):
    """Time einslice on this process's devices; print one JSON line."""
    import jax
    import numpy as np

    einslice = import_einslice()
    devices = len(jax.devices())
    rows = {}
    for n in sizes:
        rng = np.random.default_rng(0)
        ops = [jax.numpy.asarray(rng.standard_normal((n, n)), "float32")] * 6
        d = devices if devices > 1 else None
        f = jax.jit(
            lambda *o, d=d: einslice.einsum(FORMULA, *o, memory_limit=limit, devices=d)
        )
        start = time.perf_counter()
        jax.block_until_ready(f(*ops))
        first = time.perf_counter() - start
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            jax.block_until_ready(f(*ops))
            times.append(time.perf_counter() - start)
        temp = f.lower(*ops).compile().memory_analysis().temp_size_in_bytes
        plan = einslice.plan(FORMULA, *ops, memory_limit=limit, devices=d)
        share = [line.strip() for line in str(plan).splitlines() if "Devices" in line]
        rows[n] = {
            "median": statistics.median(times),
            "first": first,
            "temp": int(temp),
            "chunks": plan.n_chunks,
            "share": share[0] if share else "",
        }
    print(
        json.dumps(
            {
                "devices": devices,
                "rows": rows,
                "env": environment_lines(_named(jax.devices()[0])),
            }
        )
    )


def _share(line):
    """'each scans 1 of the 4 summed chunks per output block' from the report."""
    if "each scans" not in line:
        return "(one device)"
    return line.split("; ", 1)[1].split(" (gradient")[0]


def _named(device):
    """The device with a ``name`` (CPU devices only have ``device_kind``)."""
    return SimpleNamespace(name=device.device_kind, platform=device.platform)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--memory-limit", default="64MB")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.sizes, args.reps, args.memory_limit)
        return
    results = {}
    for d in DEVICES:
        env = {
            **os.environ,
            "XLA_FLAGS": f"--xla_force_host_platform_device_count={d}",
            "JAX_PLATFORMS": "cpu",
        }
        command = [sys.executable, os.path.join(HERE, "multidevice_cpu.py"), "--child"]
        command += ["--sizes", *map(str, args.sizes), "--reps", str(args.reps)]
        command += ["--memory-limit", args.memory_limit]
        proc = subprocess.run(
            command, env=env, capture_output=True, text=True, check=True
        )
        results[d] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{d} device(s): {results[d]['rows']}", file=sys.stderr)
    lines = [
        "# The seed formula on simulated CPU devices",
        "",
        f"`einslice.einsum({FORMULA!r}, ..., memory_limit={args.memory_limit!r}, "
        "devices=N)`, float32, jitted; median of "
        f"{args.reps} runs after a first (compiling) run.",
        "",
        "**The devices are simulated** (`XLA_FLAGS=--xla_force_host_platform_"
        "device_count=N`): all N share the same "
        f"{os.cpu_count()} CPU cores, so this shows the sharded program's "
        "overhead, not a speed-up from extra hardware. Real speed-ups need real "
        "devices (GPUs, TPUs, or hosts under `jax.distributed`).",
        "",
        *results[1]["env"],
        "",
        "| n | devices | time (s) | first call (s) | vs 1 device "
        "| temp memory per device | share |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in args.sizes:
        base = results[1]["rows"][str(n)]["median"]
        for d in DEVICES:
            row = results[d]["rows"][str(n)]
            lines.append(
                f"| {n} | {d} | {row['median']:.3f} | {row['first']:.2f} | "
                f"{base / row['median']:.2f}x | {row['temp'] / 1e6:.2f} MB | "
                f"{_share(row['share'])} |"
            )
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, "multidevice_cpu.md")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
