"""Running a pack's CUDA kernels: the CUDA driver API (`libcuda`) through ctypes.

`load_cuda_library(binaries, kernels)` opens device 0, loads the cubin built for its
arch (a cubin for sm_XY runs on devices XZ with Z >= Y) or, failing that, the PTX when the
device is at least as new as it, and gives a library with the CPU kernel library's
interface, `call(symbol, arrays)`, that is also the VM's device (docs/cuda.md): the VM
keeps its tensors in GPU memory as `DeviceArray`s, so a kernel call only evaluates each
launch's grid from the shapes (the shape work stays on the host), checks the arguments and
launches on one stream. A host array given to a kernel (a scalar the VM made, a slice a
scan took) is copied over for the call, and back when the kernel writes it. Device buffers
are kept in a pool by size, so a run after the first allocates nothing.

`$TCC_CUDA_DRIVER` names the driver library instead of `libcuda.so.1`; the tests point it
at a stand-in that runs kernels on the CPU. No driver, no device, or a device the pack has
no code for is a `CudaDriverError` with a one-line message.

Depends on numpy, ctypes and the standard library only, like the rest of tcc.rt.
"""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tcc.rt.errors import KernelError, PackError, RunInputError
from tcc.rt.kernels import DL_DTYPE_NAMES, DLTensor, dl_dtype
from tcc.rt.tensor import numpy_dtype
from tcc.rt.vm import eval_shape

__all__ = ["CudaDriverError", "load_cuda_library", "pick_binary"]

ENV = "TCC_CUDA_DRIVER"
LIBRARY = "libcuda.so.1"
_COMPUTE_CAPABILITY_MAJOR, _COMPUTE_CAPABILITY_MINOR = 75, 76
_ALIGN = 256  # device allocations are rounded up to this, so the pool reuses them
_NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE


class CudaDriverError(PackError):
    """No CUDA driver or device to run a pack's CUDA kernels on, or the driver refused."""


