"""Memory sizes: parse user-facing limits, format byte counts."""

from __future__ import annotations

import math
import numbers
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
_PATTERN = re.compile(
    r"^\s*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$"
)

# How the API and the CLI name a limit, and say how to get the default.
API_NAMING = ("memory_limit={!r}", "pass None for the device default")
CLI_NAMING = ("--memory-limit {}", "leave out --memory-limit for the device default")


def parse_memory_limit(limit: int | float | str) -> int:
    """Convert a memory limit to bytes.

    Decimal units are powers of ten (``"MB"`` = 10**6), binary units powers of
    two (``"MiB"`` = 2**20); a bare ``"K"``, ``"M"`` or ``"G"`` is binary. A
    number must be a whole number of bytes (an int, a numpy integer, or an
    integral float); a string with a unit is rounded to the nearest byte.

    Args:
        limit: bytes as a number, or a string such as ``"512MB"`` or ``"4GiB"``.

    Returns:
        The limit in bytes, a positive int.

    Raises:
        EinsliceError: the limit is negative, zero, not a whole number of
            bytes, or not understood.

    Example:
        >>> parse_memory_limit("256MB"), parse_memory_limit("1GiB")
        (256000000, 1073741824)
    """
    return memory_limit_bytes(limit, API_NAMING)


def memory_limit_bytes(limit: object, naming: tuple[str, str] = API_NAMING) -> int:
    """``parse_memory_limit``, its errors naming the limit as ``naming`` says.

    ``naming`` is (how the value is shown, how to ask for the default):
    ``API_NAMING`` or ``CLI_NAMING``.

    Example:
        >>> memory_limit_bytes("-1", CLI_NAMING)
        Traceback (most recent call last):
        ...
        einslice._errors.EinsliceError: --memory-limit -1 must be positive; \
leave out --memory-limit for the device default.
    """
    shown, default = naming[0].format(limit), naming[1]
    if isinstance(limit, bool) or getattr(getattr(limit, "dtype", 0), "kind", 0) == "b":
        raise EinsliceError(
            f"{shown} is a bool; give bytes as an int or a string such as "
            f"'512MB', or {default}."
        )
    if isinstance(limit, numbers.Integral):
        value = float(limit)
    elif isinstance(limit, numbers.Real):
        value = float(limit)
        if math.isfinite(value) and not value.is_integer():
            raise EinsliceError(
                f"{shown} is not a whole number of bytes; give an int such as "
                f"{math.ceil(value)}, or a string with a unit such as '1.5MB'."
            )
    elif isinstance(limit, str):
        match = _PATTERN.match(limit)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise EinsliceError(
                f"{shown} is not understood; write bytes as an int or a number "
                "with a unit: '512MB', '1.5GB', '4GiB', '800KiB'."
            )
        value = float(match.group(1)) * _UNITS[unit]
        if math.isfinite(value) and value > 0:
            value = float(round(value))
            if value == 0:
                raise EinsliceError(f"{shown} is less than one byte; {default}.")
    else:
        raise EinsliceError(
            f"{shown} is a {type(limit).__name__}; give bytes as an int, a string "
            f"such as '512MB', or {default}."
        )
    if math.isinf(value) and value > 0:
        raise EinsliceError(
            f"{shown} is infinite; give a finite number of bytes, or {default}."
        )
    if not value > 0:  # zero, negative or NaN
        raise EinsliceError(f"{shown} must be positive; {default}.")
    return int(value)


def format_bytes(n: float) -> str:
    """Format a byte count for people, e.g. ``format_bytes(2.5e6) == '2.5 MB'``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"
