"""compact_buffers: each intermediate buffer allocated inside the innermost loop around its
accesses and shrunk to what one iteration touches. Golden IR, the cases where the buffer
must stay where it is, results unchanged (tir_eval and the CPU codegen) for every schedule
of the block-primitive tests, and the matmul micro-kernel's accumulator kept in registers,
with a printed micro-benchmark."""

from __future__ import annotations

import time
from functools import partial

import numpy as np
import pytest

from tcc.emit.llvm import compile_prim_funcs
from tcc.ir import tir as T
from tcc.ir.printer import print_prim_func
from tcc.ir.structural import structural_equal
from tcc.lower.schedule import Schedule
from tcc.lower.schedule.compact import compact_buffers
from tcc.lower.schedule.state import walk
from tcc.rt.kernels import load_cpu_library
from tests.lower.schedule.cases import (
    arrays_for,
    compile_all,
    op_func,
    outputs_of,
    prims,
    run_compiled,
)
from tests.lower.schedule.test_schedule_blocks import SCHEDULES, SIZES, assert_same, scheduled


def assert_compacts_to(func: T.PrimFunc, want: T.PrimFunc) -> None:
    got = compact_buffers(func)
    assert structural_equal(got, want), print_prim_func("got", got)
    assert structural_equal(compact_buffers(got), got)  # compacting again changes nothing


# -- golden IR ----------------------------------------------------------------------------------

# The micro-kernel of docs/schedule.md on an 8 x 12 by 12 x 16 matmul, 4 x 8 tiles: the local
# accumulator moves from the root block into the column-tile loop, shrunk to the tile.
MICRO_KERNEL_COMPACTED = """
@prim_func
def f(in0: Buffer((8, 12), "float32"), in1: Buffer((12, 16), "float32"), matmul: Buffer((8, 16), "float32")):
    with block("root"):
        reads()
        writes()
        for i0_0 in parallel(0, 2):
            for i1_0 in serial(0, 2):
                with allocate((4, 8), "float32", scope="local") as matmul_local:
                    for i0_1_init in serial(0, 4):
                        for i1_1_init in vectorized(0, 8):
                            with block("matmul_init"):
                                v_i0_init = axis.spatial(8, i0_0 * 4 + i0_1_init)
                                v_i1_init = axis.spatial(16, i1_0 * 8 + i1_1_init)
                                reads()
                                writes(matmul_local[v_i0_init - i0_0 * 4, v_i1_init - i1_0 * 8])
                                matmul_local[v_i0_init - i0_0 * 4, v_i1_init - i1_0 * 8] = 0.0
                    for k in serial(0, 12):
                        for i0_1 in unrolled(0, 4):
                            for i1_1 in vectorized(0, 8):
                                with block("matmul"):
                                    v_i0 = axis.spatial(8, i0_0 * 4 + i0_1)
                                    v_i1 = axis.spatial(16, i1_0 * 8 + i1_1)
                                    v_k = axis.reduce(12, k)
                                    reads(in0[v_i0, v_k], in1[v_k, v_i1])
                                    writes(matmul_local[v_i0 - i0_0 * 4, v_i1 - i1_0 * 8])
                                    matmul_local[v_i0 - i0_0 * 4, v_i1 - i1_0 * 8] = matmul_local[v_i0 - i0_0 * 4, v_i1 - i1_0 * 8] + in0[v_i0, v_k] * in1[v_k, v_i1]
                    for ax0 in serial(0, 4):
                        for ax1 in vectorized(0, 8):
                            with block("matmul_local"):
                                v_ax0 = axis.spatial(8, ax0 + i0_0 * 4)
                                v_ax1 = axis.spatial(16, ax1 + i1_0 * 8)
                                reads(matmul_local[v_ax0 - i0_0 * 4, v_ax1 - i1_0 * 8])
                                writes(matmul[v_ax0, v_ax1])
                                matmul[v_ax0, v_ax1] = matmul_local[v_ax0 - i0_0 * 4, v_ax1 - i1_0 * 8]
"""  # noqa: E501


def test_the_micro_kernel_accumulator_becomes_a_tile_inside_its_loop():
    want = prims(MICRO_KERNEL_COMPACTED)["f"]
    assert_compacts_to(scheduled("matmul_micro_kernel").func, want)


