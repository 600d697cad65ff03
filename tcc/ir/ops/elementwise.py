"""Elementwise and broadcasting ops: math, comparisons, logic, bit operations,
activations, prelu, clip, where.

Every op here maps each output element to the elements at the same (broadcast) position of
its operands, so lowering needs one scalar expression per op and fusion may merge any of
them. Binary ops broadcast numpy-style and require operands of one dtype; the exceptions
(`pow`'s exponent, `where`'s condition) say so in their records.

The numpy references evaluate float16 math in float32 and round the result back, as
onnxruntime does, so the interpreter agrees with it to float16 precision.
"""

from __future__ import annotations

import math

import numpy as np

from tcc.ir.dtype import FLOAT_DTYPES, INT_DTYPES
from tcc.ir.errors import ShapeError
from tcc.ir.expr import prove_equal
from tcc.ir.graph import TensorType
from tcc.ir.ops.registry import OpDef, Pattern, broadcast_shapes, register, same_dtype, tensor

# Operand dtype classes an op accepts (None: any dtype).
FLOAT = FLOAT_DTYPES
INT = INT_DTYPES
SIGNED = frozenset({"int8", "int16", "int32", "int64"}) | FLOAT_DTYPES
NUMERIC = FLOAT_DTYPES | INT_DTYPES
BOOL = frozenset({"bool"})
INT_OR_BOOL = INT_DTYPES | BOOL


def _check_dtype(t: TensorType, accepts: frozenset | None, op: str, what: str = "input") -> None:
    if accepts is not None and t.dtype not in accepts:
        expected = ", ".join(sorted(accepts))
        raise ShapeError(f"op {op}: {what} has dtype {t.dtype}, expected one of {expected}")


def _unary_infer(name, accepts, out_dtype):
    def infer(args, attrs):
        x = tensor(args[0], name)
        _check_dtype(x, accepts, name)
        return TensorType(x.shape, out_dtype or x.dtype)

    return infer


def _binary_infer(name, accepts, out_dtype):
    def infer(args, attrs):
        a, b = tensor(args[0], name), tensor(args[1], name)
        dtype = same_dtype([a, b], name)
        _check_dtype(a, accepts, name)
        return TensorType(broadcast_shapes([a.shape, b.shape], name), out_dtype or dtype)

    return infer


def _in_float32(fn):
    """Wrap a numpy reference so float16 is computed in float32 and every result is returned
    in the input's dtype (numpy promotes some mixed scalar expressions to float64)."""

    def ref(x, **attrs):
        wide = x.astype(np.float32) if x.dtype == np.float16 else x
        return np.asarray(fn(wide, **attrs)).astype(x.dtype, copy=False)

    return ref


def unary(
    name: str,
    fn,
    attrs=None,
    accepts: frozenset | None = NUMERIC,
    out_dtype: str | None = None,
    doc: str = "",
) -> OpDef:
    """Register a one-input op that keeps the shape (and the dtype unless `out_dtype`).

    `fn` computes in the input dtype; ops with a fixed output dtype (predicates) return it.
    """
    ref = fn if out_dtype else _in_float32(fn)
    infer = _unary_infer(name, accepts, out_dtype)
    return register(OpDef(name, infer, ref, attrs or {}, Pattern.ELEMWISE, (1, 1), doc=doc))


def binary(
    name: str,
    fn,
    accepts: frozenset | None = NUMERIC,
    out_dtype: str | None = None,
    doc: str = "",
) -> OpDef:
    """Register a two-input numpy-broadcasting op on operands of one dtype."""
    infer = _binary_infer(name, accepts, out_dtype)
    return register(OpDef(name, infer, fn, {}, Pattern.BROADCAST, (2, 2), doc=doc))


# ---------------------------------------------------------------------------------------------
# numpy references that need more than one ufunc


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid(x):
    # exp of a non-positive argument never overflows.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x):
    return np.logaddexp(np.zeros((), x.dtype), x)


