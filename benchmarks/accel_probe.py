"""Compile-time figures of an accelerator: what the choosing stage's Profile holds.

In one process, on whatever device JAX picks, each result a JSON line as it
comes (and all of them in ``$REQ_OUT``/``$OUT``/tmp ``probe.json``):

- the float32 matmul rate at ``MM``^3 (default 8192; default precision, warm
  median of 5) and host <-> device copies of 64 MB and of a tiny array;
- lattice plans (``cotengra.utils.lattice_equation``, bond 2, greedy path)
  of ``SIDES`` (default 5,7: 24 and 48 steps) in "sum", "log" and "max":
  trace (lower) and XLA compile seconds, lowered StableHLO ops and optimized
  HLO instructions, the first and a warm run; then the value-and-gradient
  program of the first side, and ``BIG`` (default 10: 99 steps) in sum and
  log;
- Grids_15's ``log_partition`` and ``marginals`` end to end with the default
  profile and limit (``$UAI_DIR``).

``PROBE_SECONDS`` (default 38) stops starting measurements; a watchdog ends
the process at ``PROBE_HARD_SECONDS`` (default 50), naming what it was
compiling. Figures from a TPU v5e: ``benchmarks/results/tpu_v5e.md``
("Compile time on the chip"); ``src/einslice/_plan/_profile.py`` cites them.

    PYTHONPATH=src python benchmarks/accel_probe.py
"""

from __future__ import annotations

import json
import os
import threading
import time

START = time.monotonic()
DEADLINE = START + float(os.environ.get("PROBE_SECONDS", "38"))
DOING = ["start"]
ROWS: list[dict] = []


def _watchdog() -> None:
    hard = float(os.environ.get("PROBE_HARD_SECONDS", "50"))
    while time.monotonic() - START < hard:
        time.sleep(0.5)
    print(f"WATCHDOG: {hard:.0f} s reached during {DOING[0]}; exiting", flush=True)
    os._exit(0)


def emit(**row) -> None:
    ROWS.append(row)
    print(json.dumps(row), flush=True)
    out = os.environ.get("REQ_OUT", os.environ.get("OUT", "/tmp"))
    with open(os.path.join(out, "probe.json"), "w") as fh:
        json.dump(ROWS, fh, indent=0)


def lattice(side: int, d: int = 2):
    """A side x side open lattice of random positive tables, to a scalar."""
    import cotengra.utils as ctu
    import numpy as np

    net = ctu.lattice_equation((side, side), d_min=d, d_max=d, seed=0)
    labels = {c: n for n, c in enumerate(sorted({c for t in net.inputs for c in t}))}
    terms = [[labels[c] for c in t] for t in net.inputs]
    rng = np.random.default_rng(0)
    arrays = [
        rng.uniform(0.5, 1.0, [net.size_dict[c] for c in t]).astype(np.float32)
        for t in net.inputs
    ]
    return terms, arrays


def measure(tag, terms, arrays, semiring, grad=False) -> None:
    """Trace, compile and run one lattice plan; one row."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import einslice
    from einslice._exec._run import compile_options

    if time.monotonic() > DEADLINE:
        print(f"skip (deadline) {tag} {semiring} grad={grad}", flush=True)
        return
    DOING[0] = f"{tag} {semiring} grad={grad} at {time.monotonic() - START:.0f} s"
    xs = [jnp.asarray(np.log(a) if semiring != "sum" else a) for a in arrays]
    spec = [v for pair in zip([x.shape for x in xs], terms, strict=True) for v in pair]
    p = einslice.plan(*spec, [], optimize="greedy", semiring=semiring, gradient=grad)
    options = compile_options(p)

    def value(ops):
        return p(*ops)

    fun = jax.grad(value) if grad else value
    jax.clear_caches()
    t0 = time.perf_counter()
    lowered = jax.jit(fun, compiler_options=options).lower(xs)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    jax.block_until_ready(compiled(xs))
    t3 = time.perf_counter()
    jax.block_until_ready(compiled(xs))
    t4 = time.perf_counter()
    emit(
        tag=tag,
        semiring=semiring,
        steps=len(p.steps),
        grad=grad,
        options=str(options),
        trace=round(t1 - t0, 3),
        compile=round(t2 - t1, 3),
        first_run=round(t3 - t2, 4),
        run=round(t4 - t3, 5),
        ops=sum(1 for line in lowered.as_text().splitlines() if " = " in line),
        hlo=sum(1 for line in compiled.as_text().splitlines() if " = " in line),
    )


def attempt(*args, **kwargs) -> None:
    try:
        measure(*args, **kwargs)
    except Exception as e:  # one failure does not end the probe
        emit(tag=args[0], semiring=args[3], error=repr(e)[:200])


def matmul_and_copies() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    n = int(os.environ.get("MM", "8192"))
    a = jax.random.uniform(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.uniform(jax.random.key(1), (n, n), jnp.float32)
    f = jax.jit(jnp.matmul).lower(a, b).compile()
    jax.block_until_ready(f(a, b))
    times = []
    for _ in range(5):
        t = time.perf_counter()
        jax.block_until_ready(f(a, b))
        times.append(time.perf_counter() - t)
    emit(tag="matmul", n=n, tflops=2 * n**3 / sorted(times)[2] / 1e12)
    x = np.ones(2**24, np.float32)
    ups, downs = [], []
    for _ in range(2):
        t = time.perf_counter()
        d = jax.block_until_ready(jax.device_put(x))
        ups.append(time.perf_counter() - t)
        y = jax.block_until_ready(d * 2)
        t = time.perf_counter()
        np.asarray(y)
        downs.append(time.perf_counter() - t)
    small = jax.block_until_ready(jax.device_put(np.ones(16, np.float32)))
    t = time.perf_counter()
    for i in range(20):
        np.asarray(small + i)
    emit(
        tag="transfer",
        up_GBps=x.nbytes / min(ups) / 1e9,
        down_GBps=x.nbytes / min(downs) / 1e9,
        small_roundtrip_s=(time.perf_counter() - t) / 20,
    )


def grids(name: str, fn) -> None:
    from einslice.pgm import read_uai

    folder = os.environ.get("UAI_DIR", "/work/shared/data/uai")
    DOING[0] = f"Grids_15 {name} at {time.monotonic() - START:.0f} s"
    model = read_uai(os.path.join(folder, "Grids_15.uai"))
    t = time.perf_counter()
    result = fn(model)
    value = result if isinstance(result, float) else result.log_partition
    emit(tag="grids15", fn=name, seconds=time.perf_counter() - t, value=float(value))


def main() -> None:
    threading.Thread(target=_watchdog, daemon=True).start()
    import jax

    from einslice.pgm import log_partition, marginals

    print("jax", jax.__version__, jax.devices(), flush=True)
    matmul_and_copies()
    sides = [int(v) for v in os.environ.get("SIDES", "5,7").split(",")]
    for k, side in enumerate(sides):
        terms, arrays = lattice(side)
        for semiring in ("sum", "log", "max")[: 3 - k]:
            attempt(f"lattice{side}", terms, arrays, semiring)
    grids("log_partition", log_partition)
    terms, arrays = lattice(sides[0])
    for semiring in ("sum", "log"):
        attempt(f"lattice{sides[0]}", terms, arrays, semiring, grad=True)
    big = int(os.environ.get("BIG", "10"))
    terms, arrays = lattice(big)
    for semiring in ("sum", "log"):
        attempt(f"lattice{big}", terms, arrays, semiring)
    grids("marginals", marginals)
    print("done", round(time.monotonic() - START, 1), flush=True)


if __name__ == "__main__":
    main()
