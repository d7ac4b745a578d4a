"""Growth's tree searches in a child process: off the GIL, at the lowest priority.

A growth search (``_grow.grown_plans``) is seconds of pure Python. Run on
the background thread (``_background``) it held the GIL but for Python's
switch interval (5 ms) each time a call wanted it back after JAX released
it, and a call wants it back several times: a reused plan's call of
lattice-8x8 (einsum-benchmark, 63 steps, 2.9 ms quiet on 2 cores) took
14.7 ms (median of 765 calls) while a search ran, 5x (issue 36). The
planner is pure Python (it never imports JAX), so a child interpreter runs
the search without the parent's JAX: it imports only ``einslice._plan``
(skipping ``einslice/__init__.py``), lowers its priority to `NICE`, reads
the pickled request from its stdin and writes the pickled plans to its
stdout. The search is the same (same seed, same budget, the same tree
cache on disk under ``EINSLICE_CACHE_DIR``), so its plans are the ones the
parent would have found.

The parent's background thread waits for the child in short sleeps, so
that the exit hook (``_background``) can stop it at once; the child is
killed then, and on any error.

Example:
    >>> from einslice._plan._equation import build_equation, parse_subscripts
    >>> from einslice._plan._request import PlanRequest
    >>> from einslice._plan._search import TreeSearch
    >>> eq = build_equation(parse_subscripts("ij,jk->ik", 2), ((4, 5), (5, 6)))
    >>> request = PlanRequest(eq, 4, "float32", 2**20)
    >>> plan, second = grown_plans_apart(request, TreeSearch())
    >>> plan.flops, second
    (240, None)
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from .._plan._request import PlanRequest
from .._plan._search import TreeSearch
from .._plan._types import Plan
from . import _background

# The child's niceness: the background thread's (``_background.NICE``, 10:
# a call's thread gets ~90% of a core it shares with the child). At 19 a
# search on the loaded 2-core machine (load average 4) took over 30 s for a
# budget that took 3 s at 10 (lattice-8x8).
NICE = _background.NICE
# The parent polls the child this often (seconds): the exit hook's
# interruption lands within one poll.
POLL = 0.02
_PACKAGE = str(Path(__file__).resolve().parents[1])  # .../einslice
_CHILD = textwrap.dedent(
    """
    import os, pickle, sys, types
    try:
        os.nice({nice})
    except (AttributeError, OSError):
        pass
    package = types.ModuleType("einslice")
    package.__path__ = [sys.argv[1]]
    sys.modules["einslice"] = package  # (skip einslice/__init__.py: no JAX)
    from einslice._plan._planner import grown_plans
    request, search = pickle.load(sys.stdin.buffer)
    result = grown_plans(request, search)
    sys.stdout.buffer.write(pickle.dumps(result))
    """
).format(nice=NICE)


def grown_plans_apart(
    request: PlanRequest, search: TreeSearch
) -> tuple[Plan, Plan | None]:
    """``_planner.grown_plans(request, search)``, run in a child interpreter.

    Raises:
        RuntimeError: the child failed (its last line of stderr says why).
    """
    data = pickle.dumps((request, search))
    # (this process's import path: the child finds what the parent would,
    # cotengra's reference among it)
    path = os.pathsep.join(p for p in sys.path if p)
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD, _PACKAGE],
        env=dict(os.environ, PYTHONPATH=path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:  # (its exit closes the pipes and reaps the child)
        try:
            given: bytes | None = data
            while True:
                try:
                    out, err = proc.communicate(given, timeout=POLL)
                    break
                except subprocess.TimeoutExpired:
                    given = None  # (sent: communicate() goes on with the rest)
                    time.sleep(POLL)  # (Python: an exit's interruption lands here)
        except BaseException:  # (the exit hook's, or an error)
            proc.kill()
            raise
    if proc.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines() or ["no message"]
        raise RuntimeError(
            f"the growth search's process exited with status {proc.returncode}: "
            f"{lines[-1]}"
        )
    return pickle.loads(out)


def available() -> bool:
    """Whether ``sys.executable`` is an interpreter to start a child with.

    Not in a frozen application (PyInstaller and the like: it would start
    the application again), nor where there is none (embedded): growth then
    searches in this process (``_grow.grown_plans``).

    Example:
        >>> available() == bool(sys.executable and os.path.exists(sys.executable))
        True
    """
    if getattr(sys, "frozen", False):
        return False
    return bool(sys.executable) and os.path.exists(sys.executable)