def _gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _trunc_div(a, b):
    """Integer division rounding toward zero (C semantics), in integer arithmetic."""
    if a.dtype.kind == "f":
        return np.divide(a, b)
    q = np.floor_divide(a, b)
    inexact = (np.remainder(a, b) != 0) & ((a < 0) ^ (b < 0))
    return (q + inexact).astype(q.dtype, copy=False)


def _pow(base, exponent):
    """`base ** exponent` in the base dtype; integer bases with negative integer exponents go
    through float64 (numpy refuses them), matching C's pow followed by a conversion."""
    if base.dtype.kind in "iu" and exponent.dtype.kind in "iu" and np.any(exponent < 0):
        return np.power(base.astype(np.float64), exponent).astype(base.dtype)
    if base.dtype == np.float16:
        return np.power(base.astype(np.float32), exponent).astype(np.float16)
    return np.asarray(np.power(base, exponent)).astype(base.dtype, copy=False)


def _shift(left: bool):
    """Shift by an amount per element; amounts outside [0, bits) leave only the sign fill
    (-1 for a right shift of a negative value, else 0), as ONNX BitShift-28 defines."""

    def ref(x, amount):
        x, amount = np.broadcast_arrays(x, amount)
        bits = x.dtype.itemsize * 8
        valid = (amount >= 0) & (amount < bits)
        safe = np.where(valid, amount, 0).astype(x.dtype)
        if left:
            unsigned = np.dtype(f"u{x.dtype.itemsize}")
            shifted = np.left_shift(x.view(unsigned), safe.view(unsigned)).view(x.dtype)
            return np.where(valid, shifted, np.zeros((), x.dtype))
        fill = np.where(x < 0, x.dtype.type(-1), x.dtype.type(0)) if x.dtype.kind == "i" else 0
        return np.where(valid, np.right_shift(x, safe), fill).astype(x.dtype)

    return ref


# ---------------------------------------------------------------------------------------------
# unary math

unary("neg", np.negative, accepts=SIGNED)
unary("abs", np.abs)
unary("sign", np.sign)
unary("sqrt", np.sqrt, accepts=FLOAT)
unary("reciprocal", np.reciprocal, accepts=FLOAT)
unary("exp", np.exp, accepts=FLOAT)
unary("log", np.log, accepts=FLOAT)
unary("erf", _erf, accepts=FLOAT)
unary("ceil", np.ceil, accepts=FLOAT)
unary("floor", np.floor, accepts=FLOAT)
unary("round", np.round, accepts=FLOAT, doc="Round to nearest, halves to even.")
unary("sin", np.sin, accepts=FLOAT)
unary("cos", np.cos, accepts=FLOAT)
unary("tan", np.tan, accepts=FLOAT)
unary("asin", np.arcsin, accepts=FLOAT)
unary("acos", np.arccos, accepts=FLOAT)
unary("atan", np.arctan, accepts=FLOAT)
unary("sinh", np.sinh, accepts=FLOAT)
unary("cosh", np.cosh, accepts=FLOAT)
unary("asinh", np.arcsinh, accepts=FLOAT)
unary("acosh", np.arccosh, accepts=FLOAT)
unary("atanh", np.arctanh, accepts=FLOAT)
unary("tanh", np.tanh, accepts=FLOAT)

