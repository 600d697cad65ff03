"""Tensors at the runtime's edge: tcc dtype names as numpy dtypes, and user inputs (numpy
arrays or anything exporting `__dlpack__`) as C-contiguous numpy arrays.

Outputs are plain numpy arrays, which export `__dlpack__` themselves, so no wrapper type is
needed. tcc.rt depends on numpy only; the low-precision storage types need the `ml_dtypes`
package, imported when a pack uses one.
"""

from __future__ import annotations

import numpy as np

from tcc.rt.format import ARENA_ALIGN, DTYPES, LOW_PRECISION_DTYPES, PLAIN_DTYPES

__all__ = ["DTYPES", "as_array", "dtype_name", "numpy_dtype"]


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype holding a tcc dtype (bfloat16 is held as float32, as in tcc.ir)."""
    if name in PLAIN_DTYPES:
        return np.dtype(name)
    if name == "bfloat16":
        return np.dtype("float32")
    if name in LOW_PRECISION_DTYPES:
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
        if not x.dtype.isnative:  # big-endian numbers: the same values, in this machine's order
            return x.astype(x.dtype.newbyteorder("="), order="C")
        return x if x.flags.c_contiguous else x.copy(order="C")
    if isinstance(x, (np.generic, int, float, bool)):
        return np.asarray(x)
    raise TypeError(f"a {type(x).__name__} is neither a numpy array nor a DLPack tensor")


def random_array(shape, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Seeded values of a tcc dtype for a made-up input: floats ~ N(0, 1), integers in
    [0, 8) (valid token ids and indices for small tables), bools uniform."""
    dt = numpy_dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 8, shape).astype(dt)


def aligned_empty(nbytes: int, align: int = ARENA_ALIGN, allocate=None) -> np.ndarray:
    """`nbytes` uninitialized bytes starting at an `align`-byte boundary, as the runtimes'
    arenas start (numpy's own allocations are 16-byte aligned: a 64-byte vector load from
    one can straddle two cache lines), cut from `allocate(n)` (a uint8 array of n bytes;
    default numpy's)."""
    raw = np.empty(nbytes + align, np.uint8) if allocate is None else allocate(nbytes + align)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes]


def aligned_copy(array: np.ndarray, align: int = ARENA_ALIGN) -> np.ndarray:
    """A C-contiguous copy of `array` that starts at an `align`-byte boundary."""
    array = np.asarray(array)
    out = aligned_empty(array.nbytes, align).view(array.dtype).reshape(array.shape)
    out[...] = array
    return out
