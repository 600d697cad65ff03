"""Op families; importing this package registers every op record in `OPS`."""

from tcc.ir.ops import elementwise, index, linalg, nn, reduce, rnn, transform  # noqa: F401
from tcc.ir.ops.registry import OPS, REQUIRED, OpDef, Pattern, get_op, register

__all__ = ["OPS", "REQUIRED", "OpDef", "Pattern", "get_op", "register"]
