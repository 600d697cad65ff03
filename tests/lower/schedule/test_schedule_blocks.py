"""Block primitives (compute_inline, reverse_compute_inline, compute_at, reverse_compute_at,
cache_read, cache_write, decompose_reduction): golden IR, results kept through tir_eval and
the real CPU codegen, traces that round-trip through JSON and replay, and one refusal test
per reason (the message, and a schedule left as it was)."""

from __future__ import annotations

import numpy as np
import pytest

from tcc.ir import tir as T
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_prim_func
from tcc.ir.structural import structural_equal
from tcc.lower.passes.fuse_ops import fuse_ops
from tcc.lower.schedule import Schedule, ScheduleError
from tcc.lower.schedule.state import walk
from tests.lower.schedule.cases import (
    arrays_for,
    assert_prints_and_replays,
    compile_all,
    matmul,
    op_func,
    outputs_of,
    prim,
    run_compiled,
    softmax,
    symbolic_matmul,
)

# B = A * 2, then C reads B at two neighbouring columns (a stencil).
STENCIL = """
@prim_func
def stencil(A: Buffer((4, 7), "float32"), C: Buffer((4, 6), "float32")):
    with block("root"):
        B = alloc_buffer((4, 7), "float32")
        reads()
        writes()
        for i in serial(0, 4):
            for j in serial(0, 7):
                with block("B"):
                    vi = axis.spatial(4, i)
                    vj = axis.spatial(7, j)
                    reads(A[vi, vj])
                    writes(B[vi, vj])
                    B[vi, vj] = A[vi, vj] * 2.0
        for ci in serial(0, 4):
            for cj in serial(0, 6):
                with block("C"):
                    wi = axis.spatial(4, ci)
                    wj = axis.spatial(6, cj)
                    reads(B[wi, wj], B[wi, wj + 1])
                    writes(C[wi, wj])
                    C[wi, wj] = B[wi, wj] + B[wi, wj + 1]
"""

# B = A * 2, then C is B transposed plus one.
CHAIN = """
@prim_func
def chain(A: Buffer((4, 6), "float32"), C: Buffer((6, 4), "float32")):
    with block("root"):
        B = alloc_buffer((4, 6), "float32")
        reads()
        writes()
        for i in serial(0, 4):
            for j in serial(0, 6):
                with block("B"):
                    vi = axis.spatial(4, i)
                    vj = axis.spatial(6, j)
                    reads(A[vi, vj])
                    writes(B[vi, vj])
                    B[vi, vj] = A[vi, vj] * 2.0
        for ci in serial(0, 6):
            for cj in serial(0, 4):
                with block("C"):
                    wi = axis.spatial(6, ci)
                    wj = axis.spatial(4, cj)
                    reads(B[wj, wi])
                    writes(C[wi, wj])
                    C[wi, wj] = B[wj, wi] + 1.0
"""

CONV_ADD_RELU = """
constants = {"w": Tensor((4, 3, 3, 3), "float32"), "b": Tensor((4,), "float32")}

@function(inputs=["x", "r"], outputs=["y"])
def main(x: Tensor((1, 3, 6, 6), "float32"), r: Tensor((1, 4, 6, 6), "float32")) -> Tensor((1, 4, 6, 6), "float32"):
    c: Tensor((1, 4, 6, 6), "float32") = op.conv2d(x, const("w"), const("b"), strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1)
    a: Tensor((1, 4, 6, 6), "float32") = op.add(c, r)
    y: Tensor((1, 4, 6, 6), "float32") = op.relu(a)
    return y
"""  # noqa: E501


def stencil() -> T.PrimFunc:
    return prim(STENCIL)


def chain() -> T.PrimFunc:
    return prim(CHAIN)


def conv_add_relu() -> T.PrimFunc:
    """The PrimFunc fuse-ops makes of a padded conv2d + bias + residual add + relu: the
    convolution's reduction stage into an intermediate buffer, then one epilogue stage."""
    (func,) = fuse_ops(parse_module(CONV_ADD_RELU)).prim_funcs.values()
    return func


def big_matmul() -> T.PrimFunc:
    return op_func("matmul", (8, 12), (12, 16))


