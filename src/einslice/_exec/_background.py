"""Work off the call path: one daemon thread runs einslice's jobs, one at a time.

A call hands over what it need not wait for (``tune="auto"``'s measuring
of the candidate plans on an accelerator: ``_choose.tuned``'s ``later``),
returns at once, and a later call picks up the result (the runner switches
plans between calls; wisdom keeps the choice for the next process). Jobs run
in the order submitted, on one thread started on first use, so that two
measurements never time each other's programs. A job that fails warns and
is dropped: a call never fails for work it did not ask for.

``EINSLICE_BACKGROUND=0`` runs no job (nothing is measured behind the
user's back; every call then runs what the estimate chose, as with
``tune="estimate"``). At exit, jobs not started are dropped and a running
one is asked to stop at its next step (`stopping`); the exit waits for that
step (one candidate's compile, or a round of timing): a thread left inside
XLA's compiler at exit aborted the process ("FATAL: exception not
rethrown", twice in three tries).

Example:
    >>> done = []
    >>> submit(lambda: done.append(1)) == enabled()
    True
    >>> wait(10.0) and done == ([1] if enabled() else [])
    True
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings
from collections import deque
from collections.abc import Callable

_OFF = ("0", "false", "no", "off")

_jobs: deque[Callable[[], object]] = deque()
_lock = threading.Condition()
_state = {"busy": False, "stopping": False}
_worker: list[threading.Thread] = []


def enabled() -> bool:
    """Whether jobs run in the background (``EINSLICE_BACKGROUND``, default on).

    Example:
        >>> enabled() == (os.environ.get("EINSLICE_BACKGROUND", "1") != "0")
        True
    """
    value = os.environ.get("EINSLICE_BACKGROUND", "1").strip().lower()
    return value not in _OFF


def submit(job: Callable[[], object]) -> bool:
    """Queue ``job`` to run on the background thread; False if it will not run.

    Not run when `enabled` is false or the process is exiting.
    """
    if not enabled() or _state["stopping"]:
        return False
    with _lock:
        _jobs.append(job)
        if not _worker or not _worker[0].is_alive():
            thread = threading.Thread(
                target=_work, name="einslice-background", daemon=True
            )
            _worker[:] = [thread]
            thread.start()
        _lock.notify_all()
    return True


def wait(timeout: float | None = None) -> bool:
    """Block until every job submitted so far has finished; False on timeout.

    For tests and benchmarks (a benchmark times the steady program), never
    for a call.
    """
    with _lock:
        return _lock.wait_for(lambda: not _jobs and not _state["busy"], timeout)


def stopping() -> bool:
    """Whether the process is exiting: a long job should stop at its next step."""
    return _state["stopping"]


def _work() -> None:
    while True:
        with _lock:
            _lock.wait_for(lambda: bool(_jobs) or _state["stopping"])
            if _state["stopping"]:
                _jobs.clear()
                _lock.notify_all()
                return
            job = _jobs.popleft()
            _state["busy"] = True
        try:
            job()
        except Exception as error:  # a call must not fail for it
            warnings.warn(
                f"einslice: a background job failed ({error!r}); calls keep "
                "the plan they run.",
                RuntimeWarning,
                stacklevel=1,
            )
        finally:
            with _lock:
                _state["busy"] = False
                _lock.notify_all()


@atexit.register
def _at_exit() -> None:
    with _lock:
        _state["stopping"] = True
        _lock.notify_all()
        busy = _state["busy"]
    if busy and _worker:
        _worker[0].join()