def _declare(lib: ctypes.CDLL) -> None:
    """Every driver function used, with its signature, in one place."""
    p, i, u, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t
    pp, ip = ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int)
    u64p = ctypes.POINTER(ctypes.c_uint64)
    signatures = {
        "cuInit": (u,),
        "cuDriverGetVersion": (ip,),
        "cuDeviceGetCount": (ip,),
        "cuDeviceGet": (ip, i),
        "cuDeviceGetAttribute": (ip, i, i),
        "cuDevicePrimaryCtxRetain": (pp, i),
        "cuDevicePrimaryCtxRelease_v2": (i,),
        "cuCtxSetCurrent": (p,),
        "cuModuleLoadData": (pp, p),
        "cuModuleUnload": (p,),
        "cuModuleGetFunction": (pp, p, ctypes.c_char_p),
        "cuMemAlloc_v2": (u64p, sz),
        "cuMemFree_v2": (ctypes.c_uint64,),
        "cuMemcpyHtoDAsync_v2": (ctypes.c_uint64, p, sz, p),
        "cuMemcpyDtoHAsync_v2": (p, ctypes.c_uint64, sz, p),
        "cuMemcpyDtoDAsync_v2": (ctypes.c_uint64, ctypes.c_uint64, sz, p),
        "cuStreamCreate": (pp, u),
        "cuStreamDestroy_v2": (p,),
        "cuStreamSynchronize": (p,),
        "cuLaunchKernel": (p, u, u, u, u, u, u, u, p, pp, pp),
        "cuGetErrorName": (i, ctypes.POINTER(ctypes.c_char_p)),
        "cuEventCreate": (pp, u),
        "cuEventRecord": (p, p),
        "cuEventSynchronize": (p,),
        "cuEventElapsedTime": (ctypes.POINTER(ctypes.c_float), p, p),
        "cuEventDestroy_v2": (p,),
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int


class _Driver:
    """The driver library, initialized, with results turned into CudaDriverErrors."""

    def __init__(self, path: str):
        try:
            self.lib = ctypes.CDLL(path)
            _declare(self.lib)
        except (OSError, AttributeError) as e:
            raise CudaDriverError(
                f"no CUDA driver found: {path} cannot be loaded ({e}); run CUDA packs on a "
                "machine with an NVIDIA GPU and its driver, or compile with --target llvm"
            ) from None
        result = self.lib.cuInit(0)
        if result == _NO_DEVICE:
            raise CudaDriverError("no CUDA device found: the driver sees no GPU (cuInit: "
                                  "CUDA_ERROR_NO_DEVICE); run CUDA packs on a machine with an "
                                  "NVIDIA GPU, or compile with --target llvm")
        self.check(result, "cuInit", "no CUDA driver found: the driver did not start")

    def name(self, result: int) -> str:
        text = ctypes.c_char_p()
        if self.lib.cuGetErrorName(result, ctypes.byref(text)) == 0 and text.value:
            return text.value.decode("ascii", "replace")
        return f"CUDA error {result}"

    def check(self, result: int, call: str, what: str = "") -> None:
        if result != 0:
            lead = what or f"the CUDA driver failed in {call}"
            raise CudaDriverError(f"{lead} ({call}: {self.name(result)})")


def _driver() -> _Driver:
    return _Driver(os.environ.get(ENV) or LIBRARY)


def pick_binary(binaries: Mapping[str, object], arch: int) -> str | None:
    """The binary for a device of compute capability `arch` (90 for sm_90): the cubin of
    the newest arch with the same major version at most the device's, else the newest PTX
    no newer than the device (the driver compiles it), else None."""
    cubins = [int(k[3:]) for k in binaries if k.startswith("sm_")]
    same = [a for a in cubins if a // 10 == arch // 10 and a <= arch]
    if same:
        return f"sm_{max(same)}"
    ptx = [int(k[8:]) for k in binaries if k.startswith("compute_") and int(k[8:]) <= arch]
    return f"compute_{max(ptx)}" if ptx else None


class _Pool:
    """Device buffers by rounded size, kept between calls and freed on close."""

    def __init__(self, driver: _Driver):
        self._driver, self._free, self._all = driver, {}, []

    def take(self, nbytes: int) -> int:
        size = max(_ALIGN, -(-nbytes // _ALIGN) * _ALIGN)
        free = self._free.get(size)
        if free:
            return free.pop()
        ptr = ctypes.c_uint64()
        result = self._driver.lib.cuMemAlloc_v2(ctypes.byref(ptr), size)
        self._driver.check(result, "cuMemAlloc_v2", f"out of GPU memory allocating {size} bytes")
        self._all.append((ptr.value, size))
        return ptr.value

    def give(self, ptr: int, nbytes: int) -> None:
        size = max(_ALIGN, -(-nbytes // _ALIGN) * _ALIGN)
        self._free.setdefault(size, []).append(ptr)

    def close(self) -> None:
        for ptr, _ in self._all:
            self._driver.lib.cuMemFree_v2(ptr)
        self._all, self._free = [], {}


class DeviceBuffer:
    """Device memory from the library's pool, given back when the last array over it goes."""

    __slots__ = ("ptr", "nbytes", "_lib", "__weakref__")

    def __init__(self, lib: CudaLibrary, nbytes: int):
        self._lib, self.nbytes = lib, nbytes
        self.ptr = lib._pool.take(nbytes) if nbytes else 0

    def view(self, offset: int, shape, dtype) -> DeviceArray:
        """A tensor at byte `offset` of this buffer (an arena's planned tensor)."""
        return DeviceArray(self, self.ptr + offset, shape, dtype)

    def __del__(self):
        lib = self._lib
        if self.nbytes and lib is not None and lib._open:
            lib._pool.give(self.ptr, self.nbytes)


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]
KDL_CUDA = 2


class _Borrowed:
    """Device memory a DLPack producer (a torch or cupy tensor) lends: its deleter runs
    when the last array over it goes."""

    __slots__ = ("_lib", "nbytes", "_managed", "_owner")

    def __init__(self, lib: CudaLibrary, managed, owner):
        self._lib, self.nbytes, self._managed, self._owner = lib, 0, managed, owner

    def __del__(self):
        m = self._managed
        if m and m.contents.deleter:
            m.contents.deleter(m)


class DeviceArray:
    """A C-contiguous tensor in GPU memory: `shape` and `dtype` as numpy's, the data at
    `ptr` inside `buffer`. `np.asarray(x)` copies it to the host (after the kernels
    launched before it finish); `reshape` is a view, `copy` a copy on the device."""

    __slots__ = ("buffer", "ptr", "shape", "dtype")
    is_device_array = True

    def __init__(self, buffer: DeviceBuffer, ptr: int, shape, dtype):
        self.buffer, self.ptr = buffer, ptr
        self.shape, self.dtype = tuple(int(d) for d in shape), np.dtype(dtype)

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    def reshape(self, shape) -> DeviceArray:
        return DeviceArray(self.buffer, self.ptr, shape, self.dtype)

    def copy(self) -> DeviceArray:
        lib = self.buffer._lib
        out = lib.empty(self.shape, self.dtype)
        if self.nbytes:
            lib._drv.check(lib._drv.lib.cuMemcpyDtoDAsync_v2(out.ptr, self.ptr, self.nbytes,
                                                              lib._stream), "cuMemcpyDtoDAsync_v2")
        return out

    def __array__(self, dtype=None, copy=None):
        out = self.buffer._lib.to_host(self)
        return out if dtype is None else out.astype(dtype)

    def __dlpack_device__(self) -> tuple[int, int]:
        return KDL_CUDA, self.buffer._lib.device_id

    def __dlpack__(self, stream=None, **_):
        """A DLPack capsule of this tensor (torch.from_dlpack, cupy.from_dlpack take it
        without a copy). The kernels that write it are finished first, whatever `stream`
        the consumer names; the memory stays until the consumer's deleter call."""
        self.buffer._lib.synchronize()
        return _export(self)

    def __repr__(self):
        return f"<tcc.rt.cuda.DeviceArray {self.dtype.name}{list(self.shape)}>"


# The C API's capsule functions, each with a prototype of its own: ctypes.pythonapi's
# attributes are shared objects, and one whose argtypes another caller set differently
# would pass the wrong argument.
_PY = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                                 ctypes.c_void_p)(("PyCapsule_New", _PY))
_capsule_is_valid_at = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _PY))
_capsule_pointer_at = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _PY))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _PY))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", _PY))

