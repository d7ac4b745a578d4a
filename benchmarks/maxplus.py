"""Max-plus at matmul-class speed on this CPU (issue 20, point 5).

Side by side in one process, medians of interleaved rounds after a warm-up:

- the seed formula ``ij,ik,il,jk,jl,kl->ij`` at n = 256 (``memory_limit``
  64MB) with ``semiring="max"`` vs ``"sum"`` (target: max within 3x of sum);
- max-plus matrix products ``ik,kj->ij`` at 256² and 1024² vs the float
  matmul (target: within 3x);
- with ``--pgm``: ``einslice.pgm.map_value`` and ``map_assignment`` end to end
  on UAI instances (planning and compiling included; ``--pgm-files``).

Usage: ``python benchmarks/maxplus.py [--reps 9] [--pgm]``; prints the table
and, with ``--write``, adds it at the top of ``benchmarks/results/maxplus.md``.
``EINSLICE_NATIVE=0`` measures the XLA path instead of the native kernel.

On any backend, ``--ratio`` measures instead what issue 35 asks of an
accelerator (``benchmarks/accel_check.py`` calls the same functions):
`max_plus_ratio` (a max-plus product against XLA's path and the float
matmul, and on a TPU the vector unit's ceiling, `vector_ceiling`) and
`seed_max_vs_sum` (the seed formula under "max" and "sum").
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from contextlib import contextmanager

from _common import RESULTS, environment_lines, import_einslice

SEED = "ij,ik,il,jk,jl,kl->ij"
UAI = "/work/shared/data/uai"


def median_interleaved(fns, rounds):
    """Median wall time of each ``fns[k]()`` after one warm-up each, interleaved."""
    import jax

    for fn in fns.values():
        jax.block_until_ready(fn())
    names = list(fns)
    times = {k: [] for k in names}
    for r in range(rounds):
        shift = r % len(names)
        for k in names[shift:] + names[:shift]:
            start = time.perf_counter()
            jax.block_until_ready(fns[k]())
            times[k].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def operands(shapes, seed=0):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(seed), len(shapes))
    return [
        jax.random.normal(k, s, jnp.float32) for k, s in zip(keys, shapes, strict=True)
    ]


def compare(einslice, equation, shapes, limit, reps):
    """Seconds of ``semiring="sum"`` and ``"max"`` and compiled temporary bytes."""
    import jax

    ops = operands(shapes)
    fns, temps = {}, {}
    for ring in ("sum", "max"):

        def f(*o, ring=ring):
            return einslice.einsum(equation, *o, memory_limit=limit, semiring=ring)

        compiled = jax.jit(f).lower(*ops).compile()
        temps[ring] = compiled.memory_analysis().temp_size_in_bytes
        fns[ring] = lambda c=compiled: c(*ops)
    return median_interleaved(fns, reps), temps


# The v5e's add-and-max rate from its datasheet figures: 197 TFLOP/s bf16 on
# 4 MXUs of 128 x 128 gives a 1.50 GHz clock; a vector register holds 8 x 128
# float32 (pltpu.get_tpu_info()). How many vector ALU slots a bundle has is
# not in the public material found (TPU v2/v3: two, Hot Chips 2020); the
# kernel's 2.48 T pairs/s at 4096^2 is 3.2 vector operations a cycle, so a
# v5e issues at least four: 4 x 1024 x 1.5e9 / 2 (an add and a max a pair).
V5E_PAIRS_PER_SECOND = 4 * 1024 * 1.5e9 / 2


def vector_ceiling(steps=16, iters=1 << 15, interpret=False):
    """The TPU vector unit's add-and-max rate on data in VMEM, pairs/s; None elsewhere.

    A Pallas kernel shaped as the max-plus kernel's inner loop
    (``_exec/_pallas.py``) without its lane broadcasts: 16 x 1024
    accumulators (8 independent register pairs), each step adding a column
    already broadcast along lanes (a plain load) to 8 rows read by
    sublane-broadcast loads, ``steps`` steps unrolled at static offsets from
    a base that alternates between two halves (nothing can be hoisted out of
    the loop). Checked against numpy. Returns ``(pairs per second,
    seconds)``. A first probe (loads at dynamic offsets, 16-64 accumulators)
    measured 1.07-1.42 T pairs/s, below what the kernel reaches: its loop
    spent its time on address arithmetic and register spills.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    if jax.default_backend() != "tpu" and not interpret:
        return None
    from jax.experimental import pallas as pl

    tile, chunks = 16, 8

    def kernel(a_ref, b_ref, o_ref):
        def body(t, accs):
            accs = list(accs)
            half = t & 1
            for u in range(steps):
                col = a_ref[half, u]  # [tile, 128], broadcast along lanes already
                for c in range(chunks):
                    if interpret:  # the interpreter has no stride-0 loads
                        row = b_ref[half, c, pl.ds(u, 1), :]
                    else:
                        row = b_ref[half, c, pl.ds(u, tile, stride=0), :]
                    accs[c] = jnp.maximum(accs[c], col + row)
            return tuple(accs)

        init = tuple(
            jnp.full((tile, 128), -jnp.inf, jnp.float32) for _ in range(chunks)
        )
        accs = lax.fori_loop(jnp.int32(0), jnp.int32(iters), body, init)
        for c, acc in enumerate(accs):
            o_ref[c] = acc

    call = jax.jit(
        pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((chunks, tile, 128), jnp.float32),
            interpret=interpret,
        )
    )
    keys = jax.random.split(jax.random.key(1))
    a = jax.random.normal(keys[0], (2, steps, tile, 1), jnp.float32)
    a = jnp.broadcast_to(a, (2, steps, tile, 128))
    b = jax.random.normal(keys[1], (2, chunks, steps, 128), jnp.float32)
    an, bn = np.asarray(a), np.asarray(b)
    halves = range(min(iters, 2))
    want = np.max(
        [an[h, u] + bn[h, :, u][:, None, :] for h in halves for u in range(steps)],
        axis=0,
    )
    if not np.array_equal(np.asarray(call(a, b)), want):
        raise AssertionError("the ceiling kernel computed a wrong result")
    seconds = median_interleaved({"c": lambda: call(a, b)}, 5)["c"]
    return iters * steps * chunks * tile * 128 / seconds, seconds


