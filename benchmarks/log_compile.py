"""A "log" plan's compile time against its "sum" plan's, before and after.

Issue 35 (point 4) asks that a "log" plan compile within 2x its "sum"
plan's compile. This measures it on the plans ``accel_check.py``'s
``compile`` target uses (lattices of binary variables, 24 and 48 steps, a
greedy path), side by side in one process: per round, each program is
lowered (traced to StableHLO) and compiled afresh (``jax.clear_caches()``),
"sum", "log" as this checkout lowers it ("after"), the same with every
log-sum-exp shifted by its max in two reductions ("two-pass", the one-pass
reduction of short runs switched off), and "log" as main lowered it before
branch logc2 ("before": its rules are copied below and swapped in for the
measurement); rounds interleaved, medians printed. Then the
warm run time of each compiled "log" program (medians of repeated calls),
and the compile of the 24-step value and gradient, before and after.
Each line also gives the seconds a step (``Profile.compile_step_seconds``
is the "log" plans' figure) and the lowered StableHLO ops and optimized
HLO instructions.

    PYTHONPATH=src python benchmarks/log_compile.py [--rounds 3] [--sides 5,7]

Runs in about 1 minute on a TPU v5e, 3-4 on a loaded 2-core CPU. Prints
only. Needs ``cotengra`` (the lattices), as ``accel_check.py`` does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from contextlib import contextmanager
from functools import partial
from math import prod

from _common import import_einslice
from accel_check import _lattice, lattice_program


def _before_rules():
    """main's "log" rules before branch logc2 (f5eddaf), for side by side."""
    import jax
    import jax.numpy as jnp

    from einslice._exec import _semiring as S

    @partial(jax.custom_jvp, nondiff_argnums=(1,))
    def log_sum(x, axes):
        shift = S._safe_shift(x, axes)
        total = jnp.sum(jnp.exp(x - shift), axis=axes)
        return jnp.log(total) + jnp.squeeze(shift, axes)

    @log_sum.defjvp
    def _log_sum_jvp(axes, primals, tangents):
        (x,), (tx,) = primals, tangents
        shift = S._safe_shift(x, axes)
        weights = jnp.exp(x - shift)
        total = jnp.sum(weights, axis=axes)
        out = jnp.log(total) + jnp.squeeze(shift, axes)
        safe = jnp.where(total > 0, total, jnp.ones_like(total))
        return out, jnp.sum(weights * tx, axis=axes) / safe

    def annihilating_add(left, right):
        total = left + right
        if not jnp.issubdtype(total.dtype, jnp.floating):
            return total
        return jnp.where((left == -jnp.inf) | (right == -jnp.inf), -jnp.inf, total)

    def union_reduce(left, right, dims, reduce_axes):
        (left_c, right_c), (left_b, right_b) = dims
        lf = [a for a in range(left.ndim) if a not in left_b and a not in left_c]
        rf = [a for a in range(right.ndim) if a not in right_b and a not in right_c]
        lhs = jnp.transpose(left, (*left_b, *lf, *left_c))
        rhs = jnp.transpose(right, (*right_b, *rf, *right_c))
        nb, nl, nr, nc = len(left_b), len(lf), len(rf), len(left_c)
        if (
            lhs.shape[:nb] != rhs.shape[:nb]
            or lhs.shape[nb + nl :] != rhs.shape[nb + nr :]
        ):
            lhs = lhs.reshape(lhs.shape[: nb + nl] + (1,) * nr + lhs.shape[nb + nl :])
            rhs = rhs.reshape(rhs.shape[:nb] + (1,) * nl + rhs.shape[nb:])
            total = annihilating_add(lhs, rhs)
            return reduce_axes(total, tuple(range(nb + nl + nr, nb + nl + nr + nc)))
        shape = lhs.shape[: nb + nl] + rhs.shape[nb : nb + nr]
        n_b, n_l = prod(lhs.shape[:nb]), prod(lhs.shape[nb : nb + nl])
        n_r, n_c = prod(rhs.shape[nb : nb + nr]), prod(lhs.shape[nb + nl :])
        total = annihilating_add(
            lhs.reshape(n_b, n_l, 1, n_c), rhs.reshape(n_b, 1, n_r, n_c)
        )
        return reduce_axes(total, (3,)).reshape(shape)

    def contract(left, right, dims, config):
        (left_c, _), _ = dims
        if prod(left.shape[a] for a in left_c) <= 16:  # SMALL_CONTRACTION
            return union_reduce(left, right, dims, log_sum)
        return S.log_dot(left, right, dims, config.precision)

    return S.Rules(
        reduce=log_sum,
        combine=jnp.logaddexp,
        times=annihilating_add,
        contract=contract,
        all_reduce=S._log_all_reduce,
    )


