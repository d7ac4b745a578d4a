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

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache
from math import log2, prod

from ._layout import Tiling, buffer_entries, tiling_of
from ._order import needs_transpose
from ._profile import CPU_DEFAULT, Profile
from ._semiring import Semiring, semiring_named
from ._types import Cost, Step

# The time model counts in units of one FLOP at the profile's matmul rate
# (``_Units``); every other speed becomes a cost per byte or per event in that
# unit. The figures, and how each was measured on a CPU, are in
# ``_profile.CPU_DEFAULT``; the comments below say which plan choice each fixed:
# - cache_bytes is the cores' L2 caches together (2 x 2 MB): XLA splits each
#   loop over every core. Counting one core's 2 MB made the seed formula at
#   n=512 slice k in chunks of 2 (4 MB of operands per product), measured 4-8%
#   slower than chunks of 1 (2 MB), which this bound picks.
# - log_entry_seconds: a "log" chunk in scaled form (_exec/_scaled.py, plans of
#   at most LOG_SCALED_MAX_STEPS steps) shifts and exponentiates every operand
#   entry and takes logs of its block: measured on the seed formula at n=512 as
#   1.94 / 1.44 / 1.30 / 1.26x the "sum" time for k chunks of 1 / 2 / 4 / 8.
# - output_slice_penalty: slicing an output index measured 1.5-1.8x slower
#   than slicing a summed one with the same path and chunk (seed formula,
#   n=512, XLA CPU), beyond what the traffic model explains.
# - fresh pages: the seed formula's unsliced n=256 plan (200 MB) ran 2x slower
#   than a sliced one with equal FLOPs and traffic.
# - thin batched products (e.g. ``ijk,ik->ij`` with k a chunk of 2..16) were
#   measured at ~1.1 ns per result entry plus 0.15 ns per operand entry.
PEAK_PREFERENCE = CPU_DEFAULT.peak_preference  # per doubling (see ranking)
LOG_SCALED_MAX_STEPS = 16  # mirrors _exec/_scaled.MAX_STEPS
_PARTIAL_SUMS = 8  # a reduction's partial sums per result entry (see _steps_peak)
ALIGNMENT = 64
LOOP_BYTES = 1024


@dataclass(frozen=True, slots=True)
class _Units:
    """A profile's figures as costs in units of one FLOP at its matmul rate."""

    byte_cache: float
    byte_shared_cache: float
    byte_dram: float
    byte_transpose: float
    fresh_page: float
    chunk: float
    launch: float
    thin_result: float
    thin_operand: float
    log_entry: float


@lru_cache(maxsize=64)
def _units(profile: Profile) -> _Units:
    rate = profile.matmul_flops
    return _Units(
        byte_cache=rate / profile.cache_bandwidth,
        byte_shared_cache=rate / profile.shared_cache_bandwidth,
        byte_dram=rate / profile.dram_bandwidth,
        byte_transpose=rate / profile.transpose_bandwidth,
        fresh_page=rate / profile.fresh_page_bandwidth,
        chunk=profile.loop_seconds * rate,
        launch=profile.launch_seconds * rate,
        thin_result=profile.thin_batched_result_seconds * rate,
        thin_operand=profile.thin_batched_operand_seconds * rate,
        log_entry=profile.log_entry_seconds * rate,
    )


@dataclass(frozen=True, slots=True)
class Body:
    """The per-chunk program, as the cost model sees it."""

    terms: tuple[tuple[int, ...], ...]  # operands as given (repeats kept)
    prepared: tuple[tuple[int, ...], ...]  # after diagonal and pre-reduction
    steps: tuple[Step, ...]
    output: tuple[int, ...]
    semiring: str  # its name, as users give it

    @property
    def ring(self) -> Semiring:
        """The `Semiring` that ``semiring`` names."""
        return semiring_named(self.semiring)


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
    profile: Profile = CPU_DEFAULT,
) -> Cost:
    """FLOPs, peak temporary bytes and estimated time (seconds) of a sliced plan.

    ``peak_bytes`` and ``estimate_time`` together.

    Args:
        body: the per-chunk program.
        sizes: full size of every index.
        chunks: sliced index → chunk size.
        itemsize: bytes per element.
        tangent: cost the derivative pass (forward recomputed per chunk and
            transposed) instead of the forward pass.
        profile: the device the time is estimated for.
    """
    peak = peak_bytes(body, sizes, chunks, itemsize, tangent, profile)
    flops, time = estimate_time(body, sizes, chunks, itemsize, profile, tangent, peak)
    return Cost(flops=flops, peak_bytes=peak, time=time)


