"""cotengra's kahypar partition trees, built without worker processes.

cotengra's ``"kahypar"`` method orders the last few partitions with its
``"random-greedy-128"`` preset, whose optimizer runs its repeats in a process
pool when ``parallel="auto"`` (``HyperOptimizer(parallel=False)`` does not
reach it). A pool forks the process, or spawns interpreters through loky when
joblib is installed: forking a process that runs JAX's threads can deadlock
(JAX warns), and either costs memory and start-up time. ``METHOD`` is the same
trees with those repeats run here, in this process, seeded by the search.
"""

from __future__ import annotations

import random

METHOD = "einslice-kahypar"
# cotengra's own number of random-greedy repeats for the top level.
_TOP_LEVEL_REPEATS = 128


def _order_top_level(inputs, output, size_dict):
    """A random-greedy path over the final partitions, in this process."""
    from cotengra.pathfinders.path_basic import RandomGreedyOptimizer

    # A fresh optimizer per call: one keeps its best path across calls.
    optimizer = RandomGreedyOptimizer(
        max_repeats=_TOP_LEVEL_REPEATS,
        seed=random.getrandbits(32),  # the search seeds Python's random
        parallel=False,  # pyright: ignore[reportArgumentType]
    )
    return optimizer(inputs, output, size_dict)


def trial_kahypar(inputs, output, size_dict, **options):
    """Cotengra trial function: kahypar's partition tree, ordered in-process."""
    from cotengra.pathfinders.path_kahypar import kahypar_to_tree

    # cotengra is unannotated: pyright takes super_optimize's type (str) from
    # its default preset name, though it accepts any path function.
    return kahypar_to_tree.build_divide(
        inputs,
        output,
        size_dict,
        super_optimize=_order_top_level,  # pyright: ignore[reportArgumentType]
        **options,
    )


def register() -> None:
    """Make ``METHOD`` available to cotengra's ``HyperOptimizer`` (idempotent).

    It searches kahypar's hyper-parameter space and constants as cotengra
    registers them, so it tracks cotengra's tuning of that space.
    """
    import cotengra.pathfinders.path_kahypar  # noqa: F401 (registers "kahypar")
    from cotengra.hyperoptimizers.hyper import (
        get_hyper_constants,
        get_hyper_space,
        register_hyper_function,
    )

    space = get_hyper_space()["kahypar"]
    constants = get_hyper_constants()["kahypar"]
    register_hyper_function(METHOD, trial_kahypar, space, constants)
