"""Max-plus on the TPU: the vector unit's ceiling and first Pallas kernel variants.

One process, side by side (issue 35, point 4, first exploratory run):

- the ceiling: a Pallas kernel whose loop does ``c = max(c, a + b)`` on
  (8, 128) tiles loaded from VMEM, R x C independent accumulators;
- blocked max-plus kernels ``C[i, j] = max_k A[i, k] + B[k, j]`` at 4096²
  (outer-product variants: A's column broadcast along lanes, B's row along
  sublanes; and a variant with k along lanes, reduced across lanes at the
  end), each checked equal to XLA's path;
- XLA's path (``_semiring._max_plus_xla``) and the float matmul beside them.

Warm medians. On the CPU it runs the kernels in interpret mode at small sizes
(a check of the script, not a measurement): ``JAX_PLATFORMS=cpu python
benchmarks/maxplus_tpu_explore.py``.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from _common import import_einslice

ON_TPU = jax.default_backend() == "tpu"
INTERPRET = not ON_TPU
NEG = -jnp.inf
T0 = time.perf_counter()


def say(*args):
    print(*args, flush=True)


def timed(fn, *args, reps=5):
    """Median seconds of ``fn(*args)`` after one warm-up call."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def params(**kw):
    return pltpu.CompilerParams(**kw)


# ---------------------------------------------------------------- ceiling
def ceiling(rows, cols, iters, unroll=8, slices=64):
    """Pairs per second of ``c = max(c, a + b)`` on VMEM-resident vregs."""

    def kernel(a_ref, b_ref, o_ref):
        def body(t, accs):
            a = [a_ref[(t + r) & (slices - 1)] for r in range(rows)]
            b = [b_ref[(t + 3 * c + 1) & (slices - 1)] for c in range(cols)]
            return tuple(
                jnp.maximum(accs[r * cols + c], a[r] + b[c])
                for r in range(rows)
                for c in range(cols)
            )

        init = tuple(jnp.full((8, 128), NEG, jnp.float32) for _ in range(rows * cols))
        accs = lax.fori_loop(0, iters, body, init, unroll=unroll)
        for idx, acc in enumerate(accs):
            o_ref[idx] = acc

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((rows * cols, 8, 128), jnp.float32),
        interpret=INTERPRET,
    )
    key = jax.random.split(jax.random.key(1))
    a = jax.random.normal(key[0], (slices, 8, 128), jnp.float32)
    b = jax.random.normal(key[1], (slices, 8, 128), jnp.float32)
    f = jax.jit(call)
    out = f(a, b)
    # check: one accumulator against numpy
    an, bn = np.asarray(a), np.asarray(b)
    want = np.full((8, 128), -np.inf, np.float32)
    for t in range(iters):
        want = np.maximum(want, an[t & (slices - 1)] + bn[(t + 1) & (slices - 1)])
    ok = bool(np.array_equal(np.asarray(out[0]), want))
    sec = timed(f, a, b)
    return iters * rows * cols * 1024 / sec, sec, ok


# ---------------------------------------------------------------- outer
def outer_kernel_fn(bm, bn, bk, tr, sublane_load=False):
    """A[bm, bk] x B[bk, bn]: rows in tiles of tr held in registers over bk."""

    def kernel(a_ref, b_ref, o_ref):
        @pl.when(pl.program_id(2) == 0)
        def _init():
            o_ref[...] = jnp.full(o_ref.shape, NEG, o_ref.dtype)

        def rows(r, carry):
            r0 = pl.multiple_of(r * tr, tr)
            acc = o_ref[pl.ds(r0, tr), :]
            a = a_ref[pl.ds(r0, tr), :]
            for k in range(bk):
                if sublane_load:
                    row = b_ref[pl.ds(k, tr, stride=0), :]
                else:
                    row = b_ref[pl.ds(k, 1), :]
                acc = jnp.maximum(acc, a[:, k : k + 1] + row)
            o_ref[pl.ds(r0, tr), :] = acc
            return carry

        lax.fori_loop(0, bm // tr, rows, 0)

    def call(a, b):  # a [M, K], b [K, N]
        m, k = a.shape
        n = b.shape[1]
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
            grid=(m // bm, n // bn, k // bk),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            compiler_params=params(
                dimension_semantics=("parallel", "parallel", "arbitrary")
            ),
            interpret=INTERPRET,
        )(a, b)

    return call


