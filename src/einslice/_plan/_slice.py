"""Choose which indices to slice, and in which chunk sizes, under a memory limit.

The search is greedy, like cotengra's slice finder, but over chunk sizes, not
single values: at each level it tries every index at a ladder of chunk sizes
(re-planning the path for the smaller sizes), keeps the fastest plan that fits,
and descends along the slicing that cuts the peak most. Once a plan fits, each
sliced index's chunk grows back to the largest size that still fits, since
fewer, larger chunks mean bigger matrix multiplies and less loop overhead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ._cost import ranking
from ._profile import CPU_DEFAULT, Profile
from ._types import Cost, Derivative, DerivativeSource, Plan

Evaluate = Callable[[dict[int, int]], Cost]


@dataclass(frozen=True, slots=True)
class Slicing:
    """The chosen chunks and their cost; ``fits`` is False if nothing fit."""

    chunks: dict[int, int]
    cost: Cost
    fits: bool


# A loop has costs the model misses (XLA tiles an unsliced contraction well on
# its own); slicing that limits do not force must promise this much gain.
SLICE_GAIN_REQUIRED = 0.85


def biased_ranking(
    cost: Cost, chunks: dict[int, int], profile: Profile = CPU_DEFAULT
) -> float:
    """``ranking``, with the gain a slicing must promise over none."""
    return ranking(cost, profile) / (SLICE_GAIN_REQUIRED if chunks else 1.0)


def balanced_chunk(size: int, chunk: int) -> int:
    """The smallest chunk giving as many chunks as ``chunk`` does (less waste).

    Example:
        >>> balanced_chunk(1000, 300)  # 4 chunks either way; 250 wastes nothing
        250
    """
    count = -(-size // max(chunk, 1))
    return -(-size // count)


def chunk_ladder(size: int) -> list[int]:
    """Chunk sizes worth trying for one index: halving from size/2 down to 1."""
    ladder, chunk = [], size
    while chunk > 1:
        chunk = balanced_chunk(size, -(-chunk // 2))
        if not ladder or chunk < ladder[-1]:
            ladder.append(chunk)
    return ladder


# An unsliced plan that fits and is estimated below this per step is not
# explored for a faster sliced one: each chunking tried costs ~0.1-0.3 ms of
# planning per step (graphical models: 13 chunkings of 50 steps took 0.2 s, of
# 190 steps 0.75 s), and slicing for speed won only from ~4 ms estimated (the
# seed formula's 5 steps at n=128; never at n<=64, 0.2 ms).
EXPLORE_MIN_SECONDS = 1e-4
# ... and 3e-4 where each chunking tried re-plans the path too (a few
# operands, a named strategy: ``_planner._ForwardSearch.replan``). There,
# exploring took most of a first call's planning (2-core CPU, load ~15:
# attention-linear 110 -> 2 ms, the open triangle's trace 143 -> 2 ms, the
# seed formula at n=96 246 -> 46 ms) and chose no slicing for any of the
# parity suite's plans below it (0.04-0.18 ms a step); jt-marginal (0.4 ms a
# step) still slices for speed, measured 1.25-1.95x jnp.einsum-greedy.
REPLANNED_EXPLORE_MIN_SECONDS = 3e-4


def choose_slicing(
    evaluate: Evaluate,
    sizes: Sequence[int],
    candidates: Sequence[int],
    limit: int,
    explore_when_fits: bool = True,
    start: dict[int, int] | None = None,
    profile: Profile = CPU_DEFAULT,
    steps: int = 1,
    explore_from: float = EXPLORE_MIN_SECONDS,
) -> Slicing:
    """Find the fastest chunking that fits ``limit``, or the most frugal one.

    Args:
        evaluate: cost of a chunking (index → chunk size), path re-planned.
        sizes: full size of every index.
        candidates: indices that may be sliced.
        limit: peak temporary bytes allowed.
        explore_when_fits: also try slicing when the unsliced plan fits (a
            sliced path can be faster, e.g. by keeping intermediates small);
            not done when that plan's estimate is below ``explore_from``
            per step (`EXPLORE_MIN_SECONDS`, or
            `REPLANNED_EXPLORE_MIN_SECONDS` where each trial re-plans).
        start: a slicing to descend from besides none, e.g. the indices a
            tree search sliced.
        profile: the device whose last-level cache sets the peak preference.
        steps: how many pairwise steps the plan has (what exploring costs).
        explore_from: the estimated seconds per step from which a plan that
            fits unsliced is explored (see ``explore_when_fits``).

    Returns:
        The chosen Slicing; ``fits`` is False when even the most frugal plan
        found exceeds ``limit`` (its cost then gives the smallest feasible
        limit).
    """
    seen = _Seen(evaluate, limit, profile)
    whole = seen.consider({})
    if whole.peak_bytes <= limit and whole.time < explore_from * max(1, steps):
        explore_when_fits = False
    candidates = [i for i in candidates if sizes[i] > 1]
    if start:
        # Descend from both: the search's slices fit its tree, but they may
        # be more than einslice's chunk sizing needs (Grids_15's compiled
        # log Z: 2 chunks over one index, against 4 over two from the seeds).
        seen.consider(dict(start))
        _descend(seen, sizes, candidates, dict(start), explore_when_fits)
    _descend(seen, sizes, candidates, {}, explore_when_fits)
    if seen.best is None:
        assert seen.frugal is not None
        return Slicing(seen.frugal[0], seen.frugal[1], fits=False)
    chunks, cost = seen.best
    return _grow(evaluate, sizes, chunks, cost, limit, profile)


class _Seen:
    """The chunkings evaluated so far: the best that fits, and the most frugal."""

    def __init__(self, evaluate: Evaluate, limit: int, profile: Profile) -> None:
        self.evaluate, self.limit, self.profile = evaluate, limit, profile
        self.best: tuple[dict[int, int], Cost] | None = None
        self.frugal: tuple[dict[int, int], Cost] | None = None

    def consider(self, chunks: dict[int, int]) -> Cost:
        """Evaluate ``chunks`` and keep it if it is the best or most frugal yet."""
        cost = self.evaluate(chunks)
        if self.frugal is None or cost.peak_bytes < self.frugal[1].peak_bytes:
            self.frugal = (dict(chunks), cost)
        if cost.peak_bytes <= self.limit and (
            self.best is None
            or biased_ranking(cost, chunks, self.profile)
            < biased_ranking(self.best[1], self.best[0], self.profile)
        ):
            self.best = (dict(chunks), cost)
        return cost


def _descend(
    seen: _Seen,
    sizes: Sequence[int],
    candidates: Sequence[int],
    state: dict[int, int],
    explore_when_fits: bool,
) -> None:
    """Slice one more index per level, along the chunking that cuts the peak most.

    Stops after the first level at which some plan fits (when one fits before
    any level, one level is still tried if ``explore_when_fits``), or when no
    index is left to slice.
    """
    found_at = 0 if seen.best is not None else None
    level = 0
    while True:
        if found_at is not None and (level > found_at or not explore_when_fits):
            break
        options: list[tuple[dict[int, int], Cost]] = []
        for index in candidates:
            if index in state:
                continue
            for chunk in chunk_ladder(sizes[index]):
                chunks = {**state, index: chunk}
                options.append((chunks, seen.consider(chunks)))
        if not options:
            break
        if found_at is None and seen.best is not None:
            found_at = level
        if found_at is not None and level >= found_at:
            break
        state = min(options, key=lambda o: (o[1].peak_bytes, o[1].time))[0]
        level += 1


def _grow(
    evaluate: Evaluate,
    sizes: Sequence[int],
    chunks: dict[int, int],
    cost: Cost,
    limit: int,
    profile: Profile,
) -> Slicing:
    """Enlarge each chunk to the largest size that fits, if that is faster."""

    def with_chunk(base: dict[int, int], index: int, chunk: int) -> dict[int, int]:
        rest = {i: c for i, c in base.items() if i != index}
        return rest if chunk >= sizes[index] else {**rest, index: chunk}

    for index in sorted(chunks):
        lo, hi = chunks[index], sizes[index]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if evaluate(with_chunk(chunks, index, mid)).peak_bytes <= limit:
                lo = mid
            else:
                hi = mid - 1
        trial = with_chunk(chunks, index, balanced_chunk(sizes[index], lo))
        trial_cost = evaluate(trial)
        if trial_cost.peak_bytes <= limit and ranking(trial_cost, profile) < ranking(
            cost, profile
        ):
            chunks, cost = trial, trial_cost
    return Slicing(chunks, cost, fits=True)


def summed_chunk_count(
    sizes: Sequence[int], output: Sequence[int], chunks: dict[int, int]
) -> int:
    """How many chunks the summed (non-output) sliced indices make.

    This is the grid that devices split between them.

    Example:
        >>> summed_chunk_count([8, 6], [0], {0: 4, 1: 4})  # index 1 is summed
        2
    """
    count = 1
    for index, chunk in chunks.items():
        if index not in output:
            count *= -(-sizes[index] // chunk)
    return count


def spread_chunks(
    sizes: Sequence[int],
    output: Sequence[int],
    indices: Sequence[int],
    chunks: dict[int, int],
    devices: int,
) -> dict[int, int]:
    """Chunks whose summed grid has at least ``devices`` chunks.

    A plan that fits one device may slice no summed index, or too few chunks
    for every device to get one. Then the largest summed index is cut finer,
    into the fewest chunks that reach ``devices`` and, where the size allows,
    a multiple of it (so no device idles). Smaller chunks seldom raise the
    peak, but the caller re-checks the limit. Unchanged when there are enough
    chunks already, one device, or no summed index (nothing to split).

    Example:
        >>> spread_chunks([10, 12], [0], [0, 1], {}, 4)  # slice index 1 in 4
        {1: 3}
    """
    summed = [i for i in dict.fromkeys(indices) if i not in output and sizes[i] > 1]
    count = summed_chunk_count(sizes, output, chunks)
    if devices <= 1 or not summed or count >= devices:
        return chunks
    index = max(summed, key=lambda i: sizes[i])
    size = sizes[index]
    others = count // -(-size // chunks.get(index, size))
    first: int | None = None
    for pieces in range(1, size + 1):
        chunk = -(-size // pieces)
        total = -(-size // chunk) * others
        if total < devices:
            continue
        if total % devices == 0:
            return {**chunks, index: chunk}
        first = chunk if first is None else first
        if total > 4 * devices:
            break
    chunk = first if first is not None else 1
    return {**chunks, index: chunk}


def shard_plan(plan: Plan) -> Plan:
    """One device's plan when the operands arrive split along ``plan.sharded``.

    That index has ``size / devices`` there; a chunk of it larger than this
    shrinks to it (balanced), so every buffer is at most the whole plan's and
    each device scans all the chunks of its own shard. The result is a
    one-device plan of the same path; ``equation.shapes`` stay the global ones.
    (A plan derived for execution inside the sharded executor, not a patch
    of a made plan: ``tests/test_no_plan_patches.py`` allows it.)

    Example:
        >>> import einslice
        >>> p = einslice.plan("ij,jk->ik", (4, 8), (8, 2), memory_limit="1MB")
        >>> p = replace(p, devices=4, sharded=1, chunks=((1, 3),))
        >>> local = shard_plan(p)
        >>> local.equation.sizes[1], local.chunks, local.devices
        (2, ((1, 2),), 1)
    """
    index = plan.sharded
    assert index is not None and plan.equation.sizes[index] % plan.devices == 0
    extent = plan.equation.sizes[index] // plan.devices
    sizes = list(plan.equation.sizes)
    sizes[index] = extent

    return replace(
        plan,
        equation=replace(plan.equation, sizes=tuple(sizes)),
        chunks=_local_chunks(plan.chunks, index, extent),
        derivative=_ShardDerivative(plan.derivative, index, extent),
        devices=1,
        mesh=None,
        mesh_axis=None,
        sharded=None,
    )


def _local_chunks(
    chunks: tuple[tuple[int, int], ...], index: int, extent: int
) -> tuple[tuple[int, int], ...]:
    """``chunks`` on one device's shard: ``index`` has ``extent`` there."""
    return tuple(
        (i, balanced_chunk(extent, min(c, extent)) if i == index else c)
        for i, c in chunks
    )


@dataclass(frozen=True, slots=True)
class _ShardDerivative:
    """`shard_plan`'s derivative: ``source``'s chunks on one device's shard.

    Resolved when the derivative is (a value-only plan's is found on first
    use: running the forward pass on shards does not find it).
    """

    source: DerivativeSource
    index: int
    extent: int

    def resolve(self) -> Derivative:
        """The derivative as one device runs it on its shard."""
        whole = self.source.resolve()
        chunks = _local_chunks(whole.chunks, self.index, self.extent)
        return Derivative(chunks, whole.cost, whole.gradient_limit)
