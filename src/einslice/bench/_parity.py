"""Unsliced parity and first calls: einslice's default beside ``jnp.einsum``.

Issue 35's floor: where a plan slices nothing, einslice's compiled program
is the one ``jnp.einsum`` compiles for the same path, or faster; and its
first call (plan, trace, compile, run) stays near jnp's. This module holds
the parity suite (`PARITY`: everyday einsums sized for a CPU and for an
accelerator, none of them from the benchmark suite's sizes) and the two
measurements, as functions that ``benchmarks/unsliced_parity.py`` and the
acceptance script call:

- `parity`: einslice's default program and ``jax.jit(jnp.einsum(...,
  optimize="greedy"))``, each compiled once, timed warm in interleaved
  rounds (medians), with whether their optimized HLO is the same program
  (then the ratio is 1 by construction, whatever the timer says).
- `first_calls`: the first call of each, in this process, with JAX's and
  einslice's caches emptied before each (`fresh`): what a new process pays
  after its imports, without a process per formula (opening an accelerator
  costs seconds per process).

Example:
    >>> [f.name for f in parity_suite("cpu")][:3]
    ['attention-scores', 'attention-linear', 'tucker']
"""

from __future__ import annotations

import math
import random
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._suite import Formula, from_subscripts, make_operands

# (name, description, subscripts, CPU sizes, accelerator sizes). The CPU sizes
# run in about 1-30 ms on this project's 2-core CPU, the accelerator's in
# about 0.1-5 ms on a TPU v5e; each formula is unsliced at the default limit.
_FORMULAS: tuple[tuple[str, str, str, dict[str, int], dict[str, int]], ...] = (
    ("attention-scores", "attention logits: queries times keys", "bhqd,bhkd->bhqk",
     {"b": 2, "h": 4, "q": 256, "k": 256, "d": 64},
     {"b": 8, "h": 16, "q": 512, "k": 512, "d": 128}),
    ("attention-linear", "linear attention (no softmax), three operands",
     "bhqd,bhkd,bhkv->bhqv",
     {"b": 2, "h": 4, "q": 256, "k": 256, "d": 64, "v": 64},
     {"b": 8, "h": 16, "q": 1024, "k": 1024, "d": 128, "v": 128}),
    ("tucker", "Tucker reconstruction: a core and three factors",
     "abc,ia,jb,kc->ijk",
     {"a": 24, "b": 24, "c": 24, "i": 96, "j": 96, "k": 96},
     {"a": 64, "b": 64, "c": 64, "i": 512, "j": 512, "k": 512}),
    ("chain-3", "a chain of three order-3 tensors", "ijk,jkl,klm->im",
     dict.fromkeys("ijklm", 48), dict.fromkeys("ijklm", 256)),
    ("mps-chain", "two MPS sites against their conjugates (transfer chain)",
     "ab,acd,bce,dfg,efh->gh",
     {"a": 96, "b": 96, "c": 4, "d": 96, "e": 96, "f": 4, "g": 96, "h": 96},
     {"a": 1024, "b": 1024, "c": 8, "d": 1024, "e": 1024, "f": 8, "g": 1024,
      "h": 1024}),
    ("triangle-open", "open triangle: every edge product of a 3-clique",
     "ij,jk,ki->ijk", dict.fromkeys("ijk", 128), dict.fromkeys("ijk", 512)),
    ("triangle-trace", "closed triangle: trace of a matrix cube",
     "ij,jk,ki->", dict.fromkeys("ijk", 512), dict.fromkeys("ijk", 4096)),
    ("jt-clique", "clique potential times three separator messages",
     "abcd,ab,bc,cd->abcd", dict.fromkeys("abcd", 48), dict.fromkeys("abcd", 96)),
    ("jt-message", "message of a clique to its separator",
     "abcd,ab,bc->cd", dict.fromkeys("abcd", 48), dict.fromkeys("abcd", 128)),
    ("bilinear", "batched bilinear form", "bi,oij,bj->bo",
     {"b": 128, "o": 64, "i": 128, "j": 128},
     {"b": 1024, "o": 256, "i": 512, "j": 512}),
    ("seed-6", "the seed's 6-input formula where it fits unsliced",
     "ij,ik,il,jk,jl,kl->ij", dict.fromkeys("ijkl", 96), dict.fromkeys("ijkl", 512)),
    ("matrix-chain", "a chain of four matrices of uneven sizes", "ab,bc,cd,de->ae",
     {"a": 64, "b": 1024, "c": 64, "d": 1024, "e": 64},
     {"a": 256, "b": 8192, "c": 256, "d": 8192, "e": 256}),
    ("batched-matmul", "a batch of matrix products", "bij,bjk->bik",
     {"b": 16, "i": 128, "j": 128, "k": 128},
     {"b": 64, "i": 512, "j": 512, "k": 512}),
    ("tensordot-2", "two order-4 tensors over two indices", "abcd,cdef->abef",
     dict.fromkeys("abcdef", 24), dict.fromkeys("abcdef", 64)),
    ("permuted", "a contraction whose result is laid out reversed", "abc,cbd->dba",
     dict.fromkeys("abcd", 96), dict.fromkeys("abcd", 384)),
    ("cp", "CP (canonical polyadic) reconstruction", "ia,ja,ka->ijk",
     {"i": 128, "j": 128, "k": 128, "a": 32},
     {"i": 512, "j": 512, "k": 512, "a": 64}),
)  # fmt: skip

