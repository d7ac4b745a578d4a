"""The sampler's walk down a tree too large to keep: recompute, do not condition.

Drawing a step's summed variables needs its two children's tables, and only
while that step is drawn; the tree's other nodes are needed only to make
those. So the walk goes down the tree depth first, one step at a time: it
makes the step's children (from the leaves, or from nodes still cached),
draws the step for every sample, drops the children, and goes on into them.
Nodes made on the way are cached while they fit the limit, the one needed
last dropped first when room is needed; a dropped node that
is needed again is made again from the leaves or from cached descendants.
Its memory is then one subtree's forward pass (as log Z's) plus whatever
cache fits, never the whole tree, and its cost a few forward passes when
the cache holds a fair share of the tree (the checkpointing of
`einslice._exec._host_grad`, for the top-down pass).

`_plan_walk` runs the walk on sizes only, so the schedule, its peak and its
recomputations are known (and checked against the limit) before any table
is made; `_run_walk` replays it in float64 numpy on the host, drawing each
step for all samples in chunks that fit what the schedule left free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax
import numpy as np

if TYPE_CHECKING:
    from ._network import Network
    from ._sample import _Tree

# Bytes per sample of a draw, per joint state of the step's summed variables:
# the gathered indices (int64) and logits, their exponentials, the cumulative
# sums and a comparison, in float64 (six arrays of that shape, counted whole).
DRAW_BYTES_PER_STATE = 6 * 8
# ...and per sample, whatever the states: offsets, uniforms, totals, picks.
DRAW_BYTES_PER_SAMPLE = 6 * 8
# Samples drawn at once at most: larger gathers ran no faster (Grids_12,
# 10^5 samples on 2 busy cores).
MAX_DRAW_CHUNK = 1 << 15


@dataclass(frozen=True, slots=True)
class _Walk:
    """The walk's schedule: ``("make", step)``, ``("drop", node)``, ``("draw", step)``.

    ``peak_bytes``: the largest temporary memory it holds (cached nodes and
    one step's work, or a chunk's draw), in float64; ``made``: steps computed,
    against ``steps`` for one forward pass; ``chunk``: samples a draw takes at
    once.
    """

    ops: tuple[tuple[str, int], ...]
    peak_bytes: int
    made: int
    steps: int
    chunk: int


def _plan_walk(tree: _Tree, n: int, limit: int) -> _Walk | None:
    """The walk's schedule within ``limit`` bytes, or None when none fits.

    Example:
        >>> from einslice.pgm._sample import _Tree
        >>> terms, cards = ((0, 1), (1, 2)), (2, 2, 2)
        >>> t = _Tree(terms, cards, ((0, 1), (2,)), ((0,), ()), ((1, 2), (0,)))
        >>> w = _plan_walk(t, 10, 1 << 20)
        >>> w.ops, w.made
        ((('make', 0), ('draw', 1), ('drop', 2), ('draw', 0)), 1)
    """
    leaves = len(tree.terms)
    steps = len(tree.children)
    cards = tree.cards
    size = [0] * leaves + [8 * math.prod(cards[v] for v in k) for k in tree.kept]
    work = [
        8 * (2 * sum(math.prod(cards[v] for v in tree.labels(c)) for c in kids))
        + 4 * size[leaves + k]
        for k, kids in enumerate(tree.children)
    ]
    joint = [math.prod(cards[v] for v in s) for s in tree.summed]
    per_sample = max(DRAW_BYTES_PER_SAMPLE + DRAW_BYTES_PER_STATE * j for j in joint)
    # The draws' share: a chunk of the largest, kept out of the cache's room.
    chunk = min(n, MAX_DRAW_CHUNK)
    room = limit - chunk * per_sample
    if room < 0:
        chunk = max(1, min(n, limit // 4 // per_sample))
        room = limit - chunk * per_sample
    # When each node is next needed: its parent's draw, in the walk's order
    # (depth first, first child first). Room is made by dropping the cached
    # node needed last (Belady's rule: the fewest remakes for that order).
    due = [0] * (leaves + steps)
    stack, time = [leaves + steps - 1], 0
    while stack:
        node = stack.pop()
        for c in tree.children[node - leaves]:
            due[c] = time
        time += 1
        stack.extend(c for c in reversed(tree.children[node - leaves]) if c >= leaves)
    held: dict[int, int] = {}  # node -> bytes
    total = 0
    pinned: set[int] = set()
    ops: list[tuple[str, int]] = []
    peak = 0
    made = 0

    def remake(node: int) -> int:
        """Bytes of the steps that would make ``node`` again, held ones kept."""
        cost, stack = 0, [node]
        while stack:
            m = stack.pop()
            if m >= leaves and (m == node or m not in held):
                cost += size[m]
                stack.extend(tree.children[m - leaves])
        return cost

    def drop(node: int) -> None:
        nonlocal total
        total -= held.pop(node)
        ops.append(("drop", node))

    def make(target: int) -> bool:
        nonlocal total, peak, made
        todo: list[int] = []
        stack = [target]
        while stack:
            node = stack.pop()
            if node < leaves or node in held:
                continue
            todo.append(node)
            stack.extend(tree.children[node - leaves])
        todo.sort()  # children before parents: the tree's own forward order
        wanted = {c for node in todo for c in tree.children[node - leaves]}
        for node in todo:
            k = node - leaves
            need = work[k]
            while total + need > room:
                free = [m for m in held if m not in pinned and m not in wanted]
                if not free:
                    return False
                old = min(free, key=lambda m: (remake(m), -due[m]))
                drop(old)
            ops.append(("make", k))
            made += 1
            held[node] = size[node]
            total += size[node]
            peak = max(peak, total - size[node] + need)
            wanted.difference_update(tree.children[k])
        return True

    stack = [leaves + steps - 1]
    while stack:
        node = stack.pop()
        k = node - leaves
        kids = tree.children[k]
        for c in kids:
            if not make(c):
                return None
            pinned.add(c)
        ops.append(("draw", k))
        peak = max(peak, total + chunk * per_sample)
        for c in kids:
            pinned.discard(c)
            if c in held:
                drop(c)
        stack.extend(c for c in reversed(kids) if c >= leaves)
    for node in list(held):  # (nothing should be left; defensive)
        drop(node)
    return _Walk(tuple(ops), peak, made, steps, chunk)


def _run_walk(
    network: Network, tree: _Tree, walk: _Walk, n: int, key: jax.Array
) -> np.ndarray:
    """The samples (``n`` by the network's variables) that ``walk`` draws.

    The tables are made in float64 (`_sample._log_product`, exact ``-inf``),
    and each draw is an inverse CDF over the step's summed states in float64
    from a numpy generator seeded by ``key``.
    """
    from ._sample import _log_product

    leaves = len(tree.terms)
    tables = network.tables
    held: dict[int, np.ndarray] = {}
    x = np.zeros((len(tree.cards), n), np.int32)
    seed = np.asarray(jax.random.key_data(key)).astype(np.uint64).ravel().tolist()
    rng = np.random.default_rng(seed)

    def table(node: int) -> np.ndarray:
        return np.asarray(tables[node]) if node < leaves else held[node]

    for op, i in walk.ops:
        if op == "make":
            kids = tree.children[i]
            held[leaves + i] = _log_product(
                [table(c) for c in kids],
                [tree.labels(c) for c in kids],
                tree.kept[i],
                tree.summed[i],
            )
        elif op == "drop":
            del held[i]
        else:
            _draw_step(x, tree, i, [table(c) for c in tree.children[i]], rng, walk)
    return x.T.copy()


def _draw_step(x, tree: _Tree, k: int, arrays, rng, walk: _Walk) -> None:
    """Draw step ``k``'s summed variables for every sample (``x``: variables by n)."""
    summed = tree.summed[k]
    if not summed:
        return
    cards = tree.cards
    states = [cards[v] for v in summed]
    joint = math.prod(states)
    n = x.shape[1]
    flats, grids, kept = [], [], []
    for c, array in zip(tree.children[k], arrays, strict=True):
        term = tree.labels(c)
        stride = {
            v: math.prod(cards[u] for u in term[i + 1 :]) for i, v in enumerate(term)
        }
        grid = np.zeros(joint, np.int64)
        axes = np.indices(states).reshape(len(states), -1)
        for v, axis in zip(summed, axes, strict=True):
            if v in stride:
                grid += axis * stride[v]
        flats.append(np.ascontiguousarray(array).reshape(-1))
        grids.append(grid)
        kept.append([(v, stride[v]) for v in term if v not in summed])
    for start in range(0, n, walk.chunk):
        rows = slice(start, min(n, start + walk.chunk))
        logits = 0.0
        for flat, grid, pairs in zip(flats, grids, kept, strict=True):
            base = np.zeros(rows.stop - rows.start, np.int64)
            for v, stride in pairs:
                base += x[v, rows].astype(np.int64) * stride
            logits = logits + flat[base[:, None] + grid[None]]
        top = np.max(logits, axis=1, keepdims=True)
        p = np.exp(logits - np.where(np.isfinite(top), top, 0.0))
        cdf = np.cumsum(p, axis=1)
        total = cdf[:, -1]
        u = rng.random(len(total)) * total
        u = np.minimum(u, np.nextafter(total, 0.0))
        picked = np.minimum(np.sum(cdf <= u[:, None], axis=1), joint - 1)
        for v, values in zip(summed, np.unravel_index(picked, states), strict=True):
            x[v, rows] = values
