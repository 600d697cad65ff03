"""Ops that create tensors: shape_to_tensor, arange, full, full_like, eye, and
trilu (the triangle of its input, the rest zeroed).

Sizes and values are attributes; `dyn_arange` and `dyn_full` take them as run-time operands
instead, and their result dimensions are fresh size variables bound when the program runs.

Loop programs: a size variable the values or the shape use that is no whole dimension of
the result (`shape_to_tensor([batch, seq])`) is a scalar argument of the kernel
(`te.create_prim_func`). Dtypes outside bool, the integer types and float16/32/64 have none
(NoLoopProgram). dyn_full has none itself: the lower-dynamic-shapes pass rewrites it into
full over size variables read from its shape operand. dyn_arange's length is counted by a
kernel (arange_length, whose result is read as sizes) and filled by arange_from.
"""

from __future__ import annotations

import math

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import is_float, to_numpy
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import Dim, PrimExpr, as_dim, fresh_var
from tcc.ir.graph import ShapeType, TensorType
from tcc.ir.ops._storage_types import convert
from tcc.ir.ops._util import (
    ceil_div,
    count_type,
    fresh_vars,
    ints,
    nonneg,
    operand,
    register_op,
    scalar_value,
    static_length,
    vector_length,
)
from tcc.ir.ops.elementwise import LOOP_DTYPES
from tcc.ir.ops.registry import (
    REQUIRED,
    OpDef,
    Pattern,
    StaticForm,
    register,
    same_dtype,
    tensor,
)

# ---------------------------------------------------------------------------------------------
# loop program helpers


def _register(name, infer, ref, attrs, num_args=(1, 1), doc="", compute=None) -> OpDef:
    """`register_op` with a loop program."""
    return register(OpDef(name, infer, ref, attrs, Pattern.INJECTIVE, num_args, compute, doc))


def _loopable(op: str, *dtypes: str) -> None:
    for d in dtypes:
        if d not in LOOP_DTYPES:
            raise NoLoopProgram(f"op {op}: dtype {d} has no loop program")


def _value(value, dtype: str):
    """`value` converted to `dtype` exactly as numpy fills an array of it."""
    arr = np.asarray(value)
    if arr.size != 1:
        raise NoLoopProgram(f"op full: fill value of shape {arr.shape} has no loop program")
    return te.const(np.full((), arr.reshape(()), to_numpy(dtype))[()].item(), dtype)


def _shape_to_tensor_te(dims, scalar, dtype):
    _loopable("shape_to_tensor", dtype)
    shape = () if scalar else (len(dims),)
    values = [convert(d, dtype) if isinstance(d, PrimExpr) else _value(d, dtype) for d in dims]
    values = values or [te.const(0, dtype)]

    def body(*i):
        out = values[-1]
        for k in range(len(values) - 2, -1, -1):
            out = te.if_then_else(te.equal(i[0], k), values[k], out)
        return out

    return te.compute(shape, body, "shape_to_tensor")


register(
    OpDef(
        "shape_to_tensor",
        lambda args, attrs: TensorType(
            () if attrs["scalar"] else (len(attrs["dims"]),), attrs["dtype"]
        ),
        lambda dims, scalar, dtype: np.array(dims, dtype=to_numpy(dtype)).reshape(
            () if scalar else (-1,)
        ),
        attrs={"dims": REQUIRED, "scalar": False, "dtype": "int64"},
        pattern=Pattern.INJECTIVE,
        num_args=(0, 0),
        compute=_shape_to_tensor_te,
        doc="A 1-D (or scalar) integer tensor holding the (symbolic) dimensions `dims`.",
    )
)


def _tensor_to_shape_infer(args, attrs):
    t = tensor(args[0], "tensor_to_shape")
    n = static_length(t, "tensor_to_shape", "its operand")
    return ShapeType(n, fresh_vars(n, "sv"))


register(
    OpDef(
        "tensor_to_shape",
        _tensor_to_shape_infer,
        lambda x: tuple(int(v) for v in np.asarray(x).reshape(-1)),
        pattern=Pattern.OPAQUE,
        doc="The values of a 1-D (or scalar) integer tensor as a shape value, so that a "
        "binding of type Shape((v0, v1, ...)) binds size variables to them (the VM's "
        "tensor_to_shape builtin). The values may be negative: they are what the tensor holds.",
    )
)


# ---------------------------------------------------------------------------------------------
# arange, full, full_like, eye, trilu


def _arange_length(start, stop, step) -> Dim:
    if any(isinstance(v, PrimExpr) for v in (start, stop, step)):
        if not isinstance(step, int) or step == 0:
            raise ShapeError(
                f"op arange: a symbolic range needs a nonzero integer step, got {step}"
            )
        span = as_dim(stop - start) if step > 0 else as_dim(start - stop)
        return nonneg(ceil_div(span, abs(step)))
    if step == 0:
        raise ShapeError("op arange: step cannot be 0")
    return max(math.ceil((stop - start) / step), 0)


