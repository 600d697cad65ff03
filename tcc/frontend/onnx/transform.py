"""Converters for data-movement ONNX ops (Reshape, Transpose, Slice, Pad, Range, ...).

A shape-defining operand (Reshape's shape, Slice's starts, Pad's pads, ...) known at import
time, possibly as symbolic dimensions computed from `Shape`, becomes an attribute of the
static op; one only known at run time is passed to the op's `dyn_` variant as a tensor.
Generator ops (Range, ConstantOfShape, EyeLike) whose result is static and small become
import-time constants.
"""

from __future__ import annotations

import numpy as np

from tcc.frontend.fold import FOLD_MAX_ELEMENTS
from tcc.frontend.onnx.base import OnnxOp, converter, onnx_dtype
from tcc.ir.dtype import from_numpy, to_numpy
from tcc.ir.expr import Dim, PrimExpr
from tcc.ir.ops._util import known_nonneg
from tcc.ir.ops.registry import broadcast_shapes, get_op, normalize_attrs, normalize_axis, prod
from tcc.ir.ops.transform import equal_split_sizes, onnx_reshape_shape

# ---------------------------------------------------------------------------------------------
# operand helpers


def _fold_generator(ctx, node, op: str, **attrs):
    """Emit an operand-less op; a static result of at most FOLD_MAX_ELEMENTS becomes a
    known constant instead, so later converters see its value."""
    opdef = get_op(op)
    concrete = all(not isinstance(v, PrimExpr) for v in _flatten(attrs.values()))
    if concrete:
        attrs_n = normalize_attrs(opdef, attrs)
        rtype = opdef.infer([], attrs_n)
        if rtype.is_static and prod(rtype.shape) <= FOLD_MAX_ELEMENTS:
            ctx.set_known(node.outputs[0], opdef.ref(**attrs_n))
            return None
    return ctx.emit(op, **attrs)