@contextmanager
def xla_path():
    """Trace max-plus products on XLA's path inside (``EINSLICE_NATIVE=0``).

    JAX's caches are cleared on the way in and out: einslice's inner jitted
    functions would otherwise be reused as traced with the kernel.
    """
    import jax

    before = os.environ.get("EINSLICE_NATIVE")
    os.environ["EINSLICE_NATIVE"] = "0"
    jax.clear_caches()
    try:
        yield
    finally:
        if before is None:
            del os.environ["EINSLICE_NATIVE"]
        else:
            os.environ["EINSLICE_NATIVE"] = before
        jax.clear_caches()


def max_plus_ratio(size=4096, reps=5, ceiling=True):
    """A ``size``² max-plus product: einslice against XLA's path and the matmul.

    On the default backend, one process, interleaved medians: einslice's
    ``ik,kj->ij`` with ``semiring="max"`` (its own kernel where the platform
    has one), the same traced with ``EINSLICE_NATIVE=0`` (XLA's path), and
    the float matmul ``jnp.dot`` at default precision. Returns a dict:
    seconds (``kernel``, ``xla``, ``matmul``), ``pairs`` per second of each
    max-plus path, ``vs_xla`` and ``vs_matmul`` (time ratios, kernel over
    other), ``equal`` (both max-plus results identical), and on a TPU
    ``probe`` (`vector_ceiling`), ``theory`` (`V5E_PAIRS_PER_SECOND`),
    ``ceiling`` (the larger, pairs per second) and ``of_ceiling`` (the
    kernel's share of it; issue 35 asks for at least half).
    Plans are chosen by estimate (``tune="estimate"``): nothing is timed
    on the way to what is measured.
    """
    import jax
    import jax.numpy as jnp

    einslice = import_einslice()
    a, b = operands([(size, size)] * 2)

    def maxplus(x, y):
        return einslice.einsum("ik,kj->ij", x, y, semiring="max", tune="estimate")

    compiled = {"kernel": jax.jit(maxplus).lower(a, b).compile()}
    with xla_path():  # traced again, now on XLA's path
        compiled["xla"] = jax.jit(maxplus).lower(a, b).compile()
    compiled["matmul"] = jax.jit(jnp.dot).lower(a, b).compile()
    equal = bool(jnp.array_equal(compiled["kernel"](a, b), compiled["xla"](a, b)))
    t = median_interleaved(
        {k: (lambda c=c: c(a, b)) for k, c in compiled.items()}, reps
    )
    pairs = size**3
    out = {
        "size": size,
        "kernel": t["kernel"],
        "xla": t["xla"],
        "matmul": t["matmul"],
        "pairs": {"kernel": pairs / t["kernel"], "xla": pairs / t["xla"]},
        "vs_xla": t["kernel"] / t["xla"],
        "vs_matmul": t["kernel"] / t["matmul"],
        "equal": equal,
    }
    if ceiling and jax.default_backend() == "tpu":
        try:
            probe = vector_ceiling()
        except Exception as err:  # a probe that does not compile: say so
            print(f"vector_ceiling failed: {str(err)[-300:]}", flush=True)
            probe = None
        out["probe"] = probe[0] if probe else float("nan")
        out["theory"] = V5E_PAIRS_PER_SECOND  # a v5e's; another TPU's differs
        out["ceiling"] = max(out["theory"], probe[0] if probe else 0.0)
        out["of_ceiling"] = out["pairs"]["kernel"] / out["ceiling"]
    return out