def _arange_infer(args, attrs):
    return TensorType(
        (_arange_length(attrs["start"], attrs["stop"], attrs["step"]),), attrs["dtype"]
    )


def _arange_ref(start, stop, step, dtype):
    return np.arange(start, stop, step).astype(to_numpy(dtype))


def _arange_te(start, stop, step, dtype):
    _loopable("arange", dtype)
    n = _arange_length(start, stop, step)
    if not any(isinstance(v, float) for v in (start, stop, step)):
        return te.compute((n,), lambda i: convert(i * step + start, dtype), "arange")
    # numpy fills a float range as start + i * ((start + step) - start), in float64
    delta = (start + step) - start
    f64 = "float64"
    return te.compute(
        (n,),
        lambda i: convert(te.const(start, f64) + te.cast(i, f64) * te.const(delta, f64), dtype),
        "arange",
    )


def _dyn_arange_infer(args, attrs):
    ts = [tensor(a, "dyn_arange") for a in args]
    if any(t.ndim > 1 or t.shape not in ((), (1,)) for t in ts):
        raise ShapeError("op dyn_arange: start, limit and delta must be scalars")
    return TensorType((fresh_var("rg"),), same_dtype(ts, "dyn_arange"))


_register(
    "arange",
    _arange_infer,
    _arange_ref,
    {"start": 0, "stop": REQUIRED, "step": 1, "dtype": "int64"},
    num_args=(0, 0),
    doc="start, start + step, ... up to (excluding) stop.",
    compute=_arange_te,
)


def _scalar(t, dtype: str):
    """The one value of a scalar (or 1-element) te tensor, in `dtype`."""
    return convert(t[(0,) * t.ndim], dtype)


def _arange_length_ref(start, limit, delta):
    start, limit, delta = (scalar_value(v) for v in (start, limit, delta))
    with np.errstate(divide="ignore", invalid="ignore"):
        n = np.ceil((np.float64(limit) - np.float64(start)) / np.float64(delta))
    # no length (a zero or NaN step, a range past int64): -1, refused as a negative size
    return np.array([max(int(n), 0) if np.isfinite(n) and abs(n) < 2**62 else -1], np.int64)


def _arange_length_te(start, limit, delta):
    f64 = "float64"
    n = te.ceil((_scalar(limit, f64) - _scalar(start, f64)) / _scalar(delta, f64))
    fits = te.logical_and(te.logical_not(te.isnan(n)), te.abs(n) < 2.0**62)
    length = te.if_then_else(
        fits, te.max(te.cast(n, "int64"), te.const(0, "int64")), te.const(-1, "int64")
    )
    return te.compute((1,), lambda i: length, "arange_length")


def _arange_from_infer(args, attrs):
    start, delta = (tensor(a, "arange_from") for a in args)
    return TensorType((attrs["length"],), same_dtype([start, delta], "arange_from"))


def _arange_from_ref(start, delta, length):
    dtype = np.asarray(start).dtype
    start, delta, i = scalar_value(start), scalar_value(delta), np.arange(length)
    if dtype.kind == "f":  # as numpy's arange fills a float range, in float64
        return (np.float64(start) + i * ((np.float64(start) + delta) - start)).astype(dtype)
    return (np.int64(start) + i * np.int64(delta)).astype(dtype)


def _arange_from_te(start, delta, *, length):
    dtype = start.dtype
    if is_float(dtype):  # numpy fills a float range as start + i * ((start + step) - start)
        s, d = _scalar(start, "float64"), _scalar(delta, "float64")
        step = (s + d) - s
        value = lambda i: convert(s + te.cast(i, "float64") * step, dtype)  # noqa: E731
    else:
        s, d = _scalar(start, "int64"), _scalar(delta, "int64")
        value = lambda i: convert(i * d + s, dtype)  # noqa: E731
    return te.compute((length,), value, "arange")


register(
    OpDef(
        "arange_length",
        count_type("arange_length"),
        _arange_length_ref,
        pattern=Pattern.OPAQUE,
        num_args=(3, 3),
        compute=_arange_length_te,
        doc="The length of the range of run-time scalars start, limit and delta, as numpy's "
        "arange counts it: max(ceil((limit - start) / delta), 0) in float64, as a 1-vector "
        "(-1 where there is none: a zero or NaN step).",
    )
)
_register(
    "arange_from",
    _arange_from_infer,
    _arange_from_ref,
    {"length": REQUIRED},
    num_args=(2, 2),
    doc="`length` values start, start + delta, ... of run-time scalars start and delta, "
    "filled as numpy's arange fills them.",
    compute=_arange_from_te,
)
register_op(
    "dyn_arange",
    _dyn_arange_infer,
    lambda start, limit, delta: _arange_ref(
        scalar_value(start), scalar_value(limit), scalar_value(delta), str(np.asarray(start).dtype)
    ),
    num_args=(3, 3),
    doc="arange with run-time scalar start, limit and delta (the result has their dtype); "
    "arange_length counts it and arange_from fills it when the program runs.",
    size_op="arange_length",
    to_static=lambda types, sizes, out, attrs: StaticForm(
        "arange_from", (0, 2), {"length": sizes[3][0]}, (sizes[3][0],)
    ),
)


