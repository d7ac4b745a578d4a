"""The plain lowering: one ``jnp.einsum`` call along a plan's path.

For an unsliced "sum" plan this is what ``jnp.einsum`` itself would run
(XLA fuses and lays out the steps its own way), so tuning can measure it
beside einslice's own steps and keep whichever is faster.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from opt_einsum import get_symbol

from .._plan._types import Plan
from ._semiring import Config


def plain_einsum(plan: Plan, config: Config, arrays) -> jax.Array:
    """Contract ``arrays`` (already squeezed) with ``jnp.einsum`` along the path."""
    eq = plan.equation
    precision: Any = config.precision
    preferred: Any = config.preferred_element_type
    inputs = ",".join("".join(get_symbol(i) for i in t) for t in eq.terms)
    output = "".join(get_symbol(i) for i in eq.output)
    return jnp.einsum(
        f"{inputs}->{output}",
        *arrays,
        optimize=[tuple(pair) for pair in plan.path],
        precision=precision,
        preferred_element_type=preferred,
    )
