"""The graph level (like Relax): typed values, op calls, and functions of dataflow bindings.

A `Function` has typed parameters, a list of bindings `var = value` in A-normal form (the
operands of a call are variables, constants or None for an absent optional input) and a
returned variable or tuple. Tensor types carry symbolic shapes: a dimension is an int or an
integer PrimExpr over size variables, so one function serves every batch size.

Control flow stays in the graph as `If`, `Loop` and `Scan` nodes, each calling other graph
functions of the module by name (as Relax keeps `If` in the graph rather than lowering it to
jumps). A callee takes every value it reads as a parameter: nothing is captured implicitly.
`infer_control_flow` gives such a node's result type from its callees' signatures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tcc.ir.dtype import check_dtype
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim, PrimExpr, as_dim, free_vars, fresh_var, prove_equal, substitute
from tcc.ir.expr import Var as SizeVar
from tcc.ir.fields import field_names

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
    """The type of a shape value (a tuple of dimensions known to the graph, not a tensor).

    With `dims`, a binding of this type matches its value against them, as Relax's
    match_cast: a size variable seen for the first time is bound to the value's entry (a
    size read from a tensor by `tensor_to_shape`, a size computed by a `ShapeExpr`), any
    other dimension must equal it."""

    ndim: int
    dims: tuple[Dim, ...] | None = None

    def __post_init__(self):
        if self.dims is not None:
            object.__setattr__(self, "dims", tuple(as_dim(d) for d in self.dims))
            if len(self.dims) != self.ndim:
                raise ShapeError(f"Shape type of rank {self.ndim} with {len(self.dims)} dims")


@dataclass(frozen=True)
class SequenceType:
    """A sequence of tensors (ONNX `seq(tensor)`), its length known at run time only.

    Every element has `dtype`. `shape` gives what all elements share: their rank, and per
    dimension an int where every element has that size or None where elements may differ;
    `shape` is None while the rank is unknown (an empty sequence nothing was inserted into).
    Element dims are never size variables: each element may differ, and a value taken out
    of a sequence (`sequence_at`) gets fresh ones. `empty` says the sequence has no elements
    (SequenceEmpty's result): it then joins any other sequence of its dtype."""

    dtype: str
    shape: tuple[int | None, ...] | None = None
    empty: bool = False

    def __post_init__(self):
        check_dtype(self.dtype)
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(
                d if d is None else int(d) for d in self.shape))

    @property
    def ndim(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def __str__(self):
        from tcc.ir.printer import format_type

        return format_type(self)


@dataclass(frozen=True)
class OptionalType:
    """A value that may be absent (ONNX `optional(...)`): `elem` or nothing (None at run time)."""

    elem: TensorType | SequenceType

    def __str__(self):
        from tcc.ir.printer import format_type

        return format_type(self)


Type = TensorType | TupleType | ShapeType | SequenceType | OptionalType


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
    """A shape computed from size variables. Each of `checks` is a (condition, message) pair
    that must hold first (a size read from a tensor that does not fit the op reading it);
    a failed one stops the run with its message."""

    dims: tuple[Dim, ...]
    checks: tuple[tuple[PrimExpr, str], ...] = ()


@dataclass(frozen=True, eq=False)
class If(Expr):
    """Call graph function `then_branch` or `else_branch` with `args`, as the one-element
    boolean tensor `cond` says. Both branches take the same parameters and return as many
    values; a dimension on which they disagree is a fresh size variable of the result."""

    cond: Expr
    then_branch: str
    else_branch: str
    args: tuple[Expr, ...]

    @property
    def callees(self) -> tuple[str, ...]:
        return (self.then_branch, self.else_branch)


@dataclass(frozen=True, eq=False)
class Loop(Expr):
    """ONNX Loop. `body(i, cond, *carried, *captured) -> (cond, *carried, *scans)` runs while
    `i < max_trip_count` (when given) and `cond` (when given; then the body's returned `cond`
    decides the next iteration) hold. The result is the final carried values, then each scan
    output stacked over the iterations along a new axis 0 (its length a fresh variable)."""

    body: str
    max_trip_count: Expr | None
    cond: Expr | None
    carried: tuple[Expr, ...]
    captured: tuple[Expr, ...]

    @property
    def callees(self) -> tuple[str, ...]:
        return (self.body,)


@dataclass(frozen=True, eq=False)
class Scan(Expr):
    """ONNX Scan (opset 9+). `args` are the initial states then `num_scan_inputs` sequences;
    `body(*states, *slices, *captured) -> (*states, *scan_elements)` runs once per slice of
    the sequences along their `scan_input_axes` (last to first where a direction is 1). The
    result is the final states, then each scan output stacked along its `scan_output_axes`
    entry (in reverse iteration order where its direction is 1)."""

    body: str
    num_scan_inputs: int
    args: tuple[Expr, ...]
    captured: tuple[Expr, ...]
    scan_input_axes: tuple[int, ...]
    scan_input_directions: tuple[int, ...]
    scan_output_axes: tuple[int, ...]
    scan_output_directions: tuple[int, ...]

    @property
    def callees(self) -> tuple[str, ...]:
        return (self.body,)


CONTROL_FLOW = (If, Loop, Scan)


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


# ---------------------------------------------------------------------------------------------
# result types of control flow


def infer_control_flow(e: If | Loop | Scan, functions: Mapping[str, object]) -> Type:
    """The result type of an If, Loop or Scan whose callees are in `functions`: one type for
    one result, else a TupleType. Raises ShapeError when the operands do not fit a callee."""
    if isinstance(e, If):
        return _infer_if(e, functions)
    if isinstance(e, Loop):
        return _infer_loop(e, functions)
    return _infer_scan(e, functions)


def _infer_if(e: If, functions) -> Type:
    _expect_flag(type_of(e.cond), "bool", "if_ condition")
    args = [type_of(a) for a in e.args]
    then = _apply(_callee(functions, e.then_branch), e.then_branch, args)
    other = _apply(_callee(functions, e.else_branch), e.else_branch, args)
    if len(then) != len(other):
        raise ShapeError(f"if_: branch {e.then_branch!r} returns {len(then)} values but "
                         f"{e.else_branch!r} returns {len(other)}")
    return _pack([join_types(a, b, f"if_ result {i}") for i, (a, b) in enumerate(zip(then, other))])


def _infer_loop(e: Loop, functions) -> Type:
    if e.max_trip_count is not None:
        _expect_flag(type_of(e.max_trip_count), "int64", "loop max_trip_count")
    if e.cond is not None:
        _expect_flag(type_of(e.cond), "bool", "loop condition")
    body = _callee(functions, e.body)
    carried = [type_of(a) for a in e.carried]
    flags = [TensorType((), "int64"), TensorType((), "bool")]
    varying = _varying(body, 2, 1, len(carried))
    outs = _apply(body, e.body, flags + carried + [type_of(a) for a in e.captured], varying)
    n = len(carried)
    if len(outs) < 1 + n:
        raise ShapeError(f"loop body {e.body!r} returns {len(outs)} values; it must return "
                         f"the condition and the {n} carried values first")
    _expect_flag(outs[0], "bool", f"the condition {e.body!r} returns")
    finals = [join_types(a, b, f"loop-carried value {k}") for k, (a, b) in
              enumerate(zip(carried, outs[1 : 1 + n]))]
    trips = fresh_var("trips")
    return _pack(finals + [_stacked(t, trips, 0, e.body) for t in outs[1 + n :]])


def _infer_scan(e: Scan, functions) -> Type:
    m = e.num_scan_inputs
    n = len(e.args) - m
    if m < 1 or n < 0:
        raise ShapeError(f"scan: num_scan_inputs is {m} with {len(e.args)} operands")
    if len(e.scan_input_axes) != m or len(e.scan_input_directions) != m:
        raise ShapeError(f"scan: {m} scan inputs need {m} scan_input_axes and directions")
    states = [type_of(a) for a in e.args[:n]]
    slices, length = [], None
    for j, (a, axis) in enumerate(zip(e.args[n:], e.scan_input_axes)):
        t = _tensor(type_of(a), f"scan input {j}")
        axis = _axis(axis, t.ndim, f"scan input {j}")
        length = t.shape[axis] if length is None else length
        slices.append(TensorType(t.shape[:axis] + t.shape[axis + 1 :], t.dtype))
    body = _callee(functions, e.body)
    varying = _varying(body, 0, 0, n)
    outs = _apply(body, e.body, states + slices + [type_of(a) for a in e.captured], varying)
    k = len(outs) - n
    if k < 0 or len(e.scan_output_axes) != k or len(e.scan_output_directions) != k:
        raise ShapeError(f"scan body {e.body!r} returns {len(outs)} values for {n} states; "
                         f"each further value needs a scan_output_axes and direction entry")
    finals = [join_types(a, b, f"scan state {i}") for i, (a, b) in enumerate(zip(states, outs))]
    scans = [_stacked(t, length, axis, e.body) for t, axis in zip(outs[n:], e.scan_output_axes)]
    return _pack(finals + scans)


def _callee(functions, name: str) -> Function:
    f = functions.get(name)
    if not isinstance(f, Function):
        raise ShapeError(f"no graph function named {name!r} in the module")
    return f


def _apply(fn: Function, name: str, args: list[Type], varying=frozenset()) -> list[Type]:
    """The types `fn` returns for arguments of types `args`, over the caller's size
    variables: a parameter's size variable stands for the argument's dimension (unless it is
    in `varying`, changing from one iteration to the next), and any other variable of the
    callee becomes a fresh variable."""
    if len(args) != len(fn.params):
        raise ShapeError(f"function {name!r} takes {len(fn.params)} arguments, got {len(args)}")
    mapping: dict = {}
    for i, (p, t) in enumerate(zip(fn.params, args)):
        _unify(p.type, t, mapping, varying, f"argument {i} of {name!r}")
    visible = {id(v) for t in args for v in _type_vars(t)}
    outs = [_subst(type_of(o), mapping) for o in fn.outputs]
    fresh = {v: fresh_var("d") for t in outs for v in _type_vars(t) if id(v) not in visible}
    return [_subst(t, fresh) for t in outs]


def _unify(param: Type, arg: Type, mapping: dict, varying, where: str) -> None:
    if isinstance(param, TupleType) and isinstance(arg, TupleType):
        if len(param.fields) == len(arg.fields):
            for p, a in zip(param.fields, arg.fields):
                _unify(p, a, mapping, varying, where)
            return
    elif isinstance(param, TensorType) and isinstance(arg, TensorType):
        if param.dtype == arg.dtype and param.ndim == arg.ndim:
            for p, a in zip(param.shape, arg.shape):
                if isinstance(p, SizeVar) and p not in mapping and p not in varying:
                    mapping[p] = a
                elif isinstance(p, int) and isinstance(a, int) and p != a:
                    break  # a static dimension that cannot match
            else:
                return
    elif isinstance(param, SequenceType) and isinstance(arg, SequenceType):
        if param.dtype == arg.dtype and (arg.empty or sequence_shape_accepts(param.shape, arg.shape)):
            return
    elif isinstance(param, OptionalType) and isinstance(arg, (OptionalType, TensorType, SequenceType)):
        _unify(param.elem, arg.elem if isinstance(arg, OptionalType) else arg, mapping, varying, where)
        return
    elif param == arg:
        return
    raise ShapeError(f"{where}: expected {param}, got {arg}")


def sequence_shape_accepts(param: tuple | None, arg: tuple | None) -> bool:
    """A sequence whose elements share `arg` fits a parameter whose elements share `param`."""
    if param is None:
        return True
    if arg is None or len(arg) != len(param):
        return False
    return all(p is None or p == a for p, a in zip(param, arg))


def join_sequence_shapes(a: tuple | None, b: tuple | None) -> tuple | None:
    """What the elements of two sequences share: equal ranks keep the dims they agree on;
    different ranks leave the rank unknown (ONNX lets one sequence mix them)."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


def _varying(fn: Function, first_param: int, first_out: int, n: int) -> set:
    """Size variables of the carried parameters whose dimension the body changes."""
    if len(fn.params) < first_param + n or len(fn.outputs) < first_out + n:
        return set()  # the arity error is reported by _apply
    out = set()
    for k in range(n):
        p, o = fn.params[first_param + k].type, type_of(fn.outputs[first_out + k])
        if isinstance(p, TensorType) and isinstance(o, TensorType) and p.ndim == o.ndim:
            for a, b in zip(p.shape, o.shape):
                if isinstance(a, SizeVar) and not prove_equal(a, b):
                    out.add(a)
    return out


def same_shape(a: Type, b: Type) -> bool:
    """Whether `a` and `b` are tensor types whose shapes are provably equal."""
    return (isinstance(a, TensorType) and isinstance(b, TensorType) and a.ndim == b.ndim
            and all(prove_equal(x, y) for x, y in zip(a.shape, b.shape)))


def join_types(a: Type, b: Type, what: str) -> Type:
    """The type of a value that is either of type `a` or of type `b` (a dimension they
    disagree on becomes a fresh size variable)."""
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.fields) == len(b.fields):
        return TupleType(tuple(join_types(x, y, what) for x, y in zip(a.fields, b.fields)))
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        if a.dtype == b.dtype and a.ndim == b.ndim:
            dims = [x if prove_equal(x, y) else fresh_var("d") for x, y in zip(a.shape, b.shape)]
            return TensorType(tuple(dims), a.dtype)
    elif isinstance(a, SequenceType) and isinstance(b, SequenceType) and a.dtype == b.dtype:
        if a.empty or b.empty:
            return b if a.empty else a
        return SequenceType(a.dtype, join_sequence_shapes(a.shape, b.shape))
    elif isinstance(a, OptionalType) or isinstance(b, OptionalType):  # a value or maybe none
        a_elem = a.elem if isinstance(a, OptionalType) else a
        b_elem = b.elem if isinstance(b, OptionalType) else b
        return OptionalType(join_types(a_elem, b_elem, what))
    elif a == b:
        return a
    raise ShapeError(f"{what} is {a} on one path and {b} on another; "
                     "dtype and rank must agree")


def _stacked(t: Type, length: Dim, axis: int, name: str) -> TensorType:
    t = _tensor(t, f"a scan output of {name!r}")
    axis = _axis(axis, t.ndim + 1, f"a scan output of {name!r}")
    return TensorType(t.shape[:axis] + (length,) + t.shape[axis:], t.dtype)


def _tensor(t: Type, what: str) -> TensorType:
    if not isinstance(t, TensorType):
        raise ShapeError(f"{what} must be a tensor, got {t}")
    return t


def _axis(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{what}: axis {axis} out of range for rank {ndim}")
    return axis % ndim


def _expect_flag(t: Type, dtype: str, what: str) -> None:
    """`t` is a one-element tensor of `dtype` (a scalar or a 1-element vector)."""
    if not (isinstance(t, TensorType) and t.dtype == dtype and t.ndim <= 1
            and all(isinstance(d, int) and d == 1 for d in t.shape)):
        raise ShapeError(f"{what} must be a one-element {dtype} tensor, got {t}")


def _pack(types: list[Type]) -> Type:
    return types[0] if len(types) == 1 else TupleType(tuple(types))


def _type_vars(t: Type) -> list:
    if isinstance(t, TensorType):
        return free_vars(list(t.shape))
    if isinstance(t, TupleType):
        return [v for f in t.fields for v in _type_vars(f)]
    if isinstance(t, OptionalType):
        return _type_vars(t.elem)
    return []


def _subst(t: Type, mapping: dict) -> Type:
    if not mapping:
        return t
    if isinstance(t, TensorType):
        return TensorType(tuple(as_dim(substitute(d, mapping)) for d in t.shape), t.dtype)
    if isinstance(t, TupleType):
        return TupleType(tuple(_subst(f, mapping) for f in t.fields))
    if isinstance(t, OptionalType):
        return OptionalType(_subst(t.elem, mapping))
    return t


def used_vars(e) -> list[Var]:
    """The variables an expression reads (operands, nested tuples; not attrs), once per
    occurrence."""
    if isinstance(e, Var):
        return [e]
    if isinstance(e, tuple):
        return [v for x in e for v in used_vars(x)]
    if isinstance(e, Expr) and dataclasses.is_dataclass(e):
        return [v for fname in field_names(e) for v in used_vars(getattr(e, fname))]
    return []


def substitute_vars(e, mapping: dict[int, Expr]):
    """`e` with each variable in `mapping` (keyed by `id`) replaced, through nested operands
    and tuples; unchanged nodes are shared, so a rewrite that changes nothing returns `e`."""
    if isinstance(e, Var):
        return mapping.get(id(e), e)
    if isinstance(e, tuple):
        new = tuple(substitute_vars(x, mapping) for x in e)
        return e if all(a is b for a, b in zip(new, e)) else new
    if isinstance(e, Expr) and dataclasses.is_dataclass(e):
        changes = {}
        for fname in field_names(e):
            old = getattr(e, fname)
            if isinstance(old, (Expr, tuple)):
                new = substitute_vars(old, mapping)
                if new is not old:
                    changes[fname] = new
        return dataclasses.replace(e, **changes) if changes else e
    return e
