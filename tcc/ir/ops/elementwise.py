"""Elementwise and broadcasting ops: math, comparisons, logic, bit operations,
activations, prelu, clip, where.

Every op here maps each output element to the elements at the same (broadcast) position of
its operands, so lowering needs one scalar expression per op and fusion may merge any of
them. Binary ops broadcast numpy-style and require operands of one dtype; the exceptions
(`pow`'s exponent, `where`'s condition) say so in their records.

The numpy references evaluate float16 math in float32 and round the result back, as
onnxruntime does, so the interpreter agrees with it to float16 precision.

Loop programs (`compute`): one te stage per op, its body the op's scalar formula on the
broadcast operands. They cover bool, the integer types and float16/32/64; other dtypes
(bfloat16, the low-precision storage types, strings) raise NoLoopProgram. float16 math that
the reference widens is widened the same way (cast to float32, compute, cast back).
Integer bitwise ops and shifts are built from floor division and products, since the loop
IR has no bit operators; integer `pow` is computed in float64, exact while the result
stays below 2**53 (larger powers wrap in the reference, not here).
"""

from __future__ import annotations

import math

import numpy as np

from tcc.ir import te
from tcc.ir.dtype import FLOAT_DTYPES, INT_DTYPES, bit_width
from tcc.ir.errors import NoLoopProgram, ShapeError
from tcc.ir.expr import PrimExpr, prove_equal
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
    scalar=None,
) -> OpDef:
    """Register a one-input op that keeps the shape (and the dtype unless `out_dtype`).

    `fn` computes in the input dtype; ops with a fixed output dtype (predicates) return it.
    `scalar(x, **attrs)` is the loop program's formula for one element (float16 widened to
    float32 around it, as `fn` is, unless the op has a fixed output dtype).
    """
    ref = fn if out_dtype else _in_float32(fn)
    infer = _unary_infer(name, accepts, out_dtype)
    compute = None if scalar is None else _te_unary(name, scalar, wide=not out_dtype)
    return register(
        OpDef(name, infer, ref, attrs or {}, Pattern.ELEMWISE, (1, 1), compute, doc=doc)
    )


def binary(
    name: str,
    fn,
    accepts: frozenset | None = NUMERIC,
    out_dtype: str | None = None,
    doc: str = "",
    scalar=None,
) -> OpDef:
    """Register a two-input numpy-broadcasting op on operands of one dtype; `scalar(a, b)` is
    its loop program's formula for one element, in the operands' dtype."""
    infer = _binary_infer(name, accepts, out_dtype)
    compute = None if scalar is None else _te_map(name, scalar)
    return register(OpDef(name, infer, fn, {}, Pattern.BROADCAST, (2, 2), compute, doc=doc))


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
# loop programs: te helpers and the scalar formulas that need more than one expression

# The dtypes code generation computes on; the others only move through the runtime.
LOOP_DTYPES = INT | BOOL | frozenset({"float16", "float32", "float64"})


def _loopable(op: str, *dtypes: str) -> None:
    for d in dtypes:
        if d not in LOOP_DTYPES:
            raise NoLoopProgram(f"op {op}: dtype {d} has no loop program")


def _broadcast_load(t: te.Tensor, out_shape, idx) -> PrimExpr:
    """`t` read at output index `idx` under numpy broadcasting (shapes aligned right)."""
    lead = len(out_shape) - t.ndim
    at = []
    for d, o, i in zip(t.shape, out_shape[lead:], idx[lead:]):
        if isinstance(d, int) and d == 1:
            at.append(0)
        elif prove_equal(d, o):
            at.append(i)
        else:  # a symbolic dim that is either the output's or 1 when the program runs
            at.append(te.minimum(i, d - 1))
    return t[tuple(at)]


def _te_map(op: str, scalar, shape=None):
    """A compute that applies `scalar` to its (broadcast) operands element by element;
    absent operands (None) reach `scalar` as None."""

    def compute(*tensors, **attrs):
        present = [t for t in tensors if t is not None]
        _loopable(op, *(t.dtype for t in present))
        out_shape = shape(*tensors) if shape else broadcast_shapes([t.shape for t in present], op)

        def body(*idx):
            loads = [None if t is None else _broadcast_load(t, out_shape, idx) for t in tensors]
            return scalar(*loads, **attrs)

        return te.compute(out_shape, body, op)

    return compute