CASES = """
@prim_func
def running(A: Buffer((3, 4), "float32"), C: Buffer((3, 4), "float32")):
    with block("root"):
        S = alloc_buffer((3,), "float32")
        reads()
        writes()
        for i in serial(0, 3):
            for k in serial(0, 4):
                with block("S"):
                    vi = axis.spatial(3, i)
                    vk = axis.reduce(4, k)
                    reads(A[vi, vk])
                    writes(S[vi])
                    with init():
                        S[vi] = 0.0
                    S[vi] = S[vi] + A[vi, vk]
                with block("C"):
                    vi = axis.spatial(3, i)
                    vk = axis.spatial(4, k)
                    reads(S[vi])
                    writes(C[vi, vk])
                    C[vi, vk] = S[vi]


@prim_func
def running_compacted(A: Buffer((3, 4), "float32"), C: Buffer((3, 4), "float32")):
    with block("root"):
        reads()
        writes()
        for i in serial(0, 3):
            with allocate((1,), "float32") as S:
                for k in serial(0, 4):
                    with block("S"):
                        vi = axis.spatial(3, i)
                        vk = axis.reduce(4, k)
                        reads(A[vi, vk])
                        writes(S[vi - i])
                        with init():
                            S[vi - i] = 0.0
                        S[vi - i] = S[vi - i] + A[vi, vk]
                    with block("C"):
                        vi = axis.spatial(3, i)
                        vk = axis.spatial(4, k)
                        reads(S[vi - i])
                        writes(C[vi, vk])
                        C[vi, vk] = S[vi - i]


@prim_func
def middle(A: Buffer((8,), "float32"), C: Buffer((4,), "float32")):
    with block("root"):
        T = alloc_buffer((8,), "float32")
        reads()
        writes()
        for i in serial(0, 4):
            with block("T"):
                vi = axis.spatial(4, i)
                reads(A[vi + 2])
                writes(T[vi + 2])
                T[vi + 2] = A[vi + 2] * 2.0
        for j in serial(0, 4):
            with block("C"):
                vj = axis.spatial(4, j)
                reads(T[vj + 2])
                writes(C[vj])
                C[vj] = T[vj + 2] + 1.0


@prim_func
def middle_compacted(A: Buffer((8,), "float32"), C: Buffer((4,), "float32")):
    with block("root"):
        T = alloc_buffer((4,), "float32")
        reads()
        writes()
        for i in serial(0, 4):
            with block("T"):
                vi = axis.spatial(4, i)
                reads(A[vi + 2])
                writes(T[vi])
                T[vi] = A[vi + 2] * 2.0
        for j in serial(0, 4):
            with block("C"):
                vj = axis.spatial(4, j)
                reads(T[vj])
                writes(C[vj])
                C[vj] = T[vj] + 1.0


@prim_func
def carried(A: Buffer((4,), "float32"), C: Buffer((4,), "float32")):
    with block("root"):
        T = alloc_buffer((1,), "float32")
        reads()
        writes()
        for i in serial(0, 4):
            with block("C"):
                vi = axis.spatial(4, i)
                reads(A[vi], T[0])
                writes(C[vi])
                C[vi] = A[vi] + select(vi > 0, T[0], 0.0)
            with block("T"):
                vi = axis.spatial(4, i)
                reads(A[vi])
                writes(T[0])
                T[0] = A[vi]


@prim_func
def rows_of_n(A: Buffer((4, n), "float32"), C: Buffer((4, n), "float32")):
    with block("root"):
        T = alloc_buffer((4, n), "float32")
        reads()
        writes()
        for i in serial(0, 4):
            for j in serial(0, n):
                with block("P"):
                    vi = axis.spatial(4, i)
                    vj = axis.spatial(n, j)
                    reads(A[vi, vj])
                    writes(T[vi, vj])
                    T[vi, vj] = A[vi, vj] * 2.0
            for k in serial(0, n):
                with block("Q"):
                    vi = axis.spatial(4, i)
                    vk = axis.spatial(n, k)
                    reads(T[vi, vk])
                    writes(C[vi, vk])
                    C[vi, vk] = T[vi, vk] + 1.0


@prim_func
def parallel_rows_of_n(A: Buffer((4, n), "float32"), C: Buffer((4, n), "float32")):
    with block("root"):
        T = alloc_buffer((4, n), "float32")
        reads()
        writes()
        for i in parallel(0, 4):
            for j in serial(0, n):
                with block("P"):
                    vi = axis.spatial(4, i)
                    vj = axis.spatial(n, j)
                    reads(A[vi, vj])
                    writes(T[vi, vj])
                    T[vi, vj] = A[vi, vj] * 2.0
            for k in serial(0, n):
                with block("Q"):
                    vi = axis.spatial(4, i)
                    vk = axis.spatial(n, k)
                    reads(T[vi, vk])
                    writes(C[vi, vk])
                    C[vi, vk] = T[vi, vk] + 1.0


@prim_func
def parallel_rows_of_n_compacted(A: Buffer((4, n), "float32"), C: Buffer((4, n), "float32")):
    with block("root"):
        reads()
        writes()
        for i in parallel(0, 4):
            with allocate((1, n), "float32") as T:
                for j in serial(0, n):
                    with block("P"):
                        vi = axis.spatial(4, i)
                        vj = axis.spatial(n, j)
                        reads(A[vi, vj])
                        writes(T[vi - i, vj])
                        T[vi - i, vj] = A[vi, vj] * 2.0
                for k in serial(0, n):
                    with block("Q"):
                        vi = axis.spatial(4, i)
                        vk = axis.spatial(n, k)
                        reads(T[vi - i, vk])
                        writes(C[vi, vk])
                        C[vi, vk] = T[vi - i, vk] + 1.0


@prim_func
def lanes(A: Buffer((8,), "float32"), C: Buffer((8,), "float32")):
    with block("root"):
        T = alloc_buffer((8,), "float32")
        reads()
        writes()
        for i in vectorized(0, 8):
            with block("P"):
                vi = axis.spatial(8, i)
                reads(A[vi])
                writes(T[vi])
                T[vi] = A[vi] * 2.0
            with block("Q"):
                vi = axis.spatial(8, i)
                reads(T[vi])
                writes(C[vi])
                C[vi] = T[vi] + 1.0


@prim_func
def unit_batch(A: Buffer((1, 8), "float32"), C: Buffer((1, 8), "float32")):
    with block("root"):
        T = alloc_buffer((1, 8), "float32")
        reads()
        writes()
        for b in serial(0, 1):
            for i in serial(0, 8):
                with block("P"):
                    vb = axis.spatial(1, b)
                    vi = axis.spatial(8, i)
                    reads(A[vb, vi])
                    writes(T[vb, vi])
                    T[vb, vi] = A[vb, vi] * 2.0
                with block("Q"):
                    vb = axis.spatial(1, b)
                    vi = axis.spatial(8, i)
                    reads(T[vb, vi])
                    writes(C[vb, vi])
                    C[vb, vi] = T[vb, vi] + 1.0


@prim_func
def unit_batch_compacted(A: Buffer((1, 8), "float32"), C: Buffer((1, 8), "float32")):
    with block("root"):
        reads()
        writes()
        for b in serial(0, 1):
            for i in serial(0, 8):
                with allocate((1, 1), "float32") as T:
                    with block("P"):
                        vb = axis.spatial(1, b)
                        vi = axis.spatial(8, i)
                        reads(A[vb, vi])
                        writes(T[vb - b, vi - i])
                        T[vb - b, vi - i] = A[vb, vi] * 2.0
                    with block("Q"):
                        vb = axis.spatial(1, b)
                        vi = axis.spatial(8, i)
                        reads(T[vb - b, vi - i])
                        writes(C[vb, vi])
                        C[vb, vi] = T[vb - b, vi - i] + 1.0
"""

