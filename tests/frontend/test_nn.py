"""ONNX nn converters: auto_pad resolution (also over symbolic sizes), opset forms, optional
outputs and run-time shape operands, checked against onnxruntime."""

from functools import partial

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import numpy_helper

from tcc.frontend.onnx import from_onnx
from tcc.ir.errors import FrontendError
from tcc.ir.expr import Var
from tcc.ir.interp import run
from tests.helpers import assert_matches_ort, call_ops, node_model

rng = np.random.default_rng(1)

_model = partial(node_model, opset=21)
_check = partial(assert_matches_ort, rtol=1e-5, atol=1e-5)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad_over_symbolic_sizes(auto_pad):
    model = _model(
        "Conv",
        {"x": (TP.FLOAT, ["N", 2, "H", "W"]), "w": (TP.FLOAT, [4, 2, 3, 2]), "b": (TP.FLOAT, [4])},
        auto_pad=auto_pad,
        strides=[2, 3],
    )
    mod = from_onnx(model)
    assert call_ops(mod) == ["conv2d"]
    assert any(isinstance(d, Var) for d in mod["main"].outputs[0].type.shape)
    w, b = f32(4, 2, 3, 2), f32(4)
    for size in [(7, 8), (6, 5)]:
        _check(model, {"x": f32(2, 2, *size), "w": w, "b": b})


def test_conv_transpose_output_shape_and_auto_pad():
    x, w = f32(1, 2, 3, 4), f32(2, 3, 3, 3)
    inputs = {"x": (TP.FLOAT, [1, 2, 3, 4]), "w": (TP.FLOAT, [2, 3, 3, 3])}
    _check(_model("ConvTranspose", inputs, strides=[2, 3], output_shape=[8, 11]), {"x": x, "w": w})
    _check(_model("ConvTranspose", inputs, strides=[2, 2], auto_pad="SAME_UPPER"), {"x": x, "w": w})
    _check(
        _model("ConvTranspose", inputs, strides=[2, 1], pads=[1, 0, 0, 1], output_padding=[1, 0]),
        {"x": x, "w": w},
    )


def test_max_pool_indices_output_and_ceil_mode():
    model = _model(
        "MaxPool",
        {"x": (TP.FLOAT, [1, 2, 7, 7])},
        outputs=2,
        kernel_shape=[3, 3],
        strides=[2, 2],
        ceil_mode=1,
    )
    mod = _check(model, {"x": f32(1, 2, 7, 7)})
    assert call_ops(mod) == ["max_pool_with_indices"]


def test_pools_and_opset_forms():
    x = f32(1, 3, 6, 6)
    spec = {"x": (TP.FLOAT, [1, 3, 6, 6])}
    _check(
        _model(
            "AveragePool",
            spec,
            opset=7,
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
            count_include_pad=1,
        ),
        {"x": x},
    )
    _check(
        _model("LpPool", spec, opset=18, kernel_shape=[2, 2], p=3, auto_pad="SAME_UPPER"),
        {"x": x},
        rtol=1e-4,
        atol=1e-4,
    )
    _check(_model("GlobalLpPool", spec, opset=2, p=3), {"x": x}, rtol=1e-4, atol=1e-4)
    _check(_model("GlobalAveragePool", spec), {"x": x})


def test_layer_norm_optional_outputs_and_stash_type():
    spec = {"x": (TP.FLOAT, ["N", 3, 4]), "s": (TP.FLOAT, [4]), "b": (TP.FLOAT, [4])}
    feeds = {"x": f32(2, 3, 4), "s": f32(4), "b": f32(4)}
    mod = _check(_model("LayerNormalization", spec, outputs=3, opset=17, epsilon=1e-3), feeds)
    assert call_ops(mod) == ["layer_norm_with_stats"]
    mod = _check(_model("LayerNormalization", spec, opset=17), feeds)
    assert call_ops(mod) == ["layer_norm"]


