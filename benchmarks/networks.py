"""Real-world-shaped networks: einslice against four peers at the same memory limit.

Networks come from the ``einsum-benchmark`` package's generators (random
regular graphs of degree 3, 2D/3D/periodic lattices, a tree, an MPS inner
product, QAOA max-cut circuits, MERA language models, random connected networks
and hypernetworks, matrix chains) and from cotengra's helpers
(``randreg_equation``, ``rand_equation``, ``lattice_equation``), each with a
fixed seed, so that every run builds the same networks (offline: generators
only, no instance downloads). Operands are uniform in [0.5, 1) scaled by their
mean and size (results stay near 1 in float32); QAOA's are its circuit's
complex gates.

Methods, each in float32 (complex64 for QAOA) in this one process:

- ``einslice``: ``einslice.plan(..., memory_limit=LIMIT)`` then the plan;
- ``jnp-greedy``: ``jax.jit(jnp.einsum(..., optimize="greedy"))`` (no limit);
- ``oe-numpy``: ``opt_einsum.contract_expression(..., optimize="auto-hq")`` on
  numpy arrays (no limit);
- ``ctg-numpy`` / ``ctg-jax``: the tree of cotengra's
  ``HyperOptimizer(methods=["kahypar", "greedy"], slicing_reconf_opts=
  {"target_size": LIMIT in entries}, reconf_opts={})``, at most 32 trials and
  ``--cotengra-seconds`` (one search shared by both backends), contracted
  with ``tree.contract`` on numpy or jax arrays.

Per network and method: *warm*: median of up to 5 calls after the first
(einslice: once its runner is steady, ``_run._TopLevelRun.steady``: a
many-step plan runs its first calls in numpy on the host, until they have cost
about its compile, then compiled for compile time, then optimized from its
``_run.OPTIMIZE_AFTER_CALLS``-th compiled call, and a plan of the
large-network search searches its tree again as its calls add up until that
stops paying (docs/search.md, "Growing with use"): its steady state, as the
peers' is; the calls before it are untimed, at most ``--max-seconds`` of them,
and the plan column says how many calls and seconds of growth search it
took); *e2e*: planning or path search + the first call (compile included
where the first call compiles; einslice and cotengra from empty tree caches);
*memory*: the method's temporary peak (einslice: its plan's prediction; jnp:
XLA's compiled temporaries; opt_einsum and cotengra: the largest intermediate,
sliced for cotengra, times the itemsize: a lower bound of theirs); *error*:
max |result - reference| / max |reference| (einslice: of its last call), the
reference a float64 (complex128) contraction by numpy on cotengra's tree
(sliced to the limit).
jnp.einsum and opt_einsum have no memory limit: they are not run where their
own prediction of their temporaries is over ``PEER_MEMORY_CAP`` (3 GB; the
machine is shared). A call running past ``--max-seconds`` is stopped (SIGALRM,
between two Python operations) and reported as ``> max``.

Summary: per network, einslice's speed against the fastest peer (the peer's
time ÷ einslice's; > 1: einslice is faster), and against the fastest peer whose
memory stayed within the limit; geometric means over the networks.

Usage:
    python benchmarks/networks.py [--quick] [--families randreg,lattice,...]
        [--memory-limit 256MB] [--max-seconds 120] [--cotengra-seconds 30]
        [--out benchmarks/results/networks.md] [--list]
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

# Peers without a memory limit (jnp.einsum, opt_einsum) are not run when
# their own prediction of their temporaries is above this: the machine is shared.
PEER_MEMORY_CAP = 3 * 10**9
START_LOAD = os.getloadavg()[0]
METHODS = ("einslice", "jnp-greedy", "oe-numpy", "ctg-numpy", "ctg-jax")
PEERS = METHODS[1:]


# -- networks --------------------------------------------------------------------


@dataclass
class Network:
    """One benchmark network: int-labelled terms, output and index sizes."""

    name: str
    family: str
    terms: list[tuple[int, ...]]
    output: tuple[int, ...]
    sizes: list[int]
    arrays: list[np.ndarray] = field(default_factory=list)
    quick: bool = False


def _from_format(name, family, format_string, shapes, quick=False, arrays=None):
    """A `Network` from an einsum format string (any symbols) and shapes.

    Repeated indices within a term (traces, hyperedge diagonals) are kept:
    every method is given the same equation.
    """
    lhs, out = format_string.replace(" ", "").split("->")
    inputs = lhs.split(",")
    labels: dict[str, int] = {}
    sizes: dict[int, int] = {}
    terms = []
    for term, shape in zip(inputs, shapes, strict=True):
        ints = []
        for symbol, size in zip(term, shape, strict=True):
            label = labels.setdefault(symbol, len(labels))
            sizes[label] = int(size)
            ints.append(label)
        terms.append(tuple(ints))
    output = tuple(labels[s] for s in out)
    network = Network(
        name, family, terms, output, [sizes[i] for i in range(len(labels))]
    )
    network.quick = quick
    if arrays is not None:
        network.arrays = [np.asarray(a) for a in arrays]
    return network


def _from_cotengra(name, family, equation, quick=False):
    inputs, output, _, size_dict = equation
    symbols = {x: chr(0x4E00 + i) for i, x in enumerate(size_dict)}
    text = ",".join("".join(symbols[x] for x in t) for t in inputs)
    text += "->" + "".join(symbols[x] for x in output)
    shapes = [tuple(size_dict[x] for x in t) for t in inputs]
    return _from_format(name, family, text, shapes, quick)


def networks() -> list[Network]:
    """The benchmark's networks, seeded (the same on every run)."""
    import importlib

    # Any: some generators are defined as raisers when an extra is missing,
    # which type checkers read as NoReturn.
    gen: Any = importlib.import_module("einsum_benchmark.generators")
    utils: Any = importlib.import_module("cotengra.utils")

    nets = []
    regular = gen.random.regular
    for n, lo, hi, seed, quick in ((50, 4, 6, 1, True), (60, 5, 8, 2, False)):
        nets.append(
            _from_format(
                f"randreg-{n}-d{lo}-{hi}",
                "randreg",
                *regular(n, 3, d_min=lo, d_max=hi, seed=seed),
                quick=quick,
            )
        )
    nets.append(
        _from_format(
            "randreg-100-d2-4",
            "randreg",
            *regular(100, 3, d_min=2, d_max=4, seed=3),
        )
    )
    lattice = gen.structured.lattice
    nets.append(
        _from_format(
            "lattice-8x8-d4", "lattice", *lattice([8, 8], d_min=4, seed=4), quick=True
        )
    )
    nets.append(
        _from_format(
            "lattice-4x4x4-d2", "lattice", *lattice([4, 4, 4], d_min=2, seed=5)
        )
    )
    nets.append(
        _from_format(
            "lattice-6x6-periodic-d4",
            "lattice",
            *lattice([6, 6], cyclic=True, d_min=4, seed=6),
        )
    )
    nets.append(
        _from_format(
            "tree-100", "tree", *gen.structured.tree(n=100, seed=7), quick=True
        )
    )
    nets.append(
        _from_format(
            "mps-100",
            "mps",
            *gen.quantum_computing.matrix_product_state(
                n=100, phys_dim_min=10, phys_dim_max=40, bond_dim=20, seed=8
            ),
        )
    )
    try:
        format_string, arrays = gen.quantum_computing.maxcut(n=20, reg=3, p=3, seed=9)
    except ImportError as error:  # quimb missing: the family is left out
        print(f"qaoa left out: {error}".splitlines()[0], file=sys.stderr)
    else:
        shapes = [np.shape(a) for a in arrays]
        nets.append(
            _from_format(
                "qaoa-maxcut-20-p3", "qaoa", format_string, shapes, arrays=arrays
            )
        )
    nets.append(
        _from_format(
            "mera-p-first-last-d3",
            "mera",
            *gen.language_model.p_first_and_last(3, 4, 40),
            quick=True,
        )
    )
    nets.append(
        _from_format(
            "mera-likelihood-d2",
            "mera",
            *gen.language_model.sliding_likelihood(2, 4, 40, 500),
        )
    )
    nets.append(
        _from_format(
            "random-connected-60",
            "random",
            *gen.random.connected_network(60, 3.0, 2, 2, 6, seed=10),
        )
    )
    nets.append(
        _from_format(
            "random-hyper-50",
            "random",
            *gen.random.connected_hypernetwork(
                50,
                3.0,
                max_tensor_order=6,
                max_edge_order=3,
                number_of_output_indices=2,
                number_of_self_edges=2,
                global_dim=True,
                min_axis_size=2,
                max_axis_size=4,
                seed=11,
            ),
            quick=True,
        )
    )
    nets.append(
        _from_format(
            "matrix-chain-40",
            "matrix_chain",
            *gen.structured.matrix_chain(40, 10, 600, is_shuffle=True, seed=12),
        )
    )
    nets.append(
        _from_cotengra(
            "ctg-randreg-80-d3",
            "cotengra",
            utils.randreg_equation(80, 3, d_min=3, d_max=3, seed=13),
        )
    )
    nets.append(
        _from_cotengra(
            "ctg-rand-hyper-40",
            "cotengra",
            utils.rand_equation(
                40, 3, n_out=2, n_hyper_in=2, n_hyper_out=1, d_min=2, d_max=4, seed=14
            ),
        )
    )
    nets.append(
        _from_cotengra(
            "ctg-lattice-10x10-d3",
            "cotengra",
            utils.lattice_equation([10, 10], d_min=3, seed=15),
        )
    )
    return nets


