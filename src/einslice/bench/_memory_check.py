"""The memory promise, checked on whatever device runs: random formulas, random limits.

For each random case (formula, shapes, dtype, semiring, limit, value or
gradient), compile ``einslice.einsum`` under ``jax.jit`` at the case's limit
and read XLA's own count of the program's temporaries
(``memory_analysis().temp_size_in_bytes``). The promise holds for the case
when that count is within the limit, or when einslice refuses the limit with
a ``MemoryLimitError`` whose ``smallest_limit`` then compiles within itself.
Nothing runs: only compiles (about 0.1-1 s per small program on a TPU, tens
of ms on a CPU). ``benchmarks/memory_check.py`` is the command line;
``benchmarks/accel_check.py`` runs `check_memory_promise` as one target.

Example:
    >>> cases = random_cases(3, seed=1)
    >>> len(cases), all(c.limit > 0 for c in cases)
    (3, True)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import prod

# Index sizes the formulas draw from: small ones (most formulas), and sides
# around the TPU's tile edges (8, 16, 128: a buffer's last two dimensions are
# padded to tiles there) and a few that are not multiples of anything.
_SIZES = (1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 64, 100, 127, 128, 129, 200, 256)
_SIZE_WEIGHTS = (2, 6, 6, 5, 4, 4, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1)
_DTYPES = ("float32", "float64", "bfloat16", "complex64", "int32")
_DTYPE_WEIGHTS = (8, 4, 3, 2, 3)
_LETTERS = "abcdefgh"
# Each operand and the output hold at most this many entries (compiles stay
# small); the unsliced plan may still hold far more in its intermediates.
_MAX_ENTRIES = 2**15


@dataclass(frozen=True)
class Case:
    """One random check: what is compiled, at which limit (bytes)."""

    subscripts: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    limit: int
    semiring: str = "sum"
    gradient: bool = False

    def __str__(self) -> str:
        what = "grad " if self.gradient else ""
        ring = "" if self.semiring == "sum" else f" {self.semiring}"
        return (
            f"{what}{self.subscripts} {list(self.shapes)} {self.dtype}{ring} "
            f"limit {self.limit}"
        )


@dataclass(frozen=True)
class Outcome:
    """What compiling a `Case` gave.

    Attributes:
        case: the case.
        limit: the limit the program was compiled at: the case's, or the
            ``smallest_limit`` its ``MemoryLimitError`` named.
        refused: einslice refused the case's limit (MemoryLimitError).
        predicted: the plan's predicted peak (derivative's, for a gradient).
        temp: XLA's temporary bytes of the compiled program (None: not known).
        error: what failed instead, e.g. a second refusal ("" when none).
        seconds: the time planning and compiling took.
    """

    case: Case
    limit: int
    refused: bool
    predicted: int
    temp: int | None
    error: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the promise held: compiled within the limit used."""
        return not self.error and self.temp is not None and self.temp <= self.limit

    def line(self) -> str:
        """One line saying what happened."""
        state = "ok  " if self.ok else "FAIL"
        refused = f" refused, smallest_limit {self.limit}" if self.refused else ""
        temp = "?" if self.temp is None else str(self.temp)
        ratio = f" ({self.temp / self.limit:.2f}x)" if self.temp is not None else ""
        error = f" [{self.error}]" if self.error else ""
        return (
            f"{state} {self.case}{refused}: predicted {self.predicted}, "
            f"compiled {temp}{ratio}{error}"
        )


@dataclass
class Report:
    """Every outcome of one run, and how long it took."""

    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failures(self) -> list[Outcome]:
        """The outcomes whose compiled temporaries exceed their limit."""
        return [o for o in self.outcomes if not o.ok]

    def summary(self) -> str:
        """One line: cases, refusals, failures, the worst ratio, the time."""
        known = [o for o in self.outcomes if o.temp is not None]
        worst = max((o.temp / o.limit for o in known), default=0.0)  # type: ignore[operator]
        refused = sum(o.refused for o in self.outcomes)
        return (
            f"{len(self.outcomes)} formulas, {refused} limits refused (then "
            f"compiled at the limit named), {len(self.failures)} over their "
            f"limit; largest compiled/limit {worst:.2f}; {self.seconds:.0f} s"
        )


def random_cases(count: int, seed: int = 0, gradients: bool = True) -> list[Case]:
    """``count`` random cases: formulas of 1-4 operands, varied dtypes and limits.

    Limits are a random fraction (1% to 200%, log-uniform) of the unsliced
    plan's element bytes, or a small absolute limit (100 B to 30 kB: where
    padding and fixed costs dominate). About one case in eight is a
    gradient (float32 and float64), one in ten a "max" or "log" semiring.
    Reproducible from ``seed``.
    """
    rng = random.Random(seed)
    return [_random_case(rng, gradients) for _ in range(count)]


