"""Every UAI instance in a directory through einslice.pgm, one fresh process each.

For each ``X.uai`` (with ``X.uai.evid`` when present): the task (MAR: every
variable's marginal; PR: log Z; MAP: the MAP assignment) through the public API
within ``--memory-limit``, in a subprocess capped at ``--timeout`` seconds. The
table lists variables, factors, log10 FLOPs of the plan, time to the first
result (imports and reading the file excluded), the child's peak RSS, a status
(``ok``, ``timeout``, ``memory`` with the smallest feasible limit, ``error``) and
a check:

- MAR: every marginal sums to 1, and for two random unobserved variables
  ``P(x_i = v) = Z(evid ∪ {x_i = v}) / Z(evid)`` (v: the most probable state);
- PR: log Z in float32 against float64 (``jax_enable_x64``);
- MAP: the assignment's score equals the returned value.

A summary by family (the name before its last ``_N``) follows the table. The
instances are read from DIR; never copy them into this repository.

Usage:
    python benchmarks/uai_sweep.py DIR --task MAR [--memory-limit 1GB]
        [--timeout 120] [--out benchmarks/results/uai_sweep_mar.md] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# -- one instance, in the child process ----------------------------------------


def _emit(**row) -> None:
    print("ROW " + json.dumps(row), flush=True)


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(path: Path, task: str, limit: str) -> None:
    """Prints ``ROW {json}`` lines: the result first, then the check."""
    if task == "PR":
        import jax

        jax.config.update("jax_enable_x64", True)
    import numpy as np

    from einslice import MemoryLimitError
    from einslice.pgm import (
        MapResult,
        Marginals,
        _infer,
        log_partition,
        map_assignment,
        marginals,
        read_evidence,
        read_uai,
    )

    model = read_uai(path)
    evid_path = path.with_name(path.name + ".evid")
    evidence = read_evidence(evid_path) if evid_path.exists() else {}
    _emit(vars=model.num_variables, factors=len(model.factors), evid=len(evidence))
    t = time.perf_counter()
    try:
        if task == "MAR":
            result = marginals(model, evidence, memory_limit=limit)
        elif task == "PR":
            result = log_partition(model, evidence, memory_limit=limit)
        else:
            result = map_assignment(model, evidence, memory_limit=limit)
    except MemoryLimitError as e:
        _emit(
            status="memory",
            smallest=e.smallest_limit,
            flops=getattr(e, "flops", 0),
            rss_mb=_peak_rss_mb(),
        )
        return
    seconds = time.perf_counter() - t
    _emit(status="ok", seconds=seconds, rss_mb=_peak_rss_mb())
    semiring = "max" if task == "MAP" else "log"
    prepared = _infer._prepare(model, evidence, semiring, limit, "auto", "float32")
    plan, walk = prepared.plan, prepared.walk
    flops = plan.flops if plan is not None else getattr(walk, "flops", 0)
    _emit(flops=flops)
    if task == "MAR":
        assert isinstance(result, Marginals)
        errors = [abs(float(m.sum()) - 1) for m in result.variables.values()]
        worst = max(errors, default=0.0)
        rng = np.random.default_rng(0)
        free = [v for v in result.variables if v not in evidence]
        picks = rng.choice(len(free), size=min(2, len(free)), replace=False)
        identity = 0.0
        for i in picks:
            var = free[int(i)]
            p = result.variables[var]
            v = int(np.argmax(p))
            z = log_partition(model, {**evidence, var: v}, memory_limit=limit)
            identity = max(identity, abs(math.exp(z - result.log_partition) - p[v]))
        ok = worst < 1e-4 and identity < 1e-3
        _emit(check=f"{'ok' if ok else 'FAIL'} Σ−1 {worst:.0e}, Z-ratio {identity:.0e}")
    elif task == "PR":
        assert isinstance(result, float)
        ref = log_partition(model, evidence, memory_limit=limit, dtype="float64")
        err = abs(result - ref) if math.isfinite(ref) else float(result != ref)
        tol = 1e-3 * max(1.0, abs(ref)) if math.isfinite(ref) else 0
        _emit(check=f"{'ok' if err <= tol else 'FAIL'} |f32−f64| {err:.0e}")
    else:
        assert isinstance(result, MapResult)
        states = [result.assignment[i] for i in range(model.num_variables)]
        score = model.log_score(states)
        if True:
            ok = abs(score - result.log_value) <= 1e-3 * max(1.0, abs(score))
            _emit(check=f"{'ok' if ok else 'FAIL'} score {score:.6g}")


# -- the sweep, in the parent ----------------------------------------------------


def family(name: str) -> str:
    match = re.match(r"(.*)_\d+$", name)
    return match.group(1) if match else name


def sweep_one(path: Path, task: str, limit: str, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--one", str(path), "--task", task]
    cmd += ["--memory-limit", limit]
    # this checkout's src first, the caller's path after it (e.g. an extra's
    # packages installed elsewhere)
    python_path = [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(python_path)}
    row: dict = {"instance": path.name[: -len(".uai")], "status": "error"}
    # stdout to a file: what a child printed before its timeout is kept
    with tempfile.TemporaryFile("w+") as out:
        try:
            done = subprocess.run(
                cmd,
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                timeout=timeout,
                env=env,
            )
            stderr = done.stderr
        except subprocess.TimeoutExpired:
            stderr = ""
            row["status"] = "timeout"
        out.seek(0)
        stdout = out.read()
    for line in stdout.splitlines():
        if line.startswith("ROW "):
            row.update(json.loads(line[4:]))
    if row["status"] == "timeout" and "seconds" in row:
        row["status"] = "ok"  # solved; the check ran out of time
        row.setdefault("check", "check timed out")
    if row["status"] == "error":
        tail = (stderr or "").strip().splitlines()
        row["error"] = tail[-1][:120] if tail else "no output"
    return row


def fmt_bytes(n: float | None) -> str:
    if not n:
        return "—"
    for unit in ("B", "KB", "MB", "GB", "TB", "PB", "EB"):
        if n < 1024:
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} ZB"


def table(rows: list[dict], limit: str, timeout: float) -> list[str]:
    lines = [
        "| instance | vars | factors | evid | log10 FLOPs | limit | time to result (s) "
        "| peak RSS (MB) | status | check |",
        "|---|---:|---:|---:|---:|---|---:|---:|---|---|",
    ]
    for r in rows:
        flops = r.get("flops")
        lf = f"{math.log10(flops):.1f}" if flops else "—"
        sec = f"{r['seconds']:.1f}" if "seconds" in r else f"> {timeout:g}"
        if r["status"] == "memory":
            sec = "—"
        status = r["status"]
        if status == "memory":
            status = f"memory (needs {fmt_bytes(r.get('smallest'))})"
        elif status == "error":
            status = f"error: {r.get('error', '')}".replace("|", "/")
        rss = f"{r['rss_mb']:.0f}" if "rss_mb" in r else "—"
        lines.append(
            f"| {r['instance']} | {r.get('vars', '—')} | {r.get('factors', '—')} "
            f"| {r.get('evid', '—')} | {lf} | {limit} | {sec} | {rss} | {status} "
            f"| {r.get('check', '—')} |"
        )
    return lines


def summary(rows: list[dict]) -> list[str]:
    fams: dict[str, list[dict]] = {}
    for r in rows:
        fams.setdefault(family(r["instance"]), []).append(r)
    lines = [
        "| family | instances | solved | total time of solved (s) | max (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for fam, rs in sorted(fams.items()):
        solved = [r for r in rs if r["status"] == "ok"]
        secs = [r["seconds"] for r in solved]
        lines.append(
            f"| {fam} | {len(rs)} | {len(solved)} | {sum(secs):.1f} "
            f"| {max(secs, default=0):.1f} |"
        )
    solved = [r for r in rows if r["status"] == "ok"]
    lines += ["", f"**Solved {len(solved)} of {len(rows)}.**", ""]
    slow = sorted(solved, key=lambda r: -r["seconds"])[:10]
    lines += [
        "Slowest ten solved:",
        "",
        "| instance | s | log10 FLOPs |",
        "|---|---:|---:|",
    ]
    for r in slow:
        f = r.get("flops")
        lines.append(
            f"| {r['instance']} | {r['seconds']:.1f} | "
            f"{math.log10(f) if f else 0:.1f} |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("dir", type=Path, nargs="?", default=Path("."))
    ap.add_argument("--task", choices=("MAR", "PR", "MAP"), default="MAR")
    ap.add_argument("--memory-limit", default="1GB")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        run_one(Path(args.one), args.task, args.memory_limit)
        return
    paths = sorted(args.dir.glob("*.uai"))
    if args.only:
        paths = [p for p in paths if p.name[: -len(".uai")] in args.only]
    rows = []
    for path in paths:
        row = sweep_one(path, args.task, args.memory_limit, args.timeout)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:  # rewritten after each instance: a partial sweep is kept
            text = [*table(rows, args.memory_limit, args.timeout), "", *summary(rows)]
            args.out.write_text("\n".join(text) + "\n")
    text = [*table(rows, args.memory_limit, args.timeout), "", *summary(rows)]
    if not args.out:
        print("\n".join(text))


if __name__ == "__main__":
    main()
