"""Tensors at the runtime's edge: tcc dtype names as numpy dtypes, and user inputs (numpy
arrays or anything exporting `__dlpack__`) as C-contiguous numpy arrays.

Outputs are plain numpy arrays, which export `__dlpack__` themselves, so no wrapper type is
needed. tcc.rt depends on numpy only; the low-precision storage types need the `ml_dtypes`
package, imported when a pack uses one.
"""

from __future__ import annotations

import numpy as np

_PLAIN = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 "
    "complex64 complex128".split()
)
_LOW_PRECISION = frozenset(
    "float8_e4m3fn float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn "
    "int4 uint4 int2 uint2".split()
)
DTYPES = _PLAIN | _LOW_PRECISION | {"bfloat16"}


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype holding a tcc dtype (bfloat16 is held as float32, as in tcc.ir)."""
    if name in _PLAIN:
        return np.dtype(name)
    if name == "bfloat16":
        return np.dtype("float32")
    if name in _LOW_PRECISION:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    raise ValueError(f"unknown dtype {name!r}")


def dtype_name(dt: np.dtype) -> str:
    return np.dtype(dt).name


def as_array(x) -> np.ndarray:
    """A C-contiguous numpy view (or copy) of an input; raises TypeError for other objects."""
    if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
        x = np.from_dlpack(x)
    if isinstance(x, np.ndarray):  # (np.ascontiguousarray would turn a 0-d array into 1-d)
        return x if x.flags.c_contiguous else x.copy(order="C")
    if isinstance(x, (np.generic, int, float, bool)):
        return np.asarray(x)
    raise TypeError(f"a {type(x).__name__} is neither a numpy array nor a DLPack tensor")
