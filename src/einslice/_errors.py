"""The exceptions einslice raises: one base type, one for memory limits."""

from __future__ import annotations


class EinsliceError(ValueError):
    """Bad input to einslice: the message says what was wrong and how to fix it."""


class EinsliceTypeError(EinsliceError, TypeError):
    """An argument of a type that ``jnp.einsum`` rejects with a TypeError.

    Both an EinsliceError and a TypeError, so that code written for either
    einslice or ``jnp.einsum`` catches it.
    """


class EinsliceNotImplementedError(EinsliceError, NotImplementedError):
    """An argument that ``jnp.einsum`` rejects with NotImplementedError (``out=``).

    Both an EinsliceError and a NotImplementedError, like EinsliceTypeError.
    """


class EinsliceFileNotFoundError(FileNotFoundError, EinsliceError):
    """A file einslice was asked to read does not exist (``.filename`` names it).

    Both a FileNotFoundError (what ``open`` raises) and an EinsliceError.
    """

    def __str__(self) -> str:
        return f"cannot read {self.filename!r}: {self.strerror}."


class MemoryLimitError(EinsliceError):
    """No plan fits ``memory_limit``.

    Attributes:
        smallest_limit: the smallest feasible limit in bytes (the peak memory of
            the most frugal plan found).
        flops: the FLOP count of the contraction.
    """

    def __init__(self, message: str, smallest_limit: int, flops: int = 0):
        super().__init__(message)
        self.smallest_limit = smallest_limit
        self.flops = flops
