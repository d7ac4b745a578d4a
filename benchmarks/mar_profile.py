"""Where marginals spend their time: PR end to end vs MAR plan / compile of the gradient / run.

Usage: python benchmarks/mar_profile.py Promedus_24 Grids_12 (names in ../shared/data/uai)
"""

import sys
import time
from pathlib import Path

import jax

from einslice.pgm import _infer, log_partition, read_evidence, read_uai

S = Path("/work/shared/data/uai")
for name in sys.argv[1:]:
    m = read_uai(S / f"{name}.uai")
    e = read_evidence(S / f"{name}.uai.evid")
    t = time.perf_counter()
    pr = log_partition(m, e, memory_limit="256MB")
    t_pr = time.perf_counter() - t
    t = time.perf_counter()
    p = _infer._prepare(m, e, "log", "256MB", "auto", "float32")
    t_plan = time.perf_counter() - t
    ops = p.operands()
    f = jax.jit(jax.value_and_grad(p.run))
    t = time.perf_counter()
    c = f.lower(ops).compile()
    t_comp = time.perf_counter() - t
    t = time.perf_counter()
    jax.block_until_ready(c(ops))
    t_run = time.perf_counter() - t
    print(
        f"{name}: PR e2e {t_pr:.2f}s | MAR plan {t_plan:.2f}s, compile grad {t_comp:.2f}s ({len(p.plan.steps)} steps), run {t_run:.3f}s",
        flush=True,
    )
