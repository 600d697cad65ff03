"""Scalar data types: tcc names them by string ("float32", "int64", "bool", ...).

The low-precision types (float8/float4 and 4- and 2-bit integers, the storage types of
quantized models) are held in numpy with the `ml_dtypes` package's dtypes, one element per
byte, under the same names; tcc converts values to them itself (tcc.ir.low_precision). tcc stores, moves, casts, quantizes and dequantizes them but does
no arithmetic on them, so they are in neither FLOAT_DTYPES nor INT_DTYPES: ops that compute
reject them by their operand checks.
"""

from __future__ import annotations

import functools

import numpy as np

from tcc.ir.errors import TccError
from tcc.ir.low_precision import encode

DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "string",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn",
    "int4",
    "uint4",
    "int2",
    "uint2",
)

FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
INDEX_DTYPE = "int64"

# float8 types with a saturating conversion (ONNX Cast's `saturate`); e8m0 (a power-of-two
# scale) converts by its own rounding rules and float4 always saturates (it has no inf/NaN).
FLOAT8_DTYPES = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})
LOW_PRECISION_FLOAT_DTYPES = FLOAT8_DTYPES | {"float8_e8m0fnu", "float4_e2m1fn"}
LOW_PRECISION_INT_DTYPES = frozenset({"int4", "uint4", "int2", "uint2"})
LOW_PRECISION = LOW_PRECISION_FLOAT_DTYPES | LOW_PRECISION_INT_DTYPES


@functools.cache
def _ml_dtype(name: str) -> np.dtype:
    import ml_dtypes  # on first use: its import takes 0.4 s, which loading a pack (tcc.rt) skips

    return np.dtype(getattr(ml_dtypes, name))

_SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}


def check_dtype(dtype: str) -> str:
    """Return `dtype` when tcc knows it, else raise a TccError naming the known ones."""
    if dtype not in DTYPES:
        raise TccError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return dtype


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES or dtype == "bool"


def bit_width(dtype: str) -> int:
    """Bits of one value: the type's own width, also for sub-byte types held one per byte."""
    return _SUB_BYTE_BITS.get(dtype) or to_numpy(dtype).itemsize * 8


def to_numpy(dtype: str) -> np.dtype:
    """The numpy dtype holding values of `dtype` (bfloat16 is held as float32, the
    low-precision types as ml_dtypes')."""
    if dtype == "bfloat16":
        return np.dtype("float32")
    if dtype == "string":
        return np.dtype(object)
    if dtype in LOW_PRECISION:
        return _ml_dtype(dtype)
    return np.dtype(dtype)


def from_numpy(dt) -> str:
    """The tcc dtype name of a numpy dtype."""
    dt = np.dtype(dt)
    if dt.kind in "OUS":
        return "string"
    name = dt.name
    if name not in DTYPES:
        raise TccError(f"numpy dtype {dt} has no tcc equivalent")
    return name


def round_to_bfloat16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept as float32."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    out = rounded.view(np.float32)
    return np.where(np.isnan(x), x, out).astype(np.float32)


def to_low_precision(
    x: np.ndarray, dtype: str, saturate: bool = True, round_mode: str = "up"
) -> np.ndarray:
    """Convert numbers to a low-precision dtype by ONNX Cast's rules (tcc.ir.low_precision).

    Floats round to nearest even; with `saturate`, float8 overflow and infinities clamp to the
    largest finite value, as ONNX's Cast and QuantizeLinear default to, and without it they
    become inf (e5m2) or NaN (the types without inf). float4 always saturates. Integer types
    keep the low bits. float8_e8m0fnu rounds its exponent by `round_mode`.
    """
    x = np.asarray(x)
    if x.dtype.name in LOW_PRECISION:  # exact in float32, which every conversion accepts
        x = x.astype(np.float32)
    return encode(x, dtype, saturate, round_mode).view(_ml_dtype(dtype))
