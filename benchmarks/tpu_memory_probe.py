"""What XLA really allocates for small buffers on this device: the peak model's facts.

Compiles many small programs (nothing runs) and prints, per program, the
bytes XLA counts (``memory_analysis()``) beside what einslice predicts, with
the layouts XLA chose (``compiled.as_text()``: e.g. ``f32[200,3]{1,0:T(8,128)}``
is a buffer tiled in 8x128 tiles). Four parts:

- ``entry``: ``-x`` for shapes x dtypes: argument bytes = the padded size of
  a buffer in the default layout.
- ``temp``: ``(a @ b) @ c``: the product ``a @ b`` is a temporary of a known
  shape: its padded size as a temporary, and float64's emulation cost.
- ``known``: the failures seen on the chip before (tpu_v5e.md).
- ``random``: the random-formula memory check (``einslice.bench._memory_check``).

Usage: ``python benchmarks/tpu_memory_probe.py OUTDIR [--random N] [--seconds S]``;
writes ``OUTDIR/probe.jsonl`` (one JSON object per program) and
``OUTDIR/hlo.tar.gz`` (the optimized HLO of every program).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import tarfile
import time

from _common import import_einslice

_LAYOUT = re.compile(r"([a-z]+[0-9]*)\[([0-9,]*)\]\{([^}]*)\}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("outdir")
    parser.add_argument("--random", type=int, default=150)
    parser.add_argument(
        "--seconds", type=float, default=150.0, help="stop the random part by then"
    )
    parser.add_argument("--parts", default="entry,temp,known,random")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    einslice = import_einslice()
    import jax

    jax.config.update("jax_enable_x64", True)
    device = jax.devices()[0]
    print(f"# {device.device_kind} ({device.platform}); jax {jax.__version__}")
    from einslice._exec._calibrate import current_profile

    print(f"# einslice profile: {current_profile().device_kind}")
    probe = _Probe(args.outdir)
    start = time.perf_counter()
    parts = args.parts.split(",")
    try:
        if "entry" in parts:
            _entry(probe)
        if "temp" in parts:
            _temps(probe)
        if "known" in parts:
            _known(probe, einslice)
        if "issue" in parts:
            _issue()
        if "scale" in parts:
            _scale(probe, einslice)
        if "chain" in parts:
            _chains(probe, einslice)
        if "random" in parts:
            left = args.seconds - (time.perf_counter() - start)
            _random(probe, args.random, max(left, 5.0), args.seed)
    finally:
        probe.close()
        print(f"# {probe.count} programs in {time.perf_counter() - start:.0f} s")


class _Probe:
    """Compiles programs, writes one JSON line and one HLO text per program."""

    def __init__(self, outdir: str):
        self.jsonl = open(os.path.join(outdir, "probe.jsonl"), "a")
        self.tar = tarfile.open(os.path.join(outdir, "hlo.tar.gz"), "w:gz")
        self.count = 0

    def compile(self, name: str, fn, args, **facts) -> dict:
        import jax

        t0 = time.perf_counter()
        try:
            compiled = jax.jit(fn).lower(*args).compile()
        except Exception as error:  # record, keep going
            row = {"name": name, **facts, "error": f"{type(error).__name__}: {error}"}
            row["error"] = row["error"].splitlines()[0][:300]
            return self.write(row)
        m = compiled.memory_analysis()
        assert m is not None, "this backend reports no memory analysis"
        text = compiled.as_text() or ""
        row = {
            "name": name,
            **facts,
            "temp": m.temp_size_in_bytes,
            "arg": m.argument_size_in_bytes,
            "out": m.output_size_in_bytes,
            "alias": m.alias_size_in_bytes,
            "code": m.generated_code_size_in_bytes,
            "params": _parameter_layouts(text),
            "seconds": round(time.perf_counter() - t0, 3),
        }
        self._keep(f"{self.count:04d}_{name}.txt", text)
        return self.write(row)

    def write(self, row: dict) -> dict:
        self.count += 1
        self.jsonl.write(json.dumps(row) + "\n")
        self.jsonl.flush()
        return row

    def _keep(self, name: str, text: str) -> None:
        data = text.encode()
        info = tarfile.TarInfo(re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:120])
        info.size = len(data)
        self.tar.addfile(info, io.BytesIO(data))

    def close(self) -> None:
        self.jsonl.close()
        self.tar.close()


def _parameter_layouts(text: str) -> list[str]:
    """The ENTRY computation's parameter shapes with their layouts."""
    entry = text[text.find("ENTRY") :]
    found = []
    for line in entry.splitlines():
        if "parameter(" in line:
            match = _LAYOUT.search(line.split("=", 1)[1])
            if match:
                found.append(match.group(0))
    return found


