"""Reporting a benchmark: terminal/Markdown tables, CSV and a log-log plot.

The terminal shows the same padded Markdown that goes into ``--out DIR``, so
what a user sees is what the README quotes.
"""

from __future__ import annotations

import csv
import math
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ._methods import PIP_HINT
from ._run import ESTIMATE_MARGIN, Cell


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
        rounds: the most timing rounds per formula (``--rounds``).
        matmul_note: how ``matmul_gflops`` was measured.
        load: the load average (1 minute) when the run started, if known: on
            a shared machine it says how much other work the figures share
            the device with.
    """

    title: str
    command: str
    device: str
    matmul_gflops: float
    device_memory: int
    memory_limit: str | None
    dtype: str
    max_seconds: float
    rounds: int = 1
    matmul_note: str = "jitted, timed before the run"
    load: float | None = None

    def lines(self) -> list[str]:
        """The header as Markdown lines."""
        limit = self.memory_limit or "einslice's default"
        return [
            f"## {self.title}",
            "",
            f"- command: `{self.command}`",
            f"- device: {self.device}; float32 matmul {self.matmul_gflops:.1f} "
            f"GFLOP/s ({self.matmul_note}); memory a run may use: "
            f"{format_bytes(self.device_memory)}",
            f"- memory limit: {limit}; dtype: {self.dtype}"
            + ("" if self.load is None else f"; load average at start {self.load:.1f}"),
            f"- timing: each method is run once (warm-up), then timed in up to "
            f"{self.rounds} rounds, one turn per method per round, the order "
            f"rotating; fast calls are repeated within a turn, slow ones get "
            f"fewer rounds; a call estimated (doubled for safety) to take over "
            f"{self.max_seconds:g} s is skipped, and one that took longer is "
            f"not repeated; a round's time, for the ratios, is its fastest call",
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


def cell_text(
    cell: Cell, what: str, matmul_gflops: float = 0.0, max_seconds: float = 0.0
) -> str:
    """One table cell: the measured value, or why there is none.

    Args:
        cell: the result.
        what: ``"time"`` (with the number of rounds), ``"memory"`` or
            ``"gflops"``.
        matmul_gflops: for ``"gflops"``: the fraction of it is shown too.
        max_seconds: the ``--max-seconds`` a call that took longer went over.

    Returns:
        e.g. ``0.0123 (15)``, ``OOM (needs 17.2 GB)``,
        ``skipped (est. 40-80 s)``, ``106 (1, over 60 s)``.
    """
    if cell.status == "oom":
        return f"OOM (needs {format_bytes(cell.needs)})" if cell.needs else "OOM"
    if cell.status == "skipped":
        low = cell.estimate or 0.0
        return f"skipped (est. {low:.3g}-{low * ESTIMATE_MARGIN:.3g} s)"
    if cell.status in ("n/a", "missing", "error"):
        return cell.status
    if what == "time":
        text = format_seconds(cell.seconds or 0.0)
        over = f", over {max_seconds:g} s" if cell.over_time and max_seconds else ""
        text += f" ({len(cell.rounds)}{over})"
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

Its rounds over the whole run give the one throughput that fractions are
taken against; tables and plots leave it out, the CSV keeps it.
"""


@dataclass(frozen=True)
class Reference:
    """The matmul throughput of a run: the median over all its rounds.

    Attributes:
        gflops: median GFLOP/s of the matmul's rounds, over every formula.
        rounds: how many rounds that median is over.
        side: the matmul's side (2048 on CPU).
    """

    gflops: float
    rounds: int
    side: int

    def note(self) -> str:
        """How it was measured, for the header."""
        return (
            f"{self.side}x{self.side}, jitted; median of its {self.rounds} rounds "
            "timed alongside the methods over the whole run"
        )


def reference(cells: Sequence[Cell]) -> Reference | None:
    """The run's matmul reference, or None when no matmul was timed."""
    mine = [c for c in cells if c.method == REFERENCE and c.ran and c.flops]
    rates = [c.flops / s / 1e9 for c in mine for s in c.rounds if c.flops and s > 0]
    if not rates:
        return None
    side = round((mine[0].flops / 2) ** (1 / 3)) if mine[0].flops else 0
    return Reference(statistics.median(rates), len(rates), side)


