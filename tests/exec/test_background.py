"""The background thread of runners (`_background`): jobs run, and the process exits.

A thread that used JAX and is alive when the interpreter finalizes aborts
the process ("FATAL: exception not rethrown"): the exit hook waits for a
compile under way and interrupts a job in Python. Each test runs a fresh
process that exits while its background job runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from einslice._exec import _background

# A 40-matrix chain: a many-step plan, first run on the host; the call after
# its host budget is spent starts the compile in the background.
_COMPILING = """
import time
import numpy as np
import einslice
from einslice._exec import _background, _run

ops = [np.full((3, 3), 0.5) for _ in range(40)]
args = []
for i, x in enumerate(ops):
    args += [x, [i, i + 1]]
p = einslice.plan(*args, [0, 40])
runner = _run._top_level_run(p)
runner.host_spent = runner.host_budget
p(*ops)
deadline = time.monotonic() + 60
while not _background._in_jax and runner.busy.locked():
    assert time.monotonic() < deadline
    time.sleep(0.001)
print("exiting while compiling:", _background._in_jax, flush=True)
"""

# A job that would never end in Python (as a long growth search).
_SEARCHING = """
import time
import jax.numpy as jnp
from einslice._exec import _background

_background.submit(lambda: _background.jax_work(lambda: jnp.ones(3).sum()))
started = []
def forever():
    started.append(True)
    while True:
        sum(range(100))
_background.submit(forever)
while not started:
    time.sleep(0.001)
print("exiting while searching", flush=True)
"""


def _exits(script: str, tmp_path) -> str:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "EINSLICE_CACHE_DIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FATAL" not in done.stderr
    assert time.monotonic() - start < 120
    return done.stdout


@pytest.mark.slow
def test_the_process_exits_while_the_background_compiles(tmp_path):
    assert "exiting while compiling: 1" in _exits(_COMPILING, tmp_path)


@pytest.mark.slow
def test_the_process_exits_while_a_background_job_runs_python(tmp_path):
    assert "exiting while searching" in _exits(_SEARCHING, tmp_path)


def test_jobs_run_in_order_and_one_that_fails_does_not_stop_the_next():
    ran = []
    _background.submit(lambda: ran.append(1))
    _background.submit(lambda: 1 / 0)
    _background.submit(lambda: ran.append(threading.current_thread().name))
    assert _background.drain(60)
    assert ran == [1, "einslice-background"]
