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


def vector_ceiling(rows=4, cols=8, steps=8, iters=1 << 13):
    """The TPU vector unit's add-and-max rate, pairs per second; None elsewhere.

    A Pallas kernel whose loop does ``c = max(c, a + b)`` on (8, 128) tiles
    already in VMEM: ``rows`` x ``cols`` independent accumulators, each
    iteration ``steps`` unrolled sub-steps reading their ``a`` and ``b`` tiles
    at static offsets from a base that alternates between two halves (so no
    load or sum can be hoisted out of the loop). Checked against numpy.
    Returns ``(pairs per second, seconds)``.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    if jax.default_backend() != "tpu":
        return None
    from jax.experimental import pallas as pl

    half_a, half_b = steps * rows, steps * cols

    def kernel(a_ref, b_ref, o_ref):
        def body(t, accs):
            accs = list(accs)
            odd = t & 1
            for u in range(steps):
                a = [a_ref[odd * half_a + u * rows + r] for r in range(rows)]
                b = [b_ref[odd * half_b + u * cols + c] for c in range(cols)]
                for r in range(rows):
                    for c in range(cols):
                        i = r * cols + c
                        accs[i] = jnp.maximum(accs[i], a[r] + b[c])
            return tuple(accs)

        init = tuple(
            jnp.full((8, 128), -jnp.inf, jnp.float32) for _ in range(rows * cols)
        )
        accs = lax.fori_loop(jnp.int32(0), jnp.int32(iters), body, init)
        for i, acc in enumerate(accs):
            o_ref[i] = acc

    call = jax.jit(
        pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((rows * cols, 8, 128), jnp.float32)
        )
    )
    keys = jax.random.split(jax.random.key(1))
    a = jax.random.normal(keys[0], (2 * half_a, 8, 128), jnp.float32)
    b = jax.random.normal(keys[1], (2 * half_b, 8, 128), jnp.float32)
    got = np.asarray(call(a, b)[0])  # accumulator (0, 0): a[.., 0] + b[.., 0]
    an, bn = np.asarray(a), np.asarray(b)
    want = np.full((8, 128), -np.inf, np.float32)
    for half in range(min(iters, 2)):
        for u in range(steps):
            total = an[half * half_a + u * rows] + bn[half * half_b + u * cols]
            want = np.maximum(want, total)
    if not np.array_equal(got, want):
        raise AssertionError("the ceiling kernel computed a wrong result")
    seconds = median_interleaved({"c": lambda: call(a, b)}, 5)["c"]
    return iters * steps * rows * cols * 1024 / seconds, seconds


def max_plus_ratio(size=4096, reps=5, ceiling=True):
    """A ``size``² max-plus product: einslice against XLA's path and the matmul.

    On the default backend, one process, interleaved medians: einslice's
    ``ik,kj->ij`` with ``semiring="max"`` (its own kernel where the platform
    has one), the same traced with ``EINSLICE_NATIVE=0`` (XLA's path), and
    the float matmul ``jnp.dot`` at default precision. Returns a dict:
    seconds (``kernel``, ``xla``, ``matmul``), ``pairs`` per second of each
    max-plus path, ``vs_xla`` and ``vs_matmul`` (time ratios, kernel over
    other), ``equal`` (both max-plus results identical), and on a TPU
    ``ceiling`` (`vector_ceiling`, pairs per second) and ``of_ceiling``.
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
    before = os.environ.get("EINSLICE_NATIVE")
    os.environ["EINSLICE_NATIVE"] = "0"
    try:  # a fresh function: traced again, now on XLA's path
        compiled["xla"] = jax.jit(lambda x, y: maxplus(x, y)).lower(a, b).compile()
    finally:
        if before is None:
            del os.environ["EINSLICE_NATIVE"]
        else:
            os.environ["EINSLICE_NATIVE"] = before
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
    ceiling = vector_ceiling() if ceiling else None
    if ceiling is not None:
        out["ceiling"] = ceiling[0]
        out["of_ceiling"] = out["pairs"]["kernel"] / ceiling[0]
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
        ("sum", "sum", "1"),
        ("max", "max", "1"),
        *((("max_xla", "max", "0"),) if xla else ()),
    ):
        before = os.environ.get("EINSLICE_NATIVE")
        os.environ["EINSLICE_NATIVE"] = native
        try:

            def f(*o, ring=ring):
                return einslice.einsum(
                    SEED, *o, memory_limit=limit, semiring=ring, tune="estimate"
                )

            compiled[name] = jax.jit(f).lower(*ops).compile()
        finally:
            if before is None:
                del os.environ["EINSLICE_NATIVE"]
            else:
                os.environ["EINSLICE_NATIVE"] = before
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