def _te_unary(op: str, scalar, wide: bool):
    def widened(x, **attrs):
        if wide and x.dtype == "float16":
            return te.cast(scalar(te.cast(x, "float32"), **attrs), "float16")
        return scalar(x, **attrs)

    return _te_map(op, widened)


def _k(like, value):
    """A constant of `like`'s dtype."""
    return te.const(value, like.dtype)


def _select(cond, a, b):
    return te.if_then_else(cond, a, b)


def _clamp01(v):
    # maximum then minimum, as np.clip: NaN stays NaN
    return te.minimum(te.maximum(v, _k(v, 0)), _k(v, 1))


def _sign(x):
    one, zero = _k(x, 1), _k(x, 0)
    if x.dtype.startswith("uint"):
        return _select(x > 0, one, zero)
    # floats: x + 0 turns -0.0 into 0.0 and keeps NaN, as numpy's sign does
    rest = x + zero if x.dtype in FLOAT else zero
    return _select(x > 0, one, _select(x < 0, _k(x, -1), rest))


def sigmoid_te(x):
    """The sigmoid of a te expression, as the sigmoid op computes it."""
    e = te.exp(-te.abs(x))  # as the reference: exp of a non-positive value never overflows
    one = _k(x, 1)
    return _select(x >= 0, one / (one + e), e / (one + e))


def _softplus_te(x):
    # numpy's logaddexp(0, x), branch for branch
    return _select(x < 0, te.log1p(te.exp(x)), x + te.log1p(te.exp(-x)))


def _gelu_te(x, approximate):
    half, one = _k(x, 0.5), _k(x, 1)
    if approximate == "tanh":
        inner = _k(x, math.sqrt(2 / math.pi)) * (x + _k(x, 0.044715) * (x * x * x))
        return half * x * (one + te.tanh(inner))
    return half * x * (one + te.erf(x / _k(x, math.sqrt(2))))


def _shrink_te(x, lambd, bias):
    if x.dtype in FLOAT:
        below, above, v = x < _k(x, -lambd), x > _k(x, lambd), x
    else:
        # integers compare with the bounds in float64 (exact below 2**53) and meet a float
        # bias in float64 too, as numpy promotes them, then truncate back
        xf = te.cast(x, "float64")
        below, above = xf < _k(xf, -lambd), xf > _k(xf, lambd)
        v = xf if isinstance(bias, float) else x
    out = _select(below, v + _k(v, bias), _select(above, v - _k(v, bias), _k(v, 0)))
    return te.cast(out, x.dtype)


def _is_inf_te(x, detect_positive, detect_negative):
    inf = te.isinf(x)
    if detect_positive and detect_negative:
        return inf
    if detect_positive:
        return te.logical_and(inf, x > 0)
    if detect_negative:
        return te.logical_and(inf, x < 0)
    return te.const(False, "bool")


def _bitwise_not_te(x):
    if x.dtype.startswith("uint"):
        return te.max_value(x.dtype) - x
    return _k(x, -1) - x  # two's complement: ~x == -1 - x


def _safe_divisor(b):
    """`b`, with 0 replaced by 1 so no division traps; callers select the result for 0."""
    return _select(te.equal(b, _k(b, 0)), _k(b, 1), b)


def _div_te(a, b):
    if a.dtype in FLOAT:
        return a / b
    d = _safe_divisor(b)
    q = a // d
    if not a.dtype.startswith("uint"):
        # round toward zero: a floored negative quotient with a remainder is one too low
        inexact = te.logical_and(te.not_equal(a % d, _k(a, 0)), q < 0)
        q = q + _select(inexact, _k(a, 1), _k(a, 0))
    return _select(te.equal(b, _k(b, 0)), _k(a, 0), q)  # numpy: x // 0 == 0


def _floor_mod_te(a, b):
    if a.dtype in FLOAT:
        # numpy's remainder: fmod moved to the divisor's side; an exact zero takes its sign
        r = te.fmod(a, b)
        moved = te.logical_and(te.not_equal(r, _k(r, 0)), te.not_equal(r < 0, b < 0))
        return _select(moved, r + b, _select(te.equal(r, _k(r, 0)), te.copysign(_k(r, 0), b), r))
    d = _safe_divisor(b)
    return _select(te.equal(b, _k(b, 0)), _k(a, 0), a % d)


