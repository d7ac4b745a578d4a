"""How many bytes a buffer of a given shape takes on a device that tiles buffers.

XLA:TPU lays out a buffer's two minor dimensions in tiles: 128 entries
along the minor one ("lanes"), and along the second-minor one 8 rows
("sublanes"), or 1, 2 or 4 when that dimension is that small (at least 2
for 2-byte types, 4 for 1-byte ones, which pack rows in 32-bit words); it picks
which two dimensions are minor so as to pad least, and gives every buffer
at least 512 bytes. A vector is tiled as rows of 128; a scalar takes one
row. Measured on a TPU v5e (jax 0.10.2, 2026-12-07,
``benchmarks/tpu_memory_probe.py``: the padded argument bytes of ``-x``
for 29 shapes in 7 dtypes, all reproduced by `buffer_bytes`; e.g.
``f32[200,3]`` is laid out ``{0,1:T(4,128)}``, 4096 bytes for 2400 of
entries). Float64 is stored in 8 bytes an entry with float32's tiles (it
is emulated in float32 pairs when computed, whose scratch the profile's
``wide_scratch_bytes`` holds). Pure Python: no JAX here.

A profile with ``buffer_lanes == 0`` (CPU, GPU) does not tile: a buffer is
its entries.
"""

from __future__ import annotations

from functools import lru_cache
from math import prod

# (itemsize, lanes, sublanes, minimum bytes): what `buffer_bytes` needs of a
# profile; None where buffers are not tiled.
Tiling = tuple[int, int, int, int] | None


def tiling_of(profile: object, itemsize: int) -> Tiling:
    """The tiling `buffer_bytes` applies for ``profile`` and ``itemsize``.

    Example:
        >>> from einslice._plan._profile import CPU_DEFAULT, TPU_DEFAULT
        >>> tiling_of(CPU_DEFAULT, 4) is None, tiling_of(TPU_DEFAULT, 4)
        (True, (4, 128, 8, 512))
    """
    lanes = getattr(profile, "buffer_lanes", 0)
    if not lanes:
        return None
    sublanes = getattr(profile, "buffer_sublanes", 1) or 1
    return (itemsize, lanes, sublanes, getattr(profile, "min_buffer_bytes", 0))


@lru_cache(maxsize=65536)
def buffer_bytes(dims: tuple[int, ...], tiling: tuple[int, int, int, int]) -> int:
    """Bytes of a buffer of shape ``dims`` laid out as ``tiling`` says.

    Example (TPU v5e, float32):
        >>> tpu = (4, 128, 8, 512)
        >>> buffer_bytes((200, 3), tpu), buffer_bytes((100, 100), tpu)
        (4096, 53248)
        >>> buffer_bytes((), tpu), buffer_bytes((1025,), tpu), buffer_bytes((2, 3), tpu)
        (512, 8192, 1024)
    """
    itemsize, lanes, sublanes, least = tiling
    if not dims:
        return max(lanes * itemsize, least)
    if len(dims) == 1:  # rows of `lanes` entries
        dims = (-(-dims[0] // lanes), lanes)
    packed = max(1, 4 // itemsize)  # narrow types pack 2 or 4 rows a word
    best = None
    for a, minor in enumerate(dims):
        for b, second in enumerate(dims):
            if a == b:
                continue
            rest = prod(d for k, d in enumerate(dims) if k not in (a, b))
            rows = min(sublanes, max(1 << (second - 1).bit_length(), packed))
            entries = rest * _round_up(second, rows) * _round_up(minor, lanes)
            best = entries if best is None else min(best, entries)
    assert best is not None
    return max(best * itemsize, least)


def buffer_entries(dims: tuple[int, ...], tiling: Tiling) -> int:
    """`buffer_bytes` in entries (bytes / itemsize, rounded up).

    The peak model counts entries, then multiplies by the itemsize.

    Example:
        >>> buffer_entries((200, 3), (4, 128, 8, 512)), buffer_entries((200, 3), None)
        (1024, 600)
    """
    if tiling is None:
        return prod(dims)
    return -(-buffer_bytes(dims, tiling) // tiling[0])


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to
