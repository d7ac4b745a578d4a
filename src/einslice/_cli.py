"""The ``einslice`` command line: ``bench``, ``explain`` and ``uai``.

Heavy modules (JAX, the benchmark peers) are imported inside the commands, so
``einslice --help`` and argument errors answer at once. Bad arguments give one
line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
from collections.abc import Sequence
from typing import NoReturn

CPU_SIZES = (64, 128, 256, 512, 1024)
GPU_SIZES = (128, 256, 512, 1024, 2048, 4096, 8192)
SUITE_MEMORY_LIMIT = "1GB"
"""The suite's default limit: peers over it do not count as fitting."""
ROUND_BUDGET = 30.0
"""Seconds one method's timed rounds on one formula may take together: slow
calls get fewer rounds (a call slower than this is measured once). At n=512
on 2 busy cores the seed formula's calls took 3-5 s, and 10 s left 3 rounds."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage block)."""

    def error(self, message: str) -> NoReturn:
        """Print ``<prog>: error: <message>`` and exit with code 2."""
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``einslice`` command line.

    Args:
        argv: the arguments after the program name (default ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success, 2 for bad arguments.

    Example:
        >>> main(["explain", "ij,jk->ik", "--shape", "i=8,j=8,k=8"])  # doctest: +SKIP
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, commands = _build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.error("choose a command: " + ", ".join(commands))
        return commands[args.command](args, argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except KeyboardInterrupt:
        print("einslice: interrupted", file=sys.stderr)
        return 130


def _build_parser() -> tuple[_Parser, dict]:
    """The parser, and the function that runs each command."""
    parser = _Parser(
        prog="einslice",
        description="Any einsum in JAX inside a memory budget: benchmarks and plans.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands = {}

    bench = sub.add_parser(
        "bench",
        help="time einslice against jnp.einsum, the seed's baselines and peers",
        description="Reproduce the seed's table (time, memory, GFLOP/s vs n) or, "
        "with --suite, compare einslice with its peers on ~15 formulas. Writes "
        "Markdown, CSV and a PNG plot into --out.",
    )
    _add_bench_arguments(bench)
    commands["bench"] = lambda args, argv: _run_bench(args, argv, bench)

    explain = sub.add_parser(
        "explain",
        help="print the plan einslice would run, without running it",
        description="Print einslice.plan(...) for FORMULA with the given index "
        "sizes: path, sliced indices and chunks, FLOPs vs naive, peak memory.",
    )
    explain.add_argument("formula", metavar="FORMULA", help="e.g. 'ij,jk->ik'")
    explain.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="INDEX=SIZE[,INDEX=SIZE...]",
        type=_index_sizes,
        help="size of each index, e.g. --shape i=4096 --shape j=512,k=64",
    )
    explain.add_argument(
        "--memory-limit", type=_memory_limit, default=None, help="e.g. 1GB, 512MiB"
    )
    explain.add_argument("--dtype", default="float32", choices=_DTYPES)
    explain.add_argument(
        "--optimize", default="auto", help="auto, greedy, optimal, dp (default auto)"
    )
    explain.add_argument(
        "--precision",
        default=None,
        type=_precision,
        help="the precision= to estimate the time for: default, high, highest, or "
        "a lax.DotAlgorithmPreset name such as TF32_TF32_F32_X3",
    )
    commands["explain"] = lambda args, argv: _run_explain(args, explain)

    try:  # written separately; imported by name so a missing module is not fatal
        pgm_cli = importlib.import_module("einslice.pgm._cli")
        add_uai_parser, run_uai = pgm_cli.add_uai_parser, pgm_cli.run_uai
    except Exception as e:  # not built yet, or broken: say so when asked
        reason = " ".join(f"{type(e).__name__}: {e}".split())
        stub = sub.add_parser("uai", help="(unavailable) inference on .uai models")
        stub.add_argument("rest", nargs=argparse.REMAINDER)
        commands["uai"] = lambda args, argv: _unavailable("uai", reason)
    else:
        add_uai_parser(sub)
        commands["uai"] = lambda args, argv: int(run_uai(args) or 0)
    return parser, commands


_DTYPES = ("float32", "float64")


def _add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``einslice bench``, in the order ``--help`` lists them."""
    _add_workload_arguments(p)
    _add_limit_arguments(p)
    _add_output_arguments(p)


def _add_workload_arguments(p: argparse.ArgumentParser) -> None:
    """What to run: the suite or a sweep, which formulas, sizes and methods."""
    p.add_argument(
        "--suite",
        action="store_true",
        help="run the suite of ~15 formulas against every installed peer",
    )
    p.add_argument(
        "--formula",
        default=None,
        help="sweep this formula instead of the seed's (every index of size n)",
    )
    p.add_argument(
        "--sizes",
        type=_sizes,
        default=None,
        help="comma-separated n (default: CPU 64..1024, GPU 128..8192)",
    )
    p.add_argument(
        "--methods",
        type=_names,
        default=None,
        help="comma-separated methods (see --list); einslice@64MB fixes a limit",
    )
    p.add_argument(
        "--only",
        type=_names,
        default=None,
        help="with --suite: comma-separated formula names (see --list)",
    )
    p.add_argument(
        "--scale",
        type=_positive_float,
        default=1.0,
        help="with --suite: multiply every index size by this (default 1)",
    )


def _add_limit_arguments(p: argparse.ArgumentParser) -> None:
    """How runs are bounded: memory, time, repeats and dtype."""
    p.add_argument(
        "--memory-limit",
        type=_memory_limit,
        default=None,
        help=f"einslice's limit, also given to cotengra and torch_semiring_einsum "
        f"(default: einslice's device default; {SUITE_MEMORY_LIMIT} with --suite)",
    )
    p.add_argument(
        "--device-memory",
        type=_memory_limit,
        default=None,
        help="bytes a run may use before it shows OOM (default: the GPU's "
        "free memory, or half the available RAM on CPU)",
    )
    p.add_argument(
        "--max-seconds",
        type=_positive_float,
        default=60.0,
        help="skip a call estimated (doubled for safety) to take longer; a "
        "method whose call took longer is not called again (default 60)",
    )
    p.add_argument(
        "--rounds",
        "--repeats",
        type=_positive_int,
        default=15,
        help="most timing rounds per size: each round times every method once, "
        "the order rotating; tables give the median and how much the ratios "
        f"varied between rounds (default 15; a method's rounds on one size stop "
        f"after {ROUND_BUDGET:g} s)",
    )
    p.add_argument("--dtype", default="float32", choices=_DTYPES)


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    """Where results go and what is shown: files, progress bar, --list."""
    p.add_argument(
        "--out",
        default="einslice-bench",
        metavar="DIR",
        help="where the .md, .csv and .png go (default ./einslice-bench)",
    )
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bar on stderr"
    )
    p.add_argument(
        "--list", action="store_true", help="list methods and suite formulas, exit"
    )


# -- argument types: each raises ArgumentTypeError with the offending value ----


def _positive_int(text: str) -> int:
    """A positive integer."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def _positive_float(text: str) -> float:
    """A positive number."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def _sizes(text: str) -> list[int]:
    """``64,128,256`` -> [64, 128, 256]."""
    parts = [t.strip() for t in text.split(",") if t.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"{text!r}: give sizes like 64,128,256")
    sizes = []
    for part in parts:
        try:
            sizes.append(_positive_int(part))
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {part!r} is not a positive integer (e.g. 64,128,256)"
            ) from None
    return sizes


def _names(text: str) -> list[str]:
    """``a,b`` -> ['a', 'b'] (non-empty)."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated names")
    return names


def _index_sizes(text: str) -> dict[str, int]:
    """``i=4096,j=512`` -> {'i': 4096, 'j': 512}.

    An index is one character, as in the formula: any but ``,-.>`` and the
    space (``'×=3'``; ``'==3'`` sizes the index ``=``).
    """
    out = {}
    for part in text.split(","):
        index, eq, size = part.rpartition("=")
        index, size = index.strip(" "), size.strip()
        if not eq or len(index) != 1 or index in ",-.>":
            raise argparse.ArgumentTypeError(
                f"{part!r} is not INDEX=SIZE with a one-character index "
                "(e.g. --shape i=4096)"
            )
        try:
            out[index] = _positive_int(size)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"size {size!r} of index {index!r} is not a positive integer"
            ) from None
    return out


