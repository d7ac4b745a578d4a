"""Compile time vs step count: plan, trace (lower), XLA compile, run, grad.

Generated 2D lattices (``cotengra.utils.lattice_equation``, bond dimension 2,
a greedy path so the search time is not what is measured) from ~20 to ~400
tensors, contracted to a scalar in the "sum" and "log" semirings, unsliced
and sliced (``memory_limit`` a quarter of the unsliced peak, or what
the gradient needs if more). Each row splits the
first call of ``einslice.einsum`` into planning (``einslice.plan``), tracing
(``jax.jit(...).lower``), XLA compilation (``.compile()``) and the run, then
the same for ``jax.grad`` (pgm marginals use it); ``ops`` counts the lowered
StableHLO ops and ``hlo`` the optimized HLO instructions. Where einslice
compiles a plan with XLA's backend optimizations off (``cheap_to_run``: many
steps, few FLOPs: O0; 64 steps or more: XLA:CPU's fusion emitters off, see
``_exec/_run.compile_options``), the row is measured both ways: ``xla``
"einslice" (the options einslice compiles the plan with, as a user's call
gets them) and "default" (XLA's defaults).

    PYTHONPATH=src python benchmarks/compile_time.py [--sides 5,10,20] [--out FILE]
      [--profile SIDE]   # cProfile the trace of one size instead
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time

from _common import RESULTS, environment_lines, import_einslice

einslice = import_einslice()

import cotengra.utils as ctu  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from einslice._exec._run import compile_options  # noqa: E402


def lattice(side: int, d: int = 2):
    """A side x side open lattice, every bond of dimension ``d``, to a scalar."""
    net = ctu.lattice_equation((side, side), d_min=d, d_max=d, seed=0)
    inputs, sizes = net.inputs, net.size_dict
    labels = {c: n for n, c in enumerate(sorted({c for t in inputs for c in t}))}
    terms = [[labels[c] for c in t] for t in inputs]
    rng = np.random.default_rng(0)
    arrays = [
        jnp.asarray(rng.uniform(0.5, 1.0, [sizes[c] for c in t]), jnp.float32)
        for t in inputs
    ]
    return terms, arrays


def _count_ops(text: str) -> int:
    return sum(1 for line in text.splitlines() if " = " in line)


def measure(side: int, semiring: str, sliced: bool, own_options: bool):
    terms, arrays = lattice(side)
    args = [x for pair in zip(arrays, terms, strict=True) for x in pair]
    logs = [jnp.log(a) for a in arrays] if semiring == "log" else arrays
    row = {"tensors": len(terms)}
    spec = [x for pair in zip(logs, terms, strict=True) for x in pair]

    def make(limit):
        return einslice.plan(
            *spec, [], memory_limit=limit, optimize="greedy", semiring=semiring
        )

    t0 = time.perf_counter()
    p = make(None)
    row["plan"] = time.perf_counter() - t0
    if sliced:  # a quarter of the unsliced peak, or what the gradient needs
        try:
            p = make(p.peak_bytes // 4)
        except einslice.MemoryLimitError as error:
            p = make(error.smallest_limit)
        if p.gradient_limit > p.memory_limit:
            p = make(p.gradient_limit)
    options = compile_options(p) if own_options else None
    if own_options and options is None:
        return None  # einslice compiles it with XLA's defaults: the other row
    row["xla"] = "einslice" if own_options else "default"
    row["steps"] = len(p.steps)
    row["sliced"] = len(p.sliced)
    del args

    def f(ops):
        return p(*ops)

    for name, fun in (("fwd", f), ("grad", jax.grad(f))):
        t0 = time.perf_counter()
        jax.clear_caches()
        lowered = jax.jit(fun, compiler_options=options).lower(logs)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        jax.block_until_ready(compiled(logs))
        t3 = time.perf_counter()
        row[f"{name}_trace"], row[f"{name}_compile"] = t1 - t0, t2 - t1
        row[f"{name}_run"] = t3 - t2
        row[f"{name}_ops"] = _count_ops(lowered.as_text())
        row[f"{name}_hlo"] = _count_ops(compiled.as_text())
    return row


COLUMNS = (
    "xla tensors steps sliced plan fwd_trace fwd_compile fwd_run fwd_ops fwd_hlo "
    "grad_trace grad_compile grad_run grad_ops grad_hlo"
).split()


def table(rows) -> list[str]:
    head = ["semiring", "slicing", *COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, row in rows:
        cells = [*key]
        for c in COLUMNS:
            v = row[c]
            cells.append(f"{v:.2f}" if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sides", default="5,10,14,20")
    parser.add_argument("--semirings", default="sum,log")
    parser.add_argument("--out", default=os.path.join(RESULTS, "compile_time.md"))
    parser.add_argument("--profile", type=int, default=0)
    args = parser.parse_args()
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        measure(args.profile, "log", True, False)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
        return
    head = environment_lines(jax.devices()[0])
    rows = []
    for side in map(int, args.sides.split(",")):
        for semiring in args.semirings.split(","):
            for sliced in (False, True):
                for own in (False, True):  # only where einslice sets options
                    row = measure(side, semiring, sliced, own)
                    if row is not None:
                        rows.append(((semiring, str(sliced)), row))
                        print(table(rows[-1:])[-1], flush=True)
                        write(args.out, head, rows)  # each row, as sizes grow slow


def write(path, head, rows):
    lines = [
        "# Compile time vs step count",
        "",
        *head,
        "",
        "Seconds; `ops`: lowered StableHLO ops, `hlo`: optimized HLO instructions.",
        "",
        *table(rows),
    ]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
