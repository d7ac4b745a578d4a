"""Reporting a benchmark: terminal/Markdown tables, CSV and a log-log plot.

The terminal shows the same padded Markdown that goes into ``--out DIR``, so
what a user sees is what the README quotes.
"""

from __future__ import annotations

import csv
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ._methods import PIP_HINT
from ._run import Cell


@dataclass(frozen=True)
class Header:
    """What the tables are about: shown above them and kept with the files.

    Attributes:
        title: the first line (``einslice bench: <formula>`` or the suite).
        command: the command line that produced the results.
        device: the device's name and platform.
        matmul_gflops: this device's measured matmul throughput.
        device_memory: bytes a run may use before it is reported as OOM.
        memory_limit: the ``--memory-limit`` passed, or None.
        dtype: operand dtype.
        max_seconds: the ``--max-seconds`` cut-off.
    """

    title: str
    command: str
    device: str
    matmul_gflops: float
    device_memory: int
    memory_limit: str | None
    dtype: str
    max_seconds: float

    def lines(self) -> list[str]:
        """The header as Markdown lines."""
        limit = self.memory_limit or "einslice's default"
        return [
            f"## {self.title}",
            "",
            f"- command: `{self.command}`",
            f"- device: {self.device}; float32 matmul {self.matmul_gflops:.1f} "
            f"GFLOP/s (jitted); memory a run may use: "
            f"{format_bytes(self.device_memory)}",
            f"- memory limit: {limit}; dtype: {self.dtype}; "
            f"runs estimated over {self.max_seconds:g} s are skipped",
        ]


MEMORY_TITLE = (
    "Temporary memory (JAX: XLA's compiled count; numpy peers: traced "
    "allocations; (RSS): peak resident growth, a lower bound)"
)


def format_bytes(n: float | None) -> str:
    """Bytes with a decimal unit: ``17.2 GB``, ``64.0 MB``, ``0 B``."""
    if n is None:
        return "?"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def format_seconds(s: float) -> str:
    """Seconds with three significant digits, as the seed's tables print them."""
    return f"{s:.3g}"


def cell_text(cell: Cell, what: str, matmul_gflops: float = 0.0) -> str:
    """One table cell: the measured value, or why there is none.

    Args:
        cell: the result.
        what: ``"time"``, ``"memory"`` or ``"gflops"``.
        matmul_gflops: for ``"gflops"``: the fraction of it is shown too.

    Returns:
        e.g. ``0.0123``, ``OOM (needs 17.2 GB)``, ``skipped (est. 40 s)``.
    """
    if cell.status == "oom":
        return f"OOM (needs {format_bytes(cell.needs)})" if cell.needs else "OOM"
    if cell.status == "skipped":
        return f"skipped (est. {cell.estimate:.3g} s)"
    if cell.status in ("n/a", "missing", "error"):
        return cell.status
    if what == "time":
        text = format_seconds(cell.seconds or 0.0)
    elif what == "memory":
        text = format_bytes(cell.memory)
        if cell.memory_source == "rss":
            text += " (RSS)"
        if cell.over_limit:
            text += " over limit"
    else:
        gflops = cell.gflops or 0.0
        text = f"{gflops:.3g}"
        if matmul_gflops > 0:
            text += f" ({100 * gflops / matmul_gflops:.0f}%)"
    if cell.status == "wrong":
        text += f" WRONG (err {cell.rel_error:.1g})"
    return text


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table with columns padded to line up on a terminal."""
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = (str(c).ljust(w) for c, w in zip(cells, widths, strict=True))
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def _methods(cells: Sequence[Cell]) -> list[str]:
    """Method names in the order they ran."""
    return list(dict.fromkeys(c.method for c in cells))


def _notes(cells: Sequence[Cell]) -> list[str]:
    """One line per missing method and per distinct error or n/a reason."""
    seen: dict[tuple[str, str, str], None] = {}
    for c in cells:
        if c.status in ("missing", "error", "n/a") and c.note:
            seen.setdefault((c.method, c.status, c.note), None)
    lines = []
    for method, status, note in seen:
        if status == "n/a":
            continue  # n/a is self-explanatory in the tables; kept in the CSV
        lines.append(f"- {method}: {status}: {note}")
    return lines


REFERENCE = "matmul"
"""The name of the matmul timed alongside each formula (``matmul_method()``).

