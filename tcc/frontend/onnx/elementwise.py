"""Converters for elementwise ONNX ops: math, comparisons, logic, bit operations,
activations, casts, and the variadic Max/Min/Sum/Mean.

Most ONNX ops map onto one tcc op of tcc/ir/ops/elementwise.py and are registered from the
tables below. Before opset 7, binary arithmetic and comparisons did not broadcast
numpy-style: `broadcast=1` aligned B with A starting at dimension `axis`; that form is
rewritten here into numpy broadcasting.
"""

from __future__ import annotations

import numpy as np

from tcc.frontend.onnx import proto
from tcc.frontend.onnx.base import OnnxOp, converter, onnx_dtype
from tcc.ir.dtype import to_numpy
from tcc.ir.errors import FrontendError
from tcc.ir.expr import prove_equal


def _register(op_type: str, methods: dict) -> None:
    """Register converter class `op_type` with `methods` ({"v<N>": function})."""
    body = {name: classmethod(fn) for name, fn in methods.items()}
    converter(op_type)(type(op_type, (OnnxOp,), body))


def _constant(ctx, node, what: str, value: np.ndarray):
    """A module constant holding `value`, named after the node's first output."""
    name = ctx.mod.unique_constant_name(f"{node.outputs[0]}_{what}")
    return ctx.mod.add_constant(name, np.asarray(value, order="C"))


def _target_dtype(node, elem_type) -> str:
    """The tcc dtype an ONNX type attribute names (an enum value, or its name before opset 6)."""
    if isinstance(elem_type, str):
        try:
            elem_type = proto.TensorProto.DataType.Value(elem_type.upper())
        except ValueError:
            raise node.error(f"unknown element type {elem_type!r}") from None
    try:
        dtype = onnx_dtype(elem_type)
    except FrontendError as e:
        raise node.error(f"{e}; tcc has no such dtype") from None
    if dtype == "string":
        raise node.error("string conversions are not supported")
    return dtype


# ---------------------------------------------------------------------------------------------
# one-input ops


def _unary(op_type: str, tcc_op: str, since: int = 1, attrs: tuple[str, ...] = ()) -> None:
    """`op_type` maps onto `tcc_op`; the ONNX attributes `attrs` pass through by name (absent
    ones take the tcc op's defaults, which are ONNX's)."""

    def convert(cls, ctx, node):
        passed = {k: node.attrs[k] for k in attrs if k in node.attrs}
        return ctx.emit(tcc_op, ctx.input(node, 0), **passed)

    _register(op_type, {f"v{since}": convert})


_unary("Neg", "neg")
_unary("Abs", "abs")
_unary("Sign", "sign", 9)
_unary("Sqrt", "sqrt")
_unary("Reciprocal", "reciprocal")
_unary("Exp", "exp")
_unary("Log", "log")
_unary("Erf", "erf", 9)
_unary("Ceil", "ceil")
_unary("Floor", "floor")
_unary("Round", "round", 11)
_unary("Sin", "sin", 7)
_unary("Cos", "cos", 7)
_unary("Tan", "tan", 7)
_unary("Asin", "asin", 7)
_unary("Acos", "acos", 7)
_unary("Atan", "atan", 7)
_unary("Sinh", "sinh", 9)
_unary("Cosh", "cosh", 9)
_unary("Asinh", "asinh", 9)
_unary("Acosh", "acosh", 9)
_unary("Atanh", "atanh", 9)
_unary("Tanh", "tanh")
_unary("Sigmoid", "sigmoid")
_unary("Relu", "relu")
_unary("LeakyRelu", "leaky_relu", attrs=("alpha",))
_unary("Elu", "elu", attrs=("alpha",))
_unary("Selu", "selu", attrs=("alpha", "gamma"))
_unary("Celu", "celu", 12, attrs=("alpha",))
_unary("HardSigmoid", "hard_sigmoid", attrs=("alpha", "beta"))
_unary("HardSwish", "hard_swish", 14)
_unary("ThresholdedRelu", "thresholded_relu", 10, attrs=("alpha",))
_unary("Shrink", "shrink", 9, attrs=("lambd", "bias"))
_unary("Softplus", "softplus")
_unary("Softsign", "softsign")
_unary("Mish", "mish", 18)
_unary("Swish", "swish", 24, attrs=("alpha",))
_unary("IsNaN", "is_nan", 9)
_unary("Not", "logical_not")
_unary("BitwiseNot", "bitwise_not", 18)


@converter("Gelu")
class Gelu(OnnxOp):
    @classmethod
    def v20(cls, ctx, node):
        approximate = node.attrs.get("approximate", "none")
        if approximate not in ("none", "tanh"):
            raise node.error(f"approximate={approximate!r} is not supported; expected none or tanh")
        return ctx.emit("gelu", ctx.input(node, 0), approximate=approximate)