def loops_of(sch: Schedule, block: str):
    return sch.get_loops(sch.get_block(block))


# -- the schedules ------------------------------------------------------------------------------


def matmul_micro_kernel(sch: Schedule) -> None:
    """The CPU matmul recipe: register tile accumulated in a local buffer, written back
    per tile, init split off, inner tile loops unrolled and vectorized."""
    block = sch.get_block("matmul")
    i, j, k = sch.get_loops(block)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 8])
    sch.reorder(i0, j0, k, i1, j1)
    # Parallel before the block primitives here; the dependence check also accepts it last
    # (test_schedule_dependence.py: the init and write-back nests touch each tile's own part).
    sch.parallel(i0)
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, j0)
    init = sch.decompose_reduction(block, k)
    sch.unroll(i1)
    sch.vectorize(j1)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(write_back)[-1])


def conv_epilogue_inlined(sch: Schedule) -> None:
    """Convolution accumulated locally per output row, its write-back absorbing the
    bias + residual + relu epilogue."""
    conv = sch.get_block("conv2d")
    loops = sch.get_loops(conv)
    write_back = sch.cache_write(conv, 0, "local")
    sch.reverse_compute_at(write_back, loops[2])
    sch.reverse_compute_inline(sch.get_block("relu"))
    sch.decompose_reduction(conv, loops[4])
    sch.vectorize(sch.get_loops(write_back)[-1])


def conv_epilogue_at(sch: Schedule) -> None:
    """The epilogue stage computed per output channel right after the convolution."""
    conv = sch.get_block("conv2d")
    _, c, *_ = sch.get_loops(conv)
    sch.parallel(c)
    sch.reverse_compute_at(sch.get_block("relu"), c)


def stencil_compute_at_guarded(sch: Schedule) -> None:
    """Producer computed per tile of 4 columns: 5 columns each (the stencil's halo), the
    last tile guarded at the edge of B."""
    _, cj = loops_of(sch, "C")
    cj0, _ = sch.split(cj, [None, 4])
    sch.compute_at(sch.get_block("B"), cj0)


def stencil_inlined(sch: Schedule) -> None:
    sch.compute_inline(sch.get_block("B"))


def chain_reverse_inlined(sch: Schedule) -> None:
    sch.reverse_compute_inline(sch.get_block("C"))


def chain_compute_at_unit(sch: Schedule) -> None:
    sch.compute_at(sch.get_block("B"), loops_of(sch, "C")[1], preserve_unit_loops=True)


def softmax_fused_rows(sch: Schedule) -> None:
    """Both row reductions and the row's exps computed per row, right before the row is
    normalized."""
    i, _ = loops_of(sch, "softmax")
    sch.compute_at(sch.get_block("softmax_sum"), i)
    sch.compute_at(sch.get_block("softmax_exp"), i)
    sch.compute_at(sch.get_block("softmax_max"), i)
    sch.parallel(i)


def softmax_reverse_at(sch: Schedule) -> None:
    sch.reverse_compute_at(sch.get_block("softmax"), loops_of(sch, "softmax_sum")[0])


def matmul_cached_reads(sch: Schedule) -> None:
    block = sch.get_block("matmul")
    i, j, _ = sch.get_loops(block)
    a = sch.cache_read(block, 0, "local")
    sch.compute_at(a, i)
    b = sch.cache_read(block, 1, "global")
    sch.compute_at(b, j)


def symbolic_tiles(sch: Schedule) -> None:
    """A symbolic row count: guarded tiles, write-back and init per tile."""
    block = sch.get_block("matmul")
    i, j, k = sch.get_loops(block)
    i0, i1 = sch.split(i, [None, 4])
    sch.reorder(i0, j, k, i1)
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, i0)
    sch.decompose_reduction(block, k)


