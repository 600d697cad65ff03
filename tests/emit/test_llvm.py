"""The LLVM backend: PrimFuncs (written in the IR text format) compiled, loaded and run on numpy."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

from tcc.emit.llvm import CodegenError, build_module, compile_prim_funcs, nest_work
from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.parser import parse_module
from tcc.lower.rules.cpu.machine import MIN_PARALLEL_WORK
from tcc.rt.errors import KernelError
from tcc.rt.kernels import load_cpu_library
from tcc.target import parse_target

RNG = np.random.default_rng(0)


def compile_text(src: str, target: str = "llvm"):
    return compile_prim_funcs(parse_module(src).prim_funcs, target)


def load(src: str):
    return load_cpu_library(compile_text(src).shared_object)


def unoptimized_ir(src: str) -> str:
    return str(build_module(parse_module(src).prim_funcs, parse_target("llvm"))[0])


def function_ir(text: str, name: str) -> str:
    """The definition of function `name` in LLVM IR text (optimized or not)."""
    start = re.search(rf'define [^\n]*@"?{re.escape(name)}"?\(', text).start()
    return text[start: text.index("\n}\n", start)]


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


CORE = """
@prim_func
def add(A: Buffer((n, 10), "float32"), B: Buffer((n, 10), "float32"), C: Buffer((n, 10), "float32")):
    for i in serial(0, n):
        for j in serial(0, 10):
            with block("C"):
                vi = axis.spatial(n, i)
                vj = axis.spatial(10, j)
                reads(A[vi, vj], B[vi, vj])
                writes(C[vi, vj])
                C[vi, vj] = A[vi, vj] + B[vi, vj]


@prim_func
def matmul(A: Buffer((n, k), "float32"), B: Buffer((k, m), "float32"), C: Buffer((n, m), "float32")):
    for i in serial(0, n):
        for j in serial(0, m):
            for r in serial(0, k):
                with block("C"):
                    vi = axis.spatial(n, i)
                    vj = axis.spatial(m, j)
                    vr = axis.reduce(k, r)
                    with init():
                        C[vi, vj] = 0.0
                    C[vi, vj] = C[vi, vj] + A[vi, vr] * B[vr, vj]


@prim_func
def relu_or_neg(A: Buffer((n,), "float64"), B: Buffer((n,), "float64")):
    for i in serial(0, n):
        if A[i] > float64(0.0):
            B[i] = A[i]
        else:
            B[i] = float64(0.0) - A[i] * float64(2.0)


@prim_func
def parallel_sum_rows(A: Buffer((n, 33), "float32"), B: Buffer((n,), "float32")):
    for i in parallel(0, n):
        for j in serial(0, 33):
            with block("B"):
                vi = axis.spatial(n, i)
                vj = axis.reduce(33, j)
                with init():
                    B[vi] = 0.0
                B[vi] = B[vi] + A[vi, vj]


@prim_func
def scale(A: Buffer((n,), "int32"), B: Buffer((n,), "int32"), s: int32):
    for i in serial(0, n):
        B[i] = A[i] * s