FUNCS = prims(CASES)


@pytest.mark.parametrize(
    "name",
    [
        "running",  # a running sum: the buffer carries across k, so it lives in i, not in k
        "middle",  # used by loops of their own: it stays in the root, shrunk to what they use
        # a dimension as small as the box still gets its offset: the index becomes a
        # constant (vb - b with vb = b), which a register tile needs
        "unit_batch",
        # a row of symbolic length: each iteration of the parallel loop, a thread's task,
        # allocates its own (a serial loop would allocate at every iteration: rows_of_n)
        "parallel_rows_of_n",
    ],
)
def test_golden(name):
    assert_compacts_to(FUNCS[name], FUNCS[f"{name}_compacted"])
    arrays = arrays_for(FUNCS[name], np.random.default_rng(0), {"n": 5})
    got = outputs_of(FUNCS[f"{name}_compacted"], arrays)
    np.testing.assert_array_equal(got[-1], outputs_of(FUNCS[name], arrays)[-1])


@pytest.mark.parametrize(
    "name",
    [
        "carried",  # each iteration reads what the one before wrote: not the loop's own
        "lanes",  # a vectorized loop's iterations share one body
        "rows_of_n",  # a row of symbolic length would be allocated at every iteration
    ],
)
def test_a_buffer_stays_where_moving_it_would_not_keep_the_result_or_pay(name):
    assert_compacts_to(FUNCS[name], FUNCS[name])


def test_a_row_of_symbolic_length_in_a_parallel_loop_keeps_the_result_through_the_cpu_codegen():
    # each worker's iterations allocate and free their row on the heap
    funcs = {"f": FUNCS["parallel_rows_of_n_compacted"]}
    a = np.random.default_rng(0).standard_normal((4, 37)).astype(np.float32)
    c = np.zeros_like(a)
    with load_cpu_library(compile_prim_funcs(funcs).shared_object) as lib:
        lib.call("f", [a, c])
    np.testing.assert_array_equal(c, a * np.float32(2.0) + np.float32(1.0))


