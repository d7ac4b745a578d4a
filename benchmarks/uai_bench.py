"""Every UAI instance in ../shared/data/uai through einslice.pgm within a memory limit.

For each instance: log Z (no evidence, checked against the README's reference; and
with the instance's evidence file when it has one), the time to plan, compile and
run, the predicted peak memory and the compiled program's temporary bytes
(``memory_analysis().temp_size_in_bytes``), then the same through the CLI
(``einslice uai X --task PR``, a fresh process: imports, planning, compilation and
running included) and through pgmpy's exact ``VariableElimination`` (optional
extra: ``pip install pgmpy``), each in a subprocess with a timeout.

Usage:
    python benchmarks/uai_bench.py [--memory-limit 256MB] [--timeout 600]
        [--only Grids_12 ...] [--out benchmarks/results/uai.md] [--repeats 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / ".." / "shared" / "data" / "uai"
PGMPY_ORDERS = ("MinFill", "greedy")  # classic VE; pgmpy's default (opt_einsum)
PGMPY_MEMORY_BYTES = 4e9


def readme_references() -> dict[str, tuple[float, float | None]]:
    """ln Z without and with evidence, from the shared README's table."""
    refs = {}
    for line in (SHARED / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 9 or not cells[0].endswith(".uai"):
            continue
        name = cells[0][: -len(".uai")]
        plain = -math.inf if cells[7].startswith("-inf") else float(cells[7].split()[0])
        match = re.match(r"(-?[\d.]+)", cells[8])
        refs[name] = (plain, float(match.group(1)) if match else None)
    return refs


def instances() -> list[str]:
    return sorted(p.name[: -len(".uai")] for p in SHARED.glob("*.uai"))


# -- one instance, in this process -------------------------------------------------


def measure_einslice(name: str, limit: str) -> dict:
    import jax

    from einslice.pgm import _infer, read_evidence, read_uai

    model = read_uai(SHARED / f"{name}.uai")
    row: dict = {
        "instance": name,
        "vars": model.num_variables,
        "factors": len(model.factors),
    }
    t = time.perf_counter()
    prepared = _infer._prepare(model, None, "log", limit, "auto", "float32")
    row["plan_s"] = time.perf_counter() - t
    row["tables"] = len(prepared.network.tables)
    plan = prepared.plan
    if plan is None:  # Z = 0 or a constant: nothing to contract
        row.update(log_z=prepared.network.offset, flops=0, sliced="—")
        row.update(predicted_bytes=0, compiled_bytes=0, compile_s=0.0, run_s=0.0)
    else:
        operands = prepared.operands()
        t = time.perf_counter()
        compiled = jax.jit(lambda *a: plan(*a)).lower(*operands).compile()
        row["compile_s"] = time.perf_counter() - t
        compiled(*operands).block_until_ready()
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            value = compiled(*operands).block_until_ready()
            runs.append(time.perf_counter() - t)
        row["run_s"] = min(runs)
        row["log_z"] = prepared.network.offset + float(value)
        row["flops"] = plan.flops
        row["sliced"] = ", ".join(f"{k}:{v}" for k, v in plan.sliced.items()) or "—"
        row["predicted_bytes"] = plan.peak_bytes
        analysis = compiled.memory_analysis()
        row["compiled_bytes"] = analysis.temp_size_in_bytes if analysis else None
    evidence_file = SHARED / f"{name}.uai.evid"
    evidence = read_evidence(evidence_file) if evidence_file.exists() else {}
    if evidence:
        row["log_z_evidence"] = _infer.log_partition(
            model, evidence, memory_limit=limit
        )
    return row


def measure_end_to_end(name: str, limit: str) -> dict:
    """``log_partition`` once, in a fresh process with a fresh tree cache.

    What a user's first query costs: search, planning, then compiling and
    running the plan, or walking it on the host when that is estimated to
    beat compiling. Imports and reading the file are not timed (nor are
    pgmpy's, nor building its model).
    """
    import cotengra  # noqa: F401  (einslice imports them on first use)
    import jax  # noqa: F401
    import optuna  # noqa: F401

    from einslice.pgm import _infer, log_partition, read_uai

    model = read_uai(SHARED / f"{name}.uai")
    gc.collect()  # as for pgmpy: the first full collection after imports untimed
    t = time.perf_counter()
    log_z = log_partition(model, memory_limit=limit)
    seconds = time.perf_counter() - t
    prepared = _infer._prepare(
        model, None, "log", limit, "auto", "float32", value_only=True
    )
    return {"e2e_s": seconds, "e2e_log_z": log_z, "on_host": prepared.on_host}


def measure_pgmpy(name: str, order: str) -> dict:
    import resource

    import numpy as np
    from pgmpy.inference import VariableElimination

    from _common import pgmpy_network
    from einslice.pgm import read_uai

    # Why: pgmpy's linear-space products can exhaust a shared machine's memory;
    # fail with MemoryError instead.
    cap = int(PGMPY_MEMORY_BYTES)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    model = read_uai(SHARED / f"{name}.uai")
    names = [f"x{v}" for v in range(model.num_variables)]
    network = pgmpy_network(model)
    infer = VariableElimination(network)
    # A full collection after importing large libraries takes tens of ms
    # (einslice's first call paid 34 ms of it, jax's objects): done untimed in
    # both children.
    gc.collect()
    t = time.perf_counter()
    # For a Markov network, query(joint=True) returns the unnormalized marginal of
    # one variable: its sum is Z.
    phi = infer.query([names[0]], elimination_order=order, show_progress=False)
    z = float(np.sum(phi.values))
    seconds = time.perf_counter() - t
    with np.errstate(divide="ignore"):
        return {f"pgmpy_{order}_s": seconds, f"pgmpy_{order}_log_z": float(np.log(z))}


# -- the driver ----------------------------------------------------------------------


def run_child(args: list[str], timeout: float) -> tuple[dict | None, str]:
    """Runs this script (or the CLI) in a fresh process; JSON on its last line.

    Each child gets an empty einslice cache (trees, wisdom): nothing is
    carried from an earlier child or run.
    """
    import tempfile

    try:
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "EINSLICE_CACHE_DIR": cache}
            done = subprocess.run(
                args, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
            )
    except subprocess.TimeoutExpired:
        return None, f"timeout > {timeout:.0f} s"
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        needs = re.search(r"Unable to allocate ([\d.]+ \w+)", tail)
        if needs:
            return None, f"out of memory (asked for {needs.group(1)})"
        return None, f"failed: {tail[:120]}"
    return {"stdout": done.stdout}, ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memory-limit", default="256MB")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--no-pgmpy", action="store_true")
    parser.add_argument("--pgmpy-timeout", type=float, default=300.0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/uai.md"))
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="fresh-process first queries of einslice and pgmpy (medians)",
    )
    parser.add_argument(
        "--child", choices=("einslice", "e2e", "pgmpy"), help=argparse.SUPPRESS
    )
    parser.add_argument("--instance", help=argparse.SUPPRESS)
    parser.add_argument("--order", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child == "einslice":
        print(json.dumps(measure_einslice(args.instance, args.memory_limit)))
        return 0
    if args.child == "e2e":
        print(json.dumps(measure_end_to_end(args.instance, args.memory_limit)))
        return 0
    if args.child == "pgmpy":
        print(json.dumps(measure_pgmpy(args.instance, args.order)))
        return 0

    if not SHARED.is_dir():
        print(f"no instances at {SHARED}", file=sys.stderr)
        return 1
    refs = readme_references()
    rows = []
    for name in args.only or instances():
        print(f"== {name}", file=sys.stderr, flush=True)
        me = [sys.executable, __file__, "--instance", name]
        result, why = run_child(
            [*me, "--child", "einslice", "--memory-limit", args.memory_limit],
            args.timeout,
        )
        row = (
            json.loads(result["stdout"].strip().splitlines()[-1])
            if result
            else {"instance": name, "error": why}
        )
        row.update(first_queries(me, args))
        ref, ref_evidence = refs.get(name, (math.nan, None))
        row["reference"], row["reference_evidence"] = ref, ref_evidence

        cli = [sys.executable, "-m", "einslice", "uai", str(SHARED / f"{name}.uai")]
        cli += ["--task", "PR", "--memory-limit", args.memory_limit, "-q"]
        t = time.perf_counter()
        result, why = run_child(cli, args.timeout)
        row["cli_s"] = time.perf_counter() - t if result else None
        row["cli_log10_z"] = (
            float(result["stdout"].split()[1]) if result else why or "failed"
        )

        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report(rows, args.memory_limit))
    write_csv(rows, Path(args.out).with_suffix(".csv"))
    print(f"wrote {args.out} and its .csv", file=sys.stderr)
    return 0