def cached_cost(
    body: Body,
    sizes: Sequence[int],
    chunks: dict[int, int],
    itemsize: int,
    profile: Profile,
    tangent: bool = False,
) -> Cost:
    """`evaluate`, cached on the (hashable) body and the chunking.

    The planner's slicing search revisits chunkings, and it costs the tree
    the tree search has just costed (``_search._quick_trees``).
    """
    key = tuple(sorted(chunks.items()))
    return _cached_evaluate(body, tuple(sizes), key, itemsize, tangent, profile)


@lru_cache(maxsize=16384)
def _cached_evaluate(
    body: Body,
    sizes: tuple[int, ...],
    chunks: tuple,
    itemsize: int,
    tangent: bool,
    profile: Profile,
) -> Cost:
    return evaluate(body, sizes, dict(chunks), itemsize, tangent, profile)


def peak_bytes(
    body: Body,
    sizes: Sequence[int],
    chunks: dict[int, int],
    itemsize: int,
    tangent: bool = False,
    profile: Profile = CPU_DEFAULT,
) -> int:
    """Predicted peak temporary bytes of a sliced plan.

    Counts every buffer that can be alive at once while one chunk runs
    (arguments as for ``evaluate``). The same on every device whose profile
    tiles no buffers (CPU, GPU), but for element types a CPU computes wider
    (``Profile.compute_itemsize``); on a TPU each buffer is counted padded
    to its tiles (`_layout.buffer_bytes`), and the program's scratch is
    added (``Profile.scratch_bytes``).
    """
    local = chunked_sizes(sizes, chunks)
    copies = 0
    if itemsize < profile.compute_itemsize:
        # computed wider (bfloat16 on a CPU): the operands are copied in
        # both widths (the derivative's cotangents too), and so may every
        # buffer be (computed wide, rounded back). With wide copies alone,
        # 13 of 140 random bfloat16 formulas compiled 1.01-1.21x the limit.
        itemsize += profile.compute_itemsize
        copies = sum(_numel(t, sizes) for t in body.terms) * itemsize
        copies *= 2 if tangent else 1
    tiling = tiling_of(profile, itemsize)
    key = tuple(sorted(chunks))
    factor = profile.wide_step_factor if itemsize > 4 else 1.0
    peak, live = _steps_peak(body, key, tuple(local), tangent, tiling, factor)
    block = _buffer(body.output, local, tiling)
    if tuple(_final_term(body)) != tuple(body.output) and chunks:
        peak = max(peak, live + block)  # the block in output order
    if any(i not in body.output for i in chunks):
        peak += block  # the accumulator carried across summed chunks
    if tangent:
        peak = _tangent_peak(body, sizes, chunks, peak, local, tiling)
    overheads = _buffer_overheads(body, sizes, chunks, tangent) + copies
    scratch = _scratch(profile, body, bool(chunks), itemsize, tangent)
    return int(peak * itemsize) + overheads + scratch


def _scratch(
    profile: Profile, body: Body, sliced: bool, itemsize: int, tangent: bool
) -> int:
    """The program's scratch beyond its buffers (0 on a CPU or a GPU).

    None for a program that neither reduces nor multiplies (a copy or a
    transpose: no pre-reduced operand, no step, no loop), nor for a plain
    one (one pass, "sum", no derivative) of one operand in element types of
    up to 4 bytes (a sum over some axes: all 31 compiled on a TPU v5e held
    none; in float64, 97 kB); else the profile's allowance for its class:
    plain or not, element types of up to 4 bytes or wider.
    """
    reduced = any(
        p != _unique(t) or len(set(t)) < len(t)
        for t, p in zip(body.terms, body.prepared, strict=True)
    )
    if not (reduced or body.steps or sliced):
        return 0
    plain = not (sliced or tangent or body.semiring != "sum")
    if plain and not body.steps and itemsize <= 4:
        return 0
    if itemsize > 4:
        return profile.wide_scratch_bytes if plain else profile.wide_loop_scratch_bytes
    return profile.scratch_bytes if plain else profile.loop_scratch_bytes


