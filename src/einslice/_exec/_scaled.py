"""A "log" chunk in scaled linear form: one exponential per input entry.

The per-step log rule (``_semiring.log_dot``) shifts both sides of every
contraction by their max over the contracted axes, which costs a max pass,
an exponential per entry of each side and a log per entry of the result: on
the seed formula that is several passes over every n²·chunk intermediate.

Here each prepared operand ``x`` becomes ``(m, s)`` with ``x = log(m) + s``,
where ``s`` is ``x``'s max over its non-output axes (so ``s`` varies along
output indices only, and ``m ≤ 1``). Products multiply ``m`` and add ``s``;
a contraction never sums over an output index, so both ``s`` factor out of
it and ``m`` contracts with ``dot_general`` exactly as in ``"sum"``. One log
at the end gives the chunk's result. The exponentials touch only the inputs'
entries, not the intermediates'.

The catch is underflow: the operands' maxima need not coincide, so products
can fall below the float range. Every result entry is the sum of at most
``terms`` products, each below 1; an entry of ``m`` below ``tiny · terms /
eps`` may have lost more than one ulp to underflow, and then (or on any
non-finite entry) the whole chunk is recomputed by the per-step rule, whose
own repair is exact. So the fast form only ever gives answers that are
within rounding of the per-step rule. An all ``-inf`` result (probability
zero) also takes the per-step path: correct, just not faster.

Derivatives always come from the per-step rule (``custom_jvp``), whose
tangents are already NaN-free for ``-inf`` entries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from math import prod

import jax
import jax.numpy as jnp
from jax import lax

from .._plan._types import Plan
from . import _semiring
from ._semiring import Config
from ._step import _broadcast, dimension_numbers

# Above this many steps the scaled form is not tried: both forms are traced
# into every chunk, and long chains of small steps (graphical models) gain
# little from it while their compile time doubles.
MAX_STEPS = 16


def applies(plan: Plan, chunks: dict[int, int]) -> bool:
    """Whether a "log" chunk of this plan may take the scaled form.

    Not when there are too many steps (compile time) or when a result entry
    sums so many products that even the threshold would overflow the range.
    """
    if len(plan.steps) > MAX_STEPS or not plan.steps:
        return False
    return _terms(plan, chunks) < 2.0**60


def _terms(plan: Plan, chunks: dict[int, int]) -> int:
    """How many products at most one chunk's result entry sums."""
    eq = plan.equation
    summed = {i for t in eq.terms for i in t} - set(eq.output)
    return prod(chunks.get(i, eq.sizes[i]) for i in summed)


def log_steps(
    plan: Plan,
    chunks: dict[int, int],
    config: Config,
    robust: Callable[[Sequence[jax.Array]], jax.Array],
    nodes: Sequence[jax.Array],
) -> jax.Array:
    """The chunk's result in output order, scaled form with per-step fallback.

    ``robust(nodes)`` runs the per-step rule; it also gives the derivatives.
    """
    return _log_steps(plan, _terms(plan, chunks), config, robust, tuple(nodes))


@partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2, 3))
def _log_steps(plan, terms, config, robust, nodes):
    out, scale = _scaled(plan, config, nodes)
    finfo = jnp.finfo(out.dtype)
    threshold = float(finfo.tiny) * terms / float(finfo.eps)
    bad = jnp.any(~(scale >= threshold) | ~jnp.isfinite(scale))
    fast = jnp.log(scale) + out
    return lax.cond(bad, lambda: robust(nodes), lambda: fast)


@_log_steps.defjvp
def _log_steps_jvp(plan, terms, config, robust, primals, tangents):
    (nodes,), (t_nodes,) = primals, tangents
    return jax.jvp(robust, (nodes,), (t_nodes,))


def _scaled(plan: Plan, config: Config, nodes) -> tuple[jax.Array, jax.Array]:
    """Run the steps on ``(m, s)`` pairs; return the result's ``s`` and ``m``."""
    output = set(plan.equation.output)
    terms = plan.node_terms()
    pairs = []
    for x, term in zip(nodes, terms, strict=False):
        summed = tuple(a for a, i in enumerate(term) if i not in output)
        shift = _semiring._safe_shift(x, summed)
        pairs.append((jnp.exp(x - shift), shift))
    for step in plan.steps:
        (m_l, s_l), (m_r, s_r) = pairs[step.left], pairs[step.right]
        t_l, t_r = terms[step.left], terms[step.right]
        keep = set(step.result) | set(step.contracted)
        m_l, s_l, t_l = _drop(m_l, s_l, t_l, keep)
        m_r, s_r, t_r = _drop(m_r, s_r, t_r, keep)
        if not step.contracted:
            m = _broadcast(m_l, t_l, step.result) * _broadcast(m_r, t_r, step.result)
            s = _broadcast(s_l, t_l, step.result) + _broadcast(s_r, t_r, step.result)
        else:
            dims = dimension_numbers(step, t_l, t_r)
            m = _semiring.dot(
                m_l,
                m_r,
                dims,
                precision=config.precision,
                preferred_element_type=config.preferred_element_type,
            )
            s = _semiring._result_shift(s_l, s_r, dims)
        pairs.append((m, s))
    (m, s), term = pairs[-1], terms[-1]
    order = [term.index(i) for i in plan.equation.output]
    if order != sorted(order):
        m, s = jnp.transpose(m, order), jnp.transpose(s, order)
    return jnp.broadcast_to(s, m.shape), m


def _drop(m: jax.Array, s: jax.Array, term: tuple[int, ...], keep: set[int]):
    """Sum out axes no later step needs (summed axes: ``s`` is constant there)."""
    axes = tuple(a for a, i in enumerate(term) if i not in keep)
    if not axes:
        return m, s, term
    kept = tuple(i for i in term if i in keep)
    return jnp.sum(m, axis=axes), jnp.squeeze(s, axes), kept
