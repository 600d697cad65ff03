"""Loop-program conversions to and from the storage types: bfloat16 and the low-precision
types (float8, float4, float8_e8m0fnu, int4/uint4/int2/uint2).

These are the te counterparts of tcc.ir.low_precision and `round_to_bfloat16`, rule for
rule and bit for bit, so a compiled Cast or QuantizeLinear gives the reference's codes. A
value of a storage type is held as tcc holds it everywhere (tcc.ir.dtype): bfloat16 as a
float32 rounded to bfloat16, the others as their code byte; `te.reinterpret` moves between
that and a plain number type, and code generation only loads and stores them.

The loop IR has no bit operators, so bits are taken apart as elementwise's bitwise ops do:
floor division and remainders by powers of two, on int64 holding at most 63 bits. Every
conversion to a low-precision float goes through float64, as the reference's does: exact
for every source dtype but int64 beyond 2**53, which saturates or overflows either way.
"""

from __future__ import annotations

from tcc.ir import te
from tcc.ir.dtype import LOW_PRECISION, LOW_PRECISION_INT_DTYPES
from tcc.ir.expr import PrimExpr
from tcc.ir.low_precision import FLOAT_FORMATS, INT_BITS, MiniFloat

STORAGE_DTYPES = LOW_PRECISION | {"bfloat16"}
_MANTISSA = 1 << 52  # float64's mantissa field, as a divisor


def _int(v: int) -> PrimExpr:
    return te.const(v, "int64")


def _pow2(k: PrimExpr) -> PrimExpr:
    """2.0**k in float64 for an int64 k in [-1022, 1023], built from its bits (exact)."""
    return te.reinterpret((k + 1023) * _MANTISSA, "float64")


def _code(x: PrimExpr) -> PrimExpr:
    """The code byte of a low-precision value, as int64 in [0, 255]."""
    return te.cast(te.reinterpret(x, "uint8"), "int64")


def _from_code(code: PrimExpr, dtype: str) -> PrimExpr:
    return te.reinterpret(te.cast(code, "uint8"), dtype)


# -- to float -------------------------------------------------------------------------------


def _decode_minifloat(code: PrimExpr, f: MiniFloat) -> PrimExpr:
    code = code % (2 * f.sign_bit)
    negative = code >= f.sign_bit
    magnitude = code % f.sign_bit
    one = 1 << f.mantissa_bits
    exponent, mantissa = magnitude // one, magnitude % one
    subnormal = te.cast(mantissa, "float64") * _pow2(_int(1 - f.bias - f.mantissa_bits))
    normal = te.cast(mantissa + one, "float64") * _pow2(exponent - (f.bias + f.mantissa_bits))
    value = te.if_then_else(te.equal(exponent, _int(0)), subnormal, normal)
    if f.max_code < f.sign_bit - 1:  # codes past the largest finite one: inf, then NaN
        special = te.const(float("nan"), "float64")
        if f.overflow_code is not None and f.overflow_code != f.nan_code:
            inf = te.const(float("inf"), "float64")
            special = te.if_then_else(te.equal(magnitude, _int(f.overflow_code)), inf, special)
        value = te.if_then_else(magnitude > f.max_code, special, value)
    if not f.signed_zero:  # "negative zero" is the one NaN (negative, as ml_dtypes reads it)
        nan = te.const(float("nan"), "float64")
        value = te.if_then_else(te.equal(code, _int(f.sign_bit)), nan, value)
    return _with_sign(value, negative)


def _with_sign(magnitude: PrimExpr, negative: PrimExpr) -> PrimExpr:
    """`magnitude` with the sign bit set where `negative`: -0.0 and -NaN included, which an
    arithmetic negation need not give."""
    one = te.const(1.0, "float64")
    return te.copysign(magnitude, te.if_then_else(negative, -one, one))


def _decode_e8m0(code: PrimExpr) -> PrimExpr:
    nan = te.const(float("nan"), "float64")
    return te.if_then_else(te.equal(code, _int(0xFF)), nan, _pow2(code - 127))


def _decode_int(code: PrimExpr, dtype: str) -> PrimExpr:
    bits = INT_BITS[dtype]
    low = code % (1 << bits)
    if dtype.startswith("uint"):
        return low
    return te.if_then_else(low >= 1 << (bits - 1), low - (1 << bits), low)


def decode(x: PrimExpr) -> PrimExpr:
    """The number a storage-type value holds: float32 for bfloat16, int64 for the integer
    types, float64 (exact) for the low-precision floats."""
    if x.dtype == "bfloat16":
        return te.reinterpret(x, "float32")
    code = _code(x)
    if x.dtype in LOW_PRECISION_INT_DTYPES:
        return _decode_int(code, x.dtype)
    if x.dtype == "float8_e8m0fnu":
        return _decode_e8m0(code)
    return _decode_minifloat(code, FLOAT_FORMATS[x.dtype])


# -- from a number ------------------------------------------------------------------------


def _float64_fields(x: PrimExpr) -> tuple[PrimExpr, PrimExpr, PrimExpr]:
    """(negative, biased exponent, mantissa field) of a float64."""
    bits = te.reinterpret(x, "int64")
    magnitude = te.reinterpret(te.abs(x), "int64")  # below 2**63
    return bits < 0, magnitude // _MANTISSA, magnitude % _MANTISSA