SCHEDULES = {
    "matmul_micro_kernel": (big_matmul, matmul_micro_kernel),
    "conv_epilogue_inlined": (conv_add_relu, conv_epilogue_inlined),
    "conv_epilogue_at": (conv_add_relu, conv_epilogue_at),
    "stencil_compute_at_guarded": (stencil, stencil_compute_at_guarded),
    "stencil_inlined": (stencil, stencil_inlined),
    "chain_reverse_inlined": (chain, chain_reverse_inlined),
    "chain_compute_at_unit": (chain, chain_compute_at_unit),
    "softmax_fused_rows": (softmax, softmax_fused_rows),
    "softmax_reverse_at": (softmax, softmax_reverse_at),
    "matmul_cached_reads": (matmul, matmul_cached_reads),
    "symbolic_tiles": (symbolic_matmul, symbolic_tiles),
}
SIZES = {"n": 7}


def scheduled(name: str) -> Schedule:
    make, apply = SCHEDULES[name]
    sch = Schedule(make())
    apply(sch)
    return sch


def assert_same(got: list, want: list) -> None:
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


# -- golden IR ----------------------------------------------------------------------------------


def test_the_matmul_micro_kernel_accumulates_a_tile_locally_and_writes_it_back():
    sch = Schedule(big_matmul())
    matmul_micro_kernel(sch)
    want = prim("""
@prim_func
def mm(in0: Buffer((8, 12), "float32"), in1: Buffer((12, 16), "float32"), matmul: Buffer((8, 16), "float32")):
    with block("root"):
        matmul_local = alloc_buffer((8, 16), "float32", scope="local")
        reads()
        writes()
        for i0_0 in parallel(0, 2):
            for i1_0 in serial(0, 2):
                for i0_1_init in serial(0, 4):
                    for i1_1_init in vectorized(0, 8):
                        with block("matmul_init"):
                            v_i0_init = axis.spatial(8, i0_0 * 4 + i0_1_init)
                            v_i1_init = axis.spatial(16, i1_0 * 8 + i1_1_init)
                            reads()
                            writes(matmul_local[v_i0_init, v_i1_init])
                            matmul_local[v_i0_init, v_i1_init] = 0.0
                for k in serial(0, 12):
                    for i0_1 in unrolled(0, 4):
                        for i1_1 in vectorized(0, 8):
                            with block("matmul"):
                                v_i0 = axis.spatial(8, i0_0 * 4 + i0_1)
                                v_i1 = axis.spatial(16, i1_0 * 8 + i1_1)
                                v_k = axis.reduce(12, k)
                                reads(in0[v_i0, v_k], in1[v_k, v_i1])
                                writes(matmul_local[v_i0, v_i1])
                                matmul_local[v_i0, v_i1] = matmul_local[v_i0, v_i1] + in0[v_i0, v_k] * in1[v_k, v_i1]
                for ax0 in serial(0, 4):
                    for ax1 in vectorized(0, 8):
                        with block("matmul_local"):
                            v_ax0 = axis.spatial(8, ax0 + i0_0 * 4)
                            v_ax1 = axis.spatial(16, ax1 + i1_0 * 8)
                            reads(matmul_local[v_ax0, v_ax1])
                            writes(matmul[v_ax0, v_ax1])
                            matmul[v_ax0, v_ax1] = matmul_local[v_ax0, v_ax1]
""")  # noqa: E501
    assert structural_equal(sch.func, want)


def test_compute_at_computes_the_halo_per_tile_and_guards_the_last_one():
    sch = Schedule(stencil())
    stencil_compute_at_guarded(sch)
    want = prim("""
@prim_func
def stencil(A: Buffer((4, 7), "float32"), C: Buffer((4, 6), "float32")):
    with block("root"):
        B = alloc_buffer((4, 7), "float32")
        reads()
        writes()
        for ci in serial(0, 4):
            for cj_0 in serial(0, 2):
                for j in serial(0, 5):
                    if cj_0 * 4 + j < 7:
                        with block("B"):
                            vi = axis.spatial(4, ci)
                            vj = axis.spatial(7, cj_0 * 4 + j)
                            reads(A[vi, vj])
                            writes(B[vi, vj])
                            B[vi, vj] = A[vi, vj] * 2.0
                for cj_1 in serial(0, 4):
                    if cj_0 * 4 + cj_1 < 6:
                        with block("C"):
                            wi = axis.spatial(4, ci)
                            wj = axis.spatial(6, cj_0 * 4 + cj_1)
                            reads(B[wi, wj], B[wi, wj + 1])
                            writes(C[wi, wj])
                            C[wi, wj] = B[wi, wj] + B[wi, wj + 1]
""")
    assert structural_equal(sch.func, want)