# DLPack capsules handed out and not yet released, by the address of their DLManagedTensor:
# each keeps its array (so its memory) and its shape alive until the consumer's deleter.
_EXPORTED: dict[int, tuple] = {}
_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@_DELETER
def _release(managed) -> None:
    _EXPORTED.pop(ctypes.addressof(managed.contents), None)


@_CAPSULE_DESTRUCTOR
def _unconsumed(capsule) -> None:
    """A capsule nobody consumed (its name is still "dltensor"): release it here."""
    if _capsule_is_valid_at(capsule, b"dltensor"):
        _EXPORTED.pop(_capsule_pointer_at(capsule, b"dltensor"), None)


def _export(x: DeviceArray):
    managed = DLManagedTensor()
    shape = (ctypes.c_int64 * max(1, x.ndim))(*x.shape)
    t = managed.dl_tensor
    t.data, t.ndim, t.shape, t.byte_offset = x.ptr or None, x.ndim, shape, 0
    t.device.device_type, t.device.device_id = x.__dlpack_device__()
    t.dtype.code, t.dtype.bits = dl_dtype(x.dtype)
    t.dtype.lanes = 1
    managed.deleter = _release
    _EXPORTED[ctypes.addressof(managed)] = (managed, shape, x)
    return _capsule_new(ctypes.addressof(managed), b"dltensor",
                        ctypes.cast(_unconsumed, ctypes.c_void_p))


