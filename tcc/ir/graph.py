"""The graph level (like Relax): typed values, op calls, and functions of dataflow bindings.

A `Function` has typed parameters, a list of bindings `var = value` in A-normal form (the
operands of a call are variables, constants or None for an absent optional input) and a
returned variable or tuple. Tensor types carry symbolic shapes: a dimension is an int or an
integer PrimExpr over size variables, so one function serves every batch size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tcc.ir.dtype import check_dtype
from tcc.ir.expr import Dim, PrimExpr, as_dim

# ---------------------------------------------------------------------------------------------
# types


@dataclass(frozen=True)
class TensorType:
    shape: tuple[Dim, ...]
    dtype: str

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(as_dim(d) for d in self.shape))
        check_dtype(self.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def __str__(self):
        from tcc.ir.printer import format_type

        return format_type(self)


@dataclass(frozen=True)
class TupleType:
    fields: tuple[Type, ...]

    def __str__(self):
        from tcc.ir.printer import format_type

        return format_type(self)


@dataclass(frozen=True)
class ShapeType:
    """The type of a shape value (a tuple of dimensions known to the graph, not a tensor)."""

    ndim: int


Type = TensorType | TupleType | ShapeType


# ---------------------------------------------------------------------------------------------
# values


class Expr:
    __slots__ = ()


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A graph variable: a function parameter or the left side of a binding."""

    name: str
    type: Type


@dataclass(frozen=True, eq=False)
class Constant(Expr):
    """A reference to the module constant `name` (weights live outside the IR text)."""

    name: str
    type: TensorType


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """`op(args..., **attrs)`; `op` names a record in the op registry."""

    op: str
    args: tuple[Expr | None, ...]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class CallTIR(Expr):
    """Call the PrimFunc `func` of the module with `args`, allocating outputs of `out_type`."""

    func: str
    args: tuple[Expr, ...]
    out_type: Type
    shape_args: tuple[PrimExpr, ...] = ()


@dataclass(frozen=True, eq=False)
class Tuple(Expr):
    fields: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class TupleGetItem(Expr):
    value: Expr
    index: int


@dataclass(frozen=True, eq=False)
class ShapeExpr(Expr):
    dims: tuple[Dim, ...]


@dataclass(frozen=True, eq=False)
class Binding:
    var: Var
    value: Expr


@dataclass(frozen=True, eq=False)
class Function:
    """A graph function. `input_names`/`output_names` are the public names of its inputs and
    outputs (e.g. the ONNX graph's), which need not be identifiers."""

    params: tuple[Var, ...]
    bindings: tuple[Binding, ...]
    ret: Expr
    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()

    def __post_init__(self):
        if not self.input_names:
            object.__setattr__(self, "input_names", tuple(p.name for p in self.params))

    @property
    def outputs(self) -> tuple[Expr, ...]:
        """The returned values, flattened one level (a returned tuple gives its fields)."""
        return self.ret.fields if isinstance(self.ret, Tuple) else (self.ret,)

    @property
    def ret_type(self) -> Type:
        return type_of(self.ret)


def type_of(e: Expr) -> Type:
    """The type of a leaf value or a tuple/get-item of leaf values."""
    if isinstance(e, (Var, Constant)):
        return e.type
    if isinstance(e, Tuple):
        return TupleType(tuple(type_of(f) for f in e.fields))
    if isinstance(e, TupleGetItem):
        t = type_of(e.value)
        assert isinstance(t, TupleType)
        return t.fields[e.index]
    if isinstance(e, ShapeExpr):
        return ShapeType(len(e.dims))
    if isinstance(e, CallTIR):
        return e.out_type
    raise TypeError(f"type of {type(e).__name__} is given by its binding")