def _shown(cells: Sequence[Cell]) -> list[Cell]:
    """The cells tables and plots show: all but the matmul reference."""
    return [c for c in cells if c.method != REFERENCE]


def _ours(methods: Sequence[str]) -> list[str]:
    """The columns of einslice itself (einslice, einslice@64MB, einslice-tuned)."""
    mine = ("einslice@", "einslice-")
    return [m for m in methods if m == "einslice" or m.startswith(mine)]


def round_ratios(ours: Cell, peer: Cell) -> list[float]:
    """The peer's time over ours in each round both ran (> 1: ours faster).

    Round ``r`` of two methods ran back to back, so each ratio is a pair taken
    under the same load; a round's time is its turn's fastest call. A method
    measured once (too slow to repeat) pairs its one run with the other's
    first round.
    """
    return [
        p / o for o, p in zip(ours.rounds, peer.rounds, strict=False) if o > 0 and p > 0
    ]


def spread(ratios: Sequence[float]) -> tuple[float, float, float]:
    """Median and the middle half (quartiles) of per-round ratios."""
    if len(ratios) == 1:
        return ratios[0], ratios[0], ratios[0]
    low, mid, high = statistics.quantiles(ratios, n=4, method="inclusive")
    return mid, low, high


def ratio_text(ratios: Sequence[float]) -> str:
    """``1.02x (0.95-1.10, 15 rounds)``: median, middle half, count."""
    if not ratios:
        return ""
    mid, low, high = spread(ratios)
    if len(ratios) == 1:
        return f"{mid:.2f}x (1 round)"
    return f"{mid:.2f}x ({low:.2f}-{high:.2f}, {len(ratios)} rounds)"


def _ratio_section(cells: Sequence[Cell], sizes: list, methods: list[str]) -> list[str]:
    """Each einslice column against each other column, per n, round by round."""
    by = {(c.n, c.method): c for c in cells}
    ours = _ours(methods)
    peers = [m for m in methods if m not in ours]
    pairs = [(o, p) for o in ours for p in peers]
    if not pairs:
        return []
    rows = []
    for n in sizes:
        row = [str(n)]
        for o, p in pairs:
            mine, theirs = by[n, o], by[n, p]
            ok = mine.ran and theirs.ran
            row.append(ratio_text(round_ratios(mine, theirs)) if ok else "")
        rows.append(row)
    head = ["n", *(f"{p} / {o}" if len(ours) > 1 else f"vs {p}" for o, p in pairs)]
    title = (
        "Speed of einslice against each method: their time / einslice's in "
        "each round (each turn's fastest call): median (middle half), rounds"
    )
    return ["", f"### {title}", "", markdown_table(head, rows)]


def _timing_notes(cells: Sequence[Cell], max_seconds: float, over_100: bool) -> list:
    """Notes under the sweep's tables: what "over", "skipped" and >100% mean."""
    notes = []
    if any(c.over_time for c in cells):
        notes.append(
            f"- over {max_seconds:g} s: a call took longer than --max-seconds. "
            "A started call cannot be interrupted, so it ran to its end; the "
            "method was not called again, and larger sizes are skipped."
        )
    if any(c.status == "skipped" for c in cells):
        notes.append(
            "- skipped (est. a-b s): the time extrapolated from the previous "
            f"size (a) doubled for safety (b) is over {max_seconds:g} s."
        )
    if over_100:
        notes.append(
            "- A fraction above 100%: that method did more FLOP/s than the "
            "reference matmul did in this run. The reference is one size of "
            "matmul, not the device's peak: smaller products can stay in the "
            "caches, and when other work shares the machine a matmul that uses "
            "every core slows down more than a loop of small products does."
        )
    return notes


