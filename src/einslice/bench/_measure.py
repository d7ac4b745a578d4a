"""Measuring: this device's matmul throughput and memory, run times, peak memory.

Compiled temporary memory of a JAX program comes from XLA's own accounting
(``compile().memory_analysis().temp_size_in_bytes``); peers that do not compile
are measured while they run: numpy's allocations with tracemalloc, torch and
eager JAX by the growth of the process's peak resident memory.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

CPU_MEMORY_FRACTION = 0.5
"""Share of the available RAM a CPU benchmark may use: the machine is shared."""


@dataclass(frozen=True)
class Device:
    """The device the benchmark runs on.

    Attributes:
        platform: ``"cpu"`` or ``"gpu"`` (or another JAX platform name).
        name: a readable name ("NVIDIA H100 80GB HBM3", "AMD EPYC, 2 cores").
        memory: bytes a single program may use before it is reported as OOM.
    """

    platform: str
    name: str
    memory: int


VERBOSE_XLA = "EINSLICE_VERBOSE_XLA"
"""Set this environment variable to 1 to see XLA's own logs during a benchmark."""


def quiet_xla() -> None:
    """Silence XLA's C++ logs and JAX's warnings, unless ``EINSLICE_VERBOSE_XLA=1``.

    A peer that runs out of GPU memory makes XLA's allocator and autotuner
    print pages; the benchmark reports it as OOM instead. Takes effect only
    before JAX's backend starts (`detect_device` calls it first); a
    ``TF_CPP_MIN_LOG_LEVEL`` the user set is kept.
    """
    if os.environ.get(VERBOSE_XLA, "").strip() not in ("", "0"):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for name in ("jax", "jax._src.xla_bridge", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)


def detect_device(memory: int | None = None) -> Device:
    """Describe JAX's default device and how much memory a program may use.

    XLA's logs are silenced first (see `quiet_xla`).

    Args:
        memory: bytes to allow, overriding the detection (``--device-memory``).

    Returns:
        On GPU the device's memory limit less what is in use; on CPU
        :data:`CPU_MEMORY_FRACTION` of the available RAM.
    """
    quiet_xla()
    import jax

    device = jax.devices()[0]
    platform = device.platform
    if platform == "cpu":
        name = f"{_cpu_model()}, {os.cpu_count()} cores"
        from .._api import available_ram

        detected = int(CPU_MEMORY_FRACTION * available_ram())
    else:
        name = device.device_kind
        stats = device.memory_stats() or {}
        detected = int(stats.get("bytes_limit", 0) - stats.get("bytes_in_use", 0))
    return Device(platform, name, memory if memory is not None else detected)


def _cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, or a generic word."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU"


def matmul_gflops(n: int | None = None, precision: str | None = None) -> float:
    """This device's float32 matmul throughput in GFLOP/s (median of 5 runs).

    Args:
        n: the matrix side; default 2048 on CPU, 8192 on accelerators.
        precision: passed to ``jnp.matmul`` (``None``: JAX's default, which is
            TF32 on recent NVIDIA GPUs; ``"highest"``: full float32).

    Returns:
        ``2 n^3 / t`` for the median time ``t`` of a jitted ``a @ b``.
    """
    import jax
    import jax.numpy as jnp

    if n is None:
        n = 2048 if jax.default_backend() == "cpu" else 8192
    key_a, key_b = jax.random.split(jax.random.key(0))
    a = jax.random.uniform(key_a, (n, n), jnp.float32)
    b = jax.random.uniform(key_b, (n, n), jnp.float32)
    compiled = (
        jax.jit(lambda x, y: jnp.matmul(x, y, precision=precision))
        .lower(a, b)
        .compile()
    )
    jax.block_until_ready(compiled(a, b))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        jax.block_until_ready(compiled(a, b))
        times.append(time.perf_counter() - start)
    return 2.0 * n**3 / statistics.median(times) / 1e9


@dataclass(frozen=True)
class Timing:
    """Run times of one method on one input.

    Attributes:
        median: median seconds of the timed runs.
        runs: number of timed runs.
        result: what the last run returned.
        peak_bytes: growth of peak resident memory during the first run, if
            measured.
    """

    median: float
    runs: int
    result: object
    peak_bytes: int | None


def time_call(
    call: Callable[[], object],
    *,
    repeats: int = 5,
    budget: float = 2.0,
    probe: str | None = None,
) -> Timing:
    """Time a blocking call: one warm-up run, then up to ``repeats`` timed runs.

    Runs slower than ``budget`` seconds are not repeated: the warm-up run (which
    follows compilation, so compiles nothing) is then the measurement.

    Args:
        call: runs the computation once and blocks until it is done.
        repeats: timed runs after the warm-up (more for calls so fast that
            ``repeats`` runs take under :data:`FILL_SECONDS`).
        budget: seconds the timed runs may take together.
        probe: how to measure the warm-up's peak memory growth: ``"tracemalloc"``
            (Python and numpy allocations, exact), ``"rss"`` (peak resident
            memory growth: a lower bound, freed memory is reused) or None.

    Returns:
        The median time, number of runs, last result and memory growth.
    """
    if probe == "tracemalloc":
        tracemalloc.start()
        start = time.perf_counter()
        try:
            result = call()
            warm = time.perf_counter() - start
            peak: int | None = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    else:
        before = _reset_peak_rss() if probe == "rss" else None
        start = time.perf_counter()
        result = call()
        warm = time.perf_counter() - start
        peak = None
        if before is not None:
            after = _peak_rss()
            peak = None if after is None else max(0, after - before)
    if warm >= budget or repeats == 0:  # repeats=0: the warm-up run only
        return Timing(warm, 1, result, peak)
    runs = timed_runs(warm, repeats, budget)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return Timing(statistics.median(times), runs, result, peak)


FILL_SECONDS = 0.2
"""Fast calls are repeated for at least this long: a median of 5 runs of 50 µs
is noise on a shared machine."""


def timed_runs(seconds: float, repeats: int, budget: float) -> int:
    """How many timed runs a call of ``seconds`` gets.

    At least ``repeats`` (or as many as fill :data:`FILL_SECONDS`, if more),
    at most what fits in ``budget``, and at least one.
    """
    per_run = max(seconds, 1e-9)
    wanted = max(repeats, int(FILL_SECONDS / per_run))
    return max(1, min(wanted, int(budget / per_run)))


def _status_kb(key: str) -> int | None:
    """A ``VmXXX:`` line of /proc/self/status, in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak_rss() -> int | None:
    """Reset the kernel's peak-RSS counter; return the current RSS (or None).

    Writing 5 to /proc/self/clear_refs resets VmHWM to the current RSS (Linux).
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return _status_kb("VmRSS:")


def _peak_rss() -> int | None:
    """Peak resident memory since the last reset."""
    return _status_kb("VmHWM:")
