"""Test-wide configuration: float64 references and hypothesis profiles.

``jax_enable_x64`` is on so that float64 operands stay float64 and properties can
be checked against ``numpy.einsum`` to ~1e-12. Hypothesis profiles:

* ``ci`` (default): modest example counts and no deadline (the first call of
  each formula compiles), derandomized so CI runs are reproducible. Properties
  whose every example compiles a derivative set fewer examples themselves.
* ``dev``: a handful of examples, for quick local iteration.
* ``thorough``: many random examples, for hunting bugs before a release.

Pick one with ``HYPOTHESIS_PROFILE=thorough pytest tests``.
"""

from __future__ import annotations

import os

import jax
import pytest
from hypothesis import HealthCheck, settings

jax.config.update("jax_enable_x64", True)

_COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}
settings.register_profile("ci", max_examples=25, derandomize=True, **_COMMON)
settings.register_profile("dev", max_examples=8, **_COMMON)
settings.register_profile("thorough", max_examples=500, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _private_cache_dir(tmp_path, monkeypatch):
    """Every test gets its own einslice cache directory (profiles, wisdom).

    No test reads a profile or wisdom that another test or the user stored,
    or writes into the user's cache.
    """
    monkeypatch.setenv("EINSLICE_CACHE_DIR", str(tmp_path / "einslice-cache"))
