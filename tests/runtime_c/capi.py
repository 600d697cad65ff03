"""A ctypes binding of the C runtime's library (runtime_c/include/tcc_runtime.h), so tests
can run packs through the C VM in-process and compare with tcc.rt array by array.

`build_runtime(dir)` builds the library with make; `CRuntime(libpath).load(pack)` returns a
`CModule` whose `run(name, arrays)` returns numpy arrays (copies of the C tensors) or raises
`CRuntimeError(status, message)`.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np

from tcc.rt.tensor import numpy_dtype

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"

STATUS = {0: "ok", 1: "invalid argument", 2: "i/o error", 3: "invalid pack", 4: "out of memory",
          5: "invalid input", 6: "kernel error"}


class CRuntimeError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"{STATUS.get(status, status)}: {message}")
        self.status = STATUS.get(status, str(status))
        self.message = message


def build_runtime(build: Path, extra_cflags: str = "") -> Path:
    """`make` the runtime into `build` (a directory per test worker); returns `build`."""
    args = ["make", "-s", "-j2", "-C", str(RUNTIME), f"BUILD={build}"]
    if extra_cflags:
        args.append(f"EXTRA_CFLAGS={extra_cflags}")
    subprocess.run(args, check=True, capture_output=True, text=True)
    return build


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("rank", ctypes.c_size_t),
                ("dims", ctypes.c_void_p)]


class CRuntime:
    """libtccrt.so loaded with ctypes."""

    def __init__(self, library: Path):
        lib = self.lib = ctypes.CDLL(str(library))
        p, st, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        sigs = {
            "tccrt_last_error": (ctypes.c_char_p, []),
            "tccrt_pack_open_file": (st, [ctypes.c_char_p, ctypes.POINTER(p)]),
            "tccrt_pack_release": (None, [p]),
            "tccrt_module_load": (st, [p, ctypes.POINTER(p)]),
            "tccrt_module_release": (None, [p]),
            "tccrt_module_set_num_threads": (st, [p, ctypes.c_int]),
            "tccrt_module_run": (st, [p, ctypes.c_char_p, ctypes.POINTER(p), sz,
                                      ctypes.POINTER(p), sz]),
            "tccrt_tensor_wrap": (st, [p, ctypes.c_char_p, sz, ctypes.POINTER(ctypes.c_int64),
                                       ctypes.POINTER(p)]),
            "tccrt_tensor_release": (None, [p]),
            "tccrt_tensor_dtype": (ctypes.c_char_p, [p]),
            "tccrt_tensor_rank": (sz, [p]),
            "tccrt_tensor_shape": (ctypes.POINTER(ctypes.c_int64), [p]),
            "tccrt_tensor_data": (p, [p]),
            "tccrt_tensor_nbytes": (sz, [p]),
            "tccrt_pack_signature_count": (st, [p, sz, ctypes.c_int, ctypes.POINTER(sz)]),
            "tccrt_pack_signature_tensor": (st, [p, sz, ctypes.c_int, sz, ctypes.POINTER(TensorInfo)]),
            "tccrt_pack_function_find": (st, [p, ctypes.c_char_p, ctypes.POINTER(sz)]),
        }
        for name, (restype, argtypes) in sigs.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes

    def check(self, status: int) -> None:
        if status:
            raise CRuntimeError(status, self.lib.tccrt_last_error().decode())

    def load(self, pack_path) -> CModule:
        pack = ctypes.c_void_p()
        self.check(self.lib.tccrt_pack_open_file(str(pack_path).encode(), ctypes.byref(pack)))
        module = ctypes.c_void_p()
        status = self.lib.tccrt_module_load(pack, ctypes.byref(module))
        if status:
            self.lib.tccrt_pack_release(pack)
        self.check(status)
        return CModule(self, module, pack)


class CModule:
    def __init__(self, rt: CRuntime, handle: ctypes.c_void_p, pack: ctypes.c_void_p):
        self.rt, self.handle, self.pack = rt, handle, pack  # the pack answers signature questions
        self._outputs: dict[str, int] = {}

    def close(self) -> None:
        if self.handle:
            self.rt.lib.tccrt_module_release(self.handle)
            self.rt.lib.tccrt_pack_release(self.pack)
            self.handle = self.pack = None

    def __del__(self):
        self.close()

    def set_num_threads(self, n: int) -> None:
        self.rt.check(self.rt.lib.tccrt_module_set_num_threads(self.handle, n))

    def num_outputs(self, function: str) -> int:
        if function not in self._outputs:
            lib, index, count = self.rt.lib, ctypes.c_size_t(), ctypes.c_size_t()
            self.rt.check(lib.tccrt_pack_function_find(self.pack, function.encode(), ctypes.byref(index)))
            self.rt.check(lib.tccrt_pack_signature_count(self.pack, index, 1, ctypes.byref(count)))
            self._outputs[function] = count.value
        return self._outputs[function]

    def run(self, function: str, arrays, num_outputs: int | None = None) -> list[np.ndarray]:
        """Run `function` on numpy `arrays`; the outputs come back as numpy copies."""
        lib = self.rt.lib
        n_out = self.num_outputs(function) if num_outputs is None else num_outputs
        keep = [np.require(a, requirements="C") for a in arrays]  # keeps 0-d arrays 0-d
        wanted = self.input_dtypes(function)
        inputs = (ctypes.c_void_p * max(len(keep), 1))()
        try:
            for i, a in enumerate(keep):
                shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
                t = ctypes.c_void_p()
                # a float32 array holds bfloat16 values where the signature asks for them
                name = wanted[i] if i < len(wanted) and wanted[i] == "bfloat16" and a.dtype == np.float32 else a.dtype.name
                self.rt.check(lib.tccrt_tensor_wrap(a.ctypes.data, name.encode(), a.ndim,
                                                    shape, ctypes.byref(t)))
                inputs[i] = t
            outputs = (ctypes.c_void_p * max(n_out, 1))()
            self.rt.check(lib.tccrt_module_run(self.handle, function.encode(), inputs, len(keep),
                                               outputs, n_out))
            return [self._to_numpy(outputs[i]) for i in range(n_out)]
        finally:
            for i in range(len(keep)):
                lib.tccrt_tensor_release(inputs[i])

    def input_dtypes(self, function: str) -> list[str]:
        lib, index, count = self.rt.lib, ctypes.c_size_t(), ctypes.c_size_t()
        self.rt.check(lib.tccrt_pack_function_find(self.pack, function.encode(), ctypes.byref(index)))
        self.rt.check(lib.tccrt_pack_signature_count(self.pack, index, 0, ctypes.byref(count)))
        out = []
        for k in range(count.value):
            info = TensorInfo()
            self.rt.check(lib.tccrt_pack_signature_tensor(self.pack, index, 0, k, ctypes.byref(info)))
            out.append(info.dtype.decode())
        return out

    def _to_numpy(self, t) -> np.ndarray:
        lib = self.rt.lib
        try:
            dtype = numpy_dtype(lib.tccrt_tensor_dtype(t).decode())
            shape = tuple(lib.tccrt_tensor_shape(t)[d] for d in range(lib.tccrt_tensor_rank(t)))
            nbytes = lib.tccrt_tensor_nbytes(t)
            raw = ctypes.string_at(lib.tccrt_tensor_data(t), nbytes) if nbytes else b""
            return np.frombuffer(raw, dtype).reshape(shape).copy()
        finally:
            lib.tccrt_tensor_release(t)