def test_compute_inline_substitutes_each_load_and_drops_the_buffer():
    sch = Schedule(stencil())
    stencil_inlined(sch)
    want = prim("""
@prim_func
def stencil(A: Buffer((4, 7), "float32"), C: Buffer((4, 6), "float32")):
    with block("root"):
        reads()
        writes()
        for ci in serial(0, 4):
            for cj in serial(0, 6):
                with block("C"):
                    wi = axis.spatial(4, ci)
                    wj = axis.spatial(6, cj)
                    reads(A[wi, wj], A[wi, wj + 1])
                    writes(C[wi, wj])
                    C[wi, wj] = A[wi, wj] * 2.0 + A[wi, wj + 1] * 2.0
""")
    assert structural_equal(sch.func, want)


def test_reverse_compute_inline_stores_the_consumer_value_through_the_producer_indices():
    sch = Schedule(chain())
    chain_reverse_inlined(sch)
    want = prim("""
@prim_func
def chain(A: Buffer((4, 6), "float32"), C: Buffer((6, 4), "float32")):
    with block("root"):
        reads()
        writes()
        for i in serial(0, 4):
            for j in serial(0, 6):
                with block("B"):
                    vi = axis.spatial(4, i)
                    vj = axis.spatial(6, j)
                    reads(A[vi, vj])
                    writes(C[vj, vi])
                    C[vj, vi] = A[vi, vj] * 2.0 + 1.0
""")
    assert structural_equal(sch.func, want)


def test_reverse_compute_inline_takes_a_consumer_reading_one_element_twice():
    """swish's consumer reads the element it is given twice: each load becomes the
    producer's value."""
    sch = Schedule(prim("""
@prim_func
def swish(A: Buffer((4,), "float32"), C: Buffer((4,), "float32")):
    with block("root"):
        B = alloc_buffer((4,), "float32")
        reads()
        writes()
        for i in serial(0, 4):
            with block("B"):
                vi = axis.spatial(4, i)
                reads(A[vi])
                writes(B[vi])
                B[vi] = A[vi] * 2.0
        for j in serial(0, 4):
            with block("C"):
                vj = axis.spatial(4, j)
                reads(B[vj])
                writes(C[vj])
                C[vj] = B[vj] * exp(B[vj])
"""))
    sch.reverse_compute_inline(sch.get_block("C"))
    want = prim("""
@prim_func
def swish(A: Buffer((4,), "float32"), C: Buffer((4,), "float32")):
    with block("root"):
        reads()
        writes()
        for i in serial(0, 4):
            with block("B"):
                vi = axis.spatial(4, i)
                reads(A[vi])
                writes(C[vi])
                C[vi] = A[vi] * 2.0 * exp(A[vi] * 2.0)
""")
    assert structural_equal(sch.func, want), print_prim_func("swish", sch.func)


def test_cache_read_copies_before_the_nest_and_the_block_reads_the_copy():
    sch = Schedule(chain())
    sch.cache_read(sch.get_block("C"), 0, "local")
    text = print_prim_func("chain", sch.func)
    assert 'B_local = alloc_buffer((4, 6), "float32", scope="local")' in text
    copy = text.index('with block("B_local")')
    assert text.index('with block("B")') < copy < text.index('with block("C")')
    assert "C[wi, wj] = B_local[wj, wi] + 1.0" in text
    assert "reads(B_local[wj, wi])" in text


# -- results ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedules_keep_the_result_in_tir_eval_and_replay_from_json(name):
    sch = scheduled(name)
    make = SCHEDULES[name][0]
    arrays = arrays_for(sch.func, np.random.default_rng(0), SIZES)
    assert_same(outputs_of(sch.func, arrays), outputs_of(make(), arrays))

    assert_prints_and_replays(sch, make)


