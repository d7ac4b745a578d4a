"""Remembered tuning results: ``export``, ``import_`` and ``clear``.

``einslice.einsum(..., tune="measure")`` times the best few candidate plans on
the device and remembers the fastest per signature (equation, shapes, dtype,
semiring, memory limit, device kind) in ``wisdom.json`` in the cache
directory (``$EINSLICE_CACHE_DIR`` or ``$XDG_CACHE_HOME/einslice``);
``tune="auto"`` then uses it. Wisdom from other einslice or jax versions is
ignored with a warning.

Example:
    >>> import os, tempfile, einslice
    >>> os.environ["EINSLICE_CACHE_DIR"] = tempfile.mkdtemp()
    >>> einslice.wisdom.clear()
    >>> einslice.wisdom.export()["entries"]
    {}
    >>> del os.environ["EINSLICE_CACHE_DIR"]
"""

from ._plan._wisdom import clear as clear
from ._plan._wisdom import export as export
from ._plan._wisdom import import_ as import_

__all__ = ["clear", "export", "import_"]
