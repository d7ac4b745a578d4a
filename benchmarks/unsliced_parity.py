"""einslice vs jnp.einsum(optimize="greedy") on the suite's unsliced formulas.

Each program is compiled once for the same operands, then all are timed in
interleaved rounds in one process (median per program). With ``--before SRC``
einslice is also compiled from another checkout's ``src`` (e.g. one made with
``git worktree add /tmp/before HEAD~3``) before this one's is imported, so a
before/after comparison runs side by side: a compiled program no longer
depends on the Python that traced it.

    PYTHONPATH=src python benchmarks/unsliced_parity.py \\
        [--only seed-3,tucker] [--before /tmp/before/src] [--rounds 15] [--tuned]

Prints, per formula, the median and minimum time of each program, the
ratio greedy / einslice (above 1: einslice faster; the minimum is steadier
on a loaded machine), the copy/transpose instructions in each program, and
whether the before and after programs differ at all. With ``--tuned``, also
the program ``tune="measure"`` chooses (tuned once before the timing).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import random
import re
import statistics
import sys
import time

import jax
import jax.numpy as jnp

UNSLICED = ("seed-3", "jt-marginal", "attention", "bilinear", "matrix-chain",
            "trace", "tucker", "cp", "batched-matmul")  # fmt: skip
LIMIT = "1GB"


def _einslice_from(src: str | None):
    """Import einslice (from ``src`` if given), dropping any loaded copy."""
    for name in [m for m in sys.modules if m.split(".")[0] == "einslice"]:
        del sys.modules[name]
    if src is not None:
        sys.path.insert(0, src)
    try:
        return importlib.import_module("einslice"), importlib.import_module(
            "einslice.bench._suite"
        )
    finally:
        if src is not None:
            sys.path.remove(src)


def _formulas(suite_mod, names: list[str]) -> list:
    """The suite's formulas named, and ``seed-6@N``: the seed's formula at n=N."""
    found = [f for f in suite_mod.suite() if f.name in names]
    for name in names:
        if name.startswith("seed-6@"):
            f = suite_mod.seed_formula(int(name.split("@")[1]))
            found.append(dataclasses.replace(f, name=name))
    return found


def _compile(fn, ops):
    return jax.jit(fn).lower(*ops).compile()


def _program(compiled) -> str:
    """The optimized HLO without metadata (to tell whether two programs differ)."""
    text = re.sub(r", metadata=\{[^}]*\}", "", compiled.as_text())
    return text[text.find("\n%") :]


def _copies(compiled) -> int:
    text = compiled.as_text()
    return sum(" copy(" in line or " transpose(" in line for line in text.splitlines())


def _time(programs, ops, rounds: int) -> list[float]:
    for c in programs:
        for _ in range(3):
            jax.block_until_ready(c(*ops))
    t0 = time.perf_counter()
    jax.block_until_ready(programs[-1](*ops))
    inner = max(1, int(0.02 / max(1e-5, time.perf_counter() - t0)))
    times: list[list[float]] = [[] for _ in programs]
    order = list(range(len(programs)))
    for r in range(rounds):
        random.Random(r).shuffle(order)  # no program always runs first
        for k in order:
            c = programs[k]
            t0 = time.perf_counter()
            for _ in range(inner):
                jax.block_until_ready(c(*ops))
            times[k].append((time.perf_counter() - t0) / inner)
    return [(statistics.median(t), min(t)) for t in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(UNSLICED))
    ap.add_argument("--before", default=None, help="src dir of the 'before' code")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--seed", default="", help="also the seed formula at n=..")
    ap.add_argument(
        "--tuned", action="store_true", help="also the tune='measure' choice"
    )
    args = ap.parse_args()
    names = args.only.split(",") + [f"seed-6@{n}" for n in args.seed.split(",") if n]

    def einslice_program(einslice, formula, ops):
        def fn(*o):
            return einslice.einsum(*formula.einsum_args(o), memory_limit=LIMIT)

        return _compile(fn, ops)

    programs: dict[str, dict[str, object]] = {}
    operands = {}
    labels = []
    if args.before:
        einslice, suite_mod = _einslice_from(args.before)
        labels.append("before")
        for f in _formulas(suite_mod, names):
            ops = [jnp.asarray(x) for x in suite_mod.make_operands(f)]
            operands[f.name] = ops
            programs.setdefault(f.name, {})["before"] = einslice_program(
                einslice, f, ops
            )
    einslice, suite_mod = _einslice_from(None)
    labels += ["einslice", "greedy"] + (["tuned"] if args.tuned else [])
    formulas = _formulas(suite_mod, names)
    for f in formulas:
        ops = operands.setdefault(
            f.name, [jnp.asarray(x) for x in suite_mod.make_operands(f)]
        )
        progs = programs.setdefault(f.name, {})
        progs["einslice"] = einslice_program(einslice, f, ops)

        def greedy(*o, f=f):
            return jnp.einsum(*f.einsum_args(o), optimize="greedy")

        progs["greedy"] = _compile(greedy, ops)
        if args.tuned:  # tuned once before timing, as a user's first call is
            args_ = f.einsum_args(ops)
            plan = einslice.plan(*args_, memory_limit=LIMIT, tune="measure")
            progs["tuned"] = _compile(lambda *o, plan=plan: plan(*o), ops)
        if f.name.startswith("seed-6@"):
            from einslice.bench._seed import scan_einsum

            progs["scan_einsum"] = _compile(scan_einsum, ops)
    for f in formulas:
        progs = programs[f.name]
        ops = operands[f.name]
        shown = [k for k in (*labels, "scan_einsum") if k in progs]
        timed = _time([progs[k] for k in shown], ops, args.rounds)
        medians = {k: t[0] for k, t in zip(shown, timed, strict=True)}
        mins = {k: t[1] for k, t in zip(shown, timed, strict=True)}
        cells = [f"{k} {medians[k] * 1e3:.3g} ms (min {mins[k] * 1e3:.3g}; "
                 f"{_copies(progs[k])} copies)"
                 for k in shown]  # fmt: skip
        if "before" in progs:
            same = _program(progs["before"]) == _program(progs["einslice"])
            cells.append("same program" if same else "program changed")
        ratios = [f"{k} {medians['greedy'] / medians[k]:.2f}x "
                  f"(min {mins['greedy'] / mins[k]:.2f}x)"
                  for k in labels if k != "greedy"]  # fmt: skip
        if "scan_einsum" in medians:
            ratios += [f"scan_einsum/{k} {medians['scan_einsum'] / medians[k]:.2f}x "
                       f"(min {mins['scan_einsum'] / mins[k]:.2f}x)"
                       for k in labels if k != "greedy"]  # fmt: skip
        print(f"{f.name:15s} " + " | ".join(cells)
              + "  greedy/einslice: " + ", ".join(ratios), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
