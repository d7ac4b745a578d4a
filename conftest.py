"""Every test and doctest (tests/ and src/) writes its caches into a temp dir.

The planner stores searched contraction trees on disk (``_plan/_search.py``);
a test run must never fill the user's real cache, nor read stale entries
from it. Tests that look at the cache itself monkeypatch their own directory.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def _session_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("einslice-cache")


@pytest.fixture(autouse=True)
def _private_cache_dir(_session_cache, monkeypatch):
    """Point ``EINSLICE_CACHE_DIR`` at the session's temp dir for each test."""
    monkeypatch.setenv("EINSLICE_CACHE_DIR", str(_session_cache))
