"""The memory promise, checked on whatever device runs: random formulas, random limits.

For each random case (formula, shapes, dtype, semiring, value or gradient),
a limit is placed against the plan's own figures on this device: most
between the smallest limit it accepts and twice its unsliced peak (so the
plan is accepted, and sliced where the limit is below that peak), some
below the smallest (so it is refused). Then ``einslice.einsum`` is compiled
under ``jax.jit`` at that limit and XLA's own count of the program's
temporaries (``memory_analysis().temp_size_in_bytes``) is read. The promise
holds for the case when that count is within the limit, or when einslice
refuses the limit with a ``MemoryLimitError`` whose ``smallest_limit`` then
compiles within itself. Nothing runs: only compiles (~0.2-0.5 s a small
program on a TPU v5e or on a 2-core CPU). ``benchmarks/memory_check.py`` is
the command line; ``benchmarks/accel_check.py`` runs `check_memory_promise`
as one target.

Example:
    >>> cases = random_cases(3, seed=1)
    >>> len(cases), all(-1 <= c.position <= 1 for c in cases)
    (3, True)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import prod

# Index sizes the formulas draw from: small ones (most formulas), sides
# around the TPU's tile edges (8, 16, 128: a buffer's last two dimensions are
# padded to tiles there), a few that are not multiples of anything, and
# (one formula in four) larger ones, whose intermediates a limit slices.
_SIZES = (1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 64, 100, 127, 128, 129, 200, 256)
_SIZE_WEIGHTS = (2, 6, 6, 5, 4, 4, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1)
_LARGE_SIZES = (24, 32, 48, 64, 96, 100, 128, 200, 256, 384, 512)
_DTYPES = ("float32", "float64", "bfloat16", "complex64", "int32")
_DTYPE_WEIGHTS = (8, 4, 3, 2, 3)
_LETTERS = "abcdefgh"
# Each operand and the output hold at most this many entries (compiles stay
# small); the unsliced plan may still hold far more in its intermediates.
_MAX_ENTRIES = 2**15
_MAX_LARGE_ENTRIES = 2**18
# Large float64 contractions: the TPU emulates float64, and its products
# can hold many times their sides (`ij,ij->` on 2048x2048: 16x one side).
_LARGE_WIDE = (
    ("ij,ij->", ((1024, 1024), (1024, 1024))),
    ("ij,jk->ik", ((512, 512), (512, 512))),
    ("bij,bjk->bik", ((16, 128, 128), (16, 128, 128))),
    ("ij,ik,jk->", ((256, 256), (256, 256), (256, 256))),
    ("i,j->ij", ((2048,), (2048,))),
)


@dataclass(frozen=True)
class Case:
    """One random check: what is compiled, and where its limit lies.

    ``position`` places the limit against the plan's figures on the device
    that runs the check (`limit_for`): in [0, 1] from the smallest limit
    einslice accepts (0) to twice the unsliced plan's peak (1), log-scaled;
    below 0 under the smallest (-1: a twentieth of it), to be refused. A
    ``limit`` given instead is taken as it is.
    """

    subscripts: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    position: float = 0.5
    semiring: str = "sum"
    gradient: bool = False
    limit: int | None = None

    def __str__(self) -> str:
        what = "grad " if self.gradient else ""
        ring = "" if self.semiring == "sum" else f" {self.semiring}"
        return f"{what}{self.subscripts} {list(self.shapes)} {self.dtype}{ring}"


@dataclass(frozen=True)
class Outcome:
    """What compiling a `Case` gave.

    Attributes:
        case: the case.
        asked: the limit the case asked for (`limit_for`).
        limit: the limit the program was compiled at: ``asked``, or the
            ``smallest_limit`` its ``MemoryLimitError`` named.
        refused: einslice refused ``asked`` (MemoryLimitError).
        predicted: the plan's predicted peak (derivative's, for a gradient).
        temp: XLA's temporary bytes of the compiled program (None: not known).
        error: what failed instead, e.g. a second refusal ("" when none).
        seconds: the time planning and compiling took.
        sliced: the plan compiled slices (its derivative's, for a gradient).
    """

    case: Case
    asked: int
    limit: int
    refused: bool
    predicted: int
    temp: int | None
    error: str = ""
    seconds: float = 0.0
    sliced: bool = False

    @property
    def ok(self) -> bool:
        """Whether the promise held: compiled within the limit used."""
        return not self.error and self.temp is not None and self.temp <= self.limit

    @property
    def ratio(self) -> float:
        """Compiled temporaries over the limit used (0 when not known)."""
        return 0.0 if self.temp is None else self.temp / self.limit

    def line(self) -> str:
        """One line saying what happened."""
        state = "ok  " if self.ok else "FAIL"
        how = f"refused, smallest_limit {self.limit}" if self.refused else "accepted"
        how += ", sliced" if self.sliced else ""
        temp = "?" if self.temp is None else str(self.temp)
        error = f" [{self.error}]" if self.error else ""
        return (
            f"{state} {self.case} limit {self.asked} {how}: predicted "
            f"{self.predicted}, compiled {temp} ({self.ratio:.2f}x){error}"
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
        """One line: cases accepted and refused, failures, worst ratios, time."""
        accepted = [o for o in self.outcomes if not o.refused]
        refused = [o for o in self.outcomes if o.refused]
        sliced = sum(o.sliced for o in accepted)
        worst = max((o.ratio for o in accepted), default=0.0)
        worst_refused = max((o.ratio for o in refused), default=0.0)
        return (
            f"{len(self.outcomes)} formulas: {len(accepted)} limits accepted "
            f"({sliced} sliced; largest compiled/limit {worst:.2f}), "
            f"{len(refused)} refused and compiled at the limit named (largest "
            f"{worst_refused:.2f}); {len(self.failures)} over their limit; "
            f"{self.seconds:.0f} s"
        )


def random_cases(count: int, seed: int = 0, gradients: bool = True) -> list[Case]:
    """``count`` random cases: formulas of 1-4 operands, varied dtypes and limits.

    One formula in four has larger sides (intermediates a limit slices), one
    in twenty is a large float64 contraction; about one case in eight is a
    gradient (float32, float64), one float32 case in ten a "max" or "log"
    semiring; one limit in six lies below the smallest accepted. Pure and
    reproducible from ``seed`` (the limits are placed by `limit_for`).
    """
    rng = random.Random(seed)
    return [_random_case(rng, gradients) for _ in range(count)]


def _random_case(rng: random.Random, gradients: bool) -> Case:
    position = rng.uniform(-1.0, 0.0) if rng.random() < 1 / 6 else rng.random()
    if rng.random() < 0.05:
        subscripts, shapes = rng.choice(_LARGE_WIDE)
        return Case(subscripts, shapes, "float64", position)
    large = rng.random() < 0.25
    sizes_from = _LARGE_SIZES if large else _SIZES
    weights = None if large else _SIZE_WEIGHTS
    cap = _MAX_LARGE_ENTRIES if large else _MAX_ENTRIES
    while True:
        n_ops = rng.choices((1, 2, 3, 4), (2, 5, 3, 2))[0]
        pool = _LETTERS[: rng.randint(1, 6)]
        sizes = {c: rng.choices(sizes_from, weights)[0] for c in pool}
        terms = []
        for _ in range(n_ops):
            rank = rng.choices((0, 1, 2, 3, 4), (1, 4, 6, 4, 2))[0]
            terms.append("".join(rng.choice(pool) for _ in range(rank)))
        used = sorted(set("".join(terms)))
        if not used:
            continue
        output = [c for c in used if rng.random() < 0.4]
        rng.shuffle(output)
        shapes = tuple(tuple(sizes[c] for c in t) for t in terms)
        if max(map(prod, shapes)) > cap or prod(sizes[c] for c in output) > cap:
            continue
        dtype = rng.choices(_DTYPES, _DTYPE_WEIGHTS)[0]
        semiring = "sum"
        if dtype == "float32" and rng.random() < 0.1:
            semiring = rng.choice(("max", "log"))
        gradient = gradients and dtype in ("float32", "float64") and rng.random() < 0.12
        subscripts = ",".join(terms) + "->" + "".join(output)
        return Case(subscripts, shapes, dtype, position, semiring, gradient)


def limit_for(case: Case, profile=None) -> int:
    """The limit ``case`` asks for on this device (see `Case.position`).

    The smallest limit einslice accepts (``MemoryLimitError.smallest_limit``
    at a limit of one byte) and the unsliced plan's peak (at no limit) are
    the plan's own figures for ``profile`` (None: this device's).
    """
    import einslice

    if case.limit is not None:
        return case.limit
    try:
        _plan(case, 1, profile)
        smallest = 1
    except einslice.MemoryLimitError as error:
        smallest = error.smallest_limit
    whole = _peak(case, _plan(case, None, profile))
    top = max(2 * whole, smallest)
    if case.position < 0:
        return max(1, int(smallest * 20.0**case.position))
    return max(smallest, int(smallest * (top / smallest) ** case.position))


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
    asked = limit = limit_for(case, profile)
    refused = False
    for attempt in range(2):
        try:
            plan = _plan(case, limit, profile)
            temp = compiled_temp(_program(case, limit, profile), _structs(case))
            seconds = time.perf_counter() - start
            chunks = plan.tangent_chunks if case.gradient else plan.chunks
            return Outcome(
                case,
                asked,
                limit,
                refused,
                _peak(case, plan),
                temp,
                "",
                seconds,
                bool(chunks),
            )
        except einslice.MemoryLimitError as error:
            if attempt:
                why = f"refused again: smallest_limit {error.smallest_limit}"
                seconds = time.perf_counter() - start
                return Outcome(case, asked, limit, refused, 0, None, why, seconds)
            limit, refused = error.smallest_limit, True
    raise AssertionError("unreachable")


def _structs(case: Case) -> list:
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(case.dtype)
    return [jax.ShapeDtypeStruct(s, dtype) for s in case.shapes]


def _plan(case: Case, limit: int | None, profile):
    import einslice

    return einslice.plan(
        case.subscripts,
        *_structs(case),
        memory_limit=limit,
        semiring=case.semiring,
        profile=profile,
        gradient=case.gradient,
    )


def _peak(case: Case, plan) -> int:
    return plan.tangent_cost.peak_bytes if case.gradient else plan.peak_bytes


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
    x64 = bool(jax.config.read("jax_enable_x64"))
    jax.config.update("jax_enable_x64", True)  # float64 cases are float64
    try:
        for case in random_cases(count, seed):
            if seconds is not None and time.perf_counter() - start > seconds:
                break
            try:
                outcome = check_case(case, profile)
            except Exception as error:  # a bug elsewhere: report it as this case's
                why = f"{type(error).__name__}: {error}".splitlines()[0][:200]
                outcome = Outcome(case, 0, 1, False, 0, None, why)
            report.outcomes.append(outcome)
            if echo is not None:
                echo(outcome.line())
    finally:
        jax.config.update("jax_enable_x64", x64)
    report.seconds = time.perf_counter() - start
    return report
