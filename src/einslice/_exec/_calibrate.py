"""Measure this device's ``Profile`` with a few micro-benchmarks, and remember it.

``calibrate()`` times a large matrix multiply per precision (FLOP/s), a
streaming copy at three working-set sizes (per-core cache, shared cache, DRAM
bandwidth), a transposing copy, an empty loop iteration and a chain of tiny
kernels inside one (launch cost). Each grows its problem until one timed call
lasts ``TARGET_SECONDS`` (``grow``), so that one function measures a small CPU
and a large GPU alike; the figures it cannot measure quickly (cache sizes,
small-product penalties, fresh-page cost) come from the platform's built-in
profile. It stores the result in the cache directory; ``current_profile()``
prefers that file, for this device kind, to the built-in default.
"""

from __future__ import annotations

import math
import os
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path

import jax
import jax.numpy as jnp
from jax import lax

from .._plan._cachedir import (
    CacheWarning,
    cache_dir,
    private_dir,
    read_text,
    write_atomic,
)
from .._plan._profile import Profile, built_in, figures_problem

# One timed call of each micro-benchmark lasts at least this long: longer
# than timer resolution, launch latency and the noise of a shared machine.
TARGET_SECONDS = 0.01
# The precisions whose matrix-multiply rate is measured: JAX's three, and the
# lax.DotAlgorithmPreset s that take float32 operands (those the backend
# rejects are skipped: on a CPU the TF32 ones, on most GPUs none).
PRECISIONS = ("default", "high", "highest")
PRESETS = (
    "F32_F32_F32",
    "TF32_TF32_F32",
    "TF32_TF32_F32_X3",
    "BF16_BF16_F32",
    "BF16_BF16_F32_X3",
    "BF16_BF16_F32_X6",
    "BF16_BF16_F32_X9",
)
# The largest matrix-multiply side timed (three 1 GB float32 matrices).
_LARGEST_SIDE = 16384


@cache
def device_kind() -> str:
    """The first device's kind, e.g. ``'cpu'`` or ``'NVIDIA H100 80GB HBM3'``."""
    return str(jax.devices()[0].device_kind)


@cache
def platform() -> str:
    """The first device's JAX platform, e.g. ``'cpu'`` or ``'gpu'``."""
    return jax.devices()[0].platform


