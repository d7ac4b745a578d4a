"""Where einslice keeps what it learns on disk: profiles, wisdom, trees.

Pure Python (no JAX), so the planner may use it. One directory for all of it,
chosen in this order: ``$EINSLICE_CACHE_DIR``; ``$XDG_CACHE_HOME/einslice``;
``~/.cache/einslice``. It is created on first write, never at import.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path


def cache_dir() -> Path:
    """The directory for einslice's on-disk caches (not created here).

    Example:
        >>> import os
        >>> os.environ["EINSLICE_CACHE_DIR"] = "/tmp/einslice-doc"
        >>> str(cache_dir())
        '/tmp/einslice-doc'
        >>> del os.environ["EINSLICE_CACHE_DIR"]
    """
    return _resolve(
        os.environ.get("EINSLICE_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME")
    )


@lru_cache(maxsize=64)
def _resolve(explicit: str | None, xdg: str | None) -> Path:
    """The directory for these variables (cached: planning asks every call)."""
    if explicit:
        return Path(explicit).expanduser()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "einslice"


class CacheWarning(UserWarning):
    """Something in einslice's cache directory was ignored or cannot be written.

    einslice then works as without a cache: it measures or searches again.
    """


# Directories already reported unwritable (one warning each per process).
_unwritable: set[Path] = set()


def write_atomic(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` whole or not at all; False if it cannot.

    The text goes to a private temporary file that then replaces ``path``,
    so a reader never sees half a file. A directory that cannot be written
    (a path under a regular file, a read-only home) disables remembering:
    one ``CacheWarning`` per directory, and the caller carries on.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "sub" / "a.json"
        >>> write_atomic(target, "{}"), target.read_text()
        (True, '{}')
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
        )
        try:
            with os.fdopen(handle, "w") as f:
                f.write(text)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as error:
        warn_unwritable(path, error)
        return False
    return True


def warn_unwritable(path: Path, error: OSError) -> None:
    """Say once per directory that einslice cannot write its cache there."""
    if path.parent in _unwritable:
        return
    _unwritable.add(path.parent)
    warnings.warn(
        f"einslice cannot write {str(path)!r} ({error}); it will work without "
        "remembering what it measures there. Point EINSLICE_CACHE_DIR at a "
        "writable directory to keep it.",
        CacheWarning,
        stacklevel=3,
    )


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (a ``.lock`` file beside it).

    Serializes read-merge-write updates of one file across processes. Where
    no lock can be had (no fcntl, or a directory that cannot be written) the
    body runs unlocked: its write then fails and says so.

    Example:
        >>> import tempfile
        >>> with locked(Path(tempfile.mkdtemp()) / "w.json"):
        ...     pass
    """
    handle = None
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_name(path.name + ".lock"), "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
    except (OSError, ImportError):
        if handle is not None:
            handle.close()
        handle = None
    try:
        yield
    finally:
        if handle is not None:
            handle.close()  # closing releases the lock