def _flatten(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flatten(v)
        else:
            yield v


def _vector_operand(ctx, node, i: int, what: str):
    """Operand `i` as a tensor for a dyn_ op; it must be 1-D with a static length."""
    t = ctx.type_of(node, i)
    if t is None or t.ndim != 1 or not isinstance(t.shape[0], int):
        raise node.error(
            f"{what} must be known at import time or a 1-D tensor of static length, got {t}"
        )
    return ctx.input(node, i)


# ---------------------------------------------------------------------------------------------
# Reshape, Flatten, Transpose, Squeeze, Unsqueeze


def _reshape(ctx, node, shape: list[Dim] | None):
    x = ctx.input(node, 0)
    allowzero = bool(node.attrs.get("allowzero", 0))
    if shape is None:
        return ctx.emit(
            "dyn_reshape", x, _vector_operand(ctx, node, 1, "shape"), allowzero=allowzero
        )
    in_shape = ctx.type_of(node, 0).shape
    if (
        not allowzero
        and len(shape) > len(in_shape)
        and any(isinstance(d, int) and d == 0 for d in shape[len(in_shape) :])
    ):
        raise node.error(
            f"shape {shape} copies (0) a dimension the rank-{len(in_shape)} input lacks"
        )
    return ctx.emit("reshape", x, shape=onnx_reshape_shape(in_shape, shape, allowzero))


@converter("Reshape")
class Reshape(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return _reshape(ctx, node, list(node.attrs["shape"]))

    @classmethod
    def v5(cls, ctx, node):
        return _reshape(ctx, node, ctx.int_vector(node, 1))


@converter("Flatten")
class Flatten(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        shape = ctx.type_of(node, 0).shape
        axis = node.attrs.get("axis", 1)
        axis = axis + len(shape) if axis < 0 else axis
        if not 0 <= axis <= len(shape):
            raise node.error(f"axis {node.attrs.get('axis', 1)} out of range for rank {len(shape)}")
        return ctx.emit(
            "reshape", ctx.input(node, 0), shape=[prod(shape[:axis]), prod(shape[axis:])]
        )


@converter("Transpose")
class Transpose(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        perm = node.attrs.get("perm")
        return ctx.emit("transpose", ctx.input(node, 0), axes=None if perm is None else list(perm))


def _squeeze(ctx, node, op: str, axes_from_input: bool):
    x = ctx.input(node, 0)
    if not axes_from_input:
        axes = node.attrs.get("axes")
        return ctx.emit(op, x, axes=None if axes is None else list(axes))
    if not node.has_input(1):
        return ctx.emit(op, x)
    axes = ctx.int_vector(node, 1)
    if axes is None:
        return ctx.emit(f"dyn_{op}", x, _vector_operand(ctx, node, 1, "axes"))
    return ctx.emit(op, x, axes=axes)


@converter("Squeeze")
class Squeeze(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return _squeeze(ctx, node, "squeeze", False)

    @classmethod
    def v13(cls, ctx, node):
        return _squeeze(ctx, node, "squeeze", True)


@converter("Unsqueeze")
class Unsqueeze(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return _squeeze(ctx, node, "expand_dims", False)

    @classmethod
    def v13(cls, ctx, node):
        if not node.has_input(1):
            raise node.error("the axes input is required")
        return _squeeze(ctx, node, "expand_dims", True)


# ---------------------------------------------------------------------------------------------
# Concat, Split, Slice


@converter("Concat")
class Concat(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        xs = [ctx.input(node, i) for i in range(len(node.inputs)) if node.has_input(i)]
        return ctx.emit("concat", *xs, axis=node.attrs.get("axis", 1))


def _split(ctx, node, sizes_input: int | None):
    """Split with sizes from attribute `split`, input `sizes_input`, or equal parts."""
    x, t = ctx.input(node, 0), ctx.type_of(node, 0)
    axis = normalize_axis(node.attrs.get("axis", 0), t.ndim, "split")
    n = len(node.outputs)
    if sizes_input is not None and node.has_input(sizes_input):
        sizes = ctx.int_vector(node, sizes_input)
        if sizes is None:
            parts = ctx.emit(
                "dyn_split", x, _vector_operand(ctx, node, sizes_input, "split"), axis=axis
            )
            return [ctx.bb.get_item(parts, k, name=o or "v") for k, o in enumerate(node.outputs)]
    else:
        sizes = node.attrs.get("split")
    if not sizes:
        n = node.attrs.get("num_outputs", n)
        dim = t.shape[axis]
        if node.opset < 18:  # the axis must divide evenly
            sizes = [dim // n] * n
        else:
            sizes = equal_split_sizes(dim, n)
    if len(sizes) != len(node.outputs):
        raise node.error(f"{len(sizes)} split sizes for {len(node.outputs)} outputs")
    parts = ctx.emit("split", x, sizes=list(sizes), axis=axis)
    return [ctx.bb.get_item(parts, k, name=o or "v") for k, o in enumerate(node.outputs)]


@converter("Split")
class Split(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        return _split(ctx, node, 1)

    @classmethod
    def v2(cls, ctx, node):
        return _split(ctx, node, None)

    @classmethod
    def v13(cls, ctx, node):
        return _split(ctx, node, 1)


def _slice(ctx, node, starts, ends, axes, steps):
    """Static strided_slice when every bound is known (symbolic ones nonnegative)."""
    x, t = ctx.input(node, 0), ctx.type_of(node, 0)
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise node.error("starts, ends, axes and steps must have the same length")
    if any(not isinstance(s, int) for s in [*axes, *steps]):
        return None
    if any(not isinstance(b, int) and not known_nonneg(b) for b in [*starts, *ends]):
        return None
    axes = [normalize_axis(a, t.ndim, "slice") for a in axes]
    return ctx.emit(
        "strided_slice", x, begin=list(starts), end=list(ends), axes=axes, strides=steps
    )


@converter("Slice")
class Slice(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        a = node.attrs
        return _slice(ctx, node, list(a["starts"]), list(a["ends"]), a.get("axes"), None)

    @classmethod
    def v10(cls, ctx, node):
        vals = [ctx.int_vector(node, i) for i in range(1, 5)]
        known = vals[0] is not None and vals[1] is not None
        known = known and all(
            v is not None or not node.has_input(i + 1) for i, v in enumerate(vals)
        )
        out = _slice(ctx, node, *vals) if known else None
        if out is not None:
            return out
        ops = [ctx.input(node, 0)] + [ctx.input(node, i) for i in range(1, 5)]
        while ops[-1] is None:
            ops.pop()
        return ctx.emit("dyn_strided_slice", *ops)


# ---------------------------------------------------------------------------------------------
# Expand, Tile, Pad, CenterCropPad


@converter("Expand")
class Expand(OnnxOp):
    @classmethod
    def v8(cls, ctx, node):
        x, shape = ctx.input(node, 0), ctx.int_vector(node, 1)
        if shape is None:
            return ctx.emit("dyn_broadcast_to", x, _vector_operand(ctx, node, 1, "shape"))
        out = broadcast_shapes([ctx.type_of(node, 0).shape, shape], "broadcast_to")
        return ctx.emit("broadcast_to", x, shape=list(out))


@converter("Tile")
class Tile(OnnxOp):
    @classmethod
    def v6(cls, ctx, node):
        x, reps = ctx.input(node, 0), ctx.int_vector(node, 1)
        if reps is None:
            return ctx.emit("dyn_tile", x, _vector_operand(ctx, node, 1, "repeats"))
        return ctx.emit("tile", x, repeats=reps)


def _pad_value(ctx, node, value):
    """The constant-mode fill as a scalar operand of the input's dtype (None for 0)."""
    if value is None or value == 0:
        return None
    dtype = ctx.type_of(node, 0).dtype
    arr = np.array(value).astype(to_numpy(dtype))
    name = ctx.mod.unique_constant_name(f"{node.outputs[0]}_pad_value")
    return ctx.mod.add_constant(name, arr)


def _check_mode(node, mode: str) -> str:
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise node.error(f"unsupported pad mode {mode!r}; expected constant, reflect, edge or wrap")
    return mode


@converter("Pad")
class Pad(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        mode = _check_mode(node, node.attrs.get("mode", "constant"))
        pads = list(node.attrs.get("pads", node.attrs.get("paddings")))
        value = _pad_value(ctx, node, node.attrs.get("value")) if mode == "constant" else None
        return ctx.emit("pad", ctx.input(node, 0), value, pads=pads, mode=mode)

    @classmethod
    def v11(cls, ctx, node):
        mode = _check_mode(node, node.attrs.get("mode", "constant"))
        t = ctx.type_of(node, 0)
        pads = ctx.int_vector(node, 1)
        axes = ctx.int_vector(node, 3) if node.has_input(3) else list(range(t.ndim))
        value = ctx.input(node, 2) if mode == "constant" else None
        if pads is None or axes is None:
            ops = [ctx.input(node, 0), _vector_operand(ctx, node, 1, "pads"), value]
            if node.has_input(3):
                ops.append(_vector_operand(ctx, node, 3, "axes"))
            return ctx.emit("dyn_pad", *ops, mode=mode)
        if len(pads) != 2 * len(axes):
            raise node.error(f"{len(pads)} pads for {len(axes)} axes; expected {2 * len(axes)}")
        full: list[Dim] = [0] * (2 * t.ndim)
        for k, a in enumerate(axes):
            a = normalize_axis(a, t.ndim, "pad")
            full[a], full[t.ndim + a] = pads[k], pads[len(axes) + k]
        return ctx.emit("pad", ctx.input(node, 0), value, pads=full, mode=mode)


@converter("CenterCropPad")
class CenterCropPad(OnnxOp):
    @classmethod
    def v18(cls, ctx, node):
        t = ctx.type_of(node, 0)
        axes = [
            normalize_axis(a, t.ndim, "center_crop_pad")
            for a in node.attrs.get("axes", range(t.ndim))
        ]
        shape = ctx.int_vector(node, 1)
        if shape is None:
            return ctx.emit(
                "dyn_center_crop_pad",
                ctx.input(node, 0),
                _vector_operand(ctx, node, 1, "shape"),
                axes=axes,
            )
        return ctx.emit("center_crop_pad", ctx.input(node, 0), shape=shape, axes=axes)


# ---------------------------------------------------------------------------------------------
# generators: Constant, ConstantOfShape, Range, EyeLike, Shape, Size


@converter("Constant")
class Constant(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        a = node.attrs
        if "sparse_value" in a:
            raise node.error("sparse_value is unsupported; store the constant as a dense tensor")
        if "value_string" in a or "value_strings" in a:
            raise node.error("string constants are unsupported")
        if "value" in a:
            value = np.asarray(a["value"])
        elif "value_float" in a:
            value = np.array(a["value_float"], dtype=np.float32)
        elif "value_floats" in a:
            value = np.array(a["value_floats"], dtype=np.float32)
        elif "value_int" in a:
            value = np.array(a["value_int"], dtype=np.int64)
        elif "value_ints" in a:
            value = np.array(a["value_ints"], dtype=np.int64)
        else:
            raise node.error("no value attribute (value, value_float(s), value_int(s))")
        if value.dtype == object or value.dtype.kind in "SU":
            raise node.error("string constants are unsupported")
        from_numpy(value.dtype)  # rejects element types tcc cannot hold
        ctx.set_known(node.outputs[0], value)
        return None


@converter("ConstantOfShape")
class ConstantOfShape(OnnxOp):
    @classmethod
    def v9(cls, ctx, node):
        fill = node.attrs.get("value")
        fill = np.zeros(1, np.float32) if fill is None else np.asarray(fill)
        dtype, value = from_numpy(fill.dtype), fill.reshape(-1)[0].item()
        shape = ctx.int_vector(node, 0)
        if shape is None:
            return ctx.emit(
                "dyn_full", _vector_operand(ctx, node, 0, "shape"), value=value, dtype=dtype
            )
        return _fold_generator(ctx, node, "full", shape=shape, value=value, dtype=dtype)


@converter("Range")
class Range(OnnxOp):
    @classmethod
    def v11(cls, ctx, node):
        bounds = [ctx.scalar_value(node, i) for i in range(3)]
        dtype = ctx.type_of(node, 0).dtype
        symbolic = any(isinstance(b, PrimExpr) for b in bounds)
        if None in bounds or (symbolic and not isinstance(bounds[2], int)):
            return ctx.emit("dyn_arange", *(ctx.input(node, i) for i in range(3)))
        start, stop, step = bounds
        return _fold_generator(ctx, node, "arange", start=start, stop=stop, step=step, dtype=dtype)


@converter("EyeLike")
class EyeLike(OnnxOp):
    @classmethod
    def v9(cls, ctx, node):
        t = ctx.type_of(node, 0)
        if t.ndim != 2:
            raise node.error(f"input must be 2-D, got {t}")
        dt = node.attrs.get("dtype")
        dtype = t.dtype if dt is None else onnx_dtype(dt)
        rows, cols = t.shape
        return _fold_generator(
            ctx, node, "eye", rows=rows, cols=cols, k=node.attrs.get("k", 0), dtype=dtype
        )


@converter("Shape")
class Shape(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        dims = list(ctx.type_of(node, 0).shape)
        start, end = node.attrs.get("start", 0), node.attrs.get("end", len(dims))
        return ctx.emit("shape_to_tensor", dims=dims[slice(start, end)], dtype="int64")


@converter("Size")
class Size(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        dims = ctx.type_of(node, 0).shape
        return ctx.emit("shape_to_tensor", dims=[prod(dims)], scalar=True, dtype="int64")


# ---------------------------------------------------------------------------------------------
# Trilu, ReverseSequence, Compress


@converter("Trilu")
class Trilu(OnnxOp):
    @classmethod
    def v14(cls, ctx, node):
        upper = bool(node.attrs.get("upper", 1))
        return ctx.emit("trilu", ctx.input(node, 0), ctx.input(node, 1), upper=upper)


@converter("ReverseSequence")
class ReverseSequence(OnnxOp):
    @classmethod
    def v10(cls, ctx, node):
        a = node.attrs
        return ctx.emit(
            "reverse_sequence",
            ctx.input(node, 0),
            ctx.input(node, 1),
            batch_axis=a.get("batch_axis", 1),
            time_axis=a.get("time_axis", 0),
        )


@converter("Compress")
class Compress(OnnxOp):
    @classmethod
    def v9(cls, ctx, node):
        return ctx.emit(
            "compress", ctx.input(node, 0), ctx.input(node, 1), axis=node.attrs.get("axis")
        )