@contextmanager
def _lowering(name: str):
    """Run the "log" plans with this checkout's rules, or main's before."""
    from einslice._exec import _semiring as S

    saved, small = S.RULES["log"], S.ONE_PASS_UP_TO
    if name == "before":
        S.RULES["log"] = _before_rules()
    if name == "two-pass":  # this checkout's, but every log_sum shifted by its max
        S.ONE_PASS_UP_TO = -1
    try:
        yield
    finally:
        S.RULES["log"], S.ONE_PASS_UP_TO = saved, small


def _compile(lattice, semiring: str, lowering: str, grad: bool = False):
    """(lower seconds, compile seconds, the compiled program, its input, steps)."""
    import jax

    with _lowering(lowering):
        fn, xs, steps = lattice_program(lattice, semiring, grad)
        jax.clear_caches()
        begin = time.perf_counter()
        lowered = fn.lower(xs)
        middle = time.perf_counter()
        compiled = lowered.compile()
        end = time.perf_counter()
    return middle - begin, end - middle, compiled, xs, steps, lowered


def _run_seconds(compiled, xs, repeats: int) -> float:
    import jax

    jax.block_until_ready(compiled(xs))
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        jax.block_until_ready(compiled(xs))
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


def _ops(lowered, compiled) -> tuple[int, int]:
    """StableHLO ops lowered and HLO instructions compiled (lines with ``=``)."""

    def count(text: str | None) -> int:
        return sum(" = " in line for line in (text or "").splitlines())

    return count(lowered.as_text()), count(compiled.as_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sides", default="5,7", help="lattice sides (5: 24 steps)")
    parser.add_argument("--no-grad", action="store_true")
    args = parser.parse_args()
    import_einslice()
    import jax

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"log_compile on {jax.devices()[0].device_kind} ({jax.default_backend()}), "
        f"jax {jax.__version__}, load {load:.2f} on {os.cpu_count()} cores",
        flush=True,
    )
    kinds = [("sum", "after"), ("log", "after"), ("log", "two-pass"), ("log", "before")]
    for side in (int(s) for s in args.sides.split(",")):
        lattice = _lattice(side)
        _compile(lattice, "sum", "after")  # warm: JAX's own first-use costs
        times: dict = {k: [] for k in kinds}
        last: dict = {}
        steps = 0
        for _ in range(args.rounds):
            for kind in kinds:
                lower, comp, compiled, xs, steps, lowered = _compile(lattice, *kind)
                times[kind].append((lower, comp))
                last[kind] = (compiled, xs, lowered)
        med = {
            k: tuple(statistics.median(t[i] for t in v) for i in (0, 1))
            for k, v in times.items()
        }
        total = {k: sum(v) for k, v in med.items()}
        base = total[("sum", "after")]
        print(f"{steps}-step lattice ({side}x{side}), medians of {args.rounds}:")
        for kind in kinds:
            lower, comp = med[kind]
            compiled, xs, lowered = last[kind]
            ops, hlo = _ops(lowered, compiled)
            run = _run_seconds(compiled, xs, repeats=20)
            label = f"{kind[0]} ({kind[1]})" if kind[0] == "log" else "sum"
            print(
                f"  {label:14s} lower {lower:6.3f} s  compile {comp:6.3f} s  total "
                f"{total[kind]:6.3f} s = {total[kind] / base:4.2f}x sum "
                f"({total[kind] / steps:.4f} s a step)  run {run * 1e3:7.3f} ms  "
                f"ops {ops:5d}  hlo {hlo:5d}",
                flush=True,
            )
    if not args.no_grad:
        lattice = _lattice(5)
        grads: dict = {"after": [], "before": []}
        for _ in range(max(1, args.rounds - 1)):
            for lowering in grads:
                lower, comp, *_ = _compile(lattice, "log", lowering, grad=True)
                grads[lowering].append(lower + comp)
        print(
            "24-step log value and gradient, lower + compile: "
            + ", ".join(f"{k} {statistics.median(v):.2f} s" for k, v in grads.items()),
            flush=True,
        )


if __name__ == "__main__":
    main()