def _random_case(rng: random.Random, gradients: bool) -> Case:
    while True:
        n_ops = rng.choices((1, 2, 3, 4), (2, 5, 3, 2))[0]
        pool = _LETTERS[: rng.randint(1, 6)]
        sizes = {c: rng.choices(_SIZES, _SIZE_WEIGHTS)[0] for c in pool}
        terms = []
        for _ in range(n_ops):
            rank = rng.choices((0, 1, 2, 3, 4), (1, 4, 6, 4, 2))[0]
            term = "".join(rng.choice(pool) for _ in range(rank))
            terms.append(term)
        used = sorted(set("".join(terms)))
        if not used:
            continue
        output = [c for c in used if rng.random() < 0.4]
        rng.shuffle(output)
        shapes = tuple(tuple(sizes[c] for c in t) for t in terms)
        out_entries = prod(sizes[c] for c in output)
        if max(map(prod, shapes)) > _MAX_ENTRIES or out_entries > _MAX_ENTRIES:
            continue
        dtype = rng.choices(_DTYPES, _DTYPE_WEIGHTS)[0]
        semiring = "sum"
        if dtype == "float32" and rng.random() < 0.1:
            semiring = rng.choice(("max", "log"))
        gradient = gradients and dtype in ("float32", "float64") and rng.random() < 0.12
        itemsize = {"bfloat16": 2, "complex64": 8, "float64": 8}.get(dtype, 4)
        entries = out_entries + sum(map(prod, shapes))
        if rng.random() < 0.25:
            limit = int(10 ** rng.uniform(2, 4.5))
        else:
            limit = int(itemsize * entries * 10 ** rng.uniform(-2, 0.3))
        subscripts = ",".join(terms) + "->" + "".join(output)
        return Case(subscripts, shapes, dtype, max(limit, 1), semiring, gradient)


def compiled_temp(fn: Callable, args: Sequence) -> int | None:
    """XLA's temporary bytes of ``jax.jit(fn)`` for ``args`` (None: not known)."""
    import jax

    analysis = jax.jit(fn).lower(*args).compile().memory_analysis()
    return getattr(analysis, "temp_size_in_bytes", None)


def check_case(case: Case, profile=None) -> Outcome:
    """Compile ``case`` at its limit, or at the limit its refusal names.

    ``profile``: the einslice profile to plan for (None: this device's).
    A float64 case needs ``jax_enable_x64`` (`check_memory_promise` sets it).
    """
    import einslice

    start = time.perf_counter()
    limit, refused = case.limit, False
    for attempt in range(2):
        try:
            predicted = _predicted(case, limit, profile)
            temp = compiled_temp(_program(case, limit, profile), _structs(case))
            seconds = time.perf_counter() - start
            return Outcome(case, limit, refused, predicted, temp, "", seconds)
        except einslice.MemoryLimitError as error:
            if attempt:
                why = f"refused again: smallest_limit {error.smallest_limit}"
                seconds = time.perf_counter() - start
                return Outcome(case, limit, refused, 0, None, why, seconds)
            limit, refused = error.smallest_limit, True
    raise AssertionError("unreachable")


def _structs(case: Case) -> list:
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(case.dtype)
    return [jax.ShapeDtypeStruct(s, dtype) for s in case.shapes]


def _predicted(case: Case, limit: int, profile) -> int:
    import einslice

    p = einslice.plan(
        case.subscripts,
        *_structs(case),
        memory_limit=limit,
        semiring=case.semiring,
        profile=profile,
        gradient=case.gradient,
    )
    return p.tangent_cost.peak_bytes if case.gradient else p.peak_bytes


def _program(case: Case, limit: int, profile) -> Callable:
    import jax
    import jax.numpy as jnp

    import einslice

    def value(*ops):
        return einslice.einsum(
            case.subscripts,
            *ops,
            memory_limit=limit,
            semiring=case.semiring,
            profile=profile,
            gradient=case.gradient,
        )

    if not case.gradient:
        return value

    def loss(*ops):
        return jnp.sum(value(*ops))

    return jax.grad(loss, argnums=tuple(range(len(case.shapes))))


def check_memory_promise(
    count: int = 300,
    seed: int = 0,
    seconds: float | None = None,
    profile=None,
    echo: Callable[[str], None] | None = None,
) -> Report:
    """Compile ``count`` random cases (`random_cases`) and check each (`check_case`).

    Args:
        count: how many cases.
        seed: which cases (reproducible).
        seconds: stop starting new cases after this long (None: no bound).
        profile: the einslice profile to plan for (None: this device's).
        echo: called with each outcome's line as it comes (e.g. ``print``).

    Returns:
        The `Report`; the promise holds where ``report.failures`` is empty.
    """
    import jax

    report = Report()
    start = time.perf_counter()
    x64 = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", True)  # float64 cases are float64
    try:
        for case in random_cases(count, seed):
            if seconds is not None and time.perf_counter() - start > seconds:
                break
            try:
                outcome = check_case(case, profile)
            except Exception as error:  # a bug elsewhere: report it as this case's
                why = f"{type(error).__name__}: {error}".splitlines()[0][:200]
                outcome = Outcome(case, case.limit, False, 0, None, why)
            report.outcomes.append(outcome)
            if echo is not None:
                echo(outcome.line())
    finally:
        jax.config.update("jax_enable_x64", x64)
    report.seconds = time.perf_counter() - start
    return report
