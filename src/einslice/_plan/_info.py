"""The text report behind ``str(plan)``: header, slices, one row per step."""

from __future__ import annotations

from math import prod

from ._executors import executor_facts
from ._memory import format_bytes
from ._slice import shard_plan, summed_chunk_count
from ._types import Plan


def describe(plan: Plan) -> str:
    """A readable report of a plan, in the spirit of opt_einsum's PathInfo."""
    lines = _summary(plan)
    lines.extend(_slicing(plan))
    lines.extend(_devices(plan))
    if plan.hoisted:
        first = len(plan.steps) - plan.hoisted
        lines.append(
            f"     After: step{'s' * (plan.hoisted > 1)} {first}"
            f"{f'-{len(plan.steps) - 1}' if plan.hoisted > 1 else ''} "
            "once after the loop (operands with output indices only)"
        )
    lines.append(f"      Path: {list(plan.path)}")
    facts = executor_facts(plan.executor)
    if facts.shown:
        lines.append(facts.shown)
    lines.extend(_choice(plan))
    if plan.steps and facts.steps_shown:
        lines.extend(_step_table(plan))
    return "\n".join(lines)


def _summary(plan: Plan) -> list[str]:
    """The equation, its sizes, FLOPs against the naive count, and memory."""
    eq = plan.equation
    shown = ", ".join(
        f"{eq.index_name(i)}={s}"
        for i, s in enumerate(eq.sizes)
        if i in set().union(*eq.terms)
    )
    speedup = plan.naive_flops / max(plan.flops, 1)
    return [
        f"  Equation: {eq.text()}   ({plan.semiring} semiring, {plan.dtype})",
        f"     Sizes: {shown}",
        f"     FLOPs: {plan.flops:.4g} planned vs {plan.naive_flops:.4g} naive "
        f"({speedup:.3g}x fewer)",
        f"    Memory: predicted peak {format_bytes(plan.peak_bytes)} of "
        f"limit {format_bytes(plan.memory_limit)} (temporary bytes; inputs and "
        "output excluded)",
        *_estimate(plan),
    ]


def _estimate(plan: Plan) -> list[str]:
    """The estimated time, and the device and precision it was estimated for.

    Example:
        >>> import einslice
        >>> gpu = einslice._plan._profile.GPU_DEFAULT
        >>> p = einslice.plan("ij,jk->ik", (4096, 4096), (4096, 4096),
        ...                   profile=gpu, precision="highest")
        >>> print(_estimate(p)[0])
              Time: estimated 2.8 ms on gpu at precision=highest (matmul 50 TFLOP/s)
    """
    profile = plan.profile
    if profile is None:
        return []
    rates = dict(profile.matmul_rates)
    measured = profile.precision in rates or profile.precision == "default"
    note = "" if measured else ", the default precision's: none measured for it"
    return [
        f"      Time: estimated {_seconds(plan.cost.time)} on "
        f"{profile.device_kind} at precision={profile.precision} (matmul "
        f"{profile.matmul_flops / 1e12:.3g} TFLOP/s{note})"
    ]


def _seconds(seconds: float) -> str:
    """A duration with a unit that keeps three significant digits readable."""
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} us"


def _slicing(plan: Plan) -> list[str]:
    """The sliced indices and chunks of the forward and the gradient pass."""
    eq = plan.equation
    sizes = eq.sizes
    if plan.chunks:
        sliced = ", ".join(
            f"{eq.index_name(i)}: chunk {c} of {sizes[i]} ({-(-sizes[i] // c)} chunks)"
            for i, c in plan.chunks
        )
        lines = [f"    Sliced: {sliced}; {plan.n_chunks} chunks in one lax.scan"]
    else:
        lines = ["    Sliced: nothing (one pass, no loop)"]
    if plan.tangent_chunks != plan.chunks:
        tangent = ", ".join(f"{eq.index_name(i)}: {c}" for i, c in plan.tangent_chunks)
        lines.append(
            f"  Gradient: chunks {{{tangent or 'none'}}}, predicted peak "
            f"{format_bytes(plan.tangent_cost.peak_bytes)}"
        )
    return lines