@prim_func
def twice(A: Buffer((n,), "float32"), B: Buffer((n * 2,), "float32")):
    for i in serial(0, n * 2):
        B[i] = A[i // 2]
"""


@pytest.fixture(scope="module")
def core():
    with load(CORE) as lib:
        yield lib


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_add_with_symbolic_size(core, n):
    a, b = rand(n, 10), rand(n, 10)
    c = np.zeros_like(a)
    core.call("add", [a, b, c])
    np.testing.assert_array_equal(c, a + b)


def test_matmul_reduction_with_init(core):
    a, b = rand(13, 37), rand(37, 5)
    c = np.full((13, 5), 99.0, np.float32)  # init must overwrite what is there
    core.call("matmul", [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_if_else(core):
    a = rand(100, dtype="float64")
    b = np.zeros_like(a)
    core.call("relu_or_neg", [a, b])
    np.testing.assert_array_equal(b, np.where(a > 0, a, -a * 2))


@pytest.mark.parametrize("threads", [1, 2, 0])
def test_parallel_loop_with_thread_count(core, threads):
    a = rand(257, 33)
    b = np.zeros(257, np.float32)
    core.set_num_threads(threads)
    core.call("parallel_sum_rows", [a, b])
    core.set_num_threads(0)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_parallel_loop_calls_the_openmp_runtime():
    src = """
@prim_func
def who(T_: Buffer((n,), "int32")):
    for i in parallel(0, n):
        T_[i] = int32(1)
"""
    assert "GOMP_parallel" in compile_text(src).llvm_ir


def test_scalar_parameter_is_a_0d_tensor(core):
    a = np.arange(5, dtype=np.int32)
    b = np.zeros_like(a)
    core.call("scale", [a, b, np.array(3, np.int32)])
    np.testing.assert_array_equal(b, a * 3)


def test_expression_dimension_is_checked(core):
    a = rand(4)
    b = np.zeros(8, np.float32)
    core.call("twice", [a, b])
    np.testing.assert_array_equal(b, np.repeat(a, 2))
    with pytest.raises(KernelError, match=r"argument 1 'B' dimension 0 is 7; expected n \* 2 = 8"):
        core.call("twice", [a, np.zeros(7, np.float32)])


# ---------------------------------------------------------------------------------------------
# argument checks


@pytest.mark.parametrize(
    "args, message",
    [
        (lambda: [rand(3, 10), rand(3, 10)], r"^add: expected 3 arguments, got 2$"),
        (
            lambda: [rand(3, 10), rand(3, 10), rand(30)],
            r"argument 2 'C' has rank 1; expected a 2-d float32 tensor",
        ),
        (
            lambda: [rand(3, 10), rand(3, 10, dtype="float64"), rand(3, 10)],
            r"argument 1 'B' has dtype float64 \(code 2, bits 64, lanes 1\); expected float32",
        ),
        (
            lambda: [rand(3, 9), rand(3, 10), rand(3, 10)],
            r"argument 0 'A' dimension 1 is 9; expected 10",
        ),
        (
            lambda: [rand(3, 10), rand(4, 10), rand(3, 10)],
            r"argument 1 'B' dimension 0 is 4; expected n = 3 \(from argument 0 'A' dimension 0\)",
        ),
    ],
)
def test_wrong_arguments_raise_kernel_error(core, args, message):
    with pytest.raises(KernelError, match=message):
        core.call("add", args())


def test_non_compact_strides_are_rejected(core):
    arrays = [rand(3, 10), rand(3, 10), np.zeros((3, 10), np.float32)]
    ptrs, keep = _dl_tensors(arrays, strides=[(10, 1), (20, 1), (10, 1)])
    fn = core._kernel("add")
    assert fn(ptrs, 3) != 0
    assert (
        "argument 1 'B' is not compact: dimension 0 has stride 20, expected 10" in core.last_error()
    )
    tensors = keep[-3:]
    tensors[1].strides = tensors[0].strides  # explicit compact strides are fine
    assert fn(ptrs, 3) == 0
    np.testing.assert_array_equal(arrays[2], arrays[0] + arrays[1])


def _dl_tensors(arrays, strides=None, devices=None):
    """DLTensor pointers for `arrays`, with the given strides and device types per array."""
    import ctypes

    from tcc.rt.kernels import DLDataType, DLDevice, DLTensor

    keep, tensors = [], []
    for k, a in enumerate(arrays):
        shape = (ctypes.c_int64 * a.ndim)(*a.shape)
        st = None if strides is None or strides[k] is None else (ctypes.c_int64 * a.ndim)(
            *strides[k])
        keep += [shape, st]
        tensors.append(DLTensor(
            a.ctypes.data, DLDevice(devices[k] if devices else 1, 0), a.ndim,
            DLDataType(2, 32, 1), ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
            ctypes.cast(st, ctypes.POINTER(ctypes.c_int64)) if st is not None else None, 0))
    ptrs = (ctypes.POINTER(DLTensor) * len(arrays))(*(ctypes.pointer(t) for t in tensors))
    return ptrs, keep + tensors


def test_every_kernel_checks_its_arguments_through_one_shared_function(core):
    """The checks of each argument are one function of the runtime, which names the kernel
    that called it: a tensor on another device, and a 1-d tensor that is not compact."""
    fn = core._kernel("add")
    ptrs, _keep = _dl_tensors([rand(3, 10)] * 3, devices=[1, 2, 1])
    assert fn(ptrs, 3) != 0
    assert core.last_error() == (
        "add: argument 1 'B' is on device type 2; expected a CPU tensor (device type 1)")
    data = np.arange(10, dtype=np.float32)  # A: its 5 even elements, one apart in 2
    ptrs, _keep = _dl_tensors([data[:5], np.zeros(10, np.float32)], strides=[(2,), None])
    fn = core._kernel("twice")
    assert fn(ptrs, 2) != 0
    assert core.last_error() == (
        "twice: argument 0 'A' is not compact: dimension 0 has stride 2, expected 1; pass a "
        "C-contiguous (row-major) array")


# ---------------------------------------------------------------------------------------------
# loops: vectorized, unrolled


VECTOR = """
@prim_func
def vadd(A: Buffer((n, 16), "float32"), B: Buffer((16,), "float32"), C: Buffer((n, 16), "float32")):
    for i in serial(0, n):
        for j in vectorized(0, 16):
            with block("C"):
                vi = axis.spatial(n, i)
                vj = axis.spatial(16, j)
                C[vi, vj] = max(A[vi, vj] * B[vj] + cast("float32", vj), 0.0)


@prim_func
def vlong(A: Buffer((100,), "float64"), C: Buffer((100,), "float64")):
    for j in vectorized(0, 100):
        C[j] = exp(A[j]) + float64(1.0)


@prim_func
def vgather(A: Buffer((32,), "int32"), C: Buffer((16,), "int32")):
    for j in vectorized(0, 16):
        C[j] = A[j * 2] + A[0]


@prim_func
def vreduce(A: Buffer((24,), "float32"), C: Buffer((1,), "float32")):
    for j in vectorized(0, 24):
        with block("C"):
            vj = axis.reduce(24, j)
            with init():
                C[0] = 0.0
            C[0] = C[0] + A[vj]


@prim_func
def vsymbolic(A: Buffer((n,), "float32"), C: Buffer((n,), "float32")):
    for j in vectorized(0, n):
        C[j] = A[j] * 2.0


@prim_func
def vshift(A: Buffer((9,), "float32")):
    for j in vectorized(0, 8):
        A[j] = A[j + 1]
"""


@pytest.fixture(scope="module")
def vector():
    with load(VECTOR) as lib:
        yield lib


def test_vectorized_loop_becomes_vector_ops():
    text = unoptimized_ir(VECTOR)
    vadd = function_ir(text, "vadd.compute")
    assert "load <16 x float>" in vadd and "store <16 x float>" in vadd
    assert '<16 x float> @"llvm.maximum.v16f32"' in vadd
    assert "<4 x double>" in function_ir(text, "vlong.compute")  # 100 = 25 steps of 4 lanes


def test_the_vector_accesses_offsets_come_from_the_plan(monkeypatch):
    """The vector plan works out each access's flat offset over the lane variable; the
    backend emits the same accesses, and works out none of them again (an offset over a
    lane variable is one with a renaming)."""
    import tcc.emit.llvm as llvm_backend
    import tcc.emit.llvm_vector as vector_plan

    planned, again = [], []
    flat_index = vector_plan.flat_index

    def counting(into):
        def counted(buffer, indices, rename=None):
            if rename:
                into.append(buffer.name)
            return flat_index(buffer, indices, rename)
        return counted

    monkeypatch.setattr(vector_plan, "flat_index", counting(planned))
    monkeypatch.setattr(llvm_backend, "flat_index", counting(again))
    text = unoptimized_ir(VECTOR)
    assert "load <16 x float>" in function_ir(text, "vadd.compute")
    assert set(planned) == {"A", "B", "C"}  # the vectorized loops' buffers
    assert again == []


def test_vectorized_loops_compute_the_same(vector):
    a, b = rand(3, 16), rand(16)
    c = np.zeros_like(a)
    vector.call("vadd", [a, b, c])
    np.testing.assert_allclose(c, np.maximum(a * b + np.arange(16, dtype=np.float32), 0), rtol=1e-6)
    a = rand(100, dtype="float64")
    c = np.zeros_like(a)
    vector.call("vlong", [a, c])
    np.testing.assert_allclose(c, np.exp(a) + 1, rtol=1e-14)
    a = np.arange(32, dtype=np.int32) + 5
    c = np.zeros(16, np.int32)
    vector.call("vgather", [a, c])
    np.testing.assert_array_equal(c, a[::2] + a[0])


def test_vectorized_loops_that_would_change_meaning_stay_scalar(vector):
    text = unoptimized_ir(VECTOR)
    for name in ("vreduce", "vsymbolic", "vshift"):
        body = function_ir(text, f"{name}.compute")
        assert "x float>" not in body, name
        assert "!llvm.loop" in body, name
    assert '!"llvm.loop.vectorize.enable", i1 1' in text
    a = rand(24)
    c = np.zeros(1, np.float32)
    vector.call("vreduce", [a, c])
    np.testing.assert_allclose(c[0], a.sum(), rtol=1e-5)
    a = rand(37)
    c = np.zeros_like(a)
    vector.call("vsymbolic", [a, c])
    np.testing.assert_array_equal(c, a * 2)
    a = np.arange(9, dtype=np.float32)
    vector.call("vshift", [a])
    np.testing.assert_array_equal(a, [1, 2, 3, 4, 5, 6, 7, 8, 8])


def test_unrolled_loops():
    src = """
@prim_func
def unrolled_small(A: Buffer((4,), "int64")):
    for i in unrolled(0, 4):
        A[i] = i * i


@prim_func
def unrolled_long(A: Buffer((40,), "int64")):
    for i in unrolled(2, 38):
        A[i] = i + 1
"""
    text = unoptimized_ir(src)
    assert "phi" not in function_ir(text, "unrolled_small.compute")  # copied out, no loop left
    assert '!"llvm.loop.unroll.enable", i1 1' in text
    with load(src) as lib:
        a = np.zeros(4, np.int64)
        lib.call("unrolled_small", [a])
        np.testing.assert_array_equal(a, [0, 1, 4, 9])
        a = np.zeros(40, np.int64)
        lib.call("unrolled_long", [a])
        np.testing.assert_array_equal(a[2:], np.arange(3, 41))
        assert a[0] == a[1] == 0


def test_unrolled_copies_emit_shared_index_arithmetic_once():
    # each of the 8 copies indexes A by t // 6 (the same value in every copy) and i (a
    # constant in each copy): the division is emitted once and the copies' offsets fold
    src = """
@prim_func
def tiled(A: Buffer((n, 8), "float32"), B: Buffer((n, 8), "float32")):
    for t in serial(0, n * 6):
        for i in unrolled(0, 8):
            for j in vectorized(0, 8):
                with block("B"):
                    vi = axis.spatial(n, t // 6)
                    vj = axis.spatial(8, j)
                    B[vi, vj] = B[vi, vj] + A[vi, vj] * cast("float32", i)
"""
    text = unoptimized_ir(src)
    body = function_ir(text, "tiled.compute")
    assert body.count("sdiv") == 1
    assert "add i64 0," not in body and "mul i64 0," not in body
    assert "undef" not in body and "insertelement <8 x float> poison" in body
    n = 5
    a, b = rand(n, 8), rand(n, 8)
    want = b.copy()
    for t in range(n * 6):
        for i in range(8):
            want[t // 6] += a[t // 6] * np.float32(i)
    with load(src) as lib:
        lib.call("tiled", [a, b])
    np.testing.assert_allclose(b, want, rtol=1e-5)


def test_index_arithmetic_is_reused_only_where_its_block_dominates():
    # the guard's block and the blocks after it reuse t // 3, which the loop body computes
    # before them; what a then-branch computes (i * 5 + t // 3, under the guard only) must be
    # emitted again after the branch joins (else LLVM's verifier rejects the module)
    src = """
@prim_func
def guarded(A: Buffer((40,), "int64"), B: Buffer((40,), "int64")):
    for t in serial(0, 12):
        for i in unrolled(0, 4):
            if t // 3 + i < 5:
                B[i * 5 + t // 3] = A[i * 5 + t // 3] + int64(1)
            B[i * 5 + t // 3 + 20] = int64(7)
"""
    text = unoptimized_ir(src)
    body = function_ir(text, "guarded.compute")
    assert body.count("sdiv") == 1
    a = np.arange(40, dtype=np.int64)
    b = np.zeros(40, np.int64)
    want = b.copy()
    for t in range(12):
        for i in range(4):
            if t // 3 + i < 5:
                want[i * 5 + t // 3] = a[i * 5 + t // 3] + 1
            want[i * 5 + t // 3 + 20] = 7
    with load(src) as lib:
        lib.call("guarded", [a, b])
    np.testing.assert_array_equal(b, want)


def test_unrolled_copies_load_once_until_the_buffer_is_stored():
    # every copy reads A[t, :] (never stored: one load) and C[t, :], which the copy before
    # stored (loaded again in each copy)
    src = """
@prim_func
def chain(A: Buffer((n, 8), "float32"), C: Buffer((n, 8), "float32")):
    for t in serial(0, n):
        for i in unrolled(0, 4):
            for j in vectorized(0, 8):
                with block("C"):
                    vt = axis.spatial(n, t)
                    vj = axis.spatial(8, j)
                    C[vt, vj] = C[vt, vj] * 2.0 + A[vt, vj] * A[vt, vj]
"""
    body = function_ir(unoptimized_ir(src), "chain.compute")
    assert body.count("load <8 x float>") == 1 + 4
    a, c = rand(3, 8), rand(3, 8)
    want = c.copy()
    for _ in range(4):
        want = want * np.float32(2) + a * a
    with load(src) as lib:
        lib.call("chain", [a, c])
    np.testing.assert_allclose(c, want, rtol=1e-5)


def test_a_load_is_reused_only_in_its_own_block_and_never_from_under_a_guard():
    # B[0]'s select reads A[0] only where n > 3 (elsewhere a zero in memory): B[1] must load
    # A[0] itself. In the loop, A[0] was loaded before the loop but is stored later in the
    # body: each iteration loads it again.
    src = """
@prim_func
def guarded(A: Buffer((n,), "float32"), B: Buffer((5,), "float32")):
    B[0] = select(n > 3, A[0], 0.0)
    B[1] = A[0]
    for t in serial(0, 3):
        B[t + 2] = A[0] + 1.0
        A[0] = A[0] * 2.0
"""
    for n in (2, 5):
        a = rand(n)
        b = np.zeros(5, np.float32)
        first = a[0]
        want = [first if n > 3 else 0.0, first] + [first * 2.0**t + 1 for t in range(3)]
        with load(src) as lib:
            lib.call("guarded", [a, b])
        np.testing.assert_allclose(b, want, rtol=1e-6)
        assert a[0] == np.float32(first * 8)


def test_local_buffers_on_stack_and_heap():
    src = """
@prim_func
def locals_(A: Buffer((n, 8), "float32"), B: Buffer((n, 8), "float32")):
    for i in parallel(0, n):
        with block("row"):
            vi = axis.spatial(n, i)
            small = alloc_buffer((8,), "float32")
            big = alloc_buffer((8192,), "float32")
            dyn = alloc_buffer((n,), "float32")
            for j in serial(0, 8):
                small[j] = A[vi, j] * 2.0
                big[j * 1000] = small[j] + 1.0
                dyn[0] = big[j * 1000]
                B[vi, j] = dyn[0]
    with allocate((3,), "float32", scope="local") as tmp:
        tmp[0] = 1.0
"""
    text = unoptimized_ir(src)
    assert "alloca [8 x float]" in text and text.count('call ptr @"malloc"') == 2
    with load(src) as lib:
        a = rand(50, 8)
        b = np.zeros_like(a)
        lib.call("locals_", [a, b])
        np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


LOOP_LOCALS = """
@prim_func
def row_sums(A: Buffer((n, 16), "float32"), B: Buffer((n, 4), "float32")):
    for i in serial(0, n):
        with allocate((4, 4), "float32", scope="local") as tile:
            for j in serial(0, 16):
                tile[j // 4, j % 4] = A[i, j] * 2.0
            for r in serial(0, 4):
                B[i, r] = tile[r, 0] + tile[r, 1] + tile[r, 2] + tile[r, 3]


@prim_func
def row_sums_parallel(A: Buffer((n, 16), "float32"), B: Buffer((n, 4), "float32")):
    for i in parallel(0, n):
        with allocate((4, 4), "float32", scope="local") as tile:
            for j in serial(0, 16):
                tile[j // 4, j % 4] = A[i, j] * 2.0
            for r in serial(0, 4):
                B[i, r] = tile[r, 0] + tile[r, 1] + tile[r, 2] + tile[r, 3]
"""


def _entry_allocas(module, name: str) -> list[str]:
    """The types of the allocas in the entry block of function `name`."""
    fn = module.get_global(name)
    return [str(ins.allocated_type) for ins in fn.blocks[0].instructions if ins.opname == "alloca"]


def test_a_small_buffer_inside_a_loop_is_one_entry_block_alloca():
    """A register tile allocated per iteration takes stack space once, in the entry block
    (where LLVM's SROA can promote it), never malloc per iteration; inside a parallel loop
    that entry block is the outlined loop body's, so every thread has its own tile."""
    module = build_module(parse_module(LOOP_LOCALS).prim_funcs, parse_target("llvm"))[0]
    assert 'call ptr @"malloc"' not in str(module)
    assert _entry_allocas(module, "row_sums.compute") == ["[16 x float]"]
    assert "[16 x float]" not in _entry_allocas(module, "row_sums_parallel.compute")
    assert _entry_allocas(module, "row_sums_parallel.parallel0.body") == ["[16 x float]"]
    with load(LOOP_LOCALS) as lib:
        a = rand(301, 16)
        want = (a * 2).reshape(301, 4, 4).sum(axis=2)
        for name in ("row_sums", "row_sums_parallel"):
            b = np.zeros((301, 4), np.float32)
            lib.set_num_threads(2)
            lib.call(name, [a, b])
            lib.set_num_threads(0)
            np.testing.assert_allclose(b, want, rtol=1e-5)


ROWS_PER_ITERATION = """
@prim_func
def rows(A: Buffer((m, n), "float32"), B: Buffer((m, n), "float32")):
    for i in parallel(0, m):
        if i % 2 == 0:
            with allocate((n,), "float32") as row:
                for j in serial(0, n):
                    row[j] = A[i, j] * 2.0
                for j in serial(0, n):
                    B[i, j] = row[j] + 1.0
        else:
            with allocate((n,), "float32") as other:
                for j in serial(0, n):
                    other[j] = A[i, j] * 3.0
                with allocate((i + 1,), "float32") as grown:
                    grown[i] = 1.0
                    for j in serial(0, n):
                        B[i, j] = other[j] + grown[i]
"""


def _malloc_calls(block) -> int:
    return sum(1 for ins in block.instructions
               if ins.opname == "call" and ins.callee.name == "malloc")


def test_a_row_each_parallel_iteration_allocates_is_allocated_once_per_worker():
    """A heap buffer that every iteration of a parallel loop allocates before a loop of its
    own, at a size the iteration does not change, is malloc'd once in the worker, before its
    iterations (both branches' rows); one whose size depends on the iteration is not."""
    module = build_module(parse_module(ROWS_PER_ITERATION).prim_funcs, parse_target("llvm"))[0]
    blocks = module.get_global("rows.parallel0.body").blocks
    loop = next(k for k, b in enumerate(blocks) if b.name == "loop")  # the worker's iterations
    assert sum(_malloc_calls(b) for b in blocks[:loop]) == 2
    assert sum(_malloc_calls(b) for b in blocks[loop:]) == 1
    with load(ROWS_PER_ITERATION) as lib:
        for m, n in ((1, 5), (7, 33), (64, 3)):
            a = rand(m, n)
            b = np.zeros_like(a)
            lib.set_num_threads(2)
            lib.call("rows", [a, b])
            lib.set_num_threads(0)
            odd = np.arange(m)[:, None] % 2 == 1
            np.testing.assert_array_equal(b, np.where(odd, a * np.float32(3) + 1, a * np.float32(2) + 1))


# ---------------------------------------------------------------------------------------------
# expressions and dtypes


def test_casts():
    src = """
@prim_func
def casts(F: Buffer((6,), "float32"), I: Buffer((6,), "int32"), U: Buffer((6,), "uint8"),
          O1: Buffer((6,), "int8"), O2: Buffer((6,), "float64"), O3: Buffer((6,), "bool"),
          O4: Buffer((6,), "int64"), O5: Buffer((6,), "float32"), O6: Buffer((6,), "uint16")):
    for i in serial(0, 6):
        O1[i] = cast("int8", F[i])
        O2[i] = cast("float64", U[i])
        O3[i] = cast("bool", F[i])
        O4[i] = cast("int64", I[i]) * 1000000000000
        O5[i] = cast("float32", cast("bool", I[i]))
        O6[i] = cast("uint16", I[i])
"""
    f = np.array([-3.7, 0.0, 2.9, 100.2, -0.0, 5.5], np.float32)
    i = np.array([-2, 0, 7, 65537, -70000, 1], np.int32)
    u = np.array([0, 1, 200, 255, 128, 7], np.uint8)
    outs = [np.zeros(6, d) for d in ("int8", "float64", "bool", "int64", "float32", "uint16")]
    with load(src) as lib:
        lib.call("casts", [f, i, u, *outs])
    np.testing.assert_array_equal(outs[0], f.astype(np.int8))
    np.testing.assert_array_equal(outs[1], u.astype(np.float64))
    np.testing.assert_array_equal(outs[2], f.astype(bool))
    np.testing.assert_array_equal(outs[3], i.astype(np.int64) * 10**12)
    np.testing.assert_array_equal(outs[4], i.astype(bool).astype(np.float32))
    np.testing.assert_array_equal(outs[5], i.astype(np.uint16))


def test_integer_division_rounds_down_and_survives_zero():
    src = """
@prim_func
def divs(A: Buffer((n,), "int32"), B: Buffer((n,), "int32"), Q: Buffer((n,), "int32"),
         R: Buffer((n,), "int32"), Q7: Buffer((n,), "int32"), R7: Buffer((n,), "int32"),
         MN: Buffer((n,), "int32"), MX: Buffer((n,), "int32")):
    for i in serial(0, n):
        Q[i] = A[i] // B[i]
        R[i] = A[i] % B[i]
        Q7[i] = A[i] // int32(-7)
        R7[i] = A[i] % int32(-7)
        MN[i] = min(A[i], B[i])
        MX[i] = max(A[i], B[i])
"""
    a = np.array([7, -7, 7, -7, 0, 5, -2147483648, 9], np.int32)
    b = np.array([2, 2, -2, -2, 3, 0, -1, -1], np.int32)
    outs = [np.zeros_like(a) for _ in range(6)]
    with load(src) as lib, np.errstate(all="ignore"):
        lib.call("divs", [a, b, *outs])
        np.testing.assert_array_equal(outs[0], np.floor_divide(a, b))
        np.testing.assert_array_equal(outs[1], np.remainder(a, b))
    np.testing.assert_array_equal(outs[2], a // -7)
    np.testing.assert_array_equal(outs[3], a % -7)
    np.testing.assert_array_equal(outs[4], np.minimum(a, b))
    np.testing.assert_array_equal(outs[5], np.maximum(a, b))


def test_float_min_max_floordiv_propagate_like_numpy():
    src = """
@prim_func
def fops(A: Buffer((n,), "float32"), B: Buffer((n,), "float32"), MN: Buffer((n,), "float32"),
         MX: Buffer((n,), "float32"), FD: Buffer((n,), "float32"), FM: Buffer((n,), "float32"),
         SEL: Buffer((n,), "float32"), LG: Buffer((n,), "bool")):
    for i in serial(0, n):
        MN[i] = min(A[i], B[i])
        MX[i] = max(A[i], B[i])
        FD[i] = A[i] // B[i]
        FM[i] = A[i] % B[i]
        SEL[i] = select(A[i] != B[i] and not A[i] < 0.0, A[i], B[i])
        LG[i] = A[i] == B[i] or A[i] >= 1.0
"""
    a = np.array([1.5, np.nan, -3.0, 7.0, 2.0, -5.5], np.float32)
    b = np.array([2.0, 1.0, np.nan, -2.0, 2.0, 2.0], np.float32)
    outs = [np.zeros_like(a) for _ in range(5)] + [np.zeros(6, bool)]
    with load(src) as lib:
        lib.call("fops", [a, b, *outs])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(outs[0], np.minimum(a, b))
        np.testing.assert_array_equal(outs[1], np.maximum(a, b))
        np.testing.assert_array_equal(outs[2], np.floor(a / b))
        np.testing.assert_allclose(outs[3], np.mod(a, b), rtol=1e-6)
        np.testing.assert_array_equal(outs[4], np.where((a != b) & ~(a < 0), a, b))
        np.testing.assert_array_equal(outs[5], (a == b) | (a >= 1))


def test_float16_and_bool_buffers():
    src = """
@prim_func
def half(A: Buffer((n,), "float16"), B: Buffer((n,), "float16"), C: Buffer((n,), "float16"),
         D: Buffer((n,), "bool")):
    for i in vectorized(0, 8):
        C[i] = exp(A[i]) * B[i] + float16(0.1)
        D[i] = A[i] > B[i]
"""
    a, b = rand(8, dtype="float16"), rand(8, dtype="float16")
    c, d = np.zeros_like(a), np.zeros(8, bool)
    with load(src) as lib:
        lib.call("half", [a, b, c, d])
    expect = (np.exp(a) * b + np.float16(0.1)).astype(np.float16)
    np.testing.assert_allclose(
        c.astype(np.float32), expect.astype(np.float32), rtol=2e-3, atol=1e-3
    )
    np.testing.assert_array_equal(d, a > b)


_UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh, "erf": np.vectorize(math.erf), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "exp2": np.exp2, "log2": np.log2,
    "log1p": np.log1p, "expm1": np.expm1, "nearbyint": np.rint,
}  # fmt: skip
_BINARY = {"pow": np.power, "fmod": np.fmod, "atan2": np.arctan2, "copysign": np.copysign}
_DOMAIN = {"log": (0.1, 5), "sqrt": (0.1, 5), "rsqrt": (0.1, 5), "asin": (-0.9, 0.9),
           "acos": (-0.9, 0.9), "acosh": (1.1, 5), "atanh": (-0.9, 0.9), "log2": (0.1, 5),
           "log1p": (-0.5, 5), "pow": (0.1, 3)}  # fmt: skip


def _intrinsic_module(dtype: str) -> str:
    lines = []
    for name in _UNARY:
        lines.append(
            f'@prim_func\ndef f_{name}(A: Buffer((37,), "{dtype}"), B: Buffer((37,), "{dtype}")):\n'
            f"    for i in vectorized(0, 37):\n        B[i] = {name}(A[i])\n"
        )
    for name in _BINARY:
        lines.append(
            f'@prim_func\ndef f_{name}(A: Buffer((37,), "{dtype}"), C: Buffer((37,), "{dtype}"), '
            f'B: Buffer((37,), "{dtype}")):\n'
            f"    for i in serial(0, 37):\n        B[i] = {name}(A[i], C[i])\n"
        )
    lines.append(
        f'@prim_func\ndef f_checks(A: Buffer((37,), "{dtype}"), N: Buffer((37,), "bool"), '
        f'I: Buffer((37,), "bool")):\n'
        f"    for i in vectorized(0, 37):\n        N[i] = isnan(A[i])\n        I[i] = isinf(A[i])\n"
    )
    return "\n\n".join(lines)


@pytest.mark.parametrize("dtype, rtol", [("float32", 2e-6), ("float64", 1e-13)])
def test_every_intrinsic_matches_numpy(dtype, rtol):
    with load(_intrinsic_module(dtype)) as lib:
        for name, ref in {**_UNARY, **_BINARY}.items():
            lo, hi = _DOMAIN.get(name, (-3, 3))
            a = RNG.uniform(lo, hi, 37).astype(dtype)
            if name in ("round", "nearbyint"):
                a[:4] = [0.5, 1.5, 2.5, -2.5]  # ties go to even
            args = [a]
            if name in _BINARY:
                args.append(
                    RNG.uniform(0.5, 2.5, 37).astype(dtype) * RNG.choice([-1, 1], 37).astype(dtype)
                    if name != "pow"
                    else RNG.uniform(-2, 2, 37).astype(dtype)
                )
            out = np.zeros(37, dtype)
            lib.call(f"f_{name}", [*args, out])
            np.testing.assert_allclose(
                out, ref(*args).astype(dtype), rtol=rtol, atol=rtol, err_msg=name
            )
        a = np.array([np.nan, np.inf, -np.inf, 1.0] * 9 + [0.0], dtype)
        n, i = np.zeros(37, bool), np.zeros(37, bool)
        lib.call("f_checks", [a, n, i])
        np.testing.assert_array_equal(n, np.isnan(a))
        np.testing.assert_array_equal(i, np.isinf(a))


# ---------------------------------------------------------------------------------------------
# compile-time errors, determinism, cross-compiling


@pytest.mark.parametrize(
    "src, message",
    [
        (
            '@prim_func\ndef k(A: Buffer((4,), "float32")):\n'
            '    for i in thread_binding(0, 4, thread="threadIdx.x"):\n        A[i] = 0.0\n',
            "bound to threadIdx.x, which needs the CUDA backend",
        ),
        (
            '@prim_func\ndef k(A: Buffer((4,), "complex64")):\n    for i in serial(0, 4):\n        A[i] = A[i]\n',
            "buffer 'A' has dtype complex64, which the LLVM backend does not support yet",
        ),
        (
            '@prim_func\ndef k(A: Buffer((n * 2,), "float32")):\n    for i in serial(0, 2):\n        A[i] = 0.0\n',
            "size variable 'n' in the shape of 'A' is not any dimension on its own",
        ),
        (
            '@prim_func\ndef expf(A: Buffer((4,), "float32")):\n    pass\n',
            "clashes with a runtime or C library symbol",
        ),
    ],
)
def test_unsupported_input_is_a_codegen_error(src, message):
    with pytest.raises(CodegenError, match=message):
        compile_text(src)


def test_buffer_used_out_of_scope_is_an_error():
    a = T.Buffer("A", (4,), "float32")
    tmp = T.Buffer("tmp", (4,), "float32")
    i = E.Var("i")
    body = T.For(
        i,
        E.IntImm(0),
        E.IntImm(4),
        T.ForKind.SERIAL,
        T.BufferStore(a, E.BufferLoad(tmp, (i,)), (i,)),
    )
    with pytest.raises(
        CodegenError, match="kernel 'k': buffer 'tmp' is used but is neither a parameter"
    ):
        compile_prim_funcs({"k": T.PrimFunc((a,), body)})


def test_output_is_deterministic():
    one, two = compile_text(CORE), compile_text(CORE)
    assert one.object_code == two.object_code
    assert one.shared_object == two.shared_object
    assert one.symbols == ("add", "matmul", "parallel_sum_rows", "relu_or_neg", "scale", "twice")


def test_cross_compile_aarch64_object():
    cm = compile_text(CORE, "llvm -mtriple=aarch64-linux-gnu")
    obj = cm.object_code
    assert obj[:4] == b"\x7fELF" and obj[4] == 2  # 64-bit
    assert int.from_bytes(obj[18:20], "little") == 183  # EM_AARCH64
    assert cm.shared_object is None
    assert cm.target == "llvm -mtriple=aarch64-linux-gnu -mcpu=generic"
    assert b"GOMP_parallel" in obj and b"tcc_last_error" in obj


def test_select_loads_only_its_chosen_branch():
    """Padding: where the condition is false the load's index is far out of bounds, so
    loading it anyway would crash."""
    src = """
@prim_func
def pad(A: Buffer((n, 8), "float32"), B: Buffer((n + 2, 8), "float32")):
    for i in serial(0, n + 2):
        for j in vectorized(0, 8):
            B[i, j] = select(i >= 1 and i <= n, A[i - 1 + (1 - min(i, 1)) * 100000000000, j], 5.0)


@prim_func
def pad_lanes(A: Buffer((6,), "float32"), B: Buffer((8,), "float32")):
    for j in vectorized(0, 8):
        B[j] = select(j >= 1 and j < 7, A[j - 1 + (1 - min(j, 1)) * 100000000000], 5.0)
"""
    text = unoptimized_ir(src)
    assert "load <8 x float>" in function_ir(text, "pad.compute")  # the condition is the same for all lanes
    with load(src) as lib:
        a = rand(3, 8)
        b = np.zeros((5, 8), np.float32)
        lib.call("pad", [a, b])
        np.testing.assert_array_equal(
            b, np.concatenate([np.full((1, 8), 5.0), a, np.full((1, 8), 5.0)])
        )
        a = rand(6)
        b = np.zeros(8, np.float32)
        lib.call("pad_lanes", [a, b])
        np.testing.assert_array_equal(b, np.concatenate([[5.0], a, [5.0]]))


def test_a_padding_select_outside_loops_is_straight_line_code_and_its_loads_merge():
    """A select between one load and a constant, on a condition the same for every lane,
    with no loop around it but a parallel one (an unrolled body, as the Winograd
    transforms'), runs both sides (the load through an address that is always readable)
    and picks: no branch, so the unrolled copies' loads of one element become one load for
    their four stores. Inside a serial loop it stays a branch, which LLVM can take out of
    the loop. Where the condition is false the index is far out of bounds, and the output
    is right either way."""
    taps = """
@prim_func
def {name}(A: Buffer((n, 8), "float32"), B: Buffer((n + 1, 4, 8), "float32")):
    for i in {kind}(0, n + 1):
        for k in unrolled(0, 4):
            for j in vectorized(0, 8):
                B[i, k, j] = select(i >= 1, A[i - 1 + (1 - min(i, 1)) * 100000000000, j], 0.0) * 2.0
"""
    src = taps.format(name="taps", kind="parallel") + taps.format(name="taps_in_loop", kind="serial")
    raw = unoptimized_ir(src)
    assert function_ir(raw, "taps.parallel0.body").count("br i1") == 1  # the worker's loop
    assert function_ir(raw, "taps_in_loop.compute").count("br i1") == 1 + 4  # 4 selects
    optimized = function_ir(compile_text(src).llvm_ir, "taps.parallel0")
    loads, stores = optimized.count("load <8 x float>"), optimized.count("store <8 x float>")
    assert 1 <= loads and 4 * loads <= stores, optimized
    with load(src) as lib:
        for name in ("taps", "taps_in_loop"):
            a = rand(3, 8)
            b = np.full((4, 4, 8), np.nan, np.float32)
            lib.call(name, [a, b])
            want = np.concatenate([np.zeros((1, 8), np.float32), a * 2])[:, None, :]
            np.testing.assert_array_equal(b, np.broadcast_to(want, (4, 4, 8)))


def test_unrolled_copies_reading_one_element_through_a_quotient_emit_it_once():
    """The copies of a tile (a Winograd output transform's) index their input by the tile,
    `(4 * t + k) // 4`: the same element for every position k. The load is keyed by its
    indices with the position put in and simplified, so the four copies share one load,
    and the float operations on shared values are numbered, so they share the sum too;
    only the position-dependent part is emitted per copy."""
    src = """
@prim_func
def tile(A: Buffer((n, 2, 8), "float32"), B: Buffer((n * 4, 8), "float32")):
    for t in serial(0, n):
        for k in unrolled(0, 4):
            for j in vectorized(0, 8):
                with block("B"):
                    vh = axis.spatial(n * 4, t * 4 + k)
                    vj = axis.spatial(8, j)
                    B[vh, vj] = A[vh // 4, 0, vj] * 3.0 + A[vh // 4, 1, vj] + cast("float32", vh % 4)
"""
    body = function_ir(unoptimized_ir(src), "tile.compute")
    assert body.count("load <8 x float>") == 2, body
    assert body.count("@\"llvm.fmuladd") == 1, body
    assert body.count("store <8 x float>") == 4, body
    with load(src) as lib:
        a = rand(5, 2, 8)
        b = np.full((20, 8), np.nan, np.float32)
        lib.call("tile", [a, b])
        want = np.repeat(a[:, 0] * np.float32(3) + a[:, 1], 4, axis=0)
        np.testing.assert_allclose(b, want + (np.arange(20) % 4)[:, None], rtol=1e-5, atol=1e-5)


def test_a_cropped_tiles_guarded_stores_share_values_their_loads_allow():
    """The last tiles of a cropped output (a Winograd output transform of 14 x 14) guard
    each copy's store. Where every load of the value stays inside its buffer whatever the
    guard says, the value is computed before the guard's branch, so the copies still share
    their loads; a load that the guard keeps in bounds stays behind it."""
    tile = """
@prim_func
def {name}(A: Buffer(({rows}, 8), "float32"), B: Buffer((18, 8), "float32")):
    for t in serial(0, 5):
        for k in unrolled(0, 4):
            for j in vectorized(0, 8):
                if t * 4 + k < 18:
                    with block("B"):
                        vh = axis.spatial(18, t * 4 + k)
                        vj = axis.spatial(8, j)
                        B[vh, vj] = A[{row}, vj] * 2.0
"""
    src = (tile.format(name="cropped", rows=5, row="vh // 4")
           + tile.format(name="guarded", rows=18, row="vh"))
    raw = unoptimized_ir(src)
    shared = function_ir(raw, "cropped.compute")
    assert shared.count("load <8 x float>") == 1, shared
    assert shared.count("fmul <8 x float>") == 1, shared
    behind = function_ir(raw, "guarded.compute")
    assert behind.count("load <8 x float>") == 4, behind  # one per copy, each behind its test
    with load(src) as lib:
        a = rand(5, 8)
        b = np.full((18, 8), np.nan, np.float32)
        lib.call("cropped", [a, b])
        np.testing.assert_array_equal(b, np.repeat(a * 2, 4, axis=0)[:18])
        a = rand(18, 8)
        b = np.full((18, 8), np.nan, np.float32)
        lib.call("guarded", [a, b])
        np.testing.assert_array_equal(b, a * 2)


def test_a_parallel_loop_body_keeps_its_buffers_apart():
    """Inside a parallel loop the buffers are as noalias as in the kernel itself (the loop's
    body is a function with noalias parameters, inlined into the worker), so LLVM knows a
    store to one does not change another."""
    src = """
@prim_func
def spread(A: Buffer((n,), "float32"), B: Buffer((n, 4), "float32")):
    for i in parallel(0, n):
        for k in unrolled(0, 4):
            B[i, k] = A[i] * 2.0
"""
    worker = function_ir(compile_text(src).llvm_ir, "spread.parallel0")
    accesses = [line for line in worker.splitlines()
                if re.search(r"(load|store) <?\d* ?x? ?float", line)]
    assert accesses and all("!alias.scope" in line for line in accesses), worker
    with load(src) as lib:
        a = rand(5000)
        b = np.zeros((5000, 4), np.float32)
        lib.call("spread", [a, b])
        np.testing.assert_array_equal(b, np.repeat(a[:, None] * 2, 4, axis=1))


SMALL_OR_LARGE = """
@prim_func
def rows_then_total(A: Buffer((n, 48), "float32"), B: Buffer((n, 48), "float32")):
    for i in parallel(0, n):
        for j in serial(0, 48):
            B[i, j] = A[i, j] * 2.0
        if i < 3:
            for j2 in serial(0, 2):
                B[i, j2] = B[i, j2] + 1.0


@prim_func
def fixed(A: Buffer((4, 48), "float32"), B: Buffer((4, 48), "float32")):
    for i in parallel(0, 4):
        for j in serial(0, 48):
            B[i, j] = A[i, j] * 2.0
"""


def test_nest_work_counts_the_innermost_statements_as_an_expression_of_the_sizes():
    func = parse_module(SMALL_OR_LARGE).prim_funcs["rows_then_total"]
    n = next(v for v in E.free_vars(list(func.params[0].shape)) if v.name == "n")
    work = nest_work(func.body)
    assert [E.evaluate(work, {n: k}) for k in (0, 1, 10)] == [0, 50, 500]
    i, j = E.Var("i"), E.Var("j")
    triangular = T.For(i, E.const(0), n, T.ForKind.SERIAL,
                       T.For(j, E.const(0), i, T.ForKind.SERIAL, T.Evaluate(E.const(0))))
    assert nest_work(triangular) is None


def test_a_symbolic_parallel_loop_runs_on_the_calling_thread_when_small_at_run_time():
    """Where the nest's size is symbolic, the compute function compares it with the rules'
    threshold and calls the outlined loop itself, without the OpenMP runtime, below it (or
    with one iteration); a parallel loop of constant size keeps the schedule's threads."""
    module = build_module(parse_module(SMALL_OR_LARGE).prim_funcs, parse_target("llvm"))[0]
    for name, checked in (("rows_then_total", True), ("fixed", False)):
        compute = str(module.get_global(f"{name}.compute"))
        assert f"@\"{name}.parallel0\"(ptr" in compute  # alone, at least with one thread
        assert (f", {MIN_PARALLEL_WORK}" in compute) is checked
    with load(SMALL_OR_LARGE) as lib:
        lib.set_num_threads(2)
        for rows in (0, 1, 2, 7, 170, 1000):  # 170 x 48 rows of work cross the threshold
            a = rand(rows, 48)
            b = np.full_like(a, 5.0)
            lib.call("rows_then_total", [a, b])
            want = a * 2
            want[:3, :2] += 1
            np.testing.assert_array_equal(b, want)


_THREADS_PROBE = """
import sys
from pathlib import Path
import numpy as np
from tcc.rt.kernels import load_cpu_library

def threads():
    return len(list(Path("/proc/self/task").iterdir()))

with load_cpu_library(Path(sys.argv[1]).read_bytes()) as lib:
    if sys.argv[2] != "default":
        lib.set_num_threads(int(sys.argv[2]))
    before = threads()
    for rows in map(int, sys.argv[3:]):
        a = np.ones((rows, 48), np.float32)
        lib.call("rows_then_total", [a, np.zeros_like(a)])
    print(threads() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("threads, rows, team", [
    ("default", [1000], True),  # 0: the OpenMP default, here two threads
    ("2", [1000], True),
    ("1", [1000], False),
    ("2", [1, 7, 100], False),  # too little work at run time
])
def test_a_parallel_loop_starts_the_openmp_team_only_when_it_pays(tmp_path, threads, rows,
                                                                   team):
    """Counted by the threads the process has: libgomp starts its team on the first parallel
    region with more than one thread (a fresh process each time)."""
    import subprocess
    import sys

    so = tmp_path / "k.so"
    so.write_bytes(compile_text(SMALL_OR_LARGE).shared_object)
    out = subprocess.run([sys.executable, "-c", _THREADS_PROBE, str(so), threads,
                          *map(str, rows)], capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert (int(out.stdout) > 0) is team, out.stdout


def test_nested_parallel_loops_and_integer_intrinsics():
    src = """
@prim_func
def nested(A: Buffer((n, 5), "int32"), B: Buffer((n, 5), "int32")):
    for i in parallel(0, n):
        for j in parallel(0, 5):
            B[i, j] = abs(A[i, j]) + floor(A[i, j]) + fmod(A[i, j], int32(3)) + cast("int32", pow(cast("float32", A[i, j]), 2.0))
"""
    a = RNG.integers(-50, 50, (9, 5)).astype(np.int32)
    b = np.zeros_like(a)
    with load(src) as lib:
        lib.call("nested", [a, b])
    np.testing.assert_array_equal(b, np.abs(a) + a + np.fmod(a, 3) + a * a)


def test_out_of_memory_for_a_local_buffer_is_reported():
    src = """
@prim_func
def hog(A: Buffer((4,), "float32"), m: int64):
    with block("root"):
        tmp = alloc_buffer((m,), "float32")
        tmp[0] = A[1]
        A[0] = tmp[cast("int64", A[2])]


@prim_func
def hog_parallel(A: Buffer((4,), "float32"), m: int64):
    for i in parallel(0, 4):
        with block("row"):
            tmp = alloc_buffer((m,), "float32")
            tmp[0] = A[1]
            A[i] = tmp[cast("int64", A[2])]


@prim_func
def hog_rows(S: Buffer((2,), "float32"), A: Buffer((4,), "float32"), m: int64, h: int64):
    for i in parallel(0, 4):
        with allocate((m,), "float32") as small:
            with allocate((h,), "float32") as big:
                small[0] = S[1]
                big[0] = small[cast("int64", S[0])]
                A[i] = big[cast("int64", S[0])]
"""
    huge = np.array(1 << 60, np.int64)  # 2**62 bytes: more than any address space
    with load(src) as lib:
        a = np.array([0, 5, 0, 0], np.float32)
        lib.call("hog", [a, np.array(3, np.int64)])
        assert a[0] == 5
        with pytest.raises(
            KernelError,
            match=r"^hog: out of memory allocating 4611686018427387904 bytes for buffer 'tmp'$",
        ):
            lib.call("hog", [a, huge])
        with pytest.raises(
            KernelError,
            match="hog_parallel: out of memory allocating a buffer inside parallel loop 'i'",
        ):
            lib.call("hog_parallel", [a, huge])
        # each worker allocates both rows once, before its iterations; the second fails
        ok, s = np.array(8, np.int64), np.array([0, 7], np.float32)
        lib.call("hog_rows", [s, a, ok, ok])
        assert (a == 7).all()
        with pytest.raises(
            KernelError,
            match="hog_rows: out of memory allocating a buffer inside parallel loop 'i'",
        ):
            lib.call("hog_rows", [s, a, ok, huge])


def test_no_shared_object_without_a_c_compiler(monkeypatch):
    from tcc.emit import support

    monkeypatch.setattr(support, "c_compiler", lambda: None)
    cm = compile_text(CORE)
    assert cm.shared_object is None and cm.object_code[:4] == b"\x7fELF"


def test_loop_strength_reduction_switches_off_and_back(monkeypatch):
    """LLVM_LSR = False compiles without LLVM's loop strength reduction (a process-wide LLVM
    option); switched back on, the object is the same as before it was ever switched off."""
    from tcc.emit import llvm as tcc_llvm

    funcs = {"matmul": parse_module(CORE).prim_funcs["matmul"]}
    with_lsr = tcc_llvm.compile_object(funcs, "llvm", "kernels").object_code
    monkeypatch.setattr(tcc_llvm, "LLVM_LSR", False)
    without = tcc_llvm.compile_object(funcs, "llvm", "kernels").object_code
    monkeypatch.setattr(tcc_llvm, "LLVM_LSR", True)
    again = tcc_llvm.compile_object(funcs, "llvm", "kernels").object_code
    assert without != with_lsr
    assert again == with_lsr
