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
    assert {m: sum(map(len, t)) for m, t in times.items()} == runs
    # one list per turn: a's 7 runs in 5 turns, the first turns taking more
    assert [len(t) for t in times["a"]] == [2, 2, 1, 1, 1]
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
    assert [len(t) for t in times["a"]] == [2, 2, 2]
    assert [len(t) for t in times["b"]] == [1, 1, 1]
    assert log.count("a") == 6 + 3  # a lead-in call in each of a's 3 turns
    assert log.count("b") == 3


def test_a_method_slower_than_the_budget_is_not_repeated(monkeypatch):
    monkeypatch.setattr(_run.time, "sleep", lambda s: None)
    log = []
    times = _timed_turns(_ready("ab", log), {"a": 0, "b": 2}, {"a": 9.0, "b": 1.0}, 5)
    assert times["a"] == [] and [len(t) for t in times["b"]] == [1, 1]
    assert log == ["b", "b"]


def test_a_call_over_max_seconds_is_not_repeated(monkeypatch):
    monkeypatch.setattr(_run.time, "sleep", lambda s: None)
    clock = iter(float(k) for k in range(1000))  # every call takes 1 "second"
    monkeypatch.setattr(_run.time, "perf_counter", lambda: next(clock))
    log = []
    ready = _ready("ab", log)
    times = _timed_turns(ready, {"a": 4, "b": 4}, {"a": 0.1, "b": 0.1}, 4,
                         max_seconds=0.5)  # fmt: skip
    # each method's first timed call went over: no further calls, marked
    assert times == {"a": [[1.0]], "b": [[1.0]]}
    assert log == ["a", "b"]
    assert all(cell.over_time for cell, _ in ready)


def test_the_progress_bar_names_formula_n_and_method_and_reaches_the_total(
    monkeypatch,
):
    from einslice.bench._measure import Device
    from einslice.bench._methods import Context, resolve_methods
    from einslice.bench._suite import seed_formula

    class Bar:
        def __init__(self):
            self.done, self.seen = 0, []

        def set_description(self, text):
            self.seen.append(text)

        def update(self, n):
            self.done += n

        def close(self):
            pass

    bar = Bar()
    methods = resolve_methods(["einslice", "jnp.einsum", "vmap_einsum"])
    formulas = [seed_formula(n) for n in (4, 8)]
    monkeypatch.setattr(_run, "_progress_bar", lambda total, enabled: bar)
    cells = _run.run(formulas, methods, Context(None, None, 10**9),
                     Device("cpu", "test", 10**9), matmul_gflops=1.0,
                     rounds=2, budget=0.5)  # fmt: skip
    assert bar.done == len(cells) == 6
    assert "ij,ik,il,jk,jl,kl->ij n=8 einslice: round 2/2" in bar.seen
    assert "ij,ik,il,jk,jl,kl->ij n=4 vmap_einsum: warm-up" in bar.seen
    assert all(len(c.rounds) == 2 for c in cells if c.ran)
