"""The seed's table on a GPU in one call: n = 1024 ... 8192, under 8 minutes.

Issue 6's GPU script. Methods, side by side in one process:

- ``einslice[highest]``: ``einslice.einsum(..., precision="highest")``, full
  float32 (the seed's A100 figure, 89.7 s at n=4096, is full float32);
- ``einslice[TF32_TF32_F32_X3]``: ``precision=lax.DotAlgorithmPreset.
  TF32_TF32_F32_X3`` (three TF32 tensor-core products per product: float32-level
  accuracy at ~2.4x the HIGHEST rate on an H200; GPUs only, as XLA's CPU
  backend rejects the TF32 algorithms);
- ``einslice``: JAX's default precision (TF32 matmuls on recent NVIDIA GPUs);
- the seed's ``scan_einsum`` (default precision, as published);
- ``jnp.einsum``: shown as ``OOM (needs X GB)`` where XLA's compiled program
  would not fit in the GPU's memory, instead of crashing.

Each method's fraction of the GPU's measured float32 matmul throughput is given
against the matmul of the same precision (HIGHEST for ``einslice[highest]``,
TF32_TF32_F32_X3 for its column, default for the others). A second table gives
each einslice precision's relative error against numpy in float64 (at n=256,
where the reference is cheap; see ``docs/precision.md``). A run whose
estimated time (extrapolated from the previous n) exceeds ``--max-seconds``,
or would end after the deadline, is shown as ``skipped (est. X s)``, so the
whole script ends in time. The goal:
n=4096 in under 10 s at full float32 precision on an H100-class GPU.

Usage: ``python benchmarks/gpu_seed.py [--sizes 1024,2048,4096,8192]``; writes
``gpu_seed.md`` and ``gpu_seed.csv`` into ``$OUT`` if set, else
``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import os
import time

from _common import RESULTS, environment_lines, import_einslice, seed_table, write

X3 = "TF32_TF32_F32_X3"
METHODS = ["einslice[highest]", f"einslice[{X3}]", "einslice", "scan_einsum",
           "jnp.einsum"]  # fmt: skip
# The precisions whose accuracy is measured, and the n it is measured at.
PRECISIONS = {"einslice[highest]": "highest", f"einslice[{X3}]": X3, "einslice": None}
ACCURACY_N = 256
TOTAL_SECONDS = 8 * 60
"""The whole script's budget: the matmul measurements and runs together."""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,2048,4096,8192")
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--total-seconds", type=float, default=TOTAL_SECONDS - 30)
    parser.add_argument("--out", default=os.environ.get("OUT") or RESULTS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    start = time.monotonic()

    import jax

    import_einslice()
    from einslice.bench import _measure, _methods, _run, _suite

    device = _measure.detect_device()
    if device.platform == "cpu":
        print("gpu_seed.py: no GPU visible to JAX (jax.devices() is CPU); running "
              "anyway, but the figures are a CPU's")  # fmt: skip
    env = environment_lines(device, [f"- JAX devices: {jax.devices()}"])
    default_gflops = _measure.matmul_gflops()
    highest_gflops = _measure.matmul_gflops(precision="highest")
    names = list(METHODS)
    x3_gflops = None
    if device.platform == "cpu":  # XLA's CPU backend rejects the TF32 algorithms
        names.remove(f"einslice[{X3}]")
    else:
        x3_gflops = _measure.matmul_gflops(precision=X3)
    methods = [
        *(_methods.einslice_method(precision=PRECISIONS[m]) for m in names[:-3]),
        *_methods.resolve_methods(names[-3:]),
    ]
    assert [m.name for m in methods] == names
    ctx = _methods.Context(None, None, device.memory)
    # first-size estimates divide the work by the faster (default-precision)
    # matmul: a run is skipped on them only when even that would be too slow
    cells = _run.run(
        [_suite.seed_formula(n) for n in sizes],
        methods,
        ctx,
        device,
        matmul_gflops=default_gflops,
        max_seconds=args.max_seconds,
        repeats=5,
        budget=10.0,
        deadline=start + args.total_seconds,
    )
    matmul: dict[str, float | None] = dict.fromkeys(names, default_gflops)
    matmul["einslice[highest]"] = highest_gflops
    matmul[f"einslice[{X3}]"] = x3_gflops
    x3_line = "" if x3_gflops is None else f", {x3_gflops:.0f} GFLOP/s at {X3}"
    lines = [
        f"## Seed formula on {device.name}: einslice vs scan_einsum vs jnp.einsum",
        "",
        "- command: `python benchmarks/gpu_seed.py"
        + (f" --sizes {args.sizes}`" if args.sizes != "1024,2048,4096,8192" else "`"),
        *env,
        f"- float32 matmul ({'8192' if device.platform != 'cpu' else '2048'}^2, "
        f"jitted): {highest_gflops:.0f} GFLOP/s at precision=HIGHEST, "
        f"{default_gflops:.0f} GFLOP/s at the default precision{x3_line}",
        f"- memory a run may use: {device.memory / 1e9:.1f} GB; runs estimated "
        f"over {args.max_seconds:g} s are skipped",
        "- work counted as 2 n^4 FLOPs; % of matmul is against the matmul of the "
        "same precision",
        "",
        seed_table(cells, names, lambda n, m: matmul[m]),
        "",
        *_goal(cells),
        "",
        *_accuracy([m for m in PRECISIONS if m in names]),
        "",
        f"Total wall time: {time.monotonic() - start:.0f} s.",
    ]
    for c in cells:
        if c.status in ("wrong", "error"):
            lines.append(f"- {c.method} at n={c.n}: {c.status} {c.note} "
                         f"(rel. error {c.rel_error})")  # fmt: skip
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    print("wrote", *write(args.out, "gpu_seed", markdown, cells, default_gflops))


def _goal(cells):
    """Issue 6's goal: n=4096 in under 10 s at full float32 precision."""
    for c in cells:
        if c.method == "einslice[highest]" and c.n == 4096:
            if c.ran and c.seconds is not None:
                ok = "met" if c.seconds < 10 else "NOT met"
                return [f"- goal, n=4096 at full float32 in under 10 s: {ok} "
                        f"({c.seconds:.2f} s; the seed's A100: 89.7 s)"]  # fmt: skip
            return [f"- goal, n=4096 at full float32: {c.status}"]
    return []


def _accuracy(methods):
    """Each einslice precision's relative error against float64, as Markdown.

    At n=ACCURACY_N on the benchmark's operands (the seed formula's
    entries near 1), against ``numpy.einsum`` in float64; errors grow
    slowly with n (the seed formula sums n^2 products per entry).
    """
    import jax
    import numpy as np

    import einslice
    from einslice.bench import _suite

    formula = _suite.seed_formula(ACCURACY_N)
    subscripts = str(formula.subscripts)
    operands = _suite.make_operands(formula)
    exact = np.einsum(
        subscripts, *[x.astype(np.float64) for x in operands], optimize=True
    )
    rows = [f"| method | precision= | rel. error vs float64 (n={ACCURACY_N}) |",
            "|---|---|---|"]  # fmt: skip
    for method in methods:
        precision = PRECISIONS[method]
        run = jax.jit(lambda *x, p=precision: einslice.einsum(
            subscripts, *x, precision=p))  # fmt: skip
        try:
            got = np.asarray(run(*operands), np.float64)
            error = np.linalg.norm(got - exact) / np.linalg.norm(exact)
            text = f"{error:.2g}"
        except Exception as e:  # the backend rejects this algorithm
            text = f"error ({type(e).__name__})"
        rows.append(f"| {method} | {precision or 'default'} | {text} |")
    return rows


if __name__ == "__main__":
    main()
