"""Exact samples from a model: ancestral sampling down its contraction tree.

The contraction of every log-table to log Z is a tree of pairwise steps; a
step sums the variables no other table still holds (``summed``) out of the
product of its two children. Read top-down, the tree is a factorization of
the model's distribution: the root's variables are sampled first, and a
step's summed variables, given the variables its result keeps (sampled
higher up), follow ``p(summed | kept) ∝ left[...] · right[...]``, the two
children's messages at the kept values. One forward pass keeps every node
(log-space, the core's ``log_einsum`` per step: no overflow, exact ``-inf``
for impossible states); one backward pass, batched over the samples, draws
each step's summed variables from those logits (``jax.random.categorical``).
Both run in one compiled program, so n samples cost one log Z plus n walks
of gathers, not n inferences.

Where keeping every node would not fit the memory limit, the sampler walks
down the tree making each step's children when it draws the step, caching
what fits and recomputing the rest (`_walk`): about one forward pass's memory,
a few passes' work. Where even that would not fit, some variables are
conditioned on (the sampler's slicing): for each joint state ``c`` of them
the tree runs on the tables sliced at ``c`` (a ``lax.scan``), giving log
Z_c and n samples given ``c``; each sample keeps the state whose
``log Z_c + Gumbel`` is largest (the Gumbel-max trick), which draws ``c``
from ``p(c) ∝ Z_c`` exactly. Samples are drawn in chunks when n of them at
once would not fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np

from einslice import EinsliceError, MemoryLimitError, parse_memory_limit

from .._internal import (
    build_equation,
    default_memory_limit,
    format_bytes,
    greedy_path,
    host_profile,
    prepare_terms,
)
from ._model import Evidence, FactorGraph
from ._network import Network, _broadcast, build_network
from ._walk import _plan_walk, _run_walk, _Walk

__all__ = ["sample"]

Array = np.ndarray | jax.Array  # a bucket's tables: numpy built, JAX in the program

# At most this many joint states of conditioned variables (each a forward pass
# and a batch of n samples): beyond it the limit is refused, not crawled.
MAX_CONDITIONED_STATES = 1 << 16
# Up to this many states a draw's cumulative sum is a product with a triangle
# of ones, not ``jnp.cumsum`` (an associative scan of slices and pads on the
# CPU that made most of a program's ops).
TRIANGLE_STATES = 64
# A pairwise step one of whose tables has at most this many variables is
# multiplied by np.einsum's own loop, not its matmul path (`_einsum`); with
# 8 variables against 19 the loop was 5x slower (Grids_15, load 2.7).
SMALL_OPERAND = 2
# Samples drawn together at most: the chunk's states are the scan's carry, and
# larger chunks ran slower (Promedus_24, 10^5 samples on 2 busy cores, load
# 10-13: chunks of 10^3 took 8-15 s, 10^4 4.3-5.0 s, 10^5 6.8-7.5 s).
MAX_CHUNK = 1 << 14


def sample(
    model: FactorGraph,
    n: int,
    evidence: Evidence | None = None,
    *,
    key: jax.Array,
    memory_limit: int | str | None = None,
    optimize: object = "auto",
    dtype: jax.typing.DTypeLike = jnp.float32,
) -> np.ndarray:
    """``n`` exact, independent samples from the model (given the evidence).

    Ancestral sampling down the contraction tree of log Z (see the module
    docstring): one forward pass keeping every node, then every sample drawn
    top-down from its steps' conditionals, all in one compiled program. When
    keeping every node would not fit the memory limit, a walk down the tree
    that recomputes nodes (on the host, float64), and only when that would
    not fit either, conditioning on a few variables.

    Args:
        model: the graphical model.
        n: how many samples.
        evidence: maps variable names to observed states; every sample has them.
        key: a ``jax.random`` key; the same key (and limit) gives the same samples.
        memory_limit: bytes or a string like ``"256MB"`` bounding the sampler's
            temporary memory (the kept or cached nodes, one step's work, a
            chunk of samples; the tables and the returned samples are not counted);
            None takes einslice's device default.
        optimize: as for `log_partition` (the tree sampled down).
        dtype: float32 (default) or float64 (needs ``jax_enable_x64``): the
            dtype of the log-space messages.

    Returns:
        An ``(n, model.num_variables)`` int32 numpy array; column ``i`` holds
        variable ``model.variables[i]``'s states.

    Raises:
        EinsliceError: when the evidence has probability zero (every state it
            allows has a zero factor), or on bad arguments.
        MemoryLimitError: when even conditioning on many variables does not fit
            ``memory_limit``; it states the smallest limit found to fit.

    Example:
        >>> import jax
        >>> import numpy as np
        >>> from einslice.pgm import FactorGraph, sample
        >>> g = FactorGraph.from_factors([(0, 1)], [np.array([[1.0, 0.0], [0.0, 3.0]])])
        >>> x = sample(g, 1000, key=jax.random.key(0))
        >>> x.shape, sorted({tuple(r) for r in x.tolist()})
        ((1000, 2), [(0, 0), (1, 1)])
        >>> bool(0.7 < x[:, 0].mean() < 0.8)  # p(x0 = 1) = 3/4
        True
    """
    from ._infer import _check_dtype, _observed, _resolve, _zero_partition

    dtype_ = _check_dtype(dtype)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise EinsliceError(f"n={n!r} must be a non-negative int (samples to draw).")
    n = int(n)
    key = _check_key(key)
    limit = (
        default_memory_limit()
        if memory_limit is None
        else parse_memory_limit(memory_limit)
    )
    observed = _observed(model, evidence)
    cond = model.condition(evidence)
    network = build_network(cond)
    if network.offset == -math.inf:
        raise _zero_partition("sampling")
    out = np.zeros((n, model.num_variables), np.int32)
    for position, state in observed.items():
        out[:, position] = state
    if n == 0 or not network.tables:
        return out
    network, order = _resolve(
        network, optimize, "log", limit, dtype_, True, host_profile()
    )
    tree = _tree(network, order)
    layout = _fit(tree, n, dtype_.itemsize, limit)
    samples = _draw(network, tree, layout, n, key, dtype_)
    position = {name: i for i, name in enumerate(model.variables)}
    columns = [position[name] for name in network.model.variables]
    out[:, columns] = samples
    return out


def _draw(
    network: Network, tree: _Tree, layout: _Layout, n: int, key, dtype: np.dtype
) -> np.ndarray:
    """``n`` samples over the network's variables, as `sample` describes."""
    from ._infer import _zero_partition

    skip = layout.conditioned
    if layout.walk is not None:
        return _run_walk(network, tree, layout.walk, n, key)
    if not skip:
        nodes = _forward(network.tables, tree, ())
        if not float(nodes[-1]) > -math.inf:
            raise _zero_partition("sampling")
        chunks = -(-n // layout.chunk)
        program = _program(tree, (), layout.chunk, chunks)
        return np.asarray(program(_device_nodes(nodes, dtype), key))[:n]
    # Conditioned: p(c) ∝ Z_c for each joint state c of the variables in
    # ``skip``, then the samples given c, as many as drew it.
    cards = tree.cards
    states = list(np.ndindex(*[cards[v] for v in skip]))
    log_zs = np.array(
        [float(_forward(_sliced(network, skip, c), tree, skip)[-1]) for c in states]
    )
    if not np.max(log_zs) > -math.inf:
        raise _zero_partition("sampling")
    pick, draw = jax.random.split(key)
    picked = np.asarray(
        jax.random.categorical(pick, jnp.asarray(log_zs, dtype), shape=(n,))
    )
    out = np.zeros((n, len(cards)), np.int32)
    for s in np.flatnonzero(np.bincount(picked, minlength=len(states))):
        rows = np.flatnonzero(picked == s)
        nodes = _forward(_sliced(network, skip, states[s]), tree, skip)
        chunks = 1 << max(0, math.ceil(math.log2(-(-len(rows) // layout.chunk))))
        program = _program(tree, skip, layout.chunk, chunks)
        x = np.array(  # (a copy: the conditioned columns are written)
            program(_device_nodes(nodes, dtype), jax.random.fold_in(draw, s))
        )
        x[:, list(skip)] = states[s]
        out[rows] = x[: len(rows)]
    return out


def _sliced(network: Network, skip: tuple[int, ...], state) -> list[np.ndarray]:
    """The network's tables at ``state`` of the variables ``skip``."""
    at = dict(zip(skip, state, strict=True))
    return [
        np.asarray(table[tuple(at.get(v, slice(None)) for v in term)])
        for table, term in zip(network.tables, network.terms, strict=True)
    ]


def _check_key(key) -> jax.Array:
    if not isinstance(key, jax.Array):
        raise EinsliceError(
            f"key={key!r} must be a jax.random key, e.g. jax.random.key(0)."
        )
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != (2,) or key.dtype != jnp.uint32:
            raise EinsliceError(
                f"key has shape {key.shape} and dtype {key.dtype}; pass one "
                "jax.random key, e.g. jax.random.key(0)."
            )
        key = jax.random.wrap_key_data(key)
    if key.shape != ():
        raise EinsliceError(
            f"key has shape {key.shape}; pass one key, not a batch of them."
        )
    return key


# -- the tree ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Tree:
    """The contraction tree as data: what every step keeps and sums.

    Nodes ``0..len(terms) - 1`` are the tables; step ``k`` makes node
    ``len(terms) + k`` from ``children`` (one node for a lone table's final
    sum, else two), keeping ``kept`` and summing ``summed`` (variables as
    positions in the conditioned model). The last step's node is the root:
    nothing kept.
    """

    terms: tuple[tuple[int, ...], ...]
    cards: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]
    kept: tuple[tuple[int, ...], ...]
    summed: tuple[tuple[int, ...], ...]

    def labels(self, node: int) -> tuple[int, ...]:
        if node < len(self.terms):
            return self.terms[node]
        return self.kept[node - len(self.terms)]


def _tree(network: Network, order: object) -> _Tree:
    """The steps of ``order``'s path (the greedy one unless a tree was searched)."""
    path = getattr(order, "path", None)  # a searched tree (`Found`)
    if path is None:
        spec = (tuple(tuple(t) for t in network.terms), ())
        equation = build_equation(spec, tuple(t.shape for t in network.tables))
        path = greedy_path(prepare_terms(equation), equation.output, equation.sizes)
    alive = list(range(len(network.terms)))
    labels = {k: tuple(t) for k, t in enumerate(network.terms)}
    children, kept, summed = [], [], []
    for entry in path:
        nodes = tuple(alive[p] for p in entry)
        alive = [a for a in alive if a not in nodes]
        union = tuple(dict.fromkeys(v for node in nodes for v in labels[node]))
        later = {v for a in alive for v in labels[a]}
        node = len(network.terms) + len(children)
        labels[node] = tuple(v for v in union if v in later)
        children.append(nodes)
        kept.append(labels[node])
        summed.append(tuple(v for v in union if v not in later))
        alive.append(node)
    while len(alive) > 1:  # (paths contract everything; a defensive pairing)
        nodes, alive = tuple(alive[:2]), alive[2:]
        union = tuple(dict.fromkeys(v for node in nodes for v in labels[node]))
        later = {v for a in alive for v in labels[a]}
        labels[len(network.terms) + len(children)] = tuple(
            v for v in union if v in later
        )
        children.append(nodes)
        kept.append(labels[len(network.terms) + len(children) - 1])
        summed.append(tuple(v for v in union if v not in later))
        alive.append(len(network.terms) + len(children) - 1)
    if labels[alive[0]]:  # one table left with variables: sum them at the root
        children.append((alive[0],))
        kept.append(())
        summed.append(labels[alive[0]])
    return _Tree(
        tuple(tuple(t) for t in network.terms),
        tuple(network.model.cardinalities),
        tuple(children),
        tuple(kept),
        tuple(summed),
    )


# -- fitting the limit ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Layout:
    """How the sampler meets the limit: variables conditioned on, samples a chunk.

    ``peak_bytes``: the estimate of its temporary memory at that layout.
    """

    conditioned: tuple[int, ...]
    chunk: int
    peak_bytes: int
    walk: _Walk | None = None


def _entries(labels: Sequence[int], cards: Sequence[int], skip) -> int:
    return math.prod(cards[v] for v in labels if v not in skip)


def _peak(tree: _Tree, conditioned: frozenset[int], chunk: int, itemsize: int) -> int:
    """The sampler's temporary bytes, estimated from the arrays it makes.

    Every step's node kept, in float64 on the host and in ``itemsize`` on
    the device; the largest step's work on the host (both children's
    exponentials, the product, its support and its logarithm); per sample
    of a chunk, its states and the largest step's gathered children,
    logits and cumulative sums. With conditioned variables, the tables
    sliced at one of their states are counted as nodes. (The samples, and
    which conditioned state each drew, are the output.)
    """
    cards = tree.cards
    sizes = {k: _entries(t, cards, conditioned) for k, t in enumerate(tree.terms)}
    kept = sum(sizes.values())
    step = 0
    joint = 1
    for k, (nodes, keep, summed) in enumerate(
        zip(tree.children, tree.kept, tree.summed, strict=True)
    ):
        node = len(tree.terms) + k
        sizes[node] = _entries(keep, cards, conditioned)
        kept += sizes[node]
        step = max(step, 2 * sum(sizes[c] for c in nodes) + 3 * sizes[node])
        joint = max(joint, _entries(summed, cards, conditioned))
    per_sample = 4 * len(cards) + 5 * itemsize * joint
    return kept * (8 + itemsize) + step * 8 + chunk * per_sample


def _fit(
    tree: _Tree, n: int, itemsize: int, limit: int, *, walk: bool = True
) -> _Layout:
    """Every node kept if that fits; else a walk that recomputes; else conditioning.

    The walk (`_plan_walk`) is tried first when the kept nodes would not fit
    (``walk=False`` skips it). Conditioning on a variable divides every
    node holding it by its states; the one that saves the most bytes of kept
    nodes is taken first.

    Raises:
        MemoryLimitError: when no layout with at most
            `MAX_CONDITIONED_STATES` conditioned states fits.
    """
    conditioned: frozenset[int] = frozenset()
    states = 1
    best = None
    while True:
        need_one = _peak(tree, conditioned, 1, itemsize)
        best = need_one if best is None else min(best, need_one)
        if need_one > limit and not conditioned and walk:
            plan = _plan_walk(tree, n, limit)
            if plan is not None:
                return _Layout((), plan.chunk, plan.peak_bytes, plan)
        if need_one <= limit:
            per = _peak(tree, conditioned, 2, itemsize) - need_one
            chunk = min(n, MAX_CHUNK, 1 + (limit - need_one) // max(per, 1))
            peak = _peak(tree, conditioned, chunk, itemsize)
            return _Layout(tuple(sorted(conditioned)), chunk, peak)
        pick = _most_saving(tree, conditioned, itemsize)
        if pick is None or states * tree.cards[pick] > MAX_CONDITIONED_STATES:
            raise MemoryLimitError(
                f"sampling needs at least {format_bytes(best)} of temporary memory "
                f"(its tree's nodes, kept for the walk down, conditioned on up to "
                f"{len(conditioned)} variables), over the limit of "
                f"{format_bytes(limit)}; raise memory_limit to at least "
                f"{format_bytes(best)}.",
                smallest_limit=best,
            )
        conditioned = conditioned | {pick}
        states *= tree.cards[pick]


def _most_saving(tree: _Tree, conditioned: frozenset[int], itemsize: int):
    """The unconditioned variable whose conditioning saves the most bytes."""
    before = _peak(tree, conditioned, 1, itemsize)
    candidates = {v for keep in tree.kept for v in keep if v not in conditioned} or {
        v for s in tree.summed for v in s if v not in conditioned
    }
    if not candidates:
        return None
    return max(
        sorted(candidates),
        key=lambda v: before - _peak(tree, conditioned | {v}, 1, itemsize),
    )


# -- the forward pass, on the host in float64 ----------------------------------------


def _forward(tables: Sequence[np.ndarray], tree: _Tree, skip: Sequence[int]):
    """Every node of the tree, log-space float64: the tables, then each step's.

    ``tables`` are already sliced at the conditioned variables ``skip``. A
    step multiplies its children's exponentials, each shifted by its maximum
    over the summed axes, with one ``np.einsum`` and adds the shifts back
    (the core's log-space product); where that underflows although some
    product is positive (the children peak at different summed states, more
    than e^690 apart), the entries are summed exactly, one summed state at a
    time. ``-inf`` in, ``-inf`` out: impossible states stay impossible.
    """
    nodes = list(tables)
    for children, keep, summed in zip(
        tree.children, tree.kept, tree.summed, strict=True
    ):
        keep = tuple(v for v in keep if v not in skip)
        summed = tuple(v for v in summed if v not in skip)
        labels = [tuple(v for v in tree.labels(c) if v not in skip) for c in children]
        nodes.append(_log_product([nodes[c] for c in children], labels, keep, summed))
    return nodes


def _log_product(arrays, labels, keep, summed) -> np.ndarray:
    """``log Σ_summed exp(Σ arrays)`` over ``keep`` (float64, -inf exact)."""
    shifted, shift = [], np.zeros([1] * len(keep))
    for array, term in zip(arrays, labels, strict=True):
        axes = tuple(a for a, v in enumerate(term) if v in summed)
        top = np.max(array, axis=axes, keepdims=True) if axes else array
        top = np.where(np.isfinite(top), top, 0.0)
        with np.errstate(under="ignore"):
            shifted.append(np.exp(array - top))
        own = tuple(v for v in term if v not in summed)
        shift = shift + _broadcast(np.squeeze(top, axes), own, keep)
    total = _einsum(shifted, labels, keep)
    with np.errstate(divide="ignore"):
        out = np.log(total) + shift
    tiny = np.finfo(np.float64).tiny / np.finfo(np.float64).eps
    if np.any(total < tiny):
        support = _einsum(
            [np.isfinite(a).astype(np.float64) for a in arrays], labels, keep
        )
        bad = (total < tiny) & (support > 0)
        if np.any(bad):
            out = np.where(bad, _exact(arrays, labels, keep, summed), out)
    return out


def _einsum(arrays, labels, keep) -> np.ndarray:
    number = {
        v: k
        for k, v in enumerate(dict.fromkeys([*keep, *(v for t in labels for v in t)]))
    }
    operands: list = []
    for array, term in zip(arrays, labels, strict=True):
        operands += [array, [number[v] for v in term]]
    # A big table times a small one in numpy's own loop: its matmul path
    # transposes the big one first (Grids_15's 2^20-entry steps times a
    # pairwise factor: 140 ms against 2.5 ms, load 2.7).
    small = len(labels) == 2 and min(len(t) for t in labels) <= SMALL_OPERAND
    out = np.einsum(*operands, [number[v] for v in keep], optimize=not small)
    return np.asarray(out)


def _exact(arrays, labels, keep, summed) -> np.ndarray:
    """The same log-sum, one joint state of ``summed`` at a time (no underflow)."""
    out = np.full(np.shape(np.zeros([1] * len(keep))), -np.inf)
    sizes = {
        v: n
        for a, t in zip(arrays, labels, strict=True)
        for v, n in zip(t, a.shape, strict=True)
    }
    for state in np.ndindex(*[sizes[v] for v in summed]):
        at = dict(zip(summed, state, strict=True))
        term_sum = np.zeros([1] * len(keep))
        for array, term in zip(arrays, labels, strict=True):
            index = tuple(at.get(v, slice(None)) for v in term)
            own = tuple(v for v in term if v not in summed)
            term_sum = term_sum + _broadcast(array[index], own, keep)
        out = np.logaddexp(out, term_sum)
    return np.broadcast_to(out, [sizes[v] for v in keep]).copy()


# -- the backward pass, compiled -----------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class _Bucket:
    """Draws of one padded shape, as arrays indexed by the draw's place in it.

    A draw is a step that sums something: it first draws the summed
    variables both children hold (``shared``), from the children's logits
    summed over their own summed variables, then each child's own ones given
    those (independent given the kept and shared states), so its work per
    sample is the children's slices, never their joint. Shapes: ``S`` shared
    states, ``O`` own states of a child, ``K`` kept variables of a child,
    ``V`` variables drawn at once. Every child ``c`` of draw ``b`` is read
    as ``flat[offset[b, c] + Σ_j x[kept_vars[b, c, j]] · kept_strides[b, c, j]
    + grid[b, c, s, o]]`` where ``valid``, else ``-inf`` (padding); an absent
    second child (a lone table's last sum) reads 0. Padded variables are
    the dummy row ``n_vars`` with one state.
    """

    kept_vars: Array  # (B, 2, K)
    kept_strides: Array  # (B, 2, K)
    offsets: Array  # (B, 2)
    present: Array  # (B, 2)
    grid: Array  # (B, 2, S, O)
    valid: Array  # (B, 2, S, O)
    shared_vars: Array  # (B, V)
    shared_cards: Array  # (B, V)
    own_vars: Array  # (B, 2, V)
    own_cards: Array  # (B, 2, V)


def _layout_draws(
    tree: _Tree, skip: tuple[int, ...], offsets: Sequence[int]
) -> tuple[list[_Bucket], np.ndarray, np.ndarray]:
    """The draws, last step first, in buckets of like shape.

    Returns (buckets, bucket of each draw, place in its bucket). A draw's
    bucket is its numbers of shared and own states rounded up to powers of
    two, so padding at most doubles each and the program holds one body per
    bucket (a handful), not one per step.
    """
    cards = tree.cards
    dummy = len(cards)
    rows: dict[tuple[int, int], list[dict]] = {}
    order = []
    for k in reversed(range(len(tree.children))):
        summed = tuple(v for v in tree.summed[k] if v not in skip)
        if not summed:
            continue
        keep = set(tree.kept[k])
        children = tree.children[k]
        labels = [tuple(v for v in tree.labels(c) if v not in skip) for c in children]
        shared = tuple(v for v in summed if sum(v in t for t in labels) > 1)
        row: dict = {"shared": shared, "children": []}
        for c, term in zip(children, labels, strict=True):
            stride = {
                v: math.prod(cards[u] for u in term[i + 1 :])
                for i, v in enumerate(term)
            }
            mine = tuple(v for v in summed if v in term and v not in shared)
            axes = [*shared, *mine]
            grid = np.zeros([cards[v] for v in axes], np.int64)
            for i, v in enumerate(axes):
                shape = [1] * len(axes)
                shape[i] = cards[v]
                grid = grid + (np.arange(cards[v]) * stride[v]).reshape(shape)
            grid = grid.reshape(math.prod(cards[v] for v in shared), -1)
            kept = [(v, stride[v]) for v in term if v in keep]
            row["children"].append((offsets[c], kept, mine, grid))
        states = (
            _pow2(math.prod(cards[v] for v in shared)),
            _pow2(max(g.shape[1] for *_, g in row["children"])),
        )
        order.append((states, len(rows.setdefault(states, []))))
        rows[states].append(row)
    keys = list(rows)
    buckets = [_bucket(rows[k], *k, dummy, cards) for k in keys]
    which = np.array([keys.index(states) for states, _ in order], np.int32)
    place = np.array([i for _, i in order], np.int32)
    return buckets, which, place


def _pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _bucket(rows: list[dict], shared: int, own: int, dummy: int, cards) -> _Bucket:
    count = len(rows)
    k = max(1, max(len(ch[1]) for r in rows for ch in r["children"]))
    v = max(
        1,
        max(len(r["shared"]) for r in rows),
        max(len(ch[2]) for r in rows for ch in r["children"]),
    )
    v = max(v, max(len(r["shared"]) for r in rows))
    B, K, V, S, O = count, k, v, shared, own  # noqa: E741 (the docstring's names)
    kept_vars = np.full((B, 2, K), dummy, np.int32)
    kept_strides = np.zeros((B, 2, K), np.int32)
    offsets = np.zeros((B, 2), np.int32)
    present = np.zeros((B, 2), bool)
    grid = np.zeros((B, 2, S, O), np.int32)
    valid = np.zeros((B, 2, S, O), bool)
    shared_vars = np.full((B, V), dummy, np.int32)
    shared_cards = np.ones((B, V), np.int32)
    own_vars = np.full((B, 2, V), dummy, np.int32)
    own_cards = np.ones((B, 2, V), np.int32)
    for b, row in enumerate(rows):
        for j, v in enumerate(row["shared"]):
            shared_vars[b, j], shared_cards[b, j] = v, cards[v]
        for c, (offset, kept, mine, g) in enumerate(row["children"]):
            offsets[b, c], present[b, c] = offset, True
            for j, (v, stride) in enumerate(kept):
                kept_vars[b, c, j], kept_strides[b, c, j] = v, stride
            for j, v in enumerate(mine):
                own_vars[b, c, j], own_cards[b, c, j] = v, cards[v]
            grid[b, c, : g.shape[0], : g.shape[1]] = g
            valid[b, c, : g.shape[0], : g.shape[1]] = True
    return _Bucket(
        kept_vars,
        kept_strides,
        offsets,
        present,
        grid,
        valid,
        shared_vars,
        shared_cards,
        own_vars,
        own_cards,
    )


@lru_cache(maxsize=16)
def _program(tree: _Tree, skip: tuple[int, ...], chunk: int, chunks: int):
    """``(flat, key) -> samples``, jitted: ``chunks`` chunks of ``chunk`` samples.

    ``flat`` is every node, flattened and concatenated (`_device_nodes`);
    ``samples`` is ``(chunks * chunk, variables)`` int32 over the conditioned
    model's variables, the conditioned-on ones (``skip``) left 0. The draws
    run in a ``lax.scan``, each through its bucket's branch of a
    ``lax.switch`` (`_layout_draws`): the program's size does not grow with
    the number of steps (one body per step took Promedus_24's 102 draws to
    13 000 HLO ops and about a minute of XLA compilation). Each draw takes
    one uniform number per sample and variable group (inverse CDF).
    """
    buckets, which, place = _layout_draws(tree, skip, _offsets(tree, skip))
    n_vars = len(tree.cards)

    width = max(b.shared_vars.shape[1] for b in buckets)
    # every draw's kept variables and strides, padded to the widest
    k = max(b.kept_vars.shape[2] for b in buckets)
    kept_vars = np.full((len(which), 2, k), n_vars, np.int32)
    kept_strides = np.zeros((len(which), 2, k), np.int32)
    offsets = np.zeros((len(which), 2), np.int32)
    for d, (w, p) in enumerate(zip(which, place, strict=True)):
        bucket = buckets[w]
        kept_vars[d, :, : bucket.kept_vars.shape[2]] = bucket.kept_vars[p]
        kept_strides[d, :, : bucket.kept_vars.shape[2]] = bucket.kept_strides[p]
        offsets[d] = bucket.offsets[p]

    def branch(bucket: _Bucket):
        def draw(flat, base, b, u):
            parts = []
            for c in range(2):
                at = base[c][:, None, None] + bucket.grid[b, c][None]
                part = jnp.where(bucket.valid[b, c][None], flat[at], -jnp.inf)
                parts.append(jnp.where(bucket.present[b, c], part, 0.0))
            logits = _log_sum(parts[0], 2) + _log_sum(parts[1], 2)  # (chunk, S)
            picked = _inverse_cdf(logits, u[0])
            rows = [bucket.shared_vars[b]]
            values = [_unravel(picked, bucket.shared_cards[b])]
            for c in range(2):
                own = jnp.take_along_axis(parts[c], picked[:, None, None], axis=1)
                drawn = _inverse_cdf(own[:, 0], u[1 + c])
                rows.append(bucket.own_vars[b, c])
                values.append(_unravel(drawn, bucket.own_cards[b, c]))
            pad = width - rows[0].shape[0]  # every branch returns one shape
            rows = [jnp.pad(r, (0, pad), constant_values=n_vars) for r in rows]
            values = [jnp.pad(v, ((0, pad), (0, 0))) for v in values]
            return jnp.concatenate(rows), jnp.concatenate(values)

        arrays = {
            name: jnp.asarray(getattr(bucket, name)) for name in _Bucket.__slots__
        }
        bucket = _Bucket(**arrays)
        return draw

    branches = [branch(b) for b in buckets]

    def one_chunk(flat, key):
        x = jnp.zeros((n_vars + 1, chunk), jnp.int32)

        def step(x, d):
            u = jax.random.uniform(jax.random.fold_in(key, d), (3, chunk), flat.dtype)
            # Each child's offset of every sample's kept states, here: the
            # carry passed into the switch was copied whole per draw.
            base = []
            for c in range(2):
                offset = jnp.asarray(offsets)[d, c]
                for j in range(kept_vars.shape[2]):
                    row = jax.lax.dynamic_index_in_dim(
                        x, jnp.asarray(kept_vars)[d, c, j], 0, False
                    )
                    offset = offset + row * jnp.asarray(kept_strides)[d, c, j]
                base.append(offset)
            args = (flat, jnp.stack(base), jnp.asarray(place)[d], u)
            rows, values = jax.lax.switch(jnp.asarray(which)[d], branches, *args)
            # Written here, not in the branches: a branch updating the carry
            # copied it whole per variable (Promedus_24: 4x slower).
            for j in range(rows.shape[0]):  # row copies: a scatter was ~5x slower
                x = jax.lax.dynamic_update_slice(
                    x, values[j][None].astype(jnp.int32), (rows[j], jnp.int32(0))
                )
            return x, None

        x, _ = jax.lax.scan(step, x, jnp.arange(len(which)))
        return x[:n_vars].T

    def run(flat, key):
        keys = jax.random.split(key, chunks)
        x = jax.lax.map(partial(one_chunk, flat), keys)
        return x.reshape(chunks * chunk, n_vars)

    return jax.jit(run)


def _inverse_cdf(logits: jax.Array, u: jax.Array) -> jax.Array:
    """Per row, the state ``k`` with ``cdf[k-1] <= u·total < cdf[k]``.

    A state of probability zero (``-inf``) is never drawn: its cdf equals its
    predecessor's, and ``u·total`` is kept below the total, which the first
    state reaching it (one of positive probability) exceeds.
    """
    top = jnp.max(logits, axis=1, keepdims=True)
    p = jnp.exp(logits - jnp.where(jnp.isfinite(top), top, 0))
    states = logits.shape[1]
    if states <= TRIANGLE_STATES:  # a product: XLA's CPU cumsum is a scan
        cdf = p @ jnp.triu(jnp.ones((states, states), p.dtype))
    else:
        cdf = jnp.cumsum(p, axis=1)
    total = cdf[:, -1]
    below = jnp.minimum(u * total, jnp.nextafter(total, jnp.zeros_like(total)))
    drawn = jnp.sum(cdf <= below[:, None], axis=1, dtype=jnp.int32)
    return jnp.minimum(drawn, states - 1)


def _log_sum(x: jax.Array, axis: int) -> jax.Array:
    """Log Σ exp along ``axis``; all ``-inf`` gives ``-inf``."""
    top = jnp.max(x, axis=axis, keepdims=True)
    top = jnp.where(jnp.isfinite(top), top, 0)
    total = jnp.sum(jnp.exp(x - top), axis=axis)
    return jnp.log(total) + jnp.squeeze(top, axis)


def _unravel(index: jax.Array, cards: Array) -> jax.Array:
    """The states, in C order over variables of ``cards``, that joint ``index`` names.

    Returns ``(len(cards), chunk)``; padding (one state) takes 0.
    """
    values = []
    for j in reversed(range(cards.shape[0])):
        values.append(index % cards[j])
        index = index // cards[j]
    return jnp.stack(values[::-1])


def _offsets(tree: _Tree, skip: tuple[int, ...]) -> list[int]:
    """Where each node starts in `_device_nodes`' flat array."""
    sizes = [_entries(t, tree.cards, skip) for t in tree.terms]
    sizes += [_entries(k, tree.cards, skip) for k in tree.kept]
    return [0, *np.cumsum(sizes).tolist()][: len(sizes)]


def _device_nodes(nodes: Sequence[np.ndarray], dtype: np.dtype) -> jax.Array:
    """Every node flattened into one array, each shifted by its maximum.

    A step's conditional is unchanged by a constant added to a child, and
    near zero ``dtype`` keeps the log-probabilities that matter exact.
    """
    out = []
    for node in nodes:
        top = float(np.max(node)) if node.size else 0.0
        out.append((node - (top if math.isfinite(top) else 0.0)).reshape(-1))
    return jnp.asarray(np.concatenate(out), dtype)
