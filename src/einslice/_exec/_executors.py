"""The executor protocol: what runs a plan, and what running it is estimated to cost.

Every executor is an `Executor`: its facts (``_plan/_executors.py``: name,
which plans it runs, how a plan shows it), an estimate of what compiling and
running a plan costs, and how it runs one. `EXECUTORS` registers the three
there are; ``Plan.executor`` names one, and `executor_of` finds it. Adding an
executor is one `ExecutorFacts` in ``_plan/_executors.py`` and one entry
here: the check below fails at import if the two registries disagree.

Example:
    >>> import einslice
    >>> p = einslice.plan("ij,jk->ik", (64, 64), (64, 64))
    >>> executor_of(p).name, executor_of(p).compiles
    ('einslice', True)
    >>> host = EXECUTORS["host"]
    >>> host.estimate(p).compile_seconds
    0.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax

from .._errors import EinsliceError
from .._plan._executors import EXECUTOR_FACTS, ExecutorFacts, executor_facts
from .._plan._types import HostWalk, Plan
from ._hoist import contract_hoisted
from ._host import host_seconds, run_on_host
from ._jvp import contract
from ._plain import plain_einsum
from ._semiring import Config
from ._shard import place

# The compiled executors' estimate of their compile (``_choose`` compares it
# with the host walk's run): what compiling costs per step (XLA:CPU, with
# einslice's compile options): UAI
# "log" plans of 42-189 steps compiled in 0.6-2 s, 0.01-0.02 s a step, and
# lattices of 99-399 steps in 0.1-9 s; UAI 2014's larger MAR models far more
# (2026-12-05, load 2-3, lowering + compile of the forward program):
# ObjectDetection_17 149 steps 22 s, Grids_17 175 steps 25 s, DBN_16 29 steps
# 6.9 s, CSP_11 320 steps 10.8 s: 0.03-0.24 s a step, while their host walks
# took 1.3-8 s (1.8-4x the estimate below) and compile + run 1.5-5x the walk.
# At 0.01 the first two compiled (PR 37 s end to end where the walk takes 5 s,
# MAR over 60 s); 0.03 is the low end of those four.
COMPILE_SECONDS_PER_STEP = 0.03


@dataclass(frozen=True)
class Estimate:
    """What an executor is estimated to spend on a plan, in seconds."""

    compile_seconds: float
    run_seconds: float


@dataclass(frozen=True)
class Executor:
    """One way of running a plan.

    Attributes:
        facts: its name, whether it compiles and the plans it runs
            (``_plan/_executors.py``).
        estimate: its estimate of compiling and running a plan.
        run: runs a plan on operands already cast and squeezed; for an
            executor that compiles, inside the jitted program (``_run``).
    """

    facts: ExecutorFacts
    estimate: Callable[[Plan], Estimate]
    run: Callable[[Plan, Config, Sequence], Any]  # a JAX or numpy array

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def compiles(self) -> bool:
        """Whether it runs inside a jitted program (its facts say)."""
        return self.facts.compiles

    def runs(self, plan: Plan) -> bool:
        """Whether this executor can run ``plan`` (its facts say)."""
        return self.facts.runs(plan)


def compile_seconds(plan: Plan | HostWalk) -> float:
    """The estimated compile of ``plan``'s program (`COMPILE_SECONDS_PER_STEP`)."""
    return COMPILE_SECONDS_PER_STEP * max(1, len(plan.steps))


def _compiled_estimate(plan: Plan) -> Estimate:
    # the plan's own cost model time: the plain lowering runs the same path
    return Estimate(compile_seconds(plan), plan.cost.time)


def _chain(plan: Plan, config: Config, arrays: Sequence) -> jax.Array:
    return contract_hoisted(
        plan, place(plan, arrays), lambda p, ops: contract(p, config, *ops)
    )


def _host(plan: Plan, config: Config, arrays: Sequence):
    if config != Config():
        raise EinsliceError(
            f"the host executor computes at the default precision only, not "
            f"with {config}; run the plan with executor 'einslice' for that."
        )
    return run_on_host(plan, arrays)


EXECUTORS: dict[str, Executor] = {
    executor.name: executor
    for executor in (
        Executor(executor_facts("einslice"), _compiled_estimate, _chain),
        Executor(executor_facts("xla"), _compiled_estimate, plain_einsum),
        Executor(
            executor_facts("host"),
            lambda plan: Estimate(0.0, host_seconds(plan)),
            _host,
        ),
    )
}

if set(EXECUTORS) != set(EXECUTOR_FACTS):  # pragma: no cover - a developer's slip
    raise EinsliceError(
        f"executors without code: {sorted(set(EXECUTOR_FACTS) - set(EXECUTORS))}; "
        f"without facts: {sorted(set(EXECUTORS) - set(EXECUTOR_FACTS))}. Each "
        "executor is one ExecutorFacts in _plan/_executors.py and one entry in "
        "_exec/_executors.EXECUTORS."
    )


def executor_of(plan: Plan) -> Executor:
    """The executor ``plan`` names; EinsliceError if it cannot run the plan.

    Example:
        >>> import dataclasses, einslice
        >>> p = einslice.plan("ij,jk->ik", (4, 4), (4, 4), semiring="max")
        >>> executor_of(dataclasses.replace(p, executor="xla"))
        Traceback (most recent call last):
        ...
        einslice._errors.EinsliceError: executor 'xla' cannot run this plan ...
    """
    executor = EXECUTORS[executor_facts(plan.executor).name]
    if not executor.runs(plan):
        raise EinsliceError(
            f"executor {plan.executor!r} cannot run this plan (path "
            f"{list(plan.path)}, sliced {plan.sliced}, semiring "
            f"{plan.semiring!r}, dtype {plan.dtype}, {plan.devices} device(s)); "
            f"the executors that can: "
            f"{[e.name for e in EXECUTORS.values() if e.runs(plan)]}."
        )
    return executor