# activations
unary("sigmoid", _sigmoid, accepts=FLOAT)
unary("relu", lambda x: np.maximum(x, np.zeros((), x.dtype)), accepts=SIGNED)
unary("leaky_relu", lambda x, alpha: np.where(x < 0, alpha * x, x), {"alpha": 0.01}, FLOAT)
unary("elu", lambda x, alpha: np.where(x < 0, alpha * np.expm1(x), x), {"alpha": 1.0}, FLOAT)
unary(
    "selu",
    lambda x, alpha, gamma: gamma * np.where(x <= 0, alpha * np.expm1(x), x),
    {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
    FLOAT,
)
unary(
    "celu",
    lambda x, alpha: np.maximum(0, x) + np.minimum(0, alpha * np.expm1(x / alpha)),
    {"alpha": 1.0},
    FLOAT,
)
unary(
    "hard_sigmoid",
    lambda x, alpha, beta: np.clip(alpha * x + beta, 0, 1),
    {"alpha": 0.2, "beta": 0.5},
    FLOAT,
)
unary("hard_swish", lambda x: x * np.clip(x / 6 + 0.5, 0, 1), accepts=FLOAT)
unary(
    "thresholded_relu",
    lambda x, alpha: np.where(x > alpha, x, 0),
    {"alpha": 1.0},
    FLOAT,
)
unary(
    "shrink",
    lambda x, lambd, bias: np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)),
    {"lambd": 0.5, "bias": 0.0},
    doc="Soft (bias > 0) or hard (bias = 0) shrinkage of values outside [-lambd, lambd].",
)
unary("softplus", _softplus, accepts=FLOAT)
unary("softsign", lambda x: x / (1 + np.abs(x)), accepts=FLOAT)
unary("mish", lambda x: x * np.tanh(_softplus(x)), accepts=FLOAT)
unary("swish", lambda x, alpha: x * _sigmoid(alpha * x), {"alpha": 1.0}, FLOAT)
unary(
    "gelu",
    _gelu,
    {"approximate": "none"},
    FLOAT,
    doc="x * Phi(x); approximate='tanh' uses the tanh formula instead of erf.",
)

# predicates and bitwise/logical negation
unary("is_nan", np.isnan, accepts=FLOAT, out_dtype="bool")
unary(
    "is_inf",
    lambda x, detect_positive, detect_negative: (
        (np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative))
    ),
    {"detect_positive": True, "detect_negative": True},
    FLOAT,
    out_dtype="bool",
)
unary("logical_not", np.logical_not, accepts=BOOL)
unary("bitwise_not", np.invert, accepts=INT)


# ---------------------------------------------------------------------------------------------
# binary arithmetic, comparisons, logic, bits

binary("add", np.add)
binary("sub", np.subtract)
binary("mul", np.multiply)
binary("div", _trunc_div, doc="True division for floats; integers round toward zero.")
binary("floor_mod", np.mod, doc="Remainder with the sign of the divisor (Python %).")
binary("trunc_mod", np.fmod, doc="Remainder with the sign of the dividend (C fmod).")
binary("maximum", np.maximum)
binary("minimum", np.minimum)

binary("equal", np.equal, accepts=None, out_dtype="bool")
binary("less", np.less, out_dtype="bool")
binary("less_equal", np.less_equal, out_dtype="bool")
binary("greater", np.greater, out_dtype="bool")
binary("greater_equal", np.greater_equal, out_dtype="bool")

binary("logical_and", np.logical_and, accepts=BOOL)
binary("logical_or", np.logical_or, accepts=BOOL)
binary("logical_xor", np.logical_xor, accepts=BOOL)
binary("bitwise_and", np.bitwise_and, accepts=INT_OR_BOOL)
binary("bitwise_or", np.bitwise_or, accepts=INT_OR_BOOL)
binary("bitwise_xor", np.bitwise_xor, accepts=INT_OR_BOOL)
binary("left_shift", _shift(left=True), accepts=INT, doc="Shift left; bits past the top drop.")
binary("right_shift", _shift(left=False), accepts=INT, doc="Arithmetic for signed types.")


def _pow_infer(args, attrs):
    base, exponent = tensor(args[0], "pow"), tensor(args[1], "pow", "exponent")
    _check_dtype(base, NUMERIC, "pow")
    _check_dtype(exponent, NUMERIC, "pow", "exponent")
    return TensorType(broadcast_shapes([base.shape, exponent.shape], "pow"), base.dtype)


register(
    OpDef(
        "pow",
        _pow_infer,
        _pow,
        pattern=Pattern.BROADCAST,
        num_args=(2, 2),
        doc="base ** exponent; the exponent may have another numeric dtype, the result has "
        "the base's.",
    )
)


# ---------------------------------------------------------------------------------------------
# ops with operands broadcast into the first operand's shape


