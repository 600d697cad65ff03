"""The GPU-semantics executor (tcc.ir.gpu_eval): scheduled kernels against numpy, barrier
phases, fresh shared/local memory, and the errors for races, divergent barriers and
misplaced thread bindings."""

import dataclasses

import numpy as np
import pytest

from tcc.ir import te
from tcc.ir import tir as T
from tcc.ir.expr import Var
from tcc.ir.gpu_eval import GpuEvalError, run_gpu_prim_func
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_prim_func
from tcc.ir.structural import structural_equal
from tcc.ir.tir_eval import TirEvalError, run_prim_func
from tcc.lower.schedule import Schedule
from tcc.lower.schedule.compact import compact_buffers

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def prim(text: str) -> T.PrimFunc:
    (func,) = parse_module(text).prim_funcs.values()
    return func


# -- kernels -------------------------------------------------------------------------------


def elementwise(factor: int) -> T.PrimFunc:
    """B = A * 2 + 1 over a symbolic n, split by `factor` and bound to blocks and threads."""
    n = Var("n")
    A = te.placeholder((n,), "float32", "A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    sch = Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_block("B"))
    outer, inner = sch.split(i, [None, factor])
    sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")
    return sch.func


def row_sum_text(threads: int = 32, drop: int | None = None) -> str:
    """S[r] = sum(A[r, :]): block r's threads each sum a strided part (in a local
    accumulator) into shared `part`, then a tree over `part`, one barrier before each level;
    `drop` leaves out the barrier before that level."""
    lines = [
        "@prim_func",
        'def row_sum(A: Buffer((rows, n), "float32"), S: Buffer((rows,), "float32")):',
        '    with block("root"):',
        f'        part = alloc_buffer(({threads},), "float32", scope="shared")',
        '        acc = alloc_buffer((1,), "float32", scope="local")',
        "        reads()",
        "        writes()",
        '        for r in thread_binding(0, rows, thread="blockIdx.x"):',
        f'            for t in thread_binding(0, {threads}, thread="threadIdx.x"):',
        "                acc[0] = 0.0",
        f"                for m in serial(0, (n + {threads - 1}) // {threads}):",
        f"                    if t + m * {threads} < n:",
        f"                        acc[0] = acc[0] + A[r, t + m * {threads}]",
        "                part[t] = acc[0]",
    ]
    stride, level = threads // 2, 0
    while stride >= 1:
        if level != drop:
            lines.append("            evaluate(syncthreads())")
        lines.append(f'            for t in thread_binding(0, {stride}, thread="threadIdx.x"):')
        lines.append(f"                part[t] = part[t] + part[t + {stride}]")
        stride, level = stride // 2, level + 1
    lines.append('            for t in thread_binding(0, 1, thread="threadIdx.x"):')
    lines.append("                S[r] = part[0]")
    return "\n".join(lines) + "\n"


def tiled_matmul(m: int, n: int, k: int, tile: int) -> tuple[T.PrimFunc, str]:
    """C = A @ B with (tile x tile)-thread blocks over C's tiles; per step of the k loop the
    block's threads copy a tile of A and of B into shared memory (cache_read + compute_at,
    the copy loops fused, split and bound to the threads). Returns the function and the
    name of the k-step loop, where the barriers go."""
    A = te.placeholder((m, k), "float32", "A")
    B = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis(k, "r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=[r]), "C")
    sch = Schedule(te.create_prim_func([A, B, C]))
    block = sch.get_block("C")
    i, j, kk = sch.get_loops(block)
    bi, ti = sch.split(i, [None, tile])
    bj, tj = sch.split(j, [None, tile])
    ko, ki = sch.split(kk, [None, tile])
    sch.reorder(bi, bj, ko, ti, tj, ki)
    axes = ("blockIdx.y", "blockIdx.x", "threadIdx.y", "threadIdx.x")
    for loop, axis in zip((bi, bj, ti, tj), axes):
        sch.bind(loop, axis)
    for index in (0, 1):
        copy = sch.cache_read(block, index, "shared")
        sch.compute_at(copy, ko)
        ty, tx = sch.split(sch.fuse(*sch.get_loops(copy)[-2:]), [None, tile])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
    return sch.func, sch.get(ko).var.name


def with_barriers(func: T.PrimFunc, loop: str, positions: tuple[int, ...]) -> T.PrimFunc:
    """`func` with a barrier inserted at each position of the statement list of `loop`'s
    body (under any allocations there): the schedule primitives insert none."""

    def into_body(s):
        if isinstance(s, T.Allocate):
            return dataclasses.replace(s, body=into_body(s.body))
        stmts = list(s.stmts)
        for pos in sorted(positions, reverse=True):
            stmts.insert(pos, T.syncthreads())
        return T.SeqStmt(tuple(stmts))

    def walk(s):
        if isinstance(s, T.For) and s.var.name == loop:
            return dataclasses.replace(s, body=into_body(s.body))
        if isinstance(s, (T.For, T.Block, T.Allocate)):
            return dataclasses.replace(s, body=walk(s.body))
        if isinstance(s, T.SeqStmt):
            return T.SeqStmt(tuple(walk(x) for x in s.stmts))
        return s

    return dataclasses.replace(func, body=walk(func.body))


# -- results against numpy -----------------------------------------------------------------


@pytest.mark.parametrize("n", [37, 40, 3])
def test_elementwise_split_and_bound_with_a_guarded_tail(n):
    func = elementwise(8)
    a, b = rand(n), np.full(n, 7.0, "float32")
    run_gpu_prim_func(func, [a, b])
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("rows, n", [(3, 75), (2, 20), (1, 64)])
def test_row_sum_tree_reduction_through_shared_memory(rows, n):
    func = prim(row_sum_text())
    a, s = rand(rows, n), np.zeros(rows, "float32")
    run_gpu_prim_func(func, [a, s])
    np.testing.assert_allclose(s, a.sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("compact", [False, True])
def test_matmul_tiled_through_shared_memory(compact):
    func, k_step = tiled_matmul(12, 8, 12, 4)
    if compact:  # 4 x 4 shared tiles, reused by every k step
        func = compact_buffers(func)
    func = with_barriers(func, k_step, (2, 3))  # after the copies, after the compute
    a, b, c = rand(12, 12), rand(12, 8), np.zeros((12, 8), "float32")
    run_gpu_prim_func(func, [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_a_block_is_as_wide_as_its_widest_thread_loop_and_narrower_loops_are_guarded():
    func = prim("""
@prim_func
def f(A: Buffer((2, 8), "float32"), B: Buffer((2, 8), "float32")):
    for b in thread_binding(0, 2, thread="blockIdx.x"):
        for t in thread_binding(0, 8, thread="threadIdx.x"):
            B[b, t] = A[b, t]
        for t in thread_binding(0, 3, thread="threadIdx.x"):
            B[b, t] = B[b, t] * 10.0
""")
    a, b = rand(2, 8), np.zeros((2, 8), "float32")
    run_gpu_prim_func(func, [a, b])
    want = a.copy()
    want[:, :3] *= 10
    np.testing.assert_allclose(b, want, rtol=1e-6)


def test_every_thread_has_its_own_local_buffer_and_shared_memory_starts_unset():
    func = prim("""
@prim_func
def f(B: Buffer((2, 4), "float32"), U: Buffer((2, 4), "float32"), I: Buffer((2,), "int32")):
    with block("root"):
        mine = alloc_buffer((1,), "float32", scope="local")
        sh = alloc_buffer((4,), "float32", scope="shared")
        ish = alloc_buffer((1,), "int32", scope="shared")
        reads()
        writes()
        for b in thread_binding(0, 2, thread="blockIdx.x"):
            for t in thread_binding(0, 4, thread="threadIdx.x"):
                mine[0] = cast("float32", t * 10 + b)
                U[b, t] = sh[t]
            evaluate(syncthreads())
            for t in thread_binding(0, 4, thread="threadIdx.x"):
                B[b, t] = mine[0]
                sh[t] = 1.0
            for t in thread_binding(0, 1, thread="threadIdx.x"):
                I[b] = ish[0]
""")
    b, u, i = np.zeros((2, 4), "float32"), np.zeros((2, 4), "float32"), np.zeros(2, "int32")
    run_gpu_prim_func(func, [b, u, i])
    np.testing.assert_array_equal(b, np.arange(4)[None, :] * 10 + np.arange(2)[:, None])
    assert np.isnan(u).all()  # block 1's shared memory is fresh, not block 0's ones
    np.testing.assert_array_equal(i, np.iinfo(np.int32).min)


def test_threads_exchange_global_values_across_a_barrier_within_their_block():
    func = prim("""
@prim_func
def f(A: Buffer((8,), "float32"), T: Buffer((8,), "float32"), B: Buffer((8,), "float32")):
    for b in thread_binding(0, 2, thread="blockIdx.x"):
        for t in thread_binding(0, 4, thread="threadIdx.x"):
            T[b * 4 + t] = A[b * 4 + t] + 1.0
        evaluate(syncthreads())
        for t in thread_binding(0, 4, thread="threadIdx.x"):
            B[b * 4 + t] = T[b * 4 + (t + 1) % 4]
""")
    a, tmp, b = rand(8), np.zeros(8, "float32"), np.zeros(8, "float32")
    run_gpu_prim_func(func, [a, tmp, b])
    np.testing.assert_allclose(b, np.roll((a + 1).reshape(2, 4), -1, axis=1).ravel())


def test_host_code_and_several_launches_run_in_order():
    func = prim("""
@prim_func
def f(A: Buffer((6,), "float32"), T: Buffer((6,), "float32"), B: Buffer((6,), "float32")):
    for i in serial(0, 6):
        T[i] = A[i] * 3.0
    for b in thread_binding(0, 2, thread="blockIdx.x"):
        for t in thread_binding(0, 3, thread="threadIdx.x"):
            T[b * 3 + t] = T[b * 3 + t] + 1.0
    for b in thread_binding(0, 3, thread="blockIdx.x"):
        for t in thread_binding(0, 2, thread="threadIdx.x"):
            B[b * 2 + t] = T[5 - (b * 2 + t)]
""")
    a, tmp, b = rand(6), np.zeros(6, "float32"), np.zeros(6, "float32")
    run_gpu_prim_func(func, [a, tmp, b])
    np.testing.assert_allclose(b, (a * 3 + 1)[::-1], rtol=1e-6)


def test_tir_eval_runs_barrier_kernels_serially_with_the_barrier_a_no_op():
    a = rand(3, 75)
    s = np.zeros(3, "float32")
    run_prim_func(prim(row_sum_text()), [a, s])
    np.testing.assert_allclose(s, a.sum(axis=1), rtol=1e-5, atol=1e-5)
    func, k_step = tiled_matmul(8, 8, 8, 4)
    a, b, c = rand(8, 8), rand(8, 8), np.zeros((8, 8), "float32")
    run_prim_func(with_barriers(func, k_step, (2, 3)), [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_a_barrier_prints_and_parses_back():
    func, k_step = tiled_matmul(8, 8, 8, 4)
    func = with_barriers(func, k_step, (2, 3))
    text = print_prim_func("mm", func)
    assert text.count("evaluate(syncthreads())") == 2
    assert structural_equal(prim(text), func)
    assert structural_equal(prim(row_sum_text()), prim(print_prim_func("f", prim(row_sum_text()))))


# -- synchronization errors ------------------------------------------------------------------


@pytest.mark.parametrize("level", range(5))
def test_the_reduction_with_a_barrier_left_out_is_a_race(level):
    stride = 16 >> level
    with pytest.raises(GpuEvalError) as info:
        run_gpu_prim_func(prim(row_sum_text(drop=level)), [rand(2, 40), np.zeros(2, "float32")])
    msg = str(info.value)
    assert "\n" not in msg
    assert f"data race on shared buffer 'part' element ({stride},)" in msg
    assert f"thread ({stride}, 0, 0) of block (0, 0, 0) writes it in phase {level}" in msg
    assert "thread (0, 0, 0) read it in the same phase" in msg
    assert "put a syncthreads() barrier" in msg


def test_the_tiled_matmul_without_its_barriers_races():
    func, k_step = tiled_matmul(8, 8, 8, 4)
    arrays = [rand(8, 8), rand(8, 8), np.zeros((8, 8), "float32")]
    with pytest.raises(GpuEvalError, match="data race on shared buffer 'A_shared'.* phase 0"):
        run_gpu_prim_func(with_barriers(func, k_step, (3,)), arrays)  # none after the copies
    # with a shared tile reused by each k step, the copy of the next step races the compute
    tiles = compact_buffers(func)
    with pytest.raises(GpuEvalError, match="'A_shared' element.*reads it in phase 1"):
        run_gpu_prim_func(with_barriers(tiles, k_step, (2,)), arrays)


DIVERGENT = """
@prim_func
def f(A: Buffer((32,), "float32"), B: Buffer((32,), "float32")):
    for b in thread_binding(0, 1, thread="blockIdx.x"):
        for t in thread_binding(0, 32, thread="threadIdx.x"):
            B[t] = A[t]
            if t < 16:
                evaluate(syncthreads())
            B[t] = B[t] + 1.0
"""


def test_a_barrier_under_a_thread_dependent_if_diverges():
    with pytest.raises(GpuEvalError) as info:
        run_gpu_prim_func(prim(DIVERGENT), [rand(32), np.zeros(32, "float32")])
    msg = str(info.value)
    assert msg.startswith("barrier divergence in kernel 1 (loop 'b'), block (0, 0, 0), phase 0")
    assert "16 threads (threadIdx.x 0-15) wait at barrier #1 in loop 't'" in msg
    assert "16 threads (threadIdx.x 16-31) finished the kernel" in msg
    # every thread of the block reaching it is fine, even under the `if`
    run_gpu_prim_func(prim(DIVERGENT.replace("t < 16", "t < 32")), [rand(32), np.zeros(32, "f4")])


def test_a_barrier_in_a_loop_with_a_thread_dependent_trip_count_diverges():
    func = prim("""
@prim_func
def f(B: Buffer((4,), "float32")):
    for b in thread_binding(0, 1, thread="blockIdx.x"):
        for t in thread_binding(0, 4, thread="threadIdx.x"):
            B[t] = 0.0
            for i in serial(0, t % 2 + 1):
                evaluate(syncthreads())
            evaluate(syncthreads())
""")
    with pytest.raises(GpuEvalError) as info:
        run_gpu_prim_func(func, [np.zeros(4, "float32")])
    msg = str(info.value)
    assert "phase 1 (after barrier #1 in loop 'i')" in msg
    assert "2 threads (threadIdx.x 0, 2) wait at barrier #2 in loop 't'" in msg
    assert "2 threads (threadIdx.x 1, 3) wait at barrier #1 in loop 'i'" in msg


def test_two_threads_storing_to_one_global_element_race():
    func = prim("""
@prim_func
def f(A: Buffer((4,), "float32"), B: Buffer((1,), "float32")):
    for b in thread_binding(0, 1, thread="blockIdx.x"):
        for t in thread_binding(0, 4, thread="threadIdx.x"):
            B[0] = A[t]
""")
    with pytest.raises(GpuEvalError) as info:
        run_gpu_prim_func(func, [rand(4), np.zeros(1, "float32")])
    msg = str(info.value)
    assert msg.startswith("data race on global buffer 'B' element (0,) in kernel 1 (loop 'b')")
    assert "thread (1, 0, 0) of block (0, 0, 0) writes it in phase 0" in msg
    assert "thread (0, 0, 0) wrote it in the same phase" in msg
    # SIMT: a store outside the thread loops runs in every thread, so it races the same way
    simt = prim("""
@prim_func
def f(A: Buffer((4,), "float32"), B: Buffer((1,), "float32")):
    for b in thread_binding(0, 1, thread="blockIdx.x"):
        for t in thread_binding(0, 4, thread="threadIdx.x"):
            evaluate(A[t])
        B[0] = 0.0
""")
    with pytest.raises(GpuEvalError, match="global buffer 'B' element \\(0,\\)"):
        run_gpu_prim_func(simt, [rand(4), np.zeros(1, "float32")])
    run_gpu_prim_func(func, [rand(4), np.zeros(1, "float32")], races=False)  # unchecked


def test_blocks_are_never_ordered_not_even_by_a_barrier():
    func = prim("""
@prim_func
def f(T: Buffer((2,), "float32"), B: Buffer((2,), "float32")):
    for b in thread_binding(0, 2, thread="blockIdx.x"):
        for t in thread_binding(0, 1, thread="threadIdx.x"):
            T[b] = 1.0
        evaluate(syncthreads())
        for t in thread_binding(0, 1, thread="threadIdx.x"):
            B[b] = T[1 - b]
""")
    with pytest.raises(GpuEvalError) as info:
        run_gpu_prim_func(func, [np.zeros(2, "float32"), np.zeros(2, "float32")])
    msg = str(info.value)
    assert "global buffer 'T' element (1,)" in msg
    assert "thread (0, 0, 0) of block (1, 0, 0) writes it in phase 0" in msg
    assert "and thread (0, 0, 0) of block (0, 0, 0) read it;" in msg
    assert "blocks are never ordered" in msg


# -- binding errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "loops, message",
    [
        (('thread="threadIdx.x"', 'thread="threadIdx.y"'),
         "loop 'i' is bound to threadIdx.x outside any blockIdx loop"),
        (('thread="blockIdx.x"', 'thread="threadIdx.x"', 'thread="blockIdx.y"'),
         "loop 'k' is bound to blockIdx.y inside loop 'j', bound to threadIdx.x"),
        (('thread="blockIdx.x"', 'thread="threadIdx.x"', 'thread="threadIdx.x"'),
         "loop 'k' is bound to threadIdx.x inside loop 'j', bound to it too"),
        (('thread="blockIdx.x"', 'thread="vthread"'), "unknown thread axis 'vthread'"),
    ],
)  # fmt: skip
def test_misplaced_thread_bindings_are_refused(loops, message):
    lines = ['@prim_func\ndef f(B: Buffer((2, 2, 2), "float32")):']
    names = "ijk"[: len(loops)]
    for depth, (name, tag) in enumerate(zip(names, loops)):
        lines.append(f"{'    ' * (depth + 1)}for {name} in thread_binding(0, 2, {tag}):")
    index = ", ".join(names + "0" * (3 - len(loops)))
    lines.append(f"{'    ' * (len(loops) + 1)}B[{index}] = 1.0")
    with pytest.raises(GpuEvalError, match=message):
        run_gpu_prim_func(prim("\n".join(lines) + "\n"), [np.zeros((2, 2, 2), "float32")])


def test_a_block_size_depending_on_the_kernel_is_refused():
    func = prim("""
@prim_func
def f(B: Buffer((4, 4), "float32")):
    for b in thread_binding(0, 4, thread="blockIdx.x"):
        for t in thread_binding(0, b + 1, thread="threadIdx.x"):
            B[b, t] = 1.0
""")
    want = (
        r"extent b \+ 1 of loop 't', bound to threadIdx.x, uses 'b', which is not known at launch"
    )
    with pytest.raises(GpuEvalError, match=want):
        run_gpu_prim_func(func, [np.zeros((4, 4), "float32")])


def test_an_error_in_a_thread_names_the_kernel_block_and_thread():
    func = prim("""
@prim_func
def f(B: Buffer((4,), "float32")):
    for b in thread_binding(0, 2, thread="blockIdx.x"):
        for t in thread_binding(0, 4, thread="threadIdx.x"):
            B[b * 4 + t] = 1.0
""")
    want = r"kernel 1 \(loop 'b'\), block \(1, 0, 0\), thread \(0, 0, 0\): buffer 'B' accessed"
    with pytest.raises(TirEvalError, match=want) as info:
        run_gpu_prim_func(func, [np.zeros(4, "float32")])
    assert not isinstance(info.value, GpuEvalError)  # what tir_eval raises, located
