"""Loop primitives: golden IR after each one, results kept through the real CPU codegen, and
one refusal test per error (the message, and a schedule left as it was)."""

from __future__ import annotations

import numpy as np
import pytest

from tcc.emit.llvm import CodegenError, compile_prim_funcs
from tcc.ir import tir as T
from tcc.ir.parser import parse_module
from tcc.ir.printer import print_prim_func
from tcc.ir.structural import structural_equal
from tcc.lower.schedule import BlockRV, LoopRV, Schedule, ScheduleError
from tests.lower.schedule.cases import (
    add2d,
    arrays_for,
    compile_all,
    matmul,
    outputs_of,
    run_compiled,
    softmax,
    symbolic_matmul,
)

HEAD = """
@prim_func
def add(in0: Buffer((5, 7), "float32"), in1: Buffer((7,), "float32"), add: Buffer((5, 7), "float32")):
    with block("root"):
        reads()
        writes()
"""


def assert_ir(func: T.PrimFunc, expected: str) -> None:
    """Structurally equal to the expected text, and printed with the same names."""
    want = next(iter(parse_module(expected).prim_funcs.values()))
    assert structural_equal(func, want)
    assert print_prim_func("f", func) == print_prim_func("f", want)


def loops_of(sch: Schedule, block: str) -> list[LoopRV]:
    return sch.get_loops(sch.get_block(block))


# -- golden IR ---------------------------------------------------------------------------------


def test_split_guards_a_factor_that_does_not_divide():
    sch = Schedule(add2d())
    _, j = loops_of(sch, "add")
    sch.split(j, [None, 4])
    assert_ir(
        sch.func,
        HEAD
        + """
        for i0 in serial(0, 5):
            for i1_0 in serial(0, 2):
                for i1_1 in serial(0, 4):
                    if i1_0 * 4 + i1_1 < 7:
                        with block("add"):
                            v_i0 = axis.spatial(5, i0)
                            v_i1 = axis.spatial(7, i1_0 * 4 + i1_1)
                            reads(in0[v_i0, v_i1], in1[v_i1])
                            writes(add[v_i0, v_i1])
                            add[v_i0, v_i1] = in0[v_i0, v_i1] + in1[v_i1]
""",
    )


def test_split_twice_merges_the_guards_and_exact_factors_add_none():
    sch = Schedule(add2d())
    i, j = loops_of(sch, "add")
    sch.split(i, [5, 1])
    _, j1 = sch.split(j, [None, 4])
    sch.split(j1, [3, 2])
    assert_ir(
        sch.func,
        HEAD
        + """
        for i0_0 in serial(0, 5):
            for i0_1 in serial(0, 1):
                for i1_0 in serial(0, 2):
                    for i1_1_0 in serial(0, 3):
                        for i1_1_1 in serial(0, 2):
                            if i1_0 * 4 + i1_1_0 * 2 + i1_1_1 < 7 and i1_1_0 * 2 + i1_1_1 < 4:
                                with block("add"):
                                    v_i0 = axis.spatial(5, i0_0 + i0_1)
                                    v_i1 = axis.spatial(7, i1_0 * 4 + i1_1_0 * 2 + i1_1_1)
                                    reads(in0[v_i0, v_i1], in1[v_i1])
                                    writes(add[v_i0, v_i1])
                                    add[v_i0, v_i1] = in0[v_i0, v_i1] + in1[v_i1]
""",
    )


def test_fuse_binds_each_variable_to_its_digit():
    sch = Schedule(add2d())
    fused = sch.fuse(*loops_of(sch, "add"))
    sch.parallel(fused)
    assert_ir(
        sch.func,
        HEAD
        + """
        for i0_i1_fused in parallel(0, 35):
            with block("add"):
                v_i0 = axis.spatial(5, i0_i1_fused // 7)
                v_i1 = axis.spatial(7, i0_i1_fused % 7)
                reads(in0[v_i0, v_i1], in1[v_i1])
                writes(add[v_i0, v_i1])
                add[v_i0, v_i1] = in0[v_i0, v_i1] + in1[v_i1]
""",
    )


