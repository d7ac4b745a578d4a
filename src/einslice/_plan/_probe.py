"""A few chunks of a sliced plan: what tuning times instead of a whole long call.

A sliced plan runs the same program on every chunk, so timing a handful of
chunks and scaling by the chunk count estimates the whole call at a fraction
of its cost. The probe is the same plan (same steps, same chunk sizes) on an
equation whose sliced indices are cut to a whole number of chunks; its
operands are the leading entries of the real ones along those indices.
(A plan derived for timing, never returned: not a patch of a made plan.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil, prod

from ._types import Plan


@dataclass(frozen=True, slots=True)
class Probe:
    """A cut-down plan to time, and how its time scales to the whole plan.

    ``shapes`` are the probe's operand shapes: each operand's leading entries
    (``x[:s0, :s1, ...]``). ``scale`` is the whole plan's chunk count over the
    probe's: whole seconds ≈ probe seconds × scale.
    """

    plan: Plan
    shapes: tuple[tuple[int, ...], ...]
    scale: float


def probe(plan: Plan, seconds: float) -> Probe | None:
    """A probe of ``plan`` estimated to run about ``seconds``.

    None when the plan is not sliced or a probe that long would be the whole
    plan. The sliced index with the most chunks is cut first.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (64, 4096), (4096, 64), memory_limit="40kB")
        >>> p = replace(p, chunks=((1, 32),))  # j in 128 chunks of 32
        >>> q = probe(p, seconds=p.cost.time / 16)
        >>> q.plan.n_chunks, q.scale, q.shapes
        (8, 16.0, ((64, 256), (256, 64)))
    """
    if not plan.chunks:
        return None
    sizes = plan.equation.sizes
    counts = {i: -(-sizes[i] // c) for i, c in plan.chunks}
    total = prod(counts.values())
    per_chunk = plan.cost.time / total
    wanted = max(1, ceil(seconds / per_chunk)) if per_chunk > 0 else 1
    if wanted >= total:
        return None
    kept: dict[int, int] = {}
    remaining = wanted
    for i in sorted(counts, key=lambda i: -counts[i]):
        kept[i] = min(counts[i], remaining)
        remaining = -(-remaining // kept[i])
    chunk = dict(plan.chunks)
    cut = {i: kept[i] * chunk[i] for i in counts if kept[i] < counts[i]}
    if not cut:
        return None
    new_sizes = tuple(cut.get(i, s) for i, s in enumerate(sizes))
    shapes = tuple(_cut_shape(plan, k, cut) for k in range(len(plan.equation.terms)))
    equation = replace(plan.equation, sizes=new_sizes, shapes=shapes)
    cut_plan = replace(plan, equation=equation, choice=None)
    return Probe(cut_plan, shapes, total / cut_plan.n_chunks)


def _cut_shape(plan: Plan, k: int, cut: dict[int, int]) -> tuple[int, ...]:
    """Operand ``k``'s shape with the cut indices' axes shortened.

    Its axes other than the ``squeezed`` (size-1, broadcast) ones carry the
    term's indices in order.
    """
    eq = plan.equation
    labels = iter(eq.terms[k])
    shape = []
    for axis, extent in enumerate(eq.shapes[k]):
        if axis in eq.squeezed[k]:
            shape.append(extent)
            continue
        shape.append(cut.get(next(labels), extent))
    return tuple(shape)
