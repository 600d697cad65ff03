"""Scalar data types: tcc names them by string ("float32", "int64", "bool", ...)."""

from __future__ import annotations

import numpy as np

from tcc.ir.errors import TccError

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
)

FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
INDEX_DTYPE = "int64"


def check_dtype(dtype: str) -> str:
    """Return `dtype` when tcc knows it, else raise a TccError naming the known ones."""
    if dtype not in DTYPES:
        raise TccError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return dtype


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES or dtype == "bool"


def to_numpy(dtype: str) -> np.dtype:
    """The numpy dtype holding values of `dtype` (bfloat16 has none: it is held as float32)."""
    if dtype == "bfloat16":
        return np.dtype("float32")
    if dtype == "string":
        return np.dtype(object)
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