ENTRY_SHAPES = [
    (),
    (1,),
    (3,),
    (127,),
    (128,),
    (129,),
    (200,),
    (1000,),
    (1025,),
    (4096,),
    (1, 1),
    (2, 3),
    (3, 200),
    (200, 3),
    (8, 128),
    (9, 128),
    (8, 129),
    (16, 128),
    (17, 5),
    (1, 200),
    (200, 1),
    (100, 100),
    (2, 3, 4),
    (5, 3, 7),
    (3, 1, 3),
    (64, 64, 2),
    (2, 64, 64),
    (2, 2, 2, 2),
    (4, 5, 6, 7),
]
DTYPES = ["float32", "bfloat16", "float64", "int32", "complex64", "int8", "bool"]


def _entry(probe: _Probe) -> None:
    import jax
    import jax.numpy as jnp

    print("## entry: padded bytes of a parameter (arg) and result (out)")
    print("dtype shape entries*itemsize arg out params")
    for dtype in DTYPES:
        for shape in ENTRY_SHAPES:
            x = jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))
            fn = jnp.logical_not if dtype == "bool" else jnp.negative
            row = probe.compile(f"entry_{dtype}_{shape}", fn, [x], dtype=dtype)
            nbytes = int(jnp.dtype(dtype).itemsize * _prod(shape))
            print(
                dtype, shape, nbytes, row.get("arg"), row.get("out"), row.get("params")
            )


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


TEMP_SHAPES = [
    (1, 1),
    (3, 3),
    (200, 3),
    (3, 200),
    (8, 128),
    (9, 130),
    (128, 128),
    (129, 129),
    (100, 7),
    (7, 100),
    (1, 300),
    (300, 1),
]


def _temps(probe: _Probe) -> None:
    import jax
    import jax.numpy as jnp

    print("## temp: (a @ b) @ c, a@b (m,k) a temporary; and float64 basics")
    print("dtype m k entries*itemsize temp")
    for dtype in ("float32", "bfloat16", "float64", "complex64", "int32"):
        dt = jnp.dtype(dtype)
        for m, k in TEMP_SHAPES:
            a = jax.ShapeDtypeStruct((m, 5), dt)
            b = jax.ShapeDtypeStruct((5, k), dt)
            c = jax.ShapeDtypeStruct((k, 6), dt)

            def fn(a, b, c):
                return (a @ b) @ c

            row = probe.compile(f"temp_{dtype}_{m}x{k}", fn, [a, b, c], dtype=dtype)
            print(
                dtype, m, k, m * k * dt.itemsize, row.get("temp"), row.get("error", "")
            )
    print("## float64 emulation: dot of vectors, matmul, elementwise sum (temp)")
    print("op dtype n temp")
    for dtype in ("float32", "float64"):
        dt = jnp.dtype(dtype)
        for n in (4, 128, 1024, 16384, 262144):
            v = jax.ShapeDtypeStruct((n,), dt)
            row = probe.compile(f"vdot_{dtype}_{n}", jnp.dot, [v, v], dtype=dtype)
            print("vdot", dtype, n, row.get("temp"), row.get("error", ""))
            row = probe.compile(
                f"sumsq_{dtype}_{n}", lambda x: jnp.sum(x * x + 1), [v], dtype=dtype
            )
            print("sum(x*x+1)", dtype, n, row.get("temp"), row.get("error", ""))
        for n in (8, 64, 256, 512):
            m = jax.ShapeDtypeStruct((n, n), dt)
            row = probe.compile(f"matmul_{dtype}_{n}", jnp.matmul, [m, m], dtype=dtype)
            print("matmul", dtype, n, row.get("temp"), row.get("error", ""))
            row = probe.compile(
                f"chain_{dtype}_{n}",
                lambda x, y, z: (x @ y) @ z,
                [m, m, m],
                dtype=dtype,
            )
            print("(x@y)@z", dtype, n, row.get("temp"), row.get("error", ""))


