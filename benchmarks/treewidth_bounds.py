"""Treewidth bounds of UAI models: why an instance has no exact contraction.

For each ``.uai`` file (conditioned on its ``.evid`` when there is one): the
interaction graph (variables joined when they share a factor) and

- a **lower bound** on its treewidth, the minor-min-width heuristic (MMD+,
  "min-d"; Gogate & Dechter 2004, Bodlaender & Koster 2011): repeatedly take
  a vertex of least degree, record that degree, and contract it into its
  neighbour of least degree. Treewidth never grows under contraction and is at
  least the minimum degree, so the largest degree recorded bounds it below.
  A contraction tree is a tree decomposition of this graph (each pairwise
  step's indices, result and summed, form a bag), so every exact contraction
  (einslice's trees included, sliced or not) has a step over at least
  ``treewidth + 1`` variables: with binary variables at least
  ``2^(lower + 1)`` multiply-adds in that step alone, whatever the memory
  limit (slicing splits a step's work into slices, it does not remove it).
- an **upper bound**, the width of a min-degree elimination order (the
  largest clique it forms, minus one), for a sense of the gap.

Run: ``python benchmarks/treewidth_bounds.py DIR/relational_1.uai ...``
(prints a Markdown table). Pure Python; seconds per model with thousands of
variables.
"""

from __future__ import annotations

import argparse
import heapq
import math
import sys
import time
from pathlib import Path

from einslice.pgm import read_uai
from einslice.pgm._uai import read_evidence
from einslice.pgm._width import minor_min_width


def interaction_graph(path: Path) -> tuple[dict[int, set[int]], list[int]]:
    """Adjacency sets of the model's variables after its evidence, and their sizes."""
    graph = read_uai(path)
    evidence_file = Path(str(path) + ".evid")
    if evidence_file.exists():
        graph = graph.condition(read_evidence(evidence_file))
    adjacency: dict[int, set[int]] = {v: set() for v in range(graph.num_variables)}
    for factor in graph.factors:
        for a in factor.scope:
            adjacency[a].update(b for b in factor.scope if b != a)
    return adjacency, list(graph.cardinalities)


def min_degree_width(adjacency: dict[int, set[int]], seconds: float) -> int | None:
    """The width of a min-degree elimination order (None: over ``seconds``)."""
    graph = {v: set(n) for v, n in adjacency.items()}
    heap = [(len(n), v) for v, n in graph.items()]
    heapq.heapify(heap)
    width, deadline = 0, time.perf_counter() + seconds
    while heap:
        degree, v = heapq.heappop(heap)
        if v not in graph or degree != len(graph[v]):
            continue
        if time.perf_counter() > deadline:
            return None
        width = max(width, degree)
        neighbours = graph.pop(v)
        for w in neighbours:
            graph[w].discard(v)
            graph[w] |= neighbours - {w}
            heapq.heappush(heap, (len(graph[w]), w))
    return width


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--upper-seconds", type=float, default=120.0)
    args = parser.parse_args(argv)
    print(
        "| instance | variables (after evidence) | edges | treewidth >= "
        "(minor-min-width) | least work of the largest step | "
        "min-degree width (upper) |"
    )
    print("|---|---|---|---|---|---|")
    for path in args.models:
        adjacency, sizes = interaction_graph(path)
        edges = sum(len(n) for n in adjacency.values()) // 2
        lower = minor_min_width(adjacency)
        upper = min_degree_width(adjacency, args.upper_seconds)
        smallest = min((s for s in sizes if s > 1), default=2)
        work = (lower + 1) * math.log10(smallest)
        entries = f"{smallest}^{lower + 1} = 10^{work:.0f}"
        print(
            f"| {path.stem} | {len(adjacency)} | {edges} | {lower} | {entries} | "
            f"{'—' if upper is None else upper} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
