"""The op registry: one `OpDef` record per graph op.

A record declares the op's attributes (with defaults), its type inference over symbolic
shapes, a numpy reference implementation (the semantics the interpreter runs and the
tests compare compiled code against), its fusion pattern kind, and (once lowering
exists) its loop program in the te DSL.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tcc.ir.errors import ShapeError, TccError
from tcc.ir.expr import Dim, PrimExpr, as_dim, binop, prove_equal
from tcc.ir.graph import TensorType, TupleType, Type


class Pattern(enum.IntEnum):
    """Fusion pattern kinds, ordered as in TVM's OpPatternKind (lower fuses more freely)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED: Any = _Required()

InferFn = Callable[[Sequence[Type | None], dict], Type]


@dataclass(frozen=True)
class OpDef:
    """One graph op. `infer(arg_types, attrs)` returns the result type (a TupleType for ops
    with several outputs); `ref(*arrays, **attrs)` computes it with numpy (attrs arrive with
    symbolic dimensions already evaluated to ints)."""

    name: str
    infer: InferFn
    ref: Callable[..., Any]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    pattern: Pattern = Pattern.OPAQUE
    num_args: tuple[int, int | None] = (1, 1)  # (min, max); max None = variadic
    compute: Callable[..., Any] | None = None
    doc: str = ""
    # An op whose result shape depends on the values of some operands (`dyn_*`): which
    # operands hold sizes, and `to_static(arg_types, sizes, out_dims, attrs)` -> StaticForm,
    # given size variables for each such operand's values (by operand index) and the dims of
    # the call's result type. The lower-dynamic-shapes pass reads the sizes at run time
    # and calls the static op (tcc/lower/passes/lower_dynamic_shapes.py).
    shape_operands: tuple[int, ...] = ()
    to_static: Callable[..., StaticForm] | None = None
    # An op whose result size is counted from its operands' values (a range's length from
    # float bounds): the op that counts it, given the same operands (and the attributes it
    # shares), as a 1-D int64 tensor.
    # The pass calls it and reads its values as those of one more shape operand, numbered
    # after the call's own operands.
    size_op: str | None = None
    # A loop program written directly, `loop_program(arg_types, attrs) -> PrimFunc | None`,
    # for an op te cannot express (a recurrence over time); used in place of `compute`.
    loop_program: Callable[..., Any] | None = None


@dataclass(frozen=True)
class StaticForm:
    """A dynamic op as a static op over size variables: `op(*(args[i] for i in operands),
    **attrs)` (then `then`, when given) computes it once `dims` (the result's dims as
    expressions of sizes) are bound to the result type's and every (condition, message) of
    `checks` holds."""

    op: str
    operands: tuple[int | None, ...]  # the dyn op's operands it takes (None: left out)
    attrs: dict[str, Any]
    dims: tuple[Dim, ...]  # of every result, one after another
    checks: tuple[tuple[PrimExpr, str], ...] = ()
    # a second static op (name, attrs) applied to the first one's result (a reshape that
    # drops the axes a reduction kept)
    then: tuple[str, dict[str, Any]] | None = None
    # further size variables the attrs use, each bound to an expression of the sizes read
    # (so a kernel takes a plain size, not the expression)
    binds: tuple[tuple[Any, PrimExpr], ...] = ()


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} registered twice")
    OPS[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    _load_families()
    op = OPS.get(name)
    if op is None:
        close = difflib.get_close_matches(name, OPS, n=3)
        hint = f"did you mean {' or '.join(map(repr, close))}?" if close else "see tcc.ir.ops.OPS for the known ops"
        raise TccError(f"unknown op {name!r}; {hint}")
    return op


_loaded = False


def _load_families() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        import tcc.ir.ops  # noqa: F401  (registers every family)


def normalize_attrs(op: OpDef, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Fill defaults and reject unknown or missing attributes."""
    unknown = sorted(set(attrs) - set(op.attrs))
    if unknown:
        raise TccError(
            f"op {op.name}: unknown attribute(s) {', '.join(unknown)}; "
            f"expected {', '.join(op.attrs) or 'none'}"
        )
    out = {}
    for k, default in op.attrs.items():
        v = attrs.get(k, default)
        if v is REQUIRED:
            raise TccError(f"op {op.name}: attribute {k!r} is required")
        out[k] = v
    return out


# ---------------------------------------------------------------------------------------------
# helpers for inference functions


def tensor(t: Type | None, op: str, what: str = "input") -> TensorType:
    if not isinstance(t, TensorType):
        raise ShapeError(f"op {op}: {what} must be a tensor, got {t}")
    return t


def normalize_axis(axis: int, ndim: int, op: str) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ShapeError(f"op {op}: axis {axis} out of range for rank {ndim}")
    return axis + ndim if axis < 0 else axis


def broadcast_dim(a: Dim, b: Dim, op: str) -> Dim:
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    if prove_equal(a, b):
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise ShapeError(f"op {op}: dimensions {a} and {b} do not broadcast")
    if isinstance(a, int):  # the symbolic side must be a or 1 at run time
        return a
    if isinstance(b, int):
        return b
    return as_dim(binop("max", a, b))


def broadcast_shapes(shapes: Sequence[Sequence[Dim]], op: str) -> tuple[Dim, ...]:
    """Numpy-style multidirectional broadcasting of symbolic shapes."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[Dim] = [1] * ndim
    for s in shapes:
        padded = [1] * (ndim - len(s)) + list(s)
        out = [broadcast_dim(x, y, op) for x, y in zip(out, padded)]
    return tuple(out)


def same_dtype(types: Sequence[TensorType], op: str) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        raise ShapeError(f"op {op}: operands must have the same dtype, got {', '.join(sorted(dtypes))}")
    return types[0].dtype


def prod(dims: Sequence[Dim]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = as_dim(binop("mul", out, d)) if isinstance(out, PrimExpr) or isinstance(d, PrimExpr) else out * d
    return out


def tuple_type(*types: Type) -> TupleType:
    return TupleType(tuple(types))