def test_schedules_keep_the_result_through_the_cpu_codegen():
    funcs = {name: scheduled(name).func for name in SCHEDULES}
    funcs.update({f"{name}_ref": SCHEDULES[name][0]() for name in SCHEDULES})
    with compile_all(funcs) as lib:
        for name in SCHEDULES:
            arrays = arrays_for(funcs[name], np.random.default_rng(1), SIZES)
            assert_same(run_compiled(lib, name, arrays), run_compiled(lib, f"{name}_ref", arrays))


def test_the_local_buffer_of_the_micro_kernel_is_only_touched_inside_its_tile_loop():
    """What a later compaction to a register tile relies on: every access of the cache
    buffer sits under the tile loop the write-back follows."""
    func = scheduled("matmul_micro_kernel").func
    (tile,) = [
        loc.stmt
        for loc in walk(func.body)
        if isinstance(loc.stmt, T.For) and loc.stmt.var.name == "i1_0"
    ]
    users = [
        loc.stmt.name
        for loc in walk(tile.body)
        if isinstance(loc.stmt, T.Block)
        and any(r.buffer.name == "matmul_local" for r in (*loc.stmt.reads, *loc.stmt.writes))
    ]
    assert users == ["matmul_init", "matmul", "matmul_local"]


# -- refusals -----------------------------------------------------------------------------------


def _decomposed(sch: Schedule) -> None:
    sch.decompose_reduction(sch.get_block("matmul"), loops_of(sch, "matmul")[2])


def _stencil_at_column(sch: Schedule) -> None:
    sch.compute_at(sch.get_block("B"), loops_of(sch, "C")[1])


def _reduction_outermost(sch: Schedule) -> None:
    sch.reorder(*loops_of(sch, "matmul")[::-1])


def _cached(sch: Schedule) -> None:
    sch.cache_write(sch.get_block("matmul"), 0, "local")


def _sum_per_column(sch: Schedule) -> None:
    sch.compute_at(sch.get_block("softmax_sum"), loops_of(sch, "softmax")[1])


def _nothing(sch: Schedule) -> None:
    pass


