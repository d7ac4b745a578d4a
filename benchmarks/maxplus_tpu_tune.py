"""Max-plus on the TPU, second run: the ceiling, block sizes, einslice's path.

One process, printing as it goes (issue 35, point 4):

1. `maxplus.vector_ceiling` (the kernel's inner loop without its lane
   broadcasts), against `maxplus.V5E_PAIRS_PER_SECOND`;
2. `_pallas.max_plus_tpu` at 4096² with several `Blocks`, each checked
   equal to XLA's path; the fastest becomes the default for what follows;
3. `maxplus.seed_max_vs_sum` (n=1024, 256 MB; "max" on XLA's path left
   out for time: 1.39 s in issue 35) and `maxplus.max_plus_ratio`
   (einslice's ``ik,kj->ij`` under "max" against XLA's path and the float
   matmul).

On the CPU it runs small (interpret mode for the kernels): a check of the
script. ``JAX_PLATFORMS=cpu python benchmarks/maxplus_tpu_tune.py``.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from _common import import_einslice
from maxplus import (
    V5E_PAIRS_PER_SECOND,
    max_plus_ratio,
    median_interleaved,
    seed_max_vs_sum,
    vector_ceiling,
)

T0 = time.perf_counter()
ON_TPU = jax.default_backend() == "tpu"
BUDGET = 28  # seconds into the run after which no more variants are timed


def say(*args):
    print(f"[{time.perf_counter() - T0:5.1f}s]", *args, flush=True)


def main():
    import_einslice()
    from einslice._exec import _pallas
    from einslice._exec._semiring import _max_plus_xla

    say("device", jax.devices()[0].device_kind, "jax", jax.__version__)
    ceiling = V5E_PAIRS_PER_SECOND if ON_TPU else 0.0
    try:
        measured = vector_ceiling()
        if measured is not None:  # a TPU
            ceiling = max(ceiling, measured[0])
            say(f"ceiling probe: {measured[0] / 1e12:.3f} T pairs/s")
    except Exception as err:
        say(f"ceiling probe failed: {str(err)[-400:]}")

    size = 4096 if ON_TPU else 256
    key = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key[0], (1, size, size), jnp.float32)  # [b, m, k]
    b = jax.random.normal(key[1], (1, size, size), jnp.float32)  # [b, k, n]
    xla = jax.jit(lambda a, b: _max_plus_xla(jnp.swapaxes(a, 1, 2), b))
    want = xla(a, b)
    pairs = size**3
    B = _pallas.Blocks
    variants = [  # pallas-2 (05:41 UTC) timed others too: maxplus.md
        B(256, 128, 2048, 16, 8),
        B(256, 128, 4096, 8, 16),
        B(256, 128, 2048, 32, 4),
        B(512, 128, 2048, 16, 8),
        B(256, 256, 2048, 16, 8),
    ]
    if not ON_TPU:
        variants = [B(64, 128, 256, 16, 2), B(64, 128, 256, 8, 1)]
    best = (float("inf"), _pallas.DEFAULT)
    for blk in variants:
        if time.perf_counter() - T0 > BUDGET:
            say(f"{blk}: skipped (time budget)")
            continue
        try:
            f = jax.jit(
                lambda x, y, blk=blk: _pallas.max_plus_tpu(x, y, not ON_TPU, blk)
            )
            same = bool(jnp.array_equal(f(a, b), want))
            sec = median_interleaved({"k": lambda f=f: f(a, b)}, 3)["k"]
            if same and sec < best[0]:
                best = (sec, blk)
            of = f", {pairs / sec / ceiling:.0%} of ceiling" if ceiling else ""
            rate_t = pairs / sec / 1e12
            say(f"{blk}: {sec * 1e3:.2f} ms, {rate_t:.3f} T pairs/s{of}, equal {same}")
        except Exception as err:
            say(f"{blk} failed: {str(err)[-600:]}")
    _pallas.DEFAULT = best[1]
    say("default now", best[1])

    n = 1024 if ON_TPU else 64
    s = seed_max_vs_sum(n, reps=2, xla=False)  # XLA's path: 1.39 s (issue 35)
    say(
        f"seed n={n} 256MB: sum {s['sum'] * 1e3:.1f} ms, max {s['max'] * 1e3:.1f} ms; "
        f"max/sum {s['ratio']:.1f}x; {s['max_pairs'] / 1e12:.3f} T pairs/s "
        f"({s['pairs']:.3g} pairs)"
        + (f", {s['max_pairs'] / ceiling:.0%} of ceiling" if ceiling else "")
    )
    r = max_plus_ratio(size, reps=3, ceiling=False)
    say(
        f"einsum ik,kj->ij max {size}²: kernel {r['kernel'] * 1e3:.2f} ms "
        f"({r['pairs']['kernel'] / 1e12:.3f} T pairs/s), "
        f"XLA path {r['xla'] * 1e3:.2f} ms "
        f"({r['pairs']['xla'] / 1e12:.3f}), matmul {r['matmul'] * 1e3:.3f} ms; "
        f"kernel/XLA {r['vs_xla']:.3f}x, kernel/matmul {r['vs_matmul']:.1f}x, "
        f"equal {r['equal']}"
        + (f", {r['pairs']['kernel'] / ceiling:.0%} of ceiling" if ceiling else "")
    )
    say("done")


if __name__ == "__main__":
    main()
