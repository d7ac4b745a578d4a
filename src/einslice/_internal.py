"""The one internal interface of ``einslice.pgm``: what it takes from the core.

``pgm`` imports ``einslice`` (the public API), this module and its own
modules only (``tests/pgm/test_imports.py`` checks); everything it needs of
the private layers is named here, so that they can change behind it. Its
host-vs-compile decisions are the choosing stage's (``_exec/_choose.py``):
`choose`, `host_grad_pays`, `walk_pays`, `tree_seconds`. Its searched trees
reach the planner through `plan_with_tree` (the request's ``tree``).

Example:
    >>> import einslice
    >>> choose(einslice.plan("ij,jk->ik", (2, 2), (2, 2)), once=True).how
    'host'
"""

from ._api import default_memory_limit, plan_with_tree
from ._cli import limit_too_small
from ._errors import EinsliceFileNotFoundError
from ._exec._calibrate import current_profile, host_profile
from ._exec._choose import Chosen, choose, host_grad_pays, tree_seconds, walk_pays
from ._exec._host import run_on_host
from ._exec._host_grad import host_value_and_grad
from ._exec._run import compile_options
from ._plan._equation import build_equation
from ._plan._memory import CLI_NAMING, format_bytes, memory_limit_bytes
from ._plan._planner import prepare_terms
from ._plan._search import (
    Found,
    cheap,
    clock,
    greedy_path,
    search_tree,
)
from ._plan._types import Equation, HostWalk
from ._plan._walk import host_walk

__all__ = [
    "CLI_NAMING",
    "Chosen",
    "EinsliceFileNotFoundError",
    "Equation",
    "Found",
    "HostWalk",
    "build_equation",
    "cheap",
    "choose",
    "clock",
    "compile_options",
    "current_profile",
    "default_memory_limit",
    "format_bytes",
    "greedy_path",
    "host_grad_pays",
    "host_profile",
    "host_value_and_grad",
    "host_walk",
    "limit_too_small",
    "memory_limit_bytes",
    "plan_with_tree",
    "prepare_terms",
    "run_on_host",
    "search_tree",
    "tree_seconds",
    "walk_pays",
]
