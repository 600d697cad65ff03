"""ONNX converters for reductions, softmax family, scans, TopK, losses and signal ops,
checked against onnxruntime (opset forms the node tests do not cover included)."""

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from tcc.frontend.onnx import from_onnx
from tcc.ir.errors import FrontendError
from tcc.ir.interp import run
from tests.helpers import assert_matches_ort, calls, onnx_model

RNG = np.random.default_rng(0)

_model = partial(onnx_model, ir_version=8)
_check = partial(assert_matches_ort, rtol=1e-5, atol=1e-6)


def _x(shape, dims=None, dtype=TP.FLOAT, name="x"):
    return helper.make_tensor_value_info(name, dtype, dims or list(shape))


def _out(name="y", dtype=TP.FLOAT):
    return helper.make_tensor_value_info(name, dtype, None)


def test_reduce_axes_attribute_before_opset_13():
    node = helper.make_node("ReduceSum", ["x"], ["y"], axes=[0, -1], keepdims=0)
    model = _model([node], [_x((3, 4, 5), ["n", 4, 5])], [_out()], opset=11)
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    mod = _check(model, {"x": x})
    (call,) = calls(mod)
    assert call.attrs["axes"] == [0, -1] and len(call.args) == 1


@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceMean", "ReduceL2", "ReduceLogSumExp"])
def test_reduce_constant_axes_input_becomes_an_attribute(op_type):
    axes = helper.make_tensor("axes", TP.INT64, [1], [1])
    node = helper.make_node(op_type, ["x", "axes"], ["y"], keepdims=1)
    model = _model([node], [_x((2, 3, 4))], [_out()], [axes], opset=18)
    mod = _check(model, {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)})
    (call,) = calls(mod)
    assert call.attrs["axes"] == [1] and len(call.args) == 1


def test_empty_axes_with_noop_is_the_identity():
    axes = helper.make_tensor("axes", TP.INT64, [0], [])
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], noop_with_empty_axes=1)
    model = _model([node], [_x((2, 3))], [_out()], [axes], opset=13)
    mod = _check(model, {"x": np.ones((2, 3), np.float32)})
    assert [c.op for c in calls(mod)] == ["identity"]


def test_symbolic_dims_survive_a_reduction():
    node = helper.make_node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=0)
    mod = from_onnx(_model([node], [_x((2, 3), ["batch", 3])], [_out()], opset=13))
    out_type = mod["main"].bindings[-1].var.type
    assert out_type.shape == (mod["main"].params[0].type.shape[0],)
    for batch in (1, 4):
        x = RNG.standard_normal((batch, 3)).astype(np.float32)
        np.testing.assert_array_equal(run(mod, {"x": x})[0], x.max(axis=1))


def test_run_time_axes_of_unknown_length_are_rejected():
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"])
    model = _model([node], [_x((2, 3)), _x((1,), ["k"], TP.INT64, "axes")], [_out()], opset=13)
    with pytest.raises(FrontendError, match="axes must be constant"):
        from_onnx(model)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_family_flattens_before_opset_13(op_type, axis):
    node = helper.make_node(op_type, ["x"], ["y"], axis=axis)
    model = _model([node], [_x((2, 3, 4))], [_out()], opset=11)
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    _check(model, {"x": x})


def test_softmax_default_axis_per_opset():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    for opset, axes in ((11, [1, 2]), (13, [-1])):
        mod = _check(
            _model(
                [helper.make_node("Softmax", ["x"], ["y"])], [_x(x.shape)], [_out()], opset=opset
            ),
            {"x": x},
        )
        assert calls(mod)[0].attrs["axes"] == axes


def test_argmax_before_select_last_index():
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)
    model = _model([node], [_x((3, 4))], [_out(dtype=TP.INT64)], opset=11)
    _check(model, {"x": RNG.integers(0, 3, (3, 4)).astype(np.float32)})