def first_queries(me: list[str], args) -> dict:
    """einslice's first query and pgmpy's, each in fresh processes, alternated.

    A first query of a small model takes milliseconds, where a shared
    machine's noise is as large: each is run ``--repeats`` times, einslice's
    and pgmpy's in turn (an order that failed once is not retried), and the
    medians are reported with every sample.
    """
    import statistics

    runs: dict[str, list[float]] = {"e2e": []}
    out: dict = {}
    orders = () if args.no_pgmpy else PGMPY_ORDERS
    for _ in range(args.repeats):
        result, why = run_child(
            [*me, "--child", "e2e", "--memory-limit", args.memory_limit],
            args.timeout,
        )
        if result:
            data = json.loads(result["stdout"].strip().splitlines()[-1])
            runs["e2e"].append(data.pop("e2e_s"))
            out.update(data)
        else:
            out["e2e_error"] = why
        for order in orders:
            if out.get(f"pgmpy_{order}_error"):
                continue
            child = [*me, "--child", "pgmpy", "--order", order]
            result, why = run_child(child, args.pgmpy_timeout)
            if result:
                data = json.loads(result["stdout"].strip().splitlines()[-1])
                runs.setdefault(order, []).append(data.pop(f"pgmpy_{order}_s"))
                out.update(data)
            else:
                out[f"pgmpy_{order}_error"] = why
    for key, samples in [("e2e", runs["e2e"]), *((o, runs.get(o, [])) for o in orders)]:
        column = "e2e_s" if key == "e2e" else f"pgmpy_{key}_s"
        out[column] = statistics.median(samples) if samples else None
        out[column[: -len("_s")] + "_runs"] = samples
    return out


