"""MAR and MAP against PR, end to end, each in a fresh process (issue 21, point 3).

For each instance (with its evidence) and task, one fresh Python process
imports ``einslice.pgm``, reads the model and calls the public function once
(``log_partition``, ``marginals``, ``map_assignment``) at the memory limit.
Reported: the call's seconds (planning, compiling, running) and the whole
process's (imports and reading included), and the ratio of MAR's and MAP's
process time to PR's. ``--src`` runs another checkout's ``src`` (e.g. main's,
for a before/after table).

Usage:
    python benchmarks/mar_vs_pr.py Promedus_24 Grids_12 [--src DIR]
        [--limit 256MB] [--timeout 300]  # instances in ../shared/data/uai
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "uai"
if not SHARED.is_dir():  # a git worktree sits one level deeper
    SHARED = ROOT.parents[1] / "shared" / "data" / "uai"

CHILD = """
import json, sys, time
from pathlib import Path
from einslice.pgm import log_partition, map_assignment, marginals
from einslice.pgm import read_evidence, read_uai
name, task, limit, shared = sys.argv[1:5]
model = read_uai(Path(shared) / f"{name}.uai")
evid = Path(shared) / f"{name}.uai.evid"
evidence = read_evidence(evid) if evid.exists() else {}
t = time.perf_counter()
if task == "PR":
    value = log_partition(model, evidence, memory_limit=limit)
elif task == "MAR":
    value = marginals(model, evidence, memory_limit=limit).log_partition
else:
    value = map_assignment(model, evidence, memory_limit=limit).log_value
print("RESULT " + json.dumps({"call_s": time.perf_counter() - t, "value": value}))
"""


def run(name: str, task: str, limit: str, src: Path, timeout: float) -> dict:
    args = [sys.executable, "-c", CHILD, name, task, limit, str(SHARED)]
    # Why an empty einslice cache each: a tree searched for one task (or an
    # earlier run) would be read from disk by the next, unsearched.
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYTHONPATH": str(src), "EINSLICE_CACHE_DIR": cache}
        t = time.perf_counter()
        try:
            done = subprocess.run(
                args, env=env, capture_output=True, text=True, timeout=timeout
            )
            wall = time.perf_counter() - t
        except subprocess.TimeoutExpired:
            return {"status": f"timeout {timeout:.0f} s"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return {"status": "ok", "process_s": wall, **json.loads(line[7:])}
    return {"status": "error: " + (done.stderr.strip().splitlines() or ["?"])[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("names", nargs="+")
    ap.add_argument("--src", type=Path, default=ROOT / "src")
    ap.add_argument("--limit", default="256MB")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--tasks", nargs="+", default=["PR", "MAR", "MAP"])
    args = ap.parse_args()
    print(f"src: {args.src}; limit {args.limit}; load {os.getloadavg()[0]:.1f}")
    head = ["instance"]
    for task in args.tasks:
        head += [f"{task} call", f"{task} process"]
    head += [f"{t}/PR" for t in args.tasks if t != "PR"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in args.names:
        rows = {t: run(name, t, args.limit, args.src, args.timeout) for t in args.tasks}
        cells = [name]
        for task in args.tasks:
            r = rows[task]
            if r["status"] != "ok":
                cells += [r["status"], ""]
            else:
                cells += [f"{r['call_s']:.2f} s", f"{r['process_s']:.2f} s"]
        pr = rows.get("PR", {}).get("process_s")
        for task in args.tasks:
            if task != "PR":
                other = rows[task].get("process_s")
                cells.append(f"{other / pr:.1f}x" if pr and other else "")
        print("| " + " | ".join(cells) + " |", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
