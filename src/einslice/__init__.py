"""einslice: any einsum in JAX, fast and inside a memory budget.

Example:
    >>> import jax.numpy as jnp, einslice
    >>> A = jnp.ones((8, 8))
    >>> einslice.einsum("ij,jk->ik", A, A, memory_limit="1MB").shape
    (8, 8)
"""

from importlib import metadata as _metadata

from . import profiles as profiles
from . import wisdom as wisdom
from ._api import einsum as einsum
from ._api import log_einsum as log_einsum
from ._api import max_einsum as max_einsum
from ._api import min_einsum as min_einsum
from ._api import naive_einsum as naive_einsum
from ._api import plan as plan
from ._errors import EinsliceError as EinsliceError
from ._errors import MemoryLimitError as MemoryLimitError
from ._exec._calibrate import calibrate as calibrate
from ._exec._calibrate import enable_compilation_cache as enable_compilation_cache
from ._exec._run import running_plan as running_plan
from ._plan._memory import parse_memory_limit as parse_memory_limit
from ._plan._profile import Profile as Profile
from ._plan._search import TreeSearch as TreeSearch
from ._plan._types import Plan as Plan

try:
    __version__ = _metadata.version("einslice")
except _metadata.PackageNotFoundError:  # run from a source tree, not installed
    __version__ = "0+unknown"

__all__ = [
    "EinsliceError",
    "MemoryLimitError",
    "Plan",
    "Profile",
    "TreeSearch",
    "__version__",
    "calibrate",
    "einsum",
    "enable_compilation_cache",
    "log_einsum",
    "max_einsum",
    "min_einsum",
    "naive_einsum",
    "parse_memory_limit",
    "plan",
    "profiles",
    "running_plan",
    "wisdom",
]
