"""One chunk's operands and steps: diagonals, private sums, pairwise products."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from .._plan._semiring import Semiring
from .._plan._types import Step
from . import _semiring
from ._semiring import Config


def take_diagonals(x: jax.Array, term: Sequence[int]) -> tuple[jax.Array, list[int]]:
    """Collapse repeated indices of one operand onto their diagonal.

    Returns the array and its indices (unique, in order of first appearance).
    """
    labels = list(term)
    while len(set(labels)) < len(labels):
        label = next(lab for lab in labels if labels.count(lab) > 1)
        first = labels.index(label)
        second = labels.index(label, first + 1)
        x = _diagonal(x, first, second)
        labels = [lab for a, lab in enumerate(labels) if a not in (first, second)]
        labels.append(label)
    unique = list(dict.fromkeys(term))
    if labels != unique:
        x = jnp.transpose(x, [labels.index(lab) for lab in unique])
    return x, unique


def _diagonal(x: jax.Array, axis1: int, axis2: int) -> jax.Array:
    """``jnp.diagonal``, but a weakly typed ``x`` gives a weak result.

    (jnp.diagonal drops the weak type; jnp.einsum's result keeps it when all
    operands are weak, so for those the diagonal is gathered instead.)
    """
    if not jax.typeof(x).weak_type:
        return jnp.diagonal(x, axis1=axis1, axis2=axis2)
    x = jnp.moveaxis(x, (axis1, axis2), (-2, -1))
    k = jnp.arange(x.shape[-1])
    return x[..., k, k]


def run_step(
    ring: Semiring,
    step: Step,
    left: jax.Array,
    left_term: tuple[int, ...],
    right: jax.Array,
    right_term: tuple[int, ...],
    config: Config,
) -> jax.Array:
    """Contract two nodes as one ``dot_general`` (or its semiring analogue)."""
    keep = set(step.result) | set(step.contracted)
    left, left_term = _drop(ring, left, left_term, keep, config)
    right, right_term = _drop(ring, right, right_term, keep, config)
    if not step.contracted:
        if ring.widens:  # as dot_general would, in the preferred type
            left, right = (
                _semiring.widened(left, config),
                _semiring.widened(right, config),
            )
        return _semiring.elementwise(
            ring,
            _broadcast(left, left_term, step.result),
            _broadcast(right, right_term, step.result),
        )
    dims = dimension_numbers(step, left_term, right_term)
    return _semiring.pair(ring, left, right, dims, config)


def dimension_numbers(
    step: Step, left_term: tuple[int, ...], right_term: tuple[int, ...]
) -> _semiring.DimensionNumbers:
    """``dot_general``'s (contracting, batch) axes of a step on laid-out sides."""
    batch = [i for i in step.result if i in left_term and i in right_term]
    return (
        (
            tuple(left_term.index(i) for i in step.contracted),
            tuple(right_term.index(i) for i in step.contracted),
        ),
        (
            tuple(left_term.index(i) for i in batch),
            tuple(right_term.index(i) for i in batch),
        ),
    )


def _drop(
    ring: Semiring,
    x: jax.Array,
    term: tuple[int, ...],
    keep: set[int],
    config: Config,
) -> tuple[jax.Array, tuple[int, ...]]:
    """Sum out indices that neither the result nor the contraction needs."""
    axes = [a for a, i in enumerate(term) if i not in keep]
    if not axes:
        return x, term
    if ring.widens:
        x = _semiring.widened(x, config)
    return _semiring.reduce(ring, x, axes), tuple(i for i in term if i in keep)


def _broadcast(x: jax.Array, term: tuple[int, ...], result: tuple[int, ...]):
    """Lay ``x`` out in ``result``'s order, with size-1 axes where it lacks one."""
    present = [i for i in result if i in term]
    if list(term) != present:
        x = jnp.transpose(x, [term.index(i) for i in present])
    return x.reshape([x.shape[present.index(i)] if i in term else 1 for i in result])