def _memory_limit(text: str) -> str:
    """A memory size einslice understands (``512MB``, ``4GiB``, bytes)."""
    from ._plan._memory import memory_limit_bytes

    try:  # argparse's message names the option: the value alone here
        memory_limit_bytes(text, ("{!r}", "leave the option out for its default"))
    except (ValueError, TypeError) as e:
        raise argparse.ArgumentTypeError(" ".join(str(e).split())) from None
    return text


def _precision(text: str) -> str:
    """A ``precision=`` value JAX accepts as a string (checked, kept as given)."""
    from jax import lax

    names = ["default", "high", "highest", "float32", "tensorfloat32", "bfloat16"]
    presets = list(lax.DotAlgorithmPreset.__members__)
    if text.lower() in names:
        return text.lower()
    if text.upper() in presets:
        return text.upper()
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a precision; use one of {', '.join(names + presets)}"
    )


def limit_too_small(error, given: str | None) -> str:
    """A MemoryLimitError's message in CLI words (``--memory-limit``, not Python).

    Example:
        >>> from einslice import MemoryLimitError
        >>> limit_too_small(MemoryLimitError("", smallest_limit=2048), "1kB")
        '--memory-limit 1kB is below the smallest feasible plan (2.05 kB); \
give at least --memory-limit 2048, or leave out --memory-limit for the device \
default.'
    """
    from ._plan._memory import format_bytes

    smallest = error.smallest_limit
    if given is None:
        return (
            f"the device's default memory limit is below the smallest feasible "
            f"plan ({format_bytes(smallest)}); give at least --memory-limit "
            f"{smallest}."
        )
    return (
        f"--memory-limit {given} is below the smallest feasible plan "
        f"({format_bytes(smallest)}); give at least --memory-limit {smallest}, "
        "or leave out --memory-limit for the device default."
    )


