"""Whether a walking plan keeps its host walk once its program is compiled.

A reused plan whose first calls walk in numpy (``_run._TopLevelRun``: the
ski rental on its compile) gets its optimized program compiled in the
background. XLA's program is mostly the faster, not always: numpy's BLAS
on one thread ran a 70-tensor network's walk in less than half of its
program's time (`KEEP_RATIO`'s measurement). So once the program lands the
runner times a block of its calls against the walks (`WalkOrProgram`),
walks on where the walk is `KEEP_RATIO` times faster, and re-times the
program now and then at a bounded cost (`KEEP_RECHECK_SHARE`: the load of
other processes changes which side wins); a re-timing that finds the
program at least as fast holds it for good. On an accelerator the walk's
time holds the copies of its operands to the host and of its result back:
the rule measures, it does not assume which side wins there.

Each side is timed in blocks of calls in a row, the first call of a block
not counted: XLA's and OpenBLAS's threads spin a while after their work,
so a call right after the other side's runs slower than either's steady
calls (single calls of a 12-matrix chain's walk and program interleaved on
2 cores slowed each other: benchmarks/results/networks_fresh.md, "Small
chains").

Example:
    >>> keep = WalkOrProgram(walks=[0.040])  # (the rental's walks: 40 ms)
    >>> sides = []
    >>> while keep.verdict is None:  # (program 100 ms a call, walk 40 ms)
    ...     side = keep.next()
    ...     _ = keep.record(side, 0.100 if side else 0.040)
    ...     sides.append("program" if side else "walk")
    >>> sides.count("program"), sides.count("walk"), keep.verdict
    (4, 4, 'walk')
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

# Calls timed of each side per block, after one not counted (see the module).
KEEP_TIMED_CALLS = 3
# The walk is kept when the program's fastest call of its block takes more
# than KEEP_RATIO times the walk's fastest recent call. Measured on the
# plans of benchmarks/networks.py (benchmarks/walk_vs_program.py: blocks of
# calls, medians; 2026-12-08, load 2.5-3.5): of its 17 networks and fresh
# seeds 7 and 11 (35 plans), one walked clearly faster, fresh11-randreg-70-d3
# (87 ms on one BLAS thread against its program's 201 ms: 2.3x); the next
# were randreg-60-d5-8 at 1.45x (65 against 94 ms) and near ties at 1.0-1.2x
# (random-connected-60, matrix-chain-40, mera-p-first-last, fresh seed 11's
# chain), which noise can flip (a 12-matrix chain's walk and program took
# 4 ms each: networks_fresh.md, "Small chains"); 27 ran their program faster.
# Fresh seeds 13 and 17, not looked at while choosing: none at 1.5x (the
# closest fresh17-randreg-50-d3-5, 1.37x), 16 of 18 ran their program faster.
KEEP_RATIO = 1.5
# A kept walk re-times the program once the walks since it was last timed
# have taken 1 / KEEP_RECHECK_SHARE times a block of program calls: the
# re-timing costs at most that share of the walks' time (a 100 ms program
# beside a 40 ms walk: every ~6 s of walks), and a change of load is seen
# within a few re-timings.
KEEP_RECHECK_SHARE = 1 / 16


class WalkOrProgram:
    """Which side (True: the compiled program) a walking runner's next call takes.

    Pure bookkeeping, no clock: the runner times each call (to its result)
    and `record`s it. ``verdict`` is None while the first timing runs,
    "walk" once the walk was kept (the program is still re-timed now and
    then), "program" once the program is held for good.

    Args:
        walks: the seconds of recent walks, timed before the program landed
            (the rental's): where the program's first block is within
            `KEEP_RATIO` of their fastest, it is held at once; else fresh
            walks are timed after that block.
        program: the program's seconds where already timed (a growth's
            trial timed it): the first block of program calls is skipped.
    """

    __slots__ = (
        "_fresh",
        "_programs",
        "_run",
        "last",
        "program",
        "since",
        "timing",
        "verdict",
        "walks",
    )

    def __init__(self, walks: Iterable[float] = (), program: float | None = None):
        self.walks: deque[float] = deque(walks, maxlen=KEEP_TIMED_CALLS)
        self.program = program  # the fastest program call of the last block
        self.verdict: str | None = None
        self.since = 0.0  # seconds walked since the program was last timed
        self.timing = program is None  # a block of program calls is due or runs
        self._programs: list[float] = []  # the block's program calls so far
        self._fresh = -1  # walks timed after the first block (-1: none due)
        self.last: bool | None = None  # the side of the last call recorded
        self._run = 0  # calls in a row on that side
        if program is not None:
            self._judge()

    def next(self) -> bool:
        """Whether the next call runs the program (else it walks)."""
        return self.verdict == "program" or self.timing

    def record(self, program: bool, seconds: float, counted: bool = True) -> str | None:
        """A call of ``program``'s side took ``seconds``; the verdict it reached.

        Returns "walk" or "program" when this call decided (the first
        timing's end, or a re-timing that found the program as fast), else
        None. ``counted`` False: the call ran beside other work (the
        runner's background compile or search) and only its side counts.
        """
        self._run = self._run + 1 if program == self.last else 1
        self.last = program
        if not counted or self._run == 1 or self.verdict == "program":
            return None  # (a block's first call follows the other side's)
        if program:
            if not self.timing:  # (another thread's, past the block's end)
                return None
            self._programs.append(seconds)
            if len(self._programs) < KEEP_TIMED_CALLS:
                return None
            self.program = min(self._programs)
            self._programs = []
            self.timing = False
            return self._judge()
        self.walks.append(seconds)
        if self.verdict == "walk":
            self.since += seconds
            assert self.program is not None
            due = (KEEP_TIMED_CALLS + 1) * self.program / KEEP_RECHECK_SHARE
            if self.since >= due:
                self.since = 0.0
                self.timing = True
            return None
        if self._fresh >= 0:
            self._fresh += 1
            if self._fresh >= KEEP_TIMED_CALLS:
                self._fresh = -1
                return self._decide(KEEP_RATIO)
        return None

    def _judge(self) -> str | None:
        """After a block of program calls: hold it, walk on, or time walks."""
        if self.verdict == "walk":  # a re-timing: the program must be as fast
            return self._decide(1.0)
        assert self.program is not None
        if self.walks and self.program <= KEEP_RATIO * min(self.walks):
            return self._decide(KEEP_RATIO)  # (not clearly slower: no walks timed)
        self.walks.clear()  # (fresh walks, timed as the program just was)
        self._fresh = 0
        return None

    def _decide(self, ratio: float) -> str | None:
        """The verdict: the walk where the program took ``ratio`` walks, or more."""
        assert self.program is not None and self.walks
        verdict = "walk" if self.program > ratio * min(self.walks) else "program"
        if verdict == self.verdict:
            return None
        self.verdict = verdict
        self.since = 0.0
        return verdict