# ---------------------------------------------------------------- lanes
def lanes_kernel_fn(bm, bn, rows, cols):
    """k along lanes: A as [K/128, M, 128], B as [K/128, N, 128]; lane max at the end.

    Output tile (8*rows, 128) assembled from lane maxima by a transpose.
    """

    def kernel(a_ref, b_ref, o_ref):
        kblocks = a_ref.shape[0]

        def tile(t, carry):
            r0 = pl.multiple_of((t // (bn // 128)) * 8 * rows, 8 * rows)
            c0 = pl.multiple_of((t % (bn // 128)) * 128, 128)
            cols_out = []
            for g in range(128 // cols):

                def kstep(kb, accs, g=g):
                    a = [a_ref[kb, pl.ds(r0 + 8 * r, 8), :] for r in range(rows)]
                    b = [
                        jnp.broadcast_to(
                            b_ref[kb, pl.ds(c0 + g * cols + c, 1), :], (8, 128)
                        )
                        for c in range(cols)
                    ]
                    return tuple(
                        jnp.maximum(accs[r * cols + c], a[r] + b[c])
                        for r in range(rows)
                        for c in range(cols)
                    )

                init = tuple(
                    jnp.full((8, 128), NEG, jnp.float32) for _ in range(rows * cols)
                )
                accs = lax.fori_loop(0, kblocks, kstep, init)
                for c in range(cols):
                    col = jnp.concatenate([accs[r * cols + c] for r in range(rows)], 0)
                    cols_out.append(col)  # (8*rows, 128) partial maxima
            stacked = jnp.stack(cols_out, 0)  # (128 j, 8*rows i, 128 lanes)
            red = jnp.max(stacked, axis=2)  # (128 j, 8*rows i)
            o_ref[pl.ds(r0, 8 * rows), pl.ds(c0, 128)] = red.T
            return carry

        lax.fori_loop(0, (bm // (8 * rows)) * (bn // 128), tile, 0)

    def call(a, b):  # a [M, K], b [K, N]
        m, k = a.shape
        n = b.shape[1]
        a3 = a.reshape(m, k // 128, 128).transpose(1, 0, 2)
        b3 = b.T.reshape(n, k // 128, 128).transpose(1, 0, 2)
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
            grid=(m // bm, n // bn),
            in_specs=[
                pl.BlockSpec((k // 128, bm, 128), lambda i, j: (0, i, 0)),
                pl.BlockSpec((k // 128, bn, 128), lambda i, j: (0, j, 0)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
            compiler_params=params(
                dimension_semantics=("parallel", "parallel"),
                vmem_limit_bytes=64 * 1024 * 1024,
            ),
            interpret=INTERPRET,
        )(a3, b3)

    return call


def main():
    einslice = import_einslice()
    from einslice._exec._semiring import _max_plus_xla

    say("device", jax.devices()[0].device_kind, "jax", jax.__version__)
    try:
        say("tpu info", pltpu.get_tpu_info())
    except Exception as err:
        say("tpu info unavailable:", repr(err)[:200])
    size = 4096 if ON_TPU else 256
    iters = 1 << 16 if ON_TPU else 64

    # 1. the ceiling
    for rows, cols in [(1, 1), (2, 4), (4, 4), (4, 6), (4, 8)]:
        try:
            rate, sec, ok = ceiling(rows, cols, iters)
            say(
                f"ceiling R={rows} C={cols}: {rate / 1e12:.3f} T pairs/s "
                f"({sec * 1e3:.3f} ms, {iters} iters, check {'ok' if ok else 'WRONG'})"
            )
        except Exception:
            say(f"ceiling R={rows} C={cols} failed:", traceback.format_exc()[-600:])

    # 2. operands, the XLA path and the float matmul
    key = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key[0], (size, size), jnp.float32)  # [M, K]
    b = jax.random.normal(key[1], (size, size), jnp.float32)  # [K, N]
    pairs = size**3
    xla = jax.jit(lambda a, b: _max_plus_xla(a.T[None], b[None])[0])
    want = xla(a, b)
    t_xla = timed(xla, a, b)
    say(f"XLA path {size}²: {t_xla * 1e3:.2f} ms, {pairs / t_xla / 1e12:.3f} T pairs/s")
    for prec in ("default", "highest"):
        mm = jax.jit(functools.partial(jnp.dot, precision=prec))
        t_mm = timed(mm, a, b)
        say(
            f"float matmul {size}² ({prec}): {t_mm * 1e3:.3f} ms, "
            f"{2 * pairs / t_mm / 1e12:.1f} TFLOP/s"
        )

    # 3. kernel variants
    variants = [
        ("outer bm256 bn512 bk128 tr32", outer_kernel_fn(256, 512, 128, 32)),
        ("outer bm256 bn1024 bk128 tr16", outer_kernel_fn(256, 1024, 128, 16)),
        ("outer bm256 bn256 bk128 tr64", outer_kernel_fn(256, 256, 128, 64)),
        ("outer bm256 bn512 bk256 tr32", outer_kernel_fn(256, 512, 256, 32)),
        ("outer bm512 bn512 bk128 tr8", outer_kernel_fn(512, 512, 128, 8)),
        (
            "outer bm256 bn512 bk128 tr32 stride0",
            outer_kernel_fn(256, 512, 128, 32, True),
        ),
        ("lanes bm256 bn256 R4 C4", lanes_kernel_fn(256, 256, 4, 4)),
    ]
    if not ON_TPU:  # small shapes in interpret mode
        variants = [
            ("outer bm64 bn256 bk128 tr32", outer_kernel_fn(64, 256, 128, 32)),
            ("outer stride0", outer_kernel_fn(64, 256, 128, 32, True)),
            ("lanes bm32 bn128 R4 C4", lanes_kernel_fn(32, 128, 4, 4)),
        ]
    for name, fn in variants:
        try:
            start = time.perf_counter()
            f = jax.jit(fn)
            got = jax.block_until_ready(f(a, b))
            first = time.perf_counter() - start
            same = bool(jnp.array_equal(got, want))
            sec = timed(f, a, b)
            say(
                f"{name}: {sec * 1e3:.2f} ms, {pairs / sec / 1e12:.3f} T pairs/s, "
                f"{t_xla / sec:.2f}x XLA path, equal to XLA: {same}, "
                f"first call {first:.1f} s"
            )
        except Exception:
            say(f"{name} failed:", traceback.format_exc()[-1500:])
    del einslice
    say(f"total {time.perf_counter() - T0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