def output_bytes(
    body: Body, sizes: Sequence[int], itemsize: int, profile: Profile = CPU_DEFAULT
) -> int:
    """Bytes of a buffer of the output's shape on ``profile``'s device (padded).

    What a loop's result held beside the derivative costs (_planner._hoist).
    """
    tiling = tiling_of(profile, itemsize)
    return _buffer(body.output, sizes, tiling) * itemsize


def _buffer(term: Sequence[int], local: Sequence[int], tiling: Tiling) -> int:
    """Entries a buffer of ``term``'s indices holds, padded as ``tiling`` says."""
    return buffer_entries(tuple(local[i] for i in term), tiling)


def _fused_peak(
    body: Body, sizes: Sequence[int], chunks: dict[int, int], itemsize: int
) -> int:
    """`peak_bytes` of a "sum" forward pass as XLA fuses it (`_steps_peak`)."""
    local = chunked_sizes(sizes, chunks)
    peak, live = _steps_peak(
        body, tuple(sorted(chunks)), tuple(local), tangent=False, fused=True
    )
    block = _numel(body.output, local)
    if tuple(_final_term(body)) != tuple(body.output) and chunks:
        peak = max(peak, live + block)
    if any(i not in body.output for i in chunks):
        peak += block
    return int(peak * itemsize)


@lru_cache(maxsize=64)
def _steps_peak(
    body: Body,
    chunks: tuple[int, ...],
    local: tuple[int, ...],
    tangent: bool = False,
    tiling: Tiling = None,
    factor: float = 1.0,
    fused: bool = False,
) -> tuple[int, int]:
    """Peak entries alive while a chunk's steps run, and those alive after them.

    Sliced, diagonal and pre-reduced operands are alive from the start; each
    step adds its result and its transients (``factor`` times: see
    ``Profile.wide_step_factor``), and frees the temporaries it read.
    ``chunks``: the sliced indices; ``tiling``: how buffers are padded (None:
    not). ``fused``: as XLA runs a "sum" forward pass, with each step that
    contracts nothing written without copies of its sides, and not at all
    when `_fused_nodes` says so (the time model's fresh pages); the memory
    promise counts every buffer. Cached: the planner costs each body's
    forward and derivative passes, which share it.
    """
    nodes = _node_terms(body)
    n_ops = len(body.terms)
    unwritten = _fused_nodes(body) if fused else frozenset()
    live = 0
    for term, prepared in zip(body.terms, body.prepared, strict=True):
        if any(i in chunks for i in term):
            live += _buffer(_unique(term), local, tiling)
        if prepared != _unique(term) or len(set(term)) < len(term):
            live += _buffer(prepared, local, tiling)
    # A diagonal that is then summed is a buffer of its own before the sum
    # (XLA gathers it): measured on a CPU, b,aac-> (2; 8x8x100, float64) at
    # 1294 bytes compiled 6432, a,baa-> (4; 128x4x4) at 368 bytes 2112, and
    # "log" a,adca-> (5; 5x17x5x5) at 380 bytes 2000. And a sum keeps up to
    # 8 partial sums of each result entry (XLA's CPU vectorizes it): bdc->c
    # on 256x3x17 int32 held 544 bytes for a 68-byte result, cd->c on
    # 100x128 1600 for 512.
    transients = [0]
    for term, prepared in zip(body.terms, body.prepared, strict=True):
        if prepared == _unique(term):
            continue
        if len(set(term)) < len(term):
            transients.append(_buffer(_unique(term), local, tiling))
        transients.append(_PARTIAL_SUMS * _buffer(prepared, local, tiling))
    peak = live + max(transients)
    ring = body.ring
    made = [k >= n_ops or _materialized(body, k, chunks) for k in range(len(nodes))]
    entries = _node_sizes(body, local, tiling)
    for s, step in enumerate(body.steps):
        left, right = nodes[step.left], nodes[step.right]
        size_l, size_r = entries[step.left], entries[step.right]
        size_out = entries[n_ops + s]
        if not chunks and s == len(body.steps) - 1 and step.result == body.output:
            size_out = 0  # the last step writes the output buffer itself
        if n_ops + s in unwritten:
            size_out = 0
        transient = _step_transient(ring, step, left, right, local, tangent, tiling)
        transient = int(transient * factor)
        if fused and not step.contracted:
            transient = 0
        peak = max(peak, live + transient + size_out)
        live += (
            size_out
            - (size_l if made[step.left] and step.left not in unwritten else 0)
            - (size_r if made[step.right] and step.right not in unwritten else 0)
        )
    return peak, live


