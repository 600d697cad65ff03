"""ONNX data-movement converters: static, symbolic and run-time shape operands, checked
against onnxruntime."""

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from tcc.frontend.onnx import from_onnx
from tcc.ir.errors import FrontendError
from tcc.ir.expr import Var, prove_equal
from tcc.ir.interp import run
from tests.helpers import assert_matches_ort, call_ops, onnx_model, value_info

INT64_MAX = 2**63 - 1

_check_against_ort = partial(assert_matches_ort, rtol=1e-6, atol=0)


def _x(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def test_reshape_zero_and_minus_one_on_a_symbolic_batch():
    m = onnx_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"])],
        [value_info("x", TP.FLOAT, ["n", 12, 64])],
        [value_info("y", TP.FLOAT, None)],
        [helper.make_tensor("s", TP.INT64, [2], [0, -1])],
    )
    mod = _check_against_ort(m, {"x": _x(3, 12, 64)})
    (n,) = [d for d in mod["main"].params[0].type.shape if isinstance(d, Var)]
    assert mod["main"].bindings[-1].var.type.shape == (n, 768)


def test_reshape_with_a_run_time_shape():
    m = onnx_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"])],
        [value_info("x", TP.FLOAT, [2, 3, 4]), value_info("s", TP.INT64, [2])],
        [value_info("y", TP.FLOAT, None)],
    )
    mod = _check_against_ort(m, {"x": _x(2, 3, 4), "s": np.array([0, -1], np.int64)})
    assert call_ops(mod) == ["dyn_reshape"]


def test_static_reshape_and_transpose_of_constants_fold():
    m = onnx_model(
        [
            helper.make_node("Reshape", ["c", "s"], ["r"]),
            helper.make_node("Transpose", ["r"], ["y"]),
        ],
        [],
        [value_info("y", TP.FLOAT, [3, 2])],
        [
            helper.make_tensor("c", TP.FLOAT, [6], np.arange(6.0)),
            helper.make_tensor("s", TP.INT64, [2], [2, 3]),
        ],
    )
    mod = from_onnx(m)
    assert call_ops(mod) == ["identity"]
    np.testing.assert_array_equal(run(mod, [])[0], np.arange(6.0, dtype=np.float32).reshape(2, 3).T)


def test_slice_to_int64_max_on_a_symbolic_axis_keeps_the_axis():
    m = onnx_model(
        [helper.make_node("Slice", ["x", "b", "e", "a"], ["y"])],
        [value_info("x", TP.FLOAT, ["n", 6])],
        [value_info("y", TP.FLOAT, None)],
        [
            helper.make_tensor("b", TP.INT64, [2], [0, 1]),
            helper.make_tensor("e", TP.INT64, [2], [INT64_MAX, -1]),
            helper.make_tensor("a", TP.INT64, [2], [0, 1]),
        ],
    )
    mod = _check_against_ort(m, {"x": _x(5, 6)})
    n = mod["main"].params[0].type.shape[0]
    out = mod["main"].bindings[-1].var.type.shape
    assert prove_equal(out[0], n) and out[1] == 4


def test_slice_with_run_time_bounds_and_negative_steps():
    m = onnx_model(
        [helper.make_node("Slice", ["x", "b", "e", "a", "st"], ["y"])],
        [value_info("x", TP.FLOAT, [5, 6])]
        + [value_info(k, TP.INT64, [2]) for k in ("b", "e", "a", "st")],
        [value_info("y", TP.FLOAT, None)],
    )
    feeds = {
        "x": _x(5, 6),
        "b": np.array([-1, 20], np.int64),
        "e": np.array([-100, 0], np.int64),
        "a": np.array([0, 1], np.int64),
        "st": np.array([-2, -1], np.int64),
    }
    assert call_ops(_check_against_ort(m, feeds)) == ["dyn_strided_slice"]


def test_range_over_a_symbolic_length():
    m = onnx_model(
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "i"], ["n"], axis=0),
            helper.make_node("Range", ["z", "n", "one"], ["y"]),
        ],
        [value_info("x", TP.FLOAT, ["n", 2])],
        [value_info("y", TP.INT64, None)],
        [
            helper.make_tensor("i", TP.INT64, [], [0]),
            helper.make_tensor("z", TP.INT64, [], [0]),
            helper.make_tensor("one", TP.INT64, [], [1]),
        ],
    )
    mod = _check_against_ort(m, {"x": _x(4, 2)})
    assert mod["main"].bindings[-1].var.type.shape == (mod["main"].params[0].type.shape[0],)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes_with_run_time_pads(mode):
    inputs = [value_info("x", TP.FLOAT, [3, 4]), value_info("p", TP.INT64, [4])]
    m = onnx_model(
        [helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)],
        inputs,
        [value_info("y", TP.FLOAT, None)],
        opset=19,
    )
    _check_against_ort(m, {"x": _x(3, 4), "p": np.array([1, 2, 2, 1], np.int64)})


