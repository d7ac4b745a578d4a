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

- ``einslice``: ``einslice.plan(..., memory_limit=LIMIT)`` then the plan,
  from empty tree caches; ``einslice-off``: the same with growth off
  (``EINSLICE_GROW=0``), reported beside it, not a peer;
- ``jnp-greedy``: ``jax.jit(jnp.einsum(..., optimize="greedy"))`` (no limit),
  compiled ahead of time;
- ``oe-numpy``: ``opt_einsum.contract_expression(..., optimize="auto-hq")`` on
  numpy arrays (no limit);
- ``ctg-numpy`` / ``ctg-jax``: the tree of cotengra's
  ``HyperOptimizer(methods=["kahypar", "greedy"], slicing_reconf_opts=
  {"target_size": LIMIT in entries}, reconf_opts={})``, at most 32 trials and
  ``--cotengra-seconds`` (one search, counted once for each backend),
  contracted with ``tree.contract`` on numpy or jax arrays.

What a user pays for N calls (issue 36): each method's setup (planning, path
search, an ahead-of-time compile) plus its first N calls, each timed to its
result (compiles included where a call compiles), for N = 1, 10, 100 and
10,000 (`HORIZONS`). The first 100 calls are always made (unless they would
take more than 8x the method's budget: then marked); later calls stop at
10,000 or once the calls have used ``--max-seconds`` (einslice) or
``--peer-seconds`` (the others and ``einslice-off``), and a total past the
calls made is the measured calls plus the rest at the median of the last of
them (`Calls.total`, marked ``~`` in the tables). *worst*: the slowest call
after the first. *memory*: the method's temporary peak (einslice: its
plan's prediction; jnp: XLA's compiled temporaries; opt_einsum and
cotengra: the largest intermediate, sliced for cotengra, times the
itemsize: a lower bound of theirs); *error*: max |result - reference| /
max |reference| of the last call, the reference a float64 (complex128)
contraction by numpy on cotengra's tree (sliced to the limit).
jnp.einsum and opt_einsum have no memory limit: they are not run where their
own prediction of their temporaries is over ``PEER_MEMORY_CAP`` (3 GB; the
machine is shared). A call running past ``--call-limit`` (300 s) is stopped
(SIGALRM, between two Python operations) and reported as ``> max``.

Summary: per network and N, the best peer's total ÷ einslice's (> 1:
einslice is faster); geometric means over the networks, the lowest and
those below 0.8x; and warm (the median of the last calls) against the
fastest peer's.

Usage:
    python benchmarks/networks.py [--quick] [--families randreg,lattice,...]
        [--memory-limit 256MB] [--max-seconds 120] [--peer-seconds 10]
        [--call-limit 300]
        [--cotengra-seconds 30] [--fresh SEED] [--only NAME ...]
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

