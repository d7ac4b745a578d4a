"""Products with output-only operands, run once after the chunk loop.

When a plan's last steps multiply in operands holding output indices only
(``Plan.hoisted``; the seed's ``ij``), the loop runs the plan without them
and the products follow once: ``Σ_c ij ⊙ G_c = ij ⊙ Σ_c G_c`` (likewise for
log-add-exp and max, whose products are sums). Besides saving the products
in every chunk, this lets reverse mode take those operands' gradients from
the accumulated ``Σ_c G_c`` instead of recomputing every chunk's result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax

from .._plan._types import Plan
from . import _semiring
from ._step import _broadcast, take_diagonals


def contract_hoisted(
    plan: Plan,
    operands: Sequence[jax.Array],
    contract: Callable[[Plan, Sequence[jax.Array]], jax.Array],
) -> jax.Array:
    """``contract(plan, operands)``, with the plan's hoisted steps after the loop."""
    if not plan.hoisted:
        return contract(plan, operands)
    out = contract(plan.stem, operands)
    n, output = len(plan.prepared), plan.equation.output
    for step in plan.steps[-plan.hoisted :]:
        k = step.left if step.left < n else step.right
        x, labels = take_diagonals(operands[k], plan.equation.terms[k])
        x = _broadcast(x, tuple(labels), output).astype(out.dtype)
        out = _semiring.elementwise(plan.ring, out, x)
    return out
