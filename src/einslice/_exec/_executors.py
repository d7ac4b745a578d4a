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

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import jax
import numpy as np

from .._errors import EinsliceError
from .._plan._executors import EXECUTOR_FACTS, ExecutorFacts, executor_facts
from .._plan._profile import Profile
from .._plan._types import HostWalk, Plan
from ._calibrate import current_profile
from ._hoist import contract_hoisted
from ._host import host_seconds, run_on_host
from ._jvp import contract
from ._plain import plain_einsum
from ._semiring import Config
from ._shard import place


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


def compile_seconds(
    plan: Plan | HostWalk, profile: Profile | None = None, gradient: bool = False
) -> float:
    """The estimated compile of ``plan``'s program on this process's device.

    ``Profile.compile_estimate`` of ``profile`` (default `current_profile`:
    the device the program compiles for, whatever profile the plan was made
    for); ``gradient``: its value-and-gradient program.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (64, 64), (64, 64))
        >>> compile_seconds(p, einslice.profiles.CPU)
        0.03
    """
    profile = current_profile() if profile is None else profile
    return profile.compile_estimate(len(plan.steps), gradient)


def transfer_seconds(plan: Plan | HostWalk, profile: Profile | None = None) -> float:
    """Seconds to copy ``plan``'s operands from the device and its result back.

    What a host walk of operands that live on the device adds
    (``Profile.host_transfer_bandwidth``; 0 when the device is the host).

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (64, 64), (64, 64))
        >>> transfer_seconds(p, einslice.profiles.CPU)
        0.0
    """
    profile = current_profile() if profile is None else profile
    if math.isinf(profile.host_transfer_bandwidth):
        return 0.0
    eq = plan.equation
    entries = sum(map(prod, eq.shapes)) + prod(eq.sizes[i] for i in eq.output)
    itemsize = np.dtype(plan.dtype).itemsize
    return entries * itemsize / profile.host_transfer_bandwidth


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
