"""Import-time evaluation of calls on constant operands, shared by the frontends.

An exporter writes small constant computations (shape arithmetic, a scale made from two
constants) that tcc computes once at import instead of at every run.
"""

from __future__ import annotations

import numpy as np

from tcc.ir.builder import infer_call
from tcc.ir.dtype import to_numpy
from tcc.ir.expr import PrimExpr
from tcc.ir.graph import Constant, Expr, TensorType
from tcc.ir.module import IRModule
from tcc.ir.ops.registry import get_op

# Calls on constant operands are evaluated at import time when the result is at most this
# many elements, or no larger than its operands (so folding never inflates the weights).
FOLD_MAX_ELEMENTS = 4096


def fold_call(mod: IRModule, op: str, args, attrs: dict, name: str) -> Constant | None:
    """`op(*args, **attrs)` as a new constant of `mod` named after `name` when every operand
    is a constant and the result is small and static; else None."""
    if not all(a is None or isinstance(a, Constant) for a in args) or get_op(op).name.startswith("random"):
        return None
    attrs_n, rtype = infer_call(op, args, attrs)
    if not isinstance(rtype, TensorType) or not rtype.is_static or _data_dependent(rtype):
        return None
    size = int(np.prod(rtype.shape)) if rtype.shape else 1
    in_size = sum(int(np.prod(a.type.shape)) for a in args if a is not None and a.type.is_static)
    if size > max(FOLD_MAX_ELEMENTS, in_size):
        return None
    arrays = [None if a is None else mod.const_values[a.name] for a in args]
    out = np.asarray(get_op(op).ref(*arrays, **attrs_n))
    out = out.astype(to_numpy(rtype.dtype), copy=False)
    return mod.add_constant(mod.unique_constant_name(name), out, rtype.dtype)


def emit_folded(mod: IRModule, bb, op: str, *args: Expr | None, name: str, **attrs) -> Expr:
    """Call `op` in the builder `bb`, or fold it to a constant (see fold_call)."""
    folded = fold_call(mod, op, args, attrs, name)
    if folded is not None:
        return folded
    return bb.emit(op, *args, name=name, **attrs)


def _data_dependent(t: TensorType) -> bool:
    return any(isinstance(d, PrimExpr) for d in t.shape)
