"""Conversions of numbers to the low-precision storage types, computed by tcc itself.

Each conversion returns the type's codes: uint8, one per element, a sub-byte code in the low
bits. `tcc.ir.dtype.to_low_precision` views them as the `ml_dtypes` dtypes, whose bit layouts
are fixed by the formats; what an `ml_dtypes` release does with out-of-range values is not
(0.6 wraps -9 to int4 as 7, 0.7 gives 0), so tcc never asks it to convert.

The rules are ONNX Cast's, checked against onnxruntime:

- float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) and float4_e2m1fn round to nearest, ties to
  even. A value beyond the largest finite one, after rounding, and an infinity become that
  largest value (signed) with `saturate`; without it, inf for e5m2 and NaN for the types
  without inf. float4 has no inf or NaN and always saturates; NaN becomes a zero of the
  opposite sign (+NaN gives -0), as ONNX's own test data has it (onnxruntime has no float4
  Cast). The "fnuz" types have no negative zero: -0 and negatives that round to zero give 0.
  Without saturate, onnxruntime differs from the ONNX table in two bands just past the
  largest value, where tcc follows the table: e4m3fn 464 < |x| < 496 rounds to 480 > 448, so
  NaN (onnxruntime: 448); e5m2 61440 <= |x| < 65536 rounds to 65536 > 57344, so inf
  (onnxruntime: NaN).
- int4, uint4, int2 and uint2 keep the low bits of the integer, two's complement, as every
  narrowing integer cast does. A float is first rounded half away from zero, as onnxruntime
  does (-9.6 -> -10 -> int4 6; 2.5 -> 3); NaN, infinities and floats beyond int64 give 0.
- float8_e8m0fnu (a power-of-two scale) rounds its exponent up, down or to the nearest, as
  ONNX's `round_mode` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class MiniFloat:
    """A sign-exponent-mantissa format of at most 8 bits whose codes grow with magnitude."""

    exponent_bits: int
    mantissa_bits: int
    bias: int
    max_code: int  # the largest finite magnitude's code (sign bit clear)
    overflow_code: int | None  # inf, or NaN without inf; None: the format saturates always
    nan_code: int  # NaN's code (sign bit clear), or what NaN becomes where there is none
    signed_zero: bool = True  # False for the "fnuz" types: 0x80 is their NaN
    signed_nan: bool = True
    nan_sign_flipped: bool = False  # NaN's code takes the sign NaN does not have (float4)

    @property
    def sign_bit(self) -> int:
        return 1 << (self.exponent_bits + self.mantissa_bits)

    def magnitude(self, codes: np.ndarray) -> np.ndarray:
        """The value of sign-less codes as float64 (a code past max_code is decoded as if
        the format went on: the first magnitude that overflows)."""
        codes = np.asarray(codes, np.int64)
        exponent, mantissa = codes >> self.mantissa_bits, codes & ((1 << self.mantissa_bits) - 1)
        fraction = mantissa / float(1 << self.mantissa_bits)
        normal = np.ldexp(1.0 + fraction, (exponent - self.bias).astype(np.int32))
        subnormal = np.ldexp(fraction, 1 - self.bias)
        return np.where(exponent == 0, subnormal, normal)

    @cached_property
    def magnitudes(self) -> np.ndarray:
        return self.magnitude(np.arange(self.max_code + 2))

    def encode(self, x: np.ndarray, saturate: bool) -> np.ndarray:
        x = np.asarray(x, np.float64)
        a = np.abs(x)
        values = self.magnitudes  # 0, the finite magnitudes, then the first one past them
        hi = np.clip(np.searchsorted(values, a, side="left"), 1, len(values) - 1)
        lo = hi - 1
        midpoint = (values[lo] + values[hi]) / 2  # exact: both are short dyadic numbers
        up = (a > midpoint) | ((a == midpoint) & (hi % 2 == 0))  # ties to the even code
        codes = np.where(up, hi, lo)
        overflow = (codes > self.max_code) | (a > values[-1])  # infinities included
        if saturate or self.overflow_code is None:
            codes = np.where(overflow, self.max_code, codes)
        else:
            codes = np.where(overflow, self.overflow_code, codes)
        nan = np.isnan(x)
        codes = np.where(nan, self.nan_code, codes)
        negative = np.signbit(x) & (~nan | self.signed_nan)
        if self.nan_sign_flipped:
            negative ^= nan
        if not self.signed_zero:
            negative &= codes != 0
        return (codes | np.where(negative, self.sign_bit, 0)).astype(np.uint8)


# name: MiniFloat(exponent bits, mantissa bits, bias, largest finite code, overflow, NaN)
FLOAT_FORMATS = {
    "float8_e4m3fn": MiniFloat(4, 3, 7, 0x7E, 0x7F, 0x7F),
    "float8_e4m3fnuz": MiniFloat(4, 3, 8, 0x7F, 0x80, 0x80, signed_zero=False, signed_nan=False),
    "float8_e5m2": MiniFloat(5, 2, 15, 0x7B, 0x7C, 0x7E),
    "float8_e5m2fnuz": MiniFloat(5, 2, 16, 0x7F, 0x80, 0x80, signed_zero=False, signed_nan=False),
    "float4_e2m1fn": MiniFloat(2, 1, 1, 0x7, None, 0x0, nan_sign_flipped=True),
}
INT_BITS = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2}


def round_half_away(x: np.ndarray) -> np.ndarray:
    """Nearest integer, halves away from zero (exact: no x + 0.5 that could round)."""
    whole = np.trunc(x)
    return whole + np.where(np.abs(x - whole) >= 0.5, np.sign(x), 0.0)


def to_sub_byte_int(x: np.ndarray, bits: int) -> np.ndarray:
    """The low `bits` bits of each value as an integer (floats rounded half away from zero)."""
    x = np.asarray(x)
    if x.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            r = round_half_away(x.astype(np.float64))
            fits = np.isfinite(r) & (np.abs(r) < 2.0**63)
            x = np.where(fits, r, 0.0).astype(np.int64)
    return (x.astype(np.int64) & ((1 << bits) - 1)).astype(np.uint8)


def to_float8_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """Power-of-two scales 2**-127 .. 2**127 (biased exponent codes 0 .. 254; 255 is NaN).

    The exponent rounds up, down or to the nearest power (ties up, as ONNX's reference
    does). Values outside that range (zero and infinities included) clamp to the smallest or
    largest power when saturating and are NaN otherwise, as the ONNX Cast table specifies.
    The sign is dropped: ONNX leaves negative inputs undefined.
    """
    x = np.abs(np.asarray(x).astype(np.float64))  # exact for every dtype cast accepts
    mantissa, exponent = np.frexp(x)  # x = mantissa * 2**exponent, mantissa in [0.5, 1)
    e = exponent.astype(np.int64) - 1
    if round_mode == "up":
        e += mantissa > 0.5
    elif round_mode == "nearest":
        e += mantissa >= 0.75
    e = np.clip(np.where(x == 0, -127, np.where(np.isinf(x), 127, e)), -127, 127)
    bad = np.isnan(x)
    if not saturate:
        bad |= (x < 2.0**-127) | (x > 2.0**127)
    return np.where(bad, 0xFF, e + 127).astype(np.uint8)


def encode(x: np.ndarray, dtype: str, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """The codes of `x` (bool, int or float; not a low-precision type) converted to `dtype`."""
    if dtype in INT_BITS:
        return to_sub_byte_int(x, INT_BITS[dtype])
    if dtype == "float8_e8m0fnu":
        return to_float8_e8m0(x, saturate, round_mode)
    return FLOAT_FORMATS[dtype].encode(x, saturate)