# (function, preparation, the refused call, the start of its message)
REFUSALS = [
    (
        matmul,
        _nothing,
        lambda s: s.compute_inline(s.get_block("matmul")),
        "compute_inline: block 'matmul': it is a reduction",
    ),
    (
        chain,
        _nothing,
        lambda s: s.compute_inline(s.get_block("C")),
        "compute_inline: block 'C': it writes 'C', a parameter of the function",
    ),
    (
        matmul,
        _nothing,
        lambda s: s.compute_inline(s.get_block("root")),
        "compute_inline: block 'root': it is the root block",
    ),
    (
        stencil,
        _nothing,
        lambda s: s.reverse_compute_inline(s.get_block("C")),
        "reverse_compute_inline: block 'C': it reads 'B' at 2 places",
    ),
    (
        conv_add_relu,
        _nothing,
        lambda s: s.reverse_compute_inline(s.get_block("relu")),
        "reverse_compute_inline: block 'relu': its producer 'conv2d' is a reduction",
    ),
    (
        softmax,
        _nothing,
        lambda s: s.compute_at(s.get_block("softmax_max"), loops_of(s, "softmax_sum")[0]),
        "compute_at: block 'softmax_max': block 'softmax_exp' outside loop 'i0' reads "
        "'softmax_max'",
    ),
    (
        chain,
        _nothing,
        lambda s: s.compute_at(s.get_block("C"), loops_of(s, "B")[0]),
        "compute_at: block 'C': it writes 'C', a parameter of the function",
    ),
    (
        softmax,
        _nothing,
        lambda s: s.reverse_compute_at(s.get_block("softmax_sum"), loops_of(s, "softmax_max")[0]),
        "reverse_compute_at: block 'softmax_sum': it is a reduction",
    ),
    (
        matmul,
        _cached,
        lambda s: s.reverse_compute_at(s.get_block("matmul_local"), loops_of(s, "matmul")[2]),
        "reverse_compute_at: block 'matmul_local': block 'matmul' reduces across iterations "
        "of loop 'k'",
    ),
    (
        matmul,
        _nothing,
        lambda s: s.reverse_compute_at(s.get_block("matmul"), loops_of(s, "matmul")[0]),
        "reverse_compute_at: block 'matmul': it is already under loop 'i0'",
    ),
    (
        matmul,
        _nothing,
        lambda s: s.cache_read(s.get_block("matmul"), 0, "texture"),
        "cache_read: block 'matmul': unknown storage scope 'texture'",
    ),
    (
        matmul,
        _nothing,
        lambda s: s.cache_read(s.get_block("matmul"), 2, "local"),
        "cache_read: block 'matmul': read index 2 is out of range",
    ),
    (
        matmul,
        _decomposed,
        lambda s: s.cache_write(s.get_block("matmul"), 0, "local"),
        "cache_write: block 'matmul': block 'matmul_init' also writes 'matmul'",
    ),
    (
        stencil,
        _stencil_at_column,
        lambda s: s.cache_write(s.get_block("B"), 0, "local"),
        "cache_write: block 'B': block 'C' reads 'B' in the same loop nest",
    ),
    (
        lambda: prim(STENCIL.replace("serial(0, 7)", "serial(0, 6)").replace("(7, j)", "(6, j)")),
        _nothing,
        lambda s: s.cache_write(s.get_block("B"), 0, "local"),
        "cache_write: block 'B': it does not write every element of 'B'",
    ),
    (
        matmul,
        _reduction_outermost,
        lambda s: s.decompose_reduction(s.get_block("matmul"), loops_of(s, "matmul")[1]),
        "decompose_reduction: block 'matmul': loop 'k' outside loop 'i1' runs its reduction",
    ),
    (
        softmax,
        _sum_per_column,
        lambda s: s.decompose_reduction(s.get_block("softmax_sum"), loops_of(s, "softmax")[0]),
        "decompose_reduction: block 'softmax_sum': loop 'i1' feeds no iteration variable",
    ),
    (
        chain,
        _nothing,
        lambda s: s.decompose_reduction(s.get_block("B"), loops_of(s, "B")[0]),
        "decompose_reduction: block 'B': it has no init",
    ),
    (
        matmul,
        _cached,
        lambda s: s.decompose_reduction(s.get_block("matmul"), loops_of(s, "matmul_local")[0]),
        "decompose_reduction: block 'matmul': loop 'ax0' is not around it",
    ),
]


@pytest.mark.parametrize("make, prepare, call, message", REFUSALS)
def test_refusals_name_the_primitive_and_block_and_change_nothing(make, prepare, call, message):
    sch = Schedule(make())
    prepare(sch)
    func, trace = sch.func, sch.trace
    with pytest.raises(ScheduleError) as err:
        call(sch)
    text = str(err.value)
    assert text.startswith(message) and "\n" not in text, text
    added = sch.trace.instructions[len(trace.instructions) :]
    assert sch.func is func and all(inst.kind.startswith("get_") for inst in added)


def test_compute_at_refuses_a_region_it_cannot_bound():
    # The consumer reads B at a product of two loop variables.
    text = STENCIL.replace("B[wi, wj + 1]", "B[wi, wi * wj % 7]")
    sch = Schedule(prim(text))
    with pytest.raises(ScheduleError, match="cannot be bounded"):
        sch.compute_at(sch.get_block("B"), loops_of(sch, "C")[0])


def test_an_inlined_block_handle_stops_working():
    sch = Schedule(stencil())
    block = sch.get_block("B")
    sch.compute_inline(block)
    with pytest.raises(ScheduleError, match="block 'B': no such block"):
        sch.get_loops(block)


def test_cache_names_do_not_clash_with_existing_buffers():
    sch = Schedule(matmul())
    block = sch.get_block("matmul")
    first = sch.cache_read(block, 0, "local")
    second = sch.cache_read(first, 0, "local")
    assert (first.name, second.name) == ("in0_local", "in0_local_1")
    arrays = arrays_for(sch.func, np.random.default_rng(0))
    assert_same(outputs_of(sch.func, arrays), outputs_of(matmul(), arrays))