Its cells give the throughput that fractions are taken against; tables and
plots leave it out, the CSV keeps it.
"""


def _references(cells: Sequence[Cell]) -> dict[tuple[str, int | None], float]:
    """(formula, n) -> the GFLOP/s of the matmul timed alongside it."""
    return {
        (c.formula, c.n): c.gflops for c in cells if c.method == REFERENCE and c.gflops
    }


def _shown(cells: Sequence[Cell]) -> list[Cell]:
    """The cells tables and plots show: all but the matmul reference."""
    return [c for c in cells if c.method != REFERENCE]


def sweep_markdown(cells: Sequence[Cell], header: Header) -> str:
    """The seed-style report: time, memory and GFLOP/s tables, rows by n.

    Fractions of matmul throughput are taken against the matmul timed
    alongside each n when there is one (the load of a shared machine changes
    during a run), else against the header's figure.
    """
    refs = _references(cells)
    cells = _shown(cells)
    methods = _methods(cells)
    sizes = list(dict.fromkeys(c.n for c in cells))
    by = {(c.n, c.method): c for c in cells}
    parts = header.lines()
    sections = (
        ("time", "Median time (s) after warm-up"),
        ("memory", MEMORY_TITLE),
        (
            "gflops",
            "GFLOP/s (fraction of this device's matmul throughput"
            + (", timed alongside at each n)" if refs else ")"),
        ),
    )
    for what, title in sections:
        rows = []
        for n in sizes:
            ref = refs.get((cells[0].formula, n), header.matmul_gflops)
            rows.append([str(n), *(cell_text(by[n, m], what, ref) for m in methods)])
        parts += ["", f"### {title}", "", markdown_table(["n", *methods], rows)]
    notes = _notes(cells)
    if notes:
        parts += ["", *notes]
    return "\n".join(parts) + "\n"


@dataclass(frozen=True)
class Comparison:
    """einslice against the best peer that fit, on one formula.

    Attributes:
        formula: the formula's name.
        best_peer: the fastest peer that ran within the limit and device memory.
        speedup: the best peer's time over einslice's (> 1: einslice faster).
        peers_failed: some peer ran out of memory or over the limit here.
        ours_over_limit: einslice's own memory exceeded the limit.
    """

    formula: str
    best_peer: str | None
    speedup: float | None
    peers_failed: bool
    ours_over_limit: bool


def compare(cells: Sequence[Cell], ours: str, peers: Sequence[str]) -> list[Comparison]:
    """For each formula, einslice (method ``ours``) against its best peer."""
    out = []
    for formula in dict.fromkeys(c.formula for c in cells):
        row = {c.method: c for c in cells if c.formula == formula}
        mine = row.get(ours)
        fitting = [
            row[p]
            for p in peers
            if p in row and row[p].status == "ok" and not row[p].over_limit
        ]
        best = min(fitting, key=lambda c: c.seconds or math.inf, default=None)
        speedup = None
        if best is not None and mine is not None and mine.status == "ok":
            speedup = (best.seconds or 0.0) / (mine.seconds or math.inf)
        failed = any(
            p in row and (row[p].status == "oom" or row[p].over_limit) for p in peers
        )
        out.append(
            Comparison(
                formula,
                None if best is None else best.method,
                speedup,
                failed,
                mine is not None and mine.over_limit,
            )
        )
    return out


def summary_line(comparisons: Sequence[Comparison], ours: str = "einslice") -> str:
    """Geometric-mean speed-up over formulas, and where peers did not fit."""
    ratios = [c.speedup for c in comparisons if c.speedup]
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else None
    fastest = sum(1 for r in ratios if r >= 1.0)
    failed = sum(1 for c in comparisons if c.peers_failed)
    over = sum(1 for c in comparisons if c.ours_over_limit)
    geo_text = "n/a" if geo is None else f"{geo:.2f}x"
    return (
        f"{ours} vs the best peer that fit: geometric-mean speed-up {geo_text} "
        f"over {_count(len(ratios), 'formula')}; {ours} fastest on "
        f"{fastest}/{len(ratios)}; a peer ran out of memory or over the limit on "
        f"{_count(failed, 'formula')}; {ours} over its limit on {over}."
    )


def _count(n: int, noun: str) -> str:
    """``1 formula``, ``3 formulas``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def suite_markdown(
    cells: Sequence[Cell], header: Header, ours: str, peers: Sequence[str],
    equations: dict[str, str],
) -> str:  # fmt: skip
    """The suite report: time and memory per formula, speed-up, summary line."""
    methods = _methods(cells)
    by = {(c.formula, c.method): c for c in cells}
    comparisons = {c.formula: c for c in compare(cells, ours, peers)}
    formulas = list(dict.fromkeys(c.formula for c in cells))
    parts = header.lines()
    rows = []
    for f in formulas:
        comp = comparisons[f]
        speedup = "" if comp.speedup is None else f"{comp.speedup:.2f}x"
        rows.append([
            f, f"`{equations.get(f, '')}`",
            *(cell_text(by[f, m], "time") for m in methods),
            comp.best_peer or "", speedup,
        ])  # fmt: skip
    head = ["formula", "equation", *methods, "best peer", "speed-up"]
    parts += [
        "",
        "### Median time (s); speed-up = best peer's time / einslice's",
        "",
        markdown_table(head, rows),
    ]
    rows = [[f, *(cell_text(by[f, m], "memory") for m in methods)] for f in formulas]
    parts += [
        "",
        f"### {MEMORY_TITLE}",
        "",
        markdown_table(["formula", *methods], rows),
    ]
    parts += ["", summary_line(list(comparisons.values()), ours)]
    for other in methods:
        if other != ours and other.startswith(f"{ours}-"):
            # einslice's variants (einslice-tuned) against the same peers
            parts += ["", summary_line(compare(cells, other, peers), other)]
    notes = _notes(cells)
    if notes:
        parts += ["", *notes]
    return "\n".join(parts) + "\n"