# -- commands -----------------------------------------------------------------


def _unavailable(command: str, reason: str) -> int:
    """Say that a command could not be loaded, and why."""
    print(f"einslice {command}: unavailable ({reason})", file=sys.stderr)
    return 1


def _run_explain(args: argparse.Namespace, parser: _Parser) -> int:
    """Print ``str(einslice.plan(...))`` for the formula and index sizes."""
    import einslice

    from ._plan._equation import parse_subscripts

    formula: str = args.formula.replace(" ", "")
    if "..." in formula:
        parser.error(f"{formula!r}: write '...' out as explicit indices to explain")
    sizes: dict[str, int] = {}
    for group in args.shape:
        sizes.update(group)
    try:  # any character but the separators is an index, as in jnp.einsum
        terms, output = parse_subscripts(formula, formula.count(",") + 1)
    except einslice.EinsliceError as e:
        parser.error(str(e))
    used = {str(c) for term in (*terms, output or ()) for c in term}
    missing = sorted(used - set(sizes))
    if missing:
        parser.error(
            f"no size for {', '.join(map(repr, missing))}; "
            f"add e.g. --shape {missing[0]}=1024"
        )
    unknown = sorted(set(sizes) - used)
    if unknown:
        parser.error(f"--shape gives {unknown[0]!r}, which {formula!r} does not use")
    shapes = [tuple(sizes[str(c)] for c in term) for term in terms]
    try:
        plan = einslice.plan(
            formula,
            *shapes,
            memory_limit=args.memory_limit,
            optimize=args.optimize,
            dtype=args.dtype,
            precision=args.precision,
        )
    except einslice.MemoryLimitError as e:
        parser.error(limit_too_small(e, args.memory_limit))
    except einslice.EinsliceError as e:
        parser.error(str(e))
    print(plan)
    if plan.tangent_cost.peak_bytes > plan.memory_limit:
        print(_gradient_note(plan, args.memory_limit))
    return 0


