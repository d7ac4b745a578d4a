"""Wisdom: which ranked candidate measured fastest, per signature, on disk.

Like FFTW's wisdom: a JSON file (``wisdom.json`` in the cache directory) maps a
signature (equation, shapes, dtype, semiring, limit, path strategy, devices,
device kind) to the chosen candidate and the measured times. The file records
the einslice and jax versions that wrote it; a file from other versions, or
one that cannot be read, is ignored with a warning (a new measurement then
overwrites it); so is a single malformed entry. Processes sharing the cache
directory update the file under a lock, each merging what the others wrote.
Pure Python: no JAX here.
"""

from __future__ import annotations

import json
import os
import warnings
from functools import cache
from importlib import metadata
from pathlib import Path

from .._errors import EinsliceError
from ._cachedir import (
    CacheWarning,
    cache_dir,
    locked,
    read_json,
    warn_unwritable,
    write_atomic,
)

FORMAT = 1
_ENTRY_FIELDS = {"path", "chunks", "lowering", "labels", "seconds", "chosen"}

# The loaded entries, and the file they came from (reloaded when the cache
# directory changes).
_entries: dict[str, dict] = {}
_source: list[Path | None] = [None]


@cache
def versions() -> dict[str, str]:
    """The einslice and jax versions wisdom is valid for."""
    found = {}
    for name in ("einslice", "jax"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "unknown"
    return found


def wisdom_path() -> Path:
    """Where wisdom is stored: ``wisdom.json`` in the cache directory."""
    return _in(cache_dir())


@cache
def _in(directory: Path) -> Path:
    return directory / "wisdom.json"


def lookup(key: str) -> dict | None:
    """The remembered entry for a signature, or None."""
    _ensure_loaded()
    return _entries.get(key)


def has_any() -> bool:
    """Whether any wisdom is loaded (cheap: lets callers skip building keys)."""
    _ensure_loaded()
    return bool(_entries)


def remember(key: str, entry: dict) -> None:
    """Store one signature's entry, in memory and in the file.

    The file is updated under a lock, merging what other processes wrote
    since it was read: no process loses another's wisdom.
    """
    _ensure_loaded()
    _entries[key] = entry
    _update({key: entry})


def export(path: str | os.PathLike | None = None) -> dict:
    """All wisdom as a JSON-ready dict; also written to ``path`` if given.

    Example:
        >>> import os, tempfile
        >>> os.environ["EINSLICE_CACHE_DIR"] = tempfile.mkdtemp()
        >>> sorted(export())
        ['einslice', 'entries', 'format', 'jax']
        >>> del os.environ["EINSLICE_CACHE_DIR"]
    """
    _ensure_loaded()
    data = _document(_entries)
    if path is not None:
        target = Path(path)
        try:
            target.write_text(json.dumps(data, indent=1, sort_keys=True))
        except OSError as error:
            raise EinsliceError(
                f"cannot write the wisdom to {str(path)!r} ({error}); pass a path "
                "in a writable directory."
            ) from None
    return data


def import_(source: dict | str | os.PathLike) -> int:
    """Add wisdom from ``export``'s dict or a file; returns entries added.

    Wisdom from other einslice or jax versions, or that is malformed, is
    ignored with a warning (0 added); so are single malformed entries.
    """
    _ensure_loaded()
    if isinstance(source, dict):
        data, where = source, "the given wisdom"
    else:
        where = f"the wisdom file {str(source)!r}"
        data = _read(Path(source), where)
        if data is _UNREADABLE:
            return 0
    entries = _validated(data, where)
    _entries.update(entries)
    if entries:
        _update(entries)
    return len(entries)


def clear() -> None:
    """Forget all wisdom, in memory and on disk."""
    _ensure_loaded()
    _entries.clear()
    path = wisdom_path()
    with locked(path):
        try:
            path.unlink(missing_ok=True)
        except OSError as error:  # a directory in its place, say
            warn_unwritable(path, error)


def _document(entries: dict[str, dict]) -> dict:
    return {"format": FORMAT, **versions(), "entries": dict(entries)}


def _update(entries: dict[str, dict]) -> None:
    """Merge ``entries`` into the file: read it under the lock, add, replace."""
    path = wisdom_path()
    with locked(path):
        with warnings.catch_warnings():
            # what is wrong with the file was said when it was loaded
            warnings.simplefilter("ignore", CacheWarning)
            on_disk = _load(path)
        for key, entry in on_disk.items():
            _entries.setdefault(key, entry)
        merged = {**on_disk, **entries}
        write_atomic(path, json.dumps(_document(merged), indent=1, sort_keys=True))


def _ensure_loaded() -> None:
    path = wisdom_path()
    if _source[0] is path:
        return
    _entries.clear()
    _source[0] = path
    _entries.update(_load(path))


def _load(path: Path) -> dict[str, dict]:
    """The valid entries of the wisdom file (none if it is absent or damaged)."""
    if not path.exists() and not path.is_symlink():
        return {}
    if path.is_dir():  # nothing can be stored there either: one warning says so
        warn_unwritable(path, IsADirectoryError(f"{str(path)!r} is a directory"))
        return {}
    where = f"the wisdom file {str(path)!r}"
    data = _read(path, where)
    return {} if data is _UNREADABLE else _validated(data, where)


_UNREADABLE = object()  # what _read gives for a file it cannot read


def _read(path: Path, where: str) -> object:
    try:
        return read_json(path)
    except (OSError, ValueError) as error:
        _ignore(where, f"it cannot be read ({error})")
        return _UNREADABLE


def _validated(data: object, where: str) -> dict[str, dict]:
    """The well-formed entries of wisdom ``data``; one warning for the rest."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        _ignore(where, f"it is not einslice wisdom of format {FORMAT}")
        return {}
    mine = versions()
    theirs = {name: data.get(name) for name in mine}
    if theirs != mine:
        _ignore(where, f"it was measured with {theirs}, not {mine}")
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict):
        _ignore(where, "its entries are not a JSON object")
        return {}
    good = {k: v for k, v in entries.items() if isinstance(k, str) and _entry_ok(v)}
    if len(good) < len(entries):
        _ignore(where, f"{len(entries) - len(good)} of its entries are malformed")
    return good


def _entry_ok(entry: object) -> bool:
    """Whether a wisdom entry has every field, each of the type the tuner reads.

    Example:
        >>> _entry_ok({"path": [[0, 1]], "chunks": [], "lowering": "scan",
        ...            "labels": ["a"], "seconds": [0.1], "chosen": 0})
        True
        >>> _entry_ok({"path": 3, "chunks": [], "lowering": "scan",
        ...            "labels": ["a"], "seconds": [0.1], "chosen": 0})
        False
    """
    if not isinstance(entry, dict) or set(entry) != _ENTRY_FIELDS:
        return False
    labels, seconds, chosen = entry["labels"], entry["seconds"], entry["chosen"]
    return (
        _int_pairs(entry["path"])
        and _int_pairs(entry["chunks"])
        and isinstance(entry["lowering"], str)
        and isinstance(labels, list)
        and all(isinstance(x, str) for x in labels)
        and isinstance(seconds, list)
        and len(seconds) == len(labels)
        and all(s is None or _number(s) for s in seconds)
        and _integer(chosen)
        and 0 <= chosen < len(labels)
    )


def _int_pairs(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(pair, list) and len(pair) == 2 and all(map(_integer, pair))
        for pair in value
    )


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _ignore(where: str, why: str) -> None:
    warnings.warn(
        f"ignoring {where}: {why}; einslice will measure again "
        "(einslice.wisdom.clear() removes the file).",
        CacheWarning,
        stacklevel=5,
    )
