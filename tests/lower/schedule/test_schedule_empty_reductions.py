"""decompose_empty_reductions: a reduction whose loops may run no iteration still writes its
init, by the rules' schedules and in compiled code; reductions over constant extents are
left as they are."""

from __future__ import annotations

import numpy as np

from tcc.ir import expr as E
from tcc.ir.graph import TensorType
from tcc.ir.printer import print_prim_func
from tcc.lower.legalize import op_prim_func
from tcc.lower.rules import schedule_prim_func
from tcc.lower.schedule.reduction import decompose_empty_reductions
from tcc.lower.schedule.state import walk
from tcc.target import parse_target
from tests.lower.schedule.cases import compile_all, op_func, run_compiled


def _row_sums(width):
    return op_prim_func("reduce_sum", [TensorType((4, width), "float32")],
                        {"axes": [1], "keepdims": False})


def _inits(func) -> list[str]:
    return [loc.stmt.name for loc in walk(func.body)
            if getattr(loc.stmt, "init", None) is not None]


def test_a_reduction_over_a_size_variable_gets_its_init_before_its_loop():
    func = _row_sums(E.Var("k"))
    assert _inits(func)  # the init is in the reduction block
    out = decompose_empty_reductions(func)
    assert not _inits(out)
    text = print_prim_func("f", out)
    assert text.index('block("reduce_sum_init")') < text.index("in serial(0, k)")


def test_a_reduction_over_constant_extents_is_left_as_it_is():
    func = op_func("reduce_sum", (4, 6), axes=[1], keepdims=False)
    assert decompose_empty_reductions(func) is func


def test_a_sum_of_no_values_is_zero_in_compiled_code():
    """Scheduled by the rules and compiled: with k = 0 every row sum is 0, not what the
    output buffer held before (NaN here)."""
    func = schedule_prim_func(_row_sums(E.Var("k")), parse_target("llvm"))
    lib = compile_all({"row_sums": func})
    for k in (0, 3):
        a = np.random.default_rng(k).standard_normal((4, k)).astype(np.float32)
        out = np.full(4, np.nan, np.float32)
        _, got = run_compiled(lib, "row_sums", [a, out])
        np.testing.assert_allclose(got, a.sum(axis=1), rtol=1e-6, atol=1e-6)
