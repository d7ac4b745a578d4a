"""Where einslice keeps what it learns on disk: profiles, wisdom, trees.

Pure Python (no JAX), so the planner may use it. One directory for all of it,
chosen in this order: ``$EINSLICE_CACHE_DIR``; ``$XDG_CACHE_HOME/einslice``;
``~/.cache/einslice``. It is created on first write, never at import.
"""

from __future__ import annotations

import os
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
