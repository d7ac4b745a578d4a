"""Wisdom: which ranked candidate measured fastest, per signature, on disk.

Like FFTW's wisdom: a JSON file (``wisdom.json`` in the cache directory) maps a
signature (equation, shapes, dtype, semiring, limit, path strategy, devices,
device kind) to the chosen candidate and the measured times. The file records
the einslice and jax versions that wrote it; a file from other versions, or
one that cannot be read, is ignored with a warning (a new measurement then
overwrites it). Pure Python: no JAX here.
"""

from __future__ import annotations

import json
import os
import warnings
from functools import cache
from importlib import metadata
from pathlib import Path

from ._cachedir import cache_dir

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
    """Store one signature's entry, in memory and in the file."""
    _ensure_loaded()
    _entries[key] = entry
    _write(wisdom_path(), export())


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
    data = {"format": FORMAT, **versions(), "entries": dict(_entries)}
    if path is not None:
        _write(Path(path), data)
    return data


def import_(source: dict | str | os.PathLike) -> int:
    """Add wisdom from ``export``'s dict or a file; returns entries added.

    Wisdom from other einslice or jax versions, or that is malformed, is
    ignored with a warning (0 added).
    """
    _ensure_loaded()
    if isinstance(source, dict):
        data, where = source, "the given wisdom"
    else:
        where = f"the wisdom file {str(source)!r}"
        data = _read(Path(source), where)
        if data is None:
            return 0
    entries = _validated(data, where)
    _entries.update(entries)
    if entries:
        _write(wisdom_path(), export())
    return len(entries)


def clear() -> None:
    """Forget all wisdom, in memory and on disk."""
    _ensure_loaded()
    _entries.clear()
    wisdom_path().unlink(missing_ok=True)


def _ensure_loaded() -> None:
    path = wisdom_path()
    if _source[0] is path:
        return
    _entries.clear()
    _source[0] = path
    if path.exists():
        data = _read(path, f"the wisdom file {str(path)!r}")
        if data is not None:
            _entries.update(_validated(data, f"the wisdom file {str(path)!r}"))


def _read(path: Path, where: str) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        _ignore(where, f"it cannot be read ({error})")
        return None
    return data


def _validated(data, where: str) -> dict[str, dict]:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        _ignore(where, f"it is not einslice wisdom of format {FORMAT}")
        return {}
    mine = versions()
    theirs = {name: data.get(name) for name in mine}
    if theirs != mine:
        _ignore(where, f"it was measured with {theirs}, not {mine}")
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) and set(v) == _ENTRY_FIELDS
        for k, v in entries.items()
    ):
        _ignore(where, "its entries are malformed")
        return {}
    return entries


def _ignore(where: str, why: str) -> None:
    warnings.warn(
        f"ignoring {where}: {why}; einslice will measure again "
        "(einslice.wisdom.clear() removes the file).",
        stacklevel=4,
    )


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True))
    temporary.replace(path)
