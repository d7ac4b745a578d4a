"""Running a plan: operand casts, the jitted program, compile options.

Kept apart from ``_api`` so that ``Plan.__call__`` runs a plan without
importing the public entry points (no import cycle through ``_api``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cache, lru_cache

import jax
import jax.numpy as jnp
import numpy as np
from jax import core, lax

from .._errors import EinsliceError
from .._plan._types import Plan, register_runner
from ._choose import host_first_seconds
from ._compat import as_weak, supported_options
from ._executors import EXECUTORS, executor_of
from ._semiring import Config


def execute_plan(
    p: Plan, operands: Sequence, precision=None, preferred_element_type=None
) -> jax.Array:
    """Run a plan on operands of the shapes it was made for."""
    shapes = tuple(tuple(np.shape(x)) for x in operands)
    if shapes != p.equation.shapes:
        raise EinsliceError(
            f"this plan was made for shapes {list(p.equation.shapes)} but got "
            f"{list(shapes)}; make a new plan with einslice.plan(...) for these "
            "shapes."
        )
    config = Config(precision=precision, preferred_element_type=preferred_element_type)
    traced = any(isinstance(x, core.Tracer) for x in operands)
    executor = executor_of(p)
    if not executor.compiles:
        if traced:
            raise EinsliceError(
                f"executor {executor.name!r} runs outside JAX's transformations "
                "(jit, vmap, grad) only; plan with the default executor "
                "'einslice' to run under one."
            )
        return jnp.asarray(executor.run(p, config, operands))
    run = _run if traced else _top_level_run(p)
    return run(p, config, *operands)


register_runner(execute_plan)


# A plan of at least this many steps and at most this many FLOPs (forward) is
# compiled with XLA's backend optimizations off: compiling, not running,
# dominates it. On a 48-step "log" lattice (bond 2) that halved the grad's
# compile time (27 -> 14 s, loaded machine) for 3 ms more per call; on a
# 512² "log" triangle it would make the run 5x slower, hence the FLOPs bound.
CHEAP_MIN_STEPS = 32
CHEAP_MAX_FLOPS = 10**8
# A plan of at least this many steps is compiled without XLA:CPU's newer
# (MLIR) fusion emitters, whose code generation holds most of the compile's
# memory. Measured on the grad programs of UAI networks: Segmentation_11's 109
# steps (cheap) 1049 -> 434 MiB peak RSS and 25 -> 6 s; Grids_15's 177 sliced
# steps 1439 -> 661 MiB, its run 2.52 -> 2.67 s. Below this the run loses up to
# 12% (suite: mixture 1.12x, random-network's 35 steps 1.08x slower), for
# compiles that take about a second anyway.
LARGE_MIN_STEPS = 64
_CPU_ONLY: dict[str, object] = {"xla_cpu_use_fusion_emitters": False}
CHEAP_COMPILE: dict[str, object] = {"xla_backend_optimization_level": 0, **_CPU_ONLY}
LARGE_COMPILE: dict[str, object] = dict(_CPU_ONLY)


def cheap_to_run(p: Plan) -> bool:
    """Whether ``p`` is compiled for compile time rather than run time.

    Example:
        >>> import einslice
        >>> cheap_to_run(einslice.plan("ij,jk->ik", (2, 2), (2, 2)))
        False
    """
    return len(p.steps) >= CHEAP_MIN_STEPS and p.flops <= CHEAP_MAX_FLOPS


def compile_options(p: Plan, optimized: bool = False) -> dict[str, object] | None:
    """The XLA compiler options ``p``'s program gets (None: XLA's defaults).

    ``CHEAP_COMPILE`` for a plan ``cheap_to_run`` (unless ``optimized``: its
    program for many calls, see `OPTIMIZE_AFTER_CALLS`), ``LARGE_COMPILE`` for
    one of ``LARGE_MIN_STEPS`` steps or more; XLA:CPU's flags only on a CPU
    backend, and only the options this JAX's XLA knows
    (``_compat.supported_options``: JAX 0.12 has no fusion-emitter switch).

    Example:
        >>> import einslice
        >>> compile_options(einslice.plan("ij,jk->ik", (2, 2), (2, 2))) is None
        True
    """
    if cheap_to_run(p) and not optimized:
        options = CHEAP_COMPILE
    elif len(p.steps) >= LARGE_MIN_STEPS:
        options = LARGE_COMPILE
    else:
        return None
    if jax.default_backend() != "cpu":
        options = {k: v for k, v in options.items() if k not in _CPU_ONLY}
    return supported_options(options) or None


def _run_impl(p: Plan, config: Config, *operands) -> jax.Array:
    dtype = jnp.dtype(p.dtype)
    weak = config.preferred_element_type is None and _weak_result(operands)
    arrays = []
    for x, drop in zip(operands, p.equation.squeezed, strict=True):
        x = _weak_cast(x, dtype) if weak else jnp.asarray(x).astype(dtype)
        arrays.append(lax.squeeze(x, drop) if drop else x)
    with jax.named_scope(f"einslice[{p.equation.text()}]"):
        out = executor_of(p).run(p, config, arrays)
    return as_weak(out) if weak else out


_run = jax.jit(_run_impl, static_argnums=(0, 1), inline=True)


@cache
def _run_with(options: tuple[tuple[str, object], ...]):
    """``_run`` compiled with these XLA options (jit fixes them per function)."""
    return jax.jit(
        _run_impl, static_argnums=(0, 1), inline=True, compiler_options=dict(options)
    )


# A plan compiled for compile time (`cheap_to_run`) and called outside any
# trace is compiled again with XLA's optimizations on at its
# OPTIMIZE_AFTER_CALLS-th call (ski rental: by then its slower calls have cost
# about what the optimized compile costs). Measured eagerly on einsum-benchmark
# networks (2 cores): a 100-tensor tree 3.6 vs 1.25 ms a call for 0.9 s more
# compile (break-even ~360 calls), a 100-site MPS 18.6 vs 5.7 ms for 1.3 s
# (~100), QAOA max-cut 16.3 vs 10.7 ms for 0.6 s (~110). Inside a user's
# jax.jit a plan never gets these options: the user's jit compiles it.
OPTIMIZE_AFTER_CALLS = 100


class _TopLevelRun:
    """A plan's runner outside any trace: host walk, then compiled, then optimized.

    A many-step plan on a CPU first runs in numpy (the "host" executor)
    while those runs have cost less than its compile is estimated to
    (`_choose.host_first_seconds`: a one-shot call pays no compile); then the
    compile-time program, and the optimized one from its
    `OPTIMIZE_AFTER_CALLS`-th compiled call on (the same program when the
    plan is not cheap).
    """

    def __init__(self, p: Plan) -> None:
        self.calls = 0  # compiled calls
        self.host_budget = host_first_seconds(p)
        self.host_spent = 0.0
        self.first = _jitted(compile_options(p))
        self.later = _jitted(compile_options(p, optimized=True))

    @property
    def steady(self) -> bool:
        """Whether the next call runs the program every later call runs."""
        on_host = self.host_spent < self.host_budget
        return not on_host and (
            self.first is self.later or self.calls + 1 >= OPTIMIZE_AFTER_CALLS
        )

    def __call__(self, p: Plan, config: Config, *args):
        if self.host_spent < self.host_budget and _host_call(p, config, args):
            start = time.perf_counter()
            out = EXECUTORS["host"].run(p, config, args)
            # (a lost sum under threads only delays the switch)
            self.host_spent += time.perf_counter() - start
            return jnp.asarray(out)
        self.calls += 1  # (a lost count under threads only delays the switch)
        run = self.first if self.calls < OPTIMIZE_AFTER_CALLS else self.later
        return run(p, config, *args)


def _host_call(p: Plan, config: Config, operands) -> bool:
    """Whether this call may run on the host.

    A plan the host executor runs (one device, a float or complex result),
    on a CPU backend, operands on the CPU, default precision, a strongly typed
    result.
    """
    if config != Config() or not EXECUTORS["host"].runs(p):
        return False
    if jax.default_backend() != "cpu" or _weak_result(operands):
        return False
    return all(
        not isinstance(x, jax.Array) or all(d.platform == "cpu" for d in x.devices())
        for x in operands
    )


def _jitted(options: dict[str, object] | None):
    return _run if options is None else _run_with(tuple(sorted(options.items())))


@lru_cache(maxsize=1024)
def _top_level_run(p: Plan) -> _TopLevelRun:
    """The runner for ``p`` outside any trace, made once per plan."""
    return _TopLevelRun(p)


def _weak_result(operands) -> bool:
    """Whether jnp.einsum's result would be weakly typed (JAX's promotion says)."""
    return jax.dtypes.result_type(*operands, return_weak_type_flag=True)[1]


# A Python zero of each dtype kind: adding it converts a weakly typed operand
# to that kind's default width and keeps it weak.
_PYTHON_ZERO = {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}


def _weak_cast(x, dtype: np.dtype) -> jax.Array:
    """An operand in the weakly typed result type ``dtype``, itself weak.

    jnp.einsum's result is weak when JAX's promotion of the operands says so
    (all operands Python scalars, say, or ints with a Python float): it then
    promotes as a Python scalar would. lax ops on weak operands keep that,
    but ``astype`` drops it, so the cast is an addition of a Python zero.
    """
    x = jnp.asarray(x)
    if x.dtype != dtype:  # a weak x, or a bool or int below a weak result type
        x = x + _PYTHON_ZERO[dtype.kind]
    return x if x.dtype == dtype else x.astype(dtype)
