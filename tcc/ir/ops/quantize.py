"""Quantization ops: quantize_linear, dequantize_linear, dynamic_quantize_linear.

The quantized dtypes are `QUANT_DTYPES`: integers (round half to even, then saturate to
`QUANT_RANGE`) and the float8/float4 types (round to nearest even; saturation is the
conversion's). Scales and zero points are per tensor, per axis, or per block along an axis.
"""

from __future__ import annotations

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import FLOAT8_DTYPES, from_numpy, is_float, to_low_precision, to_numpy
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.graph import TensorType
from tcc.ir.ops._storage_types import convert
from tcc.ir.ops._util import match_dim, te_type
from tcc.ir.ops.registry import (
    OpDef,
    Pattern,
    normalize_axis,
    prod,
    register,
    tensor,
    tuple_type,
)

QUANT_RANGE = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
    "int32": (-(2**31), 2**31 - 1),
    "uint4": (0, 15),
    "int4": (-8, 7),
    "uint2": (0, 3),
    "int2": (-2, 1),
}
# Float types values are quantized to by rounding to nearest even; their saturation is the
# conversion's (float4 has no inf or NaN, so it always saturates).
_QUANT_FLOATS = FLOAT8_DTYPES | {"float4_e2m1fn"}
QUANT_DTYPES = (*QUANT_RANGE, *sorted(_QUANT_FLOATS))


def _check_quantized(dtype: str, op: str, what: str) -> None:
    if dtype not in QUANT_DTYPES:
        raise ShapeError(
            f"op {op}: unsupported {what} dtype {dtype}; expected one of {', '.join(QUANT_DTYPES)}"
        )


def _check_quant_params(x: TensorType, p: TensorType, attrs, op: str, what: str) -> None:
    """`p` (scale or zero point) is per tensor (one element), per axis (1-D along `axis`) or
    blocked (x's shape with the axis dim divided by block_size, rounded up)."""
    if all(isinstance(d, int) and d == 1 for d in p.shape):
        return
    axis = normalize_axis(attrs["axis"], x.ndim, op)
    bs = attrs["block_size"]
    if not bs:
        if p.ndim != 1:
            raise ShapeError(f"op {op}: {what} must be a scalar or 1-D, got shape {p.shape}")
        match_dim(p.shape[0], x.shape[axis], op, f"{what} length and the input's axis {axis}")
        return
    if p.ndim != x.ndim:
        raise ShapeError(f"op {op}: blocked {what} must have rank {x.ndim}, got {p.ndim}")
    for i, (d, xd) in enumerate(zip(p.shape, x.shape)):
        want = (xd + bs - 1) // bs if i == axis else xd
        match_dim(d, want, op, f"{what} dimension {i} (block_size {bs})")


def expand_quant_param(p: np.ndarray, shape: tuple, axis: int, block_size: int) -> np.ndarray:
    """Make a scale/zero point broadcastable to the input: per tensor as is, per axis as a
    1-D along `axis`, blocked by repeating each entry `block_size` times along `axis`."""
    if p.size == 1:
        return p.reshape(())
    axis = axis % len(shape)
    if not block_size:
        return p.reshape([-1 if i == axis else 1 for i in range(len(shape))])
    return np.repeat(p, block_size, axis=axis).take(range(shape[axis]), axis=axis)


def _quantize_infer(args, attrs):
    x, scale = tensor(args[0], "quantize_linear", "x"), tensor(args[1], "quantize_linear", "scale")
    out = attrs["out_dtype"]
    _check_quantized(out, "quantize_linear", "output")
    _check_quant_params(x, scale, attrs, "quantize_linear", "scale")
    if args[2] is not None:
        zp = tensor(args[2], "quantize_linear", "zero point")
        if zp.dtype != out:
            raise ShapeError(
                f"op quantize_linear: zero point dtype {zp.dtype} differs from the output dtype {out}"
            )
        _check_quant_params(x, zp, attrs, "quantize_linear", "zero point")
    return TensorType(x.shape, out)


def _quantize_ref(x, scale, zero_point, axis, block_size, saturate, out_dtype, precision):
    scale = expand_quant_param(scale, x.shape, axis, block_size)
    if precision is not None:
        x, scale = x.astype(to_numpy(precision)), scale.astype(to_numpy(precision))
    y = x / scale
    zp = None if zero_point is None else expand_quant_param(zero_point, x.shape, axis, block_size)
    if out_dtype in _QUANT_FLOATS:
        return to_low_precision(y if zp is None else y + zp.astype(y.dtype), out_dtype, saturate)
    q = np.rint(y).astype(np.int64)
    if zp is not None:
        q = q + zp.astype(np.int64)
    lo, hi = QUANT_RANGE[out_dtype]
    return np.clip(q, lo, hi).astype(to_numpy(out_dtype))