def _into_shape(x: TensorType, other: TensorType, op: str, what: str) -> None:
    """Check that `other` broadcasts into `x`'s shape without growing it (ONNX calls this
    unidirectional broadcasting)."""
    try:
        shape = broadcast_shapes([x.shape, other.shape], op)
        fits = other.ndim <= x.ndim and all(map(prove_equal, shape, x.shape))
    except ShapeError:
        fits = False
    if not fits:
        raise ShapeError(
            f"op {op}: {what} of shape {list(other.shape)} does not broadcast to the input "
            f"shape {list(x.shape)}"
        )


def _prelu_infer(args, attrs):
    x, slope = tensor(args[0], "prelu"), tensor(args[1], "prelu", "slope")
    same_dtype([x, slope], "prelu")
    _check_dtype(x, SIGNED, "prelu")
    _into_shape(x, slope, "prelu", "slope")
    return x


register(
    OpDef(
        "prelu",
        _prelu_infer,
        lambda x, slope: np.where(x < 0, x * slope, x).astype(x.dtype, copy=False),
        pattern=Pattern.BROADCAST,
        num_args=(2, 2),
        doc="x where x >= 0, else slope * x; slope broadcasts into x's shape.",
    )
)


def _clip_infer(args, attrs):
    x = tensor(args[0], "clip")
    _check_dtype(x, NUMERIC, "clip")
    for bound, what in zip(args[1:], ("min", "max")):
        if bound is not None:
            b = tensor(bound, "clip", what)
            same_dtype([x, b], "clip")
            _into_shape(x, b, "clip", what)
    return x


def _clip(x, lo=None, hi=None):
    # max(lo) then min(hi): when lo > hi every value becomes hi, as ONNX specifies.
    out = x if lo is None else np.maximum(x, lo)
    return np.asarray(out if hi is None else np.minimum(out, hi)).astype(x.dtype, copy=False)


register(
    OpDef(
        "clip",
        _clip_infer,
        _clip,
        pattern=Pattern.BROADCAST,
        num_args=(1, 3),
        doc="min(max(x, lo), hi); the bounds are optional operands (None when absent) that "
        "broadcast into x's shape.",
    )
)


def _where_infer(args, attrs):
    cond, a, b = (tensor(t, "where", w) for t, w in zip(args, ("condition", "x", "y")))
    _check_dtype(cond, BOOL, "where", "condition")
    dtype = same_dtype([a, b], "where")
    return TensorType(broadcast_shapes([cond.shape, a.shape, b.shape], "where"), dtype)


register(
    OpDef(
        "where",
        _where_infer,
        lambda cond, a, b: np.where(cond, a, b),
        pattern=Pattern.BROADCAST,
        num_args=(3, 3),
        doc="x where condition, else y; all three broadcast.",
    )
)


# ---------------------------------------------------------------------------------------------
# groups that passes test membership of

UNARY_MATH = frozenset({
    "neg", "abs", "sign", "sqrt", "reciprocal", "exp", "log", "erf", "ceil", "floor", "round",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "tanh",
})  # fmt: skip
ACTIVATIONS = frozenset({
    "sigmoid", "relu", "leaky_relu", "elu", "selu", "celu", "hard_sigmoid", "hard_swish",
    "thresholded_relu", "shrink", "softplus", "softsign", "mish", "swish", "gelu", "prelu",
})  # fmt: skip
ARITHMETIC = frozenset({
    "add", "sub", "mul", "div", "floor_mod", "trunc_mod", "pow", "maximum", "minimum",
})  # fmt: skip
COMPARISONS = frozenset({"equal", "less", "less_equal", "greater", "greater_equal"})
LOGICAL = frozenset({"logical_and", "logical_or", "logical_xor", "logical_not"})
BITWISE = frozenset({
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "left_shift", "right_shift",
})  # fmt: skip
PREDICATES = frozenset({"is_nan", "is_inf"})
# Binary ops whose operands may be swapped.
COMMUTATIVE = frozenset({
    "add", "mul", "maximum", "minimum", "equal", "logical_and", "logical_or", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor",
})  # fmt: skip