@lru_cache(maxsize=64)
def _fused_nodes(body: Body) -> frozenset[int]:
    """The nodes XLA computes inside the step that reads them: never written.

    In a "sum" plan of broadcast products only (no step contracts), every
    intermediate: XLA fuses the whole plan into one loop over the output.
    Charged as written and read, such plans were sliced where they fit
    whole (jt-clique ``abcd,ab,bc,cd->abcd`` at 48^4: 6.9 ms estimated
    unsliced, 4 ms of it fresh pages for 64 MB of intermediates, against
    1.5 ms sliced; the unsliced program compiles with no temporaries and ran
    2-6x faster than the sliced one; the open triangle ``ij,jk,ki->ijk``
    likewise). Products read by a contracting step are written (XLA:CPU
    fuses nothing into a dot); where a plan has both, the model is left as
    it was measured (the seed formula's choices, `ranking`).

    Example:
        >>> from einslice._plan._equation import build_equation, parse_subscripts
        >>> from einslice._plan._order import to_steps
        >>> shapes = ((2, 3), (3, 4), (2, 3, 4))
        >>> eq = build_equation(parse_subscripts("ab,bc,abc->abc", 3), shapes)
        >>> steps, _ = to_steps(eq.terms, eq.output, ((0, 1), (0, 1)))
        >>> sorted(_fused_nodes(Body(eq.terms, eq.terms, steps, eq.output, "sum")))
        [3]
    """
    if body.semiring != "sum" or any(step.contracted for step in body.steps):
        return frozenset()  # (then only where every step is such a product)
    n_ops = len(body.prepared)
    reader = {}
    for s, step in enumerate(body.steps):
        reader[step.left] = reader[step.right] = s
    return frozenset(
        n_ops + s
        for s, step in enumerate(body.steps)
        if not step.contracted
        and n_ops + s in reader
        and not body.steps[reader[n_ops + s]].contracted
    )


def _by_union(ring: Semiring, step: Step, local: Sequence[int]) -> bool:
    """Whether the step reduces its sides' union, as ``_exec/_semiring`` decides."""
    entries = _numel(step.contracted, local)
    return ring.contracts_by_union(entries, _numel(step.result, local) * entries)


def _step_transient(
    ring: Semiring,
    step: Step,
    left: tuple[int, ...],
    right: tuple[int, ...],
    local: Sequence[int],
    tangent: bool = False,
    tiling: Tiling = None,
) -> int:
    """Entries a step holds beside its result: copies of its sides, scratch."""
    size_l, size_r = _buffer(left, local, tiling), _buffer(right, local, tiling)
    result = _buffer(step.result, local, tiling)
    if step.contracted and ring.selective and not tangent:
        # blocked max-plus (_exec/_semiring.max_plus_dot): padded and
        # transposed sides, the column blocks and their transpose; its
        # derivative still reduces the union (below).
        return 2 * (size_l + size_r) + 2 * result
    if step.contracted and _by_union(ring, step, local):
        return 2 * _buffer(_unique(left + right), local, tiling)
    if step.contracted and ring.shifted_exp_dot:
        # shifted exponentials, finite masks and transposed copies of both
        # sides; total, support, log and the exact repair's loop buffers.
        return 4 * (size_l + size_r) + 6 * result
    return size_l + size_r