# The memory limit the suite is planned at: far above every formula's need,
# so that every plan is unsliced (each `ParityRow` says whether it was).
LIMIT = "4GB"


def parity_suite(platform: str = "cpu") -> list[Formula]:
    """The parity formulas at CPU sizes, or at an accelerator's (any other platform).

    Example:
        >>> len(parity_suite("tpu")) >= 12
        True
    """
    column = 3 if platform == "cpu" else 4
    return [
        from_subscripts(row[0], row[1], row[2], row[column])  # type: ignore[arg-type]
        for row in _FORMULAS
    ]


@dataclass(frozen=True)
class ParityRow:
    """One formula's warm times: einslice's default program and jnp's greedy one.

    Attributes:
        name: the formula's name.
        einslice: median seconds per call of einslice's program.
        greedy: median seconds of ``jax.jit(jnp.einsum(optimize="greedy"))``.
        einslice_min, greedy_min: the minima (steadier on a loaded machine).
        same_program: whether both optimized HLOs are the same program.
        executor: the executor of einslice's plan ("einslice", "xla").
        sliced: whether einslice's plan slices an index.
        temp: compiled temporaries (bytes) of einslice's and greedy's programs.
        paired: the median over rounds of greedy / einslice within a round
            (steadier than a ratio of medians when the machine's load drifts).
    """

    name: str
    einslice: float
    greedy: float
    einslice_min: float
    greedy_min: float
    same_program: bool
    executor: str
    sliced: bool
    temp: tuple[int | None, int | None]
    paired: float = math.nan

    @property
    def ratio(self) -> float:
        """The speed-up over greedy: 1 for the same program, else `paired`."""
        return 1.0 if self.same_program else self.paired

    @property
    def measured_ratio(self) -> float:
        """The speed-up as timed (noise included, even for one program)."""
        return self.greedy / self.einslice


def program_text(compiled) -> str:
    """The optimized HLO without names and metadata: equal for the same program.

    Every computation (fusions included) from the first one on, without the
    module's header (source file tables), metadata, instruction and
    parameter names, which differ between two traces of one program.
    """
    text = re.sub(r", metadata=\{[^}]*\}", "", compiled.as_text())
    lines = text.splitlines()
    first = next(
        (k for k, line in enumerate(lines) if line.startswith(("%", "ENTRY"))), 0
    )
    body = "\n".join(lines[first:])
    body = re.sub(r"[\w.\-]+: ", "", body)  # parameter names in signatures
    return re.sub(r"%[\w.\-]+", "%_", body)


def _temp(compiled) -> int | None:
    analysis = compiled.memory_analysis()
    return getattr(analysis, "temp_size_in_bytes", None)


def einslice_fn(formula: Formula, **options) -> Callable:
    """The default einslice call of ``formula`` (at `LIMIT`)."""
    import einslice

    subscripts = formula_subscripts(formula)
    options.setdefault("memory_limit", LIMIT)

    def fn(*ops):
        return einslice.einsum(subscripts, *ops, **options)

    return fn


def greedy_fn(formula: Formula) -> Callable:
    """``jnp.einsum(..., optimize="greedy")`` of ``formula``."""
    import jax.numpy as jnp

    subscripts = formula_subscripts(formula)

    def fn(*ops):
        return jnp.einsum(subscripts, *ops, optimize="greedy")

    return fn


