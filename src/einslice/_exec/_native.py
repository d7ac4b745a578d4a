"""einslice's own CPU kernels: built when first worth it, run as XLA FFI calls.

One kernel so far, the max-plus product (``max_plus.cc``): XLA:CPU's
elementwise fusions cannot keep a register tile of a max-plus product, so
the XLA path runs it 5-7x slower than a float matmul; the kernel, blocked as
a matmul is, 2-2.5x (``benchmarks/results/maxplus.md``).

The kernel is C++ compiled here, on the machine that runs it, with
``-march=native`` against the installed jaxlib's FFI headers: the package
stays pure Python, the vectors are the machine's widest, and the binary
always matches the running XLA. The library is cached in einslice's cache
directory (``_plan/_cachedir.py``) under a key of its source, the compiler,
jaxlib's version and the CPU, so a machine compiles it once (about 3 s), the
first time a product is large enough to pay for that (`BUILD_PAIRS`).

Where it cannot be built (no C++ compiler, a failed compile) or is turned
off (``EINSLICE_NATIVE=0``, which turns off the TPU's Pallas kernel too,
``_pallas.py``), max-plus products run on the XLA path with the same
results; a failed build warns once per process (`NativeWarning`) and says
why. ``status()`` reports which it is.

A library is code that every process loading it runs, so only einslice's
own is loaded: it is built into ``kernels/``, a directory made 0700, and
before loading, the file and its directory must belong to this user and be
writable by no one else (``_cachedir.untrusted``; checked on the open file
and directory, then loaded through ``/proc/self/fd`` on Linux so that nothing
can be swapped in between). A cache that fails the check (a group-writable
home, a cache directory shared between users, a CI cache restored from
elsewhere) is not loaded from nor built into: the kernel is built in a
private temporary directory for this process instead, with one
``CacheWarning``. Why rebuild rather than take the XLA path: the results
are the same either way, but the kernel makes max-plus products 2-3x faster
compiled and the host walk's 15x (Grids_15's MAP walk: 14.6 s in numpy,
under a second with it), and the build (about 3 s) is made only when a
product is large enough to pay for it (`BUILD_PAIRS`), as on a first run.

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
import stat
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

from .._plan._cachedir import CacheWarning, cache_dir, private_dir, untrusted

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


# When a product is worth the one-time build (about 3 s, then cached on disk
# for every later process): a compiled max-plus product of 2^24 pairs (a
# 256^2 by 256 one) is a loop body run many times, or a call made often; a
# host walk's product of 2^27 pairs takes numpy about half a second. Smaller
# products use the kernel once it is built (or found in the cache) and the
# XLA path, or numpy, before: a small MAP query on a fresh machine then
# answers in milliseconds, not after a compile.
BUILD_PAIRS = 1 << 24
HOST_BUILD_PAIRS = 1 << 27


def max_plus_kernel(build: bool = True) -> MaxPlus | None:
    """``out[b, m, n] = max_k lhs[b, k, m] + rhs[b, k, n]`` on the CPU, or None.

    None when the kernel is turned off or cannot be built here, or (with
    ``build=False``) is not built yet. It takes float32 and float64 (both
    operands of one dtype), any leading batch dimensions, either side as
    ``[..., m, k]`` / ``[..., n, k]`` instead (``lhs_k_last=True`` /
    ``rhs_k_last=True``), and follows the max semiring's rules (``-inf +
    inf`` is ``-inf``; NaN propagates). It has no derivative of its own:
    callers define one (``_semiring.max_plus_dot``).
    """
    if not enabled():
        return None
    if _registered is None and not build and _library(build=False)[0] is None:
        return None
    return _max_plus_kernel()


def status() -> str:
    """How max-plus products run here: the kernel, off, or why not built."""
    if not enabled():
        return "off (EINSLICE_NATIVE=0): max-plus runs on XLA's path"
    library, reason = (_registered, "") if _registered else _library(build=False)
    if library is not None:
        return f"native kernel ({library})"
    if reason == "not built yet":
        return "XLA path until a product is large enough to build the kernel for"
    return f"XLA path: {reason}"


def enabled() -> bool:
    """Whether einslice's own kernels are on (``EINSLICE_NATIVE``, default on)."""
    return os.environ.get("EINSLICE_NATIVE", "1").strip().lower() not in (
        "0",
        "false",
        "no",
        "off",
    )


# The library whose handlers this process registered: XLA refuses a second
# registration of a target from another file, so the first one stays. And
# the handle it was loaded as (the host walk calls through it: loading the
# path again could find another file there).
_registered: Path | None = None
_loaded: ctypes.CDLL | None = None


@cache
def _max_plus_kernel() -> MaxPlus | None:
    global _registered, _loaded
    library, reason = (_registered, "") if _registered else _library()
    if library is not None and _registered is None:
        loaded, reason = _load(library)
        if loaded is None:
            library = None
        else:
            for dtype, target in TARGETS.items():
                capsule = jax.ffi.pycapsule(getattr(loaded, SYMBOLS[dtype]))
                jax.ffi.register_ffi_target(target, capsule, platform="cpu")
            _registered, _loaded = library, loaded
    if library is None:
        warnings.warn(
            f"einslice: the native max-plus kernel was not built or loaded ({reason}); "
            "max-plus products run on XLA's path, with the same results, "
            "2-3x slower. Install a C++ compiler (g++ or clang++, or name one "
            "in $CXX), or set EINSLICE_NATIVE=0 to silence this.",
            NativeWarning,
            stacklevel=3,
        )
        return None

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
    if lhs.dtype != rhs.dtype or str(lhs.dtype) not in TARGETS:
        return None
    batch, m, depth = lhs.shape
    n = rhs.shape[2]
    if max_plus_kernel(build=batch * m * depth * n >= HOST_BUILD_PAIRS) is None:
        return None
    lhs, rhs = np.ascontiguousarray(lhs), np.ascontiguousarray(rhs)
    out = np.empty((batch, m, n), lhs.dtype)
    _host_function()(
        lhs.itemsize, lhs.ctypes.data, rhs.ctypes.data, out.ctypes.data,
        batch, depth, m, n, 1, 0, _cores(),
    )  # fmt: skip
    return out


