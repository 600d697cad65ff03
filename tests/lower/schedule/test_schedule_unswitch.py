"""unswitch_guards: tiles cut by a split that does not divide get a guard-free copy, tested
up front, for every tile where the guards hold. Golden IR for the anchor cases (one split,
two nested splits, a fused tile loop, a constant extent), the guards it must leave alone,
and results unchanged through the CPU codegen at extents on and off the tile size."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.graph import TensorType
from tcc.ir.printer import print_prim_func
from tcc.ir.structural import structural_equal
from tcc.lower.legalize import op_prim_func
from tcc.lower.schedule import Schedule, unswitch_guards
from tcc.lower.schedule.state import child_blocks, walk
from tests.lower.schedule.cases import compile_all, prim, run_compiled


def assert_unswitches_to(func: T.PrimFunc, want: str) -> None:
    got = unswitch_guards(func)
    assert structural_equal(got, prim(want)), print_prim_func("f", got)


def split_func(op: str, shape, factors, fuse_outer=False, vector=True) -> T.PrimFunc:
    """`op` on float32 operands of `shape`, each axis split by its factor (None: not split),
    the outer loops first (fused when `fuse_outer`), the innermost split loop vectorized."""
    func = op_prim_func(op, [TensorType(tuple(shape), "float32")] * (2 if op == "add" else 1), {})
    sch = Schedule(func)
    block = sch.get_block(child_blocks(func.body)[0].name)
    outer, inner = [], []
    for loop, factor in zip(sch.get_loops(block), factors):
        if factor is None:
            outer.append(loop)
            continue
        o, i = sch.split(loop, [None, factor])
        outer.append(o)
        inner.append(i)
    sch.reorder(*outer, *inner)
    if fuse_outer and len(outer) > 1:
        sch.fuse(*outer)
    if vector and inner:
        sch.vectorize(inner[-1])
    return sch.func


# -- golden IR ----------------------------------------------------------------------------------

ONE_SPLIT = """
@prim_func
def f(in0: Buffer((n,), "float32"), relu: Buffer((n,), "float32")):
    with block("root"):
        reads()
        writes()
        for i0_0 in serial(0, (n + 7) // 8):
            if n - i0_0 * 8 - 8 >= 0:
                for i0_1 in vectorized(0, 8):
                    with block("relu"):
                        v_i0 = axis.spatial(n, i0_0 * 8 + i0_1)
                        reads(in0[v_i0])
                        writes(relu[v_i0])
                        relu[v_i0] = max(in0[v_i0], 0.0)
            else:
                for i0_1 in vectorized(0, 8):
                    if i0_0 * 8 + i0_1 < n:
                        with block("relu"):
                            v_i0 = axis.spatial(n, i0_0 * 8 + i0_1)
                            reads(in0[v_i0])
                            writes(relu[v_i0])
                            relu[v_i0] = max(in0[v_i0], 0.0)
"""


def test_one_split_gets_a_guard_free_copy_of_its_tile():
    n = E.Var("n")
    assert_unswitches_to(split_func("relu", (n,), [8]), ONE_SPLIT)


# A constant extent that 8 does not divide: the split's outer loop is the anchor (its step
# covers the tile), not the loop above it.
CONSTANT_EXTENT = """
@prim_func
def f(in0: Buffer((3, 20), "float32"), relu: Buffer((3, 20), "float32")):
    with block("root"):
        reads()
        writes()
        for i0 in serial(0, 3):
            for i1_0 in serial(0, 3):
                if 12 - i1_0 * 8 >= 0:
                    for i1_1 in vectorized(0, 8):
                        with block("relu"):
                            v_i0 = axis.spatial(3, i0)
                            v_i1 = axis.spatial(20, i1_0 * 8 + i1_1)
                            reads(in0[v_i0, v_i1])
                            writes(relu[v_i0, v_i1])
                            relu[v_i0, v_i1] = max(in0[v_i0, v_i1], 0.0)
                else:
                    for i1_1 in vectorized(0, 8):
                        if i1_0 * 8 + i1_1 < 20:
                            with block("relu"):
                                v_i0 = axis.spatial(3, i0)
                                v_i1 = axis.spatial(20, i1_0 * 8 + i1_1)
                                reads(in0[v_i0, v_i1])
                                writes(relu[v_i0, v_i1])
                                relu[v_i0, v_i1] = max(in0[v_i0, v_i1], 0.0)
"""


def test_a_constant_extent_is_unswitched_at_the_split():
    assert_unswitches_to(split_func("relu", (3, 20), [None, 8]), CONSTANT_EXTENT)


def _guard_conds(s: T.Stmt) -> list[E.PrimExpr]:
    return [loc.stmt.cond for loc in walk(s) if isinstance(loc.stmt, T.IfThenElse)
            and loc.stmt.else_case is None]


def _unswitched(s: T.Stmt) -> list[T.IfThenElse]:
    return [loc.stmt for loc in walk(s) if isinstance(loc.stmt, T.IfThenElse)
            and loc.stmt.else_case is not None]


def test_nested_splits_each_unswitch_at_their_own_outer_loop():
    n, m = E.Var("n"), E.Var("m")
    got = unswitch_guards(split_func("relu", (n, m), [4, 8]))
    loops = [loc.stmt for loc in walk(got.body) if isinstance(loc.stmt, T.For)]
    outer_rows, outer_cols = loops[0], loops[1]
    assert outer_rows.var.name == "i0_0" and outer_cols.var.name == "i1_0"
    # rows unswitched in i0_0's body, columns in i1_0's body, in both copies of the rows
    assert isinstance(outer_rows.body, T.IfThenElse) and outer_rows.body.else_case is not None
    for copy in (outer_rows.body.then_case, outer_rows.body.else_case):
        assert isinstance(copy, T.For) and copy.var.name == "i1_0"
        assert isinstance(copy.body, T.IfThenElse) and copy.body.else_case is not None
    # the copy where both tests passed has no guard left; 4 copies in all
    fast = outer_rows.body.then_case.body.then_case
    assert _guard_conds(fast) == []
    assert len(_unswitched(got.body)) == 3


def test_a_fused_tile_loop_is_the_anchor():
    n, m = E.Var("n"), E.Var("m")
    got = unswitch_guards(split_func("relu", (n, m), [4, 8], fuse_outer=True))
    (tile,) = [loc.stmt for loc in walk(got.body) if isinstance(loc.stmt, T.For)
               and loc.stmt.var.name.endswith("fused")]
    assert isinstance(tile.body, T.IfThenElse) and tile.body.else_case is not None
    assert _guard_conds(tile.body.then_case) == []
    # the test is one comparison per guard conjunct, at the tile's far corner
    assert len(_unswitched(got.body)) == 1


# A guard on the innermost loop itself has no tile below it; one on a block's iteration
# variable is not a split guard: both stay as they are.
LEFT_ALONE = """
@prim_func
def f(a: Buffer((n,), "float32"), b: Buffer((n,), "float32")):
    with block("root"):
        reads()
        writes()
        for i in serial(0, n):
            if i < n - 1:
                with block("b"):
                    v = axis.spatial(n, i)
                    reads(a[v])
                    writes(b[v])
                    b[v] = a[v]
"""


def test_guards_without_a_tile_are_left_alone():
    func = prim(LEFT_ALONE)
    assert unswitch_guards(func) is func


def test_a_function_without_guards_is_returned_as_is():
    func = split_func("relu", (3, 16), [None, 8])
    assert unswitch_guards(func) is func


# -- results -------------------------------------------------------------------------------------


def _run_both(func: T.PrimFunc, shapes_for, sizes_list, rng) -> None:
    """Compile `func` before and after unswitching; every size gives bitwise equal outputs
    (and the relu/add the numpy value)."""
    funcs = {"plain": func, "unswitched": unswitch_guards(func)}
    with compile_all(funcs) as lib:
        for sizes in sizes_list:
            shape = shapes_for(sizes)
            ins = [rng.standard_normal(shape).astype(np.float32)
                   for _ in range(len(func.buffers) - 1)]
            want = np.maximum(ins[0], 0) if len(ins) == 1 else ins[0] + ins[1]
            outs = {}
            for name in funcs:
                got = run_compiled(lib, name, [*ins, np.full(shape, np.nan, np.float32)])[-1]
                np.testing.assert_array_equal(got, want)
                outs[name] = got
            np.testing.assert_array_equal(outs["plain"], outs["unswitched"])


@settings(max_examples=12, deadline=None)
@given(
    rows=st.sampled_from([None, 2, 3, 4]),
    cols=st.integers(2, 9),
    fuse=st.booleans(),
    op=st.sampled_from(["relu", "add"]),
)
def test_unswitching_keeps_results(rows, cols, fuse, op):
    n, m = E.Var("n"), E.Var("m")
    func = split_func(op, (n, m), [rows, cols], fuse_outer=fuse)
    sizes = [(1, 1), (3, cols), (5, 2 * cols + 1), (7, 3 * cols - 1), (4, 17)]
    _run_both(func, lambda s: s, sizes, np.random.default_rng(cols))


def test_contraction_tile_with_symbolic_rows_and_columns():
    """The attention-score shape: both output axes symbolic, the register tile unswitched."""
    from tcc.lower.rules import schedule_prim_func
    from tcc.lower.rules.cpu.machine import Machine

    s = E.Var("s")
    func = op_prim_func(
        "matmul", [TensorType((2, s, 24), "float32"), TensorType((2, 24, s), "float32")], {}
    )
    machine = Machine(vector_bits=512, vector_registers=32, cores=2)
    out = schedule_prim_func(func, machine)
    assert T.ForKind.VECTORIZED in {loc.stmt.kind for loc in walk(out.body)
                                    if isinstance(loc.stmt, T.For)}
    assert _unswitched(out.body)
    rng = np.random.default_rng(3)
    with compile_all({"mm": out}) as lib:
        for size in (1, 5, 16, 31, 40):
            a = rng.standard_normal((2, size, 24)).astype(np.float32)
            b = rng.standard_normal((2, 24, size)).astype(np.float32)
            c = run_compiled(lib, "mm", [a, b, np.full((2, size, size), np.nan, np.float32)])[-1]
            np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def _selects(s) -> int:
    """Conjuncts of the conditions of the selects stored under `s`."""
    from tcc.lower.schedule.rewrite import conjuncts, map_exprs

    count = 0

    def visit(e):
        nonlocal count
        count += len(conjuncts(e.cond)) if isinstance(e, E.Select) else 0

    for loc in walk(s):
        if isinstance(loc.stmt, T.BufferStore):
            map_exprs(loc.stmt.value, visit)
    return count


def test_padding_selects_are_lifted_from_interior_tiles():
    """A padded convolution's register tile (rows of output width 20 as vector lanes): the
    copy for tiles whose window stays inside the image vertically drops the row tests of
    the padding select; the column tests stay (every tile's lanes cross the left and right
    border); edge rows keep all four; the results are those of the unscheduled kernel."""
    from tcc.lower.rules import schedule_prim_func
    from tcc.lower.rules.cpu.machine import Machine

    types = [TensorType((1, 8, 20, 20), "float32"), TensorType((16, 8, 3, 3), "float32")]
    func = op_prim_func("conv2d", types, {"strides": [1, 1], "padding": [1, 1, 1, 1],
                                          "dilation": [1, 1], "groups": 1})
    out = schedule_prim_func(func, Machine(vector_bits=512, vector_registers=32, cores=2))
    (fast_or_edge,) = _unswitched(out.body)
    assert _selects(fast_or_edge.then_case) == 2 and _selects(fast_or_edge.else_case) == 4
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 20, 20)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    with compile_all({"plain": func, "tiled": out}) as lib:
        want = run_compiled(lib, "plain", [x, w, np.zeros((1, 16, 20, 20), np.float32)])[-1]
        got = run_compiled(lib, "tiled", [x, w, np.zeros((1, 16, 20, 20), np.float32)])[-1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_selects_on_loaded_values_stay():
    """`where(mask, a, b)`: the condition is data, not a bound on the tile: both copies keep
    the select (only the split's guard is lifted)."""
    n = E.Var("n")
    func = op_prim_func("where", [TensorType((n,), "bool"), TensorType((n,), "float32"),
                                  TensorType((n,), "float32")], {})
    sch = Schedule(func)
    (loop,) = sch.get_loops(sch.get_block(child_blocks(func.body)[0].name))
    _, lanes = sch.split(loop, [None, 8])
    sch.vectorize(lanes)
    (split,) = _unswitched(unswitch_guards(sch.func).body)
    assert _selects(split.then_case) == _selects(split.else_case) == 1


def test_a_window_whose_start_is_read_from_a_tensor_stays_in_place():
    """out[b, i] = x[b, i] where i + start[b] >= 4 (a sliding window over a cache, its start
    a tensor's value, as in ONNX Attention with a past length): the condition reads memory,
    so it is no bound on the tile's corner and stays in both copies. It used to be lifted
    above the block with the block's own variable inside the read, unbound there (the CUDA
    backend refused it: "unbound variable 'v_n'")."""
    from tcc.ir import te

    n = E.Var("n")
    x = te.placeholder((3, n), "float32", "x")
    start = te.placeholder((3,), "int64", "start")
    zero = E.FloatImm(0.0, "float32")
    out = te.compute((3, n), lambda b, i: E.select(
        E.Cmp("ge", E.binop("add", i, start[b]), E.IntImm(4)), x[b, i], zero), name="out")
    func = te.create_prim_func([x, start, out])
    sch = Schedule(func)
    _, cols = sch.get_loops(sch.get_block("out"))
    _, lanes = sch.split(cols, [None, 8])
    sch.vectorize(lanes)
    (split,) = _unswitched(unswitch_guards(sch.func).body)
    assert _selects(split.then_case) == _selects(split.else_case) == 1
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((3, 21)).astype(np.float32)
    starts = np.array([0, 3, 9], np.int64)
    with compile_all({"k": unswitch_guards(sch.func)}) as lib:
        got = run_compiled(lib, "k", [xs, starts, np.zeros((3, 21), np.float32)])[-1]
    np.testing.assert_array_equal(got, np.where(np.arange(21) + starts[:, None] >= 4, xs, 0))