def sweep_markdown(cells: Sequence[Cell], header: Header) -> str:
    """The seed-style report: time, memory, GFLOP/s and ratio tables, rows by n.

    Fractions of matmul throughput are taken against one reference for the
    whole run: the median of the matmul's rounds, timed alongside every n
    (else the header's figure, measured before the run).
    """
    ref = reference(cells)
    if ref is not None:
        header = replace(header, matmul_gflops=ref.gflops, matmul_note=ref.note())
    cells = _shown(cells)
    methods = _methods(cells)
    sizes = list(dict.fromkeys(c.n for c in cells))
    by = {(c.n, c.method): c for c in cells}
    parts = header.lines()
    sections = (
        ("time", "Median time (s) after warm-up (rounds)"),
        ("memory", MEMORY_TITLE),
        ("gflops", "GFLOP/s (fraction of the matmul reference above)"),
    )
    for what, title in sections:
        rows = []
        for n in sizes:
            texts = [
                cell_text(by[n, m], what, header.matmul_gflops, header.max_seconds)
                for m in methods
            ]
            rows.append([str(n), *texts])
        parts += ["", f"### {title}", "", markdown_table(["n", *methods], rows)]
    parts += _ratio_section(cells, sizes, methods)
    over_100 = any(
        c.ran and (c.gflops or 0.0) > header.matmul_gflops > 0 for c in cells
    )
    notes = _timing_notes(cells, header.max_seconds, over_100) + _notes(cells)
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
        ratios: the best peer's time over einslice's in each round both ran.
    """

    formula: str
    best_peer: str | None
    speedup: float | None
    peers_failed: bool
    ours_over_limit: bool
    ratios: tuple[float, ...] = ()


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
        speedup, ratios = None, ()
        if best is not None and mine is not None and mine.status == "ok":
            speedup = (best.seconds or 0.0) / (mine.seconds or math.inf)
            ratios = tuple(round_ratios(mine, best))
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
                ratios,
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
        if len(comp.ratios) > 1:
            _, low, high = spread(comp.ratios)
            speedup += f" ({low:.2f}-{high:.2f} by round)"
        rows.append([
            f, f"`{equations.get(f, '')}`",
            *(cell_text(by[f, m], "time", 0.0, header.max_seconds) for m in methods),
            comp.best_peer or "", speedup,
        ])  # fmt: skip
    head = ["formula", "equation", *methods, "best peer", "speed-up"]
    parts += [
        "",
        "### Median time (s) after warm-up (rounds); speed-up = best peer's "
        "time / einslice's, of the medians (the middle half of the rounds' ratios)",
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
    notes = _timing_notes(cells, header.max_seconds, False) + _notes(cells)
    if notes:
        parts += ["", *notes]
    return "\n".join(parts) + "\n"


CSV_FIELDS = (
    "formula", "n", "method", "status", "seconds", "runs", "rounds",
    "round_seconds", "over_time", "memory_bytes", "memory_source", "needs_bytes",
    "limit_bytes", "estimate_seconds", "flops", "gflops", "fraction_of_matmul",
    "rel_error", "over_limit", "note",
)  # fmt: skip


def write_csv(path: str, cells: Sequence[Cell], matmul_gflops: float) -> None:
    """One row per cell, every measured field (long format).

    Fractions are against the run's matmul reference (:func:`reference`), if
    a matmul was timed, else ``matmul_gflops``; ``round_seconds`` holds each
    round's median time, space-separated.
    """
    ref = reference(cells)
    rate = ref.gflops if ref is not None else matmul_gflops
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_FIELDS)
        for c in cells:
            gflops = c.gflops
            fraction = gflops / rate if gflops and rate else None
            writer.writerow([
                c.formula, c.n, c.method, c.status, c.seconds, c.runs,
                len(c.rounds), " ".join(f"{s:.6g}" for s in c.rounds), c.over_time,
                c.memory, c.memory_source, c.needs, c.limit, c.estimate, c.flops,
                gflops, fraction, c.rel_error, c.over_limit, c.note,
            ])  # fmt: skip


_KEYS: dict[str, dict[str, object]] = {
    "oom": {"marker": "$OOM$", "markersize": 14, "linestyle": "none"},
    "needs": {"marker": "o", "markerfacecolor": "none", "linestyle": ":"},
    "skipped": {"marker": "o", "markerfacecolor": "none", "linestyle": ":"},
    "over": {"marker": "o", "markersize": 14, "markerfacecolor": "none",
             "markeredgecolor": "red", "linestyle": "none"},
}  # fmt: skip
"""How the sweep plot marks runs that did not run or ran too long."""

_KEY_TEXT = {
    "oom": "OOM: did not fit in memory, not run",
    "needs": "hollow, dotted: OOM, the memory it would need",
    "skipped": "hollow, dotted: skipped, at its estimated time",
    "over": "circled: a call over --max-seconds",
}


def plot_sweep(
    path: str, cells: Sequence[Cell], title: str, device_memory: int | None = None
) -> None:
    """Time vs n and memory vs n, log-log, one line per method (PNG).

    Runs that did not fit are drawn on the memory panel at the memory they
    would have needed and marked "OOM" at the top of the time panel; skipped
    runs at their estimated time; calls over --max-seconds circled. The memory
    panel draws einslice's memory limit (and the memory a run may use, when
    given). Both panels have a legend.
    """
    cells = _shown(cells)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 4.8))
    sizes = sorted({c.n for c in cells if c.n is not None})
    used: dict[str, None] = {}
    for k, method in enumerate(_methods(cells)):
        style = _style(k)
        mine = [c for c in cells if c.method == method and c.n is not None]
        ran = [c for c in mine if c.ran and c.seconds]
        ax_t.plot([c.n for c in ran], [c.seconds for c in ran], label=method, **style)
        mem = [c for c in ran if c.memory]  # zero bytes has no place on a log axis
        ax_m.plot([c.n for c in mem], [c.memory for c in mem], label=method, **style)
        color = style["color"]
        oom = [c for c in mine if c.status == "oom" and c.needs]
        ax_m.plot([c.n for c in oom], [c.needs for c in oom], color=color,
                  **_KEYS["needs"])  # fmt: skip
        for c in oom:  # no time to plot: marked at the top of the time panel
            ax_t.annotate("OOM", (c.n, 1.0), xycoords=("data", "axes fraction"),
                          xytext=(0, -4 - 9 * k), textcoords="offset points",
                          ha="center", va="top", fontsize=7, color=color)  # fmt: skip
        skipped = [c for c in mine if c.status == "skipped" and c.estimate]
        ax_t.plot([c.n for c in skipped], [c.estimate for c in skipped], color=color,
                  **_KEYS["skipped"])  # fmt: skip
        over = [c for c in ran if c.over_time]
        ax_t.plot([c.n for c in over], [c.seconds for c in over], **_KEYS["over"])
        for key, found in (("oom", oom), ("needs", oom), ("skipped", skipped),
                           ("over", over)):  # fmt: skip
            if found:
                used[key] = None
    ours = {c.limit for c in cells if c.limit and c.method.startswith("einslice")}
    for limit in sorted(ours):
        text = f"einslice memory_limit ({format_bytes(limit)})"
        ax_m.axhline(limit, color="black", linestyle="--", linewidth=1, label=text)
    if device_memory:
        text = f"memory a run may use ({format_bytes(device_memory)})"
        ax_m.axhline(device_memory, color="grey", linestyle="-.", linewidth=1,
                     label=text)  # fmt: skip
    for ax, label, name in (
        (ax_t, "median time (s)", "Time"),
        (ax_m, "temporary memory (bytes)", "Temporary memory"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.set_xlabel("n")
        ax.set_ylabel(label)
        ax.set_title(name, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax_t.get_legend_handles_labels()
    for key in used:
        if key != "needs":
            handles.append(Line2D([], [], color="grey", **_KEYS[key]))  # type: ignore[arg-type]
            labels.append(_KEY_TEXT[key])
    ax_t.legend(handles, labels, fontsize=7)
    handles, labels = ax_m.get_legend_handles_labels()
    if "needs" in used:
        handles.append(Line2D([], [], color="grey", **_KEYS["needs"]))  # type: ignore[arg-type]
        labels.append(_KEY_TEXT["needs"])
    ax_m.legend(handles, labels, fontsize=7)
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
                  matmul_gflops: float, plot: str,
                  device_memory: int | None = None) -> list[str]:  # fmt: skip
    """Write ``<stem>.md``, ``<stem>.csv`` and ``<stem>.png`` into ``out_dir``.

    Args:
        out_dir: created if missing.
        stem: file name without extension.
        markdown: the report.
        cells: the results.
        matmul_gflops: for the CSV's fraction column.
        plot: ``"sweep"`` or ``"suite"``.
        device_memory: drawn on the sweep's memory panel, when given.

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
        if plot == "sweep":
            plot_sweep(png, cells, title, device_memory)
        else:
            plot_suite(png, cells, title)
    except ImportError as e:
        print(f"einslice bench: no plot ({e}); {PIP_HINT}", file=sys.stderr)
        return [md, csv_path]
    return [md, csv_path, png]
