"""Large networks: einslice against cotengra (numpy and jax backends), same limit.

Networks: every UAI instance in ../shared/data/uai (log Z in the "log" semiring
for einslice; cotengra contracts exp(tables) in float64 with its exponent
stripped, so it neither overflows nor underflows), plus generated ones: random
regular graphs and 2D lattices (cotengra's generators) and random quantum
circuits (brickwork of random two-qubit gates, amplitude <0|C|0>).

Per network and method: search time, compile time (first call minus a later
one; 0 for numpy), run time (median of 3 after the first), FLOPs (each
method's own count: einslice's plan, cotengra's tree, both 2 per multiply-add
for einslice and 1 for cotengra as each reports), predicted peak temporary
memory (einslice's plan, cotengra's ``peak_size``), and end to end (search +
first call). cotengra searches with ``HyperOptimizer(methods=["kahypar",
"greedy"], slicing_reconf_opts={"target_size": limit / 3 entries})``, 64
trials or 10 s, like the suite's cotengra peers.

Usage:
    python benchmarks/large_networks.py [--memory-limit 256MB] [--only NAME ...]
        [--out benchmarks/results/large_networks.md]
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / ".." / "shared" / "data" / "uai"
sys.path.insert(0, str(ROOT / "benchmarks"))


# -- networks --------------------------------------------------------------------


def uai_networks():
    from einslice.pgm import read_uai

    for path in sorted(SHARED.glob("*.uai")):
        yield path.stem, ("uai", read_uai(path))


def _relabel(inputs, output, size_dict):
    labels = {x: i for i, x in enumerate(dict.fromkeys(x for t in inputs for x in t))}
    terms = [tuple(labels[x] for x in t) for t in inputs]
    return terms, tuple(labels[x] for x in output), [size_dict[x] for x in labels]


def circuit(qubits: int, depth: int, seed: int):
    """<0|C|0> for a brickwork circuit of random two-qubit gates (a scalar)."""
    rng = np.random.default_rng(seed)
    label = iter(range(10**6))
    wires = [next(label) for _ in range(qubits)]
    terms, arrays = [], []
    for q in range(qubits):  # |0> on every qubit
        terms.append((wires[q],))
        arrays.append(np.array([1.0, 0.0]))
    for layer in range(depth):
        for q in range(layer % 2, qubits - 1, 2):
            a, b = next(label), next(label)
            terms.append((wires[q], wires[q + 1], a, b))
            # A random real orthogonal gate (Q of a real Gaussian matrix): the
            # circuit keeps the state's norm, so amplitudes stay near 2^(-n/2).
            # (The real part of a complex unitary, used before, shrank the norm
            # at every gate: 30 qubits' amplitude fell to 1e-40, below float32.)
            orthogonal = np.linalg.qr(rng.normal(size=(4, 4)))[0]
            arrays.append(orthogonal.reshape(2, 2, 2, 2))
            wires[q], wires[q + 1] = a, b
    for q in range(qubits):  # <0| on every qubit
        terms.append((wires[q],))
        arrays.append(np.array([1.0, 0.0]))
    sizes = [2] * (max(i for t in terms for i in t) + 1)
    return terms, (), sizes, arrays


def generated_networks():
    from cotengra.utils import lattice_equation, randreg_equation

    rng = np.random.default_rng(0)

    def with_arrays(terms, output, sizes):
        arrays = [rng.uniform(0.5, 1.0, [sizes[i] for i in t]) for t in terms]
        # Scale each so that the result stays near 1 in float32.
        arrays = [a / a.mean() / np.sqrt(a.size) for a in arrays]
        return terms, output, sizes, arrays

    for n, d in ((60, 4), (120, 2)):
        eq = randreg_equation(n, 3, d_min=d, d_max=d, seed=n)
        yield f"randreg-{n}-d{d}", ("net", with_arrays(*_relabel(eq[0], eq[1], eq[3])))
    for rows, cols, d in ((8, 8, 4), (12, 12, 3)):
        eq = lattice_equation([rows, cols], d_min=d, d_max=d, seed=rows)
        name = f"lattice-{rows}x{cols}-d{d}"
        yield name, ("net", with_arrays(*_relabel(eq[0], eq[1], eq[3])))
    for qubits, depth in ((20, 12), (30, 14)):
        yield f"circuit-{qubits}q-d{depth}", ("net", circuit(qubits, depth, qubits))


# -- measuring ---------------------------------------------------------------------


# A call still running after this many seconds is stopped and reported as
# "> STOP_SECONDS" (an earlier run sat 45 minutes in cotengra's per-slice numpy
# loop on Grids_15, whose search had found a tree of many slices). A first
# call of LONG_SECONDS or more is not repeated: it is the run time.
STOP_SECONDS = 300
LONG_SECONDS = 30


class Stopped(Exception):
    """A call ran past ``STOP_SECONDS``."""


def _stop(signum, frame):
    raise Stopped


def timed_runs(call, repeats=3):
    """The first call's value and seconds, and the median of ``repeats`` more.

    Raises ``Stopped`` when a call runs past ``STOP_SECONDS`` (SIGALRM: the
    call's Python frames see it between two operations).
    """
    signal.signal(signal.SIGALRM, _stop)
    signal.alarm(STOP_SECONDS)
    try:
        t = time.perf_counter()
        first_value = call()
        first = time.perf_counter() - t
        if first >= LONG_SECONDS:
            return first_value, first, first
        runs = []
        for _ in range(repeats):
            t = time.perf_counter()
            call()
            runs.append(time.perf_counter() - t)
    finally:
        signal.alarm(0)
    return first_value, first, statistics.median(runs)


def einslice_row(kind, network, limit: int) -> tuple[dict, object]:
    import jax.numpy as jnp

    import einslice
    from einslice.pgm import _infer

    query: dict = {}
    if kind == "uai":  # log_partition once, as a user's first query runs it
        _forget_plans()
        t = time.perf_counter()
        once = _infer._prepare(
            network, None, "log", limit, "auto", "float32", value_only=True
        )
        if not once.trivial:
            once_value = once.value()
            query = {"query_s": time.perf_counter() - t, "on_host": once.on_host}
        _forget_plans()  # the compiled path below searches afresh
    t = time.perf_counter()
    if kind == "uai":
        prepared = _infer._prepare(network, None, "log", limit, "auto", "float32")
        search_s = time.perf_counter() - t
        if prepared.plan is None:  # evidence and simplification left a constant
            note = {"search_s": search_s, "note": "no contraction"}
            return note, prepared.network.offset
        plan, operands = prepared.plan, prepared.operands()
        offset = prepared.network.offset
        terms = prepared.network.terms
    else:
        terms, output, sizes, arrays = network
        args = []
        for term in terms:
            args += [tuple(sizes[i] for i in term), list(term)]
        plan = einslice.plan(*args, list(output), memory_limit=limit)
        search_s = time.perf_counter() - t
        operands = [jnp.asarray(a, dtype=jnp.float32) for a in arrays]
        offset = 0.0
    # Called as a user calls it: a plan jits itself with the compiler options
    # it needs (``_exec/_run.compile_options``); an outer jax.jit drops them.
    value, first, run = timed_runs(lambda: plan(*operands).block_until_ready())
    result = offset + float(value) if kind == "uai" else float(value)
    if query:
        once_result = once.network.offset + once_value
        assert abs(once_result - result) <= 1e-3 * max(1.0, abs(result)), once_result
    return {
        **query,
        "search_s": search_s,
        "compile_s": max(first - run, 0.0),
        "run_s": run,
        "flops": plan.flops,
        "peak": plan.peak_bytes,
        "end_to_end_s": search_s + first,
        "tables": len(terms),
    }, result


def _forget_plans() -> None:
    """Empty einslice's tree and plan caches, in memory and on disk."""
    from einslice import _api
    from einslice._plan import _cost, _equation, _order, _planner, _search

    os.environ["EINSLICE_CACHE_DIR"] = tempfile.mkdtemp(prefix="einslice-networks-")
    for module in (_api, _planner, _search, _order, _cost, _equation):
        for name in dir(module):
            clear = getattr(getattr(module, name), "cache_clear", None)
            if clear is not None:
                clear()


def linear_network(kind, network):
    """(terms, output, size_dict, arrays, offset) of a network in linear space.

    UAI tables are exponentiated (their ln Z is offset + ln of the
    contraction); None when simplification leaves nothing to contract.
    """
    if kind != "uai":
        terms, output, sizes, arrays = network
        return terms, tuple(output), dict(enumerate(sizes)), arrays, 0.0
    from einslice.pgm._network import build_network

    net = build_network(network)
    if not net.tables or net.offset == -math.inf:
        return None
    return net.terms, (), net.sizes(), [np.exp(t) for t in net.tables], net.offset


def contract_value(kind, tree, ops, backend: str) -> float:
    """The tree's value on ``ops``: ln of it (exponent stripped) for UAI."""
    if kind == "uai":
        m, e = tree.contract(ops, backend=backend, strip_exponent=True)
        return float(np.log(abs(float(m)))) + float(e) * math.log(10)
    return float(np.asarray(tree.contract(ops, backend=backend)))


def cotengra_rows(kind, network, limit: int) -> tuple[dict, dict, object]:
    import cotengra

    linear = linear_network(kind, network)
    if linear is None:
        return {"note": "no contraction"}, {"note": "no contraction"}, None
    terms, output, size_dict, arrays, offset = linear
    itemsize = 8 if kind == "uai" else 4
    target = max(1, limit // (3 * itemsize))
    optimizer = cotengra.HyperOptimizer(
        methods=["kahypar", "greedy"],
        slicing_reconf_opts={"target_size": target},
        max_repeats=64,
        max_time=10,
        parallel=False,
        progbar=False,
    )
    symbol = cotengra.get_symbol  # kahypar's hypergraph wants str labels
    inputs = [tuple(symbol(x) for x in term) for term in terms]
    size_dict = {symbol(x): d for x, d in size_dict.items()}
    t = time.perf_counter()
    tree = optimizer.search(inputs, tuple(symbol(x) for x in output), size_dict)
    search_s = time.perf_counter() - t
    common = {
        "search_s": search_s,
        "flops": 2 * float(tree.contraction_cost()),
        "peak": int(tree.peak_size()) * itemsize,
        "tables": len(terms),
    }
    rows, results = {}, {}
    for backend in ("numpy", "jax"):
        if backend == "jax":
            import jax.numpy as jnp

            dtype = jnp.float64 if kind == "uai" else jnp.float32
            ops = [jnp.asarray(a, dtype=dtype) for a in arrays]
        else:
            ops = [np.asarray(a, dtype=np.float64 if kind == "uai" else np.float32)
                   for a in arrays]  # fmt: skip

        def call(ops=ops, backend=backend):
            return contract_value(kind, tree, ops, backend)

        try:
            value, first, run = timed_runs(call)
        except Stopped:
            rows[backend] = {**common, "stopped_after_s": search_s + STOP_SECONDS}
            results[backend] = None
            continue
        rows[backend] = {
            **common,
            "compile_s": max(first - run, 0.0) if backend == "jax" else 0.0,
            "run_s": run,
            "end_to_end_s": search_s + first,
        }
        results[backend] = offset + value
    return rows["numpy"], rows["jax"], results


def reference(kind, network) -> float:
    """The value by an independent route: opt_einsum's greedy path, contracted
    by cotengra's tree in float64 numpy (exponent stripped on UAI).

    Used where cotengra's own search found no tree that finished: greedy's
    largest intermediate is 8 M entries on Grids_15 and 16 k on circuit-30q.
    """
    import cotengra
    import opt_einsum

    linear = linear_network(kind, network)
    assert linear is not None  # einslice contracted something
    terms, output, size_dict, arrays, offset = linear
    symbol = opt_einsum.get_symbol  # cotengra's einsum steps want str labels
    inputs = ["".join(map(symbol, term)) for term in terms]
    out = "".join(map(symbol, output))
    sizes = {symbol(x): d for x, d in size_dict.items()}
    shapes = [tuple(sizes[x] for x in term) for term in inputs]
    path, _ = opt_einsum.contract_path(
        ",".join(inputs) + "->" + out, *shapes, shapes=True, optimize="greedy"
    )
    tree = cotengra.ContractionTree.from_path(inputs, out, sizes, path=path)
    ops = [np.asarray(a, dtype=np.float64) for a in arrays]
    return offset + contract_value(kind, tree, ops, "numpy")


# -- report ------------------------------------------------------------------------


def fmt(x, spec="{:.3g}"):
    if x is None:
        return "—"
    return spec.format(x)


def mb(x):
    return "—" if x is None else f"{x / 1e6:.1f}"


def _e2e(row) -> str:
    if row.get("stopped_after_s"):
        return f"> {row['stopped_after_s']:.0f} (stopped)"
    return fmt(row.get("end_to_end_s"), "{:.2f}")


def report(rows, limit_text: str) -> str:

    from _common import environment_lines
    from einslice.bench import _measure

    lines = [
        "# Large networks: einslice vs cotengra (numpy, jax), same memory limit",
        "",
        f"`python benchmarks/large_networks.py --memory-limit {limit_text}`",
        "",
        *environment_lines(
            _measure.detect_device(),
            (
                f"- load average at the last row {os.getloadavg()[0]:.2f}; the "
                "cores may be shared with other jobs (ratios hold, times drift)",
            ),
        ),
        "",
        "Times in seconds. *search*: einslice's planning (its tree search, slicing,"
        " chunk sizing; for UAI also the network simplification) / cotengra's "
        "hyper-search; *compile*: first call minus a later one; *run*: median of "
        "3 later calls; *e2e*: search + first call; *log Z e2e* (UAI): "
        "`log_partition`'s own search and planning (from empty caches) and its "
        "one run: the plan walked in numpy on the host (marked h) when that is "
        "estimated to beat compiling, else compiled. FLOPs: log10, each method's "
        "own count. *peak*: predicted peak temporary MB. einslice runs float32 "
        "(UAI: the log semiring); cotengra float64 with the exponent stripped on "
        "UAI, float32 otherwise.",
        "",
        "| network | tensors | einslice search | compile | run | e2e | log10 FLOPs "
        "| peak MB | cotengra search | numpy run | numpy e2e | jax compile | jax run "
        "| jax e2e | log10 FLOPs | peak MB | einslice e2e ÷ cotengra-jax e2e "
        "| einslice log Z e2e | ÷ cotengra-jax e2e "
        "| result (einslice / cotengra; where cotengra stopped, / a numpy "
        "reference on opt_einsum's greedy path) |",
        "|" + "---|" * 20,
    ]
    for r in rows:
        e, cn, cj = r["einslice"], r["numpy"], r["jax"]
        ratio = (
            f"{e['end_to_end_s'] / cj['end_to_end_s']:.2f}"
            if e.get("end_to_end_s") and cj.get("end_to_end_s")
            else f"< {e['end_to_end_s'] / cj['stopped_after_s']:.2f}"
            if e.get("end_to_end_s") and cj.get("stopped_after_s")
            else "—"
        )
        lines.append(
            "| "
            + " | ".join(
                [
                    r["name"],
                    str(e.get("tables", cn.get("tables", "—"))),
                    fmt(e.get("search_s"), "{:.2f}"),
                    fmt(e.get("compile_s"), "{:.2f}"),
                    fmt(e.get("run_s"), "{:.4f}"),
                    fmt(e.get("end_to_end_s"), "{:.2f}"),
                    fmt(math.log10(e["flops"]) if e.get("flops") else None, "{:.2f}"),
                    mb(e.get("peak")),
                    fmt(cn.get("search_s"), "{:.2f}"),
                    fmt(cn.get("run_s"), "{:.4f}"),
                    _e2e(cn),
                    fmt(cj.get("compile_s"), "{:.2f}"),
                    fmt(cj.get("run_s"), "{:.4f}"),
                    _e2e(cj),
                    fmt(math.log10(cn["flops"]) if cn.get("flops") else None, "{:.2f}"),
                    mb(cn.get("peak")),
                    ratio,
                    fmt(e.get("query_s"), "{:.2f}")
                    + (" h" if e.get("on_host") else ""),
                    f"{e['query_s'] / cj['end_to_end_s']:.3f}"
                    if e.get("query_s") and cj.get("end_to_end_s")
                    else "—",
                    r.get("check", e.get("note", "—")),
                ]
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-limit", default="256MB")
    parser.add_argument("--only", nargs="*")
    parser.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results" / "large_networks.md")
    )
    args = parser.parse_args()
    # einslice's trees are cached on disk: an empty cache directory of this
    # run's own, so that its search is timed, not read back from an earlier run.
    os.environ["EINSLICE_CACHE_DIR"] = tempfile.mkdtemp(prefix="einslice-networks-")
    import jax

    jax.config.update("jax_enable_x64", True)  # cotengra-jax in float64 on UAI
    from einslice._plan._memory import parse_memory_limit

    limit = parse_memory_limit(args.memory_limit)
    rows = []
    for name, (kind, network) in [*uai_networks(), *generated_networks()]:
        if args.only and name not in args.only:
            continue
        print(f"{name} ...", file=sys.stderr, flush=True)
        row = {"name": name}
        try:
            row["einslice"], ours = einslice_row(kind, network, limit)
        except Exception as error:  # report, keep going
            row["einslice"], ours = {"note": repr(error)[:80]}, None
        try:
            row["numpy"], row["jax"], theirs = cotengra_rows(kind, network, limit)
        except Exception as error:
            row["numpy"] = row["jax"] = {"note": repr(error)[:80]}
            theirs = None
        finished = [v for v in (theirs or {}).values() if v is not None]
        if ours is not None and finished:
            row["check"] = f"{ours:.6g} / {finished[0]:.6g}"
        elif ours is not None and row["einslice"].get("note"):
            row["check"] = f"{ours:.6g} ({row['einslice']['note']})"
        elif ours is not None:  # cotengra stopped: check against greedy + numpy
            theirs_value = reference(kind, network)
            row["check"] = f"{ours:.6g} / {theirs_value:.6g} (greedy, numpy)"
        rows.append(row)
        print(f"  {row}", file=sys.stderr, flush=True)
        text = report(rows, args.memory_limit)
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true")
    sys.exit(main())
