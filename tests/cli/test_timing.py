"""The benchmark's timing turns (bench/_run.py): counts, order, pauses."""

from __future__ import annotations

from functools import partial

from einslice.bench import _run
from einslice.bench._methods import Runner
from einslice.bench._run import Cell, _timed_turns


def _ready(names, log):
    """A cell and a runner per method name; every call is logged by name."""
    return [
        (Cell("f", 1, n, "ok"), Runner(partial(log.append, n), 0, "compiled", 0))
        for n in names
    ]


def test_each_method_gets_its_runs_in_rotating_turns(monkeypatch):
    pauses = []
    monkeypatch.setattr(_run.time, "sleep", pauses.append)
    log = []
    ready = _ready("abc", log)
    runs = {"a": 7, "b": 2, "c": 5}
    slow = {"a": 1.0, "b": 1.0, "c": 1.0}  # no lead-in calls
    times = _timed_turns(ready, runs, slow, max_turns=5)
    assert {m: len(t) for m, t in times.items()} == runs
    assert log.count("a") == 7 and log.count("b") == 2 and log.count("c") == 5
    # turns: a gets 2,2,1,1,1 calls; b 1,1; c 1 each; turn t starts at method t
    assert "".join(log) == "aabc" + "bcaa" + "ca" + "ac" + "ca"
    assert len(pauses) == 5 + 2 + 5  # one pause per turn
    assert set(pauses) == {_run.QUIET_SECONDS}


def test_fast_calls_get_an_untimed_lead_in_call_per_turn(monkeypatch):
    monkeypatch.setattr(_run.time, "sleep", lambda s: None)
    log = []
    ready = _ready("ab", log)
    times = _timed_turns(ready, {"a": 6, "b": 3}, {"a": 1e-4, "b": 1.0}, 3)
    assert len(times["a"]) == 6 and len(times["b"]) == 3
    assert log.count("a") == 6 + 3  # a lead-in call in each of a's 3 turns
    assert log.count("b") == 3


def test_a_method_slower_than_the_budget_is_not_repeated(monkeypatch):
    monkeypatch.setattr(_run.time, "sleep", lambda s: None)
    log = []
    times = _timed_turns(_ready("ab", log), {"a": 0, "b": 2}, {"a": 9.0, "b": 1.0}, 5)
    assert times == {"a": [], "b": [times["b"][0], times["b"][1]]}
    assert log == ["b", "b"]
