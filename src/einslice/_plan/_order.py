"""Pairwise contraction order: wraps opt_einsum's and cotengra's path finders.

A path is opt_einsum's format: a list of position tuples into the shrinking
list of nodes, each contracted group appended at the end. ``to_steps`` turns
any path into strictly pairwise steps (one ``dot_general`` each).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import opt_einsum

from .._errors import EinsliceError
from ._types import Step

Path = tuple[tuple[int, ...], ...]

_NAMED = (
    "auto",
    "auto-hq",
    "greedy",
    "optimal",
    "dp",
    "branch-all",
    "branch-2",
    "branch-1",
    "random-greedy",
    "random-greedy-128",
)
# Above this many operands the exhaustive ("optimal", "dp") searches get slow,
# so "auto" hands over to greedy; cotengra objects are the way to go further.
_DP_MAX_OPERANDS = 12


def optimize_key(optimize: object) -> object:
    """A hashable stand-in for ``optimize``, for plan caches."""
    if isinstance(optimize, list | tuple):
        return ("path", normalize_path(optimize))
    return optimize


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
    if optimize is False:
        return tuple((0, 1) for _ in range(n - 1))
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
        inputs = [tuple(t) for t in terms]
        path = optimize(inputs, tuple(output), dict(sizes))
        return normalize_path(path)
    raise EinsliceError(
        f"optimize={optimize!r} is not understood; pass one of {list(_NAMED)}, "
        "True, False, an explicit path such as [(0, 1), (0, 1)], or a path "
        "optimizer object such as cotengra.HyperOptimizer()."
    )


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
        finder: Callable[..., object] = opt_einsum.paths.DynamicProgramming(
            minimize="flops", search_outer=True
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


def to_steps(
    terms: Sequence[tuple[int, ...]], output: tuple[int, ...], path: Path
) -> tuple[tuple[Step, ...], Path]:
    """Turn a path into pairwise Steps; also return the pairwise path itself.

    Example:
        >>> steps, pairs = to_steps([(0, 1), (1, 2)], (0, 2), ((0, 1),))
        >>> steps[0]
        Step(left=0, right=1, result=(0, 2), contracted=(1,))
    """
    n = len(terms)
    node_terms = list(terms)
    alive = list(range(n))  # node ids, in opt_einsum position order
    steps: list[Step] = []
    pairs: list[tuple[int, ...]] = []

    def contract(a: int, b: int) -> int:
        others = [t for t in alive if t not in (a, b)]
        needed = set(output).union(*(node_terms[t] for t in others))
        left, right = node_terms[a], node_terms[b]
        batch = [i for i in left if i in right and i in needed]
        result = (
            *batch,
            *(i for i in left if i not in right and i in needed),
            *(i for i in right if i not in left and i in needed),
        )
        contracted = tuple(i for i in left if i in right and i not in needed)
        steps.append(Step(a, b, result, contracted))
        node_terms.append(result)
        pairs.append((alive.index(a), alive.index(b)))
        alive.remove(a)
        alive.remove(b)
        alive.append(len(node_terms) - 1)
        return len(node_terms) - 1

    for entry in (*path, *([(0, 1)] * n)):
        if len(alive) <= 1:
            break
        group = [alive[p] for p in entry] if len(entry) > 1 else []
        while len(group) >= 2:
            merged = contract(group[0], group[1])
            group = [merged, *group[2:]]
    return tuple(steps), tuple(pairs)
