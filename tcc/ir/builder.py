"""FunctionBuilder: build a graph function binding by binding, with types inferred by the
op registry as each call is emitted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tcc.ir.dtype import LOW_PRECISION
from tcc.ir.errors import ShapeError
from tcc.ir.graph import (
    Binding,
    Call,
    Constant,
    Expr,
    Function,
    ShapeExpr,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Type,
    Var,
    type_of,
)
from tcc.ir.ops.registry import Pattern, get_op, normalize_attrs


def infer_call(op_name: str, args: Sequence[Expr | None], attrs: dict[str, Any]) -> tuple[dict, Type]:
    """Normalize `attrs` and infer the result type of calling `op_name` on `args`."""
    op = get_op(op_name)
    lo, hi = op.num_args
    if len(args) < lo or (hi is not None and len(args) > hi):
        want = f"{lo}" if lo == hi else f"{lo}..{hi if hi is not None else ''}"
        raise ShapeError(f"op {op_name}: expected {want} operands, got {len(args)}")
    attrs = normalize_attrs(op, attrs)
    types = [None if a is None else type_of(a) for a in args]
    if op.pattern in (Pattern.COMM_REDUCE, Pattern.OUT_FUSABLE):
        for t in types:
            if isinstance(t, TensorType) and t.dtype in LOW_PRECISION:
                raise ShapeError(
                    f"op {op_name}: {t.dtype} is a storage type; dequantize or cast it to a "
                    "wider type before computing with it"
                )
    return attrs, op.infer(types, attrs)


class FunctionBuilder:
    """Accumulates parameters and bindings; `finish` returns the Function."""

    def __init__(self):
        self.params: list[Var] = []
        self.input_names: list[str] = []
        self.bindings: list[Binding] = []

    def param(self, name: str, type_: Type) -> Var:
        v = Var(name, type_)
        self.params.append(v)
        self.input_names.append(name)
        return v

    def emit(self, op_name: str, *args: Expr | None, name: str = "v", **attrs: Any) -> Var:
        """Bind `op_name(*args, **attrs)` to a new variable, inferring its type."""
        attrs, result_type = infer_call(op_name, args, attrs)
        return self.bind(Call(op_name, tuple(args), attrs), result_type, name)

    def bind(self, value: Expr, type_: Type, name: str = "v") -> Var:
        v = Var(name, type_)
        self.bindings.append(Binding(v, value))
        return v

    def tuple(self, fields: Sequence[Expr], name: str = "t") -> Var:
        return self.bind(Tuple(tuple(fields)), TupleType(tuple(type_of(f) for f in fields)), name)

    def get_item(self, value: Expr, index: int, name: str = "v") -> Var:
        t = type_of(value)
        assert isinstance(t, TupleType)
        return self.bind(TupleGetItem(value, index), t.fields[index], name)

    def shape(self, dims, name: str = "s") -> Var:
        e = ShapeExpr(tuple(dims))
        return self.bind(e, type_of(e), name)

    def finish(self, outputs: Sequence[Expr], output_names: Sequence[str]) -> Function:
        outs = [self._as_var(o) for o in outputs]
        ret: Expr = outs[0] if len(outs) == 1 else Tuple(tuple(outs))
        return Function(
            tuple(self.params),
            tuple(self.bindings),
            ret,
            tuple(self.input_names),
            tuple(output_names),
        )

    def _as_var(self, e: Expr) -> Expr:
        # A function may return a parameter or a constant directly; give it a binding so
        # every output is a variable of this function.
        if isinstance(e, Constant):
            return self.emit("identity", e, name="out")
        return e