def _known(probe: _Probe, einslice) -> None:
    import jax
    import jax.numpy as jnp

    print("## known: earlier failures (tpu_v5e.md) and plain jnp.einsum beside them")
    cases = [
        ("a,a->", [(4,), (4,)], "float64", 384),
        ("a,a->", [(4,), (4,)], "float32", 384),
        ("ij,ij->", [(200, 3), (200, 3)], "float32", 2000),
        ("ij,ij->", [(200, 3), (200, 3)], "float64", 4000),
        ("ij,jk->ik", [(200, 3), (3, 200)], "float32", 200_000),
        ("ij,ik,il,jk,jl,kl->ij", [(32, 32)] * 6, "float32", 20_000),
        ("ij,ik,il,jk,jl,kl->ij", [(32, 32)] * 6, "float64", 40_000),
        ("ij,ik,il,jk,jl,kl->ij", [(100, 100)] * 6, "float32", 400_000),
        ("ij,ik,il,jk,jl,kl->ij", [(128, 128)] * 6, "float32", 1_000_000),
        ("ij,ik,il,jk,jl,kl->ij", [(256, 256)] * 6, "float32", 16_000_000),
    ]
    print("case limit planned_peak chunks temp | grad: planned temp | jnp.einsum temp")
    for sub, shapes, dtype, limit in cases:
        args = [jax.ShapeDtypeStruct(s, jnp.dtype(dtype)) for s in shapes]
        try:
            p = einslice.plan(sub, *args, memory_limit=limit)
            peak, chunks = p.peak_bytes, p.chunks
        except einslice.MemoryLimitError as e:
            limit = e.smallest_limit
            p = einslice.plan(sub, *args, memory_limit=limit)
            peak, chunks = p.peak_bytes, p.chunks
        facts = {"case": sub, "shapes": shapes, "dtype": dtype, "limit": limit}

        def value(*o, limit=limit, sub=sub):
            return einslice.einsum(sub, *o, memory_limit=limit)

        row = probe.compile("known_value", value, args, peak=peak, **facts)
        line = f"{sub} {shapes} {dtype} {limit} {peak} {chunks} {row.get('temp')}"
        try:
            g = einslice.plan(sub, *args, memory_limit=limit, gradient=True)
            gpeak, glimit = g.tangent_cost.peak_bytes, limit
        except einslice.MemoryLimitError as e:
            glimit = e.smallest_limit
            gpeak = None

        def loss(*o, limit=glimit, sub=sub):
            return jnp.sum(einslice.einsum(sub, *o, memory_limit=limit, gradient=True))

        grad = jax.grad(loss, argnums=tuple(range(len(args))))
        if dtype.startswith("float"):
            grow = probe.compile("known_grad", grad, args, peak=gpeak, **facts)
            line += f" | grad at {glimit}: {gpeak} {grow.get('temp')}"
        jrow = probe.compile(
            "known_jnp", lambda *o, sub=sub: jnp.einsum(sub, *o), args, **facts
        )
        print(line, f"| {jrow.get('temp')}")


def _plan_and_compile(probe, einslice, name, sub, shapes, dtype, limit, gradient=False):
    """Plan and compile one einslice call; the row with its predicted peak."""
    import jax
    import jax.numpy as jnp

    args = [jax.ShapeDtypeStruct(s, jnp.dtype(dtype)) for s in shapes]
    try:
        p = einslice.plan(sub, *args, memory_limit=limit, gradient=gradient)
    except einslice.MemoryLimitError as e:
        limit = e.smallest_limit
        p = einslice.plan(sub, *args, memory_limit=limit, gradient=gradient)
    peak = p.tangent_cost.peak_bytes if gradient else p.peak_bytes

    def value(*o):
        return einslice.einsum(sub, *o, memory_limit=limit, gradient=gradient)

    fn = value
    if gradient:
        fn = jax.grad(lambda *o: jnp.sum(value(*o)), argnums=tuple(range(len(args))))
    facts = {"case": sub, "shapes": shapes, "dtype": dtype, "limit": limit}
    facts |= {"peak": peak, "chunks": p.chunks, "steps": len(p.steps)}
    facts |= {"gradient": gradient}
    row = probe.compile(name, fn, args, **facts)
    print(
        name,
        sub,
        shapes[0],
        dtype,
        "grad" if gradient else "",
        limit,
        peak,
        p.chunks,
        len(p.steps),
        row.get("temp"),
        row.get("error", ""),
    )
    return row