def _trunc_mod_te(a, b):
    if a.dtype in FLOAT:
        return te.fmod(a, b)
    d = _safe_divisor(b)
    r = a % d
    if not a.dtype.startswith("uint"):
        # the floored remainder has the divisor's sign, C's has the dividend's
        moved = te.logical_and(te.not_equal(r, _k(r, 0)), te.not_equal(a < 0, d < 0))
        r = r - _select(moved, d, _k(d, 0))
    return _select(te.equal(b, _k(b, 0)), _k(a, 0), r)


def _unsigned(dtype: str) -> str:
    return dtype if dtype.startswith("uint") else f"u{dtype}"


def _bitwise(combine_bits, combine_bools):
    """A bitwise op: bools combine logically; integers bit by bit in their unsigned type
    (bit k of v is (v // 2**k) % 2), as the loop IR has no bit operators."""

    def scalar(a, b):
        if a.dtype == "bool":
            return combine_bools(a, b)
        ut = _unsigned(a.dtype)
        ua, ub = te.cast(a, ut), te.cast(b, ut)
        total = te.const(0, ut)
        for k in range(bit_width(a.dtype)):
            p = te.const(1 << k, ut)
            total = total + combine_bits((ua // p) % 2, (ub // p) % 2) * p
        return te.cast(total, a.dtype)

    return scalar


def _power_of_two(amount, bits: int, dtype: str):
    """2**amount in `dtype` for 0 <= amount < bits, a product over the binary digits of amount."""
    out = te.const(1, dtype)
    for k in range(bits.bit_length() - 1):
        digit = te.equal((amount // (1 << k)) % 2, _k(amount, 1))
        out = out * _select(digit, te.const(1 << (1 << k), dtype), te.const(1, dtype))
    return out


def _shift_te(left: bool):
    def scalar(x, amount):
        dt, bits = x.dtype, bit_width(x.dtype)
        valid = te.logical_and(amount >= 0, amount < bits)
        zero = _k(x, 0)
        if left:  # in the unsigned type, so bits shifted past the top wrap away
            ut = _unsigned(dt)
            p = _power_of_two(_select(valid, amount, _k(amount, 0)), bits, ut)
            return _select(valid, te.cast(te.cast(x, ut) * p, dt), zero)
        if dt.startswith("uint"):
            p = _power_of_two(_select(valid, amount, _k(amount, 0)), bits, dt)
            return _select(valid, x // p, zero)
        # signed: floor division by 2**amount; amounts from bits - 1 on leave the sign fill
        # (2**(bits - 1) does not fit the type)
        fill = _select(x < 0, _k(x, -1), zero)
        short = te.logical_and(valid, amount < bits - 1)
        p = _power_of_two(_select(short, amount, _k(amount, 0)), bits, dt)
        return _select(short, x // p, fill)

    return scalar


# ---------------------------------------------------------------------------------------------
# unary math

unary("neg", np.negative, accepts=SIGNED, scalar=lambda x: x * _k(x, -1))
unary("abs", np.abs, scalar=te.abs)
unary("sign", np.sign, scalar=_sign)
unary("sqrt", np.sqrt, accepts=FLOAT, scalar=te.sqrt)
unary("reciprocal", np.reciprocal, accepts=FLOAT, scalar=lambda x: _k(x, 1) / x)
unary("exp", np.exp, accepts=FLOAT, scalar=te.exp)
unary("log", np.log, accepts=FLOAT, scalar=te.log)
unary("erf", _erf, accepts=FLOAT, scalar=te.erf)
unary("ceil", np.ceil, accepts=FLOAT, scalar=te.ceil)
unary("floor", np.floor, accepts=FLOAT, scalar=te.floor)
unary("round", np.round, accepts=FLOAT, doc="Round to nearest, halves to even.", scalar=te.round)
unary("sin", np.sin, accepts=FLOAT, scalar=te.sin)
unary("cos", np.cos, accepts=FLOAT, scalar=te.cos)
unary("tan", np.tan, accepts=FLOAT, scalar=te.tan)
unary("asin", np.arcsin, accepts=FLOAT, scalar=te.asin)
unary("acos", np.arccos, accepts=FLOAT, scalar=te.acos)
unary("atan", np.arctan, accepts=FLOAT, scalar=te.atan)
unary("sinh", np.sinh, accepts=FLOAT, scalar=te.sinh)
unary("cosh", np.cosh, accepts=FLOAT, scalar=te.cosh)
unary("asinh", np.arcsinh, accepts=FLOAT, scalar=te.asinh)
unary("acosh", np.arccosh, accepts=FLOAT, scalar=te.acosh)
unary("atanh", np.arctanh, accepts=FLOAT, scalar=te.atanh)
unary("tanh", np.tanh, accepts=FLOAT, scalar=te.tanh)

# activations
unary("sigmoid", _sigmoid, accepts=FLOAT, scalar=sigmoid_te)
unary(
    "relu",
    lambda x: np.maximum(x, np.zeros((), x.dtype)),
    accepts=SIGNED,
    scalar=lambda x: te.maximum(x, _k(x, 0)),
)
unary(
    "leaky_relu",
    lambda x, alpha: np.where(x < 0, alpha * x, x),
    {"alpha": 0.01},
    FLOAT,
    # a factor rather than a choice of values keeps loads out of the select (NaN stays NaN)
    scalar=lambda x, alpha: x * _select(x < 0, _k(x, alpha), _k(x, 1)),
)
unary(
    "elu",
    lambda x, alpha: np.where(x < 0, alpha * np.expm1(x), x),
    {"alpha": 1.0},
    FLOAT,
    scalar=lambda x, alpha: _select(x < 0, _k(x, alpha) * te.expm1(x), x),
)
unary(
    "selu",
    lambda x, alpha, gamma: gamma * np.where(x <= 0, alpha * np.expm1(x), x),
    {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
    FLOAT,
    scalar=lambda x, alpha, gamma: _k(x, gamma) * _select(x <= 0, _k(x, alpha) * te.expm1(x), x),
)
unary(
    "celu",
    lambda x, alpha: np.maximum(0, x) + np.minimum(0, alpha * np.expm1(x / alpha)),
    {"alpha": 1.0},
    FLOAT,
    scalar=lambda x, alpha: (
        te.maximum(_k(x, 0), x) + te.minimum(_k(x, 0), _k(x, alpha) * te.expm1(x / _k(x, alpha)))
    ),
)
unary(
    "hard_sigmoid",
    lambda x, alpha, beta: np.clip(alpha * x + beta, 0, 1),
    {"alpha": 0.2, "beta": 0.5},
    FLOAT,
    scalar=lambda x, alpha, beta: _clamp01(_k(x, alpha) * x + _k(x, beta)),
)
unary(
    "hard_swish",
    lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
    accepts=FLOAT,
    scalar=lambda x: x * _clamp01(x / _k(x, 6) + _k(x, 0.5)),
)
unary(
    "thresholded_relu",
    lambda x, alpha: np.where(x > alpha, x, 0),
    {"alpha": 1.0},
    FLOAT,
    scalar=lambda x, alpha: _select(x > _k(x, alpha), x, _k(x, 0)),
)
unary(
    "shrink",
    lambda x, lambd, bias: np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0)),
    {"lambd": 0.5, "bias": 0.0},
    doc="Soft (bias > 0) or hard (bias = 0) shrinkage of values outside [-lambd, lambd].",
    scalar=_shrink_te,
)
unary("softplus", _softplus, accepts=FLOAT, scalar=_softplus_te)
unary(
    "softsign",
    lambda x: x / (1 + np.abs(x)),
    accepts=FLOAT,
    scalar=lambda x: x / (_k(x, 1) + te.abs(x)),
)
unary(
    "mish",
    lambda x: x * np.tanh(_softplus(x)),
    accepts=FLOAT,
    scalar=lambda x: x * te.tanh(_softplus_te(x)),
)
unary(
    "swish",
    lambda x, alpha: x * _sigmoid(alpha * x),
    {"alpha": 1.0},
    FLOAT,
    scalar=lambda x, alpha: x * sigmoid_te(_k(x, alpha) * x),
)
unary(
    "gelu",
    _gelu,
    {"approximate": "none"},
    FLOAT,
    doc="x * Phi(x); approximate='tanh' uses the tanh formula instead of erf.",
    scalar=_gelu_te,
)

# predicates and bitwise/logical negation
unary("is_nan", np.isnan, accepts=FLOAT, out_dtype="bool", scalar=te.isnan)
unary(
    "is_inf",
    lambda x, detect_positive, detect_negative: (
        (np.isposinf(x) & bool(detect_positive)) | (np.isneginf(x) & bool(detect_negative))
    ),
    {"detect_positive": True, "detect_negative": True},
    FLOAT,
    out_dtype="bool",
    scalar=_is_inf_te,
)
unary("logical_not", np.logical_not, accepts=BOOL, scalar=te.logical_not)
unary("bitwise_not", np.invert, accepts=INT, scalar=_bitwise_not_te)


# ---------------------------------------------------------------------------------------------
# binary arithmetic, comparisons, logic, bits

binary("add", np.add, scalar=lambda a, b: a + b)
binary("sub", np.subtract, scalar=lambda a, b: a - b)
binary("mul", np.multiply, scalar=lambda a, b: a * b)
binary(
    "div",
    _trunc_div,
    doc="True division for floats; integers round toward zero (x / 0 is 0).",
    scalar=_div_te,
)
binary(
    "floor_mod",
    np.mod,
    doc="Remainder with the sign of the divisor (Python %).",
    scalar=_floor_mod_te,
)
binary(
    "trunc_mod",
    np.fmod,
    doc="Remainder with the sign of the dividend (C fmod).",
    scalar=_trunc_mod_te,
)
binary("maximum", np.maximum, scalar=te.maximum)
binary("minimum", np.minimum, scalar=te.minimum)

binary("equal", np.equal, accepts=None, out_dtype="bool", scalar=te.equal)
binary("less", np.less, out_dtype="bool", scalar=te.less)
binary("less_equal", np.less_equal, out_dtype="bool", scalar=te.less_equal)
binary("greater", np.greater, out_dtype="bool", scalar=te.greater)
binary("greater_equal", np.greater_equal, out_dtype="bool", scalar=te.greater_equal)

binary("logical_and", np.logical_and, accepts=BOOL, scalar=te.logical_and)
binary("logical_or", np.logical_or, accepts=BOOL, scalar=te.logical_or)
binary("logical_xor", np.logical_xor, accepts=BOOL, scalar=te.not_equal)
binary(
    "bitwise_and",
    np.bitwise_and,
    accepts=INT_OR_BOOL,
    scalar=_bitwise(lambda a, b: a * b, te.logical_and),
)
binary(
    "bitwise_or",
    np.bitwise_or,
    accepts=INT_OR_BOOL,
    scalar=_bitwise(lambda a, b: a + b - a * b, te.logical_or),
)
binary(
    "bitwise_xor",
    np.bitwise_xor,
    accepts=INT_OR_BOOL,
    scalar=_bitwise(lambda a, b: (a + b) % 2, te.not_equal),
)
binary(
    "left_shift",
    _shift(left=True),
    accepts=INT,
    doc="Shift left; bits past the top drop.",
    scalar=_shift_te(left=True),
)
binary(
    "right_shift",
    _shift(left=False),
    accepts=INT,
    doc="Arithmetic for signed types.",
    scalar=_shift_te(left=False),
)


def _pow_infer(args, attrs):
    base, exponent = tensor(args[0], "pow"), tensor(args[1], "pow", "exponent")
    _check_dtype(base, NUMERIC, "pow")
    _check_dtype(exponent, NUMERIC, "pow", "exponent")
    return TensorType(broadcast_shapes([base.shape, exponent.shape], "pow"), base.dtype)


def _pow_te(base, exponent):
    """In numpy's promoted type of the reference's operands (float16 bases widened to float32,
    integer pairs in float64), then converted to the base's dtype as astype does."""
    bt, et = base.dtype, exponent.dtype
    if bt in INT and et in INT:
        ct = "float64"
    else:
        ct = np.result_type("float32" if bt == "float16" else bt, et).name
    return te.cast(te.pow(te.cast(base, ct), te.cast(exponent, ct)), bt)


register(
    OpDef(
        "pow",
        _pow_infer,
        _pow,
        pattern=Pattern.BROADCAST,
        num_args=(2, 2),
        compute=_te_map("pow", _pow_te),
        doc="base ** exponent; the exponent may have another numeric dtype, the result has "
        "the base's. The loop program computes integer powers in float64: exact while the "
        "result is below 2**53.",
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
        compute=_te_map(
            "prelu", lambda x, slope: _select(x < 0, x * slope, x), shape=lambda x, s: x.shape
        ),
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


def _clip_te(x, lo=None, hi=None):
    out = x if lo is None else te.maximum(x, lo)
    return out if hi is None else te.minimum(out, hi)


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
        compute=_te_map("clip", _clip_te, shape=lambda x, lo=None, hi=None: x.shape),
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
        compute=_te_map("where", te.if_then_else),
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
