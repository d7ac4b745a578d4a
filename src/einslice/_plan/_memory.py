"""Memory sizes: parse user-facing limits, format byte counts."""

from __future__ import annotations

import re

from .._errors import EinsliceError

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_memory_limit(limit: int | float | str) -> int:
    """Convert a memory limit to bytes.

    Decimal units are powers of ten (``"MB"`` = 10**6), binary units powers of
    two (``"MiB"`` = 2**20); a bare ``"K"``, ``"M"`` or ``"G"`` is binary.

    Args:
        limit: bytes as a number, or a string such as ``"512MB"`` or ``"4GiB"``.

    Returns:
        The limit in bytes, a positive int.

    Raises:
        EinsliceError: the limit is negative, zero, or not understood.

    Example:
        >>> parse_memory_limit("256MB"), parse_memory_limit("1GiB")
        (256000000, 1073741824)
    """
    if isinstance(limit, bool):
        raise EinsliceError(
            f"memory_limit={limit!r} is a bool; pass bytes as an int or a string "
            "such as '512MB', or None for the device default."
        )
    if isinstance(limit, int | float):
        value = float(limit)
    elif isinstance(limit, str):
        match = _PATTERN.match(limit)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise EinsliceError(
                f"memory_limit={limit!r} is not understood; write bytes as an int "
                "or a number with a unit: '512MB', '1.5GB', '4GiB', '800KiB'."
            )
        value = float(match.group(1)) * _UNITS[unit]
    else:
        raise EinsliceError(
            f"memory_limit must be an int, a string such as '512MB', or None; "
            f"got {type(limit).__name__} {limit!r}."
        )
    if value == float("inf"):
        raise EinsliceError(
            f"memory_limit={limit!r} is infinite; pass a finite number of bytes, "
            "or None for the device default."
        )
    if not value > 0 or value != value:
        raise EinsliceError(
            f"memory_limit={limit!r} must be positive; pass None for the device "
            "default."
        )
    return int(value)


def format_bytes(n: float) -> str:
    """Format a byte count for people, e.g. ``format_bytes(2.5e6) == '2.5 MB'``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"
