"""Loading compiled CPU kernels (a shared object) and calling them on numpy arrays.

The shared object comes from memory (a pack member), so it is written to a private file
(see `_load_shared_object`) and opened with ctypes from there. A call builds one DLPack
`DLTensor` per array (docs/compile.md §3), all packed with `struct` into one buffer, and
turns a kernel's nonzero return into a `KernelError` carrying the kernel's own message.

Depends on numpy, ctypes and the standard library only, so a deployment can ship tcc.rt alone.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import struct
import tempfile
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from tcc.rt.errors import KernelError
from tcc.rt.format import KERNEL_DTYPES
from tcc.rt.threads import checked_thread_count

__all__ = ["DLTensor", "KernelLibrary", "dl_dtype", "load_cpu_library"]

KDL_CPU = 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


# DLTensor as laid out in memory (data, device, ndim, dtype, shape, strides, byte_offset).
_DESCRIPTOR = struct.Struct("<QiiiBBHQQQ")
_POINTER = struct.Struct("<Q")
assert _DESCRIPTOR.size == ctypes.sizeof(DLTensor)


def _address(a: np.ndarray, writeable: bool) -> int:
    """The address of an array's first element (`a.ctypes.data`, at half the cost where the
    array is writable and not empty; ml_dtypes' arrays export no buffer)."""
    if writeable and a.size and a.dtype.isbuiltin == 1:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    return a.ctypes.data


@functools.cache
def _shape_struct(ndim: int) -> struct.Struct:
    return struct.Struct(f"<{ndim}q")


@functools.lru_cache(maxsize=64)  # every kernel call asks, for a handful of dtypes
def dl_dtype(dtype: np.dtype) -> tuple[int, int]:
    """DLPack (code, bits) of a numpy dtype holding tensors kernels take (tcc.rt.format)."""
    dtype = np.dtype(dtype)
    dl = KERNEL_DTYPES.get(dtype.name)
    if dl is None or dtype.name == "bfloat16":  # tcc holds bfloat16 as float32
        raise KernelError(
            f"arrays of dtype {dtype} cannot be passed to CPU kernels; "
            "use a bool, integer, float16/32/64 or low-precision (ml_dtypes) array"
        )
    return dl


# (code, bits) -> the dtype name kernels report it as (float32 before bfloat16)
DL_DTYPE_NAMES = {dl: name for name, dl in reversed(KERNEL_DTYPES.items())}
_DTYPE_IN_MESSAGE = re.compile(r"has dtype code (\d+) bits (\d+) lanes (\d+)")


def _name_dtype(m: re.Match) -> str:
    """Kernels report a dtype as DLPack numbers; name it too (float64, int8x4, ...)."""
    code, bits, lanes = (int(g) for g in m.groups())
    name = DL_DTYPE_NAMES.get((code, bits), "unknown")
    name += f"x{lanes}" if lanes != 1 else ""
    return f"has dtype {name} (code {code}, bits {bits}, lanes {lanes})"


