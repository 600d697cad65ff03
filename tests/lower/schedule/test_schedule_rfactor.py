"""rfactor: golden IR, results kept bit for bit (tir_eval and the CPU codegen, with NaNs and
signed zeros among the values), a trace that replays from JSON, and one refusal test per
reason."""

from __future__ import annotations

import numpy as np
import pytest

from tcc.ir import expr as E
from tcc.ir.graph import TensorType
from tcc.ir.printer import print_prim_func
from tcc.lower.legalize import op_prim_func
from tcc.lower.schedule import Schedule, ScheduleError
from tests.lower.schedule.cases import (
    assert_prints_and_replays,
    compile_all,
    op_func,
    outputs_of,
    run_compiled,
)


def row_max():
    return op_func("reduce_max", (6, 40), axes=[1], keepdims=False)


def whole_min():
    """A min over every element of a tensor with a symbolic leading dimension."""
    n = E.Var("n")
    func = op_prim_func("reduce_min", [TensorType((n, 5, 32), "float32")],
                        {"axes": [0, 1, 2], "keepdims": False})
    assert func is not None
    return func


def int_sum():
    func = op_prim_func("reduce_sum", [TensorType((3, 48), "int32")],
                        {"axes": [1], "keepdims": False})
    assert func is not None
    return func


def float_sum():
    return op_func("reduce_sum", (6, 40), axes=[1], keepdims=False)


def _block(sch: Schedule):
    (name,) = [b for b in ("reduce_max", "reduce_min", "reduce_sum")
               if b in print_prim_func("f", sch.func)]
    return sch.get_block(name)


def split_inner(width: int):
    """Split the innermost loop by `width` and keep a partial result per lane."""
    def apply(sch: Schedule):
        block = _block(sch)
        inner = sch.split(sch.get_loops(block)[-1], [None, width])[1]
        sch.rfactor(block, inner)
        sch.vectorize(inner)
    return apply


CASES = {
    "row_max": (row_max, split_inner(8)),
    "row_max_guarded": (row_max, split_inner(16)),  # 40 = 16 + 16 + a guarded 8
    "whole_min": (whole_min, split_inner(16)),
    "int_sum": (int_sum, split_inner(16)),
}
SIZES = {"n": 3}


def scheduled(name: str) -> Schedule:
    make, apply = CASES[name]
    sch = Schedule(make())
    apply(sch)
    return sch


def awkward_arrays(func, seed: int) -> list[np.ndarray]:
    """Random arrays with NaNs and zeros of both signs among the float values."""
    rng = np.random.default_rng(seed)
    out = []
    for buf in func.buffers:
        env = {v: SIZES[v.name] for v in E.free_vars(list(buf.shape))}
        shape = tuple(int(E.evaluate(d, env)) for d in buf.shape)
        if buf.dtype == "int32":
            out.append(rng.integers(-1000, 1000, shape).astype("int32"))
            continue
        a = rng.standard_normal(shape).astype(buf.dtype)
        flat = a.reshape(-1)
        picks = rng.choice(flat.size, size=min(flat.size, 12), replace=False)
        flat[picks[:4]] = 0.0
        flat[picks[4:8]] = -0.0
        if buf is func.buffers[0] and flat.size > 40:
            flat[picks[8]] = np.nan  # one row or the whole tensor turns NaN
        out.append(a)
    return out


def assert_bitwise(got, want):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


GOLDEN_ROW_MAX = """\
@prim_func
def f(in0: Buffer((6, 40), "float32"), reduce_max: Buffer((6,), "float32")):
    with block("root"):
        reduce_max_rf = alloc_buffer((6, 8), "float32")
        reads()
        writes()
        for i0 in serial(0, 6):
            for r1_0 in serial(0, 5):
                for r1_1 in vectorized(0, 8):
                    with block("reduce_max_rf"):
                        v_i0 = axis.spatial(6, i0)
                        v_r1_0 = axis.reduce(5, r1_0)
                        v_r1_1 = axis.spatial(8, r1_1)
                        reads(reduce_max_rf[v_i0, v_r1_1], in0[v_i0, v_r1_0 * 8 + v_r1_1])
                        writes(reduce_max_rf[v_i0, v_r1_1])
                        with init():
                            reduce_max_rf[v_i0, v_r1_1] = float32("-inf")
                        reduce_max_rf[v_i0, v_r1_1] = max(reduce_max_rf[v_i0, v_r1_1], \
in0[v_i0, v_r1_0 * 8 + v_r1_1])
        for ax0 in serial(0, 6):
            for r1_1_c in serial(0, 8):
                with block("reduce_max"):
                    v_i0_1 = axis.spatial(6, ax0)
                    v_r1_1_c = axis.reduce(8, r1_1_c)
                    reads(reduce_max_rf[v_i0_1, v_r1_1_c])
                    writes(reduce_max[v_i0_1])
                    with init():
                        reduce_max[v_i0_1] = float32("-inf")
                    reduce_max[v_i0_1] = max(reduce_max[v_i0_1], reduce_max_rf[v_i0_1, \
v_r1_1_c])
"""