def profile_path(kind: str | None = None) -> Path:
    """Where the calibrated profile of a device kind is stored."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", kind or device_kind())
    return cache_dir() / f"profile-{name}.json"


def current_profile() -> Profile:
    """The profile plans are made for: this device's calibrated one, if stored.

    Else the built-in default for its platform. A stored file that cannot be
    read, or that describes another device kind, is ignored with a warning.
    """
    return _load(cache_dir(), device_kind(), platform())


def host_profile() -> Profile:
    """The profile of the host CPU, calibrated if stored, without starting JAX.

    For a plan that will run in numpy on the host (``_host.run_on_host``)
    rather than on the device: JAX's CPU device kind is ``'cpu'``, so this
    is what `current_profile` gives on a CPU-only machine, found without the
    backend start-up (milliseconds) that asking for the device costs.

    Example:
        >>> host_profile().device_kind
        'cpu'
    """
    return _load(cache_dir(), "cpu", "cpu")


@cache
def _load(directory: Path, kind: str, platform: str) -> Profile:
    default = replace(built_in(platform), device_kind=kind)
    path = profile_path(kind)
    if not path.exists():
        return default
    try:
        # fields stored before they existed (compile figures) are the platform's
        stored = Profile.from_json(read_text(path), defaults=default)
        problem = figures_problem(stored)
        if problem is not None:
            raise ValueError(problem)
    except (OSError, ValueError, TypeError) as error:
        warnings.warn(
            f"ignoring the einslice profile {str(path)!r}: it cannot be read "
            f"({error}); run einslice.calibrate() to measure this device again.",
            CacheWarning,
            stacklevel=3,
        )
        return default
    if stored.device_kind != kind:
        warnings.warn(
            f"ignoring the einslice profile {str(path)!r}: it describes "
            f"{stored.device_kind!r}, not this device {kind!r}; run "
            "einslice.calibrate() to measure this device.",
            CacheWarning,
            stacklevel=3,
        )
        return default
    return stored


def calibrate(
    save: bool = True, size: int = 256, seconds: float = TARGET_SECONDS
) -> Profile:
    """Measure this device's speeds (about 10 s on a small CPU) and keep them.

    Each micro-benchmark grows its problem until one timed call lasts
    ``seconds`` (within the device's memory): a matrix multiply per
    precision the device accepts (default, HIGH, HIGHEST and the float32
    ``lax.DotAlgorithmPreset`` s, kept in ``Profile.matmul_rates``), a
    streaming copy of a per-core-cache, a shared-cache and a DRAM-sized
    buffer (8 times the last-level cache), a transposing copy of a
    DRAM-sized matrix, and scans of tiny products (loop and launch costs).

    Args:
        save: store the profile in ``einslice``'s cache directory
            (``$EINSLICE_CACHE_DIR`` or ``$XDG_CACHE_HOME/einslice``), where
            later plans on this device kind find it.
        size: the side the timed matrix multiply starts from.
        seconds: how long one timed call of each benchmark lasts at least
            (shorter is quicker and noisier).

    Returns:
        The measured Profile.

    Example:
        >>> import einslice
        >>> profile = einslice.calibrate(save=False, size=64, seconds=1e-4)
        >>> profile.matmul_rate("highest") > 0
        True
    """
    device = jax.devices()[0]
    base = built_in(device.platform)
    kind = str(device.device_kind)
    budget = _memory_budget(device)
    rates = _matmul_rates(size, seconds, budget)
    loop, launch = _loop_and_launch_seconds(seconds)
    large = min(8 * base.last_level_cache_bytes, budget // 4)
    profile = replace(
        base,
        device_kind=kind,
        matmul_flops=rates["default"],
        matmul_rates=tuple(sorted(rates.items())),
        precision="default",
        cache_bandwidth=_stream_bandwidth(base.cache_bytes // 2, seconds, loop),
        shared_cache_bandwidth=_stream_bandwidth(
            (base.cache_bytes + base.shared_cache_bytes) // 2, seconds, loop
        ),
        dram_bandwidth=_dram_bandwidth(large, budget, seconds),
        transpose_bandwidth=_transpose_bandwidth(base.cache_bytes, seconds),
        loop_seconds=loop,
        launch_seconds=launch,
    )
    if save:
        write_atomic(profile_path(kind), profile.to_json())  # or one warning
        _load.cache_clear()
    return profile


def grow(
    time_at: Callable[[int], float],
    start: int,
    largest: int,
    exponent: float = 1.0,
    target: float = TARGET_SECONDS,
) -> tuple[int, float]:
    """The first size whose timed call lasts ``target`` seconds, and its time.

    Sizes start at ``start`` and grow by powers of two, as far as the last
    time says (a call's time taken to grow as size ** ``exponent``: 3 for a
    matrix multiply's side, 1 for a repeat count), at most 64 times a step;
    ``largest`` (the memory cap) stops the growth, timed or not.

    Example:
        >>> grow(lambda n: n / 1e6, start=1, largest=10**6, target=0.01)
        (16384, 0.016384)
        >>> grow(lambda n: n / 1e6, start=1, largest=100, target=0.01)
        (100, 0.0001)
    """
    size = max(min(start, largest), 1)
    while True:
        seconds = time_at(size)
        if seconds >= target or size >= largest:
            return size, seconds
        wanted = (target / seconds) ** (1 / exponent) if seconds > 0 else 64.0
        factor = 2
        while factor < min(wanted, 64.0):
            factor *= 2
        size = min(size * factor, largest)


def _memory_budget(device) -> int:
    """Bytes one micro-benchmark may use: a quarter of what is free."""
    stats = None
    if device.platform != "cpu":
        try:
            stats = device.memory_stats()
        except Exception:  # some backends have no memory stats
            stats = None
    if stats and "bytes_limit" in stats:
        free = stats["bytes_limit"] - stats.get("bytes_in_use", 0)
    else:
        free = _available_ram()
    return max(free // 4, 2**24)


def _available_ram() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _seconds(fn, *args, runs: int = 3) -> float:
    """Best wall time of a compiled call over ``runs``, after a warm-up call."""
    compiled = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def _matmul_rates(start: int, target: float, budget: int) -> dict[str, float]:
    """FLOP/s of a float32 matrix multiply per precision the device accepts.

    The default precision's side grows until one product lasts ``target``;
    the others start from that side (none is much faster) and grow on.
    """
    largest = largest_side(budget)
    side = first = min(start, largest)
    rates: dict[str, float] = {}
    for name in (*PRECISIONS, *PRESETS):
        precision = getattr(lax.DotAlgorithmPreset, name, name)
        if name in PRECISIONS:
            precision = None if name == "default" else name
        try:
            side, seconds = grow(
                lambda n, p=precision: _matmul_seconds(n, p),
                side,
                largest,
                exponent=3.0,
                target=target,
            )
        except Exception:  # the backend rejects this algorithm
            continue
        rates[name] = 2.0 * side**3 / seconds
        if name == "default":
            first = side
    # Timed again last: the first products timed ran measurably slower here
    # (up to 25% on a CPU; threads and clocks still warming up).
    again = _matmul_seconds(first, None)
    rates["default"] = max(rates["default"], 2.0 * first**3 / again)
    return rates


def largest_side(budget: int) -> int:
    """The largest power-of-two side of three float32 matrices in ``budget`` bytes.

    Example:
        >>> largest_side(2**30), largest_side(2**40)
        (8192, 16384)
    """
    side = 1 << int(math.log2(max(budget // 12, 1)) / 2)
    return min(_LARGEST_SIDE, side)


def _matmul_seconds(n: int, precision) -> float:
    a = jnp.ones((n, n), jnp.float32)
    return _seconds(lambda x, y: jnp.matmul(x, y, precision=precision), a, a)


def _repeated_seconds(step, x, target: float) -> tuple[int, float]:
    """Repeats and seconds of a loop of ``step`` on ``x`` lasting ``target``.

    The repeat count is an argument of one compiled loop, so growing it
    compiles nothing again.
    """

    def loop(x, count):
        return lax.fori_loop(0, count, lambda _, c: step(c), x)

    compiled = jax.jit(loop).lower(x, jnp.int32(1)).compile()

    def time_at(count: int) -> float:
        n = jnp.int32(count)
        jax.block_until_ready(compiled(x, n))
        best = math.inf
        for _ in range(3):
            begin = time.perf_counter()
            jax.block_until_ready(compiled(x, n))
            best = min(best, time.perf_counter() - begin)
        return best

    return grow(time_at, 1, 2**24, target=target)


def _loop_and_launch_seconds(target: float) -> tuple[float, float]:
    """Seconds per loop iteration and per kernel inside one.

    Times loops whose body runs one, then eight, dependent tiny products: the
    difference is seven kernels' cost, the rest the loop's (at least a tenth
    of a one-kernel iteration).
    """
    x = jnp.ones((4, 4), jnp.float32) * 0.25

    def chain(count: int):
        def step(c):
            for _ in range(count):
                c = c @ x
            return c

        return step

    iterations, seconds = _repeated_seconds(chain(1), x, target)
    one = seconds / iterations
    iterations, seconds = _repeated_seconds(chain(8), x, target)
    many = seconds / iterations
    launch = max((many - one) / 7, 0.0)
    return max(one - launch, 0.1 * one), launch


def _stream_bandwidth(nbytes: int, target: float, loop: float) -> float:
    """Bytes/s read plus written by passes of a scaled copy over a buffer.

    The buffer stays in the cache level it fits across passes of one loop,
    repeated until the loop lasts ``target``.
    """
    x = jnp.ones((max(nbytes // 4, 1024),), jnp.float32)
    repeats, seconds = _repeated_seconds(lambda c: c * 0.5 + 1.0, x, target)
    per_pass = seconds / repeats - loop
    return 2.0 * x.nbytes / max(per_pass, 1e-12)


def _in_place_seconds(fn, shape: tuple[int, ...], runs: int = 3) -> float:
    """Best seconds of ``fn`` on a float32 array, its result in the same buffer.

    The argument is donated, so the result reuses its memory: fresh pages
    (which the OS faults in and zeroes: ten times slower than DRAM on a CPU)
    are not what is measured.
    """
    step = jax.jit(fn, donate_argnums=0)
    x = step(jnp.ones(shape, jnp.float32))
    jax.block_until_ready(x)
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        x = step(x)
        jax.block_until_ready(x)
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


# The DRAM copy's calls at its grown size, the best kept. On this project's
# shared 2-core CPU (2026-12-07) one 256 MB copy took 12-55 ms at load 4-5,
# and the memory's speed moved 21-38 GB/s between measurements seconds
# apart: ten calibrations in a row read 18.9-35.3 GB/s (sd 22% of the mean)
# with the best of 3 calls, 21.9-34.8 (18%) with the best of 15. (The slope
# between this copy and one of half its size, which cancels a call's fixed
# cost as accel_check's direct figure does, read 17.4-57.3: sd 41%; the
# fixed cost is under 0.6 ms of a 256 MB copy's ~25 ms here.) 15 calls
# cost ~0.4 s on a CPU.
DRAM_RUNS = 15


def _dram_bandwidth(nbytes: int, largest: int, target: float) -> float:
    """Bytes/s read plus written by one scaled copy of a buffer beyond the caches.

    One pass per call, the buffer grown from ``nbytes`` until a call lasts
    ``target`` (at most ``largest`` bytes): XLA's CPU backend runs a large
    copy inside a loop ten times slower than one alone. Then the best of
    `DRAM_RUNS` calls at that size: what the memory does when the call has
    the cores to itself.
    """

    def time_at(entries: int) -> float:
        return _in_place_seconds(lambda c: c * 0.5 + 1.0, (entries,))

    entries, _ = grow(time_at, nbytes // 4, max(largest // 4, 1), target=target)
    seconds = _in_place_seconds(lambda c: c * 0.5 + 1.0, (entries,), runs=DRAM_RUNS)
    return 8.0 * entries / seconds


def _transpose_bandwidth(nbytes: int, target: float) -> float:
    """Bytes/s read plus written by transposing a square matrix of ``nbytes``.

    The transposes einslice runs are of chunk-sized blocks, so the matrix is
    a cache's size, transposed by back-to-back calls until they last
    ``target``: on XLA's CPU backend a transpose inside a loop, or of a
    matrix far beyond the caches, runs over ten times slower than that.
    """
    n = max(int(math.sqrt(nbytes / 4)) // 32 * 32, 32)
    x = jnp.ones((n, n), jnp.float32)
    compiled = jax.jit(lambda c: c.T * 1.0).lower(x).compile()
    jax.block_until_ready(compiled(x))

    def time_at(calls: int) -> float:
        best = math.inf
        for _ in range(3):
            start = time.perf_counter()
            results = [compiled(x) for _ in range(calls)]
            jax.block_until_ready(results[-1])
            best = min(best, time.perf_counter() - start)
        return best

    calls, seconds = grow(time_at, 1, 4096, target=target)
    return 2.0 * x.nbytes * calls / seconds


def enable_compilation_cache() -> str | None:
    """Turn on JAX's persistent compilation cache in einslice's cache directory.

    A cache directory the caller already set (``jax_compilation_cache_dir``)
    is kept, never overridden. einslice's own, ``xla/`` in its cache
    directory, is made 0700; JAX runs the compiled programs it finds there,
    so where that directory belongs to someone else or others can write it
    (``_cachedir.private_dir``), the cache stays off, with a `CacheWarning`.

    Returns:
        The compilation cache directory in use; None if it stayed off.

    Example:
        >>> import jax, einslice
        >>> jax.config.update("jax_compilation_cache_dir", "/tmp/mine")
        >>> einslice.enable_compilation_cache()
        '/tmp/mine'
        >>> jax.config.update("jax_compilation_cache_dir", None)
    """
    current = getattr(jax.config, "jax_compilation_cache_dir", None)
    if current:
        return str(current)
    directory = cache_dir() / "xla"
    problem = private_dir(directory)
    if problem:
        warnings.warn(
            f"einslice leaves JAX's compilation cache off: {problem}, and JAX "
            "runs the compiled programs it finds there. Make that directory "
            "yours, writable only by you (chmod 700) and empty, or set "
            "EINSLICE_CACHE_DIR to a directory only you can write.",
            CacheWarning,
            stacklevel=2,
        )
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    return str(directory)
