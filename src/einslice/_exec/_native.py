"""einslice's own CPU kernels: built on first use, run as XLA FFI custom calls.

One kernel so far, the max-plus product (``max_plus.cc``): XLA:CPU's
elementwise fusions cannot keep a register tile of a max-plus product, so
the XLA path runs it 5-7x slower than a float matmul; the kernel, blocked as
a matmul is, 2-2.5x (``benchmarks/results/maxplus.md``).

The kernel is C++ compiled here, on the machine that runs it, with
``-march=native`` against the installed jaxlib's FFI headers: the package
stays pure Python, the vectors are the machine's widest, and the binary
always matches the running XLA. The library is cached in einslice's cache
directory (``_plan/_cachedir.py``) under a key of its source, the compiler,
jaxlib's version and the CPU, so a machine compiles it once (about 3 s).

Where it cannot be built (no C++ compiler, a failed compile) or is turned
off (``EINSLICE_NATIVE=0``), max-plus products run on the XLA path with the
same results; a failed build warns once per process (`NativeWarning`) and
says why. ``status()`` reports which it is.

Example:
    >>> import jax.numpy as jnp
    >>> x = jnp.array([[[0.0], [5.0]]])  # [batch, k, m]
    >>> y = jnp.array([[[1.0], [0.0]]])  # [batch, k, n]
    >>> max_plus_kernel()(x, y).tolist()
    [[[5.0]]]
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from functools import cache
from importlib import metadata
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .._plan._cachedir import cache_dir

SOURCE = Path(__file__).with_name("max_plus.cc")
# FFI target names, one per dtype the kernel takes.
TARGETS = {"float32": "einslice_max_plus_f32", "float64": "einslice_max_plus_f64"}
SYMBOLS = {"float32": "EinsliceMaxPlusF32", "float64": "EinsliceMaxPlusF64"}
FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-w", "-pthread")
COMPILE_SECONDS = 300


class NativeWarning(UserWarning):
    """einslice's native kernel could not be built; the XLA path runs instead.

    Results are the same, max-plus products slower. Set ``EINSLICE_NATIVE=0``
    to use the XLA path without trying (and without this warning).
    """


MaxPlus = Callable[..., jax.Array]


def max_plus_kernel() -> MaxPlus | None:
    """``out[b, m, n] = max_k lhs[b, k, m] + rhs[b, k, n]`` on the CPU, or None.

    None when the kernel is turned off or cannot be built here. It takes
    float32 and float64 (both operands of one dtype), any leading batch
    dimensions, either side as ``[..., m, k]`` / ``[..., n, k]`` instead
    (``lhs_k_last=True`` / ``rhs_k_last=True``), and follows the max
    semiring's rules (``-inf + inf`` is ``-inf``; NaN propagates). It has no
    derivative of its own: callers define one (``_semiring.max_plus_dot``).
    """
    return _max_plus_kernel() if _enabled() else None


def status() -> str:
    """How max-plus products run here: the kernel, off, or why not built."""
    if not _enabled():
        return "off (EINSLICE_NATIVE=0): max-plus runs on XLA's path"
    library, reason = _library()
    return f"native kernel ({library})" if library else f"XLA path: {reason}"


def _enabled() -> bool:
    return os.environ.get("EINSLICE_NATIVE", "1").strip().lower() not in (
        "0",
        "false",
        "no",
        "off",
    )


# The library whose handlers this process registered: XLA refuses a second
# registration of a target from another file, so the first one stays.
_registered: Path | None = None


@cache
def _max_plus_kernel() -> MaxPlus | None:
    global _registered
    library, reason = (_registered, "") if _registered else _library()
    if library is None:
        warnings.warn(
            f"einslice: the native max-plus kernel was not built ({reason}); "
            "max-plus products run on XLA's path, with the same results, "
            "2-3x slower. Install a C++ compiler (g++ or clang++, or name one "
            "in $CXX), or set EINSLICE_NATIVE=0 to silence this.",
            NativeWarning,
            stacklevel=3,
        )
        return None
    if _registered is None:
        loaded = ctypes.cdll.LoadLibrary(str(library))
        for dtype, target in TARGETS.items():
            capsule = jax.ffi.pycapsule(getattr(loaded, SYMBOLS[dtype]))
            jax.ffi.register_ffi_target(target, capsule, platform="cpu")
        _registered = library

    def kernel(
        lhs: jax.Array,
        rhs: jax.Array,
        lhs_k_last: bool = False,
        rhs_k_last: bool = False,
    ) -> jax.Array:
        m = lhs.shape[-2] if lhs_k_last else lhs.shape[-1]
        n = rhs.shape[-2] if rhs_k_last else rhs.shape[-1]
        call = jax.ffi.ffi_call(
            TARGETS[str(lhs.dtype)],
            jax.ShapeDtypeStruct((*lhs.shape[:-2], m, n), lhs.dtype),
            vmap_method="broadcast_all",
        )
        return call(lhs, rhs, lhs_k_last=lhs_k_last, rhs_k_last=rhs_k_last)

    return kernel


def host_max_plus(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray | None:
    """``out[b, m, n] = max_k lhs[b, m, k] + rhs[b, k, n]`` for numpy arrays.

    The kernel called directly (the host walk's max products), on every core
    this process may use; None where it is off or not built, or for a dtype
    it does not take. Example:

        >>> a, b = np.array([[[0.0, 5.0]]]), np.array([[[1.0], [0.0]]])
        >>> host_max_plus(a, b).tolist()
        [[[5.0]]]
    """
    if not _enabled() or lhs.dtype != rhs.dtype or str(lhs.dtype) not in TARGETS:
        return None
    function = _host_function()
    if function is None:
        return None
    lhs, rhs = np.ascontiguousarray(lhs), np.ascontiguousarray(rhs)
    batch, m, depth = lhs.shape
    out = np.empty((batch, m, rhs.shape[2]), lhs.dtype)
    function(
        lhs.itemsize, lhs.ctypes.data, rhs.ctypes.data, out.ctypes.data,
        batch, depth, m, rhs.shape[2], 1, 0, len(os.sched_getaffinity(0)),
    )  # fmt: skip
    return out


@cache
def _host_function():
    """The kernel's C entry point for numpy arrays, or None (warned once)."""
    if _max_plus_kernel() is None:
        return None
    library, _ = (_registered, "") if _registered else _library()
    function = ctypes.CDLL(str(library)).EinsliceMaxPlusHost
    function.restype = ctypes.c_int
    int64 = ctypes.c_int64
    function.argtypes = [
        ctypes.c_int,
        *(ctypes.c_void_p,) * 3,
        *(int64,) * 4,
        *(ctypes.c_int,) * 3,
    ]
    return function


def takes(dtype) -> bool:
    """Whether the kernel takes operands of ``dtype``."""
    return str(jnp.dtype(dtype)) in TARGETS


@cache
def _library() -> tuple[Path | None, str]:
    """The built library (built now if not cached) or None and the reason."""
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        return None, "no C++ compiler found (c++, g++, or $CXX)"
    try:
        version = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"{compiler} --version failed: {err}"
    key = _key(SOURCE.read_bytes(), version, _jaxlib_version(), _cpu())
    library = cache_dir() / "kernels" / f"max_plus-{key}.so"
    if library.exists():
        return library, ""
    try:
        library.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
            built = Path(scratch) / library.name
            failures = []
            # -march=native first; without it where the compiler refuses it
            # (the kernel is correct either way, only its vectors narrower)
            for flags in (FLAGS, tuple(f for f in FLAGS if f != "-march=native")):
                command = [compiler, *flags, f"-I{jax.ffi.include_dir()}"]
                command += ["-o", str(built), str(SOURCE)]
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=COMPILE_SECONDS
                )
                if done.returncode == 0:
                    break
                tail = " / ".join(done.stderr.strip().splitlines()[-3:])
                failures.append(f"{' '.join(command)} failed: {tail}")
            else:
                return None, failures[0]
            os.replace(built, library)  # atomic: concurrent builds are safe
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"building in {library.parent} failed: {err}"
    return library, ""


def _jaxlib_version() -> str:
    """The installed jaxlib's version (its FFI headers are compiled in)."""
    try:
        return metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        return jax.__version__


def _key(source: bytes, compiler: str, jaxlib_version: str, cpu: str) -> str:
    text = b"\0".join(
        [
            source,
            compiler.encode(),
            jaxlib_version.encode(),
            cpu.encode(),
            *map(str.encode, FLAGS),
        ]
    )
    return hashlib.sha256(text).hexdigest()[:16]


def _cpu() -> str:
    """What ``-march=native`` depends on: the CPU's model and flags.

    From /proc/cpuinfo on Linux, else the platform's processor string. A
    cache shared by different machines then keeps one library per CPU, never
    one built for another's.
    """
    try:
        with open("/proc/cpuinfo") as info:
            lines = [
                line
                for line in info
                if line.startswith(("model name", "flags", "Features", "CPU part"))
            ]
        return "".join(dict.fromkeys(lines))
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
