"""Every default rule keeps each kernel's results through the real codegen, and each kind of
stage gets the rule meant for it."""

from __future__ import annotations

import numpy as np
import pytest

from tcc.emit.llvm import compile_prim_funcs
from tcc.ir import expr as E
from tcc.ir import tir as T
from tcc.ir.graph import TensorType
from tcc.ir.structural import structural_equal
from tcc.lower.legalize import op_prim_func
from tcc.lower.rules import (
    UNSCHEDULED,
    finish_schedule,
    schedule_kernel,
    schedule_prim_func,
    stage_rules,
)
from tcc.lower.rules.cpu import Machine
from tcc.lower.rules.cpu.contraction import block_rows, reduction_chunk, row_tile
from tcc.lower.schedule import Schedule, ScheduleError
from tcc.lower.schedule.sampling import Decisions
from tcc.lower.schedule.state import walk
from tcc.rt.kernels import load_cpu_library

from .rules_cases import BLOCKED, CASES, all_kernels, conv_relu_kernels, kernels, run_both

AVX512 = Machine(vector_bits=512, vector_registers=32, cores=2)
AVX2 = Machine(vector_bits=256, vector_registers=16, cores=2)
ONE_CORE = Machine(vector_bits=512, vector_registers=32, cores=1)


def _loop_kinds(func: T.PrimFunc) -> set[T.ForKind]:
    return {loc.stmt.kind for loc in walk(func.body) if isinstance(loc.stmt, T.For)}


@pytest.fixture(scope="module", name="all_kernels")
def all_kernels_fixture():
    return all_kernels()


@pytest.mark.parametrize("machine", [AVX512, AVX2, ONE_CORE], ids=["avx512", "avx2", "1core"])
def test_scheduled_kernels_compute_what_the_plain_ones_do(all_kernels, machine):
    scheduled = {n: schedule_prim_func(f, machine) for n, f in all_kernels.items()}
    assert sum(s is not all_kernels[n] for n, s in scheduled.items()) >= len(CASES)
    for name, want, got in run_both(all_kernels, scheduled):
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_kind_of_stage_gets_its_rule(case):
    want = CASES[case][1]
    (func,) = (f for n, f in kernels(case).items())
    rules = stage_rules(func, AVX512)
    assert rules[0] == want
    assert UNSCHEDULED not in rules


def test_blocked_convolutions_are_contractions():
    for case in BLOCKED:
        for func in kernels(case, blocked=True).values():
            if any(b.name.startswith("conv2d_nchwc") for b in _blocks(func)):
                assert stage_rules(func, AVX512)[0] == "contraction"


def _blocks(func):
    return [loc.stmt for loc in walk(func.body) if isinstance(loc.stmt, T.Block)]


def _allocations(func: T.PrimFunc) -> list[T.Buffer]:
    return [loc.stmt.buffer for loc in walk(func.body) if isinstance(loc.stmt, T.Allocate)] + [
        b for blk in _blocks(func) for b in blk.alloc_buffers
    ]