def formula_subscripts(formula: Formula) -> str:
    """The subscripts string of a formula of one-letter labels."""
    ins = ",".join("".join(str(x) for x in t) for t in formula.inputs)
    return f"{ins}->{''.join(str(x) for x in formula.output)}"


def parity(
    formulas: Sequence[Formula],
    rounds: int = 15,
    log: Callable[[str], object] | None = None,
    tuned: bool = False,
) -> list[ParityRow]:
    """The default einslice program beside jnp's greedy one, per formula.

    Each program is compiled once, then both are timed warm in ``rounds``
    interleaved rounds, a shuffled order per round, each sample long
    enough (~20 ms) to rise above the timer; medians and minima.
    einslice's is the estimate's plan, which a call runs from the first on
    (its default ``tune="auto"`` measures, if at all, off the call path);
    with ``tuned``, the plan that measuring settles on (measured here, at
    once). ``log`` gets a line per formula as it is measured.
    """
    import jax
    import jax.numpy as jnp

    import einslice

    rows = []
    for formula in formulas:
        ops = [jnp.asarray(x) for x in make_operands(formula)]
        subscripts = formula_subscripts(formula)
        tune = "auto" if tuned else "estimate"
        plan = einslice.plan(subscripts, *ops, memory_limit=LIMIT, tune=tune)
        run = einslice.running_plan(plan)
        ours = jax.jit(lambda *o, run=run: run(*o)).lower(*ops).compile()
        theirs = jax.jit(greedy_fn(formula)).lower(*ops).compile()
        mine_t, peer_t = interleaved_times([ours, theirs], ops, rounds)
        mine, peer = statistics.median(mine_t), statistics.median(peer_t)
        paired = statistics.median(p / m for p, m in zip(peer_t, mine_t, strict=True))
        row = ParityRow(
            formula.name,
            mine,
            peer,
            min(mine_t),
            min(peer_t),
            program_text(ours) == program_text(theirs),
            run.executor,
            bool(run.chunks),
            (_temp(ours), _temp(theirs)),
            paired,
        )
        rows.append(row)
        if log is not None:
            log(parity_line(row))
    return rows


def parity_line(row: ParityRow) -> str:
    """One row as a line of text."""
    same = "same program" if row.same_program else "programs differ"
    return (
        f"{row.name:17s} einslice {row.einslice * 1e3:8.3f} ms (min "
        f"{row.einslice_min * 1e3:.3f})  greedy {row.greedy * 1e3:8.3f} ms (min "
        f"{row.greedy_min * 1e3:.3f})  greedy/einslice {row.measured_ratio:5.2f}x "
        f"(min {row.greedy_min / row.einslice_min:.2f}x, paired "
        f"{row.paired:.2f}x)  {same}; executor "
        f"{row.executor}{', SLICED' if row.sliced else ''}; temp "
        f"{_mb(row.temp[0])} / {_mb(row.temp[1])}"
    )


def _mb(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:.1f} MB"


def interleaved(
    programs: Sequence, ops: Sequence, rounds: int
) -> list[tuple[float, float]]:
    """(median, minimum) seconds per call of each compiled program on ``ops``."""
    times = interleaved_times(programs, ops, rounds)
    return [(statistics.median(t), min(t)) for t in times]


def interleaved_times(programs: Sequence, ops: Sequence, rounds: int) -> list[list]:
    """Seconds per call of each program, one sample per round (rounds aligned).

    Each sample is long enough (~20 ms) to rise above the timer; the order
    is shuffled per round, so that no program always runs first.
    """
    import jax

    for program in programs:
        for _ in range(3):
            jax.block_until_ready(program(*ops))
    start = time.perf_counter()
    for program in programs:
        jax.block_until_ready(program(*ops))
    each = (time.perf_counter() - start) / len(programs)
    inner = max(1, int(0.02 / max(1e-6, each)))
    times: list[list[float]] = [[] for _ in programs]
    order = list(range(len(programs)))
    for r in range(rounds):
        random.Random(r).shuffle(order)  # no program always runs first
        for k in order:
            start = time.perf_counter()
            out = programs[k](*ops)
            for _ in range(inner - 1):
                out = programs[k](*ops)
            jax.block_until_ready(out)
            times[k].append((time.perf_counter() - start) / inner)
    return times


