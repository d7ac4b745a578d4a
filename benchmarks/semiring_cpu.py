"""Semirings and gradients on the seed's formula, on this CPU (issue 4's figures).

Side by side in one process, medians after a warm-up run (at n = 512 the
three are timed in interleaved rounds):

- ``"log"`` vs ``"sum"`` at n = 512 (target: log <= 1.5x the time of sum);
- ``jax.value_and_grad`` w.r.t. all six operands vs the forward pass at n = 512,
  within the same ``memory_limit`` (target: <= 4x), with the compiled temporary
  bytes of both;
- einslice's ``"log"`` vs torch_semiring_einsum's ``log_einsum`` at n = 256
  (target: >= 5x faster; torch-semiring-einsum pays the naive cost).

Usage: ``python benchmarks/semiring_cpu.py [--n 512] [--n-torch 256]
[--memory-limit 64MB]``; writes ``benchmarks/results/semiring_cpu.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _common import RESULTS, import_einslice

FORMULA = "ij,ik,il,jk,jl,kl->ij"


def median_seconds(fn, reps):
    """Median wall time of ``fn()`` (blocking on its result) after one warm-up."""
    return median_interleaved({"fn": fn}, reps)["fn"]


def median_interleaved(fns, rounds):
    """Median wall time of each ``fns[k]()`` after one warm-up each, interleaved.

    Each round calls every function once, starting one later than the round
    before (ABC BCA CAB ...), so that load coming and going on a shared
    machine, and the cold caches after the previous call, fall on all alike.
    """
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


def temp_bytes(fn, args):
    """Compiled temporary bytes of ``jax.jit(fn)`` on ``args``."""
    import jax

    return jax.jit(fn).lower(*args).compile().memory_analysis().temp_size_in_bytes


def operands(n, seed=0):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(seed), 6)
    return [jax.random.normal(k, (n, n), jnp.float32) / n**0.5 for k in keys]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--n-torch", type=int, default=256)
    parser.add_argument("--memory-limit", default="64MB")
    parser.add_argument("--reps", type=int, default=12)
    args = parser.parse_args(argv)

    import jax

    einslice = import_einslice()
    limit = args.memory_limit
    ops = operands(args.n)

    def forward(*o):
        return einslice.einsum(FORMULA, *o, memory_limit=limit)

    def log_forward(*o):
        return einslice.log_einsum(FORMULA, *o, memory_limit=limit)

    def loss(*o):
        return forward(*o).sum()

    value_and_grad = jax.value_and_grad(loss, argnums=tuple(range(6)))
    jit_sum, jit_log = jax.jit(forward), jax.jit(log_forward)
    jit_vg = jax.jit(value_and_grad)
    # 3 sequential runs each let the ratios move by 20% between runs of the
    # same code (value_and_grad / forward: 3.4x to 4.2x); 12 interleaved
    # rounds hold them within a few percent.
    timed = median_interleaved(
        {
            "sum": lambda: jit_sum(*ops),
            "log": lambda: jit_log(*ops),
            "vg": lambda: jit_vg(*ops),
        },
        args.reps,
    )
    t_sum, t_log, t_vg = timed["sum"], timed["log"], timed["vg"]
    m_sum = temp_bytes(forward, ops)
    m_log = temp_bytes(log_forward, ops)
    m_vg = temp_bytes(value_and_grad, ops)

    lines = [
        "# Semirings and gradients: seed formula on this CPU",
        "",
        f"- device: {jax.devices()[0].device_kind}; jax {jax.__version__}; "
        f"{os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.2f}",
        f"- formula `{FORMULA}`, float32, memory_limit={limit}",
        "",
        f"| n={args.n} | seconds | ratio | compiled temp memory |",
        "|---|---|---|---|",
        f"| sum forward | {t_sum:.3f} | 1.00 | {m_sum / 1e6:.1f} MB |",
        f"| log forward | {t_log:.3f} | {t_log / t_sum:.2f}x sum (target <= 1.5x) "
        f"| {m_log / 1e6:.1f} MB |",
        f"| sum value_and_grad (6 operands) | {t_vg:.3f} | {t_vg / t_sum:.2f}x forward "
        f"(target <= 4x) | {m_vg / 1e6:.1f} MB |",
        "",
    ]
    try:
        import torch
        import torch_semiring_einsum as tse
    except ImportError:
        lines.append(
            "torch_semiring_einsum is not installed (pip install -e '.[bench]' "
            "in einslice's clone); comparison skipped."
        )
    else:
        small = operands(args.n_torch, seed=1)
        jit_small = jax.jit(
            lambda *o: einslice.log_einsum(FORMULA, *o, memory_limit=limit)
        )
        t_ours = median_seconds(lambda: jit_small(*small), args.reps)
        equation = tse.compile_equation(FORMULA)
        tensors = [torch.from_numpy(jax.device_get(x).copy()) for x in small]
        with torch.no_grad():
            t_torch = median_seconds(
                lambda: tse.log_einsum(equation, *tensors, block_size=16), 1
            )
            ref = tse.log_einsum(equation, *tensors, block_size=16).numpy()
        err = float(abs(jax.device_get(jit_small(*small)) - ref).max())
        lines += [
            f"| n={args.n_torch}, log semiring | seconds | speed-up |",
            "|---|---|---|",
            f"| einslice log_einsum | {t_ours:.3f} | {t_torch / t_ours:.1f}x "
            "(target >= 5x) |",
            f"| torch_semiring_einsum.log_einsum (block_size=16) | {t_torch:.3f} | 1 |",
            "",
            f"Largest difference between the two results: {err:.2e}.",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "semiring_cpu.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
