"""Work off the call path: one thread, at low priority, for every runner.

A top-level runner (``_run._TopLevelRun``) hands this thread what no call
asked for: compiling the program that replaces the host walk, the optimized
recompile, growth searches (run in a child process that the thread waits
for: ``_apart``) and the compiles of the plans they found. Calls
go on meanwhile with what the runner holds; the runner swaps in the result
between two calls.

The interface, for any such work: `submit` a job (it runs after the jobs
before it; it stores its own result where the calls pick it up, one
attribute assignment, atomic under the GIL); `drain`: wait for the jobs so far
(tests, benchmarks); `jax_work` around every JAX call of a job (see Exit).
``EINSLICE_BACKGROUND=0`` (`enabled`) runs each job at once on the thread
that submits it, a call then waiting for it as it did before this thread
existed (for debugging, or where threads are unwelcome).

- **One thread, one job at a time, first come first served.** On a machine
  of two cores one job beside the user's calls is what it affords; a second
  would take the user's core.
- **Low priority.** On Linux the thread runs at nice `NICE` (XLA's compile
  on it too): where it and a call want the same core, the call gets about
  ten times its share. The GIL is shared still: a call waits for it at
  most Python's switch interval (5 ms) while the thread runs Python (a
  search, tracing a program).
- **Exit.** JAX does not survive a thread that used it and is still alive
  when the interpreter finalizes: a daemon thread that compiled a program
  and then waited for its next job aborted the exit of 6 processes in 6
  ("FATAL: exception not rethrown"); stopped inside a compile, it
  segfaulted. So the thread is not a daemon, and a hook that
  ``threading`` runs before it joins such threads (``_register_atexit``,
  as ``concurrent.futures`` does) stops it: no JAX work starts after it, a
  compile under way is waited for (an exit waits at most one compile, as
  a call compiling on the main thread would have made it), and a job in
  Python (a growth search) is interrupted with `_Stop`, raised in the
  thread at its next Python instruction.

Example:
    >>> import threading
    >>> done = threading.Event()
    >>> submit(done.set)
    >>> done.wait(10)
    True
"""

from __future__ import annotations

import atexit
import ctypes
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# The background thread's niceness on Linux (19: the lowest priority). 10:
# CFS then weighs a call's thread about 10x the background's on a shared
# core (weights 1024 vs 110), while the background still progresses on an
# idle machine as fast as at 0.
NICE = 10
_OFF = ("0", "false", "no", "off")


class Exiting(Exception):
    """The interpreter is exiting: no JAX work may start in the background."""


class _Stop(BaseException):
    """Raised in the background thread at exit, to end a job in Python."""


_jobs: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
_thread: threading.Thread | None = None
_state = threading.Condition()  # guards the four below
_exiting = False
_in_job = False  # the thread runs a job
_in_jax = 0  # JAX calls under way in the job (0 or 1)
_hooked = False  # the exit hook is registered


def enabled() -> bool:
    """Whether jobs run on the background thread (``EINSLICE_BACKGROUND``).

    Example:
        >>> import os
        >>> enabled() == (os.environ.get("EINSLICE_BACKGROUND", "1") != "0")
        True
    """
    return os.environ.get("EINSLICE_BACKGROUND", "1").strip().lower() not in _OFF


def submit(job: Callable[[], object]) -> None:
    """Run ``job()`` on the background thread, after the jobs before it.

    ``job`` handles its own errors: one that escapes is dropped, so that the
    thread lives on (a runner's job records and warns; `_run` does).
    RuntimeError while the interpreter exits. Not `enabled`: ``job()`` runs
    here and now.
    """
    global _thread, _hooked
    if not enabled():
        try:
            job()
        except Exception:  # (dropped, as on the thread)
            pass
        return
    with _state:
        if _exiting:
            raise RuntimeError("einslice: no background work at exit")
        if not _hooked:
            getattr(threading, "_register_atexit", atexit.register)(_stop)
            _hooked = True
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_work, name="einslice-background")
            _thread.start()
        _jobs.put(job)


def drain(timeout: float | None = None) -> bool:
    """Wait until the jobs submitted so far have run; whether they did in time.

    Example:
        >>> drain(10)
        True
    """
    if _thread is None:  # (nothing was ever submitted)
        return True
    done = threading.Event()
    submit(done.set)
    return done.wait(timeout)


def jax_work(run: Callable[[], T]) -> T:
    """``run()`` (which calls JAX), unless the interpreter is exiting (`Exiting`).

    A job makes every JAX call through here: the exit hook waits for a
    ``run`` under way and interrupts a job only outside one, so that `_Stop`
    never lands inside JAX (holding its locks, say).
    """
    global _in_jax
    with _state:
        if _exiting:
            raise Exiting
        _in_jax += 1
    try:
        return run()
    finally:
        with _state:
            _in_jax -= 1
            _state.notify_all()


def _work() -> None:
    global _in_job
    try:
        if sys.platform == "linux":  # (per thread there; elsewhere it would not be)
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
            except OSError:  # (a sandbox may refuse: the work goes on at 0)
                pass
        while True:
            job = _jobs.get()
            with _state:
                if job is None or _exiting:  # (jobs queued at exit are dropped)
                    return
                _in_job = True
            try:
                job()
            except BaseException:  # (the job's own, or _Stop: see below)
                pass
            finally:
                with _state:
                    _in_job = False
    except _Stop:  # (raised between two jobs' lines: the thread ends)
        pass


def _stop() -> None:
    """At exit: no new JAX work; wait for the one under way; end the thread."""
    global _exiting
    thread = _thread
    with _state:
        _exiting = True
        while _in_jax:
            _state.wait()
        if _in_job and thread is not None and thread.ident is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(thread.ident), ctypes.py_object(_Stop)
            )
    _jobs.put(None)
    if thread is not None:
        thread.join()