def _gradient_note(plan, given: str | None) -> str:
    """Why gradients of ``plan`` raise, and which ``--memory-limit`` they need."""
    from ._plan._memory import format_bytes

    limit = "the default limit" if given is None else f"--memory-limit {given}"
    needs = format_bytes(plan.tangent_cost.peak_bytes)
    return (
        f"\n  Note: the gradient pass needs {needs}, "
        f"above {limit}: gradients of this plan (jax.grad, jax.jvp) raise "
        f"MemoryLimitError. For gradients give --memory-limit "
        f"{plan.gradient_limit} or more; the forward pass alone fits."
    )


def _run_bench(args: argparse.Namespace, argv: Sequence[str], parser: _Parser) -> int:
    """Run ``einslice bench``: the seed sweep, or the suite with --suite."""
    from .bench import _methods, _suite

    if args.list:
        return _list_bench()
    if args.suite and (args.sizes or args.formula):
        parser.error("--sizes and --formula are for the sweep; with --suite use --only"
                     " and --scale")  # fmt: skip
    if not args.suite and (args.only or args.scale != 1.0):
        parser.error("--only and --scale need --suite")
    default = _methods.SUITE_METHODS if args.suite else _methods.SEED_METHODS
    try:
        methods = _methods.resolve_methods(args.methods or list(default))
    except ValueError as e:
        parser.error(f"--methods: {e}")
    for name in args.methods or ():
        if name.startswith("einslice@"):
            try:
                _memory_limit(name.split("@", 1)[1])
            except argparse.ArgumentTypeError as e:
                parser.error(f"--methods {name!r}: {e}")
    suite_formulas = None
    if args.suite:
        formulas = _suite.suite()
        if args.only:
            known = {f.name: f for f in formulas}
            unknown = [n for n in args.only if n not in known]
            if unknown:
                parser.error(f"--only: unknown formula {unknown[0]!r}; choose from: "
                             + ", ".join(known))  # fmt: skip
            formulas = [known[n] for n in args.only]
        if args.scale != 1.0:
            formulas = [f.scaled(args.scale) for f in formulas]
        suite_formulas = formulas
    formula_text = args.formula or _suite.SEED_SUBSCRIPTS
    if not args.suite:
        try:
            _suite.seed_formula(2, formula_text)
        except ValueError as e:
            parser.error(f"--formula {formula_text!r}: {e}")
    return _bench(args, argv, methods, suite_formulas, formula_text)


def _bench(args, argv, methods, suite_formulas, formula_text) -> int:
    """Measure, report on the terminal, write the files (arguments are valid)."""
    import jax

    from einslice import parse_memory_limit

    from .bench import _measure, _methods, _report, _run

    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    memory_limit = args.memory_limit
    if args.suite and memory_limit is None:
        memory_limit = SUITE_MEMORY_LIMIT
    device = _measure.detect_device(
        None if args.device_memory is None else parse_memory_limit(args.device_memory)
    )
    formulas = suite_formulas
    if formulas is None:
        formulas = _sweep_formulas(args.sizes, device.platform, formula_text)
    _warn_missing(methods)
    gflops = _measure.matmul_gflops()
    ctx = _methods.Context(
        memory_limit,
        None if memory_limit is None else parse_memory_limit(memory_limit),
        device.memory,
    )
    # the sweep times a matmul alongside each n: the median of its rounds over
    # the whole run is the one reference its fractions are taken against
    timed = methods if args.suite else [*methods, _methods.matmul_method()]
    cells = _run.run(
        formulas,
        timed,
        ctx,
        device,
        matmul_gflops=gflops,
        max_seconds=args.max_seconds,
        rounds=args.rounds,
        budget=min(ROUND_BUDGET, args.max_seconds),
        dtype=args.dtype,
        progress=not args.no_progress,
    )
    header = _bench_header(args, argv, formulas, device, gflops, memory_limit)
    markdown, stem, plot = _bench_markdown(
        args, cells, header, methods, formulas, ctx.cache, formula_text
    )
    print(markdown)
    paths = _report.write_outputs(
        args.out, stem, markdown, cells, gflops, plot, device.memory
    )
    print("wrote " + ", ".join(paths))
    return 0