def test_reorder_keeps_unlisted_loops_in_place_and_kinds_and_annotations_print():
    sch = Schedule(matmul())
    i, j, k = loops_of(sch, "matmul")
    sch.reorder(k, i)
    sch.vectorize(i)
    sch.unroll(j)
    sch.annotate(k, "pragma_auto_unroll_max_step", 16)
    sch.annotate(sch.get_block("matmul"), "schedule_rule", "tiled")
    assert_ir(
        sch.func,
        """
@prim_func
def mm(in0: Buffer((6, 10), "float32"), in1: Buffer((10, 7), "float32"), matmul: Buffer((6, 7), "float32")):
    with block("root"):
        reads()
        writes()
        for k in serial(0, 10, annotations={"pragma_auto_unroll_max_step": 16}):
            for i1 in unrolled(0, 7):
                for i0 in vectorized(0, 6):
                    with block("matmul"):
                        v_i0 = axis.spatial(6, i0)
                        v_i1 = axis.spatial(7, i1)
                        v_k = axis.reduce(10, k)
                        reads(in0[v_i0, v_k], in1[v_k, v_i1])
                        writes(matmul[v_i0, v_i1])
                        block_attr({"schedule_rule": "tiled"})
                        with init():
                            matmul[v_i0, v_i1] = 0.0
                        matmul[v_i0, v_i1] = matmul[v_i0, v_i1] + in0[v_i0, v_k] * in1[v_k, v_i1]
""",
    )


def test_annotating_a_key_again_replaces_its_value():
    sch = Schedule(add2d())
    _, j = loops_of(sch, "add")
    sch.annotate(j, "prefetch", 1)
    sch.annotate(j, "pragma_unroll_explicit", True)
    sch.annotate(j, "prefetch", 0.5)
    assert sch.get(j).annotations == (("pragma_unroll_explicit", True), ("prefetch", 0.5))


def test_primitives_never_change_the_function_they_were_given():
    func = add2d()
    before = print_prim_func("f", func)
    sch = Schedule(func)
    i, j = loops_of(sch, "add")
    sch.parallel(sch.fuse(i, j))
    assert print_prim_func("f", func) == before
    assert sch.func is not func


def test_get_loops_get_child_blocks_and_get():
    sch = Schedule(softmax())
    root = sch.get_block("root")
    children = sch.get_child_blocks(root)
    assert [b.name for b in children] == ["softmax_max", "softmax_exp", "softmax_sum", "softmax"]
    i, r = sch.get_loops(children[2])
    assert sch.get_child_blocks(i) == [children[2]]
    assert sch.get(i).extent.value == 4 and sch.get(r).extent.value == 9
    assert sch.get(children[3]).name == "softmax"
    assert sch.get_loops(root) == []


# -- results kept through the CPU codegen ------------------------------------------------------


def _add_tiled() -> Schedule:
    sch = Schedule(add2d())
    i, j = loops_of(sch, "add")
    _, j1 = sch.split(j, [None, 4])
    sch.vectorize(j1)
    sch.parallel(i)
    return sch


def _add_fused() -> Schedule:
    sch = Schedule(add2d())
    outer, inner = sch.split(sch.fuse(*loops_of(sch, "add")), [None, 8])
    sch.parallel(outer)
    sch.vectorize(inner)
    return sch


def _add_reordered() -> Schedule:
    sch = Schedule(add2d())
    i, j = loops_of(sch, "add")
    sch.reorder(j, i)
    sch.unroll(i)
    return sch


