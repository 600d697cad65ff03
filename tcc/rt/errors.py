"""Errors raised by the runtime (tcc.rt imports nothing else of tcc but the shared base)."""

from tcc.errors import TccError


class PackError(TccError):
    """A .tvmpack file is malformed, truncated, corrupted, or from an unknown version."""


class RunInputError(TccError):
    """An input does not match the entry function's signature (name, dtype, rank, dims)."""


class KernelError(TccError):
    """A kernel refused its arguments (its message says which check failed)."""


class PublicKeyError(TccError):
    """The public key given to check a pack's signature cannot be used."""
