"""The methods a benchmark compares: einslice, the seed's baselines and peers.

Every peer is imported lazily, when it is about to run: a missing one is
reported (with the pip command that installs it) and the others still run.
A method *prepares* a :class:`Runner` for one formula and its operands, doing
the work that is not timed (path search, compilation) and saying how much
memory the run needs, so that the caller can refuse to run what does not fit.
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ._seed import SEED_SUBSCRIPTS
from ._suite import Formula

# einslice is installed from its clone (it is not on PyPI): the bench extra there.
PIP_HINT = "pip install -e '.[bench]' in einslice's clone"


class NotApplicable(Exception):  # a status, not an error
    """The method cannot express this formula (the message says why)."""


class OutOfMemory(Exception):  # a status, not an error
    """The device cannot hold the program: XLA said RESOURCE_EXHAUSTED.

    Attributes:
        needs: the bytes XLA failed to allocate, when its message says; else None.
    """

    def __init__(self, message: str, needs: int | None) -> None:
        super().__init__(message)
        self.needs = needs


_XLA_ERRORS = ("XlaRuntimeError", "JaxRuntimeError")
_BYTES = re.compile(r"(\d+)\s*(?:bytes|B)\b")
_SIZED = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT])(i?)B\b")


def out_of_memory(error: BaseException) -> OutOfMemory | None:
    """``error`` as an `OutOfMemory` when it is XLA running out of memory.

    XLA raises its runtime error with RESOURCE_EXHAUSTED (or "Out of memory")
    when a GPU cannot hold a program, also while compiling (its autotuner
    allocates scratch buffers); the largest size the message names is taken
    as what the program needs.

    Example:
        >>> class XlaRuntimeError(RuntimeError): ...
        >>> e = XlaRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying "
        ...                     "to allocate 8589934592 bytes.")
        >>> out_of_memory(e).needs
        8589934592
        >>> out_of_memory(ValueError("Out of memory")) is None  # not XLA's
        True
    """
    names = {c.__name__ for c in type(error).__mro__}
    text = str(error)
    if not names & set(_XLA_ERRORS):
        return None
    if "RESOURCE_EXHAUSTED" not in text and "out of memory" not in text.lower():
        return None
    sizes = [int(b) for b in _BYTES.findall(text)]
    for number, unit, binary in _SIZED.findall(text):
        base = 1024 if binary else 1000
        sizes.append(int(float(number) * base ** ("KMGT".index(unit) + 1)))
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return OutOfMemory(first, max(sizes) if sizes else None)


@dataclass
class Operands:
    """One input in the forms the methods want, each converted once, on demand."""

    numpy: list[np.ndarray]

    @cached_property
    def jax(self) -> list[object]:
        """The operands on JAX's default device."""
        import jax

        return [jax.device_put(x) for x in self.numpy]

    @cached_property
    def torch(self) -> list[object]:
        """The operands as torch tensors sharing numpy's memory."""
        # torch comes with the bench extra, absent where CI type-checks
        import torch  # pyright: ignore[reportMissingImports]

        return [torch.from_numpy(x) for x in self.numpy]

    @property
    def nbytes(self) -> int:
        """Total bytes of the operands."""
        return sum(x.nbytes for x in self.numpy)


@dataclass
class Context:
    """What every method of one benchmark run shares.

    Attributes:
        memory_limit: what the user passed as ``--memory-limit`` (None: default).
        memory_limit_bytes: the same in bytes, None when not given.
        device_memory: bytes one program may use on this device.
        cache: per-formula work shared between methods (cotengra's tree).
    """

    memory_limit: str | int | None
    memory_limit_bytes: int | None
    device_memory: int
    cache: dict[object, object] = field(default_factory=dict)


@dataclass
class Runner:
    """A method prepared for one input.

    Attributes:
        call: runs once, blocks until done, returns the result.
        memory: temporary bytes of the run when known before running (XLA's
            compiled count), else None: then measured while it runs.
        memory_source: how ``memory`` is known: ``"compiled"``, ``"tracemalloc"``
            (numpy allocations, exact) or ``"rss"`` (peak resident memory growth,
            a lower bound).
        needs: bytes the run needs in all (temporaries, operands, result), the
            figure the out-of-memory guard checks; an estimate for peers.
        limit: the byte limit this run was given, when it has its own (einslice's
            resolved ``memory_limit``); None: the benchmark's ``--memory-limit``.
        flops: the work of this run when it is not the formula's (a reference
            computation timed alongside, such as a matmul).
    """

    call: Callable[[], object]
    memory: int | None
    memory_source: str
    needs: int
    limit: int | None = None
    flops: float | None = None