def _tangent_peak(
    body: Body,
    sizes: Sequence[int],
    chunks: dict[int, int],
    peak: int,
    local: Sequence[int],
    tiling: Tiling = None,
) -> int:
    """Peak entries of the derivative pass, from the forward chunk's ``peak``.

    The transposed body keeps the recomputed forward alive beside the
    cotangents of every node (about three bodies), and accumulates each
    operand's cotangent at full size. Where a step's derivative reads
    buffers of its own (`_step_residuals`: a "log" step's exponentials), the
    recomputed chunk keeps those of every step at once: on a plan of many
    steps their sum, with their cotangents, not twice the forward's peak, is
    what counts (UAI 2014's linkage_15, 857 "log" steps at 1 GB: forward peak
    608 MB, compiled gradient 7.8 GB; with the sum alone counted, a plan
    predicted at 920 MB compiled 1.7 GB).
    """
    residuals = 2 * _step_residuals(body, tuple(local), tiling)  # and cotangents
    cotangents = sum(_buffer(t, sizes, tiling) for t in body.terms)
    peak = max(2 * peak, residuals) + 2 * cotangents
    # A "max" or "log" tangent reads the value (where it attains, or the
    # weights exp(chunk - value)); in a gradient program the value is a
    # temporary, not the program's output. Measured on outer products whose
    # output dwarfs the rest: f,dff,ege,ha,cd->cdfehga (181 kB output),
    # unsliced, compiled its gradient to 184 kB ("max") and 364 kB ("log")
    # against 23 kB predicted ("sum": 1.2 kB); bd,a,ba,aa,dcd->abdc (19 kB),
    # its output sliced, to 58 kB ("max" and "log") against 54 kB.
    reads_value = body.ring.selective or body.ring.weights_tangents
    output = _buffer(body.output, sizes, tiling)
    if any(i in body.output for i in chunks):
        # the output's cotangent, read block by block, and its copy
        peak += (3 if reads_value else 2) * output
    elif not chunks and reads_value:
        # the value, and the tangent's mask or weights beside it
        peak += 2 * output
    return peak


@lru_cache(maxsize=64)
def _step_residuals(body: Body, local: tuple[int, ...], tiling: Tiling = None) -> int:
    """Entries a chunk's steps keep for the derivative, all alive at once.

    A "log" step (``shifted_exp_dot``) keeps its result and the shifted
    exponentials of both sides; a step that contracts by the union (max-plus's
    derivative) keeps the union. A plain product keeps nothing of its own
    (its sides are nodes; measured: a 24-matrix "sum" chain's gradient
    compiled 32 kB). Measured for "log": a 24-matrix chain of 64x64 compiled
    846 kB against 1.18 MB counted here.
    """
    ring = body.ring
    nodes = _node_terms(body)
    entries = _node_sizes(body, local, tiling)
    n_ops = len(body.prepared)
    residuals = 0
    for s, step in enumerate(body.steps):
        if not step.contracted:
            continue
        left, right = nodes[step.left], nodes[step.right]
        if _by_union(ring, step, local):
            residuals += _buffer(_unique(left + right), local, tiling)
        elif ring.shifted_exp_dot:
            residuals += entries[n_ops + s]
            residuals += entries[step.left] + entries[step.right]
    return residuals


def _buffer_overheads(
    body: Body, sizes: Sequence[int], chunks: dict[int, int], tangent: bool
) -> int:
    """Bytes beyond the entries: buffer alignment, loop state, loop residuals.

    XLA aligns every buffer (64 bytes) and a loop keeps a few small buffers
    of its own (counters, predicates, tuples): measured below 1 kB.
    """
    overhead = ALIGNMENT * (len(body.terms) + len(body.steps) + 2)
    overhead += LOOP_BYTES if chunks else 0
    total = overhead * (6 if tangent else 1)
    if tangent and chunks:
        # Reverse mode keeps each chunk's loop counter (int32, in both loops)
        # as a residual: 8 bytes per chunk.
        total += 8 * n_chunks(sizes, chunks)
    return total