def _sweep_formulas(sizes, platform: str, formula_text: str) -> list:
    """The sweep's formula at each n (the device's default n when not given)."""
    from .bench import _suite

    sizes = sizes or (CPU_SIZES if platform == "cpu" else GPU_SIZES)
    return [_suite.seed_formula(n, formula_text) for n in sizes]


def _warn_missing(methods) -> None:
    """Say on stderr which methods cannot run here, and why."""
    for method in methods:
        why = method.missing()
        if why is not None:
            print(f"einslice bench: {method.name} is missing ({why}); the others "
                  "run", file=sys.stderr)  # fmt: skip


def _bench_header(args, argv, formulas, device, gflops, memory_limit):
    """The report's header: what ran, where, and under which limits."""
    from .bench import _report

    title = (
        "einslice bench --suite"
        if args.suite
        else f"einslice bench: {formulas[0].subscripts}"
    )
    return _report.Header(
        title=title,
        command=shlex.join(["einslice", *argv]),
        device=f"{device.name} ({device.platform})",
        matmul_gflops=gflops,
        device_memory=device.memory,
        memory_limit=memory_limit,
        dtype=args.dtype,
        max_seconds=args.max_seconds,
        rounds=args.rounds,
        load=_load_average(),
    )


def _load_average() -> float | None:
    """The 1-minute load average, or None where the system has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _bench_markdown(
    args, cells, header, methods, formulas, cache: dict, formula_text: str
) -> tuple[str, str, str]:
    """The Markdown report, with the stem of the files and the kind of plot."""
    from .bench import _report, _suite

    if args.suite:
        ours = next((m.name for m in methods if m.ours), "einslice")
        peers = [m.name for m in methods if not m.ours]
        equations = {f.name: f.equation for f in formulas}
        markdown = _report.suite_markdown(cells, header, ours, peers, equations)
        markdown += _tuning_section(cache)
        return markdown, "suite", "suite"
    markdown = _report.sweep_markdown(cells, header)
    stem = "seed" if formula_text == _suite.SEED_SUBSCRIPTS else "sweep"
    return markdown, stem, "sweep"


def _tuning_section(cache: dict) -> str:
    """einslice-tuned's one tuning pass per formula: its time and its pick."""
    rows = []
    for key, value in cache.items():
        if isinstance(key, tuple) and key[0] == "tuning":
            seconds, plan = value
            choice = plan.choice
            picked = "estimate (nothing measured)"
            if choice is not None:
                picked = f"{choice.chosen + 1} of {len(choice.labels)}: "
                picked += choice.labels[choice.chosen]
            rows.append(f"| {key[1]} | {seconds:.2f} | {picked} |")
    if not rows:
        return ""
    head = [
        "",
        "### einslice-tuned: one tuning pass per formula (not in the times above)",
        "",
        "| formula | tuning (s) | candidate chosen |",
        "|---|---|---|",
    ]
    return "\n".join(head + rows) + "\n"


def _list_bench() -> int:
    """Print the methods and the suite's formulas."""
    from .bench import _methods, _suite

    print("methods:")
    for name, method in _methods.all_methods().items():
        print(f"  {name:24s} {method.description}")
    print(f"  {'einslice@LIMIT':24s} einslice.einsum with memory_limit=LIMIT")
    print("suite formulas:")
    formulas = _suite.suite()
    width = max(len(f.equation) for f in formulas)
    for f in formulas:
        print(f"  {f.name:16s} {f.equation:{width}s}  {f.description}")
    return 0
