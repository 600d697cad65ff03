"""Ops that create tensors: shape_to_tensor, arange, full, full_like, eye, and
trilu (the triangle of its input, the rest zeroed).

Sizes and values are attributes; `dyn_arange` and `dyn_full` take them as run-time operands
instead, and their result dimensions are fresh size variables bound when the program runs.
"""

from __future__ import annotations

import math

import numpy as np

from tcc.ir.dtype import to_numpy
from tcc.ir.errors import ShapeError
from tcc.ir.expr import Dim, PrimExpr, as_dim, fresh_var
from tcc.ir.graph import TensorType
from tcc.ir.ops._util import (
    ceil_div,
    fresh_vars,
    ints,
    nonneg,
    operand,
    register_op,
    scalar_value,
    vector_length,
)
from tcc.ir.ops.registry import REQUIRED, OpDef, Pattern, register, same_dtype, tensor

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
        doc="A 1-D (or scalar) integer tensor holding the (symbolic) dimensions `dims`.",
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


def _dyn_arange_infer(args, attrs):
    ts = [tensor(a, "dyn_arange") for a in args]
    if any(t.ndim > 1 or t.shape not in ((), (1,)) for t in ts):
        raise ShapeError("op dyn_arange: start, limit and delta must be scalars")
    return TensorType((fresh_var("rg"),), same_dtype(ts, "dyn_arange"))


register_op(
    "arange",
    _arange_infer,
    _arange_ref,
    {"start": 0, "stop": REQUIRED, "step": 1, "dtype": "int64"},
    num_args=(0, 0),
    doc="start, start + step, ... up to (excluding) stop.",
)
register_op(
    "dyn_arange",
    _dyn_arange_infer,
    lambda start, limit, delta: _arange_ref(
        scalar_value(start), scalar_value(limit), scalar_value(delta), str(np.asarray(start).dtype)
    ),
    num_args=(3, 3),
    doc="arange with run-time scalar start, limit and delta (the result has their dtype).",
)


def _full_ref(shape, value, dtype):
    return np.full(shape, value, dtype=to_numpy(dtype))


register_op(
    "full",
    lambda args, attrs: TensorType(tuple(attrs["shape"]), attrs["dtype"]),
    _full_ref,
    {"shape": REQUIRED, "value": 0, "dtype": "float32"},
    num_args=(0, 0),
    doc="A tensor of `shape` filled with `value`.",
)
register_op(
    "dyn_full",
    lambda args, attrs: TensorType(
        fresh_vars(vector_length(args[0], "dyn_full", "shape"), "fl"), attrs["dtype"]
    ),
    lambda shape, value, dtype: _full_ref(ints(shape), value, dtype),
    {"value": 0, "dtype": "float32"},
    doc="full with the shape as a run-time tensor.",
)


def _full_like_infer(args, attrs):
    x = tensor(args[0], "full_like")
    return TensorType(x.shape, attrs["dtype"] or x.dtype)


register(
    OpDef(
        "full_like",
        _full_like_infer,
        lambda x, value, dtype: np.full(x.shape, value, to_numpy(dtype) if dtype else x.dtype),
        attrs={"value": REQUIRED, "dtype": None},
        pattern=Pattern.ELEMWISE,
        doc="A tensor of x's shape filled with `value` (dtype defaults to x's).",
    )
)


register_op(
    "eye",
    lambda args, attrs: TensorType((attrs["rows"], attrs["cols"]), attrs["dtype"]),
    lambda rows, cols, k, dtype: np.eye(rows, cols, k, dtype=to_numpy(dtype)),
    {"rows": REQUIRED, "cols": REQUIRED, "k": 0, "dtype": "float32"},
    num_args=(0, 0),
    doc="Ones on the k-th diagonal of a rows x cols matrix, zeros elsewhere.",
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


register_op(
    "trilu",
    _trilu_infer,
    _trilu_ref,
    {"upper": True},
    num_args=(1, 2),
    doc="Keep the upper (or lower) triangle from diagonal k of the last two axes.",
)
