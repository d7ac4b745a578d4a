"""Marginals and MAP against pgmpy's exact VariableElimination, side by side.

For each ``X.uai`` given (with ``X.uai.evid`` when present), one fresh process
runs, in turn:

- einslice: ``marginals`` (every variable) and ``map_assignment``, each its
  first call (search, planning, compilation or host walk, run) and a second
  call of the same query (plans cached);
- pgmpy 1.x ``VariableElimination`` (elimination order ``"greedy"``, its
  default and the faster one in ``uai_bench.py``): ``query([v])`` for every
  unobserved variable (pgmpy has no all-marginals call in exact VE),
  ``max_marginal()`` (the MAP value, max-product elimination) and
  ``map_query()`` (the MAP states: pgmpy builds the joint over the query
  variables, so it runs out of memory beyond a few dozen), each within
  ``--pgmpy-seconds`` (then ``> N s``, with how many variables were done).

Checks: the largest absolute difference between the two libraries' marginals
(over the variables pgmpy finished), and the MAP assignments' scores (the sum
of log factor values at the assignment: equal scores are both optimal, when the
optimum is not unique the states may differ). pgmpy works in linear float64
(its products can under- or overflow on large models: shown as ``nan``).

Usage:
    python benchmarks/pgmpy_compare.py FILE.uai ... [--memory-limit 1GB]
        [--pgmpy-seconds 120] [--out benchmarks/results/pgmpy_compare.md]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PGMPY_MEMORY_BYTES = 6e9  # what pgmpy may allocate beyond what the process holds


class _OutOfTime(Exception):
    pass


def _alarm(seconds: float):
    def fire(signum, frame):
        raise _OutOfTime

    signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _cancel_alarm():
    signal.setitimer(signal.ITIMER_REAL, 0)


def _cap_address_space(extra: float) -> None:
    """Lets this process map ``extra`` more bytes, no more.

    Why: pgmpy multiplies tables in linear space and its ``map_query`` builds
    the joint of every query variable; past the machine's memory the kernel
    kills the process (losing einslice's figures too) where a cap gives a
    ``MemoryError`` that is reported.
    """
    import resource

    with open("/proc/self/status") as status:
        kb = next(int(ln.split()[1]) for ln in status if ln.startswith("VmSize:"))
    cap = int(kb * 1024 + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _asked(error: MemoryError) -> str:
    """numpy's "Unable to allocate 8.00 GiB for an array" as "asked for 8.00 GiB"."""
    found = re.search(r"allocate ([\d.]+ \w+)", str(error))
    return f"asked for {found.group(1)}" if found else str(error)[:60]


def _score(model, assignment: dict) -> float:
    """Σ log φ_f(x_f) at a full assignment (the MAP objective)."""
    return float(
        sum(f.log_table[tuple(assignment[v] for v in f.scope)] for f in model.factors)
    )


def _timed(row: dict, key: str, query, model, evidence, limit: str):
    """``query``'s result; its first call's and a second call's seconds in ``row``."""
    t = time.perf_counter()
    result = query(model, evidence, memory_limit=limit)
    row[f"einslice_{key}_first_s"] = time.perf_counter() - t
    t = time.perf_counter()
    query(model, evidence, memory_limit=limit)
    row[f"einslice_{key}_again_s"] = time.perf_counter() - t
    return result


def run_one(path: Path, limit: str, pgmpy_seconds: float) -> dict:
    import numpy as np

    from _common import import_einslice, pgmpy_network

    import_einslice()  # from this checkout's src/ when not installed
    import einslice.pgm as pgm

    model = pgm.read_uai(path)
    evid_path = Path(str(path) + ".evid")
    evidence = pgm.read_evidence(evid_path) if evid_path.exists() else {}
    row: dict = {"instance": path.stem, "variables": model.num_variables}
    row["factors"] = len(model.factors)
    row["evidence"] = len(evidence)

    marginals = _timed(row, "mar", pgm.marginals, model, evidence, limit)
    ours = marginals.variables
    found = _timed(row, "map", pgm.map_assignment, model, evidence, limit)
    row["einslice_map_score"] = _score(model, dict(found.assignment))
    row["einslice_map_value"] = found.log_value

    _cap_address_space(PGMPY_MEMORY_BYTES)
    from pgmpy.inference import VariableElimination

    names = [f"x{v}" for v in range(model.num_variables)]
    network = pgmpy_network(model)
    infer = VariableElimination(network)
    pg_evidence = {names[v]: int(s) for v, s in evidence.items()}
    free = [v for v in range(model.num_variables) if v not in evidence]

    done, worst = 0, 0.0  # nan once pgmpy's linear products over/underflow
    t = time.perf_counter()
    _alarm(pgmpy_seconds)
    try:
        for v in free:
            phi = infer.query(
                [names[v]],
                evidence=pg_evidence,
                elimination_order="greedy",
                show_progress=False,
            )
            p = np.asarray(phi.values, dtype=np.float64)
            p = p / p.sum()
            diff = float(np.max(np.abs(p - np.asarray(ours[v]))))
            worst = diff if math.isnan(diff) else max(worst, diff)  # nan sticks
            done += 1
        row["pgmpy_mar_s"] = time.perf_counter() - t
    except _OutOfTime:
        row["pgmpy_mar_s"] = None
    except MemoryError as e:
        row["pgmpy_mar_error"] = f"out of memory ({_asked(e)})"
    finally:
        _cancel_alarm()
    row["pgmpy_mar_done"] = f"{done}/{len(free)}"
    row["mar_max_abs_diff"] = worst if done else None

    t = time.perf_counter()
    _alarm(pgmpy_seconds)
    try:
        value = infer.max_marginal(
            evidence=pg_evidence, elimination_order="greedy", show_progress=False
        )
        row["pgmpy_mapvalue_s"] = time.perf_counter() - t
        with np.errstate(divide="ignore"):
            row["pgmpy_map_value"] = float(np.log(value))
    except _OutOfTime:
        row["pgmpy_mapvalue_s"] = None
    except MemoryError as e:
        row["pgmpy_mapvalue_error"] = f"out of memory ({_asked(e)})"
    finally:
        _cancel_alarm()

    t = time.perf_counter()
    _alarm(pgmpy_seconds)
    try:
        states = infer.map_query(
            evidence=pg_evidence, elimination_order="greedy", show_progress=False
        )
        row["pgmpy_map_s"] = time.perf_counter() - t
        theirs = {int(k[1:]): int(s) for k, s in states.items()}
        row["pgmpy_map_score"] = _score(model, {**theirs, **evidence})
    except _OutOfTime:
        row["pgmpy_map_s"] = None
    except MemoryError as e:
        row["pgmpy_map_error"] = f"out of memory ({_asked(e)})"
    finally:
        _cancel_alarm()
    return row


def _seconds(row: dict, key: str, cap: float, done: str = "") -> str:
    if row.get(f"{key}_error"):
        return row[f"{key}_error"] + (f" ({done} variables)" if done else "")
    value = row.get(f"{key}_s")
    if value is None:
        return f"> {cap:.0f} s" + (f" ({done} variables)" if done else "")
    return f"{value:.3g}"


def _ratio(theirs, ours) -> str:
    if theirs is None or ours is None:
        return "—"
    return f"{theirs / ours:.2g}×"


def report(rows: list[dict], args) -> str:
    cap = args.pgmpy_seconds
    lines = [
        "# Marginals and MAP: einslice against pgmpy's VariableElimination",
        "",
        f"Command: `python benchmarks/pgmpy_compare.py {' '.join(args.files_shown)}"
        f" --memory-limit {args.memory_limit} --pgmpy-seconds {cap:g}`",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, this 2-core "
        "machine. One fresh process per instance, both libraries in it. einslice "
        "*first*: the first call (search, planning, compiling or host walk, run); "
        "*again*: the same query a second time. pgmpy: `query([v])` per "
        "unobserved variable, `max_marginal()` (MAP value), `map_query()` (MAP "
        "states), elimination order `greedy`. *÷*: pgmpy's seconds over "
        "einslice's first call (einslice's MAP: value and states together).",
        "",
        "| instance | vars | factors | evid | einslice MAR first s | again s | "
        "pgmpy MAR s | pgmpy ÷ einslice | max abs diff | einslice MAP first s | "
        "again s | pgmpy MAP value s | pgmpy ÷ einslice | pgmpy MAP states s | "
        "MAP value einslice / pgmpy | MAP state score einslice / pgmpy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['instance']} | | | | error: {r['error']} |||||||||||")
            continue
        diff = r.get("mar_max_abs_diff")
        ours, theirs = r.get("einslice_map_score"), r.get("pgmpy_map_score")
        scores = f"{ours:.6f} / " + ("—" if theirs is None else f"{theirs:.6f}")
        ours, theirs = r.get("einslice_map_value"), r.get("pgmpy_map_value")
        values = f"{ours:.6f} / " + ("—" if theirs is None else f"{theirs:.6f}")
        lines.append(
            f"| {r['instance']} | {r['variables']} | {r['factors']} | "
            f"{r['evidence']} | {r['einslice_mar_first_s']:.3g} | "
            f"{r['einslice_mar_again_s']:.3g} | "
            f"{_seconds(r, 'pgmpy_mar', cap, r['pgmpy_mar_done'])} | "
            f"{_ratio(r.get('pgmpy_mar_s'), r['einslice_mar_first_s'])} | "
            f"{'—' if diff is None else f'{diff:.1e}'} | "
            f"{r['einslice_map_first_s']:.3g} | {r['einslice_map_again_s']:.3g} | "
            f"{_seconds(r, 'pgmpy_mapvalue', cap)} | "
            f"{_ratio(r.get('pgmpy_mapvalue_s'), r['einslice_map_first_s'])} | "
            f"{_seconds(r, 'pgmpy_map', cap)} | {values} | {scores} |"
        )
    for pgmpy_key, ours_key, what in (
        ("pgmpy_mar_s", "einslice_mar_first_s", "MAR, first call"),
        (
            "pgmpy_mapvalue_s",
            "einslice_map_first_s",
            "MAP value against einslice's MAP assignment, first call",
        ),
    ):
        both = [(r[pgmpy_key], r[ours_key]) for r in rows if r.get(pgmpy_key)]
        if both:
            geo = math.exp(sum(math.log(a / b) for a, b in both) / len(both))
            lines += [
                "",
                f"Geometric mean of pgmpy ÷ einslice ({what}), where pgmpy "
                f"finished: {geo:.3g}× over {len(both)} instances.",
            ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--memory-limit", default="1GB")
    parser.add_argument("--pgmpy-seconds", type=float, default=120.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(
            "ROW "
            + json.dumps(run_one(args.files[0], args.memory_limit, args.pgmpy_seconds)),
            flush=True,
        )
        return 0
    args.files_shown = [f.name for f in args.files]
    rows = []
    for path in args.files:
        child = [
            sys.executable,
            __file__,
            str(path),
            "--child",
            "--memory-limit",
            args.memory_limit,
            "--pgmpy-seconds",
            str(args.pgmpy_seconds),
        ]
        try:
            with tempfile.TemporaryDirectory() as cache:  # an empty einslice cache
                env = {**os.environ, "EINSLICE_CACHE_DIR": cache}
                done = subprocess.run(
                    child, capture_output=True, text=True, timeout=args.timeout, env=env
                )
            found = [ln for ln in done.stdout.splitlines() if ln.startswith("ROW ")]
            if found:
                row = json.loads(found[-1][4:])
            else:
                lines = [ln for ln in done.stderr.splitlines() if "Error" in ln]
                why = (lines or [f"exit status {done.returncode}"])[-1]
                row = {"instance": path.stem, "error": why[:200]}
        except subprocess.TimeoutExpired:
            row = {"instance": path.stem, "error": f"over {args.timeout:.0f} s"}
        print(json.dumps(row), flush=True)
        rows.append(row)
    text = report(rows, args)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
