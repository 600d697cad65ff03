"""The base of every user-facing tcc error, shared by all packages (it imports nothing).

The CLI prints a TccError as one line and exits 2; anything else is a tcc bug.
"""


class TccError(Exception):
    """A user error: bad input, malformed file, unsupported feature."""