# -- first calls ---------------------------------------------------------------------


def fresh() -> None:
    """Forget what JAX and einslice compiled, planned, searched and measured.

    Background work (``tune="auto"``'s measurements) is waited for first.
    JAX's in-memory caches (``jax.clear_caches``; its persistent compilation
    cache must be off, as it is by default), every functools cache of
    einslice's planner and executors (plans, searches, runners; the
    calibrated profile is kept: a process loads it once), and its wisdom.
    The disk cache is the caller's: point ``EINSLICE_CACHE_DIR`` at an empty
    folder.
    """
    import gc
    import sys

    import jax

    from .. import wisdom
    from .._exec import _background

    _background.drain()  # (a measurement of the last call's, off its path)
    jax.clear_caches()
    wisdom.clear()
    for name, module in list(sys.modules.items()):
        inside = name.startswith(("einslice._plan.", "einslice._exec."))
        if not inside or name.endswith(("_calibrate", "_wisdom")):
            continue
        for value in list(vars(module).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear):
                clear()
    gc.collect()


@dataclass(frozen=True)
class FirstCall:
    """One formula's first calls: einslice's default and jnp's greedy, seconds.

    ``einslice_estimate`` is einslice with ``tune="estimate"`` (no measuring).
    """

    name: str
    einslice: float
    greedy: float
    einslice_estimate: float

    @property
    def ratio(self) -> float:
        """The first call's time over jnp's (below 1: einslice's is shorter)."""
        return self.einslice / self.greedy


def first_call_seconds(fn: Callable, ops: Sequence) -> float:
    """Seconds of ``jax.jit(fn)(*ops)``'s first call, result on the host side."""
    import jax

    start = time.perf_counter()
    jax.block_until_ready(jax.jit(fn)(*ops))
    return time.perf_counter() - start


def first_calls(
    formulas: Sequence[Formula],
    log: Callable[[str], object] | None = None,
    repeats: int = 1,
) -> list[FirstCall]:
    """The first call of einslice's default and of jnp's greedy, per formula.

    Each is timed from a clean slate (`fresh`) in this process: the
    libraries are imported and warmed on an unrelated formula first, as
    their imports are a cost a process pays once, not per formula.
    einslice is called eagerly (``einslice.einsum(...)``, as a user's first
    call is), jnp under ``jax.jit`` (eagerly, ``jnp.einsum`` compiles the
    same program). Each pair is repeated ``repeats`` times (minimum kept),
    the order alternating.
    """
    import jax
    import jax.numpy as jnp

    import einslice

    warm = [jnp.ones((3, 4)), jnp.ones((4, 5))]
    jax.block_until_ready(einslice.einsum("ij,jk->ik", *warm))
    jax.block_until_ready(jnp.einsum("ij,jk->ik", *warm, optimize="greedy"))
    rows = []
    for formula in formulas:
        ops = [jnp.asarray(x) for x in make_operands(formula)]
        best: dict[str, float] = dict.fromkeys(
            ("einslice", "greedy", "estimate"), float("inf")
        )
        calls = _first_calls(formula, ops)
        for r in range(repeats):
            names = list(calls) if r % 2 == 0 else list(reversed(calls))
            for name in names:
                fresh()
                start = time.perf_counter()
                jax.block_until_ready(calls[name]())
                best[name] = min(best[name], time.perf_counter() - start)
        row = FirstCall(
            formula.name, best["einslice"], best["greedy"], best["estimate"]
        )
        rows.append(row)
        if log is not None:
            log(
                f"{row.name:17s} first call: einslice {row.einslice:7.3f} s  "
                f"greedy {row.greedy:7.3f} s  ratio {row.ratio:5.2f}x  "
                f"(tune='estimate' {row.einslice_estimate:7.3f} s)"
            )
    fresh()
    return rows


def _first_calls(formula: Formula, ops: Sequence) -> dict[str, Callable]:
    """The calls `first_calls` times: einslice's default, estimated, jnp's."""
    import jax

    import einslice

    subscripts = formula_subscripts(formula)
    return {
        "einslice": lambda: einslice.einsum(subscripts, *ops, memory_limit=LIMIT),
        "estimate": lambda: einslice.einsum(
            subscripts, *ops, memory_limit=LIMIT, tune="estimate"
        ),
        "greedy": lambda: jax.jit(greedy_fn(formula))(*ops),
    }
