"""``einslice uai MODEL.uai --task PR|MAR|MAP|MMAP|SAMPLE``: the UAI solver interface.

Prints the UAI inference competition's output format on stdout (or ``--output``):
``PR`` then log10 Z; ``MAR`` then ``N  card p … card p …``; ``MAP`` then
``N  x_1 … x_N``; ``MMAP`` (with ``--query FILE``) then ``q  v_1 x_1 … v_q x_q``.
``SAMPLE`` draws ``--samples N`` exact samples and writes them as CSV (a
header of variable indices, then one row per sample) or, for an output file
ending in ``.npy``, as a numpy ``(N, variables)`` int32 array. Progress
(reading, planning, running, with the plan's FLOPs and peak memory against the
limit) goes to stderr, one line per phase. Errors are one line on stderr and
exit code 1; ``einslice._cli`` registers this as ``uai``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import TextIO

__all__ = ["add_uai_parser", "run_uai"]

TASKS = ("PR", "MAR", "MAP", "MMAP", "SAMPLE")


def add_uai_parser(subparsers) -> argparse.ArgumentParser:
    """Adds the ``uai`` command to an ``argparse`` subparsers object.

    Args:
        subparsers: what ``ArgumentParser.add_subparsers()`` returned.

    Returns:
        The ``uai`` parser (its arguments land in the namespace `run_uai` reads).
    """
    p = subparsers.add_parser(
        "uai",
        help="exact inference on a .uai graphical model (PR, MAR, MAP, MMAP, SAMPLE)",
        description="Exact inference on a UAI-format MARKOV or BAYES network within "
        "a memory limit: PR (log10 of the partition function / probability of "
        "evidence), MAR (every variable's marginal), MAP (a most probable state), "
        "MMAP (a most probable state of the --query variables, the others summed "
        "out) or SAMPLE (--samples exact samples, as CSV or, to a .npy file, a "
        "numpy array). Prints the UAI competition output format.",
    )
    p.add_argument("model", metavar="MODEL.uai", help="the model (gzip accepted)")
    p.add_argument("--evid", metavar="FILE", default=None, help="an evidence file")
    p.add_argument("--task", choices=TASKS, required=True, type=str.upper)
    p.add_argument(
        "--query",
        metavar="FILE",
        default=None,
        help="MMAP: the query variables ('q v_1 … v_q', e.g. MODEL.uai.query)",
    )
    p.add_argument(
        "--samples",
        metavar="N",
        type=int,
        default=None,
        help="SAMPLE: how many samples to draw",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="SAMPLE: the random seed (default 0)"
    )
    p.add_argument(
        "--memory-limit",
        default=None,
        help="bound on the contraction's temporary memory, e.g. 1GB, 256MB "
        "(default: einslice's device-derived limit)",
    )
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument(
        "--optimize",
        default="auto",
        help="contraction order search: auto (default), greedy, optimal, dp",
    )
    p.add_argument(
        "-o",
        "--output",
        "--out",
        default=None,
        help="write the result here, not to stdout (SAMPLE: .npy for a numpy "
        "array, else CSV)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


def run_uai(args: argparse.Namespace, stdout: TextIO | None = None) -> int:
    """Runs ``einslice uai`` with parsed arguments; see the module docstring.

    Args:
        args: the namespace from the parser `add_uai_parser` made.
        stdout: where the result goes when ``args.output`` is unset (default
            ``sys.stdout``).

    Returns:
        The exit code: 0 on success, 1 on an error (reported on stderr).
    """
    out = sys.stdout if stdout is None else stdout
    progress = _Progress(quiet=getattr(args, "quiet", False))
    try:
        text = _solve(args, progress)
    except Exception as e:
        import einslice

        if not isinstance(e, einslice.EinsliceError):
            raise
        message = " ".join(str(e).split())
        if isinstance(e, einslice.MemoryLimitError):
            from .._internal import limit_too_small

            message = limit_too_small(e, args.memory_limit)
        print(f"einslice uai: error: {message}", file=sys.stderr)
        return 1
    if not isinstance(text, str):  # samples, for a .npy file
        import numpy as np

        np.save(args.output, text)
        progress(f"wrote {args.output}")
    elif args.output:
        with open(args.output, "w") as f:
            f.write(text)
        progress(f"wrote {args.output}")
    else:
        out.write(text)
        out.flush()
    return 0


def _solve(args: argparse.Namespace, progress: _Progress):
    """The result: text, or for SAMPLE to a ``.npy`` file the samples' array."""
    import jax

    from .._internal import CLI_NAMING, memory_limit_bytes
    from . import _infer
    from ._uai import read_evidence, read_query, read_uai

    if args.task == "MMAP" and args.query is None:
        raise _infer.EinsliceError(
            "--task MMAP needs --query FILE, the query variables "
            "('q v_1 … v_q', e.g. MODEL.uai.query)."
        )
    if args.task == "SAMPLE" and (args.samples is None or args.samples < 0):
        raise _infer.EinsliceError(
            f"--task SAMPLE needs --samples N, a count ≥ 0 (got {args.samples})."
        )

    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    limit = args.memory_limit
    if isinstance(limit, str):
        limit = memory_limit_bytes(limit, CLI_NAMING)
    model = read_uai(args.model)
    evidence = read_evidence(args.evid) if args.evid else {}
    progress(
        f"read {model.num_variables} variables, {len(model.factors)} factors"
        + (f", {len(evidence)} observed" if evidence else "")
        + "; planning"
    )
    if args.task in ("MMAP", "SAMPLE"):
        return _mmap_or_sample(args, model, evidence, limit, read_query, progress)
    semiring = "max" if args.task == "MAP" else "log"
    prepared = _infer._prepare(
        model,
        evidence,
        semiring,
        limit,
        args.optimize,
        args.dtype,
        value_only=args.task == "PR",
    )
    on_host = prepared.on_host if args.task == "PR" else prepared.derivative_on_host
    where = " on the host" if on_host else ""
    progress(_describe(prepared, limit) + f"; running{where}")
    if args.task == "PR":
        log_z = _infer._log_partition(prepared)
        progress(f"ln Z = {log_z!r}")
        return f"PR\n{_log10(log_z)}\n"
    if args.task == "MAR":
        result = _infer._marginals(prepared, model, evidence, False)
        progress(f"ln Z = {result.log_partition!r}")
        fields = [str(model.num_variables)]
        for name in model.variables:
            p = result.variables[name]
            fields += [str(len(p)), *(f"{x:.6g}" for x in p)]
        return "MAR\n" + " ".join(fields) + "\n"
    result = _infer._map_assignment(prepared, model, evidence)
    progress(f"MAP log-score (ln) = {result.log_value!r}")
    states = [str(result.assignment[name]) for name in model.variables]
    return "MAP\n" + " ".join([str(model.num_variables), *states]) + "\n"


