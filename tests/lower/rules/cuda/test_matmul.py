"""The matmul tiling rule: a block of threads per tile of the output, the operands' tiles
staged through shared memory, each thread's piece accumulated in registers. Checked with
the GPU-semantics executor (races and barriers included) against the reference evaluator,
bit for bit: each thread sums its outputs' products in the serial loop's order."""

import dataclasses

import numpy as np
import pytest

from tcc.api import load_module, lower
from tcc.ir import expr as E
from tcc.ir.gpu_eval import GpuEvalError, run_gpu_prim_func
from tcc.ir.printer import print_prim_func
from tcc.ir.tir_eval import run_prim_func
from tcc.lower.rules import finish_schedule, schedule_kernel, schedule_prim_func, stage_rules
from tcc.lower.schedule.sampling import Decisions
from tcc.target import parse_target
from tests.lower.rules.cpu.rules_cases import _model
from tests.lower.rules.cuda.test_cross_thread import _without_barriers

CUDA = parse_target("cuda -arch=sm_80,sm_90")
RULE = "cuda-matmul-tiling"
SIZES = {"m": 37, "s": 21}  # symbolic dimensions: not multiples of a tile

CASES = {
    # a reduction of 40: two steps of 16 and a ragged third
    "matmul": _model("MatMul", {"a": [40, 40], "b": [40, 36]}, [40, 36]),
    "symbolic_rows": _model("MatMul", {"a": ["m", 40], "b": [40, 24]}, ["m", 24]),
    "batch_matmul": _model("MatMul", {"a": [2, 3, 20, 24], "b": [2, 3, 24, 36]}, [2, 3, 20, 36]),
    # torch Linear's W[n, k], and a bias added in the write-back
    "dense_trans_b": _model("Gemm", {"a": [20, 72]}, [20, 40], {"w": [40, 72], "c": [40]},
                            transB=1),
    # A read as A[k, i]
    "trans_a": _model("Gemm", {"a": [24, 20], "b": [24, 32]}, [20, 32], transA=1),
    # a [batch, sequence, features] activation: its batch goes to the grid's z axis
    "activation": _model("MatMul", {"a": [2, "s", 24], "b": [24, 40]}, [2, "s", 40]),
}


def kernel_of(model):
    """The one PrimFunc of a one-node model."""
    (func,) = lower(load_module(model)).prim_funcs.values()
    return func


def arguments(func, sizes: dict, seed=4):
    """Seeded arrays for `func`'s buffers, a symbolic dimension sized by name from `sizes`."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([sizes[d.name] if isinstance(d, E.Var) else int(d)
                                 for d in b.shape]).astype(b.dtype) for b in func.buffers]


def check_bit_for_bit(func, scheduled, sizes: dict) -> None:
    """The GPU-semantics executor (races on; a read past an operand's end raises) gives the
    reference evaluator's results bit for bit."""
    args = arguments(func, sizes)
    want, got = [a.copy() for a in args], [a.copy() for a in args]
    run_prim_func(func, want)
    run_gpu_prim_func(scheduled, got)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def _func(case):
    return kernel_of(CASES[case])


def _arguments(func):
    return arguments(func, SIZES)


def _check(func, scheduled):
    check_bit_for_bit(func, scheduled, SIZES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_contractions_are_tiled_and_compute_the_same_bit_for_bit(case):
    func = _func(case)
    assert RULE in stage_rules(func, CUDA)
    _check(func, schedule_prim_func(func, CUDA))


def test_operand_tiles_are_shared_and_each_thread_accumulates_its_piece_in_registers():
    # tiles that divide the extents: no ragged last step for unswitching to copy
    exact = _model("MatMul", {"a": [64, 32], "b": [32, 64]}, [64, 64])
    (func,) = lower(load_module(exact)).prim_funcs.values()
    text = print_prim_func("k", schedule_prim_func(func, CUDA))
    assert 'allocate((4, 4), "float32", scope="local")' in text  # VI x VJ, one thread's
    assert text.count('scope="shared"') == 2
    # one barrier after the copies, one before the next step overwrites them; none in
    # the copy loops (their iterations write disjoint rows) and none between blocks
    assert text.count("syncthreads") == 2


def test_without_the_barriers_the_executor_finds_the_race():
    func = _func("matmul")
    scheduled = schedule_prim_func(func, CUDA)
    broken = dataclasses.replace(scheduled, body=_without_barriers(scheduled.body))
    assert "syncthreads" not in print_prim_func("k", broken)
    with pytest.raises(GpuEvalError, match="race"):
        run_gpu_prim_func(broken, _arguments(func))


@pytest.mark.parametrize("rows, cols, step", [(1, 2, 4), (2, 1, 8), (8, 4, 32)])
def test_the_tile_sizes_are_decisions_and_each_choice_computes_the_same(rows, cols, step):
    func = _func("matmul")
    decisions = {"matmul.matmul_rows": rows, "matmul.matmul_cols": cols, "matmul.matmul_step": step}
    chosen = schedule_kernel(func, CUDA, Decisions(decisions))
    scheduled = finish_schedule(chosen.func)
    assert f'allocate(({rows}, {cols}), "float32", scope="local")' in print_prim_func("k", scheduled)
    _check(func, scheduled)


def test_short_rows_or_columns_and_other_reductions_are_left_to_the_other_rules():
    short = _model("MatMul", {"a": [4, 256], "b": [256, 40]}, [4, 40])
    gemv = _model("Gemm", {"a": [1, 72]}, [1, 40], {"w": [40, 72]}, transB=1)
    mean = _model("ReduceMean", {"x": [32, 200, 32]}, [32, 1, 32], axes=[1])
    conv = _model("Conv", {"x": [1, 8, 20, 20]}, [1, 16, 18, 18], {"w": [16, 8, 3, 3]})
    for model in (short, gemv, mean, conv):
        (func,) = lower(load_module(model)).prim_funcs.values()
        assert RULE not in stage_rules(func, CUDA), model.graph.node[0].op_type
