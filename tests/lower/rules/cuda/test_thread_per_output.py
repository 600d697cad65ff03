"""The CUDA rules on every kind of stage the CPU rule tests use: each kernel comes out bound
to GPU blocks and threads, and computes what the unscheduled kernel computes, bit for bit:
the reference evaluator runs the plain kernel, the GPU-semantics executor the scheduled one
(which also finds any race between its threads)."""

import numpy as np
import pytest

from tcc.ir import tir as T
from tcc.ir.gpu_eval import run_gpu_prim_func
from tcc.ir.tir_eval import run_prim_func
from tcc.lower.rules import rule_set, schedule_prim_func, stage_rules
from tcc.target import parse_target
from tests.lower.rules.cpu.rules_cases import CASES, kernels, random_arguments

CUDA = parse_target("cuda -arch=sm_80,sm_90")
# Cases too large for a Python evaluator (conv_grouped_wide: 30 s to run unscheduled):
# only their binding is checked here; the matmul and conv rules' own tests run such
# stages. The executor runs a block's threads one by one: the serial evaluator checks a
# mid-sized case whose threads share nothing.
TOO_LARGE = {"conv_grouped_wide", "batch_matmul", "matmul", "conv_pad"}
SERIAL_ONLY = {"conv_grouped"}


def _launch_loops(func: T.PrimFunc) -> list[list[T.For]]:
    """Per top-level statement of the root block, the loops bound to GPU axes in it."""
    body = func.body.body if isinstance(func.body, T.Block) else func.body
    stmts = body.stmts if isinstance(body, T.SeqStmt) else (body,)
    out = []
    for s in stmts:
        found, stack = [], [s]
        while stack:
            n = stack.pop()
            if isinstance(n, T.For) and n.kind is T.ForKind.THREAD_BINDING:
                found.append(n)
            for child in (getattr(n, f, None) for f in ("body", "then_case", "else_case")):
                if isinstance(child, T.Stmt):
                    stack.append(child)
            if isinstance(n, T.SeqStmt):
                stack.extend(n.stmts)
        out.append(found)
    return out


def test_the_cuda_target_picks_the_cuda_rules():
    assert rule_set(CUDA) is not rule_set(parse_target("llvm"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_stage_is_bound_and_computes_the_same(case):
    for name, func in kernels(case).items():
        rules = stage_rules(func, CUDA)
        assert "unscheduled" not in rules, name
        # a stage of the cross-thread rule (a GEMV, a max of a whole tensor) regroups
        regrouped = "cuda-cross-thread-reduction" in rules
        scheduled = schedule_prim_func(func, CUDA)
        for loops in _launch_loops(scheduled):
            tags = {loop.thread_tag for loop in loops}
            # one output element runs as one thread (no loop bound), else blocks of threads
            assert not tags or {"blockIdx.x", "threadIdx.x"} <= tags, name
            assert all(loop.kind is not T.ForKind.PARALLEL for loop in loops)
        if case in TOO_LARGE:
            continue
        args = random_arguments(func, seed=1)
        want, got = [a.copy() for a in args], [a.copy() for a in args]
        run_prim_func(func, want)
        (run_prim_func if case in SERIAL_ONLY else run_gpu_prim_func)(scheduled, got)
        for w, g in zip(want, got):
            if regrouped:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
            else:
                np.testing.assert_array_equal(g, w)  # the same operations in the same order


def test_an_epilogue_is_folded_into_the_reduction_write_back():
    """A matmul + bias (Gemm) is one launch, accumulating in a one-element local buffer."""
    (func,) = kernels("dense_trans_b").values()
    scheduled = schedule_prim_func(func, CUDA)
    assert len(_launch_loops(scheduled)) == 1
    assert not isinstance(scheduled.body, T.Block) or all(
        b.scope != "global" for b in scheduled.body.alloc_buffers)


def test_threads_per_block_keep_the_target_limit():
    small = parse_target("cuda -max-threads-per-block=128")
    for func in kernels("add_broadcast").values():
        for loops in _launch_loops(schedule_prim_func(func, small)):
            assert all(loop.extent.value <= 128 for loop in loops if loop.thread_tag == "threadIdx.x")
