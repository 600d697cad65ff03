"""User-facing error types. Every user error is a TccError subclass with a one-line message."""


from tcc.errors import InternalError, TccError

__all__ = [
    "FrontendError",
    "IRFileError",
    "InputError",
    "InternalError",
    "NoLoopProgram",
    "ParseError",
    "ShapeError",
    "TccError",
]


class IRFileError(TccError):
    """A .tcir file is malformed, truncated, corrupted, or from an unknown format version."""


class ParseError(TccError):
    """IR text that does not parse; the message starts with `file:line:col:`."""


class ShapeError(TccError):
    """Shapes or dtypes that contradict an op's rules or a function's signature."""


class FrontendError(TccError):
    """An ONNX model that cannot be imported (malformed or unsupported)."""


class InputError(TccError):
    """A run-time input that does not match the function signature."""


class NoLoopProgram(TccError):
    """An op call whose attributes or dtypes its loop program does not cover; legalization
    leaves such a call to the runtime (or `tcc emit` names it)."""
