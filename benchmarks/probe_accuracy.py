"""Tuning on probes: does a few chunks' time, scaled, predict the whole call?

``tune="measure"`` times a long sliced candidate on a probe of a few of its
chunks (``_plan/_probe.py``) and multiplies by its chunk count. This script
checks that estimate against the whole call for sliced plans of the seed
formula and of suite formulas at tight limits: whole = median of 3 calls
after a warm-up, probe = median of 7 of the very probe the tuner prepares
(``_tune._prepare_timing``: cut, sliced and compiled as it does).
What matters for choosing is that the error is small and alike across
candidates; the table gives scaled probe ÷ whole per plan.

    PYTHONPATH=src python benchmarks/probe_accuracy.py [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _common import RESULTS, environment_lines, import_einslice

einslice = import_einslice()

import jax  # noqa: E402
import numpy as np  # noqa: E402

from einslice._exec import _tune  # noqa: E402
from einslice._exec._run import Config, _run  # noqa: E402

SEED = "ij,ik,il,jk,jl,kl->ij"
CASES = [
    ("seed-6 n=512, 64MB", SEED, [(512, 512)] * 6, "64MB"),
    ("seed-6 n=768, 64MB", SEED, [(768, 768)] * 6, "64MB"),
    ("seed-6 n=512, 4MB", SEED, [(512, 512)] * 6, "4MB"),
    ("matrix-chain 4096, 8MB", "ab,bc,cd->ad", [(4096, 4096)] * 3, "8MB"),
]


def _median_seconds(program, operands, repeats: int) -> float:
    jax.block_until_ready(program(*operands))  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(program(*operands))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _run_plan(plan, operands):
    return _run(plan, Config(), *operands)


def row(name, subscripts, shapes, limit) -> list[str]:
    rng = np.random.default_rng(0)
    operands = [jax.numpy.asarray(rng.random(s, dtype=np.float32)) for s in shapes]
    plan = einslice.plan(subscripts, *operands, memory_limit=limit)
    whole = _tune._compile_within_limit(plan, operands, _run_plan)[0]
    whole_s = _median_seconds(whole, operands, 3)
    # What the tuner times: its probe, cut and compiled as it does.
    timing = _tune._prepare_timing(plan, operands, _run_plan)
    if not timing.probed:
        return [name, str(plan.n_chunks), "—", f"{whole_s:.3f}", "—", "— (no probe)"]
    part = _median_seconds(timing.program, timing.operands, 7) * timing.scale
    return [
        name,
        str(plan.n_chunks),
        str(round(plan.n_chunks / timing.scale)),
        f"{whole_s:.3f}",
        f"{part:.3f}",
        f"{part / whole_s:.2f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(RESULTS, "probe_accuracy.md"))
    args = parser.parse_args()
    head = ["plan", "chunks", "probe chunks", "whole (s)", "probe × scale (s)", "ratio"]
    lines = [
        "# Tuning on probes: scaled probe time vs the whole call",
        "",
        "`PYTHONPATH=src python benchmarks/probe_accuracy.py`",
        "",
        *environment_lines(jax.devices()[0]),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for case in CASES:
        cells = row(*case)
        print(" | ".join(cells), flush=True)
        lines.append("| " + " | ".join(cells) + " |")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
