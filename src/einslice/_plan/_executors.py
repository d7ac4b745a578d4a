"""The executors as the planner sees them: names, what each runs, how it is shown.

An executor runs a plan. A `Plan` names its executor (``Plan.executor``); the
planner and ``describe`` read the facts here, and the code that runs each one
(with its estimate of compile and run time) registers under the same name in
``_exec/_executors.py``, which checks at import that every name here has one.

- ``"einslice"``: the plan's own steps, chunked under ``lax.scan``, on one
  device or a mesh. Runs every plan.
- ``"xla"``: one ``jnp.einsum`` call along the plan's path (XLA lays out and
  fuses the steps its own way): unsliced plans on one device, of a semiring
  ``jnp.einsum`` computes. A tuning candidate beside ``"einslice"``.
- ``"host"``: the plan walked in numpy, nothing compiled: plans for one
  device, in float or complex types (numpy's integer and narrow float
  arithmetic differ from XLA's). The first calls of a many-step plan and
  small graphical models run there.

A new executor is one `ExecutorFacts` here and one entry in
``_exec/_executors.EXECUTORS``.

Example:
    >>> import einslice
    >>> p = einslice.plan("ij,jk->ik", (4, 5), (5, 6))
    >>> p.executor, [name for name, facts in EXECUTOR_FACTS.items() if facts.runs(p)]
    ('einslice', ['einslice', 'xla', 'host'])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .._errors import EinsliceError
from ._types import Plan

# What the host walk computes as XLA would.
HOST_DTYPES = frozenset({"float32", "float64", "complex64", "complex128"})


@dataclass(frozen=True)
class ExecutorFacts:
    """An executor's name, which plans it runs, and how a plan shows it.

    Attributes:
        name: what ``Plan.executor`` holds.
        compiles: whether it runs inside a jitted program (and so under
            ``jit``, ``vmap`` and ``grad``); the host walk does not. The
            planner offers tuning a plan on each compiling executor.
        runs: whether it can run a plan (the plan's facts alone; a call can
            still rule it out, as the host walk is ruled out under a trace).
        shown: the line ``describe`` adds for a plan it runs ("" for none).
        steps_shown: whether ``describe`` lists the plan's steps (false where
            another library lays them out).
        label: the suffix of a tuning candidate's label.
    """

    name: str
    compiles: bool
    runs: Callable[[Plan], bool]
    shown: str = ""
    steps_shown: bool = True
    label: str = ""


def _single(plan: Plan) -> bool:
    return plan.placement.single


EXECUTOR_FACTS: dict[str, ExecutorFacts] = {
    facts.name: facts
    for facts in (
        ExecutorFacts("einslice", True, lambda plan: True),
        ExecutorFacts(
            "xla",
            True,
            lambda plan: (
                not plan.chunks
                and plan.ring.jnp_einsum
                and bool(plan.path)
                and _single(plan)
            ),
            shown="  Executor: one jnp.einsum call along this path (XLA's steps)",
            steps_shown=False,
            label=" via jnp.einsum",
        ),
        ExecutorFacts(
            "host",
            False,
            lambda plan: _single(plan) and plan.dtype in HOST_DTYPES,
            shown="  Executor: walked in numpy on the host, nothing compiled",
            label=" in numpy",
        ),
    )
}


def executor_facts(name: str) -> ExecutorFacts:
    """The facts of the executor called ``name``; EinsliceError if none is.

    Example:
        >>> executor_facts("xla").label
        ' via jnp.einsum'
    """
    try:
        return EXECUTOR_FACTS[name]
    except KeyError:
        raise EinsliceError(
            f"no executor is called {name!r}; the executors are "
            f"{sorted(EXECUTOR_FACTS)} (Plan.executor names one of them)."
        ) from None