def fresh_networks(seed: int) -> list[Network]:
    """Networks the planner was not tuned on: cotengra's helpers, new seeds.

    A win counts only where it was not tuned for: ``--fresh SEED`` runs these
    instead of `networks` (random regular graphs, 2D, 3D and periodic
    lattices, random networks and hypernetworks, at sizes like the suite's).
    """
    import importlib

    utils: Any = importlib.import_module("cotengra.utils")
    s = 1000 + 100 * seed
    specs = [
        ("randreg-50-d3-5", utils.randreg_equation(50, 3, d_min=3, d_max=5, seed=s)),
        (
            "randreg-90-d2-3",
            utils.randreg_equation(90, 3, d_min=2, d_max=3, seed=s + 1),
        ),
        ("randreg-70-d3", utils.randreg_equation(70, 3, d_min=3, d_max=3, seed=s + 2)),
        ("lattice-9x9-d3", utils.lattice_equation([9, 9], d_min=3, seed=s + 3)),
        ("lattice-5x5x3-d2", utils.lattice_equation([5, 5, 3], d_min=2, seed=s + 4)),
        (
            "lattice-5x5-periodic-d4",
            utils.lattice_equation([5, 5], d_min=4, cyclic=True, seed=s + 5),
        ),
        ("rand-60", utils.rand_equation(60, 3, n_out=0, d_min=2, d_max=4, seed=s + 6)),
        (
            "rand-hyper-50",
            utils.rand_equation(
                50,
                3,
                n_out=1,
                n_hyper_in=2,
                n_hyper_out=1,
                d_min=2,
                d_max=3,
                seed=s + 7,
            ),
        ),
    ]
    return [
        _from_cotengra(f"fresh{seed}-{name}", "fresh", equation)
        for name, equation in specs
    ]