def _step_table(plan: Plan) -> list[str]:
    """One row per pairwise step: its contraction, FLOPs per chunk, result size."""
    eq = plan.equation
    chunks = dict(plan.chunks)
    local = [chunks.get(i, s) for i, s in enumerate(eq.sizes)]
    lines = [
        "",
        f"  {'step':>4}  {'contraction':<40} {'FLOPs/chunk':>12} {'result':>10}",
    ]
    nodes = plan.node_terms()
    for s, step in enumerate(plan.steps):
        left, right = nodes[step.left], nodes[step.right]
        text = (
            f"{eq.term_text(left)},{eq.term_text(right)}->{eq.term_text(step.result)}"
        )
        union = dict.fromkeys(left + right)
        flops = prod(local[i] for i in union) * (2 if step.contracted else 1)
        out = prod(local[i] for i in step.result) * plan.itemsize
        lines.append(f"  {s:>4}  {text:<40} {flops:>12.3g} {format_bytes(out):>10}")
    return lines


def candidate_label(plan: Plan) -> str:
    """A short name of a tuning candidate: path, slices and executor.

    Example:
        >>> import einslice
        >>> candidate_label(einslice.plan("ij,jk->ik", (4, 5), (5, 6)))
        'path [(0, 1)], unsliced'
    """
    eq = plan.equation
    sliced = ", ".join(f"{eq.index_name(i)}={c}" for i, c in plan.chunks)
    label = f"path {list(plan.path)}, {f'sliced {sliced}' if sliced else 'unsliced'}"
    return label + executor_facts(plan.executor).label


def _choice(plan: Plan) -> list[str]:
    """Which candidate tuning chose, how, and what the others measured."""
    choice = plan.choice
    if choice is None:
        return []
    how = {
        "measure": "measured fastest on this device",
        "wisdom": "remembered measurement (wisdom)",
        "estimate": "estimate (no candidate could be measured)",
    }[choice.how]
    spent = (
        f", tuning took {choice.tuning_seconds:.3g} s" if choice.tuning_seconds else ""
    )
    lines = [
        f"    Chosen: candidate {choice.chosen + 1} of {len(choice.labels)} by "
        f"{how}{spent}"
    ]
    for k, label in enumerate(choice.labels):
        seconds = choice.seconds[k]
        timed = f"{seconds * 1e3:.3g} ms" if seconds is not None else "not timed"
        note = f" ({choice.notes[k]})" if choice.notes[k] else ""
        mark = "*" if k == choice.chosen else " "
        lines.append(f"         {mark}{k + 1}. {label}: {timed}{note}")
    return lines


def _devices(plan: Plan) -> list[str]:
    """Each device's share of the summed chunks, and the bytes all-reduced."""
    if plan.devices <= 1:
        return []
    eq = plan.equation
    where = f"{plan.devices} devices along mesh axis {plan.mesh_axis or 'devices'!r}"
    if plan.sharded is None and not any(i not in eq.output for i, _ in plan.chunks):
        return [
            f"   Devices: {where} given, but no summed index is sliced "
            f"({eq.text()!r} sums none, or slicing one breaks the limit): runs "
            "unsharded on one device"
        ]
    out_bytes = prod(eq.sizes[i] for i in eq.output) * plan.itemsize
    reduced = out_bytes * plan.ring.all_reduce_passes
    if plan.sharded is not None:
        # Operands arrive split along one index: each device scans every
        # chunk of its own shard; along an output index, that is its block of
        # the output and nothing is combined.
        local = shard_plan(plan)
        blocks = plan.sharded in eq.output
        work = "computes its own output block" if blocks else "contracts its own shard"
        name, size = eq.index_name(plan.sharded), eq.sizes[plan.sharded]
        counts = [
            summed_chunk_count(local.equation.sizes, eq.output, dict(chunks))
            for chunks in (local.chunks, local.tangent_chunks)
        ]
        head = (
            f"   Devices: {where}; operands split along {name} are used in place: "
            f"each {work} ({name}: {size // plan.devices} of "
            f"{size}) in {counts[0]} summed chunk{'s' * (counts[0] != 1)} per "
            f"output block (gradient pass: {counts[1]})"
        )
        if blocks:
            return [head, f" All-reduce: none (the result stays split along {name})"]
    else:
        shares = []
        for chunks in (plan.chunks, plan.tangent_chunks):
            total = summed_chunk_count(eq.sizes, eq.output, dict(chunks))
            share = -(-total // plan.devices)
            idle = share * plan.devices - total
            skipped = f", {idle} padding skipped" if idle else ""
            shares.append(f"{share} of the {total} summed chunks{skipped}")
        head = (
            f"   Devices: {where}; each scans {shares[0]} per output block "
            f"(gradient pass: {shares[1]})"
        )
    return [
        head,
        f" All-reduce: {format_bytes(reduced)} per device per call "
        f"({plan.ring.all_reduce} of the output; the gradient pass adds "
        f"a psum of {format_bytes(out_bytes)})",
    ]