def _encode_minifloat(x: PrimExpr, f: MiniFloat, saturate: bool) -> PrimExpr:
    """MiniFloat.encode: round to nearest even on the mantissa's bits, then overflow."""
    negative, biased, fraction = _float64_fields(x)
    target = biased - 1023 + f.bias  # the code's exponent field where the value is normal
    # Keep the top bits of 1.fraction a code holds: M of them where normal, fewer below.
    shift = te.minimum(52 - f.mantissa_bits + te.maximum(1 - target, _int(0)), _int(54))
    step = te.cast(_pow2(shift), "int64")
    significand = fraction + _MANTISSA
    base = te.maximum(target - 1, _int(0)) * (1 << f.mantissa_bits) + significand // step
    rest, half = significand % step, step // 2
    up = te.logical_or(rest > half, te.logical_and(te.equal(rest, half), te.equal(base % 2, _int(1))))
    code = base + te.cast(up, "int64")
    code = te.if_then_else(te.equal(biased, _int(0)), _int(0), code)  # zero and subnormals
    overflow = f.max_code if saturate or f.overflow_code is None else f.overflow_code
    code = te.if_then_else(code > f.max_code, _int(overflow), code)  # infinities included
    nan = te.isnan(x)
    code = te.if_then_else(nan, _int(f.nan_code), code)
    sign = negative if f.signed_nan else te.logical_and(negative, te.logical_not(nan))
    if f.nan_sign_flipped:
        sign = te.not_equal(sign, nan)
    if not f.signed_zero:
        sign = te.logical_and(sign, te.not_equal(code, _int(0)))
    sign = te.logical_and(sign, code < f.sign_bit)  # the fnuz NaN has the sign bit already
    return code + te.cast(sign, "int64") * f.sign_bit


def _encode_e8m0(x: PrimExpr, saturate: bool, round_mode: str) -> PrimExpr:
    """to_float8_e8m0: the exponent of |x| rounded by `round_mode`, clamped to +-127."""
    _, biased, fraction = _float64_fields(x)
    exponent = biased - 1023
    if round_mode == "up":
        exponent = exponent + te.cast(fraction > 0, "int64")
    elif round_mode == "nearest":
        exponent = exponent + te.cast(fraction >= _MANTISSA // 2, "int64")
    exponent = te.if_then_else(te.equal(biased, _int(0)), _int(-127), exponent)
    code = te.minimum(te.maximum(exponent, _int(-127)), _int(127)) + 127
    bad = te.isnan(x)
    if not saturate:
        a = te.abs(x)
        out = te.logical_or(a < _pow2(_int(-127)), a > _pow2(_int(127)))
        bad = te.logical_or(bad, out)
    return te.if_then_else(bad, _int(0xFF), code)


def _round_half_away(x: PrimExpr) -> PrimExpr:
    whole = te.trunc(x)
    half = te.abs(x - whole) >= 0.5
    step = te.if_then_else(x < 0.0, te.const(-1.0, "float64"), te.const(1.0, "float64"))
    return te.if_then_else(half, whole + step, whole)


def _encode_int(x: PrimExpr, dtype: str) -> PrimExpr:
    """to_sub_byte_int: the low bits of the integer (floats rounded half away from zero)."""
    if x.dtype == "float64":
        r = _round_half_away(x)
        fits = te.logical_and(te.logical_not(te.isnan(r)), te.abs(r) < 2.0**63)
        x = te.if_then_else(fits, te.cast(r, "int64"), _int(0))
    return te.cast(x, "int64") % (1 << INT_BITS[dtype])


def _round_to_bfloat16(v: PrimExpr) -> PrimExpr:
    """round_to_bfloat16 of a float32: ties to even on the bits, NaN kept as it is."""
    bits = te.cast(te.reinterpret(v, "uint32"), "int64")
    rounded = bits + 0x7FFF + (bits // 65536) % 2
    rounded = (rounded - rounded % 65536) % (1 << 32)
    out = te.reinterpret(te.cast(rounded, "uint32"), "float32")
    return te.reinterpret(te.if_then_else(te.isnan(v), v, out), "bfloat16")


def encode(x: PrimExpr, dtype: str, saturate: bool = True, round_mode: str = "up") -> PrimExpr:
    """`x` (bool, int or float; not a storage type) converted to storage type `dtype` by
    ONNX Cast's rules (tcc.ir.dtype.to_low_precision, round_to_bfloat16)."""
    if dtype == "bfloat16":
        return _round_to_bfloat16(te.cast(x, "float32"))
    if dtype in LOW_PRECISION_INT_DTYPES:
        if x.dtype in ("float16", "float32"):
            x = te.cast(x, "float64")
        return _from_code(_encode_int(x, dtype), dtype)
    x = te.cast(x, "float64")
    if dtype == "float8_e8m0fnu":
        return _from_code(_encode_e8m0(x, saturate, round_mode), dtype)
    return _from_code(_encode_minifloat(x, FLOAT_FORMATS[dtype], saturate), dtype)


def convert(x: PrimExpr, dtype: str, saturate: bool = True, round_mode: str = "up") -> PrimExpr:
    """Cast's rules between any two dtypes a loop program holds, storage types included:
    a storage-type source is decoded first, a storage-type result encoded last."""
    if x.dtype in STORAGE_DTYPES:
        if x.dtype == dtype:
            return x
        x = decode(x)
        if x.dtype == "float64" and dtype not in STORAGE_DTYPES:
            x = te.cast(x, "float32")  # the reference widens these to float32 only
    if dtype in STORAGE_DTYPES:
        return encode(x, dtype, saturate, round_mode)
    if dtype == "bool" and x.dtype != "bool":  # nonzero (NaN included) is True
        return te.not_equal(x, te.const(0, x.dtype))
    return te.cast(x, dtype)