def test_rfactor_keeps_partial_results_per_lane_and_combines_them_after_the_nest():
    assert print_prim_func("f", scheduled("row_max").func) == GOLDEN_ROW_MAX.replace("\\\n", "")


def test_a_guarded_lanes_loop_gets_its_partial_results_set_before_the_nest():
    text = print_prim_func("f", scheduled("row_max_guarded").func)
    init, partial, combine = (text.index(f'block("{b}")')
                              for b in ("reduce_max_rf_init", "reduce_max_rf", "reduce_max"))
    assert init < partial < combine
    assert "if r1_0 * 16 + r1_1 < 40:" in text
    assert text.count("with init()") == 1  # the combining block's


@pytest.mark.parametrize("name", sorted(CASES))
def test_rfactor_keeps_the_result_in_tir_eval_and_replays_from_json(name):
    sch = scheduled(name)
    make = CASES[name][0]
    arrays = awkward_arrays(sch.func, 0)
    got, want = outputs_of(sch.func, arrays), outputs_of(make(), arrays)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)

    assert_prints_and_replays(sch, make)


def test_rfactor_keeps_the_result_bit_for_bit_through_the_cpu_codegen():
    funcs = {name: scheduled(name).func for name in CASES}
    funcs.update({f"{name}_ref": CASES[name][0]() for name in CASES})
    with compile_all(funcs) as lib:
        for name in CASES:
            for seed in range(3):
                arrays = awkward_arrays(funcs[name], seed)
                assert_bitwise(run_compiled(lib, name, arrays),
                               run_compiled(lib, f"{name}_ref", arrays))


def _inner(sch: Schedule):
    block = _block(sch)
    return block, sch.split(sch.get_loops(block)[-1], [None, 8])[1]


def _spatial(sch: Schedule):
    block = _block(sch)
    return block, sch.get_loops(block)[0]


def _symbolic(sch: Schedule):
    block = _block(sch)
    return block, sch.get_loops(block)[0]


REFUSALS = [
    (float_sum, _inner, "its update `reduce_sum[v_i0] + in0[v_i0, v_r1]` is not min, max"),
    (row_max, _spatial, "loop 'i0' drives no reduction variable of it"),
    (whole_min, _symbolic, "loop 'r0' runs from 0 over n; it must start at 0 and have a "
                           "constant extent"),
]


@pytest.mark.parametrize("make, prepare, message", REFUSALS)
def test_rfactor_refusals_name_the_reason_and_change_nothing(make, prepare, message):
    sch = Schedule(make())
    block, loop = prepare(sch)
    func = sch.func
    with pytest.raises(ScheduleError) as err:
        sch.rfactor(block, loop)
    text = str(err.value)
    assert text.startswith("rfactor: block '") and message in text and "\n" not in text, text
    assert sch.func is func


def test_rfactor_refuses_while_another_block_of_the_nest_reads_the_result():
    sch = Schedule(op_func("softmax", (4, 32), axes=[1]))
    maximum = sch.get_block("softmax_max")
    sch.compute_at(maximum, sch.get_loops(sch.get_block("softmax_exp"))[0])
    lanes = sch.split(sch.get_loops(maximum)[-1], [None, 16])[1]
    with pytest.raises(ScheduleError, match="block 'softmax_exp' reads 'softmax_max' in the "
                                            "same loop nest"):
        sch.rfactor(maximum, lanes)