@converter("IsInf")
class IsInf(OnnxOp):
    @classmethod
    def v10(cls, ctx, node):
        return ctx.emit(
            "is_inf",
            ctx.input(node, 0),
            detect_positive=bool(node.attrs.get("detect_positive", 1)),
            detect_negative=bool(node.attrs.get("detect_negative", 1)),
        )


@converter("Identity")
class Identity(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        # The output is the input value itself: no copy, and a constant stays foldable.
        return ctx.input(node, 0)


# ---------------------------------------------------------------------------------------------
# two-input ops


def _legacy_operands(ctx, node):
    """A and B of an opset < 7 binary op, rewritten so numpy broadcasting means the same.

    `broadcast=1` with `axis` aligns B's first dimension with A's dimension `axis`; numpy
    aligns trailing dimensions, so B gets trailing unit dimensions. Only a B known at
    import time (the usual bias or scale) can be reshaped here.
    """
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    axis = node.attrs.get("axis")
    if not node.attrs.get("broadcast", 0) or axis is None:
        return a, b
    rank_a, rank_b = ctx.type_of(node, 0).ndim, ctx.type_of(node, 1).ndim
    axis = axis + rank_a if axis < 0 else axis
    trailing = rank_a - axis - rank_b
    if trailing == 0:
        return a, b
    value = ctx.const_value(node, 1)
    if trailing < 0 or value is None:
        raise node.error(
            f"broadcast=1 with axis={node.attrs['axis']} for a rank-{rank_b} B and a rank-"
            f"{rank_a} A is not supported; B must be known at import time and fit inside A"
        )
    return a, _constant(ctx, node, "b", value.reshape(value.shape + (1,) * trailing))


def _binary(op_type: str, tcc_op: str, since: int = 1, legacy_broadcast: bool = False) -> None:
    """`op_type` maps onto the broadcasting `tcc_op`; with `legacy_broadcast` the opset 1-6
    forms with `broadcast`/`axis` attributes are handled too."""

    def convert(cls, ctx, node):
        return ctx.emit(tcc_op, ctx.input(node, 0), ctx.input(node, 1))

    def convert_legacy(cls, ctx, node):
        return ctx.emit(tcc_op, *_legacy_operands(ctx, node))

    if legacy_broadcast:
        _register(op_type, {"v1": convert_legacy, "v7": convert})
    else:
        _register(op_type, {f"v{since}": convert})


_binary("Add", "add", legacy_broadcast=True)
_binary("Sub", "sub", legacy_broadcast=True)
_binary("Mul", "mul", legacy_broadcast=True)
_binary("Div", "div", legacy_broadcast=True)
_binary("Pow", "pow", legacy_broadcast=True)
_binary("And", "logical_and", legacy_broadcast=True)
_binary("Or", "logical_or", legacy_broadcast=True)
_binary("Xor", "logical_xor", legacy_broadcast=True)
_binary("Equal", "equal", legacy_broadcast=True)
_binary("Less", "less", legacy_broadcast=True)
_binary("Greater", "greater", legacy_broadcast=True)
_binary("LessOrEqual", "less_equal", 12)
_binary("GreaterOrEqual", "greater_equal", 12)
_binary("BitwiseAnd", "bitwise_and", 18)
_binary("BitwiseOr", "bitwise_or", 18)
_binary("BitwiseXor", "bitwise_xor", 18)
_binary("PRelu", "prelu")


@converter("Mod")
class Mod(OnnxOp):
    @classmethod
    def v10(cls, ctx, node):
        op = "trunc_mod" if node.attrs.get("fmod", 0) else "floor_mod"
        return ctx.emit(op, ctx.input(node, 0), ctx.input(node, 1))


@converter("BitShift")
class BitShift(OnnxOp):
    @classmethod
    def v11(cls, ctx, node):
        direction = node.attrs.get("direction", "")
        ops = {"LEFT": "left_shift", "RIGHT": "right_shift"}
        if direction not in ops:
            raise node.error(f"direction={direction!r} is not supported; expected LEFT or RIGHT")
        return ctx.emit(ops[direction], ctx.input(node, 0), ctx.input(node, 1))


@converter("Where")
class Where(OnnxOp):
    @classmethod
    def v9(cls, ctx, node):
        return ctx.emit("where", *(ctx.input(node, i) for i in range(3)))


@converter("SwiGLU")
class SwiGLU(OnnxOp):
    @classmethod
    def v28(cls, ctx, node):
        gate, value = ctx.type_of(node, 0), ctx.type_of(node, 1)
        if gate.ndim != value.ndim or not all(map(prove_equal, gate.shape, value.shape)):
            raise node.error(
                f"A {list(gate.shape)} and B {list(value.shape)} must have the same shape "
                "(SwiGLU does not broadcast)"
            )
        alpha = node.attrs.get("alpha", 1.0)
        swish = ctx.emit("swish", ctx.input(node, 0), alpha=alpha)
        return ctx.emit("mul", swish, ctx.input(node, 1))


# ---------------------------------------------------------------------------------------------
# variadic ops: chains of binary ops


def _fold(ctx, node, op: str):
    """Combine every input left to right with the broadcasting binary `op`."""
    values = [v for v in ctx.inputs(node) if v is not None]
    if not values:
        raise node.error("needs at least one input")
    out = values[0]
    for v in values[1:]:
        out = ctx.emit(op, out, v)
    return out


def _variadic(op_type: str, tcc_op: str) -> None:
    def convert(cls, ctx, node):
        return _fold(ctx, node, tcc_op)

    _register(op_type, {"v1": convert})


_variadic("Max", "maximum")
_variadic("Min", "minimum")
_variadic("Sum", "add")


@converter("Mean")
class Mean(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        total = _fold(ctx, node, "add")
        count = len([i for i in range(len(node.inputs)) if node.has_input(i)])
        if count == 1:
            return total
        dtype = to_numpy(ctx.type_of(node, 0).dtype)
        return ctx.emit("div", total, _constant(ctx, node, "count", np.array(count, dtype)))


# ---------------------------------------------------------------------------------------------
# Clip


@converter("Clip")
class Clip(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        """Bounds are float attributes; they become constants of the input's dtype."""
        dtype = to_numpy(ctx.type_of(node, 0).dtype)
        bounds = [
            None if k not in node.attrs else _constant(ctx, node, k, np.array(node.attrs[k], dtype))
            for k in ("min", "max")
        ]
        return ctx.emit("clip", ctx.input(node, 0), *bounds)

    @classmethod
    def v11(cls, ctx, node):
        return ctx.emit("clip", ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2))


# ---------------------------------------------------------------------------------------------
# casts


def _cast(ctx, node, dtype: str):
    """`saturate` (opset 19) and `round_mode` (opset 24) only matter for float8 targets;
    absent, they take ONNX's defaults, which are the cast op's."""
    rounding = {"round_mode": node.attrs["round_mode"]} if "round_mode" in node.attrs else {}
    saturate = bool(node.attrs.get("saturate", 1))
    return ctx.emit("cast", ctx.input(node, 0), dtype=dtype, saturate=saturate, **rounding)


@converter("Cast")
class Cast(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        if "to" not in node.attrs:
            raise node.error("attribute 'to' is required")
        return _cast(ctx, node, _target_dtype(node, node.attrs["to"]))


@converter("CastLike")
class CastLike(OnnxOp):
    @classmethod
    def v15(cls, ctx, node):
        dtype = ctx.type_of(node, 1).dtype
        if dtype == "string" or ctx.type_of(node, 0).dtype == "string":
            raise node.error("string conversions are not supported")
        return _cast(ctx, node, dtype)


@converter("BitCast")
class BitCast(OnnxOp):
    @classmethod
    def v26(cls, ctx, node):
        if "to" not in node.attrs:
            raise node.error("attribute 'to' is required")
        return ctx.emit("bitcast", ctx.input(node, 0), dtype=_target_dtype(node, node.attrs["to"]))


# ---------------------------------------------------------------------------------------------
# Dropout (inference only)


def _mask(ctx, node, x, dtype: str):
    """The all-kept mask of inference mode, or None when the node does not ask for it."""
    if len(node.outputs) < 2 or not node.outputs[1]:
        return None
    one = True if dtype == "bool" else 1
    return ctx.emit("full_like", x, value=one, dtype=dtype)


@converter("Dropout")
class Dropout(OnnxOp):
    @classmethod
    def v1(cls, ctx, node):
        """Before opset 10 the mask has the data's dtype."""
        x = ctx.input(node, 0)
        return [x, _mask(ctx, node, x, ctx.type_of(node, 0).dtype)]

    @classmethod
    def v10(cls, ctx, node):
        x = ctx.input(node, 0)
        return [x, _mask(ctx, node, x, "bool")]

    @classmethod
    def v12(cls, ctx, node):
        """`training_mode` is an input: it must be absent or known to be false (or the ratio
        known to be 0), since tcc does not generate random masks."""
        training = ctx.const_value(node, 2)
        ratio = ctx.const_value(node, 1)
        if node.has_input(2) and (training is None or bool(training)):
            if ratio is None or float(ratio) != 0.0:
                state = "a run-time input" if training is None else "true"
                raise node.error(
                    f"training_mode is {state}; only inference is supported (random dropout "
                    "is not). Export the model in inference mode or remove the input"
                )
        x = ctx.input(node, 0)
        return [x, _mask(ctx, node, x, "bool")]
