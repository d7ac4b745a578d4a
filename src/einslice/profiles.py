"""The built-in device profiles: plan for a device other than this one.

``CPU`` holds the figures einslice's time model was tuned with on a CPU, ``GPU``
those of a data-center GPU (an NVIDIA H200), ``TPU`` those of a Google TPU v5e
(see ``_plan/_profile.py`` for which are measured).
Pass one as ``profile=`` to ``einslice.plan``, ``einslice.einsum`` or the
``einslice.pgm`` functions to see the plan that device would get, on any
machine; ``einslice.calibrate()`` measures this device's own.

Example:
    >>> import einslice
    >>> gpu = einslice.profiles.GPU
    >>> p = einslice.plan("ij,jk->ik", (64, 64), (64, 64), profile=gpu)
    >>> einslice.profiles.GPU.device_kind, p.flops
    ('gpu', 524288)
"""

from ._plan._profile import CPU_DEFAULT as CPU
from ._plan._profile import GPU_DEFAULT as GPU
from ._plan._profile import TPU_DEFAULT as TPU

__all__ = ["CPU", "GPU", "TPU"]