# Peers without a memory limit (jnp.einsum, opt_einsum) are not run when
# their own prediction of their temporaries is above this: the machine is shared.
PEER_MEMORY_CAP = 3 * 10**9
START_LOAD = os.getloadavg()[0]
METHODS = (
    "einslice",
    "einslice-off",
    "jnp-greedy",
    "oe-numpy",
    "ctg-numpy",
    "ctg-jax",
)
PEERS = METHODS[2:]


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
    lattices, random networks and hypernetworks, at sizes like the suite's,
    and einsum-benchmark's 12-matrix chain).
    """
    import importlib

    utils: Any = importlib.import_module("cotengra.utils")
    gen: Any = importlib.import_module("einsum_benchmark.generators")
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
    chain = gen.structured.matrix_chain(12, 10, 600, is_shuffle=True, seed=s + 8)
    return [
        *(
            _from_cotengra(f"fresh{seed}-{name}", "fresh", equation)
            for name, equation in specs
        ),
        # issue 36's held-out 12-matrix chain: few steps, compile-bound
        _from_format(f"fresh{seed}-matrix-chain-12", "fresh", *chain),
    ]


def save_networks(chosen: list[Network], path: str) -> None:
    """Write ``chosen`` to ``path`` (a pickle of plain fields; `load_networks`)."""
    import pickle

    fields = [asdict(n) for n in chosen]
    Path(path).write_bytes(pickle.dumps(fields))


def load_networks(path: str) -> list[Network]:
    """The networks `save_networks` wrote (a file of this benchmark's own)."""
    import pickle

    return [Network(**fields) for fields in pickle.loads(Path(path).read_bytes())]


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
    """A call ran past ``--call-limit``."""


def _stop(signum, frame):
    raise Stopped


HORIZONS = (1, 10, 100, 10_000)


@dataclass
class Calls:
    """A method's calls, each timed to its result: what N calls cost.

    Attributes:
        setup: seconds before the first call (planning, path search, an
            ahead-of-time compile), counted once.
        times: each call's seconds, in order (the first includes what the
            first call compiles).
        value: the last call's result.
    """

    setup: float
    times: list[float]
    value: object = None

    def total(self, n: int) -> tuple[float, bool]:
        """(setup + the first ``n`` calls, whether measured): extrapolated
        past the calls made at the median of the last of them (`tail`)."""
        made = len(self.times)
        if n <= made:
            return self.setup + math.fsum(self.times[:n]), True
        return self.setup + math.fsum(self.times) + (n - made) * self.tail(), False

    def tail(self) -> float:
        """The median of the last calls (half of them, at most 50; the
        first call is left out when there are others)."""
        later = self.times[1:] or self.times
        return statistics.median(later[-max(1, min(50, len(later) // 2)) :])

    def worst(self) -> float | None:
        """The slowest call after the first (None: one call only)."""
        return max(self.times[1:]) if len(self.times) > 1 else None


def timed_calls(
    call: Callable[[], object],
    setup: float,
    max_seconds: float,
    budget: float | None = None,
    calls: int = HORIZONS[-1],
    measured: int = 100,
) -> Calls:
    """``call`` made up to ``calls`` times, each timed to its result.

    The first ``measured`` calls are made (the horizons up to 100 are
    measured, not extrapolated) unless they would take more than 8x
    ``budget`` (default ``max_seconds``); later calls stop once all calls
    have used ``budget``. A call running past ``max_seconds`` is stopped
    (`Stopped`, raised when it is the first).
    """
    budget = max_seconds if budget is None else budget
    signal.signal(signal.SIGALRM, _stop)
    times: list[float] = []
    value = None
    try:
        while len(times) < calls:
            spent = math.fsum(times)
            if len(times) >= measured and spent > budget:
                break
            left = measured - len(times)
            if len(times) > 1 and math.fsum(times[1:]) + left * times[-1] > 8 * budget:
                break  # (100 calls would take hours: report what was measured)
            signal.setitimer(signal.ITIMER_REAL, max_seconds)
            start = time.perf_counter()
            value = call()
            times.append(time.perf_counter() - start)
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Stopped:
        if not times:
            raise
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return Calls(setup, times, value)


def timed(
    call: Callable[[], object],
    max_seconds: float,
    repeats: int = 5,
):
    """(first value, first call's seconds, median of up to ``repeats`` later calls).

    A call still running after ``max_seconds`` raises `Stopped`.
    """
    made = timed_calls(call, 0.0, max_seconds, 1 + repeats, 1 + repeats)
    first = made.times[0]
    return made.value, first, statistics.median(made.times[1:] or [first])


def _forget_trees() -> None:
    """Empty einslice's plan and tree caches, in memory and on disk, and JAX's.

    JAX's too (``jax.clear_caches``): else the second einslice run of a
    network (growth off, after growth on) found the first one's programs
    compiled, and its early calls came out faster than a fresh process's.
    """
    import jax

    from einslice import _api
    from einslice._exec import _run
    from einslice._plan import _cost, _equation, _order, _planner, _search

    os.environ["EINSLICE_CACHE_DIR"] = tempfile.mkdtemp(prefix="einslice-networks-")
    jax.clear_caches()
    for module in (_api, _planner, _search, _order, _cost, _equation, _run):
        for name in dir(module):
            clear = getattr(getattr(module, name), "cache_clear", None)
            if clear is not None:
                clear()


def _dtypes(network: Network):
    complex_ = any(np.iscomplexobj(a) for a in network.arrays)
    return (np.complex64, np.complex128) if complex_ else (np.float32, np.float64)


def run_einslice(
    network: Network,
    limit: int,
    max_seconds: float,
    budget: float | None = None,
    grow: bool = True,
) -> dict:
    """einslice from empty caches: planning, then every call timed.

    ``budget``: the calls' seconds (`timed_calls`); ``grow``: growth on (the
    default) or off (``EINSLICE_GROW=0``).
    """
    import jax.numpy as jnp

    import einslice
    from einslice._exec._run import _top_level_run
    from einslice._plan import _planner

    low, _ = _dtypes(network)
    ops = [jnp.asarray(a, dtype=low) for a in network.arrays]
    _forget_trees()
    searched = []  # the tree search's answer, when the planner ran it

    def recording(*args, **kwargs):
        start = time.perf_counter()
        searched.append((search_tree(*args, **kwargs), time.perf_counter() - start))
        return searched[-1][0]

    before = os.environ.get("EINSLICE_GROW")
    os.environ["EINSLICE_GROW"] = "1" if grow else "0"
    search_tree, _planner.search_tree = _planner.search_tree, recording
    try:
        start = time.perf_counter()
        plan = einslice.plan(*interleaved(network, ops), memory_limit=limit)
        planning = time.perf_counter() - start
        _planner.search_tree = search_tree
        runner = _top_level_run(plan)  # (reads EINSLICE_GROW)
        calls = timed_calls(
            lambda: plan(*ops).block_until_ready(), planning, max_seconds, budget
        )
    finally:
        _planner.search_tree = search_tree
        if before is None:
            os.environ.pop("EINSLICE_GROW", None)
        else:
            os.environ["EINSLICE_GROW"] = before
        _drain_background(max_seconds)
    note = (
        f"{len(plan.steps)} steps, {len(plan.chunks)} sliced, "
        f"10^{math.log10(max(plan.flops, 1)):.1f} FLOPs; planning {planning:.2f} s"
    )
    for found, seconds in searched[:1]:  # (the first search; growth below)
        note += (
            f" (search {seconds:.2f} s: tree by {found.by}, {found.trials} trials, "
            f"est. {found.time * 1e3:.3g} ms; reference {found.reference_trials} "
            f"trials)"
        )
    hosted = getattr(runner, "host_calls", None)
    note += f"; {len(calls.times)} calls" + (
        f", {hosted} on the host" if hosted is not None else ""
    )
    if not runner.steady:  # (its later calls may run faster than its last)
        note += ", not steady"
    keep = getattr(runner.stage, "keep", None)  # (the walk kept: ``_keep``)
    if keep is not None and keep.verdict == "walk" and keep.walks:
        note += (
            f", walks kept ({min(keep.walks) * 1e3:.3g} ms, the program "
            f"{keep.program * 1e3:.3g} ms)"
        )
    growths = getattr(runner, "growths", [])
    if growths:
        held = einslice.running_plan(plan)
        note += (
            f", {len(growths)} growth searches of "
            f"{sum(g.seconds for g in growths):.1f} s "
            f"({sum(g.switched for g in growths)} switched): est. "
            f"{held.cost.time * 1e3:.3g} ms, 10^{math.log10(max(held.flops, 1)):.1f} "
            "FLOPs"
        )
    return {"calls": calls, "memory": plan.peak_bytes, "note": note}


def _drain_background(seconds: float) -> None:
    """Wait (untimed) for einslice's background work, if it has any: growth
    that runs beside the calls would otherwise take the next method's cores."""
    try:
        from einslice._exec import _background  # pyright: ignore
    except ImportError:  # (growth on the call path: nothing to wait for)
        return
    _background.drain(seconds)


def run_jnp_greedy(
    network: Network, limit: int, max_seconds: float, budget: float | None = None
) -> dict:
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
    calls = timed_calls(
        lambda: compiled(*ops).block_until_ready(), setup, max_seconds, budget
    )
    return {"calls": calls, "memory": memory}


def run_oe_numpy(
    network: Network, limit: int, max_seconds: float, budget: float | None = None
) -> dict:
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
    calls = timed_calls(lambda: expression(*ops), setup, max_seconds, budget)
    return {"calls": calls, "memory": memory}


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


def run_cotengra(
    network, tree, search_seconds, backend, max_seconds, budget=None
) -> dict:
    low, _ = _dtypes(network)
    if backend == "jax":
        import jax.numpy as jnp

        ops = [jnp.asarray(a, dtype=low) for a in network.arrays]
    else:
        ops = [np.asarray(a, dtype=low) for a in network.arrays]

    def call():
        result = tree.contract(ops, backend=backend)
        return result.block_until_ready() if backend == "jax" else result

    calls = timed_calls(call, search_seconds, max_seconds, budget)
    return {
        "calls": calls,
        "memory": int(tree.max_size()) * np.dtype(low).itemsize,
        # cotengra counts a multiply-add as one FLOP, einslice as two
        "note": f"{tree.nslices} slices, "
        f"10^{math.log10(max(2 * tree.contraction_cost(), 1)):.1f} FLOPs",
    }


def reference(network: Network, tree, limit: int) -> np.ndarray:
    """The float64 (complex128) result: numpy on cotengra's tree (sliced to the
    limit, so its memory stays bounded), or on opt_einsum's greedy path where
    that fits the limit and costs fewer FLOPs. (A 5 s cotengra search once
    gave qaoa-maxcut-20-p3 a tree whose reference ran past 10 minutes.)"""
    import opt_einsum

    _, high = _dtypes(network)
    ops = [np.asarray(a, dtype=high) for a in network.arrays]
    text = subscripts(network)
    path, info = opt_einsum.contract_path(text, *ops, optimize="greedy")
    fits = int(info.largest_intermediate) * np.dtype(high).itemsize <= limit
    if tree is not None and not (fits and info.opt_cost < tree.contraction_cost()):
        return np.asarray(tree.contract(ops, backend="numpy"))
    return np.asarray(opt_einsum.contract(text, *ops, optimize=path))


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
        exact, _, _ = timed(lambda: reference(network, tree, limit), args.call_limit, 0)
        exact = np.asarray(exact)
    except Stopped:
        exact = None
    stop, most, peer = args.call_limit, args.max_seconds, args.peer_seconds
    runs = {
        "einslice": lambda: run_einslice(network, limit, stop, most),
        "einslice-off": lambda: run_einslice(network, limit, stop, peer, False),
        "jnp-greedy": lambda: run_jnp_greedy(network, limit, stop, peer),
        "oe-numpy": lambda: run_oe_numpy(network, limit, stop, peer),
    }
    for method, run in runs.items():
        row[method] = _attempt(run, stop)
    if tree is not None:
        for backend in ("numpy", "jax"):
            row[f"ctg-{backend}"] = _attempt(
                lambda backend=backend: run_cotengra(
                    network, tree, seconds, backend, stop, peer
                ),
                stop,
            )
    for result in row.values():
        calls = result.get("calls")
        if calls is not None:
            value = np.asarray(calls.value)
            calls.value = None
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


def totals(row: dict, n: int) -> dict[str, tuple[float, bool]]:
    """Each method's (total for ``n`` calls, measured) where it ran."""
    return {m: r["calls"].total(n) for m, r in row.items() if "calls" in r}


def versus(row: dict, n: int, limit: int | None = None):
    """(einslice's total ÷ ... the best peer's: ratio, best peer, its total).

    ratio > 1: einslice is faster. ``limit``: peers whose memory stayed
    within it only. None where einslice or every peer failed.
    """
    all_ = totals(row, n)
    mine = all_.get("einslice")
    peers = {
        m: t
        for m, t in all_.items()
        if m in PEERS and (limit is None or (row[m].get("memory") or 0) <= limit)
    }
    if mine is None or not peers:
        return None
    best = min(peers, key=lambda m: peers[m][0])
    return peers[best][0] / mine[0], best, peers[best][0]


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _seconds(total: tuple[float, bool]) -> str:
    value, measured = total
    return ("" if measured else "~") + f"{value:.3g}"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.3g}"


def method_cell(result: dict, key: str) -> str:
    if "stopped" in result:
        return f"> {result['stopped']:.0f} s"
    if key == "memory":
        value = result.get("memory")
        return "—" if value is None else f"{value / 1e6:.1f}"
    if key == "error":
        value = result.get("error")
        return "—" if value is None else f"{value:.0e}"
    calls = result.get("calls")
    if calls is None:
        return "err" if "note" in result else "—"
    if key == "setup":
        return f"{calls.setup:.3g}"
    if key == "calls":
        return str(len(calls.times))
    if key == "warm":
        return _ms(calls.tail())
    if key == "worst":
        return _ms(calls.worst())
    return _seconds(calls.total(int(key)))


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
                f"at the last row {os.getloadavg()[0]:.2f}",
            ),
        ),
        "",
        "What a user pays for N calls: planning or path search (and an "
        "ahead-of-time compile: jnp) + N calls, each timed to its result, "
        "compiles included where a call compiles. *ratio*: the best peer's "
        "total ÷ einslice's (> 1: einslice is faster), the best peer named. "
        "Totals up to 100 calls are measured; past the calls made (the "
        "*calls* column of the second table: up to 10,000, until the "
        "method's calls have used `--max-seconds` for einslice, "
        "`--peer-seconds` for the others), a total is the measured calls "
        "plus the rest at the median of the last of them, marked `~`. "
        "*worst*: the slowest call after the first, in ms (einslice with "
        "growth on, and off: `EINSLICE_GROW=0`).",
        "",
    ]
    head = ["network", "tensors"]
    for n in HORIZONS:
        head += [f"N={n:,} einslice s", "best peer s", "ratio"]
    head += ["worst ms: einslice", "growth off", "best peer (10^4)"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios: dict[int, list[tuple[str, float]]] = {n: [] for n in HORIZONS}
    for name, row in rows:
        net = networks_by_name[name]
        cells = [name, str(len(net.terms))]
        for n in HORIZONS:
            found = versus(row, n)
            mine = totals(row, n).get("einslice")
            if found is None or mine is None:
                cells += ["—", "—", "—"]
                continue
            ratio, best, _ = found
            ratios[n].append((name, ratio))
            peer = totals(row, n)[best]
            cells += [
                _seconds(mine),
                f"{_seconds(peer)} ({best})",
                f"**{ratio:.2f}**" if ratio < 0.8 else f"{ratio:.2f}",
            ]
        last = versus(row, HORIZONS[-1])
        cells += [
            method_cell(row["einslice"], "worst"),
            method_cell(row["einslice-off"], "worst"),
            "—" if last is None else method_cell(row[last[1]], "worst"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for n in HORIZONS:
        values = ratios[n]
        if not values:
            continue
        mean = geomean(r for _, r in values)
        low = min(values, key=lambda v: v[1])
        below = [f"{k} {r:.2f}" for k, r in values if r < 0.8]
        lines.append(
            f"- N = {n:,}: geometric mean {mean:.2f}x the best peer's total over "
            f"{len(values)} networks; lowest {low[0]} {low[1]:.2f}x; "
            + (f"below 0.8x: {', '.join(below)}" if below else "none below 0.8x")
        )
    warm = [
        row[best]["calls"].tail() / row["einslice"]["calls"].tail()
        for _, row in rows
        if "calls" in row["einslice"]
        for best in [
            min(
                (m for m in PEERS if "calls" in row[m]),
                key=lambda m: row[m]["calls"].tail(),
                default=None,
            )
        ]
        if best is not None
    ]
    mean = geomean(warm)
    if mean:
        lines.append(
            f"- warm (the median of each method's last calls): geometric mean "
            f"{mean:.2f}x the fastest peer's"
        )
    lines += [
        "",
        "Per method: setup (planning, path search, ahead-of-time compile) in "
        "s; totals for N calls in s; *calls*: how many were made; *warm*: "
        "the median of the last calls, ms; *worst*: the slowest call after "
        "the first, ms; memory: the temporary peak in MB (see the script's "
        "docstring); error: max abs error ÷ max |result| against a float64 "
        "contraction, of the last call.",
        "",
    ]
    head = ["network", "method", "setup s"]
    head += [f"N={n:,} s" for n in HORIZONS]
    head += ["calls", "warm ms", "worst ms", "MB", "err", "note"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in rows:
        for method, result in row.items():
            cells = [name, method, method_cell(result, "setup")]
            cells += [method_cell(result, str(n)) for n in HORIZONS]
            cells += [
                method_cell(result, k) for k in ("calls", "warm", "worst", "memory")
            ]
            cells += [method_cell(result, "error"), result.get("note", "")]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--memory-limit", default="256MB")
    parser.add_argument("--quick", action="store_true", help="a small subset")
    parser.add_argument("--families", help="comma-separated families to run")
    parser.add_argument("--only", nargs="*", help="network names to run")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=120.0,
        help="the calls' seconds of einslice (growth on)",
    )
    parser.add_argument(
        "--call-limit",
        type=float,
        default=300.0,
        help="a call running longer is stopped",
    )
    parser.add_argument("--cotengra-seconds", type=float, default=30.0)
    parser.add_argument(
        "--peer-seconds",
        type=float,
        default=10.0,
        help="the calls' seconds of each peer (and of einslice, growth off)",
    )
    parser.add_argument("--list", action="store_true", help="list the networks")
    parser.add_argument(
        "--fresh",
        type=int,
        metavar="SEED",
        help="run networks the planner was not tuned on (fresh_networks)",
    )
    parser.add_argument(
        "--save-networks",
        metavar="FILE",
        help="write the chosen networks to FILE (a pickle) and stop",
    )
    parser.add_argument(
        "--networks-file",
        metavar="FILE",
        help="run the networks of FILE (--save-networks) instead of building them: "
        "for a machine without einsum-benchmark's generators (an offline accelerator)",
    )
    parser.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results" / "networks.md")
    )
    args = parser.parse_args()
    from einslice._plan._memory import parse_memory_limit

    limit = parse_memory_limit(args.memory_limit)
    if args.networks_file:
        chosen = load_networks(args.networks_file)
    else:
        chosen = networks() if args.fresh is None else fresh_networks(args.fresh)
    if args.quick:
        chosen = [n for n in chosen if n.quick]
    if args.families:
        wanted = set(args.families.split(","))
        chosen = [n for n in chosen if n.family in wanted]
    if args.only:
        chosen = [n for n in chosen if n.name in args.only]
    if args.save_networks:
        save_networks(chosen, args.save_networks)
        print(f"wrote {len(chosen)} networks to {args.save_networks}")
        return 0
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
