"""Peak RSS and wall time of the CLI on every UAI instance, PR and MAR.

Runs ``python -m einslice uai <instance> [--evid <instance>.evid] --task
PR|MAR --memory-limit 256MB`` in a fresh process under ``/usr/bin/time -v``
(GNU time) for each instance of ``../shared/data/uai`` (or ``--dir``, e.g.
UAI 2014's MAR set extracted from dechterlab/uai-competitions) and writes a
markdown table: the issue's target is a peak RSS under 1 GB for a 256 MB
limit. The evidence file is passed when it observes a variable. Wall times
include search, tracing, compilation and the run (each run starts from an
empty einslice cache directory); they are rough on a shared machine.

    python benchmarks/cli_rss.py [--dir DIR] [--only Grids_15,CSP_11]
        [--timeout SECONDS] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import RESULTS

ROOT = Path(__file__).resolve().parents[1]
UAI = ROOT.parent / "shared" / "data" / "uai"
GIB = 1024**3


def measure(
    instance: Path, task: str, timeout: float | None = None
) -> tuple[int, str, int]:
    """Peak RSS (bytes), wall time (h:mm:ss) and exit code of one CLI run.

    Exit code 124: stopped by ``timeout`` (the RSS is what it reached).
    """
    # an empty cache directory: every run searches its tree and compiles anew
    cache = tempfile.mkdtemp(prefix="einslice-rss-")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), EINSLICE_CACHE_DIR=cache)
    limit = ["timeout", str(timeout)] if timeout else []
    command = ["/usr/bin/time", "-v", *limit, sys.executable, "-m", "einslice",
               "uai", str(instance), "--task", task,
               "--memory-limit", "256MB"]  # fmt: skip
    evid = instance.with_name(instance.name + ".evid")
    if evid.exists() and evid.read_text().split()[:1] not in ([], ["0"]):
        command += ["--evid", str(evid)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)[1])
    wall = re.search(r"Elapsed \(wall clock\) time .*: (\S+)", done.stderr)[1]
    return rss * 1024, wall, done.returncode


def _commit() -> str:
    """The checked-out commit, for the table's header."""
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=UAI, help="the instances' folder")
    parser.add_argument("--only", help="comma-separated instance names")
    parser.add_argument("--timeout", type=float, help="seconds a run may take")
    parser.add_argument("--out", default=os.path.join(RESULTS, "cli_rss.md"))
    args = parser.parse_args()
    instances = sorted(args.dir.glob("*.uai"))
    if args.only:
        instances = [p for p in instances if p.stem in args.only.split(",")]
    lines = ["# Peak RSS of the CLI under --memory-limit 256MB", "",
             f"- instances: {args.dir}",
             f"- commit {_commit()}; {time.strftime('%Y-%m-%d %H:%M %Z')}; load "
             f"average at start {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
             "- command: `python benchmarks/cli_rss.py`", "",
             "| instance | task | peak RSS (MiB) | under 1 GB | wall | exit |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for instance in instances:
        for task in ("PR", "MAR"):
            rss, wall, code = measure(instance, task, args.timeout)
            under = "yes" if rss < GIB else "**no**"
            cells = [instance.stem, task, f"{rss / 2**20:.0f}", under, wall, str(code)]
            row = "| " + " | ".join(cells) + " |"
            print(row, flush=True)
            lines.append(row)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