@dataclass(frozen=True)
class Method:
    """One way to compute an einsum.

    Attributes:
        name: the name on the command line and in tables.
        description: one line for ``--help`` and the README.
        prepare: builds a :class:`Runner` (raises :class:`NotApplicable`).
        modules: imported lazily; when one is missing the method is reported.
        naive: True when the work is the full nested loop (vmap_einsum and the
            like), for estimating run times.
        speed: the fraction of the matmul throughput the method reaches at best
            on its work (a ballpark measured on CPU); it turns the work into a
            first time estimate before the method has run once.
        ours: True for einslice's own methods (they are not "peers").
        check: False for a reference that does not compute the formula (its
            result is not compared with the others').
    """

    name: str
    description: str
    prepare: Callable[[Formula, Operands, Context], Runner]
    modules: tuple[str, ...] = ()
    naive: bool = False
    ours: bool = False
    speed: float = 1.0
    check: bool = True

    def missing(self) -> str | None:
        """Why the method cannot be imported, or None when it can."""
        for module in self.modules:
            try:
                importlib.import_module(module)
            except ImportError as e:
                return f"{e}; {PIP_HINT}"
        return None


# -- JAX methods: compiled once, memory from XLA --------------------------------


def _jax_runner(fn: Callable[..., object], args: Sequence[object]) -> Runner:
    """Compile ``fn`` for the arguments; read its memory from XLA's analysis.

    XLA's out-of-memory, while compiling or running, is raised as `OutOfMemory`.
    """
    import jax

    try:
        compiled = jax.jit(fn).lower(*args).compile()
    except Exception as e:
        oom = out_of_memory(e)
        if oom is not None:
            raise oom from e
        raise
    analysis = compiled.memory_analysis()
    if analysis is None:  # a backend without the analysis: count operands only
        temp = None
        needs = sum(int(getattr(a, "nbytes", 0)) for a in args)
    else:
        temp = int(analysis.temp_size_in_bytes)
        needs = (
            temp
            + int(analysis.argument_size_in_bytes)
            + int(analysis.output_size_in_bytes)
        )

    def call() -> object:
        try:
            return jax.block_until_ready(compiled(*args))
        except Exception as e:
            oom = out_of_memory(e)
            if oom is not None:
                raise OutOfMemory(str(oom), oom.needs or needs) from e
            raise

    return Runner(call, temp, "compiled", needs)


def einslice_method(
    memory_limit: str | int | None = None,
    precision: str | None = None,
    name: str | None = None,
    tune: str = "estimate",
) -> Method:
    """``einslice.einsum`` under a memory limit (None: the run's ``--memory-limit``).

    Args:
        memory_limit: a fixed limit for this method, e.g. ``"64MB"``.
        precision: passed through (``"highest"`` for full float32 on GPUs).
        name: the table name; default ``einslice`` with the limit and precision.
        tune: "estimate" (the time model's plan, no measuring) or "measure":
            one tuning pass while preparing (not timed; its duration is kept
            in ``ctx.cache[("tuning", formula.name)]``), then the chosen plan
            is timed.

    Returns:
        The method.
    """
    if name is None:
        name = _einslice_name(memory_limit, precision)

    def prepare(formula: Formula, operands: Operands, ctx: Context) -> Runner:
        limit = memory_limit if memory_limit is not None else ctx.memory_limit
        if tune == "measure":
            return _measured_einslice(formula, operands, ctx, limit, precision)
        return _estimated_einslice(formula, operands, limit, precision)

    description = "einslice.einsum (planned, sliced, one program)"
    if tune == "measure":
        description = "einslice, tune='measure' (top candidates timed once, fastest)"
    return Method(name, description, prepare, ours=True)


def _einslice_name(memory_limit: str | int | None, precision: str | None) -> str:
    """``einslice``, then ``@limit`` and ``[precision]`` when given."""
    name = "einslice"
    if memory_limit is not None:
        name += f"@{memory_limit}"
    if precision is not None:
        name += f"[{precision}]"
    return name