def test_topk_constant_k_becomes_an_attribute():
    k = helper.make_tensor("k", TP.INT64, [1], [2])
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=0, largest=0)
    model = _model([node], [_x((4, 3))], [_out("v"), _out("i", TP.INT64)], [k], opset=11)
    mod = _check(model, {"x": RNG.standard_normal((4, 3)).astype(np.float32)})
    (call,) = calls(mod)
    assert call.attrs["k"] == 2 and len(call.args) == 1


def test_topk_attribute_k_before_opset_10():
    node = helper.make_node("TopK", ["x"], ["v", "i"], k=2)
    model = _model([node], [_x((2, 5))], [_out("v"), _out("i", TP.INT64)], opset=1)
    x = np.array([[1, 5, 3, 5, 0], [2, 2, 2, 9, 1]], np.float32)
    values, idx = run(from_onnx(model), {"x": x})
    assert values.tolist() == [[5, 5], [9, 2]] and idx.tolist() == [[1, 3], [3, 0]]


def test_cumsum_constant_axis():
    axis = helper.make_tensor("axis", TP.INT32, [], [1])
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=1, reverse=1)
    model = _model([node], [_x((2, 4))], [_out()], [axis], opset=14)
    mod = _check(model, {"x": RNG.standard_normal((2, 4)).astype(np.float32)})
    assert calls(mod)[0].attrs["axis"] == 1


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_softmax_cross_entropy_with_weights_and_ignore_index(reduction):
    node = helper.make_node(
        "SoftmaxCrossEntropyLoss",
        ["x", "t", "w"],
        ["loss", "log_prob"],
        reduction=reduction,
        ignore_index=1,
    )
    inputs = [_x((3, 4, 2)), _x((3, 2), dtype=TP.INT64, name="t"), _x((4,), name="w")]
    model = _model([node], inputs, [_out("loss"), _out("log_prob")], opset=13)
    feeds = {
        "x": RNG.standard_normal((3, 4, 2)).astype(np.float32),
        "t": np.array([[0, 1], [3, 2], [1, 1]], np.int64),
        "w": np.array([0.5, 1.0, 2.0, 0.25], np.float32),
    }
    _check(model, feeds)


def test_unsupported_loss_reduction_is_reported():
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"], reduction="max")
    model = _model([node], [_x((2, 3)), _x((2,), dtype=TP.INT64, name="t")], [_out()], opset=13)
    with pytest.raises(FrontendError, match="unsupported reduction 'max'"):
        from_onnx(model)


def test_lp_and_mean_variance_normalization():
    nodes = [
        helper.make_node("LpNormalization", ["x"], ["a"], axis=1, p=1),
        helper.make_node("MeanVarianceNormalization", ["x"], ["b"], axes=[1]),
    ]
    model = _model(nodes, [_x((3, 4))], [_out("a"), _out("b")], opset=13)
    _check(model, {"x": RNG.standard_normal((3, 4)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


def test_constant_window_size_gives_a_static_shape():
    size = helper.make_tensor("n", TP.INT64, [], [6])
    node = helper.make_node("HannWindow", ["n"], ["y"], periodic=0, output_datatype=TP.DOUBLE)
    mod = from_onnx(_model([node], [], [_out(dtype=TP.DOUBLE)], [size], opset=17))
    (y,) = run(mod, {})
    assert mod["main"].bindings[-1].var.type.shape == (6,)
    np.testing.assert_allclose(y, np.hanning(6))


def test_dft_opset17_axis_attribute_with_constant_length():
    length = helper.make_tensor("n", TP.INT64, [], [6])
    node = helper.make_node("DFT", ["x", "n"], ["y"], axis=1, onesided=1)
    model = _model([node], [_x((2, 8, 1))], [_out()], [length], opset=17)
    x = RNG.standard_normal((2, 8, 1)).astype(np.float32)
    (y,) = run(from_onnx(model), {"x": x})
    z = np.fft.rfft(x[..., 0], n=6, axis=1)
    np.testing.assert_allclose(y, np.stack([z.real, z.imag], -1), atol=1e-5)
