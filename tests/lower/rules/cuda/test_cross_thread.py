"""The cross-thread reduction rule: a block of threads per output element of a long
reduction (layer norm, softmax rows, means, global pooling, a max over rows, a GEMV,
sums and maxima of a whole tensor), checked with
the GPU-semantics executor (races and barriers included) against the reference evaluator:
a max exactly, a sum within float rounding (it is regrouped). The barrier the rule needs
comes from insert_barriers, and without it the executor finds the race."""

import dataclasses

import numpy as np
import pytest

from tcc.api import load_module, lower
from tcc.ir import tir as T
from tcc.ir.gpu_eval import GpuEvalError, run_gpu_prim_func
from tcc.ir.printer import print_prim_func
from tcc.ir.tir_eval import run_prim_func
from tcc.lower.rules import finish_schedule, schedule_kernel, schedule_prim_func, stage_rules
from tcc.lower.schedule.sampling import Decisions
from tcc.target import parse_target
from tests.lower.rules.cpu.rules_cases import _model, random_arguments

CUDA = parse_target("cuda -arch=sm_80,sm_90")
RULE = "cuda-cross-thread-reduction"

CASES = {
    "mean": (_model("ReduceMean", {"x": [6, 200, 3]}, [6, 1, 3], axes=[1]), 2),
    "softmax": (_model("Softmax", {"x": [6, 320]}, [6, 320], axis=-1), 2),
    "layer_norm": (_model("LayerNormalization", {"x": [2, 3, 768]}, [2, 3, 768],
                          {"g": [768], "b": [768]}, axis=-1), 2),
    "global_pool": (_model("GlobalAveragePool", {"x": [2, 8, 14, 14]}, [2, 8, 1, 1]), 1),
    "max_rows": (_model("ReduceMax", {"x": [4, 1000]}, [4], axes=[1], keepdims=0), 1),
    # into a scalar: one block, on a loop of one iteration
    "sum_all": (_model("ReduceSum", {"x": [40, 96]}, [], keepdims=0), 1),
    "max_all": (_model("ReduceMax", {"x": [40, 96]}, [], keepdims=0), 1),
    # GEMV: one row against torch Linear's W[n, k], read along k by each block
    "gemv": (_model("Gemm", {"a": [1, 512]}, [1, 40], {"w": [40, 512], "c": [40]}, transB=1), 1),
}


def _funcs(case):
    return lower(load_module(CASES[case][0])).prim_funcs


@pytest.mark.parametrize("case", sorted(CASES))
def test_long_reductions_get_a_block_of_threads_each_and_compute_the_same(case):
    (func,) = _funcs(case).values()
    rules = stage_rules(func, CUDA)
    assert rules.count(RULE) >= CASES[case][1], rules
    scheduled = schedule_prim_func(func, CUDA)
    args = random_arguments(func, seed=4)
    want, got = [a.copy() for a in args], [a.copy() for a in args]
    run_prim_func(func, want)
    run_gpu_prim_func(scheduled, got)  # races=True: any unordered shared access fails
    exact = case in ("max_rows", "max_all")  # max regroups exactly; sums round differently
    for w, g in zip(want, got):
        if exact:
            np.testing.assert_array_equal(g, w)
        else:  # a dot product of 512 terms of size ~1 rounds to within ~512 * 2**-24
            tol = {"gemv": 3e-5, "sum_all": 1e-4}.get(case, 1e-6)  # sum_all: 3840 terms
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=tol)


def test_the_partials_live_in_shared_memory_behind_a_barrier():
    (func,) = _funcs("layer_norm").values()
    text = print_prim_func("k", schedule_prim_func(func, CUDA))
    assert "shared" in text and "syncthreads" in text


def _without_barriers(s):
    if isinstance(s, T.SeqStmt):
        kept = [_without_barriers(c) for c in s.stmts
                if not (isinstance(c, T.Evaluate) and getattr(c.value, "name", "") == "syncthreads")]
        return T.SeqStmt(tuple(kept)) if len(kept) > 1 else kept[0]
    for field in ("body", "then_case", "else_case"):
        child = getattr(s, field, None)
        if isinstance(child, T.Stmt):
            s = dataclasses.replace(s, **{field: _without_barriers(child)})
    return s


def test_without_the_barrier_the_executor_finds_the_race():
    (func,) = _funcs("mean").values()
    scheduled = schedule_prim_func(func, CUDA)
    broken = dataclasses.replace(scheduled, body=_without_barriers(scheduled.body))
    assert "syncthreads" in print_prim_func("k", scheduled)
    assert "syncthreads" not in print_prim_func("k", broken)
    args = random_arguments(func, seed=4)
    with pytest.raises(GpuEvalError, match="race"):
        run_gpu_prim_func(broken, [a.copy() for a in args])


def test_the_threads_per_block_are_a_decision_and_each_choice_computes_the_same():
    (func,) = _funcs("mean").values()
    args = random_arguments(func, seed=4)
    want = [a.copy() for a in args]
    run_prim_func(func, want)
    blocks = set()
    for threads in (40, 50, 100):  # divisors of the 200 values, from 32 to half of them
        chosen = schedule_kernel(func, CUDA, Decisions({"reduce_mean_sum.reduce_threads": threads}))
        scheduled = finish_schedule(chosen.func)
        blocks.add(print_prim_func("k", scheduled).count(f'thread_binding(0, {threads}, thread="threadIdx.x")'))
        got = [a.copy() for a in args]
        run_gpu_prim_func(scheduled, got)
        np.testing.assert_allclose(got[-1], want[-1], rtol=2e-6, atol=1e-6)
    assert blocks == {1}  # each choice is the block size of the partial sums


def test_short_reductions_and_contractions_stay_one_thread_per_output():
    # (ReduceMax: opset 17's ReduceSum takes its axes as an input, and reduced everything)
    short = lower(load_module(_model("ReduceMax", {"x": [8, 40]}, [8], axes=[1], keepdims=0)))
    (func,) = short.prim_funcs.values()
    assert RULE not in stage_rules(func, CUDA)
    matmul = lower(load_module(_model("MatMul", {"a": [4, 256], "b": [256, 8]}, [4, 8])))
    (func,) = matmul.prim_funcs.values()
    assert RULE not in stage_rules(func, CUDA)
    # one row, but B[k, n]: threads along n read consecutive addresses already
    gemv_kn = lower(load_module(_model("MatMul", {"a": [1, 256], "b": [256, 40]}, [1, 40])))
    (func,) = gemv_kn.prim_funcs.values()
    assert RULE not in stage_rules(func, CUDA)
    # four rows against W[n, k]: a matmul, whose operands each skip an output axis
    rows = lower(load_module(_model("Gemm", {"a": [4, 256]}, [4, 40], {"w": [40, 256]},
                                    transB=1)))
    (func,) = rows.prim_funcs.values()
    assert RULE not in stage_rules(func, CUDA)