def seed_max_vs_sum(n=1024, limit="256MB", reps=3, xla=True):
    """The seed formula at ``n`` under "max" and "sum" (and "max" on XLA's path).

    Returns a dict of seconds (``sum``, ``max``, ``max_xla`` where ``xla``),
    ``ratio`` (max / sum), ``pairs`` (the max plan's FLOPs / 2: its
    max-plus pairs), ``max_pairs`` (pairs per second under "max") and
    ``equal`` (max identical on both paths).
    Plans are chosen by estimate (``tune="estimate"``).
    """
    import jax
    import jax.numpy as jnp

    einslice = import_einslice()
    ops = operands([(n, n)] * 6)
    compiled = {}
    for name, ring, native in (
        ("sum", "sum", True),
        ("max", "max", True),
        *((("max_xla", "max", False),) if xla else ()),
    ):

        def f(*o, ring=ring):
            return einslice.einsum(
                SEED, *o, memory_limit=limit, semiring=ring, tune="estimate"
            )

        if native:
            compiled[name] = jax.jit(f).lower(*ops).compile()
        else:
            with xla_path():
                compiled[name] = jax.jit(f).lower(*ops).compile()
    t = median_interleaved(
        {k: (lambda c=c: c(*ops)) for k, c in compiled.items()}, reps
    )
    planned = einslice.plan(SEED, *ops, memory_limit=limit, semiring="max")
    # a max-plus pair is one add and one max: the plan counts it as 2 FLOPs
    out = dict(t, n=n, ratio=t["max"] / t["sum"], pairs=planned.cost.flops / 2)
    out["max_pairs"] = out["pairs"] / t["max"]
    if xla:
        out["equal"] = bool(
            jnp.array_equal(compiled["max"](*ops), compiled["max_xla"](*ops))
        )
    return out


def pgm_times(files, reps):
    """End-to-end seconds of map_value and map_assignment on UAI files."""
    from einslice import pgm

    rows = []
    for name in files:
        model = pgm.read_uai(os.path.join(UAI, name))
        for what, fn in (("map_value", pgm.map_value), ("map_assignment", None)):
            times = []
            for _ in range(reps):
                start = time.perf_counter()
                if fn is None:
                    result = pgm.map_assignment(model)
                    value = result.log_value
                    score = model.log_score(
                        [result.assignment[v] for v in model.variables]
                    )
                else:
                    value = fn(model)
                    score = float("nan")
                times.append(time.perf_counter() - start)
            rows.append((name, what, statistics.median(times), value, score))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--memory-limit", default="64MB")
    parser.add_argument("--pgm", action="store_true")
    parser.add_argument("--pgm-files", default="Grids_12.uai,Grids_15.uai")
    parser.add_argument("--pgm-reps", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--ratio", action="store_true")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--seed-n", type=int, default=1024)
    args = parser.parse_args(argv)
    if args.ratio:
        print(max_plus_ratio(args.size, args.reps), flush=True)
        print(seed_max_vs_sum(args.seed_n, reps=args.reps), flush=True)
        return

    import jax

    einslice = import_einslice()
    cases = [
        (f"seed n=256, {args.memory_limit}", SEED, [(256, 256)] * 6, args.memory_limit),
        ("ik,kj->ij 256²", "ik,kj->ij", [(256, 256)] * 2, None),
        ("ik,kj->ij 1024²", "ik,kj->ij", [(1024, 1024)] * 2, None),
    ]
    lines = [
        "# Max-plus vs sum on this CPU",
        "",
        *environment_lines(jax.devices()[0]),
        "",
        "| case | sum s | max s | max / sum (target <= 3) | temp MB sum / max |",
        "|---|---|---|---|---|",
    ]
    for label, equation, shapes, limit in cases:
        t, m = compare(einslice, equation, shapes, limit, args.reps)
        lines.append(
            f"| {label} | {t['sum']:.4f} | {t['max']:.4f} | "
            f"{t['max'] / t['sum']:.2f}x | "
            f"{m['sum'] / 1e6:.1f} / {m['max'] / 1e6:.1f} |"
        )
        print(lines[-1], flush=True)
    if args.pgm:
        lines += [
            "",
            f"pgm end to end (median of {args.pgm_reps}, planning and compiling "
            "included):",
            "",
            "| instance | call | seconds | MAP value | score of the assignment |",
            "|---|---|---|---|---|",
        ]
        for name, what, sec, value, score in pgm_times(
            args.pgm_files.split(","), args.pgm_reps
        ):
            lines.append(f"| {name} | {what} | {sec:.3f} | {value:.6f} | {score:.6f} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:  # newest first; earlier runs stay below, never lost
        os.makedirs(RESULTS, exist_ok=True)
        path = os.path.join(RESULTS, "maxplus.md")
        earlier = ""
        if os.path.exists(path):
            with open(path) as f:
                earlier = f.read().split("\n", 1)[-1]  # less its title line
        with open(path, "w") as f:
            f.write(text + earlier)


if __name__ == "__main__":
    main()
