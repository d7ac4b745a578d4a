"""A path made into a `HostWalk`: steps to run once in numpy, nothing costed.

A one-shot value of a small network (a graphical model's log Z) is cheaper
to walk on the host than to plan: laying out every step for ``dot_general``
and costing the forward and derivative passes take longer than the walk.
`host_walk` keeps only what the walk needs, and a bound on its memory
(`walk_peak_bytes`, which bounds the host walk of a `Plan` too).
"""

from __future__ import annotations

from math import prod

from ._order import Path, plain_steps
from ._planner import prepare_terms
from ._semiring import semiring_named
from ._types import Equation, HostWalk, Plan, Step

# The host walk's working precision (its scaled "log" form runs in float64).
WALK_ITEMSIZE = 8
# The product of a selective semiring ("max", and "min" as its negation)
# broadcasts a block of its contracted axis at a time; its entries are bounded
# by ``_exec/_host.MAX_BLOCK_ENTRIES`` (counted here too).
MAX_BLOCK_ENTRIES = 1 << 20


def host_walk(equation: Equation, path: Path, semiring: str, dtype: str) -> HostWalk:
    """The walk of ``path`` over ``equation``, with its FLOPs and a memory bound.

    The bound is `walk_peak_bytes`'s, with the operands counted too (pgm's
    tables, held by the caller while the walk runs).

    Example:
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> eq = build_equation(parse_subscripts("ij,jk->ik", 2), ((2, 3), (3, 4)))
        >>> w = host_walk(eq, ((0, 1),), "sum", "float64")
        >>> w.steps[0].result, w.flops
        ((0, 2), 48)
    """
    prepared = prepare_terms(equation)
    steps = plain_steps(prepared, equation.output, path)
    sizes = equation.sizes
    flops = 0
    for step in steps:
        union = prod(sizes[i] for i in (*step.result, *step.contracted))
        flops += union * (2 if step.contracted else 1)
    inputs = sum(prod(shape) for shape in equation.shapes)
    nodes = prepared + tuple(step.result for step in steps)
    peak = _peak_bytes(equation, nodes, steps, {}, semiring, dtype)
    return HostWalk(
        equation=equation,
        prepared=prepared,
        steps=steps,
        semiring=semiring,
        dtype=dtype,
        flops=flops,
        peak_bytes=peak + WALK_ITEMSIZE * inputs,
    )


# What one host step holds beside the nodes alive (``_exec/_host.py``): each
# side laid out as a matrix (a transposed copy), and, while it is exponentiated
# by the "log" rule, shifted and exponentiated (or cast to float64 by the
# scaled walk); its result three times (the product, its logarithm and the
# shifted logarithm, of the "log" rule). Checked with tracemalloc on random
# formulas in every semiring (tests/exec/test_host.py).
SIDE_COPIES = 3
RESULT_COPIES = 3


def walk_peak_bytes(walk: Plan | HostWalk) -> int:
    """A bound on the memory ``_exec/_host.run_on_host`` holds walking ``walk``.

    The walk lets each node go once its step has run (`Steps.walk_steps`),
    so per chunk it holds the nodes alive at each step (the prepared
    operands not yet used, but those that are views of the operands, and
    the results not yet used) beside that step's
    copies (`SIDE_COPIES` of each side, `RESULT_COPIES` of its result, and
    a selective product's block); before the first step, each operand's
    piece is copied twice while it is prepared (cast and shifted, then
    exponentiated, for "log"); after the last, the result is combined into the output,
    which is held throughout. All at ``max(8, itemsize)`` bytes an entry
    (`WALK_ITEMSIZE`: the scaled "log" walk runs in float64), and numpy's
    buffers (`BUFFER_BYTES`). The operands
    themselves are the caller's, not counted; nor are their copies in the
    plan's dtype, which ``run_on_host`` makes only for operands of another.

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (10, 20), (20, 30))
        >>> (walk_peak_bytes(p) - BUFFER_BYTES) // 8  # 3 x 800 + 3 x 300 + 300
        3600
    """
    return _peak_bytes(
        walk.equation,
        walk.node_terms(),
        walk.steps,
        dict(walk.chunks),
        walk.semiring,
        walk.dtype,
    )


def _peak_bytes(
    equation: Equation,
    nodes: tuple[tuple[int, ...], ...],
    steps: tuple[Step, ...],
    chunks: dict[int, int],
    semiring: str,
    dtype: str,
) -> int:
    """`walk_peak_bytes` from a walk's parts (``nodes``: each node's indices)."""
    sizes = [chunks.get(i, size) for i, size in enumerate(equation.sizes)]
    node = [prod(sizes[i] for i in term) for term in nodes]
    n_operands = len(nodes) - len(steps)
    pieces = [prod(sizes[i] for i in term) for term in equation.terms]
    output = prod(sizes[i] for i in equation.output)
    total = prod(equation.sizes[i] for i in equation.output)
    ring = semiring_named(semiring)
    block = MAX_BLOCK_ENTRIES if ring.selective else 0
    # A prepared operand is a view of its piece where nothing was taken from
    # it (no diagonal, no private sum) and it is not exponentiated ("log")
    held = [
        0
        if k < n_operands and not ring.scaled_form and term == equation.terms[k]
        else n
        for k, (term, n) in enumerate(zip(nodes, node, strict=True))
    ]
    alive = sum(held[:n_operands])
    peak = alive + 2 * max(pieces, default=0)
    for s, step in enumerate(steps):
        sides, out = node[step.left] + node[step.right], node[n_operands + s]
        peak = max(peak, alive + SIDE_COPIES * sides + RESULT_COPIES * out + block)
        alive += out - held[step.left] - held[step.right]
    peak = max(peak, alive + 3 * output)  # the last node, combined into a block
    itemsize = max(WALK_ITEMSIZE, _ITEMSIZE.get(dtype, WALK_ITEMSIZE))
    return itemsize * (peak + total) + BUFFER_BYTES


# Beside the arrays: numpy's iterator buffers (8192 entries an operand, for
# casts, strided reductions and einsum) and Python's objects; the same
# allowance as the derivative's walk (``_exec/_host_grad.py``, measured there
# with tracemalloc on the shared UAI instances: at most 1.3 MB).
BUFFER_BYTES = 2 * 2**20
# Bytes an entry of the dtypes wider than the walk's float64.
_ITEMSIZE = {"complex128": 16, "complex64": 8}