def _full_ref(shape, value, dtype):
    return np.full(shape, value, dtype=to_numpy(dtype))


def _full_te(shape, value, dtype):
    _loopable("full", dtype)
    shape = tuple(shape)
    v = _value(value, dtype)
    return te.compute(shape, lambda *i: v, "full")


_register(
    "full",
    lambda args, attrs: TensorType(tuple(attrs["shape"]), attrs["dtype"]),
    _full_ref,
    {"shape": REQUIRED, "value": 0, "dtype": "float32"},
    num_args=(0, 0),
    doc="A tensor of `shape` filled with `value`.",
    compute=_full_te,
)
register_op(
    "dyn_full",
    lambda args, attrs: TensorType(
        fresh_vars(vector_length(args[0], "dyn_full", "shape"), "fl"), attrs["dtype"]
    ),
    lambda shape, value, dtype: _full_ref(ints(shape), value, dtype),
    {"value": 0, "dtype": "float32"},
    doc="full with the shape as a run-time tensor.",
    shape_operands=(0,),
    to_static=lambda types, sizes, out, attrs: StaticForm(
        "full", (), {"shape": list(out), "value": attrs["value"], "dtype": attrs["dtype"]},
        tuple(sizes[0]),
    ),
)


def _full_like_infer(args, attrs):
    x = tensor(args[0], "full_like")
    return TensorType(x.shape, attrs["dtype"] or x.dtype)


def _full_like_te(x, value, dtype):
    dtype = dtype or x.dtype
    _loopable("full_like", x.dtype, dtype)
    v = _value(value, dtype)
    return te.compute(x.shape, lambda *i: v, "full_like")


register(
    OpDef(
        "full_like",
        _full_like_infer,
        lambda x, value, dtype: np.full(x.shape, value, to_numpy(dtype) if dtype else x.dtype),
        attrs={"value": REQUIRED, "dtype": None},
        pattern=Pattern.ELEMWISE,
        compute=_full_like_te,
        doc="A tensor of x's shape filled with `value` (dtype defaults to x's).",
    )
)


def _eye_te(rows, cols, k, dtype):
    _loopable("eye", dtype)
    shape = (rows, cols)
    one, zero = te.const(1, dtype), te.const(0, dtype)
    return te.compute(shape, lambda i, j: te.if_then_else(te.equal(j - i, k), one, zero), "eye")


_register(
    "eye",
    lambda args, attrs: TensorType((attrs["rows"], attrs["cols"]), attrs["dtype"]),
    lambda rows, cols, k, dtype: np.eye(rows, cols, k, dtype=to_numpy(dtype)),
    {"rows": REQUIRED, "cols": REQUIRED, "k": 0, "dtype": "float32"},
    num_args=(0, 0),
    doc="Ones on the k-th diagonal of a rows x cols matrix, zeros elsewhere.",
    compute=_eye_te,
)


def _trilu_infer(args, attrs):
    x = tensor(args[0], "trilu")
    if x.ndim < 2:
        raise ShapeError(f"op trilu: input must have rank >= 2, got {x}")
    if operand(args, 1) is not None and tensor(args[1], "trilu", "k").ndim > 1:
        raise ShapeError("op trilu: k must be a scalar")
    return x


def _trilu_ref(x, k=None, upper=True):
    kk = 0 if k is None else int(scalar_value(k))
    return np.triu(x, kk) if upper else np.tril(x, kk)


def _trilu_te(x, k=None, upper=True):
    _loopable("trilu", x.dtype, *([] if k is None else [k.dtype]))
    zero = te.const(0, x.dtype)

    def body(*i):
        kk = 0 if k is None else te.cast(k[(0,) * k.ndim], "int64")
        diagonal = i[-1] - i[-2]
        keep = diagonal >= kk if upper else diagonal <= kk
        return te.if_then_else(keep, x[i], zero)

    return te.compute(x.shape, body, "trilu")


_register(
    "trilu",
    _trilu_infer,
    _trilu_ref,
    {"upper": True},
    num_args=(1, 2),
    doc="Keep the upper (or lower) triangle from diagonal k of the last two axes.",
    compute=_trilu_te,
)
