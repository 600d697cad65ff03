"""tcc's IR: the graph level (functions of op calls) and the tensor level (PrimFuncs) in one
IRModule, with symbolic shapes, a text format, the .tcir file, the op registry and the
reference interpreter."""

from tcc.ir.errors import InternalError, TccError
from tcc.ir.expr import Var, as_dim, fresh_var, prove_equal, simplify
from tcc.ir.graph import Call, Constant, Function, TensorType, TupleType
from tcc.ir.module import IRModule
from tcc.ir.structural import structural_equal, structural_hash

__all__ = [
    "Call",
    "Constant",
    "Function",
    "IRModule",
    "InternalError",
    "TccError",
    "TensorType",
    "TupleType",
    "Var",
    "as_dim",
    "fresh_var",
    "prove_equal",
    "simplify",
    "structural_equal",
    "structural_hash",
]


def run(mod, inputs, name: str = "main"):
    """Run graph function `name` of `mod` with the reference interpreter (see tcc.ir.interp)."""
    from tcc.ir.interp import run as _run

    return _run(mod, inputs, name)
