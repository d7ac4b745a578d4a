"""Where marginals spend their time: PR end to end vs MAR plan, gradient compile, run.

Usage:
    python benchmarks/mar_profile.py Promedus_24 Grids_12  # ../shared/data/uai
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax

from einslice.pgm import _infer, log_partition, read_evidence, read_uai

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "uai"
if not SHARED.is_dir():  # a git worktree sits one level deeper
    SHARED = ROOT.parents[1] / "shared" / "data" / "uai"


def main(names: list[str], limit: str = "256MB") -> None:
    for name in names:
        model = read_uai(SHARED / f"{name}.uai")
        evid = SHARED / f"{name}.uai.evid"
        evidence = read_evidence(evid) if evid.exists() else {}
        t = time.perf_counter()
        log_partition(model, evidence, memory_limit=limit)
        t_pr = time.perf_counter() - t
        t = time.perf_counter()
        # the compiled gradient's profile (marginals now take the host's
        # derivative where it pays: benchmarks/mar_vs_pr.py measures that)
        prepared = _infer._prepare(
            model, evidence, "log", limit, "auto", "float32", host=False
        )
        t_plan = time.perf_counter() - t
        assert prepared.plan is not None
        operands = prepared.operands()
        t = time.perf_counter()
        compiled = jax.jit(jax.value_and_grad(prepared.run)).lower(operands).compile()
        t_compile = time.perf_counter() - t
        t = time.perf_counter()
        jax.block_until_ready(compiled(operands))
        t_run = time.perf_counter() - t
        print(
            f"{name}: PR end to end {t_pr:.2f} s | MAR plan {t_plan:.2f} s, "
            f"compile gradient {t_compile:.2f} s ({len(prepared.plan.steps)} steps), "
            f"run {t_run:.3f} s",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