def with_arrays(network: Network, seed: int = 0) -> Network:
    """Give ``network`` seeded operands (unless it has its own, QAOA's)."""
    if network.arrays:
        return network
    rng = np.random.default_rng(seed)
    arrays = []
    for term in network.terms:
        a = rng.uniform(0.5, 1.0, [network.sizes[i] for i in term])
        arrays.append(a / a.mean() / np.sqrt(max(a.size, 1)))
    network.arrays = arrays
    return network


def subscripts(network: Network) -> str:
    """The network as an einsum string (opt_einsum's symbols, any count)."""
    from opt_einsum import get_symbol

    terms = ",".join("".join(get_symbol(i) for i in t) for t in network.terms)
    return terms + "->" + "".join(get_symbol(i) for i in network.output)


def interleaved(network: Network, operands) -> list:
    args: list = []
    for term, operand in zip(network.terms, operands, strict=True):
        args += [operand, list(term)]
    return [*args, list(network.output)]


# -- measuring ---------------------------------------------------------------------


class Stopped(Exception):
    """A call ran past ``--max-seconds``."""


def _stop(signum, frame):
    raise Stopped


def timed(
    call: Callable[[], object],
    max_seconds: float,
    repeats: int = 5,
    settled: Callable[[], bool] = lambda: True,
):
    """(first value, first call's seconds, median of up to ``repeats`` later calls).

    Untimed calls come between the first and the timed ones until
    ``settled()`` says the next call runs the steady-state program.
    Later calls stop once they have used ``max_seconds``; a call still running
    after ``max_seconds`` raises `Stopped`.
    """
    signal.signal(signal.SIGALRM, _stop)
    signal.setitimer(signal.ITIMER_REAL, max_seconds)
    try:
        start = time.perf_counter()
        value = call()
        first = time.perf_counter() - start
        signal.setitimer(signal.ITIMER_REAL, 0)
        start = time.perf_counter()
        while not settled():
            if time.perf_counter() - start + first > max_seconds:
                break
            call()
        runs = []
        for _ in range(repeats):
            if sum(runs) + first > max_seconds:
                break
            signal.setitimer(signal.ITIMER_REAL, max_seconds)
            start = time.perf_counter()
            call()
            runs.append(time.perf_counter() - start)
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return value, first, statistics.median(runs) if runs else first