def _param_loader(p, x, axis: int, block_size: int, op: str):
    """`load(idx)`: the scale or zero point that input element `idx` uses."""
    if p is None:
        return lambda idx: None
    if all(isinstance(d, int) and d == 1 for d in p.shape):
        return lambda idx: p[(0,) * p.ndim]
    axis = normalize_axis(axis, x.ndim, op)
    if not block_size:
        return lambda idx: p[(idx[axis],)]
    return lambda idx: p[tuple(i // block_size if k == axis else i for k, i in enumerate(idx))]


def _promoted(*dtypes: str) -> str:
    """numpy's result dtype of an arithmetic op on arrays of `dtypes`."""
    return from_numpy(np.result_type(*(to_numpy(d) for d in dtypes)))


def _quantize_compute(x, scale, zero_point=None, *, axis, block_size, saturate, out_dtype,
                      precision):
    op = "quantize_linear"
    shape = _quantize_infer([te_type(x), te_type(scale), te_type(zero_point)],
                            {"axis": axis, "block_size": block_size, "out_dtype": out_dtype}).shape
    div = precision or _promoted(x.dtype, scale.dtype)
    load_scale = _param_loader(scale, x, axis, block_size, op)
    load_zp = _param_loader(zero_point, x, axis, block_size, op)

    def quantize(*idx):
        y = convert(x[idx], div) / convert(load_scale(idx), div)
        zp = load_zp(idx)
        if out_dtype in _QUANT_FLOATS:  # as the reference: + zero point, then the conversion
            y = y if zp is None else y + convert(zp, div)
            return convert(y, out_dtype, saturate)
        # as the reference: rounded half to even, then the zero point added and saturated,
        # here in float64 (exact below 2**53)
        y = te.cast(te.nearbyint(y), "float64")
        if zp is not None:
            y = y + convert(zp, "float64")
        lo, hi = QUANT_RANGE[out_dtype]
        return convert(te.min(te.max(y, te.const(lo, "float64")), te.const(hi, "float64")), out_dtype)

    return te.compute(shape, quantize, op)


register(
    OpDef(
        "quantize_linear",
        _quantize_infer,
        _quantize_ref,
        attrs={
            "axis": 1,
            "block_size": 0,
            "saturate": True,
            "out_dtype": "uint8",
            "precision": None,
        },
        pattern=Pattern.INJECTIVE,
        num_args=(2, 3),
        compute=_quantize_compute,
        doc="saturate(round_half_even(x / scale) + zero_point) in `out_dtype`; scale and "
        "zero point per tensor, per `axis`, or per block of `block_size` along `axis`; "
        "`precision` (a float dtype) is the type the division runs in. Float8 and float4 "
        "outputs round x / scale + zero_point to nearest even; `saturate` (float8 only) "
        "clamps overflow to the largest finite value instead of inf/NaN.",
    )
)


def _dequantize_infer(args, attrs):
    x, scale = (
        tensor(args[0], "dequantize_linear", "x"),
        tensor(args[1], "dequantize_linear", "scale"),
    )
    if not is_float(scale.dtype):
        raise ShapeError(f"op dequantize_linear: scale must be floating point, got {scale.dtype}")
    _check_quantized(x.dtype, "dequantize_linear", "input")
    _check_quant_params(x, scale, attrs, "dequantize_linear", "scale")
    if args[2] is not None:
        zp = tensor(args[2], "dequantize_linear", "zero point")
        if zp.dtype != x.dtype:
            raise ShapeError(
                f"op dequantize_linear: zero point dtype {zp.dtype} differs from the input dtype {x.dtype}"
            )
        _check_quant_params(x, zp, attrs, "dequantize_linear", "zero point")
    return TensorType(x.shape, attrs["out_dtype"] or scale.dtype)


def _dequantize_ref(x, scale, zero_point, axis, block_size, out_dtype):
    dx = x.astype(np.float32)
    if zero_point is not None:
        dx = dx - expand_quant_param(zero_point, x.shape, axis, block_size)
    y = dx * expand_quant_param(scale, x.shape, axis, block_size)
    return y.astype(to_numpy(out_dtype) if out_dtype else scale.dtype)


def _dequantize_compute(x, scale, zero_point=None, *, axis, block_size, out_dtype):
    op = "dequantize_linear"
    t = _dequantize_infer([te_type(x), te_type(scale), te_type(zero_point)],
                          {"axis": axis, "block_size": block_size, "out_dtype": out_dtype})
    load_scale = _param_loader(scale, x, axis, block_size, op)
    load_zp = _param_loader(zero_point, x, axis, block_size, op)
    # as the reference: x in float32, minus the zero point, times the scale, each step in
    # the dtype numpy promotes to
    sub = "float32" if zero_point is None else _promoted("float32", zero_point.dtype)
    mul = _promoted(sub, scale.dtype)

    def dequantize(*idx):
        v = te.cast(convert(x[idx], "float32"), sub)
        zp = load_zp(idx)
        if zp is not None:
            v = v - convert(zp, sub)
        return convert(te.cast(v, mul) * convert(load_scale(idx), mul), t.dtype)

    return te.compute(t.shape, dequantize, op)


register(
    OpDef(
        "dequantize_linear",
        _dequantize_infer,
        _dequantize_ref,
        attrs={"axis": 1, "block_size": 0, "out_dtype": None},
        pattern=Pattern.INJECTIVE,
        num_args=(2, 3),
        compute=_dequantize_compute,
        doc="(x - zero_point) * scale, computed in float32, in `out_dtype` (default: the "
        "scale's dtype); scale and zero point laid out as for quantize_linear.",
    )
)


def _dynamic_quantize_infer(args, attrs):
    x = tensor(args[0], "dynamic_quantize_linear")
    if x.dtype != "float32":
        raise ShapeError(f"op dynamic_quantize_linear: input must be float32, got {x.dtype}")
    return tuple_type(
        TensorType(x.shape, "uint8"), TensorType((), "float32"), TensorType((), "uint8")
    )


def _dynamic_quantize_ref(x):
    hi = np.float32(max(0.0, float(x.max()))) if x.size else np.float32(0)
    lo = np.float32(min(0.0, float(x.min()))) if x.size else np.float32(0)
    scale = np.float32(1.0 if hi == lo else hi - lo) / np.float32(255)
    zp = np.rint(np.clip(np.float32(0) - lo / scale, 0, 255))
    y = np.clip(np.rint(x / scale) + zp, 0, 255)
    return y.astype(np.uint8), np.array(scale, np.float32), np.array(zp, np.uint8)


def _dynamic_quantize_compute(x):
    if x.dtype != "float32":
        raise NoLoopProgram(f"op dynamic_quantize_linear: {x.dtype} input has no loop program")
    f32 = "float32"
    axes = [te.reduce_axis(d, f"r{k}") for k, d in enumerate(x.shape)]
    # the range widened to include 0 (an empty input's reductions give -inf and inf: 0, 0)
    hi = te.compute((), lambda: te.max(x[tuple(axes)], axis=axes), "range_max")
    lo = te.compute((), lambda: te.min(x[tuple(axes)], axis=axes), "range_min")
    zero, top = te.const(0.0, f32), te.const(255.0, f32)
    # a reduction over no element never runs its init: an empty input's bounds are 0 here
    count = prod(x.shape)
    empty = (lambda: te.const(True)) if count == 0 else (lambda: te.equal(count, 0))

    def high():
        return zero if count == 0 else te.if_then_else(empty(), zero, te.max(hi[()], zero))

    def low():
        return zero if count == 0 else te.if_then_else(empty(), zero, te.min(lo[()], zero))

    def scale_of():
        h, m = high(), low()
        return te.if_then_else(te.equal(h, m), te.const(1.0, f32), h - m) / top

    scale = te.compute((), scale_of, "scale")
    zp_f = te.compute((), lambda: te.nearbyint(
        te.min(te.max(zero - low() / scale[()], zero), top)), "zero_point_f")
    y = te.compute(x.shape, lambda *i: te.cast(te.min(te.max(
        te.nearbyint(x[i] / scale[()]) + zp_f[()], zero), top), "uint8"), "y")
    zp = te.compute((), lambda: te.cast(zp_f[()], "uint8"), "zero_point")
    return [y, scale, zp]


register(
    OpDef(
        "dynamic_quantize_linear",
        _dynamic_quantize_infer,
        _dynamic_quantize_ref,
        pattern=Pattern.OPAQUE,
        compute=_dynamic_quantize_compute,
        doc="(y, scale, zero_point): uint8 quantization of x over its range widened to include 0.",
    )
)