@dataclass(slots=True)
class _ChunkWork:
    """One chunk's FLOPs, memory-traffic cost and kernels, as they add up."""

    flops: int = 0
    traffic: float = 0.0
    kernels: int = 0


def estimate_time(
    body: Body,
    sizes: Sequence[int],
    chunks: dict[int, int],
    itemsize: int,
    profile: Profile,
    tangent: bool = False,
    peak: int | None = None,
) -> tuple[int, float]:
    """Total FLOPs and estimated seconds of a sliced plan on a device.

    Time counts FLOPs at the profile's matmul rate, memory traffic at the
    bandwidth of the level its data fits, transposes, thin products, and
    per-chunk loop and kernel-launch costs. ``peak`` is ``peak_bytes``' result
    when known (fresh pages cost time); other arguments as for ``evaluate``.
    """
    units = _units(profile)
    if peak is None:
        peak = peak_bytes(body, sizes, chunks, itemsize, tangent, profile)
    local = chunked_sizes(sizes, chunks)
    count = n_chunks(sizes, chunks)
    work = _ChunkWork(kernels=1 + len(body.steps))
    _add_operand_work(work, body, sizes, local, chunks, itemsize, profile, units)
    output = _numel(body.output, sizes) * itemsize
    step_flops_, step_traffic = _step_work(
        body, tuple(local), itemsize, profile, output
    )
    work.flops += step_flops_
    work.traffic += step_traffic
    total_flops = work.flops * count
    time = total_flops + work.traffic * count + units.chunk * (count if chunks else 0)
    time += units.launch * work.kernels * count
    scaled = body.ring.scaled_form and len(body.steps) <= LOG_SCALED_MAX_STEPS
    if scaled and chunks:
        block = _numel(body.output, local)
        entries = sum(_numel(p, local) for p in body.prepared) + block
        time += count * units.log_entry * entries
    if not tangent and _fused_nodes(body):  # (what XLA writes: `_steps_peak`)
        peak = min(peak, _fused_peak(body, sizes, chunks, itemsize))
    time += units.fresh_page * max(0, peak - profile.fresh_pages_from)
    if any(i in body.output for i in chunks):
        time *= profile.output_slice_penalty
    if tangent:
        total_flops *= 3
        time *= 3
        if chunks:
            # Reverse mode adds every chunk's operand cotangents into
            # full-size accumulators (a slice's transpose is a full-size
            # update): about three passes over every operand per chunk,
            # measured as ~1.4 ms per chunk for the seed formula at n=512.
            full = sum(_numel(_unique(t), sizes) for t in body.terms)
            time += count * _bytes_cost(3 * full * itemsize, profile, units)
    return int(total_flops), float(time) / profile.matmul_flops


def _add_operand_work(
    work: _ChunkWork,
    body: Body,
    sizes: Sequence[int],
    local: Sequence[int],
    chunks: dict[int, int],
    itemsize: int,
    profile: Profile,
    units: _Units,
) -> None:
    """Add the work of slicing operands, taking diagonals and pre-reducing.

    In a plan XLA fuses into one loop (`_fused_nodes`), a chunk's slice is
    read in that loop from wherever the whole operand lies, not copied.
    """
    fused = bool(_fused_nodes(body))
    for term, prepared in zip(body.terms, body.prepared, strict=True):
        size_in = _input_size(term, local)
        if any(i in chunks for i in term) and fused:
            # one loop reads each chunk's slice where the operand lies: no copy
            whole = _input_size(term, sizes) * itemsize
            level = _bytes_cost(whole, profile, units) / max(whole, 1)
            work.traffic += _input_size(term, local) * itemsize * level
        elif any(i in chunks for i in term):
            work.traffic += _slice_read_cost(
                term, sizes, local, chunks, itemsize, profile, units
            )
            work.kernels += 1
        if prepared != _unique(term) or len(set(term)) < len(term):
            work.flops += _numel(term, local) if prepared != _unique(term) else 0
            work.traffic += _bytes_cost(
                (size_in + _numel(prepared, local)) * itemsize, profile, units
            )
            work.kernels += 1