def _forget_trees() -> None:
    """Empty einslice's plan and tree caches, in memory and on disk."""
    from einslice import _api
    from einslice._plan import _cost, _equation, _order, _planner, _search

    os.environ["EINSLICE_CACHE_DIR"] = tempfile.mkdtemp(prefix="einslice-networks-")
    for module in (_api, _planner, _search, _order, _cost, _equation):
        for name in dir(module):
            clear = getattr(getattr(module, name), "cache_clear", None)
            if clear is not None:
                clear()


def _dtypes(network: Network):
    complex_ = any(np.iscomplexobj(a) for a in network.arrays)
    return (np.complex64, np.complex128) if complex_ else (np.float32, np.float64)


def run_einslice(network: Network, limit: int, max_seconds: float) -> dict:
    import jax.numpy as jnp

    import einslice

    low, _ = _dtypes(network)
    ops = [jnp.asarray(a, dtype=low) for a in network.arrays]
    from einslice._plan import _planner

    _forget_trees()
    searched = []  # the tree search's answer, when the planner ran it

    def recording(*args, **kwargs):
        searched.append(search_tree(*args, **kwargs))
        return searched[-1]

    search_tree, _planner.search_tree = _planner.search_tree, recording
    try:
        start = time.perf_counter()
        plan = einslice.plan(*interleaved(network, ops), memory_limit=limit)
        planning = time.perf_counter() - start
    finally:
        _planner.search_tree = search_tree
    # a many-step plan runs its first calls on the host, then compiled for
    # compile time, then optimized: warm is its steady state, the last
    from einslice._exec._run import _top_level_run

    runner = _top_level_run(plan)
    value, first, warm = timed(
        lambda: plan(*ops).block_until_ready(),
        max_seconds,
        settled=lambda: runner.steady,
    )
    note = (
        f"{len(plan.steps)} steps, {len(plan.chunks)} sliced, "
        f"10^{math.log10(max(plan.flops, 1)):.1f} FLOPs"
    )
    for found in searched[:1]:  # (the first search; growth searches below)
        note += (
            f"; tree by {found.by} ({found.trials} trials, est. "
            f"{found.time * 1e3:.3g} ms; reference {found.reference_trials} "
            f"trials, est. {found.reference_time * 1e3:.3g} ms)"
        )
    growths = runner.growths
    if growths:  # the error column: the plan the runner holds now
        value = plan(*ops).block_until_ready()
        held = runner.plan
        note += (
            f"; {'steady' if runner.steady else 'not steady'} after "
            f"{runner.top_calls} calls, {len(growths)} growth searches of "
            f"{sum(g.seconds for g in growths):.1f} s "
            f"({sum(g.switched for g in growths)} switched): est. "
            f"{held.cost.time * 1e3:.3g} ms, 10^{math.log10(max(held.flops, 1)):.1f} "
            "FLOPs"
        )
    return {
        "value": np.asarray(value),
        "warm": warm,
        "e2e": planning + first,
        "memory": plan.peak_bytes,
        "note": note,
    }


