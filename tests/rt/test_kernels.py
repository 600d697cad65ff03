"""The CPU kernel loader: DLTensor marshalling, errors from kernels and from misuse, lifetime."""

import ml_dtypes
import numpy as np
import pytest

from tcc.emit.llvm import compile_prim_funcs
from tcc.emit.support import c_compiler, link_shared
from tcc.ir.parser import parse_module
from tcc.rt.errors import KernelError
from tcc.rt.kernels import dl_dtype, load_cpu_library

pytestmark = pytest.mark.skipif(c_compiler() is None, reason="no C compiler to link kernels")

SRC = """
@prim_func
def fill(A: Buffer((n,), "int32"), v: int32):
    for i in parallel(0, n):
        A[i] = v + int32(VALUE)


@prim_func
def copy(A: Buffer((n,), "float32"), B: Buffer((n,), "float32")):
    for i in serial(0, n):
        B[i] = A[i]
"""


def build(value: int = 0) -> bytes:
    return compile_prim_funcs(
        parse_module(SRC.replace("VALUE", str(value))).prim_funcs
    ).shared_object


@pytest.fixture(scope="module")
def so():
    return build()


def test_call_writes_outputs_in_place(so):
    with load_cpu_library(so) as lib:
        a = np.zeros(10, np.int32)
        lib.call("fill", [a, np.int32(7)])  # a numpy scalar becomes a 0-d array
        np.testing.assert_array_equal(a, 7)
        src = np.arange(5, dtype=np.float32)
        src.flags.writeable = False  # read-only inputs (memory-mapped weights) are fine
        out = np.zeros(5, np.float32)
        lib.call("copy", [src, out])
        np.testing.assert_array_equal(out, src)
        assert lib.has("copy") and not lib.has("nope")


def test_each_load_is_its_own_library():
    """Libraries with the same symbols, loaded one after another or at once, stay apart."""
    first = load_cpu_library(build(1))
    second = load_cpu_library(build(2))
    a, b = np.zeros(3, np.int32), np.zeros(3, np.int32)
    first.call("fill", [a, np.int32(0)])
    second.call("fill", [b, np.int32(0)])
    first.close()
    second.close()
    with load_cpu_library(build(3)) as third:
        c = np.zeros(3, np.int32)
        third.call("fill", [c, np.int32(0)])
    assert (a[0], b[0], c[0]) == (1, 2, 3)


def test_thread_count(so):
    with load_cpu_library(so) as lib:
        for n in (1, 2, 0):
            lib.set_num_threads(n)
            a = np.zeros(1000, np.int32)
            lib.call("fill", [a, np.int32(4)])
            assert (a == 4).all()
        with pytest.raises(KernelError, match="thread count must be 0 .* or positive, got -1"):
            lib.set_num_threads(-1)


@pytest.mark.parametrize(
    "symbol, args, message",
    [
        (
            "copy",
            lambda: [np.zeros((4, 2), np.float32)[:, 0], np.zeros(4, np.float32)],
            r"copy: argument 0 is not C-contiguous .*; pass np.ascontiguousarray\(x\)",
        ),
        (
            "copy",
            lambda: [np.zeros(4, np.complex64), np.zeros(4, np.float32)],
            "arrays of dtype complex64 cannot be passed to CPU kernels",
        ),
        (
            "copy",
            lambda: [np.zeros(4, ml_dtypes.bfloat16), np.zeros(4, np.float32)],
            "arrays of dtype bfloat16 cannot be passed",
        ),
        (
            "copy",
            lambda: [np.zeros(4, np.int32), np.zeros(4, np.float32)],
            r"^copy: argument 0 'A' has dtype int32 \(code 0, bits 32, lanes 1\); expected float32",
        ),
        (
            "fill",
            lambda: [np.zeros(4, np.int32), np.zeros(1, np.int32)],
            r"argument 1 'v' has rank 1; expected a 0-d int32 tensor \(a scalar\)",
        ),
        ("missing", lambda: [], "no kernel named 'missing' in the library"),
    ],
)
def test_errors(so, symbol, args, message):
    with load_cpu_library(so) as lib, pytest.raises(KernelError, match=message):
        lib.call(symbol, args())


def test_closed_library_refuses_calls(so):
    lib = load_cpu_library(so)
    lib.close()
    lib.close()  # closing twice is harmless
    with pytest.raises(KernelError, match="the kernel library is closed"):
        lib.call("copy", [np.zeros(1, np.float32), np.zeros(1, np.float32)])
    with pytest.raises(KernelError, match="the kernel library is closed"):
        lib.set_num_threads(1)


def test_foreign_or_broken_shared_objects():
    with pytest.raises(KernelError, match="cannot load the kernels' shared object"):
        load_cpu_library(b"\x7fELF not really")
    import llvmlite.binding as llvm

    from tcc.target import host_target

    mod = llvm.parse_assembly("define i32 @f() {\n  ret i32 0\n}\n")
    mod.triple = host_target().triple
    foreign = link_shared([host_target().target_machine().emit_object(mod)], [])
    with pytest.raises(KernelError, match="was not built by tcc's CPU backend"):
        load_cpu_library(foreign)


def test_dl_dtype_codes():
    assert dl_dtype(np.float16) == (2, 16)
    assert dl_dtype(np.uint64) == (1, 64)
    assert dl_dtype(np.int8) == (0, 8)
    assert dl_dtype(np.bool_) == (6, 8)
