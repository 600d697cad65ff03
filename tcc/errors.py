"""tcc's two error kinds, shared by all packages (this module imports nothing).

The CLI prints a TccError as one line and exits 2; anything else is a tcc bug.
"""


class TccError(Exception):
    """A user error: bad input, malformed file, unsupported feature."""


class InternalError(Exception):
    """A compiler bug: an invariant tcc itself should have kept. Please report it."""