def _matmul_tiled() -> Schedule:
    sch = Schedule(matmul())
    i, j, k = loops_of(sch, "matmul")
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 4])
    k0, k1 = sch.split(k, [None, 3])
    sch.reorder(i0, j0, k0, i1, k1, j1)
    sch.parallel(i0)
    sch.unroll(k1)
    sch.vectorize(j1)
    sch.annotate(k0, "pragma_unroll_explicit", 1)
    return sch


def _matmul_three_way() -> Schedule:
    sch = Schedule(matmul())
    i, j, k = loops_of(sch, "matmul")
    ka, kb, kc = sch.split(k, [2, None, 2])
    sch.reorder(kc, j, ka, i)
    sch.fuse(ka, kb)
    return sch


def _softmax_rows() -> Schedule:
    sch = Schedule(softmax())
    for name in ("softmax_max", "softmax_sum", "softmax"):
        i, inner = loops_of(sch, name)
        sch.parallel(i)
        _, lanes = sch.split(inner, [None, 4])
        if name == "softmax":
            sch.vectorize(lanes)
    return sch


def _symbolic() -> Schedule:
    sch = Schedule(symbolic_matmul())
    i, j, _ = loops_of(sch, "matmul")
    i0, _ = sch.split(i, [None, 4])
    sch.parallel(i0)
    _, j1 = sch.split(j, [None, 2])
    sch.vectorize(j1)
    return sch


# name -> (schedule builder, exact): exact when the schedule keeps every summation order
VARIANTS = {
    "add_tiled": (_add_tiled, True),
    "add_fused": (_add_fused, True),
    "add_reordered": (_add_reordered, True),
    "matmul_tiled": (_matmul_tiled, False),
    "matmul_three_way": (_matmul_three_way, False),
    "softmax_rows": (_softmax_rows, True),
    "symbolic": (_symbolic, True),
}


@pytest.fixture(scope="module")
def compiled():
    scheds = {name: build() for name, (build, _) in VARIANTS.items()}
    funcs = {name: sch.func for name, sch in scheds.items()}
    funcs.update({f"{name}_ref": _base(name) for name in scheds})
    with compile_all(funcs) as lib:
        yield lib


