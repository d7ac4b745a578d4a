"""Pairwise contraction order: wraps opt_einsum's and cotengra's path finders.

A path is opt_einsum's format: a list of position tuples into the shrinking
list of nodes, each contracted group appended at the end. ``to_steps`` turns
any path into strictly pairwise steps (one ``dot_general`` each).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import cast

import opt_einsum

from .._errors import EinsliceError
from ._types import Step

Path = tuple[tuple[int, ...], ...]

# opt_einsum's strategy names, all of which jnp.einsum accepts ("eager" and
# "opportunistic" are its names for greedy; "dynamic-programming" for "dp").
_NAMED = (
    "auto",
    "auto-hq",
    "greedy",
    "eager",
    "opportunistic",
    "optimal",
    "dp",
    "dynamic-programming",
    "branch-all",
    "branch-2",
    "branch-1",
    "random-greedy",
    "random-greedy-128",
)
# Above this many operands the exhaustive ("optimal", "dp") searches get slow,
# so "auto" here hands over to greedy. (The planner itself sends "auto"
# networks of more than 12 operands to the tree search, ``_search.py``; this
# greedy fallback serves its cheap re-plans and explicit calls.)
_DP_MAX_OPERANDS = 12


def optimize_key(optimize: object) -> object:
    """``optimize`` in a hashable form that ``find_path`` accepts (plan caches).

    An explicit path becomes a tuple of tuples; a path optimizer that cannot
    be hashed (a class defining ``__eq__`` but not ``__hash__``, such as a
    plain ``@dataclass``) is keyed by its identity (`ByIdentity`), as
    functions and most optimizer objects already are.

    Example:
        >>> optimize_key([[0, 1], [0, 1]])
        ((0, 1), (0, 1))
    """
    if isinstance(optimize, list | tuple):
        return normalize_path(optimize)
    try:
        hash(optimize)
    except TypeError:
        if not callable(optimize):
            raise EinsliceError(
                f"optimize={optimize!r} is not understood; pass one of "
                f"{list(_NAMED)}, True, False, an explicit path such as "
                "[(0, 1), (0, 1)], or a path optimizer object such as "
                "cotengra.HyperOptimizer()."
            ) from None
        return ByIdentity(optimize)
    return optimize


@dataclass(frozen=True, eq=False)
class ByIdentity:
    """An unhashable path optimizer, hashed and compared by identity.

    Why: plans are cached on their request, ``optimize`` included; an
    optimizer whose class defines ``__eq__`` without ``__hash__`` made every
    call fail with a TypeError. Called as the optimizer itself; its ``repr``
    is the optimizer's (tuning's wisdom keys are made from it).
    """

    optimizer: Callable[..., object]

    def __call__(self, *args, **kwargs) -> object:
        return self.optimizer(*args, **kwargs)

    def __hash__(self) -> int:
        return id(self.optimizer)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByIdentity) and other.optimizer is self.optimizer

    def __repr__(self) -> str:
        return repr(self.optimizer)


def normalize_path(path: Sequence[object]) -> Path:
    """Accept numpy's ``['einsum_path', (0, 1), ...]`` and opt_einsum's lists."""
    items = list(path)
    if items and items[0] == "einsum_path":
        items = items[1:]
    out = []
    for entry in items:
        if (
            not isinstance(entry, Sequence)
            or isinstance(entry, str)
            or not all(isinstance(p, int) and not isinstance(p, bool) for p in entry)
        ):
            raise EinsliceError(
                f"optimize path entry {entry!r} is not a tuple of operand "
                "positions; an explicit path looks like [(0, 1), (0, 1)]."
            )
        out.append(tuple(int(p) for p in entry))
    return tuple(out)


# Two-group candidates are enumerated for at most this many operands.
_TWO_GROUP_MAX_OPERANDS = 10


def two_group_paths(
    terms: Sequence[tuple[int, ...]],
    output: tuple[int, ...],
    sizes: Sequence[int],
    keep: int = 2,
) -> list[Path]:
    """Seed-shaped paths: two groups multiplied elementwise, then one contraction.

    The seed's hand-written step ``ij,i,il,j,jl,l->ij`` scales two matrices
    and multiplies them once; for a chunk of the formula that is ``ik,il,kl
    -> ikl`` and ``jk,jl -> jkl`` (broadcast products, fused by XLA), then
    ``ikl,jkl->ij`` as one matrix multiply whose result is small. FLOP-based
    searches rank it equal to paths whose multiply writes an ``ijk``-sized
    result, so they rarely return it; this offers the ``keep`` most balanced
    splits of the operands that hold some non-output index into two groups
    (operands with output indices only are multiplied in last). The cost
    model decides among them and the searched paths.

    Example:
        >>> t = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]  # ij,ik,il,jk,jl,kl
        >>> two_group_paths(t, (0, 1), [8, 8, 8, 8], keep=1)
        [((1, 2), (1, 2), (1, 3), (1, 2), (0, 1))]
    """
    n = len(terms)
    out = set(output)
    core = [k for k in range(n) if not set(terms[k]) <= out]
    rest = [k for k in range(n) if k not in core]
    if len(core) < 3 or len(core) > _TWO_GROUP_MAX_OPERANDS:
        return []

    def numel(indices: set[int]) -> int:
        return prod(sizes[i] for i in indices)

    ranked = []
    for mask in range(1, 2 ** (len(core) - 1)):
        left = [k for b, k in enumerate(core) if mask >> b & 1]
        right = [k for k in core if k not in left]
        union_l = set().union(*(terms[k] for k in left))
        union_r = set().union(*(terms[k] for k in right))
        shape = (max(numel(union_l), numel(union_r)), numel(union_l | union_r))
        ranked.append((shape, left, right))
    ranked.sort(key=lambda r: r[0])
    return [_grouped_path(n, left, right, rest) for _, left, right in ranked[:keep]]


def _grouped_path(n: int, left: list[int], right: list[int], rest: list[int]) -> Path:
    """The linear path multiplying each group in turn, then the two, then ``rest``."""
    alive, path = list(range(n)), []

    def merge(a: int, b: int) -> int:
        path.append(tuple(sorted((alive.index(a), alive.index(b)))))
        alive.remove(a)
        alive.remove(b)
        alive.append(n + len(path) - 1)
        return alive[-1]

    def chain(nodes: list[int]) -> int:
        node = nodes[0]
        for other in nodes[1:]:
            node = merge(node, other)
        return node

    root = merge(chain(left), chain(right))
    for k in rest:
        root = merge(root, k)
    return tuple(path)


def find_path(
    terms: Sequence[tuple[int, ...]],
    output: tuple[int, ...],
    sizes: dict[int, int],
    optimize: object,
) -> Path:
    """Pick a contraction order for terms with the given (chunked) sizes.

    Args:
        terms: each node's indices (no repeats).
        output: the indices kept at the end.
        sizes: size of every index (sliced ones at their chunk size).
        optimize: a name (see ``_NAMED``), a bool, an explicit path, or a path
            optimizer object called as ``optimizer(inputs, output, sizes)``
            (cotengra's optimizers, opt_einsum's ``PathOptimizer``).

    Returns:
        A path in opt_einsum's format.
    """
    n = len(terms)
    if n <= 1:
        return ()
    if optimize is False:  # left to right: a running result takes the next operand
        return ((0, 1), *((0, m - 1) for m in range(n - 1, 1, -1)))
    if isinstance(optimize, list | tuple):
        path = normalize_path(optimize)
        check_path(path, n)
        return path
    if optimize is True or optimize is None:
        optimize = "auto"
    if isinstance(optimize, str):
        key = tuple(sorted(sizes.items()))
        return _named_path(tuple(terms), output, key, optimize)
    if callable(optimize):
        symbol = label  # (one-character labels: see `labelled`)
        inputs = [tuple(symbol(i) for i in t) for t in terms]
        out = tuple(symbol(i) for i in output)
        size_dict = {symbol(i): s for i, s in sizes.items()}
        # A path optimizer returns a path; normalize_path checks its entries.
        path = cast("Sequence[object]", optimize(inputs, out, size_dict))
        return normalize_path(path)
    raise EinsliceError(
        f"optimize={optimize!r} is not understood; pass one of {list(_NAMED)}, "
        "True, False, an explicit path such as [(0, 1), (0, 1)], or a path "
        "optimizer object such as cotengra.HyperOptimizer()."
    )


# The one-character label of index 0; see `label`.
_FIRST_LABEL = 0x100
_SURROGATES = range(0xD800, 0xE000)


def label(i: int) -> str:
    """Index ``i``'s one-character label: ordered as the indices are.

    Code points from U+0100 on, skipping the surrogates (which are not
    characters): labels sort, and so break a path finder's ties, as the
    int indices did (opt_einsum's symbols put "A" before "a" and changed the
    trees of networks searched before).

    Example:
        >>> label(0), label(1) < label(2), label(0xD800 - 0x100) == chr(0xE000)
        ('Ā', True, True)
    """
    code = _FIRST_LABEL + i
    return chr(code + len(_SURROGATES) if code >= _SURROGATES.start else code)


def labelled(
    terms: Sequence[Sequence[int]], output: Sequence[int], sizes: Sequence[int]
) -> tuple[list[tuple[str, ...]], tuple[str, ...], dict[str, int]]:
    """Terms, output and sizes with one-character labels, as path finders get them.

    Index ``i`` becomes `label` ``(i)``. cotengra hands its inputs to
    cotengrust (its Rust path finders) when that is installed, and cotengrust
    takes one-character labels only: int labels made every search fail with
    a TypeError for a user who had it. Paths are positions, so they need no
    translation back; index labels (cotengra's sliced indices) go back
    through `label_indices`.

    Example:
        >>> labelled([(0, 1), (1, 2)], (0,), [2, 3, 4])
        ([('Ā', 'ā'), ('ā', 'Ă')], ('Ā',), {'Ā': 2, 'ā': 3, 'Ă': 4})
    """
    symbol = label
    sizes = list(sizes)
    inputs = [tuple(symbol(i) for i in t) for t in terms]
    return (
        inputs,
        tuple(symbol(i) for i in output),
        {symbol(i): s for i, s in enumerate(sizes)},
    )


def label_indices(n_indices: int) -> dict[str, int]:
    """The index of each label `labelled` gives, for ``n_indices`` indices.

    Example:
        >>> label_indices(3)
        {'Ā': 0, 'ā': 1, 'Ă': 2}
    """
    return {label(i): i for i in range(n_indices)}


@lru_cache(maxsize=1024)
def jnp_greedy_path(
    terms: tuple[tuple[int, ...], ...],
    output: tuple[int, ...],
    sizes: tuple[int, ...],
) -> Path:
    """The path ``jnp.einsum(..., optimize="greedy")`` takes for these terms.

    opt_einsum's ``contract_path`` on the subscripts string, as jnp.einsum
    calls it (opt_einsum's symbols, each term's indices in its order):
    the plain lowering (executor "xla") along this path compiles jnp's own
    program. (`find_path`'s "greedy" runs the same path finder on sets of
    indices, whose ties may break another way.)

    Example:
        >>> jnp_greedy_path(((0, 1), (1, 2), (2, 3)), (0, 3), (2, 3, 4, 5))
        ((1, 2), (0, 1))
    """
    symbol = opt_einsum.get_symbol
    inputs = ",".join("".join(symbol(i) for i in t) for t in terms)
    text = f"{inputs}->{''.join(symbol(i) for i in output)}"
    shapes = [tuple(sizes[i] for i in t) for t in terms]
    path, _ = opt_einsum.contract_path(text, *shapes, shapes=True, optimize="greedy")
    return normalize_path(cast("Sequence[object]", path))


@lru_cache(maxsize=8192)
def _named_path(
    terms: tuple[tuple[int, ...], ...],
    output: tuple[int, ...],
    sizes_key: tuple[tuple[int, int], ...],
    name: str,
) -> Path:
    if name not in _NAMED:
        raise EinsliceError(
            f"optimize={name!r} is not a known strategy; choose one of "
            f"{list(_NAMED)}, or pass a path or a cotengra optimizer."
        )
    if name == "auto":
        name = "dp" if len(terms) <= _DP_MAX_OPERANDS else "greedy"
    sizes = dict(sizes_key)
    inputs = [frozenset(t) for t in terms]
    if name == "dp":
        # Outer products are not searched (opt_einsum's default): a fresh
        # 12-matrix chain's dp took 4.5-5.3 ms with them, half its planning,
        # and 1.6-1.9 ms without, for the same path; the same FLOPs on all 23
        # suite and parity formulas of 3-6 operands (2026-12-07).
        finder: Callable[..., object] = opt_einsum.paths.DynamicProgramming(
            minimize="flops", search_outer=False
        )
    else:
        finder = opt_einsum.paths.get_path_fn(name)
    return normalize_path(finder(inputs, frozenset(output), sizes, None))  # type: ignore[arg-type]


def check_path(path: Path, n_operands: int) -> None:
    """Raise if ``path`` does not contract ``n_operands`` nodes validly."""
    remaining = n_operands
    for entry in path:
        if len(set(entry)) != len(entry) or any(not 0 <= p < remaining for p in entry):
            raise EinsliceError(
                f"optimize path entry {entry} is invalid with {remaining} nodes "
                f"left (positions must be distinct and below {remaining}); an "
                f"explicit path for {n_operands} operands lists positions into "
                "the shrinking list of nodes."
            )
        remaining -= len(entry) - 1


@lru_cache(maxsize=4096)
def cached_steps(
    terms: tuple[tuple[int, ...], ...],
    output: tuple[int, ...],
    path: Path,
    sizes: tuple[int, ...],
) -> tuple[Step, ...]:
    """`to_steps`' steps, cached.

    The planner's search and its re-plans revisit chunkings, and the planner
    lays out the tree the tree search has just costed.
    """
    return to_steps(terms, output, path, sizes)[0]


def to_steps(
    terms: Sequence[tuple[int, ...]],
    output: tuple[int, ...],
    path: Path,
    sizes: Sequence[int] | None = None,
) -> tuple[tuple[Step, ...], Path]:
    """Turn a path into pairwise Steps; also return the pairwise path itself.

    Each step's layout is chosen so that ``dot_general`` needs no transpose
    where that can be had: batch and contracted indices follow the larger
    operand's order, and the operands are swapped when that hands the next
    step its result with batch indices leading and contracted ones together.

    Example:
        >>> steps, pairs = to_steps([(0, 1), (1, 2)], (0, 2), ((0, 1),))
        >>> steps[0]
        Step(left=0, right=1, result=(0, 2), contracted=(1,))
    """
    n = len(terms)
    size_of = (
        sizes
        if sizes is not None
        else [2] * (1 + max((i for t in terms for i in t), default=0))
    )
    label_sets, pairs_by_node, pairs = _pairwise_merges(terms, output, path)
    consumer: dict[int, int] = {}
    for s, (a, b) in enumerate(pairs_by_node):
        consumer[a] = consumer[b] = s
    tree = _Tree(label_sets, pairs_by_node, consumer, output, size_of)
    node_terms: list[tuple[int, ...]] = list(terms)
    steps: list[Step] = []
    for s, (a, b) in enumerate(pairs_by_node):
        step = _layout(a, b, node_terms, tree, n + s)
        steps.append(step)
        node_terms.append(step.result)
    return tuple(steps), tuple(pairs)


def plain_steps(
    terms: Sequence[tuple[int, ...]], output: tuple[int, ...], path: Path
) -> tuple[Step, ...]:
    """`to_steps` without choosing layouts: each result in order of appearance.

    For a walk that contracts each step by ``np.einsum`` (any layout), where
    laying steps out for ``dot_general`` would cost more than it saves.

    Example:
        >>> plain_steps([(0, 1), (1, 2)], (2, 0), ((0, 1),))
        (Step(left=0, right=1, result=(0, 2), contracted=(1,)),)
    """
    label_sets, pairs_by_node, _ = _pairwise_merges(terms, output, path)
    node_terms: list[tuple[int, ...]] = list(terms)
    steps = []
    for node, (a, b) in enumerate(pairs_by_node, start=len(terms)):
        union = tuple(dict.fromkeys(node_terms[a] + node_terms[b]))
        kept = label_sets[node]
        result = tuple(i for i in union if i in kept)
        steps.append(Step(a, b, result, tuple(i for i in union if i not in kept)))
        node_terms.append(result)
    return tuple(steps)


@dataclass(frozen=True)
class _Tree:
    """The pairwise merges of a path: what each step's layout looks ahead at."""

    label_sets: list[frozenset[int]]  # each node's indices: leaves, then steps'
    pairs_by_node: list[tuple[int, int]]  # the two nodes each step merges
    consumer: dict[int, int]  # node -> the step that merges it
    output: tuple[int, ...]
    sizes: Sequence[int]


def _pairwise_merges(
    terms: Sequence[tuple[int, ...]], output: tuple[int, ...], path: Path
) -> tuple[list[frozenset[int]], list[tuple[int, int]], list[tuple[int, ...]]]:
    """Split the path's groups into pairs: node index sets, merged nodes, positions."""
    n = len(terms)
    pairs_by_node: list[tuple[int, int]] = []
    label_sets: list[frozenset[int]] = [frozenset(t) for t in terms]
    alive = list(range(n))
    pairs: list[tuple[int, ...]] = []
    holders: dict[int, int] = {}  # index -> how many alive nodes hold it
    for labels in label_sets:
        for i in labels:
            holders[i] = holders.get(i, 0) + 1
    kept = set(output)

    def merge(a: int, b: int) -> int:
        for i in label_sets[a] & label_sets[b]:
            holders[i] -= 1
        union = label_sets[a] | label_sets[b]
        # an index no other alive node holds (and not kept) is summed here
        result = frozenset(i for i in union if i in kept or holders[i] > 1)
        for i in union - result:
            del holders[i]
        label_sets.append(result)
        pairs_by_node.append((a, b))
        pairs.append((alive.index(a), alive.index(b)))
        alive.remove(a)
        alive.remove(b)
        alive.append(len(label_sets) - 1)
        return len(label_sets) - 1

    for entry in (*path, *([(0, 1)] * n)):
        if len(alive) <= 1:
            break
        group = [alive[p] for p in entry] if len(entry) > 1 else []
        while len(group) >= 2:
            group = [merge(group[0], group[1]), *group[2:]]
    return label_sets, pairs_by_node, pairs


def _layout(
    a: int, b: int, node_terms: list[tuple[int, ...]], tree: _Tree, node: int
) -> Step:
    """Choose operand order and index order for the step making ``node``."""
    term_a, term_b = node_terms[a], node_terms[b]
    result_set = tree.label_sets[node]

    def numel(term: tuple[int, ...]) -> int:
        return prod(tree.sizes[i] for i in term)

    big = term_a if numel(term_a) >= numel(term_b) else term_b
    small = term_b if big is term_a else term_a
    shared = [i for i in big if i in small]
    batch = tuple(i for i in shared if i in result_set)
    contracted = tuple(i for i in shared if i not in result_set)
    if not contracted:
        return Step(a, b, _elementwise_order(a, b, node_terms, tree, node, big), ())
    best: tuple[float, int, int, tuple[int, ...]] | None = None
    for lhs, rhs in ((a, b), (b, a)):
        t_l, t_r = node_terms[lhs], node_terms[rhs]
        free_l = tuple(i for i in t_l if i not in t_r and i in result_set)
        free_r = tuple(i for i in t_r if i not in t_l and i in result_set)
        result = (*batch, *free_l, *free_r)
        score = _result_score(result, node_terms, tree, node)
        score += 0.5 if node_terms[lhs] is big else 0.0
        if best is None or score > best[0]:
            best = (score, lhs, rhs, result)
    assert best is not None
    _, lhs, rhs, result = best
    return Step(lhs, rhs, result, contracted)


def _result_score(
    result: tuple[int, ...], node_terms: list[tuple[int, ...]], tree: _Tree, node: int
) -> float:
    """How well a step's result order suits its consumer (or the output)."""
    if node not in tree.consumer:
        return 1.0 if result == tuple(i for i in tree.output if i in result) else 0.0
    other, partner, made = _consumer(node, tree)
    batch_c = tuple(i for i in result if i in partner and i in made)
    contracted_c = tuple(i for i in result if i in partner and i not in made)
    score = 0.0 if needs_transpose(result, batch_c, contracted_c) else 1.0
    if not contracted_c and other < len(node_terms):
        # An elementwise consumer lays both sides out in one order:
        # a result in the (laid out) partner's order needs no copy.
        order = [i for i in node_terms[other] if i in result]
        score -= 0.0 if [i for i in result if i in partner] == order else 1.0
    return score


def needs_transpose(
    term: tuple[int, ...], batch: tuple[int, ...], contracted: tuple[int, ...]
) -> bool:
    """Whether ``dot_general`` must copy an operand into its canonical layout.

    Canonical: batch indices lead (in the step's order), and the contracted
    indices form one run, in the step's order, at the start or end of the rest.

    Example:
        >>> needs_transpose((0, 1, 2), (0,), (2,)), needs_transpose((1, 0), (0,), ())
        (False, True)
    """
    k = len(batch)
    if tuple(term[:k]) != tuple(batch):
        return True
    rest = term[k:]
    if not contracted:
        return False
    if not all(i in rest for i in contracted):
        return True
    first = rest.index(contracted[0])
    if rest[first : first + len(contracted)] != tuple(contracted):
        return True
    return not (first == 0 or first + len(contracted) == len(rest))


def _elementwise_order(
    a: int,
    b: int,
    node_terms: list[tuple[int, ...]],
    tree: _Tree,
    node: int,
    big: tuple[int, ...],
) -> tuple[int, ...]:
    """Index order for a step that contracts nothing (a fused broadcast product).

    Such a step writes the order its consumer wants: batch indices first,
    then the consumer's free indices, then the ones it contracts — following
    the partner's order where the partner is already laid out. The last step
    writes the output's order. A product that only scales its larger side
    (no index of its own) keeps that side's order wherever its consumer reads
    that order without a copy (`_read_in_place`): another order transposes
    the whole side.
    """
    result_set = tree.label_sets[node]

    def term_of(k: int) -> tuple[int, ...]:  # not laid out yet: any order
        if k < len(node_terms):
            return node_terms[k]
        return tuple(sorted(tree.label_sets[k]))

    every = list(dict.fromkeys((*big, *term_of(a), *term_of(b))))
    every = [i for i in every if i in result_set]
    if node not in tree.consumer:
        return tuple(i for i in tree.output if i in result_set)
    other, partner, made = _consumer(node, tree)
    if not (result_set | partner) - made:
        # The consumer multiplies elementwise too (XLA fuses such chains): write
        # the order the chain's end wants, so no link in the chain transposes.
        return _chain_order(node, other, every, node_terms, tree)
    if set(big) == result_set and _read_in_place(tuple(big), node, node_terms, tree):
        return tuple(big)
    if other < len(node_terms):  # the partner is laid out: follow its order
        every = [i for i in node_terms[other] if i in result_set] + [
            i for i in every if i not in partner
        ]
    batch_c = [i for i in every if i in partner and i in made]
    contracted_c = [i for i in every if i in partner and i not in made]
    free_c = [i for i in every if i not in partner]
    if other >= len(node_terms):
        # Nothing fixes the contracted order yet: put the largest index last,
        # so the fused product runs along a long contiguous axis (a chunk of
        # 2 as the minor axis measured 3-5% slower on the seed formula).
        contracted_c.sort(key=lambda i: tree.sizes[i])
    return (*batch_c, *free_c, *contracted_c)


def _read_in_place(
    order: tuple[int, ...], node: int, node_terms: list[tuple[int, ...]], tree: _Tree
) -> bool:
    """Whether ``node``'s contracting consumer reads it in ``order`` without a copy.

    The consumer's batch and contracted indices follow its larger side's
    order (`_layout`): this node's, or its laid-out partner's (a partner not
    laid out yet has no order to check against: False). jt-message
    ``abcd,ab,bc->cd`` (48^4) multiplies ``abcd`` by ``bc`` first: written
    as ``cdab`` (the contracted indices last) the product transposed the
    whole 21 MB operand and the plan ran 0.4-0.9x ``jnp.einsum``-greedy on a
    CPU; written as ``abcd`` (``a, b`` contracted leading, which
    ``dot_general`` reads as they lie) 2.4-3.8x (sliced or not).

    Example:
        >>> terms = [(0, 1, 2, 3), (0, 1), (1, 2)]
        >>> steps, _ = to_steps(terms, (2, 3), ((0, 2), (0, 1)))
        >>> steps[0].result
        (0, 1, 2, 3)
    """
    c = tree.consumer[node]
    x, y = tree.pairs_by_node[c]
    other = y if x == node else x

    def numel(k: int) -> int:
        return prod(tree.sizes[i] for i in tree.label_sets[k])

    # (as `_layout` picks: the first of the pair where the sizes tie)
    first_is_big = numel(x) >= numel(y)
    if (x == node) == first_is_big:
        lead = order
    elif other < len(node_terms):
        lead = node_terms[other]
    else:
        return False
    partner = tree.label_sets[other]
    made = tree.label_sets[len(tree.label_sets) - len(tree.pairs_by_node) + c]
    shared = [i for i in lead if i in partner and i in order]
    batch = tuple(i for i in shared if i in made)
    contracted = tuple(i for i in shared if i not in made)
    return not needs_transpose(order, batch, contracted)


def _chain_order(
    node: int,
    other: int,
    every: list[int],
    node_terms: list[tuple[int, ...]],
    tree: _Tree,
) -> tuple[int, ...]:
    """The order for ``node`` that its elementwise consumer will want to write."""
    result_set = tree.label_sets[node]
    if node != len(node_terms):
        # A look-ahead past a step not laid out yet (its partner is made
        # later): positions in ``node_terms`` would no longer be nodes.
        return tuple(every)
    provisional = [*node_terms, tuple(every)]

    def rank(k: int) -> int:  # not laid out yet: 0
        return len(provisional[k]) if k < len(provisional) else 0

    larger = max((node, other), key=rank)
    wanted = _elementwise_order(
        node,
        other,
        provisional,
        tree,
        len(tree.label_sets) - len(tree.pairs_by_node) + tree.consumer[node],
        provisional[larger] if larger < len(provisional) else tuple(every),
    )
    return tuple(
        [i for i in wanted if i in result_set] + [i for i in every if i not in wanted]
    )


def _consumer(node: int, tree: _Tree) -> tuple[int, frozenset[int], frozenset[int]]:
    """The step consuming ``node``: its partner node, partner's and result's indices."""
    c = tree.consumer[node]
    x, y = tree.pairs_by_node[c]
    other = y if x == node else x
    made = tree.label_sets[len(tree.label_sets) - len(tree.pairs_by_node) + c]
    return other, tree.label_sets[other], made
