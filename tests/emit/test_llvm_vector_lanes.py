"""How many lanes one vector step of a `vectorized` loop takes."""

from __future__ import annotations

import pytest

from tcc.emit.llvm import build_module
from tcc.emit.llvm_vector import vector_lanes
from tcc.ir.parser import parse_module
from tcc.target import parse_target


@pytest.mark.parametrize(
    "extent, lanes",
    [
        (64, 64),  # a power of two up to 64 runs whole
        (8, 8),
        (56, 8),  # else the widest power-of-two divisor, at least 4: 7 steps of 8
        (48, 16),
        (12, 4),
        (13, 13),  # a short loop with no such divisor runs whole
        (6, 6),
        (128, 32),  # long loops: at most 32 lanes a step
        (100, 4),
        (130, 2),
        (67, 0),  # long and odd: no vector step fits
    ],
)
def test_vector_lanes(extent, lanes):
    assert vector_lanes(extent) == lanes


def test_a_56_lane_accumulator_runs_as_steps_of_8():
    src = """
@prim_func
def colsum(A: Buffer((9, 56), "float32"), B: Buffer((56,), "float32")):
    for r in serial(0, 9):
        for j in vectorized(0, 56):
            with block("B"):
                vj = axis.spatial(56, j)
                vr = axis.reduce(9, r)
                with init():
                    B[vj] = 0.0
                B[vj] = B[vj] + A[vr, vj]
"""
    text = str(build_module(parse_module(src).prim_funcs, parse_target("llvm"))[0])
    assert "load <8 x float>" in text and "x float>" not in text.replace("<8 x float>", "")


def test_a_lane_guarded_remainder_compiles_without_llvm_warnings(capfd):
    """The guarded copy of a split's last tile cannot run as vector code; it is left to
    LLVM unmarked, instead of with a forced-vectorize hint LLVM refuses with a warning on
    stderr."""
    from tcc.emit.llvm import compile_prim_funcs
    from tcc.ir import expr as E
    from tcc.ir.graph import TensorType
    from tcc.lower.legalize import op_prim_func
    from tcc.lower.rules import schedule_prim_func
    from tcc.target import parse_target

    # BERT's key transpose: the sequence, symbolic, becomes the innermost (vector) axis
    n = E.Var("seq")
    func = op_prim_func("transpose", [TensorType((1, n, 4, 64), "float32")], {"axes": [0, 2, 3, 1]})
    compile_prim_funcs({"k": schedule_prim_func(func, parse_target("llvm"))})
    assert "not vectorized" not in capfd.readouterr().err