CSV_FIELDS = (
    "formula", "n", "method", "status", "seconds", "runs", "memory_bytes",
    "memory_source", "needs_bytes", "estimate_seconds", "flops", "gflops",
    "fraction_of_matmul", "rel_error", "over_limit", "note",
)  # fmt: skip


def write_csv(path: str, cells: Sequence[Cell], matmul_gflops: float) -> None:
    """One row per cell, every measured field (long format).

    Fractions are against the matmul timed alongside, if any, else
    ``matmul_gflops``.
    """
    refs = _references(cells)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_FIELDS)
        for c in cells:
            gflops = c.gflops
            ref = refs.get((c.formula, c.n), matmul_gflops)
            fraction = gflops / ref if gflops and ref else None
            writer.writerow([
                c.formula, c.n, c.method, c.status, c.seconds, c.runs, c.memory,
                c.memory_source, c.needs, c.estimate, c.flops, gflops, fraction,
                c.rel_error, c.over_limit, c.note,
            ])  # fmt: skip


def plot_sweep(path: str, cells: Sequence[Cell], title: str) -> None:
    """Time vs n and memory vs n, log-log, one line per method (PNG).

    Runs that did not fit are drawn at the memory they would have needed, with
    hollow markers, so the plot shows where each method stops.
    """
    cells = _shown(cells)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    sizes = sorted({c.n for c in cells if c.n is not None})
    any_oom = False
    for k, method in enumerate(_methods(cells)):
        style = _style(k)
        mine = [c for c in cells if c.method == method and c.n is not None]
        ran = [c for c in mine if c.ran and c.seconds]
        ax_t.plot([c.n for c in ran], [c.seconds for c in ran], label=method, **style)
        mem = [c for c in ran if c.memory]  # zero bytes has no place on a log axis
        ax_m.plot([c.n for c in mem], [c.memory for c in mem], label=method, **style)
        oom = [c for c in mine if c.status == "oom" and c.needs]
        if oom:
            any_oom = True
            hollow = {**style, "linestyle": ":", "markerfacecolor": "none"}
            ax_m.plot([c.n for c in oom], [c.needs for c in oom], **hollow)
    for ax, label in ((ax_t, "median time (s)"), (ax_m, "temporary memory (bytes)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_xlabel("n")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    if any_oom:
        ax_m.set_title("hollow, dotted: OOM, the memory it would need", fontsize=9)
    ax_t.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _style(k: int) -> dict[str, object]:
    """Line style of the k-th method: 10 colours, then other markers and dashes."""
    import matplotlib.pyplot as plt

    colors = plt.get_cmap("tab10").colors  # type: ignore[attr-defined]
    markers = "os^vD"
    return {
        "color": colors[k % 10],
        "marker": markers[(k // 10) % len(markers)],
        "linestyle": ("-", "--", "-.")[(k // 10) % 3],
    }


def plot_suite(path: str, cells: Sequence[Cell], title: str) -> None:
    """Time per formula, one marker per method, log scale (PNG)."""
    cells = _shown(cells)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    formulas = list(dict.fromkeys(c.formula for c in cells))
    methods = _methods(cells)
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(formulas) + 1.6))
    for k, method in enumerate(methods):
        pts = [
            (c.seconds, formulas.index(c.formula))
            for c in cells
            if c.method == method and c.ran and c.seconds
        ]
        if pts:
            style = {**_style(k), "linestyle": "none"}
            if method.startswith("einslice"):
                style |= {"marker": "*", "markersize": 11}
            ax.plot(*zip(*pts, strict=True), label=method, alpha=0.8, **style)
    ax.set_yticks(range(len(formulas)), formulas)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("median time (s)")
    ax.grid(True, which="both", axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(out_dir: str, stem: str, markdown: str, cells: Sequence[Cell],
                  matmul_gflops: float, plot: str) -> list[str]:  # fmt: skip
    """Write ``<stem>.md``, ``<stem>.csv`` and ``<stem>.png`` into ``out_dir``.

    Args:
        out_dir: created if missing.
        stem: file name without extension.
        markdown: the report.
        cells: the results.
        matmul_gflops: for the CSV's fraction column.
        plot: ``"sweep"`` or ``"suite"``.

    Returns:
        The paths written.
    """
    os.makedirs(out_dir, exist_ok=True)
    md, csv_path, png = (
        os.path.join(out_dir, stem + e) for e in (".md", ".csv", ".png")
    )
    with open(md, "w") as f:
        f.write(markdown)
    write_csv(csv_path, cells, matmul_gflops)
    title = markdown.splitlines()[0].lstrip("# ")
    try:
        (plot_sweep if plot == "sweep" else plot_suite)(png, cells, title)
    except ImportError as e:
        print(f"einslice bench: no plot ({e}); {PIP_HINT}", file=sys.stderr)
        return [md, csv_path]
    return [md, csv_path, png]
