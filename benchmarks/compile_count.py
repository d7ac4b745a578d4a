"""A pytest plugin: how many XLA programs each test compiles, and in how long.

On an accelerator a test's time is mostly its compiles (~0.2-1 s a program on
a TPU v5e), so the accelerator subset (tests/conftest.py's ACCELERATOR_TESTS)
is sized by this count. Load it with ``-p``, from the repository root::

    PYTHONPATH=benchmarks python -m pytest -q -m accelerator -p compile_count

Counts every backend compile (JAX's ``backend_compile_duration`` event, all
threads: einslice's background compiles too) from a test's setup to its
teardown, and prints the tests by count, then the total. A program already in
JAX's in-memory cache is not compiled again, so a test's count depends on the
tests before it: compare counts of the same selection.
"""

from __future__ import annotations

import threading

import jax
import pytest

_EVENT = "/jax/core/compile/backend_compile_duration"
_lock = threading.Lock()
_total = {"programs": 0, "seconds": 0.0}
_rows: list[tuple[int, float, str]] = []


def _on_event(event: str, duration_secs: float, **_) -> None:
    if event == _EVENT:
        with _lock:
            _total["programs"] += 1
            _total["seconds"] += duration_secs


jax.monitoring.register_event_duration_secs_listener(_on_event)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with _lock:
        programs, seconds = _total["programs"], _total["seconds"]
    yield
    with _lock:
        programs = _total["programs"] - programs
        seconds = _total["seconds"] - seconds
    _rows.append((programs, seconds, item.nodeid))


def pytest_terminal_summary(terminalreporter):
    write = terminalreporter.write_line
    terminalreporter.section("XLA programs compiled, per test")
    for programs, seconds, nodeid in sorted(_rows, key=lambda r: (-r[0], r[2])):
        write(f"{programs:5d} {seconds:8.2f} s  {nodeid}")
    programs = sum(r[0] for r in _rows)
    seconds = sum(r[1] for r in _rows)
    write(f"{programs:5d} {seconds:8.2f} s  in all ({len(_rows)} tests)")
