"""The memory promise on this device: random formulas compiled within random limits.

Compiles ``--count`` random einsums (1-4 operands; float32, float64,
bfloat16, complex64, int32; some "max"/"log", some gradients) at random
limits, small ones included, and checks each: XLA's temporary bytes
(``memory_analysis().temp_size_in_bytes``) within the limit, or a
``MemoryLimitError`` whose ``smallest_limit`` then compiles within itself.
Nothing runs, only compiles: ~0.2 s a case on a TPU v5e, ~0.5 s on a 2-core
CPU. Prints every case that fails and one summary line; exits 1 if any
failed. ``benchmarks/accel_check.py`` calls the same function
(``einslice.bench._memory_check.check_memory_promise``).

Usage: ``python benchmarks/memory_check.py [--count 300] [--seed 0] [--seconds S] [-v]``
"""

from __future__ import annotations

import argparse
import sys

from _common import environment_lines, import_einslice


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("-v", "--verbose", action="store_true", help="every case")
    args = parser.parse_args()
    import_einslice()
    import jax

    from einslice.bench._memory_check import check_memory_promise

    for line in environment_lines(jax.devices()[0]):
        print(line, flush=True)

    def echo(line: str) -> None:
        if args.verbose or not line.startswith("ok"):
            print(line, flush=True)

    report = check_memory_promise(args.count, args.seed, args.seconds, echo=echo)
    verdict = "PASS" if not report.failures else "FAIL"
    print(f"{verdict} memory promise: {report.summary()}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