def _measured_einslice(
    formula: Formula,
    operands: Operands,
    ctx: Context,
    limit: str | int | None,
    precision: str | None,
) -> Runner:
    """One tuning pass (its time kept in ``ctx.cache``), then the chosen plan."""
    import einslice

    args = formula.einsum_args(operands.jax)
    start = time.perf_counter()
    tuned = einslice.plan(*args, memory_limit=limit, tune="measure")
    ctx.cache[("tuning", formula.name)] = (time.perf_counter() - start, tuned)
    runner = _jax_runner(lambda *ops: tuned(*ops, precision=precision), operands.jax)
    runner.limit = int(tuned.memory_limit)
    return runner


def _estimated_einslice(
    formula: Formula,
    operands: Operands,
    limit: str | int | None,
    precision: str | None,
) -> Runner:
    """``einslice.einsum`` with the time model's plan, compiled in one program."""
    import einslice

    args = formula.einsum_args(operands.jax)

    def fn(*ops: object) -> object:
        return einslice.einsum(
            *formula.einsum_args(ops),
            memory_limit=limit,
            precision=precision,
            tune="estimate",
        )

    runner = _jax_runner(fn, operands.jax)
    # the limit einslice resolved (None: its device default), to check against
    plan = einslice.plan(*args, memory_limit=limit)
    runner.limit = int(plan.memory_limit)
    return runner


def _naive_einsum(formula: Formula, operands: Operands, ctx: Context) -> Runner:
    """einslice.naive_einsum: the seed's vmap_einsum for any formula."""
    import einslice

    if formula.subscripts is None:
        raise NotApplicable("naive_einsum takes subscripts strings")
    subscripts = formula.subscripts
    return _jax_runner(
        lambda *ops: einslice.naive_einsum(subscripts, *ops), operands.jax
    )


def _jnp_einsum(optimize: str) -> Callable[[Formula, Operands, Context], Runner]:
    """jnp.einsum with one ``optimize`` setting."""

    def prepare(formula: Formula, operands: Operands, ctx: Context) -> Runner:
        import jax.numpy as jnp

        return _jax_runner(
            lambda *ops: jnp.einsum(*formula.einsum_args(ops), optimize=optimize),
            operands.jax,
        )

    return prepare


def _seed_baseline(which: str) -> Callable[[Formula, Operands, Context], Runner]:
    """The seed's vmap_einsum or scan_einsum (its one formula only)."""

    def prepare(formula: Formula, operands: Operands, ctx: Context) -> Runner:
        from . import _seed

        if formula.subscripts != SEED_SUBSCRIPTS:
            raise NotApplicable(f"{which} is written for {SEED_SUBSCRIPTS!r} only")
        return _jax_runner(getattr(_seed, which), operands.jax)

    return prepare


# -- peers that do not compile: memory measured while they run -----------------


def _symbols(formula: Formula) -> str:
    """The formula as one string of opt_einsum symbols (any number of indices)."""
    import opt_einsum

    ins, out = formula.int_terms()
    lhs = ",".join("".join(opt_einsum.get_symbol(i) for i in term) for term in ins)
    return lhs + "->" + "".join(opt_einsum.get_symbol(i) for i in out)


def _symbols_of(formula: Formula) -> list[str]:
    """The opt_einsum symbol of each of the formula's labels, in label order."""
    import opt_einsum

    return [opt_einsum.get_symbol(i) for i in range(len(formula.labels))]


def _largest_intermediate(formula: Formula, itemsize: int) -> int:
    """Bytes of the largest intermediate on opt_einsum's default path."""
    import opt_einsum

    _, info = opt_einsum.contract_path(
        _symbols(formula), *formula.shapes, shapes=True, optimize="auto"
    )
    return int(info.largest_intermediate) * itemsize


def _result_bytes(formula: Formula, operands: Operands) -> int:
    """Bytes of the result."""
    return int(np.prod(formula.out_shape, dtype=np.int64)) * _itemsize(operands)


def _itemsize(operands: Operands) -> int:
    """Bytes per element of the first operand."""
    return operands.numpy[0].itemsize


def _opt_einsum(formula: Formula, operands: Operands, ctx: Context) -> Runner:
    """opt_einsum.contract on numpy arrays, path found once before timing."""
    import opt_einsum

    expr = opt_einsum.contract_expression(
        _symbols(formula), *formula.shapes, optimize="auto"
    )
    arrays = operands.numpy
    needs = (
        _largest_intermediate(formula, _itemsize(operands))
        + operands.nbytes
        + _result_bytes(formula, operands)
    )
    return Runner(lambda: expr(*arrays, backend="numpy"), None, "tracemalloc", needs)