# -- results ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_compacted_schedules_keep_the_result_in_tir_eval(name):
    sch = scheduled(name)
    compacted = compact_buffers(sch.func)
    arrays = arrays_for(sch.func, np.random.default_rng(0), SIZES)
    assert_same(outputs_of(compacted, arrays), outputs_of(SCHEDULES[name][0](), arrays))
    text = print_prim_func("f", compacted)
    assert structural_equal(prims(text)["f"], compacted)


def test_compacted_schedules_keep_the_result_through_the_cpu_codegen():
    funcs = {name: compact_buffers(scheduled(name).func) for name in SCHEDULES}
    funcs.update({f"{name}_ref": SCHEDULES[name][0]() for name in SCHEDULES})
    with compile_all(funcs) as lib:
        for name in SCHEDULES:
            for n in (1, 7, 8):  # the symbolic matmul: a partial tile and whole ones
                arrays = arrays_for(funcs[name], np.random.default_rng(n), {"n": n})
                want = run_compiled(lib, f"{name}_ref", arrays)
                assert_same(run_compiled(lib, name, arrays), want)


# -- the matmul micro-kernel in registers --------------------------------------------------------


def micro_kernel(n: int, parallel: bool) -> T.PrimFunc:
    """The docs/schedule.md recipe with 4 x 16 float tiles; the row and column tile loops
    fused, and run in parallel when asked (last, as the rules do)."""
    sch = Schedule(op_func("matmul", (n, n), (n, n)))
    block = sch.get_block("matmul")
    i, j, k = sch.get_loops(block)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    tile = sch.fuse(i0, j0)
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, tile)
    init = sch.decompose_reduction(block, k)
    sch.unroll(i1)
    sch.vectorize(j1)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(write_back)[-1])
    if parallel:
        sch.parallel(tile)
    return sch.func


def test_the_compacted_micro_kernel_keeps_its_accumulators_in_registers():
    """In the parallel loop's outlined function the full-size local buffer is memory shared
    with the caller, stored to as the tile is computed; the 4 x 16 tile, that function's own
    alloca, is promoted to registers, so the only vector stores left are the write-back's,
    one per row."""
    full = micro_kernel(64, parallel=True)
    compacted = compact_buffers(full)
    assert [b.shape for b in _allocations(compacted)] == [(4, 16)]
    worker_full = _outlined(compile_prim_funcs({"mm": full}).llvm_ir)
    worker_tile = _outlined(compile_prim_funcs({"mm": compacted}).llvm_ir)
    assert "= alloca" not in worker_tile and "malloc" not in worker_tile
    assert worker_tile.count("store <16 x float>") == 4
    assert worker_full.count("store <16 x float>") > 4
    funcs = {"full": full, "tile": compacted, "ref": op_func("matmul", (64, 64), (64, 64))}
    arrays = arrays_for(funcs["ref"], np.random.default_rng(0))
    with compile_all(funcs) as lib:
        want = run_compiled(lib, "ref", arrays)[-1]
        for name in ("full", "tile"):
            np.testing.assert_allclose(run_compiled(lib, name, arrays)[-1], want, rtol=1e-5)


def _outlined(llvm_ir: str) -> str:
    """The optimized body of the parallel loop's outlined function."""
    start = llvm_ir.index("@mm.parallel0(")
    return llvm_ir[start : llvm_ir.index("\n}", start)]


def _allocations(func: T.PrimFunc) -> list[T.Buffer]:
    return [loc.stmt.buffer for loc in walk(func.body) if isinstance(loc.stmt, T.Allocate)]


def test_micro_benchmark_512_matmul_with_and_without_compaction(capsys):
    """Printed, not asserted (timings on a shared machine are noise): GFLOP/s of the 512^3
    micro-kernel on one thread and in parallel, the local buffer full size or compacted."""
    n = 512
    funcs = {}
    for parallel in (False, True):
        kind = "parallel" if parallel else "serial"
        func = micro_kernel(n, parallel)
        funcs[f"{kind}_full"], funcs[f"{kind}_tile"] = func, compact_buffers(func)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    want = a.astype(np.float64) @ b.astype(np.float64)
    rates = {}
    with load_cpu_library(compile_prim_funcs(funcs).shared_object) as lib:
        for name in funcs:
            c = np.zeros((n, n), np.float32)
            lib.call(name, [a, b, c])
            np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3)
            best = min(_seconds(partial(lib.call, name, [a, b, c])) for _ in range(5))
            rates[name] = 2 * n**3 / best / 1e9
    with capsys.disabled():
        print("\n512^3 matmul micro-kernel, GFLOP/s: " +
              ", ".join(f"{name} {rate:.1f}" for name, rate in rates.items()))  # fmt: skip


def _seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start
