"""Dtype conversion ops: cast and bitcast (elementwise).

cast follows the ONNX Cast table, including the low-precision float types (float8, float4,
float8_e8m0fnu) with their saturation and rounding modes; bitcast reinterprets the bits of
each element as another dtype of the same width.

cast's loop program covers every conversion but those of complex numbers: the storage types
(bfloat16 and the low-precision ones) by tcc.ir.ops._storage_types, bit for bit as the
reference converts. bitcast's reinterprets the bits of plain number types.
"""

from __future__ import annotations

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import LOW_PRECISION, bit_width, round_to_bfloat16, to_low_precision, to_numpy
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.graph import TensorType
from tcc.ir.ops._storage_types import STORAGE_DTYPES, convert
from tcc.ir.ops.elementwise import LOOP_DTYPES
from tcc.ir.ops.registry import REQUIRED, OpDef, Pattern, register, tensor

_ROUND_MODES = ("up", "down", "nearest")


def _cast_infer(args, attrs):
    x = tensor(args[0], "cast")
    if "string" in (x.dtype, attrs["dtype"]):
        raise ShapeError(
            f"op cast: casting {x.dtype} to {attrs['dtype']} is not supported "
            "(tcc has no string conversions)"
        )
    if attrs["round_mode"] not in _ROUND_MODES:
        raise ShapeError(
            f"op cast: round_mode {attrs['round_mode']!r} is not one of {', '.join(_ROUND_MODES)}"
        )
    return TensorType(x.shape, attrs["dtype"])


def _cast(x, dtype, saturate, round_mode):
    if dtype in LOW_PRECISION:
        return to_low_precision(x, dtype, saturate, round_mode)
    out = x.astype(to_numpy(dtype))
    return round_to_bfloat16(out) if dtype == "bfloat16" else out


def _cast_te(x, dtype, saturate, round_mode):
    for d in (x.dtype, dtype):
        if d not in LOOP_DTYPES and d not in STORAGE_DTYPES:
            raise NoLoopProgram(f"op cast: casting {x.dtype} to {dtype} has no loop program")
    return te.compute(x.shape, lambda *i: convert(x[i], dtype, saturate, round_mode), "cast")


register(
    OpDef(
        "cast",
        _cast_infer,
        _cast,
        attrs={"dtype": REQUIRED, "saturate": True, "round_mode": "up"},
        pattern=Pattern.ELEMWISE,
        compute=_cast_te,
        doc="Convert values to `dtype`: floats to ints truncate, nonzero to bool is True, "
        "ints wrap to narrower ints, floats round to nearest even. Out-of-range values cast "
        "to float8 clamp to its largest finite value with `saturate`, else become inf or "
        "NaN; casts to float8_e8m0fnu round by `round_mode` (up, down or nearest).",
    )
)


def _bitcast_infer(args, attrs):
    x, dtype = tensor(args[0], "bitcast"), attrs["dtype"]
    for d in (x.dtype, dtype):
        if d in ("string", "bfloat16"):
            raise ShapeError(
                f"op bitcast: {d} tensors cannot be reinterpreted (tcc does not hold them "
                "in their own bit layout)"
            )
    width, want = bit_width(x.dtype), bit_width(dtype)
    if width != want:
        raise ShapeError(
            f"op bitcast: {x.dtype} has {width} bits but {dtype} has {want}; "
            "both types must have the same width"
        )
    return TensorType(x.shape, dtype)


def _bitcast(x, dtype):
    """Sub-byte values sit in the low bits of their byte, so those bits are the value."""
    width = bit_width(dtype)
    if width < 8:
        return (x.view(np.uint8) & np.uint8((1 << width) - 1)).view(to_numpy(dtype))
    return x.view(to_numpy(dtype))


def _bitcast_te(x, dtype):
    for d in (x.dtype, dtype):
        if d not in LOOP_DTYPES:
            raise NoLoopProgram(f"op bitcast: {d} has no loop program")
    return te.compute(x.shape, lambda *i: te.reinterpret(x[i], dtype), "bitcast")


register(
    OpDef(
        "bitcast",
        _bitcast_infer,
        _bitcast,
        attrs={"dtype": REQUIRED},
        pattern=Pattern.ELEMWISE,
        compute=_bitcast_te,
        doc="Reinterpret the bits of each element as `dtype` (same width, little endian).",
    )
)
