"""Max-plus at matmul-class speed on this CPU (issue 20, point 5).

Side by side in one process, medians of interleaved rounds after a warm-up:

- the seed formula ``ij,ik,il,jk,jl,kl->ij`` at n = 256 (``memory_limit``
  64MB) with ``semiring="max"`` vs ``"sum"`` (target: max within 3x of sum);
- max-plus matrix products ``ik,kj->ij`` at 256² and 1024² vs the float
  matmul (target: within 3x);
- with ``--pgm``: ``einslice.pgm.map_value`` and ``map_assignment`` end to end
  on UAI instances (planning and compiling included; ``--pgm-files``).

Usage: ``python benchmarks/maxplus.py [--reps 9] [--pgm]``; prints the table
and, with ``--write``, adds it at the top of ``benchmarks/results/maxplus.md``.
``EINSLICE_NATIVE=0`` measures the XLA path instead of the native kernel.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _common import RESULTS, environment_lines, import_einslice

SEED = "ij,ik,il,jk,jl,kl->ij"
UAI = "/work/shared/data/uai"


def median_interleaved(fns, rounds):
    """Median wall time of each ``fns[k]()`` after one warm-up each, interleaved."""
    import jax

    for fn in fns.values():
        jax.block_until_ready(fn())
    names = list(fns)
    times = {k: [] for k in names}
    for r in range(rounds):
        shift = r % len(names)
        for k in names[shift:] + names[:shift]:
            start = time.perf_counter()
            jax.block_until_ready(fns[k]())
            times[k].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def operands(shapes, seed=0):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(seed), len(shapes))
    return [
        jax.random.normal(k, s, jnp.float32) for k, s in zip(keys, shapes, strict=True)
    ]


def compare(einslice, equation, shapes, limit, reps):
    """Seconds of ``semiring="sum"`` and ``"max"`` and compiled temporary bytes."""
    import jax

    ops = operands(shapes)
    fns, temps = {}, {}
    for ring in ("sum", "max"):

        def f(*o, ring=ring):
            return einslice.einsum(equation, *o, memory_limit=limit, semiring=ring)

        compiled = jax.jit(f).lower(*ops).compile()
        temps[ring] = compiled.memory_analysis().temp_size_in_bytes
        fns[ring] = lambda c=compiled: c(*ops)
    return median_interleaved(fns, reps), temps


def pgm_times(files, reps):
    """End-to-end seconds of map_value and map_assignment on UAI files."""
    from einslice import pgm

    rows = []
    for name in files:
        model = pgm.read_uai(os.path.join(UAI, name))
        for what, fn in (("map_value", pgm.map_value), ("map_assignment", None)):
            times = []
            for _ in range(reps):
                start = time.perf_counter()
                if fn is None:
                    result = pgm.map_assignment(model)
                    value = result.log_value
                    score = model.log_score(
                        [result.assignment[v] for v in model.variables]
                    )
                else:
                    value = fn(model)
                    score = float("nan")
                times.append(time.perf_counter() - start)
            rows.append((name, what, statistics.median(times), value, score))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--memory-limit", default="64MB")
    parser.add_argument("--pgm", action="store_true")
    parser.add_argument("--pgm-files", default="Grids_12.uai,Grids_15.uai")
    parser.add_argument("--pgm-reps", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)

    import jax

    einslice = import_einslice()
    cases = [
        (f"seed n=256, {args.memory_limit}", SEED, [(256, 256)] * 6, args.memory_limit),
        ("ik,kj->ij 256²", "ik,kj->ij", [(256, 256)] * 2, None),
        ("ik,kj->ij 1024²", "ik,kj->ij", [(1024, 1024)] * 2, None),
    ]
    lines = [
        "# Max-plus vs sum on this CPU",
        "",
        *environment_lines(jax.devices()[0]),
        "",
        "| case | sum s | max s | max / sum (target <= 3) | temp MB sum / max |",
        "|---|---|---|---|---|",
    ]
    for label, equation, shapes, limit in cases:
        t, m = compare(einslice, equation, shapes, limit, args.reps)
        lines.append(
            f"| {label} | {t['sum']:.4f} | {t['max']:.4f} | "
            f"{t['max'] / t['sum']:.2f}x | "
            f"{m['sum'] / 1e6:.1f} / {m['max'] / 1e6:.1f} |"
        )
        print(lines[-1], flush=True)
    if args.pgm:
        lines += [
            "",
            f"pgm end to end (median of {args.pgm_reps}, planning and compiling "
            "included):",
            "",
            "| instance | call | seconds | MAP value | score of the assignment |",
            "|---|---|---|---|---|",
        ]
        for name, what, sec, value, score in pgm_times(
            args.pgm_files.split(","), args.pgm_reps
        ):
            lines.append(f"| {name} | {what} | {sec:.3f} | {value:.6f} | {score:.6f} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:  # newest first; earlier runs stay below, never lost
        os.makedirs(RESULTS, exist_ok=True)
        path = os.path.join(RESULTS, "maxplus.md")
        earlier = ""
        if os.path.exists(path):
            with open(path) as f:
                earlier = f.read().split("\n", 1)[-1]  # less its title line
        with open(path, "w") as f:
            f.write(text + earlier)


if __name__ == "__main__":
    main()
