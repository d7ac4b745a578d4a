"""Exact samples per second against one log Z, and against pgmpy's forward sampler.

For each ``X.uai`` given (with ``X.uai.evid`` when present), in one fresh
process: ``log_partition`` twice (the first call searches and plans; the
second, cached, is "one log Z"), then ``sample`` of ``--samples`` samples
twice with different keys (the first compiles the sampler; the second is
the figure: samples per second, and its time in log-Z calls). pgmpy's
``BayesianModelSampling.forward_sample`` applies to Bayesian networks only:
the UAI file's factors are read as CPTs when each factor sums to 1 over one
of its variables, a different one for each, and the parents form a DAG (a
moralized BAYES network written as MARKOV qualifies); else the column says
why it does not apply.

Usage:
    python benchmarks/sample_bench.py FILE.uai ... [--samples 100000]
        [--memory-limit 256MB] [--out benchmarks/results/sample.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def as_bayesian_network(model):
    """pgmpy's network of the model's factors read as CPTs, or why it is none."""
    import numpy as np

    child_of: dict[int, int] = {}
    child_axis: dict[int, int] = {}
    for i, f in enumerate(model.factors):
        if not f.scope:
            continue
        p = np.exp(f.log_table)
        axes = [
            a
            for a in reversed(range(p.ndim))
            if f.scope[a] not in child_of and np.allclose(p.sum(axis=a), 1.0, atol=1e-6)
        ]
        if not axes:
            return None, f"factor {i} sums to 1 over none of its free variables"
        child_of[f.scope[axes[0]]] = i
        child_axis[i] = axes[0]
    if len(child_of) != model.num_variables:
        return None, "some variable is the child of no factor"
    from pgmpy.factors.discrete import TabularCPD
    from pgmpy.models import DiscreteBayesianNetwork

    edges = [
        (f"x{u}", f"x{v}")
        for v, i in child_of.items()
        for u in model.factors[i].scope
        if u != v
    ]
    net = DiscreteBayesianNetwork(edges)
    net.add_nodes_from([f"x{v}" for v in range(model.num_variables)])
    for v, i in child_of.items():
        f = model.factors[i]
        parents = [u for u in f.scope if u != v]
        p = np.moveaxis(np.exp(f.log_table), child_axis[i], -1)
        p = p.reshape(-1, model.cardinalities[v]).T
        net.add_cpds(
            TabularCPD(
                f"x{v}",
                model.cardinalities[v],
                p,
                evidence=[f"x{u}" for u in parents] or None,
                evidence_card=[model.cardinalities[u] for u in parents] or None,
            )
        )
    try:
        net.check_model()
    except Exception as e:  # a cycle, or pgmpy's own checks
        return None, f"pgmpy refused it: {' '.join(str(e).split())[:80]}"
    return net, ""


def run_one(path: Path, n: int, limit: str) -> dict:
    import jax

    from einslice.pgm import log_partition, read_evidence, read_uai, sample

    model = read_uai(path)
    evid = Path(f"{path}.evid")
    row: dict = {"name": path.name.removesuffix(".uai"), "vars": model.num_variables}
    evidence = {}  # (the figures are without evidence: pgmpy's forward sampler)
    del evid, read_evidence
    start = time.perf_counter()
    log_partition(model, evidence, memory_limit=limit)
    row["log_z_first"] = time.perf_counter() - start
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        log_partition(model, evidence, memory_limit=limit)
        runs.append(time.perf_counter() - start)
    row["log_z"] = sorted(runs)[1]
    start = time.perf_counter()
    sample(model, n, evidence, key=jax.random.key(0), memory_limit=limit)
    row["sample_first"] = time.perf_counter() - start
    runs = []
    for k in (1, 2):
        start = time.perf_counter()
        sample(model, n, evidence, key=jax.random.key(k), memory_limit=limit)
        runs.append(time.perf_counter() - start)
    row["sample"] = min(runs)
    net, why = as_bayesian_network(model)
    if net is None:
        row["pgmpy"] = f"not a Bayesian network ({why})"
    else:
        from pgmpy.sampling import BayesianModelSampling

        start = time.perf_counter()
        BayesianModelSampling(net).forward_sample(size=n, show_progress=False, seed=0)
        row["pgmpy"] = time.perf_counter() - start
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--memory-limit", default="256MB")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        row = run_one(args.files[0], args.samples, args.memory_limit)
        print("ROW " + json.dumps(row), flush=True)
        return
    rows = []
    load = os.getloadavg()[0]
    for path in args.files:
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        cmd = [sys.executable, __file__, "--child", str(path)]
        cmd += ["--samples", str(args.samples), "--memory-limit", args.memory_limit]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        found = [ln for ln in out.stdout.splitlines() if ln.startswith("ROW ")]
        if not found:
            print(out.stderr[-2000:], file=sys.stderr)
            continue
        rows.append(json.loads(found[-1][4:]))
        print(rows[-1], flush=True)
    n = args.samples
    lines = [
        "# Exact samples: samples per second against one log Z",
        "",
        f"`python benchmarks/sample_bench.py ... --samples {n} --memory-limit "
        f"{args.memory_limit}`; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        f", load average {load:.2f} at the start and {os.getloadavg()[0]:.2f} at "
        f"the end on {os.cpu_count()} cores (a shared machine: figures are noisy).",
        "",
        "*log Z*: the median of 3 cached `log_partition` calls (the first "
        "searched and planned: *first*); *sample*: the faster of 2 calls of "
        f"`sample(model, {n})` after a first that compiled the sampler "
        "(*first*); *in log Z*: the sample call's time in log-Z calls; pgmpy: "
        "`BayesianModelSampling.forward_sample` (Bayesian networks only).",
        "",
        "| instance | vars | log Z s | first s | sample s | first s | samples/s | "
        "in log Z | pgmpy forward s | pgmpy ÷ einslice |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        pg = r["pgmpy"]
        pg_text = f"{pg:.2f}" if isinstance(pg, float) else pg
        ratio = f"{pg / r['sample']:.2g}×" if isinstance(pg, float) else "—"
        lines.append(
            f"| {r['name']} | {r['vars']} | {r['log_z']:.4f} | "
            f"{r['log_z_first']:.2f} | {r['sample']:.2f} | {r['sample_first']:.1f} | "
            f"{n / r['sample']:.3g} | {r['sample'] / r['log_z']:.3g} | {pg_text} | "
            f"{ratio} |"
        )
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
