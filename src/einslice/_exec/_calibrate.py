"""Measure this device's ``Profile`` with a few micro-benchmarks, and remember it.

``calibrate()`` times a large matrix multiply (FLOP/s), a streaming copy at
three working-set sizes (per-core cache, shared cache, DRAM bandwidth), a
transposing copy, an empty ``lax.scan`` iteration and a chain of tiny kernels
inside one (launch cost); the figures it cannot measure quickly (cache sizes,
small-product penalties, fresh-page cost) come from the platform's built-in
profile. It stores the result in the cache directory; ``current_profile()``
prefers that file, for this device kind, to the built-in default.
"""

from __future__ import annotations

import re
import time
import warnings
from dataclasses import replace
from functools import cache
from pathlib import Path
from statistics import median

import jax
import jax.numpy as jnp
from jax import lax

from .._plan._cachedir import CacheWarning, cache_dir, write_atomic
from .._plan._profile import Profile, built_in, figures_problem


@cache
def device_kind() -> str:
    """The first device's kind, e.g. ``'cpu'`` or ``'NVIDIA H100 80GB HBM3'``."""
    return str(jax.devices()[0].device_kind)


@cache
def _platform() -> str:
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
    return _load(cache_dir(), device_kind(), _platform())


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
        stored = Profile.from_json(path.read_text())
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


def calibrate(save: bool = True, size: int = 1024) -> Profile:
    """Measure this device's speeds (about 10 s on a small CPU) and keep them.

    Args:
        save: store the profile in ``einslice``'s cache directory
            (``$EINSLICE_CACHE_DIR`` or ``$XDG_CACHE_HOME/einslice``), where
            later plans on this device kind find it.
        size: side of the timed matrix multiply; the other benchmarks scale
            with it (smaller is quicker and noisier).

    Returns:
        The measured Profile.

    Example:
        >>> import einslice
        >>> einslice.calibrate(save=False, size=64).matmul_flops > 0
        True
    """
    device = jax.devices()[0]
    base = built_in(device.platform)
    kind = str(device.device_kind)
    rate = _matmul_rate(size)
    loop, launch = _loop_and_launch_seconds(4 * size)
    profile = replace(
        base,
        device_kind=kind,
        matmul_flops=rate,
        cache_bandwidth=_stream_bandwidth(base.cache_bytes // 2, 64, loop),
        shared_cache_bandwidth=_stream_bandwidth(
            (base.cache_bytes + base.shared_cache_bytes) // 2, 16, loop
        ),
        dram_bandwidth=_stream_bandwidth(4 * base.last_level_cache_bytes, 2, loop),
        transpose_bandwidth=_transpose_bandwidth(2 * size),
        loop_seconds=loop,
        launch_seconds=launch,
    )
    if save:
        write_atomic(profile_path(kind), profile.to_json())  # or one warning
        _load.cache_clear()
    return profile


def _seconds(fn, *args, runs: int = 5) -> float:
    """Median wall time of a compiled call, after one warm-up call."""
    compiled = jax.jit(fn).lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return max(median(times), 1e-9)


def _matmul_rate(n: int) -> float:
    a = jnp.ones((n, n), jnp.float32)
    return 2.0 * n**3 / _seconds(jnp.matmul, a, a)


def _loop_and_launch_seconds(iterations: int) -> tuple[float, float]:
    """Seconds per scan iteration and per kernel inside one.

    Times scans whose body slices its input and runs one, then eight,
    dependent tiny products: the difference is seven kernels' cost, the rest
    the loop's (at least a tenth of a one-kernel iteration).
    """

    def chain(count: int):
        def body(c, x):
            for _ in range(count):
                c = c @ x
            return c, None

        return lambda xs: lax.scan(body, xs[0], xs)[0]

    xs = jnp.ones((iterations, 4, 4), jnp.float32) * 0.25
    one = _seconds(chain(1), xs) / iterations
    many = _seconds(chain(8), xs) / iterations
    launch = max((many - one) / 7, 0.0)
    return max(one - launch, 0.1 * one), launch


def _stream_bandwidth(nbytes: int, repeats: int, loop: float) -> float:
    """Bytes/s read plus written by a scaled copy of a working set this big."""
    x = jnp.ones((max(nbytes // 4, 1024),), jnp.float32)

    def stream(x):
        return lax.scan(lambda c, _: (c * 0.5 + 1.0, None), x, None, length=repeats)[0]

    per_pass = _seconds(stream, x) / repeats - loop
    return 2.0 * x.nbytes / max(per_pass, 1e-9)


def _transpose_bandwidth(n: int) -> float:
    x = jnp.ones((n, n), jnp.float32)
    return 2.0 * x.nbytes / _seconds(lambda x: x.T * 1.0, x)


def enable_compilation_cache() -> str:
    """Turn on JAX's persistent compilation cache in einslice's cache directory.

    A cache directory the caller already set (``jax_compilation_cache_dir``)
    is kept, never overridden.

    Returns:
        The compilation cache directory in use.

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
    directory.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    return str(directory)
