"""parallel / vectorize / bind accept a loop only when its iterations are independent: each
way a loop can carry a dependence is refused with its reason, and the independent shapes the
block primitives produce pass: producer and consumer under one loop, private storage, and
nests of their own (an init, a write-back, an epilogue) touching each iteration's own tile."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from tcc.ir import tir as T
from tcc.ir.parser import parse_module
from tcc.lower.schedule import Schedule, ScheduleError
from tcc.lower.schedule.state import walk
from tests.lower.schedule.cases import arrays_for, matmul, outputs_of
from tests.lower.schedule.test_schedule_blocks import (
    big_matmul,
    conv_add_relu,
    scheduled,
)

TEXT = """
@prim_func
def shift(A: Buffer((8,), "float32"), B: Buffer((8,), "float32")):
    with block("root"):
        reads()
        writes()
        for i in serial(0, 7):
            with block("S"):
                vi = axis.spatial(8, i + 1)
                reads(B[vi - 1])
                writes(B[vi])
                B[vi] = B[vi - 1] * 2.0


@prim_func
def halves(A: Buffer((8,), "float32"), B: Buffer((4,), "float32")):
    with block("root"):
        reads()
        writes()
        for i in serial(0, 8):
            with block("H"):
                vi = axis.spatial(8, i)
                reads(A[vi])
                writes(B[vi // 2])
                B[vi // 2] = A[vi]


@prim_func
def repeat(A: Buffer((8,), "float32"), B: Buffer((8,), "float32")):
    with block("root"):
        reads()
        writes()
        for t in serial(0, 3):
            for i in serial(0, 8):
                with block("R"):
                    vi = axis.spatial(8, i)
                    reads(A[vi])
                    writes(B[vi])
                    B[vi] = A[vi] + 1.0


@prim_func
def raw(A: Buffer((8,), "float32"), B: Buffer((8,), "float32"), C: Buffer((8,), "float32")):
    with block("root"):
        reads()
        writes()
        for i in serial(0, 8):
            B[i] = A[i]
            with block("C"):
                vi = axis.spatial(8, i)
                reads(B[vi])
                writes(C[vi])
                C[vi] = B[vi]
        for j in serial(0, 8):
            if A[j] > 0.0:
                with block("D"):
                    vj = axis.spatial(8, j)
                    reads(A[vj])
                    writes(C[vj])
                    C[vj] = A[vj]


@prim_func
def gather(I: Buffer((8,), "int64"), B: Buffer((8,), "float32")):
    with block("root"):
        reads()
        writes()
        for i in serial(0, 8):
            with block("G"):
                vi = axis.spatial(8, i)
                reads(B[0:8], I[vi])
                writes(B[vi])
                B[vi] = B[I[vi]] + 1.0


@prim_func
def fused(A: Buffer((8,), "float32"), C: Buffer((8,), "float32")):
    with block("root"):
        T = alloc_buffer((8,), "float32")
        reads()
        writes()
        for i in serial(0, 8):
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
        for j in serial(0, 7):
            with block("P2"):
                vj = axis.spatial(8, j)
                reads(A[vj])
                writes(T[vj])
                T[vj] = A[vj] * 2.0
            with block("Q2"):
                vj = axis.spatial(8, j)
                reads(T[vj + 1])
                writes(C[vj])
                C[vj] = T[vj + 1]
        for k in serial(0, 8):
            with allocate((1,), "float32") as L:
                with block("L1"):
                    vk = axis.spatial(8, k)
                    reads(A[vk])
                    writes(L[0])
                    L[0] = A[vk]
                with block("L2"):
                    vk = axis.spatial(8, k)
                    reads(L[0])
                    writes(C[vk])
                    C[vk] = L[0]


@prim_func
def prefix_sum(A: Buffer((8,), "float32"), B: Buffer((8,), "float32")):
    with block("root"):
        reads()
        writes()
        for t in serial(0, 2):
            for u in serial(0, 4):
                with block("P"):
                    vi = axis.spatial(8, t * 4 + u)
                    reads(A[vi], B[vi - 1])
                    writes(B[vi])
                    B[vi] = A[vi] + select(vi > 0, B[vi - 1], 0.0)


@prim_func
def line_stencil(A: Buffer((5, 4), "float32"), C: Buffer((4, 4), "float32")):
    with block("root"):
        B = alloc_buffer((5, 4), "float32")
        reads()
        writes()
        for i in serial(0, 5):
            for j in serial(0, 4):
                with block("B"):
                    vi = axis.spatial(5, i)
                    vj = axis.spatial(4, j)
                    reads(A[vi, vj])
                    writes(B[vi, vj])
                    B[vi, vj] = A[vi, vj] * 2.0
            for k in serial(0, 4):
                if i > 0:
                    with block("C"):
                        wi = axis.spatial(4, i - 1)
                        wj = axis.spatial(4, k)
                        reads(B[wi, wj], B[wi + 1, wj])
                        writes(C[wi, wj])
                        C[wi, wj] = B[wi, wj] + B[wi + 1, wj]


@prim_func
def fused_rows(A: Buffer((4, 4), "float32"), B: Buffer((4,), "float32")):
    with block("root"):
        reads()
        writes()
        for f in serial(0, 16):
            with block("R"):
                vi = axis.spatial(4, f // 4)
                vj = axis.spatial(4, f % 4)
                reads(A[vi, vj])
                writes(B[vi])
                B[vi] = A[vi, vj]
"""

FUNCS = parse_module(TEXT).prim_funcs


def schedule_and_loop(func: T.PrimFunc, block: str, position: int = 0):
    sch = Schedule(func)
    return sch, sch.get_loops(sch.get_block(block))[position]


def refused_with(sch: Schedule, primitive: str, loop, reason: str, *args) -> None:
    func = sch.func
    with pytest.raises(ScheduleError) as info:
        getattr(sch, primitive)(loop, *args)
    assert str(info.value) == f"{primitive}: loop '{loop.var.name}': {reason}"
    assert sch.func is func


CARRIES_K = (
    "it carries reduction variable v_k of block 'matmul', whose iterations accumulate into "
    "the same element; its iterations cannot run at once"
)


@pytest.mark.parametrize("primitive, args", [("parallel", ()), ("vectorize", ()),
                                             ("bind", ("threadIdx.x",))])  # fmt: skip
def test_a_reduction_loop_is_refused(primitive, args):
    sch, k = schedule_and_loop(matmul(), "matmul", 2)
    refused_with(sch, primitive, k, CARRIES_K, *args)


def test_a_loop_split_from_a_reduction_still_carries_it():
    sch, k = schedule_and_loop(matmul(), "matmul", 2)
    outer, inner = sch.split(k, [None, 4])
    refused_with(sch, "vectorize", inner, CARRIES_K)
    refused_with(sch, "parallel", outer, CARRIES_K)


@pytest.mark.parametrize(
    "func, block, position, reason",
    [
        ("shift", "S", 0, "block 'S' reads B[vi - 1], which other iterations of the loop write"),
        ("halves", "H", 0, "block 'H' writes B[vi // 2], which does not tell the iterations apart"),
        ("repeat", "R", 0, "every iteration runs block 'R' on the same elements"),
        ("raw", "C", 0, "it stores to 'B' outside any block, where no region is declared"),
        ("raw", "D", 0, "a condition reads memory (`A[j] > 0.0`) outside any block"),
        ("gather", "G", 0, "block 'G' reads B[0:8], which other iterations of the loop write"),
        ("fused", "Q2", 0, "block 'Q2' reads T[vj + 1], which other iterations of the loop write"),
        # tiles of a prefix sum: each tile starts from the last element of the one before
        (
            "prefix_sum",
            "P",
            0,
            "block 'P' reads B[vi - 1], which other iterations of the loop write",
        ),
        # row i - 1 of the stencil needs row i - 1 of B, which the previous iteration made
        (
            "line_stencil",
            "C",
            0,
            "block 'C' reads B[wi, wj], which other iterations of the loop write",
        ),
        # every f // 4 (a digit of the fused loop) is written by four iterations
        ("fused_rows", "R", 0, "block 'R' writes B[vi], which does not tell the iterations apart"),
    ],
)
def test_a_loop_carried_dependence_is_refused(func, block, position, reason):
    sch, loop = schedule_and_loop(FUNCS[func], block, position)
    refused_with(sch, "parallel", loop, f"{reason}; its iterations cannot run at once")


def test_independent_loops_pass_and_keep_the_result():
    rng = np.random.default_rng(0)
    func = FUNCS["fused"]
    sch = Schedule(func)
    sch.parallel(sch.get_loops(sch.get_block("Q"))[0])  # producer and consumer, same element
    sch.vectorize(sch.get_loops(sch.get_block("L2"))[0])  # storage allocated per iteration
    repeat = Schedule(FUNCS["repeat"])
    repeat.parallel(repeat.get_loops(repeat.get_block("R"))[1])  # the inner loop is fine
    for before, after in ((func, sch.func), (FUNCS["repeat"], repeat.func)):
        arrays = arrays_for(before, rng)
        for got, want in zip(outputs_of(after, arrays), outputs_of(before, arrays)):
            np.testing.assert_array_equal(got, want)


def test_bind_checks_the_thread_axis():
    sch, i = schedule_and_loop(matmul(), "matmul", 0)
    refused_with(
        sch,
        "bind",
        i,
        "unknown thread axis 'threadIdx.w'; use one of blockIdx.x, blockIdx.y, blockIdx.z, "
        "threadIdx.x, threadIdx.y, threadIdx.z",
        "threadIdx.w",
    )
    sch.bind(i, "threadIdx.x")
    j = sch.get_loops(sch.get_block("matmul"))[1]
    refused_with(
        sch, "bind", j, "loop 'i0' around or inside it is bound to threadIdx.x", "threadIdx.x"
    )


def test_overlapping_tiles_of_a_computed_at_producer_are_refused():
    """compute_at recomputes the halo column in both tiles next to it: what the consumer
    reads, the producer of the next tile writes too (the innermost loop stays fine)."""
    sch = scheduled("stencil_compute_at_guarded")
    outer, inner = sch.get_loops(sch.get_block("C"))[1:]
    reason = "block 'C' reads B[wi, wj], which other iterations of the loop write"
    refused_with(sch, "parallel", outer, f"{reason}; its iterations cannot run at once")
    sch.vectorize(inner)


def micro_kernel(sch: Schedule, fused: bool) -> None:
    """The matmul micro-kernel (docs/schedule.md) made parallel last, over the row tiles or
    over the fused row and column tiles: the init and write-back nests index the local
    tile with loops of their own."""
    block = sch.get_block("matmul")
    i, j, k = sch.get_loops(block)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(i0, j0, k, i1, j1)
    tile = sch.fuse(i0, j0) if fused else j0
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, tile)
    init = sch.decompose_reduction(block, k)
    sch.unroll(i1)
    sch.vectorize(j1)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(write_back)[-1])
    sch.parallel(tile if fused else i0)


def conv_channels_after_epilogue(sch: Schedule) -> None:
    """The epilogue moved under the channel loop first; the channel loop then runs in
    parallel although the epilogue reads conv2d[0, ...] where the conv writes
    conv2d[v_i0, ...]."""
    c = sch.get_loops(sch.get_block("conv2d"))[1]
    sch.reverse_compute_at(sch.get_block("relu"), c)
    sch.parallel(c)


def conv_channels_after_write_back(sch: Schedule) -> None:
    """Accumulated locally per output row with the epilogue in the write-back, init split
    off, then the channel loop made parallel."""
    conv = sch.get_block("conv2d")
    loops = sch.get_loops(conv)
    write_back = sch.cache_write(conv, 0, "local")
    sch.reverse_compute_at(write_back, loops[2])
    sch.reverse_compute_inline(sch.get_block("relu"))
    sch.decompose_reduction(conv, loops[4])
    sch.parallel(loops[1])


PARALLEL_LAST = {
    "matmul_row_tiles": (big_matmul, partial(micro_kernel, fused=False)),
    "matmul_fused_tiles": (big_matmul, partial(micro_kernel, fused=True)),
    "conv_epilogue_at": (conv_add_relu, conv_channels_after_epilogue),
    "conv_write_back": (conv_add_relu, conv_channels_after_write_back),
}


@pytest.mark.parametrize("name", sorted(PARALLEL_LAST))
def test_parallel_after_block_primitives_keeps_the_result(name):
    make, schedule = PARALLEL_LAST[name]
    func = make()
    sch = Schedule(func)
    schedule(sch)
    kinds = [loc.stmt.kind for loc in walk(sch.func.body) if isinstance(loc.stmt, T.For)]
    assert T.ForKind.PARALLEL in kinds
    arrays = arrays_for(func, np.random.default_rng(1))
    for got, want in zip(outputs_of(sch.func, arrays), outputs_of(func, arrays)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