def report(rows: list[dict], limit: str) -> str:
    import platform

    import jax

    def num(x, fmt="{:.3f}"):
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return "—"
        if isinstance(x, float) and math.isinf(x):
            return "-inf" if x < 0 else "inf"
        return fmt.format(x)

    def mb(x):
        return "—" if x is None else f"{x / 1e6:.1f}"

    ok = [r for r in rows if "error" not in r]
    lines = [
        "# UAI instances: exact log Z with einslice.pgm",
        "",
        f"Memory limit {limit}; float32 contraction (constants in float64); "
        f"{platform.machine()}, {os.cpu_count()} CPU cores (load average "
        f"{os.getloadavg()[0]:.2f} when written; other jobs may share them), "
        f"jax {jax.__version__}, {time.strftime('%Y-%m-%d %H:%M %Z')}. "
        "Generated by `python benchmarks/uai_bench.py`.",
        "",
        "| instance | vars | factors | tables | ln Z | README ln Z | abs err | "
        "log10 FLOPs | sliced (index: chunk) | predicted MB | compiled MB | plan s | "
        "compile s | run s | CLI s | CLI log10 Z |",
        "|---" * 16 + "|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['instance']} | {r['error']} |" + " |" * 14)
            continue
        ref = r["reference"]
        err = abs(r["log_z"] - ref) if math.isfinite(ref) else math.nan
        if not math.isfinite(ref) and r["log_z"] == ref:
            err = 0.0
        cells = [
            r["instance"],
            str(r["vars"]),
            str(r["factors"]),
            str(r["tables"]),
            num(r["log_z"], "{:.6f}"),
            num(ref, "{:.6f}"),
            num(err, "{:.1e}"),
            num(math.log10(r["flops"]) if r["flops"] else None, "{:.2f}"),
            r["sliced"],
            mb(r["predicted_bytes"]),
            mb(r["compiled_bytes"]),
            num(r["plan_s"], "{:.2f}"),
            num(r["compile_s"], "{:.1f}"),
            num(r["run_s"] if r["flops"] else None, "{:.4f}"),
            num(r.get("cli_s"), "{:.1f}"),
            num(r["cli_log10_z"], "{:.6f}")
            if isinstance(r["cli_log10_z"], float)
            else str(r["cli_log10_z"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")

    evidence = [r for r in ok if r.get("log_z_evidence") is not None]
    if evidence:
        lines += ["", "With the instance's evidence file:", ""]
        lines += ["| instance | ln Z (evidence) | README | abs err |"]
        lines += ["|---|---|---|---|"]
        for r in evidence:
            ref = r.get("reference_evidence")
            err = abs(r["log_z_evidence"] - ref) if ref is not None else None
            lines.append(
                f"| {r['instance']} | {r['log_z_evidence']:.6f} | "
                f"{num(ref, '{:.6f}')} | {num(err, '{:.1e}')} |"
            )

    lines += [
        "",
        "## Against pgmpy's exact inference",
        "",
        "| instance | einslice run s | einslice end to end s | einslice CLI s | "
        "pgmpy VE (MinFill) s | pgmpy default (greedy) s | pgmpy ln Z | "
        "pgmpy ÷ einslice run | pgmpy ÷ einslice end to end | pgmpy ÷ einslice CLI |",
        "|---" * 10 + "|",
    ]
    for r in ok:
        times = {o: r.get(f"pgmpy_{o}_s") for o in PGMPY_ORDERS}
        finished = {o: t for o, t in times.items() if t}
        best = min(finished, key=finished.__getitem__) if finished else None
        pg = finished.get(best) if best else None

        def cell(order, r=r, times=times):
            t = times[order]
            return num(t, "{:.3g}") if t else r.get(f"pgmpy_{order}_error", "—")

        cells = [
            r["instance"],
            num(r["run_s"] if r["flops"] else None, "{:.4f}"),
            (
                num(r.get("e2e_s"), "{:.3f}") + (" (host)" if r.get("on_host") else "")
                if r.get("e2e_s") is not None
                else r.get("e2e_error", "—")
            ),
            num(r.get("cli_s"), "{:.1f}"),
            cell("MinFill"),
            cell("greedy"),
            (
                num(r.get(f"pgmpy_{best}_log_z"), "{:.6f}")
                + (" (overflow)" if r.get(f"pgmpy_{best}_log_z") == math.inf else "")
            )
            if best
            else "—",
            f"{pg / r['run_s']:.3g}×" if pg and r["run_s"] else "—",
            f"{pg / r['e2e_s']:.3g}×" if pg and r.get("e2e_s") else "—",
            f"{pg / r['cli_s']:.2g}×" if pg and r.get("cli_s") else "—",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    repeats = max((len(r.get("e2e_runs", [])) for r in rows), default=0)
    lines += [
        "",
        "Columns: *tables* after exact simplification (nested scopes absorbed, "
        "tables the elimination order multiplies anyway merged); *sliced* the "
        "indices the plan loops over and their chunk sizes; *predicted MB* the "
        "plan's peak temporary bytes, *compiled MB* XLA's "
        "`memory_analysis().temp_size_in_bytes`; *plan s* order search and "
        "planning; *compile s* XLA compilation; *run s* best of 3 runs of the "
        "compiled program; *end to end s* the median over "
        f"{repeats} fresh processes of the first `log_partition` call, with an "
        "empty einslice cache, after imports and reading the file (search, "
        "planning, then compilation and run; or, marked (host), a walk in "
        "numpy on the host when that is estimated to beat compiling: of the "
        "greedy tree unplanned for a small network, else of the plan), "
        "alternated with pgmpy's query in as many fresh processes (its median "
        "shown; the .csv has every sample); *CLI s* `einslice uai X --task PR` "
        "in a fresh process (imports, planning, compilation and run). pgmpy "
        "(`VariableElimination.query`, unnormalized for a Markov network, so "
        "its sum is Z) works in "
        f"linear float64 (ln Z above ~709 overflows), capped at "
        f"{PGMPY_MEMORY_BYTES / 1e9:.0f} GB of address space; the ratios use the "
        "faster pgmpy order that finished.",
        "",
    ]
    return "\n".join(lines)


def write_csv(rows: list[dict], path: Path) -> None:
    import csv

    keys = sorted({k for r in rows for k in r})
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, keys)
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    raise SystemExit(main())