SCALE = [
    ("bij,bjk->bik", (48,)),
    ("i,j->ij", (2048,)),
    ("ij,ij->", (2048,)),
    ("ij,ik,il,jk,jl,kl->ij", (32,)),
    ("abc,ia,jb,kc->ijk", (32,)),
]


def _scale(probe, einslice) -> None:
    """How temporaries grow with size, unsliced and sliced: float64 against float32."""
    print("## scale: name case n dtype limit planned_peak chunks steps temp")
    for sub, ns in SCALE:
        terms = sub.split("->")[0].split(",")
        for n in ns:
            shapes = [(n,) * len(t) for t in terms]
            for dtype in ("float64", "float32"):
                row = _plan_and_compile(
                    probe, einslice, "scale_whole", sub, shapes, dtype, 10**10
                )
                peak = row.get("peak") or 0
                if peak > 4096 and dtype == "float64":
                    _plan_and_compile(
                        probe, einslice, "scale_sliced", sub, shapes, dtype, peak // 4
                    )


def _chains(probe, einslice) -> None:
    """Scratch against the number of steps: matrix chains, value and gradient."""
    print("## chain: name case n dtype limit planned_peak chunks steps temp")
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    for k in (2, 4, 8, 16, 24):
        sub = ",".join(letters[i : i + 2] for i in range(k)) + "->" + "a" + letters[k]
        for n in (8, 100):
            for dtype in ("float32", "float64"):
                shapes = [(n, n)] * k
                row = _plan_and_compile(
                    probe, einslice, "chain_whole", sub, shapes, dtype, 10**10
                )
                _plan_and_compile(
                    probe,
                    einslice,
                    "chain_sliced",
                    sub,
                    shapes,
                    dtype,
                    max(1, (row.get("peak") or 8) // 3),
                )
                if n == 8 and k <= 8:
                    _plan_and_compile(
                        probe,
                        einslice,
                        "chain_grad",
                        sub,
                        shapes,
                        dtype,
                        10**10,
                        gradient=True,
                    )


def _issue() -> None:
    """The failures issue 35 names, through the memory check."""
    from einslice.bench import _memory_check as mc

    print("## issue: the cases issue 35 names")
    for case in (
        mc.Case("a,a->", ((4,), (4,)), "float64", limit=384),
        mc.Case("ij,ij->", ((200, 3), (200, 3)), "float32", limit=2000),
        mc.Case("ij,ij->", ((200, 3), (200, 3)), "float32", gradient=True, limit=2000),
        mc.Case("bb->", ((2, 2),), "float32", gradient=True, limit=112),
        mc.Case("a,a->", ((4,), (4,)), "float64", gradient=True, limit=384),
    ):
        print(mc.check_case(case).line())


def _random(probe: _Probe, count: int, seconds: float, seed: int = 0) -> None:
    from einslice.bench import _memory_check as mc

    print(f"## random: {count} cases (seed {seed}), at most {seconds:.0f} s")
    report = mc.Report()
    start = time.perf_counter()
    for case in mc.random_cases(count, seed=seed):
        if time.perf_counter() - start > seconds:
            break
        try:
            outcome = mc.check_case(case)
        except Exception as error:
            outcome = mc.Outcome(case, 0, 1, False, 0, None, repr(error)[:200])
        report.outcomes.append(outcome)
        print(outcome.line())
        probe.write(
            {
                "name": "random",
                "case": case.subscripts,
                "shapes": case.shapes,
                "dtype": case.dtype,
                "semiring": case.semiring,
                "gradient": case.gradient,
                "asked": outcome.asked,
                "limit": outcome.limit,
                "refused": outcome.refused,
                "sliced": outcome.sliced,
                "peak": outcome.predicted,
                "temp": outcome.temp,
                "error": outcome.error,
            }
        )
    report.seconds = time.perf_counter() - start
    print("# random:", report.summary())


if __name__ == "__main__":
    sys.exit(main())