@lru_cache(maxsize=64)
def _step_work(
    body: Body,
    local: tuple[int, ...],
    itemsize: int,
    profile: Profile,
    output_bytes: int = 0,
) -> tuple[int, float]:
    """FLOPs and traffic cost of the pairwise steps and of laying out the output.

    In a plan XLA fuses into one loop (`_fused_nodes`) the intermediates
    move nothing, and the result (a chunk's block) is written where the
    whole output (``output_bytes``) lies. Cached: the planner costs each
    body's forward and derivative passes, which share it.
    """
    units = _units(profile)
    nodes = _node_terms(body)
    entries = _node_sizes(body, local)
    n_ops = len(body.prepared)
    unwritten = _fused_nodes(body)  # (neither written nor read back)
    flops, traffic = 0, 0.0
    for s, step in enumerate(body.steps):
        left, right = nodes[step.left], nodes[step.right]
        size_l, size_r = entries[step.left], entries[step.right]
        size_out = entries[n_ops + s]
        flops += step_flops(step, left, right, local)
        read = sum(
            size
            for node, size in ((step.left, size_l), (step.right, size_r))
            if node not in unwritten
        )
        written = 0 if n_ops + s in unwritten else size_out
        if unwritten and s == len(body.steps) - 1:
            level = _bytes_cost(output_bytes, profile, units) / max(output_bytes, 1)
            traffic += _bytes_cost(read * itemsize, profile, units)
            traffic += written * itemsize * level
        else:
            traffic += _bytes_cost((read + written) * itemsize, profile, units)
        traffic += _gemm_penalty(step, left, right, local, profile, units)
        if step.contracted:
            batch = tuple(i for i in step.result if i in left and i in right)
            for term, size in ((left, size_l), (right, size_r)):
                if needs_transpose(term, batch, step.contracted):
                    traffic += 2 * size * itemsize * units.byte_transpose
    if tuple(_final_term(body)) != tuple(body.output):
        block = _numel(body.output, local)
        traffic += 2 * block * itemsize * units.byte_transpose
    return flops, traffic


def _node_terms(body: Body) -> list[tuple[int, ...]]:
    """Indices of every node: prepared operands, then each step's result."""
    return [*body.prepared, *(s.result for s in body.steps)]


@lru_cache(maxsize=64)
def _node_sizes(
    body: Body, local: tuple[int, ...], tiling: Tiling = None
) -> tuple[int, ...]:
    """Entries of every node (`_node_terms`) in a chunk of ``local`` sizes.

    Padded as ``tiling`` says (the peak's buffers; the time model counts
    entries). Cached: a chunking's peak, residuals and work all read them.
    Recomputed in each, they were ~1.2 million products in the planning of
    one 755-step graphical model (Grids_15: 1.8 s of its 7.4 s).
    """
    if tiling is None:
        return tuple(_numel(t, local) for t in _node_terms(body))
    return tuple(_buffer(t, local, tiling) for t in _node_terms(body))


def _final_term(body: Body) -> tuple[int, ...]:
    """Indices of the last node (the chunk's result before its transpose)."""
    nodes = _node_terms(body)
    return nodes[-1] if nodes else ()


def _input_size(term: Sequence[int], local: Sequence[int]) -> int:
    """Entries of an operand (its diagonal's, when an index repeats)."""
    if len(set(term)) < len(term):
        return _numel(_unique(term), local)
    return _numel(term, local)


def _materialized(body: Body, k: int, chunks: Collection[int]) -> bool:
    """Whether prepared operand k is a temporary (sliced, diagonal or reduced)."""
    term = body.terms[k]
    return (
        any(i in chunks for i in term)
        or body.prepared[k] != _unique(term)
        or len(set(term)) < len(term)
    )


