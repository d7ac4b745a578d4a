"""Growth's searches in a child process (`_apart`): same plans, no JAX, stoppable."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import einslice
from einslice._exec import _apart, _grow
from einslice._plan import _planner
from einslice._plan._search import TreeSearch

N = 16  # more than 12 operands: the large-network search, which grows


def _request():
    rng = np.random.default_rng(0)
    args = []
    for i in range(N):
        args += [rng.uniform(0.5, 1.0, (3, 3)), [i, (i + 1) % N]]
    p = einslice.plan(*args, [])
    request = _planner.grown_request(p)
    assert request is not None
    return request


def test_the_child_finds_the_plans_this_process_would(tmp_path, monkeypatch):
    monkeypatch.setenv("EINSLICE_CACHE_DIR", str(tmp_path))
    request = _request()
    search = TreeSearch(trials=8, runs=100, budget=1e-4)
    apart = _apart.grown_plans_apart(request, search)
    here = _planner.grown_plans(request, search)
    assert [q is None for q in apart] == [q is None for q in here]
    for a, h in zip(apart, here, strict=True):
        if a is not None and h is not None:
            assert _grow.program_key(a) == _grow.program_key(h)


def test_the_child_loads_no_jax(monkeypatch):
    check = "\nassert not [m for m in sys.modules if m.split('.')[0] == 'jax'], 'jax'\n"
    monkeypatch.setattr(_apart, "_CHILD", _apart._CHILD + check)
    plan, _ = _apart.grown_plans_apart(_request(), TreeSearch(trials=2))
    assert plan.path


def test_growth_searches_in_the_child(monkeypatch):
    asked = []

    def apart(request, search):
        asked.append(search)
        return _planner.grown_plans(request, search)

    monkeypatch.setattr(_apart, "grown_plans_apart", apart)
    _grow.grown_plans(_request(), 1e-4, 100)
    assert [(s.budget, s.runs) for s in asked] == [(1e-4, 100)]
    monkeypatch.setattr(_grow, "SEARCH_APART", False)
    _grow.grown_plans(_request(), 1e-4, 100)
    assert len(asked) == 1


def test_a_failing_child_raises_what_it_said(monkeypatch):
    monkeypatch.setattr(_apart, "_CHILD", "import sys; sys.exit('no search here')")
    with pytest.raises(RuntimeError, match="status 1: no search here"):
        _apart.grown_plans_apart(_request(), TreeSearch(trials=2))


def test_a_wait_stopped_at_exit_kills_the_child(monkeypatch):
    # the exit hook raises in the waiting thread (`_background._stop`): the
    # child must not outlive it
    monkeypatch.setattr(_apart, "_CHILD", "import time; time.sleep(120)")
    started = []
    popen = subprocess.Popen

    def spy(*args, **kwargs):
        started.append(popen(*args, **kwargs))
        return started[-1]

    class Stop(BaseException):
        pass

    def stop(seconds):
        raise Stop

    monkeypatch.setattr(subprocess, "Popen", spy)
    monkeypatch.setattr(_apart.time, "sleep", stop)
    with pytest.raises(Stop):
        _apart.grown_plans_apart(_request(), TreeSearch(trials=2))
    assert len(started) == 1 and started[0].returncode is not None


def test_a_frozen_application_searches_in_this_process(monkeypatch):
    # its executable is the application, not an interpreter to run -c with
    monkeypatch.setattr(_apart.sys, "frozen", True, raising=False)
    assert not _apart.available()
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
    plan, _ = _grow.grown_plans(_request(), 1e-4, 100)
    assert plan.path and started == []