def run_jnp_greedy(network: Network, limit: int, max_seconds: float) -> dict:
    import jax
    import jax.numpy as jnp

    low, _ = _dtypes(network)
    ops = [jnp.asarray(a, dtype=low) for a in network.arrays]
    text = subscripts(network)
    start = time.perf_counter()
    compiled = (
        jax.jit(lambda *xs: jnp.einsum(text, *xs, optimize="greedy"))
        .lower(*ops)
        .compile()
    )
    setup = time.perf_counter() - start
    analysis = compiled.memory_analysis()
    memory = getattr(analysis, "temp_size_in_bytes", None)
    if memory is not None and memory > PEER_MEMORY_CAP:
        return {"memory": memory, "note": f"not run: needs {memory / 1e9:.1f} GB"}
    value, first, warm = timed(lambda: compiled(*ops).block_until_ready(), max_seconds)
    return {
        "value": np.asarray(value),
        "warm": warm,
        "e2e": setup + first,
        "memory": memory,
    }


def run_oe_numpy(network: Network, limit: int, max_seconds: float) -> dict:
    import opt_einsum

    low, _ = _dtypes(network)
    ops = [np.asarray(a, dtype=low) for a in network.arrays]
    text = subscripts(network)
    start = time.perf_counter()
    shapes = [a.shape for a in ops]
    _, info = opt_einsum.contract_path(text, *shapes, shapes=True, optimize="auto-hq")
    expression = opt_einsum.contract_expression(text, *shapes, optimize=info.path)
    setup = time.perf_counter() - start
    memory = int(info.largest_intermediate) * ops[0].itemsize
    if memory > PEER_MEMORY_CAP:
        return {"memory": memory, "note": f"not run: needs {memory / 1e9:.1f} GB"}
    value, first, warm = timed(lambda: expression(*ops), max_seconds)
    return {
        "value": np.asarray(value),
        "warm": warm,
        "e2e": setup + first,
        "memory": memory,
    }


