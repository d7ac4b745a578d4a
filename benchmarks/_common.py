"""What the benchmark scripts share: finding einslice, the seed table, files."""

from __future__ import annotations

import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def import_einslice():
    """Import einslice, from this checkout's ``src/`` when it is not installed."""
    try:
        import einslice
    except ImportError:
        sys.path.insert(0, os.path.join(HERE, "..", "src"))
        import einslice
    return einslice


def environment_lines(device, extra=()):
    """Markdown lines saying where and with what the benchmark ran.

    ``device``: a JAX device (``device_kind``) or einslice's bench ``Device``
    (``name``); seed_cpu.py and gpu_seed.py pass the latter.
    """
    import jax

    kind = getattr(device, "device_kind", None) or getattr(device, "name", device)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return [
        f"- device: {kind} ({device.platform}); jax {jax.__version__}; "
        f"Python {platform.python_version()}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}; load average at start "
        f"{load:.2f} on {os.cpu_count()} cores",
        *extra,
    ]


def seed_table(cells, methods, matmul, baseline="scan_einsum"):
    """The seed formula's results as Markdown: times, ratios, fractions, memory.

    Args:
        cells: results of ``_run.run`` on ``seed_formula(n)`` for several n.
        methods: column order.
        matmul: ``matmul(n, method)`` -> the matmul GFLOP/s the method's fraction
            at n is relative to.
        baseline: the method every einslice variant's speed is divided by.

    Returns:
        A Markdown table (str).
    """
    from einslice.bench._report import cell_text, format_bytes, markdown_table

    ours = [m for m in methods if m.startswith("einslice")]
    by = {(c.n, c.method): c for c in cells}
    sizes = list(dict.fromkeys(c.n for c in cells))
    head = [
        "n",
        *(f"{m} (s)" for m in methods),
        *(f"{m} / {baseline} speed" for m in ours),
        *(f"{m} % of matmul" for m in ours),
        *(f"{m} temp memory" for m in ours),
    ]
    rows = []
    for n in sizes:
        row = [str(n), *(cell_text(by[n, m], "time") for m in methods)]
        base = by.get((n, baseline))
        for m in ours:
            mine = by[n, m]
            if base is not None and base.seconds and mine.seconds and mine.ran:
                row.append(f"{base.seconds / mine.seconds:.2f}x")
            else:
                row.append("")
        for m in ours:
            mine = by[n, m]
            reference = matmul(n, m)
            ok = mine.gflops and reference
            row.append(f"{100 * mine.gflops / reference:.0f}%" if ok else "")
        for m in ours:
            row.append(format_bytes(by[n, m].memory) if by[n, m].ran else "")
        rows.append(row)
    return markdown_table(head, rows)


def write(out_dir, stem, markdown, cells, matmul_gflops):
    """Write ``<stem>.md`` and ``<stem>.csv``; return their paths."""
    from einslice.bench._report import write_csv

    os.makedirs(out_dir, exist_ok=True)
    md = os.path.join(out_dir, stem + ".md")
    csv_path = os.path.join(out_dir, stem + ".csv")
    with open(md, "w") as f:
        f.write(markdown)
    write_csv(csv_path, cells, matmul_gflops)
    return md, csv_path


def pgmpy_network(model):
    """A UAI ``FactorGraph`` as pgmpy's ``DiscreteMarkovNetwork`` (linear tables).

    Variables are named ``x0, x1, ...``; a variable no factor mentions gets a
    uniform table (pgmpy wants every variable covered).
    """
    import numpy as np
    from pgmpy.factors.discrete import DiscreteFactor
    from pgmpy.models import DiscreteMarkovNetwork

    names = [f"x{v}" for v in range(model.num_variables)]
    network = DiscreteMarkovNetwork()
    network.add_nodes_from(names)
    for factor in model.factors:
        s = factor.scope
        network.add_edges_from(
            (names[a], names[b]) for i, a in enumerate(s) for b in s[i + 1 :]
        )
    tables = [
        DiscreteFactor(
            [names[v] for v in f.scope],
            [model.cardinalities[v] for v in f.scope],
            np.exp(f.log_table),
        )
        for f in model.factors
    ]
    covered = {v for f in model.factors for v in f.scope}
    tables += [
        DiscreteFactor([names[v]], [c], np.ones(c))
        for v, c in enumerate(model.cardinalities)
        if v not in covered
    ]
    network.add_factors(*tables)
    return network