def _slice_read_cost(
    term: Sequence[int],
    sizes: Sequence[int],
    local: Sequence[int],
    chunks: dict[int, int],
    itemsize: int,
    profile: Profile,
    units: _Units,
) -> float:
    """Cost of copying one chunk's slice of an operand (read and write).

    A slice is charged at the speed of the level its own bytes fit, except
    when the whole operand lies beyond the shared cache and the slice runs
    along its innermost axes in runs shorter than a cache line: lines do not
    survive from one chunk to the next, so every chunk reads whole 64-byte
    lines from DRAM for each run. jt-marginal's ``abcd`` (12.8 MB) sliced
    along ``d`` in chunks of 5 (20-byte runs) was charged at cache speed and
    chosen, measured 18.2 ms against 13.8 ms unsliced and 6.6 ms for greedy
    ``jnp.einsum``. (Charging every slice of a large operand at DRAM speed
    instead made jt-message's unsliced 148 MB plan win, measured 2x slower.)
    """
    whole = _input_size(term, sizes) * itemsize
    copied = 2 * _input_size(term, local) * itemsize
    unique = _unique(term)
    sliced_axes = [a for a, i in enumerate(unique) if i in chunks]
    if whole > profile.shared_cache_bytes and sliced_axes:
        run = itemsize * prod(local[i] for i in unique[sliced_axes[-1] :])
        if run < ALIGNMENT:
            waste = min(ALIGNMENT / run, 2 * whole / max(copied, 1))
            return copied * waste * units.byte_dram
    return _bytes_cost(copied, profile, units)


def _bytes_cost(nbytes: float, profile: Profile, units: _Units) -> float:
    if nbytes <= profile.cache_bytes:
        return nbytes * units.byte_cache
    if nbytes <= profile.shared_cache_bytes:
        return nbytes * units.byte_shared_cache
    return nbytes * units.byte_dram


def _gemm_penalty(
    step: Step,
    left: tuple[int, ...],
    right: tuple[int, ...],
    sizes: Sequence[int],
    profile: Profile,
    units: _Units,
) -> float:
    """Extra cost of a matrix multiply with a thin side (runs below peak)."""
    if not step.contracted:
        return 0.0
    k = _numel(step.contracted, sizes)
    m = _numel([i for i in left if i not in right], sizes)
    n = _numel([i for i in right if i not in left], sizes)
    batch = _numel([i for i in left if i in right and i not in step.contracted], sizes)
    side_min, output_min = profile.small_gemm_side, profile.small_gemm_output
    if batch > 1 and k < side_min:
        operands = _numel(_unique(left), sizes) + _numel(_unique(right), sizes)
        return units.thin_result * batch * m * n + units.thin_operand * operands
    side = min(m, n, k)
    if side >= side_min and m * n < output_min:
        # a small result parallelizes poorly over the cores: measured 140-260
        # GFLOP/s for 128x128 results (K = 128..4096) against ~350 above 256x256
        scale = min((output_min / (m * n)) ** 0.5 - 1.0, 1.0)
        return 2.0 * batch * m * n * k * scale
    if side >= side_min:
        return 0.0
    return 2.0 * batch * m * n * k * (side_min / max(side, 1) - 1) * 0.25


def ranking(cost: Cost, profile: Profile = CPU_DEFAULT) -> float:
    """Estimated time, nudged towards smaller peaks when the peak is large.

    Intermediates of hundreds of MB are slower than the model says (page
    faults, copies into layouts, allocator pressure: the seed formula's
    unsliced n=512 plan measured 2x its sliced one at equal FLOPs), so above
    the profile's last-level cache size each doubling of the peak costs
    ``profile.peak_preference`` (6% on a CPU; none on a GPU, whose allocator
    reuses device memory). Below it, time alone decides (slicing small
    problems measured slower).
    """
    # At 64 MB the seed formula at n=1024 took chunks of 4 (76 MB), measured
    # 0.90-0.97x scan_einsum against 0.97-1.04x for chunks of 2 (44 MB).
    start = profile.last_level_cache_bytes
    doublings = log2(max(cost.peak_bytes, start) / start)
    return cost.time * (1 + profile.peak_preference * doublings)


def naive_flops(terms: Sequence[tuple[int, ...]], sizes: Sequence[int]) -> int:
    """FLOPs of the one-loop-nest contraction: one multiply per operand per point."""
    every = _unique([i for t in terms for i in t])
    return _numel(every, sizes) * max(len(terms), 1)