def cotengra_tree(network: Network, limit: int, itemsize: int, seconds: float):
    """cotengra's tree at the limit, and its search's seconds."""
    import cotengra

    optimizer = cotengra.HyperOptimizer(
        methods=["kahypar", "greedy"],
        slicing_reconf_opts={"target_size": max(2, limit // itemsize)},  # pyright: ignore[reportArgumentType]
        reconf_opts={},  # pyright: ignore[reportArgumentType]
        max_repeats=32,
        max_time=seconds,
        parallel=False,  # pyright: ignore[reportArgumentType]
        progbar=False,
    )
    text = subscripts(network)
    lhs, out = text.split("->")
    inputs = [tuple(t) for t in lhs.split(",")]
    size_dict = {}
    for term in network.terms:
        for i in term:
            size_dict[subscripts_symbol(i)] = network.sizes[i]
    start = time.perf_counter()
    tree = optimizer.search(inputs, tuple(out), size_dict)
    return tree, time.perf_counter() - start


def subscripts_symbol(i: int) -> str:
    from opt_einsum import get_symbol

    return get_symbol(i)


def run_cotengra(network, tree, search_seconds, backend, max_seconds) -> dict:
    low, _ = _dtypes(network)
    if backend == "jax":
        import jax.numpy as jnp

        ops = [jnp.asarray(a, dtype=low) for a in network.arrays]
    else:
        ops = [np.asarray(a, dtype=low) for a in network.arrays]

    def call():
        result = tree.contract(ops, backend=backend)
        return result.block_until_ready() if backend == "jax" else result

    value, first, warm = timed(call, max_seconds)
    return {
        "value": np.asarray(value),
        "warm": warm,
        "e2e": search_seconds + first,
        "memory": int(tree.max_size()) * np.dtype(low).itemsize,
        # cotengra counts a multiply-add as one FLOP, einslice as two
        "note": f"{tree.nslices} slices, "
        f"10^{math.log10(max(2 * tree.contraction_cost(), 1)):.1f} FLOPs",
    }


def reference(network: Network, tree) -> np.ndarray:
    """The float64 (complex128) result: numpy on cotengra's tree (sliced to the
    limit, so its memory stays bounded), else on opt_einsum's greedy path."""
    import opt_einsum

    _, high = _dtypes(network)
    ops = [np.asarray(a, dtype=high) for a in network.arrays]
    if tree is not None:
        return np.asarray(tree.contract(ops, backend="numpy"))
    return np.asarray(opt_einsum.contract(subscripts(network), *ops, optimize="greedy"))


def error(value: np.ndarray, exact: np.ndarray) -> float:
    scale = float(np.max(np.abs(exact))) or 1.0
    return float(np.max(np.abs(value.astype(exact.dtype) - exact))) / scale


def measure(network: Network, limit: int, args) -> dict:
    """Every method on one network: a row of results (a note where one failed)."""
    network = with_arrays(network)
    low, _ = _dtypes(network)
    itemsize = np.dtype(low).itemsize
    row: dict = {}
    tree, seconds = None, 0.0
    try:
        tree, seconds = cotengra_tree(network, limit, itemsize, args.cotengra_seconds)
    except Exception as failure:  # reported in the table
        for backend in ("numpy", "jax"):
            row[f"ctg-{backend}"] = {"note": _brief(failure)}
    try:
        exact, _, _ = timed(lambda: reference(network, tree), args.max_seconds, 0)
        exact = np.asarray(exact)
    except Stopped:
        exact = None
    runs = {
        "einslice": lambda: run_einslice(network, limit, args.max_seconds),
        "jnp-greedy": lambda: run_jnp_greedy(network, limit, args.max_seconds),
        "oe-numpy": lambda: run_oe_numpy(network, limit, args.max_seconds),
    }
    for method, run in runs.items():
        row[method] = _attempt(run, args.max_seconds)
    if tree is not None:
        for backend in ("numpy", "jax"):
            row[f"ctg-{backend}"] = _attempt(
                lambda backend=backend: run_cotengra(
                    network, tree, seconds, backend, args.max_seconds
                ),
                args.max_seconds,
            )
    for result in row.values():
        if "value" in result:
            value = result.pop("value")
            result["error"] = None if exact is None else error(value, exact)
    return row


def _brief(failure: BaseException) -> str:
    return f"{type(failure).__name__}: {failure}".splitlines()[0][:70]


def _attempt(run, max_seconds: float) -> dict:
    try:
        return run()
    except Stopped:
        return {"stopped": max_seconds}
    except Exception as failure:  # reported in the table
        return {"note": _brief(failure)}


# -- report ------------------------------------------------------------------------


def speedups(
    rows, limit: int, key: str
) -> list[tuple[str, float | None, float | None]]:
    """Per network: best peer's time ÷ einslice's (all peers; those in the limit)."""
    out = []
    for name, row in rows:
        mine = row["einslice"].get(key)
        peers = [row[m] for m in PEERS if row[m].get(key)]
        within = [r for r in peers if (r.get("memory") or 0) <= limit]
        best = min((r[key] for r in peers), default=None)
        best_within = min((r[key] for r in within), default=None)
        out.append(
            (
                name,
                best / mine if mine and best else None,
                best_within / mine if mine and best_within else None,
            )
        )
    return out


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def cell(result: dict, key: str) -> str:
    if "stopped" in result:
        return f"> {result['stopped']:.0f}"
    if key not in result or result[key] is None:
        return "—" if "note" not in result else "err"
    value = result[key]
    if key == "memory":
        return f"{value / 1e6:.1f}"
    if key == "error":
        return f"{value:.0e}"
    return f"{value:.3g}"


def report(rows, networks_by_name, limit_text: str, limit: int, command: str) -> str:
    import jax

    from _common import environment_lines

    lines = [
        f"# Networks: einslice vs jnp.einsum, opt_einsum and cotengra at {limit_text}",
        "",
        f"`{command}`",
        "",
        *environment_lines(
            jax.devices()[0],
            (
                f"- load average when the first network began {START_LOAD:.2f}, "
                f"at the last row {os.getloadavg()[0]:.2f}: the machine "
                "was shared with other jobs (a CI run, other sessions), so times "
                "drift; ratios within a row were measured minutes apart",
            ),
        ),
        "",
        "Times in seconds (warm: median after the first call; e2e: planning or "
        "search + first call, compile included); memory: each method's "
        "temporary peak in MB (see the script's docstring); error: max abs error "
        "÷ max |result| against a float64 contraction. *speed*: the fastest "
        "peer's time ÷ einslice's (> 1: einslice faster); *in limit*: among peers "
        "whose memory stayed within the limit.",
        "",
    ]
    head = ["network", "family", "tensors"]
    for m in METHODS:
        head += [f"{m} warm", f"{m} e2e", f"{m} MB", f"{m} err"]
    head += ["speed warm", "in limit", "speed e2e", "in limit"]
    head += ["einslice plan", "cotengra tree"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    warm = dict((n, (a, b)) for n, a, b in speedups(rows, limit, "warm"))
    e2e = dict((n, (a, b)) for n, a, b in speedups(rows, limit, "e2e"))
    for name, row in rows:
        net = networks_by_name[name]
        cells = [name, net.family, str(len(net.terms))]
        for m in METHODS:
            cells += [cell(row[m], k) for k in ("warm", "e2e", "memory", "error")]
        for a, b in (warm[name], e2e[name]):
            cells += [f"{a:.2f}" if a else "—", f"{b:.2f}" if b else "—"]
        cells.append(row["einslice"].get("note", ""))
        cells.append(row["ctg-numpy"].get("note", ""))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for label, table in (("warm", warm), ("end to end", e2e)):
        everyone = geomean(a for a, _ in table.values())
        within = geomean(b for _, b in table.values())
        lines.append(
            f"- geometric mean speed, {label}: "
            + (f"{everyone:.2f}x" if everyone else "—")
            + " against the fastest peer, "
            + (f"{within:.2f}x" if within else "—")
            + " against the fastest peer within the limit "
            + f"({len(table)} networks)"
        )
    notes = [
        f"- {name} {m}: {row[m]['note']}"
        for name, row in rows
        for m in PEERS
        if row[m].get("note") and "warm" not in row[m]
    ]
    if notes:
        lines += ["", "Failures:", "", *notes]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--memory-limit", default="256MB")
    parser.add_argument("--quick", action="store_true", help="a small subset")
    parser.add_argument("--families", help="comma-separated families to run")
    parser.add_argument("--only", nargs="*", help="network names to run")
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--cotengra-seconds", type=float, default=30.0)
    parser.add_argument("--list", action="store_true", help="list the networks")
    parser.add_argument(
        "--fresh",
        type=int,
        metavar="SEED",
        help="run networks the planner was not tuned on (fresh_networks)",
    )
    parser.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results" / "networks.md")
    )
    args = parser.parse_args()
    from einslice._plan._memory import parse_memory_limit

    limit = parse_memory_limit(args.memory_limit)
    chosen = networks() if args.fresh is None else fresh_networks(args.fresh)
    if args.quick:
        chosen = [n for n in chosen if n.quick]
    if args.families:
        wanted = set(args.families.split(","))
        chosen = [n for n in chosen if n.family in wanted]
    if args.only:
        chosen = [n for n in chosen if n.name in args.only]
    if args.list:
        for n in chosen:
            print(f"{n.name:28} {n.family:13} {len(n.terms):4} tensors")
        return 0
    by_name = {n.name: n for n in chosen}
    rows, text = [], ""
    command = "python benchmarks/networks.py " + " ".join(sys.argv[1:])
    for network in chosen:
        print(f"{network.name} ...", file=sys.stderr, flush=True)
        rows.append((network.name, measure(network, limit, args)))
        print(f"  {rows[-1][1]}", file=sys.stderr, flush=True)
        text = report(rows, by_name, args.memory_limit, limit, command.strip())
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