class CudaLibrary:
    """A pack's CUDA kernels loaded on device 0. Use `call`, then `close()`.

    It is also the VM's device (`device` is itself): `empty`, `from_host`, `to_host` and
    `constant` give and read DeviceArrays, so a pack's tensors stay in GPU memory from
    one kernel to the next and only inputs, outputs and what the host reads move."""

    def __init__(self, binaries: Mapping[str, bytes], kernels: Mapping[str, dict],
                 constants: Iterable[np.ndarray] = (), device: int = 0):
        self._kernels = dict(kernels)
        self._drv = drv = _driver()
        count = ctypes.c_int()
        drv.check(drv.lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount",
                  "no CUDA device found")
        if count.value <= device:
            raise CudaDriverError(f"no CUDA device found: the driver sees {count.value} devices; "
                                  "run CUDA packs on a machine with an NVIDIA GPU")
        self._device = dev = ctypes.c_int()
        self.device_id = device
        drv.check(drv.lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        self.arch = self._attribute(_COMPUTE_CAPABILITY_MAJOR) * 10 + self._attribute(
            _COMPUTE_CAPABILITY_MINOR)
        chosen = pick_binary(binaries, self.arch)
        if chosen is None:
            have = ", ".join(sorted(binaries))
            raise CudaDriverError(
                f"the pack has CUDA code for {have} and this GPU is sm_{self.arch}; compile "
                f"again with --target 'cuda -arch=sm_{self.arch}'")
        self.binary = chosen
        self._ctx = ctypes.c_void_p()
        drv.check(drv.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self._ctx), dev.value),
                  "cuDevicePrimaryCtxRetain")
        drv.check(drv.lib.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")
        image = bytes(binaries[chosen]) + (b"\0" if chosen.startswith("compute_") else b"")
        self._image = ctypes.create_string_buffer(image, len(image))
        self._module = ctypes.c_void_p()
        drv.check(drv.lib.cuModuleLoadData(ctypes.byref(self._module), self._image),
                  "cuModuleLoadData", f"the GPU driver cannot load the pack's {chosen} code")
        self._stream = ctypes.c_void_p()
        drv.check(drv.lib.cuStreamCreate(ctypes.byref(self._stream), 0), "cuStreamCreate")
        self._functions: dict[str, ctypes.c_void_p] = {}
        self._pool = _Pool(drv)
        # The pack's weights (read-only, mapped for the module's life) by address and size:
        # their device copies are made once.
        self._keep = [c for c in constants if c.nbytes]
        self._constants = {(c.ctypes.data, c.nbytes) for c in self._keep}
        self._uploaded: dict[tuple[int, int], int] = {}
        self._constant_arrays: dict[str, DeviceArray] = {}
        self._events: tuple | None = None  # (start, stop), made on the first timed call
        self._open = True

    def _attribute(self, which: int) -> int:
        out = ctypes.c_int()
        self._drv.check(self._drv.lib.cuDeviceGetAttribute(ctypes.byref(out), which,
                                                            self._device.value),
                        "cuDeviceGetAttribute")
        return out.value

    def _function(self, name: str) -> ctypes.c_void_p:
        fn = self._functions.get(name)
        if fn is None:
            fn = ctypes.c_void_p()
            self._drv.check(self._drv.lib.cuModuleGetFunction(
                ctypes.byref(fn), self._module, name.encode()), "cuModuleGetFunction",
                f"the pack's CUDA code has no function {name!r}; rebuild the pack")
            self._functions[name] = fn
        return fn

    def has(self, symbol: str) -> bool:
        return symbol in self._kernels

    @property
    def device(self) -> CudaLibrary:
        return self

    def empty(self, shape, dtype) -> DeviceArray:
        """An uninitialized device tensor."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(int(d) for d in shape) * dtype.itemsize
        buffer = DeviceBuffer(self, nbytes)
        return DeviceArray(buffer, buffer.ptr, shape, dtype)

    def buffer(self, nbytes: int) -> DeviceBuffer:
        """Device memory for an arena of planned tensors."""
        return DeviceBuffer(self, nbytes)

    def from_dlpack(self, x, what: str) -> DeviceArray:
        """A tensor on this GPU given through DLPack (`__dlpack__`), without a copy: the
        producer's work on it is ordered before this library's stream, and its memory is
        held until the array goes."""
        device_type, device_id = x.__dlpack_device__()
        if int(device_type) != KDL_CUDA or int(device_id) != self.device_id:
            raise RunInputError(f"{what} is on DLPack device {int(device_type)}:{int(device_id)}; "
                              f"pass a numpy array or a tensor on CUDA device {self.device_id}")
        capsule = x.__dlpack__(stream=self._stream.value or 1)
        managed = ctypes.cast(_capsule_pointer(capsule, b"dltensor"),
                              ctypes.POINTER(DLManagedTensor))
        _capsule_set_name(capsule, b"used_dltensor")  # ours now: its deleter is ours to run
        lender = _Borrowed(self, managed, x)
        t = managed.contents.dl_tensor
        shape = tuple(t.shape[i] for i in range(t.ndim))
        name = DL_DTYPE_NAMES.get((t.dtype.code, t.dtype.bits))
        if name is None or t.dtype.lanes != 1 or name == "bfloat16":
            raise RunInputError(f"{what} has DLPack dtype code {t.dtype.code} bits {t.dtype.bits} "
                              f"lanes {t.dtype.lanes}, which tcc's kernels do not take")
        if t.strides:
            expected, compact = 1, True
            for d in reversed(range(t.ndim)):
                compact = compact and (shape[d] == 1 or t.strides[d] == expected)
                expected *= shape[d]
            if not compact:
                raise RunInputError(f"{what} is not contiguous; pass x.contiguous()")
        return DeviceArray(lender, (t.data or 0) + t.byte_offset, shape, numpy_dtype(name))

    def from_host(self, a: np.ndarray) -> DeviceArray:
        a = a if a.flags.c_contiguous else a.copy(order="C")  # (ascontiguousarray: 0-d -> 1-d)
        out = self.empty(a.shape, a.dtype)
        if a.nbytes:
            self._drv.check(self._drv.lib.cuMemcpyHtoDAsync_v2(out.ptr, a.ctypes.data, a.nbytes,
                                                                self._stream), "cuMemcpyHtoDAsync_v2")
            # the copy reads `a` later on the stream: wait, since the caller may drop it
            self.synchronize()
        return out

    def to_host(self, x: DeviceArray) -> np.ndarray:
        out = np.empty(x.shape, x.dtype)
        if x.nbytes:
            self._drv.check(self._drv.lib.cuMemcpyDtoHAsync_v2(out.ctypes.data, x.ptr, x.nbytes,
                                                                self._stream), "cuMemcpyDtoHAsync_v2")
        self.synchronize()
        return out

    def constant(self, name: str, a: np.ndarray) -> DeviceArray:
        """The device copy of weight `name`, made once."""
        kept = self._constant_arrays.get(name)
        if kept is None:
            kept = self._constant_arrays[name] = self.from_host(a)
        return kept

    def is_constant(self, x) -> bool:
        """Whether `x` is (a view of) one of the pack's weights on the device."""
        buffer = getattr(x, "buffer", None)
        return any(buffer is c.buffer for c in self._constant_arrays.values())

    def gpu_seconds(self, work) -> float:
        """Run `work()` (a kernel call) between two CUDA events on the stream; the GPU's
        time between them, in seconds (`tcc run --profile` shows it per kernel)."""
        drv = self._drv
        if self._events is None:
            events = (ctypes.c_void_p(), ctypes.c_void_p())
            for e in events:
                drv.check(drv.lib.cuEventCreate(ctypes.byref(e), 0), "cuEventCreate")
            self._events = events
        start, stop = self._events
        drv.check(drv.lib.cuEventRecord(start, self._stream), "cuEventRecord")
        work()
        drv.check(drv.lib.cuEventRecord(stop, self._stream), "cuEventRecord")
        drv.check(drv.lib.cuEventSynchronize(stop), "cuEventSynchronize",
                  "a kernel failed on the GPU")
        ms = ctypes.c_float()
        drv.check(drv.lib.cuEventElapsedTime(ctypes.byref(ms), start, stop), "cuEventElapsedTime")
        return ms.value / 1e3

    def synchronize(self) -> None:
        """Wait for everything launched so far; a kernel that failed on the GPU says so here."""
        self._drv.check(self._drv.lib.cuStreamSynchronize(self._stream), "cuStreamSynchronize",
                        "a kernel failed on the GPU")

    def set_num_threads(self, n: int) -> None:
        """Host threads do not run CUDA kernels: accepted and ignored."""

    def call(self, symbol: str, arrays: Sequence[np.ndarray]) -> None:
        """Run kernel `symbol` on `arrays` (inputs then outputs, written in place)."""
        if not self._open:
            raise KernelError(f"cannot call kernel {symbol!r}: the kernel library is closed")
        spec = self._kernels.get(symbol)
        if spec is None:
            raise KernelError(f"no CUDA kernel named {symbol!r}; check the pack's kernel table")
        sizes = _bind_sizes(symbol, spec, arrays)
        drv, stream = self._drv, self._stream
        taken: list[tuple[int, int]] = []
        pointers: list[int] = []
        back: list[tuple[np.ndarray, int]] = []  # host arrays the kernel writes
        try:
            for i, a in enumerate(arrays):
                if spec["params"][i].get("scalar"):
                    continue
                if isinstance(a, DeviceArray):
                    pointers.append(a.ptr)
                    continue
                written = i in spec["writes"]
                pointers.append(self._upload(a, written, taken))
                if written and a.nbytes:
                    back.append((a, pointers[-1]))
            for ws in spec["workspaces"]:
                (count,) = eval_shape(ws["count"], sizes, spec["size_vars"])
                nbytes = count * numpy_dtype(ws["dtype"]).itemsize
                ptr = self._pool.take(nbytes) if nbytes else 0
                if nbytes:
                    taken.append((ptr, nbytes))
                pointers.append(ptr)
            params = [ctypes.c_uint64(p) for p in pointers]
            params += [ctypes.c_int64(s) for s in sizes]
            argv = (ctypes.c_void_p * len(params))(
                *[ctypes.cast(ctypes.byref(p), ctypes.c_void_p) for p in params])
            for launch in spec["launches"]:
                grid = eval_shape(launch["grid"], sizes, spec["size_vars"])
                if min(grid) <= 0:
                    continue  # an empty tensor: nothing to compute
                bx, by, bz = launch["block"]
                drv.check(drv.lib.cuLaunchKernel(
                    self._function(launch["function"]), *grid, bx, by, bz, 0, stream, argv,
                    None), "cuLaunchKernel", f"{symbol}: launching {launch['function']} failed")
            for a, ptr in back:
                drv.check(drv.lib.cuMemcpyDtoHAsync_v2(a.ctypes.data, ptr, a.nbytes, stream),
                          "cuMemcpyDtoHAsync_v2")
            if taken:  # host memory or pooled buffers for this call only: wait for them
                self.synchronize()
        finally:
            for ptr, nbytes in taken:
                self._pool.give(ptr, nbytes)

    def _upload(self, a: np.ndarray, written: bool, taken: list) -> int:
        """The device copy of `a`: one of the pack's weights is copied once and kept; any
        other array is copied into a pooled buffer for this call."""
        if not a.nbytes:
            return 0
        if not a.flags.c_contiguous:
            raise KernelError("a CUDA kernel's argument must be C-contiguous")
        key = (a.ctypes.data, a.nbytes)
        constant = not written and key in self._constants
        if constant and key in self._uploaded:
            return self._uploaded[key]
        ptr = self._pool.take(a.nbytes)
        drv = self._drv
        drv.check(drv.lib.cuMemcpyHtoDAsync_v2(ptr, a.ctypes.data, a.nbytes, self._stream),
                  "cuMemcpyHtoDAsync_v2")
        if constant:
            self._uploaded[key] = ptr
        else:
            taken.append((ptr, a.nbytes))
        return ptr

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        drv = self._drv
        drv.lib.cuStreamSynchronize(self._stream)
        self._pool.close()
        self._uploaded.clear()
        for event in self._events or ():
            drv.lib.cuEventDestroy_v2(event)
        drv.lib.cuStreamDestroy_v2(self._stream)
        drv.lib.cuModuleUnload(self._module)
        drv.lib.cuDevicePrimaryCtxRelease_v2(self._device.value)

    def __enter__(self) -> CudaLibrary:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _bind_sizes(symbol: str, spec: dict, arrays: list[np.ndarray]) -> list[int]:
    """The kernel's size variables, read off the arrays (shapes, and the values of scalar
    parameters), with every dtype, dimension and precondition checked as the CPU kernels
    check them: a GPU kernel given the wrong shapes would read out of bounds."""
    params, names = spec["params"], spec["size_vars"]
    if len(arrays) != len(params):
        raise KernelError(f"{symbol}: expected {len(params)} arguments, got {len(arrays)}")
    for i, (a, p) in enumerate(zip(arrays, params)):
        rank = 0 if p.get("scalar") else p["shape"][0]
        if a.dtype != numpy_dtype(p["dtype"]) or a.ndim != rank:
            raise KernelError(f"{symbol}: argument {i} is {a.dtype} of rank {a.ndim}; the kernel "
                              f"takes {p['dtype']} of rank {rank}")
    sizes = [int(np.asarray(arrays[i])) if axis < 0 else arrays[i].shape[axis]
             for i, axis in spec["bind"]]
    for i, (a, p) in enumerate(zip(arrays, params)):
        if not p.get("scalar"):
            want = eval_shape(p["shape"], sizes, names)
            if a.shape != want:
                raise KernelError(f"{symbol}: argument {i} has shape {a.shape}; the kernel "
                                  f"takes {want}")
    failed = [k for k, ok in enumerate(eval_shape(spec["preconditions"], sizes, names)) if not ok]
    if failed:
        values = ", ".join(f"{n} = {v}" for n, v in zip(names, sizes))
        raise KernelError(f"{symbol}: these sizes ({values}) break the kernel's precondition "
                          f"{failed[0]}; check the input shapes")
    return sizes


def load_cuda_library(binaries: Mapping[str, bytes], kernels: Mapping[str, dict],
                      constants: Iterable[np.ndarray] = ()) -> CudaLibrary:
    """A pack's CUDA kernels (its `device_kernels["cuda"]`, docs/tvmpack.md) on device 0;
    `constants` are the pack's weights, copied to the device once."""
    return CudaLibrary(binaries, kernels, constants)