def test_batch_norm_inference_and_training():
    spec = {k: (TP.FLOAT, [3]) for k in ("s", "b", "m", "v")}
    spec = {"x": (TP.FLOAT, [2, 3, 4]), **spec}
    feeds = {"x": f32(2, 3, 4), "s": f32(3), "b": f32(3), "m": f32(3), "v": np.abs(f32(3)) + 1}
    _check(_model("BatchNormalization", spec, opset=9, epsilon=1e-3), feeds)
    mod = from_onnx(
        _model("BatchNormalization", spec, outputs=3, opset=15, training_mode=1, momentum=0.7)
    )
    y, rm, _ = run(mod, feeds)
    mean = feeds["x"].mean(axis=(0, 2))
    np.testing.assert_allclose(rm, feeds["m"] * 0.7 + mean * 0.3, rtol=1e-5)
    assert y.shape == (2, 3, 4)


def test_group_norm_opset18_scale_per_group():
    """Opset 18 gives scale/bias per group; it equals opset 21 with them repeated per channel."""
    x, s, b = f32(2, 6, 3), f32(3), f32(3)
    spec18 = {"x": (TP.FLOAT, [2, 6, 3]), "s": (TP.FLOAT, [3]), "b": (TP.FLOAT, [3])}
    got = run(
        from_onnx(_model("GroupNormalization", spec18, opset=18, num_groups=3)),
        {"x": x, "s": s, "b": b},
    )[0]
    spec21 = {"x": (TP.FLOAT, [2, 6, 3]), "s": (TP.FLOAT, [6]), "b": (TP.FLOAT, [6])}
    feeds21 = {"x": x, "s": np.repeat(s, 2), "b": np.repeat(b, 2)}
    want = _check(_model("GroupNormalization", spec21, num_groups=3), feeds21)
    np.testing.assert_allclose(got, run(want, feeds21)[0], rtol=1e-6)


def test_shape_operands_known_or_at_run_time():
    """Col2Im's shapes as initializers become attributes (static result shape); as graph
    inputs they are run-time operands and the result has run-time dimensions."""
    cols = f32(1, 8, 6)
    image, block = np.array([4, 6], np.int64), np.array([2, 2], np.int64)
    inits = [numpy_helper.from_array(image, "img"), numpy_helper.from_array(block, "blk")]
    static = from_onnx(
        _model("Col2Im", {"c": (TP.FLOAT, [1, 8, 6])}, opset=18, initializers=inits, strides=[2, 2])
    )
    assert static["main"].outputs[0].type.shape == (1, 2, 4, 6)
    dynamic = _model(
        "Col2Im",
        {"c": (TP.FLOAT, [1, 8, 6]), "img": (TP.INT64, [2]), "blk": (TP.INT64, [2])},
        opset=18,
        strides=[2, 2],
    )
    got = run(from_onnx(dynamic), {"c": cols, "img": image, "blk": block})[0]
    np.testing.assert_allclose(got, run(static, {"c": cols})[0])


def test_grid_sample_opset16_mode_names():
    spec = {"x": (TP.FLOAT, [1, 1, 4, 5]), "g": (TP.FLOAT, [1, 3, 2, 2])}
    feeds = {"x": f32(1, 1, 4, 5), "g": rng.uniform(-1, 1, (1, 3, 2, 2)).astype(np.float32)}
    model = _model("GridSample", spec, opset=16, mode="bicubic", align_corners=1)
    _check(model, feeds, rtol=1e-4, atol=1e-4)


def test_unsupported_attribute_values_are_reported():
    spec = {"x": (TP.FLOAT, [1, 2, 4, 4]), "w": (TP.FLOAT, [2, 2, 3, 3])}
    with pytest.raises(FrontendError, match="unsupported auto_pad 'BOGUS'"):
        from_onnx(_model("Conv", spec, auto_pad="BOGUS"))
    with pytest.raises(FrontendError, match="unsupported mode 'XYZ'"):
        from_onnx(_model("DepthToSpace", {"x": (TP.FLOAT, [1, 4, 2, 2])}, blocksize=2, mode="XYZ"))
    with pytest.raises(FrontendError, match="rank 6 is not supported"):
        from_onnx(
            _model("AveragePool", {"x": (TP.FLOAT, [1, 1, 2, 2, 2, 2])}, kernel_shape=[1, 1, 1, 1])
        )