def _cores() -> int:
    """The cores this process may run on (all of them where that is unknown)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@cache
def _host_function():
    """The registered library's C entry point for numpy arrays."""
    assert _loaded is not None, "max_plus_kernel() loads the library first"
    function = _loaded.EinsliceMaxPlusHost
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


def _library(build: bool = True) -> tuple[Path | None, str]:
    """The library, built now if it is not in the cache (unless not ``build``).

    Else None and the reason. A cache that `_distrusted` refuses is neither
    read nor written: the library is then built in `_private`'s directory.
    """
    library, detail = _located(cache_dir())
    if library is None:
        return None, detail
    reason = _distrusted(library)
    if reason:
        _warn_distrusted(library, reason)
        library = _private() / library.name
    if library.exists():
        return library, ""
    if not build:
        return None, "not built yet"
    return _built(library)


def _distrusted(library: Path) -> str:
    """Why ``library``'s directory or file may not be loaded from; '' if it may.

    Each that exists must be owned by this user and writable by no one
    else, and be what it seems (no symbolic link). A directory not there
    yet is fine: `_built` makes it 0700.
    """
    for path, kind in ((library.parent, stat.S_ISDIR), (library, stat.S_ISREG)):
        try:
            status = os.lstat(path)
        except FileNotFoundError:
            return ""
        except OSError as error:
            return f"{str(path)!r} cannot be examined ({error})"
        if not kind(status.st_mode):
            return f"{str(path)!r} is a symbolic link or not a regular entry"
        problem = untrusted(status, path)
        if problem:
            return problem
    return ""


# Libraries already reported untrusted (one warning each per process).
_distrusted_warned: set[Path] = set()


def _warn_distrusted(library: Path, reason: str) -> None:
    if library in _distrusted_warned:
        return
    _distrusted_warned.add(library)
    warnings.warn(
        f"einslice does not load its native kernel from {str(library.parent)!r}: "
        f"{reason}, so someone else could have put code there. It builds the "
        "kernel in a private temporary directory for this process instead "
        "(about 3 s, when a max-plus product is large enough). To cache it: "
        f"chmod 700 {str(library.parent)!r} as its owner and delete the files "
        "in it, or set EINSLICE_CACHE_DIR to a directory only you can write.",
        CacheWarning,
        stacklevel=4,
    )


# The private directory this process builds in when the cache is refused:
# made 0700 by mkdtemp, removed when the process ends.
_scratch: tempfile.TemporaryDirectory | None = None


def _private() -> Path:
    global _scratch
    if _scratch is None:
        _scratch = tempfile.TemporaryDirectory(prefix="einslice-kernels-")
    return Path(_scratch.name)


def _load(library: Path) -> tuple[ctypes.CDLL | None, str]:
    """``library`` loaded, if it passes the checks on the open file; else why not.

    The directory and the file are opened (no symbolic links followed) and
    checked as open (`untrusted` of their fstat); on Linux the library is
    then loaded through its open descriptor (``/proc/self/fd/N``), so that
    what was checked is what is loaded. Elsewhere it is loaded by its path
    after the checks.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        directory = os.open(library.parent, flags | getattr(os, "O_DIRECTORY", 0))
    except OSError as error:
        return None, f"{str(library.parent)!r} cannot be opened ({error})"
    try:
        problem = untrusted(os.fstat(directory), library.parent)
        if problem:
            return None, problem
        handle = os.open(library.name, flags, dir_fd=directory)
    except OSError as error:
        return None, f"{str(library)!r} cannot be opened ({error})"
    finally:
        os.close(directory)
    try:
        status = os.fstat(handle)
        problem = untrusted(status, library)
        if not stat.S_ISREG(status.st_mode):
            problem = f"{str(library)!r} is not a regular file"
        if problem:
            return None, problem
        by_descriptor = f"/proc/self/fd/{handle}"
        path = by_descriptor if os.path.exists(by_descriptor) else str(library)
        return ctypes.CDLL(path), ""
    except OSError as error:
        return None, f"{str(library)!r} cannot be loaded ({error})"
    finally:
        os.close(handle)


@cache
def _located(directory: Path) -> tuple[Path | None, str]:
    """Where this machine's library is or goes in ``directory``.

    With the compiler that builds it; or None and why there is none.
    """
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
    return directory / "kernels" / f"max_plus-{key}.so", compiler


@cache
def _built(library: Path) -> tuple[Path | None, str]:
    """``library`` compiled (tried once per process), or None and why not."""
    compiler = _located(cache_dir())[1]
    problem = private_dir(library.parent)
    if problem:
        return None, f"not building there: {problem}"
    try:
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
            built.chmod(0o755)  # (whatever the umask: writable by its owner only)
            os.replace(built, library)  # atomic: concurrent builds are safe
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"building in {library.parent} failed: {err}"
    return library, ""


def _forget() -> None:
    """Forget what this process found or built (tests: a fresh process).

    The library registered with XLA stays registered (`_registered`).
    """
    for cached in (_located, _built, _max_plus_kernel, _host_function):
        cached.cache_clear()


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
