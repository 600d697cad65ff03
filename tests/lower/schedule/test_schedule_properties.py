"""Random sequences of loop and block primitives on small real PrimFuncs keep the result,
keep parallel and vector loops free of dependences, print and parse back, and leave a trace
that round-trips through JSON and replays to an equal function.

Independence is checked by running each parallel or vectorized loop backwards: iterations
that touch nothing another iteration writes give the same result in any order.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tcc.ir import tir as T
from tcc.ir.parser import parse_module
from tcc.lower.schedule import Schedule, ScheduleError
from tcc.lower.schedule.rewrite import substitute_stmt
from tcc.lower.schedule.state import find_loop, replace, walk
from tests.lower.schedule.cases import (
    add2d,
    arrays_for,
    assert_prints_and_replays,
    compile_all,
    matmul,
    outputs_of,
    run_compiled,
    softmax,
)

FUNCS = {"add2d": add2d, "matmul": matmul, "softmax": softmax}
LOOP_OPS = ("split", "tile", "fuse", "reorder", "parallel", "vectorize", "unroll", "annotate")
BLOCK_OPS = (
    "compute_at",
    "reverse_compute_at",
    "compute_inline",
    "reverse_compute_inline",
    "cache_read",
    "cache_write",
    "decompose_reduction",
)
OPS = LOOP_OPS + BLOCK_OPS


def random_step(sch: Schedule, choose) -> None:
    """One primitive on loops of a random block; `choose(options)` picks one option."""
    block = choose(sch.get_child_blocks(sch.get_block("root")))
    loops = sch.get_loops(block)
    op = choose(OPS)
    if op == "split":
        factor = choose([1, 2, 3, 4, 5])
        sch.split(choose(loops), choose([[None, factor], [factor, None]]))
    elif op == "tile":
        loop = choose(loops)
        n, limit = choose([2, 3]), choose([2, 4, 8])
        sch.split(loop, sch.sample_perfect_tile(loop, n=n, max_innermost_factor=limit))
    elif op == "fuse" and len(loops) > 1:
        start = choose(range(len(loops) - 1))
        sch.fuse(*loops[start : start + choose([2, 3])])
    elif op == "reorder" and len(loops) > 1:
        sch.reorder(*choose(list(itertools.permutations(loops, min(len(loops), 3)))))
    elif op in ("parallel", "vectorize", "unroll"):
        getattr(sch, op)(choose(loops))
    elif op == "annotate":
        sch.annotate(choose([block, *loops]), "pragma_auto_unroll_max_step", choose([0, 16]))
    elif op in BLOCK_OPS:
        random_block_step(sch, op, block, loops, choose)


def random_block_step(sch: Schedule, op: str, block, loops, choose) -> None:
    """A block primitive on `block`; the loop of compute_at and reverse_compute_at is any
    loop of any block, so most tries are refused and leave the function as it was."""
    if op in ("compute_at", "reverse_compute_at"):
        other = choose(sch.get_child_blocks(sch.get_block("root")))
        target = sch.get_loops(other)
        if target:
            getattr(sch, op)(block, choose(target), preserve_unit_loops=choose([False, True]))
    elif op in ("compute_inline", "reverse_compute_inline"):
        getattr(sch, op)(block)
    elif op == "cache_read" and sch.get(block).reads:
        index = choose(range(len(sch.get(block).reads)))
        sch.cache_read(block, index, choose(["global", "local"]))
    elif op == "cache_write":
        sch.cache_write(block, 0, choose(["global", "local"]))
    elif op == "decompose_reduction" and loops:
        sch.decompose_reduction(block, choose(loops))


def random_schedule(name: str, steps: int, choose, seed: int = 0) -> Schedule:
    """A schedule of steps that apply; a refused step leaves the function as it was."""
    sch = Schedule(FUNCS[name](), seed=seed)
    for _ in range(steps):
        func = sch.func
        try:
            random_step(sch, choose)
        except ScheduleError:
            assert sch.func is func
    return sch


def backwards(func: T.PrimFunc, loop: T.For) -> T.PrimFunc:
    """`func` with `loop` run serially from its last iteration to its first."""
    loc = find_loop(func, loop.var)
    last = loop.min + loop.extent - 1
    body = substitute_stmt(loop.body, {loop.var: last - (loop.var - loop.min)})
    return replace(func, loc, dataclasses.replace(loop, kind=T.ForKind.SERIAL, body=body))


def concurrent_loops(func: T.PrimFunc) -> list[T.For]:
    kinds = (T.ForKind.PARALLEL, T.ForKind.VECTORIZED)
    return [
        loc.stmt
        for loc in walk(func.body)
        if isinstance(loc.stmt, T.For) and loc.stmt.kind in kinds
    ]


def assert_same(got: list, want: list) -> None:
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(sorted(FUNCS)), steps=st.integers(1, 7), data=st.data())
def test_random_schedules_keep_the_result_and_their_trace_replays(name, steps, data):
    sch = random_schedule(name, steps, lambda options: data.draw(st.sampled_from(options)))
    arrays = arrays_for(sch.func, np.random.default_rng(0))
    want = outputs_of(FUNCS[name](), arrays)
    assert_same(outputs_of(sch.func, arrays), want)
    for loop in concurrent_loops(sch.func):
        assert_same(outputs_of(backwards(sch.func, loop), arrays), want)

    assert_prints_and_replays(sch, FUNCS[name])


def test_running_a_dependent_loop_backwards_changes_its_result():
    """The independence oracle above can fail."""
    func = parse_module(
        """
@prim_func
def shift(B: Buffer((8,), "float32")):
    with block("root"):
        reads()
        writes()
        for i in serial(0, 7):
            with block("S"):
                vi = axis.spatial(8, i + 1)
                reads(B[vi - 1])
                writes(B[vi])
                B[vi] = B[vi - 1] * 2.0
"""
    ).prim_funcs["shift"]
    (loop,) = [loc.stmt for loc in walk(func.body) if isinstance(loc.stmt, T.For)]
    arrays = arrays_for(func, np.random.default_rng(0))
    assert not np.allclose(
        outputs_of(backwards(func, loop), arrays)[0], outputs_of(func, arrays)[0]
    )


def test_random_schedules_keep_the_result_through_the_cpu_codegen():
    scheds = {}
    for seed in range(4):
        rng = random.Random(seed)
        for name in FUNCS:
            scheds[f"{name}_{seed}"] = random_schedule(name, 6, rng.choice, seed)
    funcs = {key: sch.func for key, sch in scheds.items()}
    funcs.update({f"{name}_ref": make() for name, make in FUNCS.items()})
    assert any(concurrent_loops(f) for f in funcs.values())
    with compile_all(funcs) as lib:
        for key in scheds:
            name = key.rsplit("_", 1)[0]
            arrays = arrays_for(funcs[key], np.random.default_rng(1))
            assert_same(run_compiled(lib, key, arrays), run_compiled(lib, f"{name}_ref", arrays))
