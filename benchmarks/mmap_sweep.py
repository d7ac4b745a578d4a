"""Marginal MAP on the UAI 2014 MMAP instances, one fresh process each.

For each ``X.uai`` under DIR with ``X.uai.query`` (and ``X.uai.evid`` when
present): `einslice.pgm.marginal_map` within ``--memory-limit``, in a
subprocess capped at ``--timeout`` seconds. Then, in the same child, the
returned assignment is re-evaluated independently: ``log_partition`` of the
model with the evidence and the query clamped to the assignment (one
contraction of the whole network, float64), which must equal the returned
log-value. The table lists the query size, the summed components and the
widest boundary (query variables one component's sum leaves a table over:
exact marginal MAP by elimination needs that table), time, peak RSS, the
value, the check, the query variables clamped to fit the limit, and for a
failure its reason (``memory`` with the smallest limit, ``out of reach``
with the max stage's width bounds, ``timeout``).

The instances come from the ``dechterlab/uai-competitions`` repository
(``UAI-2014/MMAP/*.zip``); extract them outside this repository.

Usage:
    python benchmarks/mmap_sweep.py DIR [--memory-limit 1GB] [--timeout 600]
        [--only NAME ...] [--out benchmarks/results/mmap_uai2014.md]
        [--jsonl ROWS.jsonl] [--render]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _emit(**row) -> None:
    print("ROW " + json.dumps(row), flush=True)


def run_one(path: Path, limit: str) -> None:
    """Prints ``ROW {json}``: the structure, then the result, then the check."""
    import resource

    import jax

    jax.config.update("jax_enable_x64", True)
    from einslice import EinsliceError, MemoryLimitError
    from einslice.pgm import (
        _mmap,
        log_partition,
        marginal_map,
        read_evidence,
        read_query,
        read_uai,
    )

    model = read_uai(path)
    evid = Path(f"{path}.evid")
    evidence = read_evidence(evid) if evid.exists() else {}
    query = read_query(f"{path}.query")
    cond = model.condition(evidence)
    position = {name: i for i, name in enumerate(cond.variables)}
    components, _ = _mmap._components(cond, {position[q] for q in query})
    widest = max((len(b) for _, b, _ in components), default=0)
    table_bytes = 8 * sum(
        math.prod(cond.cardinalities[v] for v in b) for _, b, _ in components
    )
    _emit(
        variables=model.num_variables,
        factors=len(model.factors),
        query=len(query),
        observed=len(evidence),
        components=len(components),
        widest=widest,
        table_bytes=table_bytes,
    )
    start = time.perf_counter()
    try:
        result = marginal_map(model, query, evidence, memory_limit=limit)
    except MemoryLimitError as e:
        _emit(status="memory", smallest=e.smallest_limit, message=str(e)[:600])
        return
    except EinsliceError as e:  # the max stage out of reach (its width bounds)
        seconds = time.perf_counter() - start
        _emit(status="reach", seconds=seconds, message=str(e)[:600])
        return
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    _emit(
        status="ok",
        seconds=seconds,
        log_value=result.log_value,
        rss_mb=rss,
        clamped=len(result.clamped),
        subproblems=result.subproblems,
    )
    clamped: dict = {**evidence, **result.assignment}
    start = time.perf_counter()
    check = log_partition(model, clamped, memory_limit=limit, dtype="float64")
    _emit(check=check, check_seconds=time.perf_counter() - start)


def _child(path: Path, limit: str, timeout: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, __file__, "--child", str(path), "--memory-limit", limit]
    row: dict = {"name": path.name.removesuffix(".uai")}
    err = ""
    try:
        done = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout
        )
        out, err = done.stdout, f"exit {done.returncode}: " + done.stderr[-300:]
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        row["status"] = "timeout"
    for line in out.splitlines():
        if line.startswith("ROW "):
            row.update(json.loads(line[4:]))
    if "status" not in row:
        row.update(status="error", error=" ".join(err.split()))
    return row


def _markdown(rows: list[dict], limit: str, timeout: float) -> str:
    load = os.getloadavg()[0]
    lines = [
        "# Marginal MAP on the UAI 2014 MMAP instances",
        "",
        f"`python benchmarks/mmap_sweep.py DIR --memory-limit {limit} "
        f"--timeout {timeout:g}` (DIR: `UAI-2014/MMAP/*.zip` of "
        "dechterlab/uai-competitions, extracted); "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
        f"{load:.2f} on {os.cpu_count()} cores (shared machine).",
        "",
        "*widest*: the most query variables one component of summed variables "
        "touches (exact MMAP by elimination tabulates the sum over it); *tables*: "
        "all such tables in float64. *check*: ln Z of the model with evidence and "
        "the query clamped to the returned assignment (`log_partition`, float64, "
        "an independent contraction), minus the returned log-value.",
        "",
        "| instance | vars | query | components | widest | tables | status | "
        "s | RSS MB | ln value | check |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        status = r["status"]
        if status == "memory":
            status = f"memory (needs {r['smallest'] / 1e9:.3g} GB)"
        elif status == "reach":
            status = "out of reach (" + _bounds(r.get("message", "")) + ")"
        elif status == "ok" and r.get("clamped"):
            status = f"ok, {r['clamped']} clamped ({r['subproblems']} sub-problems)"
        value = f"{r['log_value']:.6f}" if "log_value" in r else "—"
        check = (
            f"{r['check'] - r['log_value']:.1e}"
            if "check" in r and "log_value" in r
            else ("not reached" if "log_value" in r else "—")
        )
        tables = r.get("table_bytes")
        tables_text = f"{tables / 1e6:.3g} MB" if tables is not None else "—"
        lines.append(
            f"| {r['name']} | {r.get('variables', '—')} | {r.get('query', '—')} | "
            f"{r.get('components', '—')} | {r.get('widest', '—')} | {tables_text} | "
            f"{status} | {_number(r.get('seconds'), '.1f')} | "
            f"{_number(r.get('rss_mb'), '.0f')} | {value} | {check} |"
        )
    solved = sum(r["status"] == "ok" for r in rows)
    lines += ["", f"Solved {solved} of {len(rows)} within {limit} and {timeout:g} s."]
    return "\n".join(lines) + "\n"


def _natural(name: str) -> tuple:
    """Promedas_9 before Promedas_10."""
    family, _, number = name.rpartition("_")
    return (family, int(number)) if number.isdigit() else (name, 0)


def _bounds(message: str) -> str:
    """'STAGE: treewidth >= L, order 2^U' from the out-of-reach message."""
    import re

    lower = re.search(r"treewidth at least (\d+)", message)
    upper = re.search(r"a step of 2\^(\d+) entries", message)
    if not (lower and upper):
        return "?"
    stage = "sum" if "summing out" in message else "max"
    return f"{stage}: treewidth ≥ {lower[1]}, order 2^{upper[1]}"


def _number(x, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--memory-limit", default="1GB")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--jsonl", type=Path, default=None, help="append rows here")
    parser.add_argument(
        "--render",
        action="store_true",
        help="only write the table from the rows already in --jsonl",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_one(args.dir, args.memory_limit)
        return
    if args.render:
        rows = [json.loads(line) for line in args.jsonl.read_text().splitlines()]
        latest = {r["name"]: r for r in rows}  # a name run again: its last row
        ordered = sorted(latest.values(), key=lambda r: _natural(r["name"]))
        text = _markdown(ordered, args.memory_limit, args.timeout)
        if args.out:
            args.out.write_text(text)
        print(text)
        return
    paths = sorted(p for p in args.dir.rglob("*.uai") if Path(f"{p}.query").exists())
    if args.only:
        paths = [p for p in paths if p.name.removesuffix(".uai") in args.only]
    rows = []
    for path in paths:
        row = _child(path, args.memory_limit, args.timeout)
        rows.append(row)
        print(json.dumps(row)[:300], flush=True)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
    text = _markdown(rows, args.memory_limit, args.timeout)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