def _cotengra_tree(formula: Formula, operands: Operands, ctx: Context) -> object:
    """The sliced contraction tree cotengra finds under the run's memory limit.

    cotengra bounds the largest intermediate (in elements); a step holds two
    operands and a result, so the target is a third of the byte limit. With no
    ``--memory-limit`` the limit einslice would choose is used.
    """
    key = ("cotengra", formula)
    if key not in ctx.cache:
        import cotengra

        limit = ctx.memory_limit_bytes
        if limit is None:
            limit = _einslice_default_limit(formula, ctx)
        target = max(1, limit // (3 * _itemsize(operands)))
        lhs, out = _symbols(formula).split("->")
        sizes = formula.size_dict
        options: dict[str, object] = {
            "methods": ["greedy"],  # "labels" forks worker processes (unsafe with JAX)
            "slicing_reconf_opts": {"target_size": target},
            "max_repeats": 64,
            "max_time": 10,
            "parallel": False,
            "progbar": False,
        }
        optimizer = cotengra.HyperOptimizer(**options)  # type: ignore[arg-type]
        symbol_sizes = {
            s: sizes[label] for s, label in zip(_symbols_of(formula), formula.labels,
                                                 strict=True)
        }  # fmt: skip
        ctx.cache[key] = optimizer.search(lhs.split(","), out, symbol_sizes)
    return ctx.cache[key]


def _einslice_default_limit(formula: Formula, ctx: Context) -> int:
    """The memory limit einslice resolves ``memory_limit=None`` to here."""
    try:
        import einslice

        limit = einslice.plan(*formula.einsum_args(formula.shapes)).memory_limit
        if isinstance(limit, int) and limit > 0:
            return limit
    except Exception:  # any failure: fall back to the device
        pass
    return ctx.device_memory


def _cotengra(backend: str) -> Callable[[Formula, Operands, Context], Runner]:
    """Run cotengra's sliced contraction on the numpy or jax backend."""

    def prepare(formula: Formula, operands: Operands, ctx: Context) -> Runner:
        tree = _cotengra_tree(formula, operands, ctx)
        arrays = operands.numpy if backend == "numpy" else operands.jax
        needs = (
            int(tree.peak_size()) * _itemsize(operands)  # type: ignore[attr-defined]
            + operands.nbytes
            + _result_bytes(formula, operands)
        )

        def call() -> object:
            result = tree.contract(arrays, backend=backend)  # type: ignore[attr-defined]
            if backend == "jax":
                import jax

                jax.block_until_ready(result)
            return result

        return Runner(call, None, "tracemalloc" if backend == "numpy" else "rss", needs)

    return prepare


def _torch_einsum(formula: Formula, operands: Operands, ctx: Context) -> Runner:
    """torch.einsum (CPU build), which follows opt_einsum's path."""
    # torch comes with the bench extra, absent where CI type-checks
    import torch  # pyright: ignore[reportMissingImports]

    letters = formula.letters()
    if letters is None:
        raise NotApplicable("torch.einsum takes at most 52 distinct indices")
    tensors = operands.torch
    needs = (
        _largest_intermediate(formula, _itemsize(operands))
        + operands.nbytes
        + _result_bytes(formula, operands)
    )
    return Runner(lambda: torch.einsum(letters, *tensors), None, "rss", needs)


def _torch_semiring(formula: Formula, operands: Operands, ctx: Context) -> Runner:
    """torch_semiring_einsum: blocked naive summation, block sized to the limit.

    Its ``AutomaticBlockSize(max_cpu_bytes=...)`` does not bound CPU memory in
    the installed version (``ij,ik,jk->ij`` at n=512 takes 537 MB whatever the
    bound), so the block is an int: a block of ``b`` values of each of the
    ``S`` summed indices holds about ``4 * itemsize * P * b**S`` bytes, where
    ``P`` is the product of the output sizes (measured here).
    """
    # the bench extra's, absent where CI type-checks
    import torch_semiring_einsum as tse  # pyright: ignore[reportMissingImports]

    letters = formula.letters()
    if letters is None:
        raise NotApplicable("torch_semiring_einsum takes letter subscripts only")
    limit = ctx.memory_limit_bytes or 2**30
    sizes = formula.size_dict
    summed = [sizes[label] for label in sizes if label not in formula.output]
    per_block = 4 * _itemsize(operands) * int(np.prod(formula.out_shape))
    block = 1
    if summed:
        block = int((limit / per_block) ** (1 / len(summed))) if per_block else 1
        block = min(max(1, block), max(summed))
    work = per_block * int(np.prod([min(block, s) for s in summed]))
    equation = tse.compile_equation(letters)
    tensors = operands.torch
    needs = work + operands.nbytes + _result_bytes(formula, operands)
    return Runner(
        lambda: tse.einsum(equation, *tensors, block_size=block),
        None, "rss", needs,
    )  # fmt: skip


def matmul_method(n: int | None = None, precision: str | None = None) -> Method:
    """A float32 ``n x n`` matmul timed alongside the formula (``matmul``).

    Its GFLOP/s, measured in the same rounds as the other methods, is the
    device's throughput under the same load: the fair denominator on a shared
    machine. ``n`` defaults to 2048 on CPU, 8192 on accelerators.
    """

    def prepare(formula: Formula, operands: Operands, ctx: Context) -> Runner:
        import jax
        import jax.numpy as jnp

        size = n or (2048 if jax.default_backend() == "cpu" else 8192)
        a = jnp.ones((size, size), jnp.float32)
        runner = _jax_runner(lambda x, y: jnp.matmul(x, y, precision=precision), [a, a])
        runner.flops = 2.0 * size**3
        return runner

    name = "matmul" if precision is None else f"matmul[{precision}]"  # REFERENCE
    return Method(name, "float32 matmul reference", prepare, check=False)


def all_methods() -> dict[str, Method]:
    """Every method by name, in the order tables show them."""
    methods = [
        einslice_method(),
        einslice_method(name="einslice-tuned", tune="measure"),
        Method("naive_einsum", "einslice.naive_einsum (vmap/scan, no intermediate)",
               _naive_einsum, naive=True, ours=True, speed=0.1),
        Method("jnp.einsum", "jnp.einsum, default optimize", _jnp_einsum("auto")),
        Method("jnp.einsum-greedy", 'jnp.einsum(optimize="greedy")',
               _jnp_einsum("greedy")),
        Method("vmap_einsum", "the seed's vmap_einsum (seed formula only)",
               _seed_baseline("vmap_einsum"), naive=True, speed=0.1),
        Method("scan_einsum", "the seed's scan_einsum (seed formula only)",
               _seed_baseline("scan_einsum")),
        Method("opt_einsum", "opt_einsum.contract on numpy", _opt_einsum,
               ("opt_einsum",)),
        Method("cotengra-numpy", "cotengra sliced contraction, numpy backend",
               _cotengra("numpy"), ("cotengra",)),
        Method("cotengra-jax", "cotengra sliced contraction, jax backend",
               _cotengra("jax"), ("cotengra",)),
        Method("torch.einsum", "torch.einsum (CPU)", _torch_einsum, ("torch",)),
        Method("torch_semiring_einsum", "torch_semiring_einsum.einsum (blocked)",
               _torch_semiring, ("torch", "torch_semiring_einsum"), naive=True,
               speed=0.01),
    ]  # fmt: skip
    return {m.name: m for m in methods}


SEED_METHODS = ("jnp.einsum", "vmap_einsum", "scan_einsum", "einslice")
"""The seed table's columns: the blog post's methods and einslice."""

SUITE_METHODS = (
    "einslice",
    "einslice-tuned",
    "jnp.einsum",
    "jnp.einsum-greedy",
    "scan_einsum",
    "opt_einsum",
    "cotengra-numpy",
    "cotengra-jax",
    "torch.einsum",
    "torch_semiring_einsum",
)
"""The suite's columns: einslice and every peer."""


def resolve_methods(names: list[str]) -> list[Method]:
    """Look up method names; ``einslice@64MB`` fixes einslice's memory limit.

    Raises:
        ValueError: a name is unknown; the message lists the valid names.
    """
    known = all_methods()
    methods = []
    for name in names:
        if name in known:
            methods.append(known[name])
        elif name.startswith("einslice@") and len(name) > len("einslice@"):
            methods.append(einslice_method(memory_limit=name.split("@", 1)[1]))
        else:
            valid = ", ".join([*known, "einslice@LIMIT"])
            raise ValueError(f"unknown method {name!r}; choose from: {valid}")
    return methods
