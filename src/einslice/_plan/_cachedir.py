"""Where einslice keeps what it learns on disk: profiles, wisdom, trees.

Pure Python (no JAX), so the planner may use it. One directory for all of it,
chosen in this order: ``$EINSLICE_CACHE_DIR``; ``$XDG_CACHE_HOME/einslice``;
``~/.cache/einslice``. It is created on first write, never at import.

What is read back is data (JSON, through `read_json`: never pickle), and a
corrupt or hostile file is ignored with a `CacheWarning`. Code is another
matter: the native kernel's library (``_exec/_native.py``) and JAX's compiled
programs (``einslice.enable_compilation_cache``) are loaded only from a
directory that this user owns and no one else can write (`private_dir`,
`untrusted`), as ssh trusts only such files.
"""

from __future__ import annotations

import json
import os
import stat
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


def read_json(path: Path) -> object:
    """The JSON value in ``path``; ValueError if it holds none, OSError if unread.

    Only a regular file is read (a FIFO or a device there could block or never
    end); bytes that are not UTF-8 and nesting too deep for Python's parser
    (a RecursionError) are ValueErrors too, so that each reader's one
    ``except (OSError, ValueError)`` ignores a corrupt or hostile file.

    Example:
        >>> target = Path(tempfile.mkdtemp()) / "x.json"
        >>> _ = target.write_text("[" * 100_000 + "]" * 100_000)
        >>> read_json(target)
        Traceback (most recent call last):
        ...
        ValueError: its JSON is nested too deeply to read
    """
    return parse_json(read_text(path))


def read_text(path: Path) -> str:
    """The text of ``path``, a regular file, in UTF-8 (else ValueError).

    A FIFO or a device could block the reader or never end: refused.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    with os.fdopen(os.open(path, flags), "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ValueError("it is not a regular file")
        data = handle.read()
    return data.decode("utf-8")  # (UnicodeDecodeError is a ValueError)


def parse_json(text: str) -> object:
    """``json.loads``, with too deep a nesting a ValueError (not a RecursionError)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("its JSON is nested too deeply to read") from None


def owner_uid() -> int | None:
    """The user whose files einslice runs as code: this process's effective uid.

    None where the system has no uids (Windows): then nothing is checked.
    Tests replace it to see files as another user's (einslice may run as root,
    who owns whatever a test plants).
    """
    return os.geteuid() if hasattr(os, "geteuid") else None


def untrusted(status: os.stat_result, path: Path) -> str:
    """Why a file or directory of this ``status`` is not to be trusted; '' if it is.

    Trusted: owned by this user (`owner_uid`), writable by no one else.

    Example:
        >>> directory = Path(tempfile.mkdtemp())
        >>> untrusted(directory.stat(), directory)
        ''
        >>> directory.chmod(0o770)
        >>> untrusted(directory.stat(), directory).split("' ")[1]
        'is writable by its group (mode 770)'
    """
    uid = owner_uid()
    if uid is not None and status.st_uid != uid:
        return f"{str(path)!r} belongs to uid {status.st_uid}, not to this user ({uid})"
    mode = stat.S_IMODE(status.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = {stat.S_IWGRP: "its group", stat.S_IWOTH: "others"}
        whom = " and ".join(v for k, v in who.items() if mode & k)
        return f"{str(path)!r} is writable by {whom} (mode {mode:o})"
    return ""


def private_dir(path: Path) -> str:
    """Make ``path`` a directory only this user can write (0700), if it is missing.

    Returns '' when ``path`` is such a directory (made now, or found owned
    by this user and writable by no one else), else why it is not. Its
    parents are made with the usual permissions.

    Example:
        >>> private_dir(Path(tempfile.mkdtemp()) / "kernels")
        ''
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
        status = os.lstat(path)
    except OSError as error:
        return f"{str(path)!r} cannot be made ({error})"
    if stat.S_ISLNK(status.st_mode):
        return f"{str(path)!r} is a symbolic link"
    if not stat.S_ISDIR(status.st_mode):
        return f"{str(path)!r} is not a directory"
    return untrusted(status, path)