def test_pad_with_constant_pads_value_and_axes():
    m = onnx_model(
        [helper.make_node("Pad", ["x", "p", "v", "a"], ["y"])],
        [value_info("x", TP.FLOAT, ["n", 4])],
        [value_info("y", TP.FLOAT, None)],
        [
            helper.make_tensor("p", TP.INT64, [2], [1, 3]),
            helper.make_tensor("v", TP.FLOAT, [], [2.5]),
            helper.make_tensor("a", TP.INT64, [1], [-1]),
        ],
        opset=18,
    )
    assert call_ops(_check_against_ort(m, {"x": _x(2, 4)})) == ["pad"]


def test_split_uneven_opset18_and_attribute_sizes_opset11():
    out = [value_info(k, TP.FLOAT, None) for k in "abc"]
    m = onnx_model(
        [helper.make_node("Split", ["x"], list("abc"), axis=1, num_outputs=3)],
        [value_info("x", TP.FLOAT, [2, 7])],
        out,
        opset=18,
    )
    _check_against_ort(m, {"x": _x(2, 7)})
    m = onnx_model(
        [helper.make_node("Split", ["x"], list("abc"), axis=0, split=[1, 0, 3])],
        [value_info("x", TP.FLOAT, [4, 2])],
        out,
        opset=11,
    )
    _check_against_ort(m, {"x": _x(4, 2)})


def test_squeeze_unsqueeze_flatten_in_attribute_opsets():
    nodes = [
        helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, 3]),
        helper.make_node("Squeeze", ["u"], ["s"], axes=[0]),
        helper.make_node("Flatten", ["s"], ["y"], axis=-1),
    ]
    m = onnx_model(
        nodes, [value_info("x", TP.FLOAT, [2, 3])], [value_info("y", TP.FLOAT, None)], opset=11
    )
    _check_against_ort(m, {"x": _x(2, 3)})


def test_expand_and_tile_with_known_operands():
    nodes = [
        helper.make_node("Expand", ["x", "s"], ["e"]),
        helper.make_node("Tile", ["e", "r"], ["y"]),
    ]
    m = onnx_model(
        nodes,
        [value_info("x", TP.FLOAT, ["n", 1])],
        [value_info("y", TP.FLOAT, None)],
        [
            helper.make_tensor("s", TP.INT64, [3], [2, 1, 3]),
            helper.make_tensor("r", TP.INT64, [3], [1, 2, 1]),
        ],
    )
    mod = _check_against_ort(m, {"x": _x(4, 1)})
    assert call_ops(mod) == ["broadcast_to", "tile"]


def test_constant_of_shape_trilu_eyelike():
    nodes = [
        helper.make_node(
            "ConstantOfShape", ["s"], ["c"], value=helper.make_tensor("v", TP.FLOAT, [1], [3.0])
        ),
        helper.make_node("Trilu", ["c", "k"], ["t"], upper=0),
        helper.make_node("EyeLike", ["t"], ["e"], k=1, dtype=TP.INT32),
    ]
    m = onnx_model(
        nodes,
        [value_info("k", TP.INT64, [])],
        [value_info("t", TP.FLOAT, None), value_info("e", TP.INT32, None)],
        [helper.make_tensor("s", TP.INT64, [2], [3, 4])],
    )
    _check_against_ort(m, {"k": np.array(1, np.int64)})


def test_compress_and_reverse_sequence():
    nodes = [
        helper.make_node("Compress", ["x", "c"], ["p"], axis=1),
        helper.make_node("ReverseSequence", ["x", "l"], ["r"], batch_axis=0, time_axis=1),
    ]
    m = onnx_model(
        nodes,
        [
            value_info("x", TP.FLOAT, [2, 4]),
            value_info("c", TP.BOOL, [4]),
            value_info("l", TP.INT64, [2]),
        ],
        [value_info("p", TP.FLOAT, None), value_info("r", TP.FLOAT, None)],
    )
    feeds = {"x": _x(2, 4), "c": np.array([1, 0, 1, 1], bool), "l": np.array([3, 1], np.int64)}
    _check_against_ort(m, feeds)


def test_constant_attributes_and_unsupported_forms():
    nodes = [
        helper.make_node("Constant", [], ["a"], value_floats=[1.0, 2.0]),
        helper.make_node("Constant", [], ["b"], value_int=3),
    ]
    m = onnx_model(nodes, [], [value_info("a", TP.FLOAT, [2]), value_info("b", TP.INT64, [])])
    a, b = run(from_onnx(m), [])
    assert a.dtype == np.float32 and a.tolist() == [1.0, 2.0] and b.dtype == np.int64 and b == 3
    m = onnx_model(
        [helper.make_node("Constant", [], ["s"], value_strings=["x"])],
        [],
        [value_info("s", TP.STRING, [1])],
    )
    with pytest.raises(FrontendError, match="string constants are unsupported"):
        from_onnx(m)
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("v", TP.FLOAT, [1], [1.0]),
        helper.make_tensor("i", TP.INT64, [1], [0]),
        [2],
    )
    m = onnx_model(
        [helper.make_node("Constant", [], ["s"], sparse_value=sparse)],
        [],
        [value_info("s", TP.FLOAT, [2])],
    )
    with pytest.raises(FrontendError, match="sparse_value is unsupported"):
        from_onnx(m)
