"""Which BLAS threads a reused plan's host walks run on: timed, then re-timed.

numpy's OpenBLAS threads busy-wait for each other, so a walk's matrix
products on BLAS's own threads slow down many times over when another
process holds one of the cores, while on idle cores two threads win for
large products. The runner (``_run._TopLevelRun``) therefore times its walks
on both (one thread through ``_host.one_blas_thread``) and runs the faster;
the load changes while a plan walks (other processes start and stop), so
the choice is made from a few recent walks of each and re-timed now and
then (`BlasChoice`), at a bounded cost.

Why not one walk of each, once: on einsum-benchmark's lattice-8x8 (2 cores,
other engineers' jobs beside it, load 2.3-2.8, 2026-12-07) one walk of each
chose BLAS's own threads (10.6 ms against 17.4 on one thread, noise), and
its next 115 walks took 14-24 ms, while walks on one thread timed 12-14 ms
beside them; the networks benchmark's calls of ctg-lattice-10x10 walked at
46 ms a call, its walk on one thread taking 23 (the lead's measurement).
"""

from __future__ import annotations

from collections import deque

# Walks timed on each side before the first choice (after the runner's first
# walk, which pays one-off costs and is not counted): one of each is a coin
# toss under a varying load, unless one side took CLEAR_RATIO times the
# other's time (BLAS's threads oversubscribed: 92-127 ms a walk of
# lattice-8x8 against 7.6-17 on one thread at load 3, 2026-12-07).
TRY_WALKS = 2
CLEAR_RATIO = 2.0
# The runner's first walk (untimed for the choice) runs on one thread where
# that can be set: the risks are lopsided. On idle cores a walk on BLAS's own
# threads can be faster by a few ms (a 12-matrix chain 4 against 7 ms,
# mera-p-first-last 29 against 40), while beside other processes it takes
# many times longer (ctg-lattice-10x10's 230-320 ms against 20-31 on one
# thread, load 3, 2026-12-07).
FIRST_ONE = True
# The choice compares each side's fastest of its last RECENT walks: a spike
# does not decide it, and a side timed when the load was lighter stops
# counting once it has walked RECENT times more.
RECENT = 3
# The other side is re-timed once the walks since it was last timed have
# cost 1 / RECHECK_SHARE of one walk on it (its fastest recent time): every
# 16th walk where both sides run alike, every ~240th where the other takes
# 15x longer. The re-timing costs at most RECHECK_SHARE of the walks' time,
# and a change of load is seen within a few re-timings.
RECHECK_SHARE = 1 / 16


class BlasChoice:
    """Which side (True: one BLAS thread) the next walk takes, from walks timed.

    Pure bookkeeping, no clock: the caller times each walk and `record`s it.

    Example:
        >>> c = BlasChoice()
        >>> c.next(True)  # the first walk (not counted): one thread
        True
        >>> c.record(True, 0.5, counted=False)
        >>> sides = []
        >>> for _ in range(4):  # (one thread 4 ms a walk, BLAS's own 6)
        ...     side = c.next(True)
        ...     c.record(side, 0.004 if side else 0.006)
        ...     sides.append(side)
        >>> sides, c.next(True), c.chosen
        ([True, False, True, False], True, True)
    """

    __slots__ = ("chosen", "since", "times", "walks")

    def __init__(self) -> None:
        self.times: dict[bool, deque[float]] = {
            False: deque(maxlen=RECENT),
            True: deque(maxlen=RECENT),
        }
        self.walks = 0  # walks that asked `next`
        self.since = 0.0  # the seconds walked on the chosen side since a re-timing
        self.chosen: bool | None = None  # the side chosen (None: still trying)

    def next(self, one_possible: bool) -> bool:
        """The side of the next walk; ``one_possible``: one thread can be set.

        BLAS's own threads wherever one thread cannot be set; the runner's
        first walk on `FIRST_ONE`'s side; then each side in turn until each
        has `TRY_WALKS` walks (or one took `CLEAR_RATIO` times the other);
        then the faster (the fastest of each side's `RECENT` walks), and
        the other once the walks since it was timed cost `1 / RECHECK_SHARE`
        of it.
        """
        self.walks += 1
        if not one_possible:
            return False
        if self.walks == 1:  # (not timed for the choice: see FIRST_ONE)
            return FIRST_ONE
        own, one = self.times[False], self.times[True]
        if not own or not one:
            return not one
        fast, slow = sorted((min(own), min(one)))
        if min(len(own), len(one)) < TRY_WALKS and slow < CLEAR_RATIO * fast:
            return len(one) <= len(own)
        self.chosen = min(one) < min(own)
        other = min(self.times[not self.chosen])
        if self.since * RECHECK_SHARE >= other:
            self.since = 0.0
            return not self.chosen
        return self.chosen

    def record(self, single: bool, seconds: float, counted: bool = True) -> None:
        """A walk on ``single``'s side took ``seconds`` (not ``counted``: ignored)."""
        if counted:
            self.times[single].append(seconds)
            if single == self.chosen:
                self.since += seconds