def _base(name: str) -> T.PrimFunc:
    return {"add": add2d, "matmul": matmul, "softmax": softmax, "symbolic": symbolic_matmul}[
        name.split("_")[0]
    ]()


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_scheduled_kernel_computes_what_the_unscheduled_one_does(compiled, name):
    exact = VARIANTS[name][1]
    rng = np.random.default_rng(7)
    sizes = [{}] if name != "symbolic" else [{"n": n} for n in (0, 1, 7, 8)]
    for size in sizes:
        arrays = arrays_for(_base(name), rng, size)
        got = run_compiled(compiled, name, arrays)
        want = run_compiled(compiled, f"{name}_ref", arrays)
        for g, w in zip(got, want):
            if exact:
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_scheduled_functions_also_agree_on_the_reference_evaluator():
    rng = np.random.default_rng(3)
    for name, (build, _) in VARIANTS.items():
        if name == "symbolic":
            continue
        func = _base(name)
        arrays = arrays_for(func, rng)
        for g, w in zip(outputs_of(build().func, arrays), outputs_of(func, arrays)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_the_cpu_backend_refuses_a_bound_loop():
    sch = Schedule(add2d())
    i, j = loops_of(sch, "add")
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    with pytest.raises(CodegenError, match="bound to blockIdx.x"):
        compile_prim_funcs({"k": sch.func})


# -- refusals ----------------------------------------------------------------------------------

TRIANGLE = """
@prim_func
def tri(A: Buffer((8, 8), "float32"), B: Buffer((8,), "float32")):
    with block("root"):
        reads()
        writes()
        for i in serial(0, 8):
            for j in serial(0, i + 1):
                with block("T"):
                    vi = axis.spatial(8, i)
                    vj = axis.reduce(8, j)
                    reads(A[vi, vj])
                    writes(B[vi])
                    with init():
                        B[vi] = 0.0
                    B[vi] = B[vi] + A[vi, vj]
"""


def refuses(sch: Schedule, message: str, primitive, *args) -> None:
    """The primitive raises exactly `message` and leaves the schedule as it was."""
    func, trace = sch.func, sch.trace
    with pytest.raises(ScheduleError) as info:
        primitive(*args)
    assert str(info.value) == message
    assert sch.func is func and sch.trace == trace


@pytest.mark.parametrize(
    "factors, message",
    [
        ([4], "split: loop 'i1': needs at least two factors, got 1"),
        ([None, None], "split: loop 'i1': more than one factor is None; at most one can be inferred"),
        ([0, None], "split: loop 'i1': factor 0 is not a positive integer"),
        ([2, 3], "split: loop 'i1': the factors multiply to 6, less than the extent 7; "
                 "make one factor None to infer it"),
    ],
)  # fmt: skip
def test_split_refuses_bad_factors(factors, message):
    sch = Schedule(add2d())
    _, j = loops_of(sch, "add")
    refuses(sch, message, sch.split, j, factors)


def test_split_of_a_symbolic_extent_needs_factors_that_provably_cover_it():
    sch = Schedule(symbolic_matmul())
    i, _, _ = loops_of(sch, "matmul")
    refuses(
        sch,
        "split: loop 'i0': the factors multiply to 64, not provably the extent n; "
        "make one factor None to infer it",
        sch.split, i, [8, 8],
    )  # fmt: skip


def test_restructuring_refuses_marked_loops():
    sch = Schedule(add2d())
    i, j = loops_of(sch, "add")
    sch.parallel(i)
    sch.annotate(j, "prefetch", 1)
    refuses(
        sch,
        "split: loop 'i0': it is parallel, not serial; split loops before setting their kind",
        sch.split, i, [None, 2],
    )  # fmt: skip
    refuses(
        sch,
        "split: loop 'i1': it has annotations; split loops before annotating them",
        sch.split, j, [None, 2],
    )  # fmt: skip
    refuses(
        sch,
        "fuse: loop 'i0': it is parallel, not serial; fuse loops before setting their kind",
        sch.fuse, i, j,
    )  # fmt: skip
    refuses(
        sch,
        "vectorize: loop 'i0': it is already parallel; a loop takes one kind",
        sch.vectorize, i,
    )  # fmt: skip


def test_fuse_refuses_loops_that_are_not_perfectly_nested_or_of_mixed_kinds():
    sch = Schedule(matmul())
    i, j, k = loops_of(sch, "matmul")
    refuses(
        sch,
        "fuse: loop 'k': it is not the only statement in loop 'i0'; "
        "fuse takes perfectly nested loops, outermost first",
        sch.fuse, i, k,
    )  # fmt: skip
    refuses(
        sch,
        "fuse: loop 'k': it runs a reduction while loop 'i1' runs spatial iterations; "
        "fuse spatial loops and reduction loops separately",
        sch.fuse, j, k,
    )  # fmt: skip
    refuses(sch, "fuse: needs at least two adjacent loops, got 1", sch.fuse, i)


def test_fuse_and_reorder_refuse_loops_whose_bounds_depend_on_each_other():
    sch = Schedule(parse_module(TRIANGLE).prim_funcs["tri"])
    i, j = loops_of(sch, "T")
    refuses(sch, "fuse: loop 'j': its bounds depend on loop 'i'", sch.fuse, i, j)
    refuses(
        sch,
        "reorder: loop 'j': its bounds depend on loop 'i', which would be inside it",
        sch.reorder, j, i,
    )  # fmt: skip


def test_reorder_refuses_repeated_loops_and_loops_of_different_nests():
    sch = Schedule(softmax())
    i, r = loops_of(sch, "softmax_max")
    i2, _ = loops_of(sch, "softmax")
    refuses(sch, "reorder: loop 'i0': it is given twice; list each loop once", sch.reorder, i, r, i)
    refuses(
        sch,
        "reorder: loop 'r1': it is not in the perfect nest under loop 'i0' (a loop between "
        "them has more than one statement in its body); reorder loops of one nest",
        sch.reorder, r, i2,
    )  # fmt: skip
    refuses(sch, "reorder: needs at least two loops, got 1", sch.reorder, i)


def test_handles_must_be_live_and_made_by_the_schedule():
    sch = Schedule(add2d())
    i, _ = loops_of(sch, "add")
    sch.split(i, [None, 2])
    refuses(
        sch,
        "fuse: loop 'i0': the loop is no longer in the function (split, fused or removed); "
        "use the handles that primitive returned",
        sch.fuse, i,
    )  # fmt: skip
    refuses(sch, "get_block: block 'nope': no such block", sch.get_block, "nope")
    other = Schedule(sch.func)
    refuses(
        other,
        "unroll: loop 'i0_0': this handle was not returned by this schedule; get handles "
        "with get_block/get_loops",
        other.unroll, loops_of(sch, "add")[0],
    )  # fmt: skip
    refuses(
        other,
        "get_loops: block 'add': this handle was not returned by this schedule; get handles "
        "with get_block/get_loops",
        other.get_loops, BlockRV("add"),
    )  # fmt: skip


def test_annotate_refuses_values_the_ir_text_cannot_hold():
    sch = Schedule(add2d())
    block = sch.get_block("add")
    refuses(
        sch,
        "annotate: block 'add': value of type list for 'tiles'; use an int, float, string or bool",
        sch.annotate, block, "tiles", [1, 2],
    )  # fmt: skip


def test_a_function_whose_loops_share_a_variable_cannot_be_scheduled():
    func = add2d()
    inner = func.body.body.body  # root block -> loop i0 -> loop i1
    shared = T.For(inner.var, inner.min, inner.extent, T.ForKind.SERIAL, inner)
    bad = T.PrimFunc(func.params, T.Block("root", (), (), (), shared))
    with pytest.raises(ScheduleError, match="loop 'i1': its variable is bound by two loops"):
        Schedule(bad)


def test_a_unit_loop_wraps_a_nest_binds_without_a_dependence_check_and_replays():
    """add_unit_loop puts a loop of one iteration around a nest (a reduction into a scalar
    has no loop of its own to bind its one GPU block to); binding it is allowed though no
    block variable reads it, since one iteration carries nothing; the function computes
    the same, and the trace replays to an equal function."""
    import json

    from tcc.ir.tir_eval import run_prim_func
    from tcc.lower.schedule.trace import Trace
    from tests.lower.schedule.cases import op_func

    func = op_func("reduce_sum", (6, 7), axes=[0, 1], keepdims=False)
    sch = Schedule(func)
    block = sch.get_block("reduce_sum")
    outer = sch.get_loops(block)[0]
    unit = sch.add_unit_loop(outer)
    assert [lp.var.name for lp in sch.get_loops(block)][0] == "unit"
    loop = sch.func.body.body
    assert isinstance(loop, T.For) and loop.extent.value == 1 and loop.body.var is outer.var
    with pytest.raises(ScheduleError, match="iterations cannot run at once"):
        sch.copy().bind(outer, "blockIdx.x")  # the reduction loop itself may not be bound
    sch.bind(unit, "blockIdx.x")
    x = np.random.default_rng(0).standard_normal((6, 7)).astype(np.float32)
    want, got = [x, np.zeros((), np.float32)], [x, np.zeros((), np.float32)]
    run_prim_func(func, want)
    run_prim_func(sch.func, got)
    np.testing.assert_array_equal(got[1], want[1])
    fresh = Schedule(func)
    Trace.from_json(json.loads(json.dumps(sch.trace.as_json()))).apply(fresh)
    assert structural_equal(fresh.func, sch.func)
