"""What differs between the JAX versions einslice supports, in one place.

einslice supports JAX 0.9 to 0.12 (``pyproject.toml``). Everything that is
not the same across them, or that reaches into JAX's private modules, lives
here, so that a new JAX release is checked against this one file:

- XLA compile options: an option one release knows may be gone in the next
  (JAX 0.12's XLA:CPU has no ``xla_cpu_use_fusion_emitters``; asking for it
  fails every compile with ``INVALID_ARGUMENT: No such compile option``).
  ``supported_options`` keeps the ones this backend accepts.
- The weak-type cast: JAX has no public way to mark an array weakly typed;
  jnp.einsum itself ends with the private ``_convert_element_type``.
- The class of a concrete JAX array (``ArrayImpl``): ``isinstance(x,
  jax.Array)`` holds for tracers too, and a plan's call tells the two apart
  by class in one pass over its operands (``_run.execute_plan``).
"""

from __future__ import annotations

from functools import cache
from typing import cast

import jax
import numpy as np

# The concrete array class (jax/_src/array.py); present in 0.9-0.12.
from jax._src.array import ArrayImpl

# jnp.einsum's own weak cast (jax/_src/numpy/einsum.py); present in 0.9-0.12.
from jax._src.lax import lax as _lax_internal

# Operands whose shapes jax.jit's dispatch checks on every call: a new shape
# traces the program again, and the trace checks it against the plan.
CONCRETE_ARRAYS = frozenset({ArrayImpl, np.ndarray})


def supported_options(options: dict[str, object]) -> dict[str, object]:
    """The XLA compile options of ``options`` that this JAX's backend accepts.

    An unknown option is dropped, not an error: each is a tuning of compile
    time or memory (``_run.compile_options``), never of the result.

    Example:
        >>> supported_options({"xla_no_such_option_anywhere": 1})
        {}
    """
    return {k: v for k, v in options.items() if _accepts(k, v)}


@cache
def _accepts(name: str, value: object) -> bool:
    """Whether compiling a trivial program with ``name=value`` succeeds (once)."""
    try:
        lowered = jax.jit(lambda x: x + 1).lower(np.float32(0))
        lowered.compile(compiler_options={name: value})  # type: ignore[arg-type]
    except Exception as e:  # JaxRuntimeError's class moved between releases
        if "compile option" in str(e) or "INVALID_ARGUMENT" in str(e):
            return False
        raise
    return True


def as_weak(x: jax.Array) -> jax.Array:
    """``x``, weakly typed (the cast jnp.einsum itself ends with).

    Example:
        >>> import jax.numpy as jnp
        >>> jax.typeof(as_weak(jnp.ones(2))).weak_type
        True
    """
    if jax.typeof(x).weak_type:
        return x
    weak = _lax_internal._convert_element_type(x, x.dtype, weak_type=True)
    return cast("jax.Array", weak)