def _mmap_or_sample(args, model, evidence, limit, read_query, progress):
    import time

    import jax

    from ._mmap import marginal_map
    from ._sample import sample

    if args.task == "MMAP":
        query = read_query(args.query)
        result = marginal_map(
            model,
            query,
            evidence,
            memory_limit=limit,
            optimize=args.optimize,
            dtype=args.dtype,
        )
        clamped = (
            f", {len(result.clamped)} of them clamped to fit the limit "
            f"({result.subproblems} sub-problems)"
            if result.clamped
            else ""
        )
        progress(
            f"{len(query)} query variables{clamped}; MMAP log-value (ln) = "
            f"{result.log_value!r}"
        )
        pairs = [f"{v} {result.assignment[v]}" for v in query]
        return "MMAP\n" + " ".join([str(len(query)), *pairs]) + "\n"
    start = time.perf_counter()
    samples = sample(
        model,
        args.samples,
        evidence,
        key=jax.random.key(args.seed),
        memory_limit=limit,
        optimize=args.optimize,
        dtype=args.dtype,
    )
    seconds = time.perf_counter() - start
    progress(f"drew {len(samples)} samples in {seconds:.2f} s (seed {args.seed})")
    if args.output and str(args.output).endswith(".npy"):
        return samples
    header = ",".join(str(v) for v in range(model.num_variables))
    rows = "\n".join(",".join(map(str, row)) for row in samples.tolist())
    return header + "\n" + rows + ("\n" if len(samples) else "")


def _describe(prepared, limit: int | None) -> str:
    from .._internal import default_memory_limit, format_bytes

    plan, walk = prepared.plan, prepared.walk
    tables = len(prepared.network.tables)
    if walk is not None:  # limit: as given, or the device default
        budget = format_bytes(limit if limit is not None else default_memory_limit())
        return (
            f"{tables} tables in the greedy order, nothing to plan: "
            f"{walk.flops:.3g} FLOPs, at most {format_bytes(walk.peak_bytes)} "
            f"of {budget}"
        )
    if plan is None:
        return f"{tables} tables; nothing to contract (a constant)"
    sliced = (
        ", sliced " + ", ".join(f"{k}→{v}" for k, v in plan.sliced.items())
        if plan.sliced
        else ", no slicing"
    )
    budget = format_bytes(plan.memory_limit) + (" (default)" if limit is None else "")
    decoding = (
        ""
        if prepared.derivative_fits
        else "; its derivative would not fit, so the state is found one "
        "variable at a time (forward passes only)"
    )
    return (
        f"planned {tables} tables: {plan.flops:.3g} FLOPs, peak "
        f"{format_bytes(plan.peak_bytes)} of {budget}{sliced}{decoding}"
    )


def _log10(log_z: float) -> str:
    if log_z == -math.inf:
        return "-inf"
    return f"{log_z / math.log(10):.10g}"


class _Progress:
    """One line per phase on stderr, with the seconds since the start."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.start = time.perf_counter()

    def __call__(self, message: str) -> None:
        if not self.quiet:
            elapsed = time.perf_counter() - self.start
            print(f"einslice uai [{elapsed:6.1f}s] {message}", file=sys.stderr)
            sys.stderr.flush()
