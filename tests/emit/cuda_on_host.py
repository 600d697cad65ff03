"""Runs the CUDA C of `tcc.emit.cuda` on this CPU, to test the code generator without a GPU.

The source is compiled as C++ with a shim for what CUDA adds to C++ (`threadIdx` and
`blockIdx` as globals, the qualifiers as nothing, the device math functions from libm),
and each launch runs its blocks and threads one after another. That is the GPU's result
for launches whose threads share nothing, the thread-per-output schedules; barriers and
shared memory are the GPU-semantics executor's to check (tcc.ir.gpu_eval). `build_packed`
and `build_fake_driver` make the same host code run whole CUDA packs through tcc.rt.cuda
and a stand-in driver (tests/rt/fake_libcuda.c).
"""

from __future__ import annotations

import ctypes
import itertools
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tcc.emit.cuda import CudaKernel
from tcc.emit.nvrtc import nvrtc_available
from tcc.ir import expr as E

SHIM = r"""
#include <cmath>
#include <cstring>
#include <cstdint>
struct tcc_dim3 { unsigned x, y, z; };
static tcc_dim3 threadIdx, blockIdx;
extern "C" void tcc_set_ids(unsigned bx, unsigned by, unsigned bz,
                            unsigned tx, unsigned ty, unsigned tz) {
  blockIdx = {bx, by, bz}; threadIdx = {tx, ty, tz}; }
typedef _Float16 __half;  /* the kernels only convert it (float16 is computed in float) */
extern "C" { void (*tcc_barrier)(void) = 0; }
static inline void __syncthreads() { if (tcc_barrier) tcc_barrier(); }
#define __shared__ static
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
using namespace std;
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
"""


def _host_source(source: str) -> str:
    """The generated source without the CUDA headers the shim stands in for."""
    return source.replace("#include <cuda_fp16.h>\n", "")


def cxx() -> str | None:
    return shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")


# What a test that runs CUDA packs through the stand-in driver needs: NVRTC to compile the
# pack, and a C++ compiler to build its kernels for this CPU.
NEEDS_STAND_IN = [
    pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not installed (pip install 'tcc[cuda]')"),
    pytest.mark.skipif(cxx() is None, reason="no C++ compiler for the stand-in driver"),
]


def build(source: str, folder: Path) -> ctypes.CDLL:
    path = folder / "kernels.cpp"
    path.write_text(SHIM + _host_source(source))
    lib = folder / "kernels.so"
    subprocess.run([cxx(), "-std=c++17", "-O1", "-fPIC", "-shared", "-ffp-contract=off",
                    "-o", str(lib), str(path)], check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(lib))


_LAUNCH = re.compile(r'^extern "C" __global__ void __launch_bounds__\(\d+\) (\w+)\((.*)\) \{$', re.M)


def build_packed(source: str, folder: Path) -> Path:
    """A host library of `source` (a pack's `kernels/cuda.cu`) for tests/rt/fake_libcuda.c:
    beside each launch `f`, `f_packed(void **params)`, which calls it with the arguments
    `cuLaunchKernel` is given, as the driver unpacks them on a GPU, and `f_barriers`, 0
    when `f` has no barrier (its threads then run as plain calls, not coroutines)."""
    wrappers = []
    launches = list(_LAUNCH.finditer(source))
    for k, match in enumerate(launches):
        name, params = match.groups()
        types = [p.rsplit(" ", 1)[0] for p in params.split(", ")] if params else []
        args = ", ".join(f"*({t}*)p[{i}]" for i, t in enumerate(types))
        wrappers.append(f'extern "C" void {name}_packed(void **p) {{ {name}({args}); }}')
        end = launches[k + 1].start() if k + 1 < len(launches) else len(source)
        barriers = int("__syncthreads()" in source[match.end():end])
        wrappers.append(f'extern "C" const int {name}_barriers = {barriers};')
    path = folder / "kernels.cpp"
    path.write_text(SHIM + _host_source(source) + "\n" + "\n".join(wrappers) + "\n")
    lib = folder / "kernels.so"
    subprocess.run([cxx(), "-std=c++17", "-O1", "-fPIC", "-shared", "-ffp-contract=off",
                    "-o", str(lib), str(path)], check=True, capture_output=True, text=True)
    return lib


def build_fake_driver(folder: Path) -> Path:
    """tests/rt/fake_libcuda.c as a shared library, the CUDA driver tcc.rt.cuda loads
    through $TCC_CUDA_DRIVER."""
    lib = folder / "libcuda-fake.so"
    source = Path(__file__).resolve().parents[1] / "rt" / "fake_libcuda.c"
    cc = shutil.which("cc") or shutil.which("gcc") or cxx()
    subprocess.run([cc, "-O1", "-fPIC", "-shared", "-o", str(lib), str(source), "-ldl"],
                   check=True, capture_output=True, text=True)
    return lib


def run(lib: ctypes.CDLL, kernel: CudaKernel, arrays: list[np.ndarray]) -> None:
    """Run `kernel`'s launches on `arrays` (its buffers, outputs written in place)."""
    sizes = {}
    for buf, arr in zip(kernel.buffers, arrays):
        for dim, n in zip(buf.shape, arr.shape):
            if isinstance(dim, E.Var):
                sizes[dim] = n
    spaces = [np.zeros(int(E.evaluate(n, sizes)), dtype=dt) for _, dt, n in kernel.workspaces]
    args = [a.ctypes.data_as(ctypes.c_void_p) for a in (*arrays, *spaces)]
    args += [ctypes.c_longlong(sizes[v]) for v in kernel.size_vars]
    for launch in kernel.launches:
        fn = getattr(lib, launch.symbol)
        grid = [int(E.evaluate(g, sizes)) for g in launch.grid]
        for bz, by, bx in itertools.product(*(range(n) for n in reversed(grid))):
            for tz, ty, tx in itertools.product(*(range(n) for n in reversed(launch.block))):
                lib.tcc_set_ids(bx, by, bz, tx, ty, tz)
                fn(*args)