def test_matmul_micro_kernel_shape():
    """64x80 output, 16 lanes: 2-register columns (32) do not divide 80, one register (16)
    does; 16 accumulators / 1 register a row = 8 unrolled rows; 8 x 5 tiles run in parallel,
    each accumulating in its own 8 x 16 local tile, allocated inside the tile loop."""
    (func,) = kernels("matmul").values()
    out = schedule_prim_func(func, AVX512)
    loops = {loc.stmt.kind: loc.stmt for loc in walk(out.body) if isinstance(loc.stmt, T.For)}
    assert loops[T.ForKind.VECTORIZED].extent.value == 16
    assert loops[T.ForKind.UNROLLED].extent.value == 8
    tile_loop = loops[T.ForKind.PARALLEL]
    assert tile_loop.extent.value == (64 // 8) * (80 // 16)
    (tile,) = _allocations(out)
    assert (tile.shape, tile.scope) == ((8, 16), "local")
    assert isinstance(tile_loop.body, T.Allocate) and tile_loop.body.buffer is tile


@pytest.mark.parametrize("rows, columns, unrolled", [
    (13, 16, 13),  # no divisor near 8: all 13 rows, one register each, fit the registers
    (9, 32, 9),  # two registers a row: 18 accumulators still fit
    (17, 16, 9),  # more than twice MAX_ROWS: two even tiles, 9 + a guarded 8
    (27, 16, 14),  # 14 + a guarded 13 rather than 8 + 8 + 8 + 3
    (14, 16, 7),  # a divisor at least half of 8
])
def test_rows_without_a_good_divisor_are_one_tile_when_they_fit_the_registers(
        rows, columns, unrolled):
    func = op_prim_func("matmul", [TensorType((rows, 24), "float32"),
                                   TensorType((24, columns), "float32")], {})
    out = schedule_prim_func(func, AVX512)
    (loop,) = [loc.stmt for loc in walk(out.body) if isinstance(loc.stmt, T.For)
               and loc.stmt.kind is T.ForKind.UNROLLED and loc.stmt.extent.value > 1][:1]
    assert loop.extent.value == unrolled
    for _, want, got in run_both({"mm": func}, {"mm": out}):
        np.testing.assert_allclose(got[-1], want[-1], rtol=1e-5, atol=1e-5)


def test_rows_whose_accumulators_would_not_fit_are_tiled():
    # 13 rows of three registers each: 39 accumulators; at most 10 rows (30 accumulators)
    # fit beside the loads, so two even tiles of 7 and 6
    assert row_tile(13, 48, 16, 32) == 7
    assert row_tile(13, 16, 16, 32) == 13


def test_a_grouped_convs_row_tile_stays_inside_one_group():
    """Output channels o read input channels o // 8 * 4 + rc: the micro-kernel's unrolled
    rows (a tile of output channels) divide the group's 8, so one input vector serves them
    all; the tile accumulates in a local buffer."""
    (func,) = kernels("conv_grouped").values()
    out = schedule_prim_func(func, AVX512)
    (rows,) = [loc.stmt for loc in walk(out.body) if isinstance(loc.stmt, T.For)
               and loc.stmt.kind is T.ForKind.UNROLLED]
    assert 8 % rows.extent.value == 0 and rows.extent.value > 1
    assert _allocations(out)


def test_the_epilogue_is_folded_into_the_write_back():
    """Conv + bias + ReLU as fuse-ops makes it: the ReLU stage goes into the write-back of
    the convolution's tile, so the convolution's full output is never stored."""
    funcs = conv_relu_kernels()
    (name,) = (n for n, f in funcs.items() if len(stage_rules(f, AVX512)) > 1)
    func = funcs[name]
    assert stage_rules(func, AVX512) == ["contraction", "contraction"]
    out = schedule_prim_func(func, AVX512)
    # (interior tiles run a copy without the padding selects: count distinct buffers, names)
    assert {b.scope for b in _allocations(out)} == {"local"}
    assert len({id(b) for b in _allocations(out)}) == 1
    names = {b.name for b in _blocks(out)}
    assert len(names) == len(_blocks(func)) + 1  # + init + write-back - the ReLU stage
    ((_, want, got),) = run_both({name: func}, {name: out})
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_contraction_accumulates_in_place_when_a_block_primitive_refuses(monkeypatch):
    """The fallback: the same tiles accumulated in the output itself, on one thread."""
    (func,) = kernels("matmul").values()

    def refuse(*args, **kwargs):
        raise ScheduleError("cache_write: refused for the test")

    monkeypatch.setattr(Schedule, "cache_write", refuse)
    out = schedule_prim_func(func, AVX512)
    assert _loop_kinds(out) == {T.ForKind.SERIAL, T.ForKind.UNROLLED, T.ForKind.VECTORIZED}
    assert _allocations(out) == []
    ((_, want, got),) = run_both({"mm": func}, {"mm": out})
    np.testing.assert_allclose(got[-1], want[-1], rtol=1e-5, atol=1e-5)


def test_one_core_gets_no_parallel_loops(all_kernels):
    for func in all_kernels.values():
        assert T.ForKind.PARALLEL not in _loop_kinds(schedule_prim_func(func, ONE_CORE))


def test_small_stages_stay_on_one_thread():
    (func,) = kernels("softmax").values()  # 6 x 50: far below a parallel region's cost
    assert T.ForKind.PARALLEL not in _loop_kinds(schedule_prim_func(func, AVX512))


def test_symbolic_matmul_is_scheduled_and_correct():
    n = E.Var("n")
    func = op_prim_func(
        "matmul", [TensorType((n, 40), "float32"), TensorType((40, 48), "float32")], {}
    )
    out = schedule_prim_func(func, AVX512)
    assert {T.ForKind.UNROLLED, T.ForKind.VECTORIZED} <= _loop_kinds(out)
    from tcc.emit.llvm import compile_prim_funcs
    from tcc.rt.kernels import load_cpu_library

    rng = np.random.default_rng(1)
    with load_cpu_library(compile_prim_funcs({"mm": out}).shared_object) as lib:
        for rows in (1, 13, 70):
            a = rng.standard_normal((rows, 40)).astype(np.float32)
            b = rng.standard_normal((40, 48)).astype(np.float32)
            c = np.full((rows, 48), np.nan, np.float32)
            lib.call("mm", [a, b, c])
            np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_input_function_is_unchanged():
    (func,) = kernels("matmul").values()
    before = _loop_kinds(func)
    schedule_prim_func(func, AVX512)
    assert _loop_kinds(func) == before == {T.ForKind.SERIAL}


def _run_symbolic(funcs: dict, sizes: list[dict], rng) -> dict:
    """Every function of `funcs` (one signature) on the same random arguments at each set
    of size variables: name -> the output of each run."""
    from tests.lower.schedule.cases import arrays_for, compile_all, run_compiled

    signature = next(iter(funcs.values()))
    results = {name: [] for name in funcs}
    with compile_all(funcs) as lib:
        for sz in sizes:
            arrays = arrays_for(signature, rng, sz)
            for name in funcs:
                results[name].append(run_compiled(lib, name, arrays)[-1])
    return results


@pytest.mark.parametrize("op", ["softmax", "layer_norm"])
def test_row_wise_kernels_run_each_row_in_one_parallel_loop(op):
    """Softmax over a symbolic row length and layer norm over symbolic rows: every stage
    moves under the one parallel loop over groups of rows, the statistics of a group's rows
    interleaved, and the results are bit-identical to the unscheduled kernel's (no stage
    changes its order of arithmetic)."""
    n, s = E.Var("n"), E.Var("s")
    if op == "softmax":
        types, attrs = [TensorType((n, s), "float32")], {"axes": [-1]}
        sizes = [{"n": 3, "s": 1}, {"n": 9, "s": 37}]
    else:
        types = [TensorType((n, 64), "float32"), TensorType((64,), "float32"),
                 TensorType((64,), "float32")]
        attrs = {"axis": -1, "epsilon": 1e-5, "stash_type": "float32"}
        sizes = [{"n": 1}, {"n": 33}]
    func = op_prim_func(op, types, attrs)
    assert set(stage_rules(func, AVX512)) == {"rows"}
    out = schedule_prim_func(func, AVX512)
    (row,) = [loc.stmt for loc in walk(out.body) if isinstance(loc.stmt, T.For)
              and loc.stmt.kind is T.ForKind.PARALLEL]
    names = {b.name.removesuffix("_init") for b in _blocks(row)}  # + decomposed inits
    assert names == {b.name for b in _blocks(func)} - {"root"}
    assert {T.ForKind.VECTORIZED, T.ForKind.UNROLLED} <= _loop_kinds(out)  # lanes, row group
    got = _run_symbolic({"plain": func, "rows": out}, sizes, np.random.default_rng(0))
    for plain, rows in zip(got["plain"], got["rows"]):
        np.testing.assert_array_equal(rows, plain)


def test_contractions_are_not_row_wise():
    """A matmul with a bias: its first stage has columns and a reduction, so the per-stage
    rules schedule it (a register tile), not the row rule."""
    (func,) = kernels("dense_trans_b").values()
    assert stage_rules(func, AVX512)[0] == "contraction"


def test_a_row_groups_statistics_stay_in_registers():
    """Layer norm over a batch of 1: the group's sums, means and deviations are compacted to
    8-element tiles whose indices the backend folds to constants (the batch index too), so
    the parallel worker keeps the sums in registers, with no gather of rows; only what the
    last stage reads row by row (a serial loop) stays in memory."""
    from tcc.emit.llvm import compile_prim_funcs

    types = [TensorType((1, 64, 256), "float32"), TensorType((256,), "float32"),
             TensorType((256,), "float32")]
    func = op_prim_func("layer_norm", types, {"axis": -1, "epsilon": 1e-5, "stash_type": "float32"})
    out = schedule_prim_func(func, AVX512)
    assert [b.shape for b in _allocations(out)] == [(1, 8)] * 5
    llvm_ir = compile_prim_funcs({"ln": out}).llvm_ir
    start = llvm_ir.index("@ln.parallel0(")
    worker = llvm_ir[start : llvm_ir.index("\n}", start)]
    assert worker.count("= alloca") <= 2 and "gather" not in worker


def test_a_symbolic_select_of_a_scalar_runs_in_vector_rows_inside_the_threads():
    """where(cond, scalar, y) over symbolic (n, s), as exporters mask attention scores: the
    scalar branch reads one in-bounds element, so the select still runs as vector lanes
    (a masked load for y, the scalar loaded plainly), and each thread's iteration is a row of
    vector steps, its indices taken apart by the symbolic divisions once a row. The result
    is bit-identical to the unscheduled kernel's."""
    from tcc.emit.llvm_vector import plan_vector

    n, s = E.Var("n"), E.Var("s")
    func = op_prim_func("where", [TensorType((n, s), "bool"), TensorType((), "float32"),
                                  TensorType((n, s), "float32")], {})
    out = schedule_prim_func(func, AVX512)
    (threads,) = [loc.stmt for loc in walk(out.body) if isinstance(loc.stmt, T.For)
                  and loc.stmt.kind is T.ForKind.PARALLEL]
    inner = [loc.stmt for loc in walk(threads.body) if isinstance(loc.stmt, T.For)]
    assert inner and inner[0].kind is T.ForKind.SERIAL  # the row, inside the threads' loop
    lanes = [loc.stmt for loc in walk(out.body) if isinstance(loc.stmt, T.For)
             and loc.stmt.kind is T.ForKind.VECTORIZED]
    assert plan_vector(lanes[0]) is not None  # the whole tiles' (the last one's is guarded)
    sizes = [{"n": 1, "s": 1}, {"n": 7, "s": 37}, {"n": 130, "s": 16}]
    got = _run_symbolic({"plain": func, "rules": out}, sizes, np.random.default_rng(0))
    for plain, rules in zip(got["plain"], got["rules"]):
        np.testing.assert_array_equal(rules, plain)


def test_a_symbolic_contraction_counts_its_column_tiles_inside_the_threads():
    """Attention scores over a symbolic length, (b, n, 16) x (b, 16, n): the threads share
    the row tiles, and each thread steps through a row's column tiles in a serial loop
    (their indices count up instead of coming out of divisions by n). Results stay
    bit-identical to the unscheduled kernel's, at lengths that fill the tiles and not."""
    b, n = E.Var("b"), E.Var("n")
    func = op_prim_func("matmul", [TensorType((b, n, 16), "float32"),
                                   TensorType((b, 16, n), "float32")], {})
    out = schedule_prim_func(func, AVX512)
    (threads,) = [loc.stmt for loc in walk(out.body) if isinstance(loc.stmt, T.For)
                  and loc.stmt.kind is T.ForKind.PARALLEL]
    loops = [loc.stmt for loc in walk(threads.body) if isinstance(loc.stmt, T.For)]
    assert loops[0].kind is T.ForKind.SERIAL and "i2" in loops[0].var.name  # column tiles
    assert any(lp.kind is T.ForKind.VECTORIZED for lp in loops)
    sizes = [{"b": 1, "n": 5}, {"b": 2, "n": 40}, {"b": 3, "n": 129}]
    got = _run_symbolic({"plain": func, "rules": out}, sizes, np.random.default_rng(0))
    for plain, rules in zip(got["plain"], got["rules"]):
        np.testing.assert_array_equal(rules, plain)


def _runs_in_guarded_16_lane_tiles(func: T.PrimFunc) -> None:
    """The scheduled `func` vectorizes in 16-lane tiles, whole tiles as vector code (the
    last one guarded), and computes bit for bit what the unscheduled one does."""
    from tcc.emit.llvm_vector import plan_vector

    out = schedule_prim_func(func, AVX512)
    lanes = [loc.stmt for loc in walk(out.body) if isinstance(loc.stmt, T.For)
             and loc.stmt.kind is T.ForKind.VECTORIZED]
    assert {lp.extent.value for lp in lanes} == {16}
    assert any(plan_vector(lp) is not None for lp in lanes)
    got = _run_symbolic({"plain": func, "rules": out}, [{}], np.random.default_rng(0))
    np.testing.assert_array_equal(got["rules"][0], got["plain"][0])


def test_a_width_without_a_divisor_of_whole_vectors_is_tiled_by_registers():
    """500 columns (divisors up to 64: 50, 25, 20 ... none made of half registers): tiles
    of one 16-lane register rather than 50-lane vectors."""
    _runs_in_guarded_16_lane_tiles(op_prim_func(
        "matmul", [TensorType((24, 48), "float32"), TensorType((48, 500), "float32")], {}))


def test_a_row_without_a_divisor_worth_a_vector_runs_in_guarded_vector_tiles():
    """109 columns (prime): tiles of 16 lanes rather than a serial loop."""
    _runs_in_guarded_16_lane_tiles(op_prim_func("sigmoid", [TensorType((40, 109), "float32")], {}))


@pytest.mark.parametrize("case", ["reduce_max_all", "reduce_min_rows"])
def test_a_max_without_an_output_axis_keeps_partial_results_in_vector_lanes(case):
    """A whole-tensor max and a row min: the reduction's contiguous innermost loop runs as
    vector lanes of partial results (max and min regroup exactly), combined after; the
    result is the same bit for bit, NaN and signed zeros included."""
    (func,) = kernels(case).values()
    scheduled = schedule_prim_func(func, AVX512)
    blocks = [b.name for b in _blocks(scheduled)]
    assert any(name.endswith("_rf") for name in blocks), blocks
    assert T.ForKind.VECTORIZED in _loop_kinds(scheduled)
    with load_cpu_library(compile_prim_funcs({"plain": func, "rules": scheduled})
                          .shared_object) as lib:
        lib.set_num_threads(2)
        for seed in range(3):
            rng = np.random.default_rng(seed)
            x = rng.standard_normal([int(d) for d in func.buffers[0].shape]).astype("float32")
            flat = x.reshape(-1)
            flat[rng.choice(flat.size, 8, replace=False)] = [0.0] * 4 + [-0.0] * 4
            if seed == 2:
                flat[rng.integers(flat.size)] = np.nan
            outs = {}
            for name in ("plain", "rules"):
                args = [x.copy(), np.full([int(d) for d in func.buffers[1].shape], 7.0, "float32")]
                lib.call(name, args)
                outs[name] = args[1]
            assert outs["rules"].tobytes() == outs["plain"].tobytes()


def test_a_float_sum_keeps_its_order():
    """Regrouping a float sum would change its rounding: no partial results."""
    func = op_prim_func("reduce_sum", [TensorType((24, 96), "float32")],
                        {"axes": [1], "keepdims": False})
    scheduled = schedule_prim_func(func, AVX512)
    assert not any(b.name.endswith("_rf") for b in _blocks(scheduled))


@pytest.mark.parametrize("columns, part", [(4096, 2048), (1000, 512)])
def test_a_matrix_vector_product_shares_its_columns_among_the_cores(columns, part):
    """One row times a 512 x N matrix: nothing outside the output's columns to share, so
    the columns are cut into one part per core (the last guarded where 1000 does not
    split into whole registers), each summing its products in order: bit for bit the
    plain kernel's result."""
    func = op_prim_func("matmul", [TensorType((1, 512), "float32"),
                                   TensorType((512, columns), "float32")], {})
    scheduled = schedule_prim_func(func, AVX512)
    parallel = [loc.stmt for loc in walk(scheduled.body)
                if isinstance(loc.stmt, T.For) and loc.stmt.kind is T.ForKind.PARALLEL]
    assert [lp.extent.value for lp in parallel] == [2]
    lanes = {loc.stmt.extent.value for loc in walk(scheduled.body)
             if isinstance(loc.stmt, T.For) and loc.stmt.kind is T.ForKind.VECTORIZED}
    assert lanes == {part}
    ((_, want, got),) = run_both({"mv": func}, {"mv": scheduled})
    assert got[-1].tobytes() == want[-1].tobytes()


@pytest.mark.parametrize("op, shapes, attrs, periods", [
    ("winograd_input_nchwc", [(1, 2, 14, 13, 16)], {"padding": [1, 1, 1, 1]}, [6, 6]),
    # 14 rows: tiles of 4 rows split by 4, the last tile guarded
    ("winograd_output_nchwc", [(6, 6, 2, 1, 4, 4, 16), (2, 16)], {"height": 14, "width": 16},
     [4, 4]),
])
def test_loops_whose_position_selects_test_are_unrolled_next_to_the_lanes(op, shapes, attrs,
                                                                          periods):
    """The Winograd transforms choose their coefficients by a select on the position in the
    tile: those positions run as unrolled loops (one period each) just outside the vector
    lanes, so every select is decided at compile time; the result is the plain kernel's,
    bit for bit (the terms left out added -0.0)."""
    func = op_prim_func(op, [TensorType(s, "float32") for s in shapes], attrs)
    scheduled = schedule_prim_func(func, AVX512)
    loops = [loc.stmt for loc in walk(scheduled.body) if isinstance(loc.stmt, T.For)]
    inner = [lp for lp in loops if lp.kind in (T.ForKind.UNROLLED, T.ForKind.VECTORIZED)]
    assert [lp.kind for lp in inner[-3:]] == [T.ForKind.UNROLLED] * 2 + [T.ForKind.VECTORIZED]
    assert [lp.extent.value for lp in inner[-3:-1]] == periods
    ((_, want, got),) = run_both({"t": func}, {"t": scheduled})
    assert got[-1].tobytes() == want[-1].tobytes()


@pytest.mark.parametrize("machine, width, tile", [
    # at least 24 columns: 4 output-channel chunks x the largest of 6, 5, 4 columns dividing
    (AVX512, 28, (4, 4, 16)),
    (AVX512, 30, (4, 6, 16)),
    (AVX512, 27, (4, 6, 16)),  # none divides: 6 and a guarded last tile
    (AVX512, 7, (2, 7, 16)),  # fewer: 2 chunks x all 7 columns
    (AVX2, 28, (4, 16)),  # 16 registers: one chunk, as before (two 8-lane registers a row)
    (AVX512, 14, (2, 7, 16)),  # a 1 x 1 conv's 14 columns: 2 chunks x 7
    # a 3 x 3 conv's: one chunk of all 14 (two tiles would read their overlap twice)
    (AVX512, -14, (14, 16)),
    (AVX512, -7, (2, 7, 16)),  # all 7 columns fit 2 chunks
])
def test_a_blocked_convs_tile_holds_several_output_channel_chunks(machine, width, tile):
    """A dense NCHW16c conv (a negative width: 3 x 3, padded): each input value broadcast
    to a column feeds the accumulators of several 16-channel output chunks (the weights
    differ, the input does not); the local tile is chunks x columns x lanes, and each
    output sums its products in the same order as the plain kernel: bit for bit its
    result."""
    k, width = (3, -width) if width < 0 else (1, width)
    func = op_prim_func("conv2d_nchwc", [TensorType((1, 4, 5, width, 16), "float32"),
                                         TensorType((8, 4, k, k, 16, 16), "float32")],
                        {"strides": [1, 1], "padding": [k // 2] * 4, "dilation": [1, 1],
                         "groups": 1})
    scheduled = schedule_prim_func(func, machine)
    # (a guarded last tile of columns is a copy of its own, with its own tile)
    tiles = {tuple(d for d in b.shape if d != 1) for b in _allocations(scheduled)
             if b.scope == "local"}
    assert tiles == {tile}
    ((_, want, got),) = run_both({"conv": func}, {"conv": scheduled})
    assert got[-1].tobytes() == want[-1].tobytes()


def _packs(func: T.PrimFunc) -> bool:
    sch = schedule_kernel(func, AVX512)
    return any(i.kind == "cache_read" for i in sch.trace.instructions)


@pytest.mark.parametrize("m, k, n, packs", [
    (64, 512, 512, True),  # a 1 MB right operand read down its columns by 8 row tiles
    (64, 256, 256, False),  # 256 KB: no gain from a panel measured
    (16, 512, 512, False),  # two row tiles share a panel: not enough to pay for the copy
    (64, 512, 32, False),  # one column tile: the panel is contiguous already
])
def test_a_large_strided_operand_is_packed_untuned(m, k, n, packs):
    """Untuned, the panel of a strided right operand is copied contiguous once per column
    tile (`pack`) when the operand is large and enough row tiles share each panel; the
    sums keep their order, so the results are the plain kernel's bits."""
    func = op_prim_func("matmul", [TensorType((m, k), "float32"),
                                   TensorType((k, n), "float32")], {})
    assert _packs(func) is packs
    if packs:
        ((_, want, got),) = run_both({"mm": func}, {"mm": schedule_prim_func(func, AVX512)})
        assert got[-1].tobytes() == want[-1].tobytes()


@pytest.mark.parametrize("step_bytes, steps, chunk", [
    (2 * 16 * 4 * 16, 64, 8),  # a 1 x 1 conv, 1024 -> 256 channels, 2 planes: 128 KB
    (2 * 16 * 4 * 16, 16, None),  # 256 input channels: 32 KB, which L1 holds
    (4 * 16 * 4 * 9 * 16, 8, 1),  # 3 x 3, 128 channels, 4 planes: 36 KB a step, 295 KB
    (2 * 16 * 4 * 16, None, None),  # a symbolic reduction
])
def test_a_reduction_is_chunked_when_its_reused_loads_outgrow_l1(step_bytes, steps, chunk):
    assert reduction_chunk(step_bytes, steps) == chunk


@pytest.mark.parametrize("row_tiles, extent, tiles, cores, rows", [
    (2, 14, 8, 2, 7),  # 2 tiles a row: 7 rows make a block of 14 tiles
    (7, 28, 2, 2, 2),  # 7 tiles a row: 2 rows
    (1, 7, 16, 2, 7),  # no divisor reaches 8 tiles: all the rows
    (2, 14, 1, 16, 1),  # 16 cores and one block outside: blocks of one row
])
def test_a_block_holds_enough_tiles_and_leaves_each_core_several(row_tiles, extent, tiles,
                                                                 cores, rows):
    assert block_rows(row_tiles, extent, tiles, cores) == rows


def _deep_conv() -> T.PrimFunc:
    """A 1 x 1 conv over 1024 channels (NCHW16c) to 8 chunks of 16 at 14 x 14."""
    return op_prim_func("conv2d_nchwc", [TensorType((1, 64, 14, 14, 16), "float32"),
                                         TensorType((8, 64, 1, 1, 16, 16), "float32")],
                        {"strides": [1, 1], "padding": [0, 0, 0, 0], "dilation": [1, 1],
                         "groups": 1})


def _local_tiles(func: T.PrimFunc) -> set[tuple[int, ...]]:
    return {tuple(d for d in b.shape if d != 1) for b in _allocations(func)
            if b.scope == "local"}


def _extents(func: T.PrimFunc) -> list[int]:
    return [loc.stmt.extent.value for loc in walk(func.body) if isinstance(loc.stmt, T.For)
            and isinstance(loc.stmt.extent, E.IntImm)]


@pytest.mark.parametrize("chunk, tile, chunks", [
    # untuned: its 2 planes' weights take 128 KB; chunks of 8 input-channel blocks (16 KB)
    # sweep a block of 7 output rows, 2 tiles of 7 columns each, whose sums stay local; 4
    # pairs of planes x 2 blocks of rows leave each of 2 cores 4 blocks
    (None, (2, 7, 14, 16), 8),
    (0, (2, 7, 16), None),  # no chunks: one tile's accumulators
    (2, (2, 7, 14, 16), 32),
])
def test_a_deep_convs_reduction_sweeps_a_block_of_tiles_chunk_by_chunk(chunk, tile, chunks):
    """Each output still sums its products in the plain kernel's order, chunk after chunk,
    so the results are the plain kernel's bits."""
    func = _deep_conv()
    given = {} if chunk is None else {"conv2d_nchwc.reduction_chunk": chunk}
    scheduled = finish_schedule(schedule_kernel(func, AVX512, Decisions(given)).func)
    if chunk is None:
        assert structural_equal(scheduled, schedule_prim_func(func, AVX512))
    assert _local_tiles(scheduled) == {tile}
    if chunks is not None:
        assert chunks in _extents(scheduled)
    ((_, want, got),) = run_both({"conv": func}, {"conv": scheduled})
    assert got[-1].tobytes() == want[-1].tobytes()