def _load_shared_object(data: bytes) -> ctypes.CDLL:
    """Open a shared object held in memory.

    The dynamic loader reuses an already loaded library of the same path, so every load gets
    a fresh file name: a private temporary file, removed as soon as it is mapped. Where the
    temporary directory cannot hold executable code, an anonymous memory file is used, and
    its descriptor is kept for the life of the process so that its /proc name is never reused.
    """
    fd, path = tempfile.mkstemp(prefix="tcc-kernels-", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        error = e
    finally:
        os.unlink(path)
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("tcc-kernels")
        os.write(fd, data)
        try:
            return ctypes.CDLL(f"/proc/self/fd/{fd}", mode=ctypes.RTLD_LOCAL)
        except OSError as e:
            os.close(fd)
            error = e
    raise KernelError(
        f"cannot load the kernels' shared object: {error}; rebuild the pack on this machine"
    )


# Every open library, so a forked child can make them single-threaded (below).
_OPEN: weakref.WeakSet = weakref.WeakSet()
_FORKED = [False]  # set in a forked child: libraries loaded there start single-threaded


def _single_threaded_after_fork() -> None:
    """The OpenMP runtime (libgomp) cannot start its threads again in a forked child of a
    process that used them: a parallel kernel would wait forever. So in the child every
    library, open or loaded later, runs its parallel loops on the calling thread; results
    are the same, only slower. Asking for more threads again in the child brings the hang
    back."""
    _FORKED[0] = True
    for lib in list(_OPEN):
        if lib._lib is not None:
            lib._lib.tcc_set_num_threads(1)


os.register_at_fork(after_in_child=_single_threaded_after_fork)


class KernelLibrary:
    """Kernels of one loaded shared object. Use `call`, then `close()` (or a `with` block)."""

    def __init__(self, shared_object: bytes):
        self._lib: ctypes.CDLL | None = _load_shared_object(shared_object)
        self._kernels: dict[str, ctypes._CFuncPtr] = {}
        self._setsig()
        _OPEN.add(self)
        if _FORKED[0]:
            self._lib.tcc_set_num_threads(1)

    def _setsig(self) -> None:
        """Every C signature of the runtime, declared once."""
        lib = self._lib
        try:
            lib.tcc_last_error.restype = ctypes.c_char_p
            lib.tcc_last_error.argtypes = []
            lib.tcc_set_num_threads.restype = None
            lib.tcc_set_num_threads.argtypes = [ctypes.c_int32]
        except AttributeError:
            self.close()
            raise KernelError(
                "the shared object has no tcc_last_error/tcc_set_num_threads; "
                "it was not built by tcc's CPU backend"
            ) from None

    def _kernel(self, symbol: str):
        if self._lib is None:
            raise KernelError(f"cannot call kernel {symbol!r}: the kernel library is closed")
        fn = self._kernels.get(symbol)
        if fn is None:
            try:
                fn = getattr(self._lib, symbol)
            except AttributeError:
                raise KernelError(
                    f"no kernel named {symbol!r} in the library; check the pack's kernel table"
                ) from None
            fn.restype = ctypes.c_int32
            fn.argtypes = [ctypes.c_void_p, ctypes.c_int32]  # DLTensor **, count
            self._kernels[symbol] = fn
        return fn

    def has(self, symbol: str) -> bool:
        """True when the library exports `symbol`."""
        return self._lib is not None and hasattr(self._lib, symbol)

    def call(self, symbol: str, arrays: Sequence[np.ndarray]) -> None:
        """Run kernel `symbol` on `arrays` (inputs then outputs, written in place)."""
        self.bind(symbol, arrays)()

    def bind(self, symbol: str, arrays: Sequence[np.ndarray]) -> Callable[[], None]:
        """A call of kernel `symbol` on `arrays` with its arguments packed once: calling it
        runs the kernel (a timing loop pays only for the call). The arrays must stay alive
        and in place while it is used."""
        fn = self._kernel(symbol)
        arrays = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in arrays]
        n = len(arrays)
        # One buffer holds the pointer array, the descriptors and the shapes: packing it
        # with struct is several times cheaper than a ctypes object per field.
        dims = sum(a.ndim for a in arrays)
        block = ctypes.create_string_buffer(8 * n + _DESCRIPTOR.size * n + 8 * dims + 8)
        base = ctypes.addressof(block)
        desc_at, shape_at = 8 * n, 8 * n + _DESCRIPTOR.size * n
        for i, a in enumerate(arrays):
            flags = a.flags
            if not flags.c_contiguous:
                raise KernelError(
                    f"{symbol}: argument {i} is not C-contiguous (strides {a.strides}); "
                    "pass np.ascontiguousarray(x)"
                )
            code, bits = dl_dtype(a.dtype)
            _POINTER.pack_into(block, 8 * i, base + desc_at)
            _DESCRIPTOR.pack_into(
                block, desc_at, _address(a, flags.writeable), KDL_CPU, 0, a.ndim, code, bits, 1,
                base + shape_at, 0, 0,
            )
            if a.ndim:
                _shape_struct(a.ndim).pack_into(block, shape_at, *a.shape)
            desc_at += _DESCRIPTOR.size
            shape_at += 8 * a.ndim

        def run(arrays=arrays, block=block) -> None:  # both must outlive every call
            status = fn(base, n)
            if status != 0:
                raise KernelError(self.last_error() or f"{symbol}: failed with status {status}")

        return run

    def last_error(self) -> str:
        if self._lib is None:
            return ""
        msg = self._lib.tcc_last_error()
        return _DTYPE_IN_MESSAGE.sub(_name_dtype, msg.decode("utf8", "replace")) if msg else ""

    def set_num_threads(self, n: int) -> None:
        """Threads for parallel loops; 0 means the OpenMP default (OMP_NUM_THREADS or all cores)."""
        if self._lib is None:
            raise KernelError("cannot set the thread count: the kernel library is closed")
        if n < 0:
            raise KernelError(f"thread count must be 0 (the default) or positive, got {n}")
        if n > 0:
            checked_thread_count(n, error=KernelError)
        self._lib.tcc_set_num_threads(int(n))

    def close(self) -> None:
        """Unload the library; calling a kernel afterwards is an error."""
        if self._lib is not None:
            import _ctypes

            self._kernels.clear()
            _ctypes.dlclose(self._lib._handle)
            self._lib = None

    def __enter__(self) -> KernelLibrary:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def load_cpu_library(shared_object: bytes) -> KernelLibrary:
    """Load a shared object built by tcc's CPU backend (CpuModule.shared_object)."""
    return KernelLibrary(shared_object)
