"""What a plan costs: FLOPs, predicted peak temporary bytes, and estimated time.

The model walks one chunk's body as the executor runs it: slice each operand,
take diagonals / pre-reduce, one ``dot_general`` per step, transpose into the
output block, combine into the accumulator. Peak bytes count every buffer
that can be alive at once (conservatively: XLA may copy both inputs of a
``dot_general`` into its preferred layout). Time counts FLOPs plus memory
traffic plus a per-chunk overhead, since a plan that moves n³ bytes through
DRAM is slower than one doing the same FLOPs in cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import log2, prod

from ._order import needs_transpose
from ._types import Cost, Step

# Time-model constants, in units of one FLOP. A byte through DRAM costs about
# as much as a few FLOPs on a CPU or GPU; a byte in cache far less. A chunk of
# a lax.scan costs a few microseconds of loop overhead.
BYTE_COST_DRAM = 10.0
# A transpose copy reads with strides: slower per byte than a plain stream.
BYTE_COST_TRANSPOSE = 30.0
BYTE_COST_CACHE = 2.5
# XLA splits each elementwise loop and matrix multiply over every core, so a
# step's data stays cache-resident while it fits the cores' L2 caches together
# (2 x 2 MB here). Counting one core's 2 MB instead made the seed formula at
# n=512 slice k in chunks of 2 (4 MB of operands per product), measured 4-8%
# slower than chunks of 1 (2 MB), which this bound now picks.
CACHE_BYTES = 4 * 2**20
# Between the per-core caches and DRAM: a step whose data fits a share of the
# last-level cache (32 MB here, shared) streams at about twice DRAM's speed.
BYTE_COST_SHARED_CACHE = 5.0
SHARED_CACHE_BYTES = 8 * 2**20
CHUNK_OVERHEAD = 2.0e5
PEAK_PREFERENCE = 0.06
# A "log" chunk in scaled form (_exec/_scaled.py, plans of at most
# LOG_SCALED_MAX_STEPS steps) shifts and exponentiates every operand entry it
# sees and takes logs of its block: measured on the seed formula at n=512 as
# 1.94 / 1.44 / 1.30 / 1.26x the "sum" time for k chunks of 1 / 2 / 4 / 8,
# i.e. 0.2-0.66 ms per chunk for ~0.8M entries, ~250 units per entry.
LOG_ENTRY_COST = 250.0
LOG_SCALED_MAX_STEPS = 16  # mirrors _exec/_scaled.MAX_STEPS
# Mirrors _exec/_semiring.SMALL_CONTRACTION: log steps this small use the union.
SMALL_CONTRACTION = 16
# The last-level cache (32 MB here): a peak beyond it streams from DRAM. At
# 64 MB the seed formula at n=1024 took chunks of 4 (76 MB), measured 0.90-0.97x
# scan_einsum against 0.97-1.04x for chunks of 2 (44 MB), now chosen.
PREFERENCE_FROM = 32 * 2**20
# Slicing an output index measured 1.5-1.8x slower than slicing a summed one
# with the same path and chunk (seed formula, n=512, XLA CPU), beyond what the
# traffic model explains; prefer summed slicing unless it is clearly worse.
OUTPUT_SLICE_PENALTY = 1.3
ALIGNMENT = 64
# Temporaries above glibc's largest mmap threshold (32 MB) come fresh from the
# OS on every call: each page faults and is zeroed on first touch. Measured
# as the seed formula's unsliced n=256 plan (200 MB) running 2x slower than a
# sliced one with equal FLOPs and traffic; about this many units per byte.
FRESH_PAGES_FROM = 32 * 2**20
FRESH_PAGE_COST = 40.0
LOOP_BYTES = 1024
# A matrix multiply whose smallest side is small runs below peak speed.
SMALL_GEMM_SIDE = 32
SMALL_GEMM_OUTPUT = 2**16
# A batched product contracting few entries (e.g. ``ijk,ik->ij`` with k a
# chunk of 2..16) runs as many tiny multiplies: measured on XLA CPU at about
# 1.1 ns per result entry plus 0.15 ns per operand entry (n=128..512, k=2..32),
# i.e. these many FLOP-time units at ~300 GFLOP/s.
THIN_BATCHED_PER_RESULT = 336.0
THIN_BATCHED_PER_OPERAND = 44.0


@dataclass(frozen=True, slots=True)
class Body:
    """The per-chunk program, as the cost model sees it."""

    terms: tuple[tuple[int, ...], ...]  # operands as given (repeats kept)
    prepared: tuple[tuple[int, ...], ...]  # after diagonal and pre-reduction
    steps: tuple[Step, ...]
    output: tuple[int, ...]
    semiring: str


def chunked_sizes(sizes: Sequence[int], chunks: dict[int, int]) -> list[int]:
    """Sizes of every index within one chunk."""
    return [chunks.get(i, s) for i, s in enumerate(sizes)]


def n_chunks(sizes: Sequence[int], chunks: dict[int, int]) -> int:
    """How many chunks a slicing makes (ceil division per sliced index)."""
    return prod(-(-sizes[i] // c) for i, c in chunks.items())


def _numel(term: Sequence[int], sizes: Sequence[int]) -> int:
    return prod(sizes[i] for i in term)


def _unique(term: Sequence[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(term))


def step_flops(
    step: Step, left: tuple[int, ...], right: tuple[int, ...], sizes: Sequence[int]
) -> int:
    """FLOPs of one pairwise step: 2 per multiply-add, 1 per product if none."""
    union = _unique(left + right)
    return _numel(union, sizes) * (2 if step.contracted else 1)


def evaluate(
    body: Body,
    sizes: Sequence[int],
    chunks: dict[int, int],
    itemsize: int,
    tangent: bool = False,
) -> Cost:
    """FLOPs, peak temporary bytes and estimated time of a sliced plan.

    Args:
        body: the per-chunk program.
        sizes: full size of every index.
        chunks: sliced index → chunk size.
        itemsize: bytes per element.
        tangent: cost the derivative pass (forward recomputed per chunk and
            transposed) instead of the forward pass.
    """
    local = chunked_sizes(sizes, chunks)
    count = n_chunks(sizes, chunks)
    nodes = [*body.prepared, *(s.result for s in body.steps)]
    n_ops = len(body.terms)

    flops = 0
    traffic = 0.0
    live = 0
    for term, prepared in zip(body.terms, body.prepared, strict=True):
        sliced = any(i in chunks for i in term)
        size_in = (
            _numel(_unique(term), local)
            if len(set(term)) < len(term)
            else _numel(term, local)
        )
        if sliced:
            live += size_in
            traffic += _bytes_cost(2 * size_in * itemsize)
        if prepared != _unique(term) or len(set(term)) < len(term):
            live += _numel(prepared, local)
            flops += _numel(term, local) if prepared != _unique(term) else 0
            traffic += _bytes_cost((size_in + _numel(prepared, local)) * itemsize)
    peak = live
    made = [k >= n_ops or _materialized(body, k, chunks) for k in range(len(nodes))]
    for s, step in enumerate(body.steps):
        left, right = nodes[step.left], nodes[step.right]
        size_l, size_r = _numel(left, local), _numel(right, local)
        size_out = _numel(step.result, local)
        if not chunks and s == len(body.steps) - 1 and step.result == body.output:
            size_out_temp = 0  # the last step writes the output buffer itself
        else:
            size_out_temp = size_out
        flops += step_flops(step, left, right, local)
        small = _numel(step.contracted, local) <= SMALL_CONTRACTION
        if step.contracted and (
            body.semiring == "max" or (body.semiring == "log" and small)
        ):
            transient = 2 * _numel(_unique(left + right), local)
        elif body.semiring == "log" and step.contracted:
            # shifted exponentials, finite masks and transposed copies of both
            # sides; total, support, log and the exact repair's loop buffers.
            transient = 4 * (size_l + size_r) + 6 * size_out
        else:
            transient = size_l + size_r
        peak = max(peak, live + transient + size_out_temp)
        traffic += _bytes_cost((size_l + size_r + size_out) * itemsize)
        traffic += _gemm_penalty(step, left, right, local)
        if step.contracted:
            batch = tuple(i for i in step.result if i in left and i in right)
            for term, size in ((left, size_l), (right, size_r)):
                if needs_transpose(term, batch, step.contracted):
                    traffic += 2 * size * itemsize * BYTE_COST_TRANSPOSE
        live += (
            size_out_temp
            - (size_l if made[step.left] else 0)
            - (size_r if made[step.right] else 0)
        )
    block = _numel(body.output, local)
    final = nodes[-1] if nodes else ()
    if tuple(final) != tuple(body.output):
        traffic += 2 * block * itemsize * BYTE_COST_TRANSPOSE
        if chunks:  # the block in output order is one more temporary
            peak = max(peak, live + block)
    if any(i not in body.output for i in chunks):
        peak += block  # the accumulator carried across summed chunks
    if tangent:
        # The transposed body keeps the recomputed forward alive beside the
        # cotangents of every node (about three bodies), and accumulates each
        # operand's cotangent at full size.
        peak = 2 * peak + 2 * sum(_numel(t, sizes) for t in body.terms)
        if any(i in body.output for i in chunks):
            # the output's cotangent, read block by block, and its copy
            peak += 2 * _numel(body.output, sizes)
    # XLA aligns every buffer (64 bytes) and a loop keeps a few small buffers
    # of its own (counters, predicates, tuples): measured below 1 kB.
    overhead = ALIGNMENT * (n_ops + len(body.steps) + 2)
    overhead += LOOP_BYTES if chunks else 0
    peak_bytes = int(peak * itemsize) + overhead * (6 if tangent else 1)
    if tangent and chunks:
        # Reverse mode keeps each chunk's loop counter (int32, in both loops)
        # as a residual: 8 bytes per chunk.
        peak_bytes += 8 * count
    total_flops = flops * count
    time = total_flops + traffic * count + CHUNK_OVERHEAD * (count if chunks else 0)
    if body.semiring == "log" and chunks and len(body.steps) <= LOG_SCALED_MAX_STEPS:
        entries = sum(_numel(p, local) for p in body.prepared) + block
        time += count * LOG_ENTRY_COST * entries
    time += FRESH_PAGE_COST * max(0, peak_bytes - FRESH_PAGES_FROM)
    if any(i in body.output for i in chunks):
        time *= OUTPUT_SLICE_PENALTY
    if tangent:
        total_flops *= 3
        time *= 3
        if chunks:
            # Reverse mode adds every chunk's operand cotangents into
            # full-size accumulators (a slice's transpose is a full-size
            # update): about three passes over every operand per chunk,
            # measured as ~1.4 ms per chunk for the seed formula at n=512.
            full = sum(_numel(_unique(t), sizes) for t in body.terms)
            time += count * _bytes_cost(3 * full * itemsize)
    return Cost(flops=int(total_flops), peak_bytes=peak_bytes, time=float(time))


def _materialized(body: Body, k: int, chunks: dict[int, int]) -> bool:
    """Whether prepared operand k is a temporary (sliced, diagonal or reduced)."""
    term = body.terms[k]
    return (
        any(i in chunks for i in term)
        or body.prepared[k] != _unique(term)
        or len(set(term)) < len(term)
    )


def _bytes_cost(nbytes: float) -> float:
    if nbytes <= CACHE_BYTES:
        return nbytes * BYTE_COST_CACHE
    if nbytes <= SHARED_CACHE_BYTES:
        return nbytes * BYTE_COST_SHARED_CACHE
    return nbytes * BYTE_COST_DRAM


def _gemm_penalty(
    step: Step, left: tuple[int, ...], right: tuple[int, ...], sizes: Sequence[int]
) -> float:
    """Extra cost of a matrix multiply with a thin side (runs below peak)."""
    if not step.contracted:
        return 0.0
    k = _numel(step.contracted, sizes)
    m = _numel([i for i in left if i not in right], sizes)
    n = _numel([i for i in right if i not in left], sizes)
    batch = _numel([i for i in left if i in right and i not in step.contracted], sizes)
    if batch > 1 and k < SMALL_GEMM_SIDE:
        operands = _numel(_unique(left), sizes) + _numel(_unique(right), sizes)
        return (
            THIN_BATCHED_PER_RESULT * batch * m * n
            + THIN_BATCHED_PER_OPERAND * operands
        )
    side = min(m, n, k)
    if side >= SMALL_GEMM_SIDE and m * n < SMALL_GEMM_OUTPUT:
        # a small result parallelizes poorly over the cores: measured 140-260
        # GFLOP/s for 128x128 results (K = 128..4096) against ~350 above 256x256
        scale = min((SMALL_GEMM_OUTPUT / (m * n)) ** 0.5 - 1.0, 1.0)
        return 2.0 * batch * m * n * k * scale
    if side >= SMALL_GEMM_SIDE:
        return 0.0
    return 2.0 * batch * m * n * k * (SMALL_GEMM_SIDE / max(side, 1) - 1) * 0.25


def ranking(cost: Cost) -> float:
    """Estimated time, nudged towards smaller peaks when the peak is large.

    Intermediates of hundreds of MB are slower than the model says (page
    faults, copies into layouts, allocator pressure: the seed formula's
    unsliced n=512 plan measured 2x its sliced one at equal FLOPs), so above
    ``PREFERENCE_FROM`` bytes (the last-level cache) each doubling of the peak
    costs 6%. Below it, time alone decides (slicing small problems measured
    slower).
    """
    doublings = log2(max(cost.peak_bytes, PREFERENCE_FROM) / PREFERENCE_FROM)
    return cost.time * (1 + PEAK_PREFERENCE * doublings)


def naive_flops(terms: Sequence[tuple[int, ...]], sizes: Sequence[int]) -> int:
    """FLOPs of the one-loop-nest contraction: one multiply per operand per point."""
    every = _unique([i for t in terms for i in t])
    return _numel(every, sizes) * max(len(terms), 1)
