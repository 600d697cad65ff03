"""ONNX indexing converters: imported models match onnxruntime; sizes known at import time
become static (or symbolic) shapes."""

from functools import partial

import numpy as np
import pytest
from onnx import helper

from tcc.frontend.onnx import from_onnx
from tcc.ir.errors import FrontendError
from tcc.ir.expr import Var
from tests.helpers import assert_matches_ort, call_ops, onnx_model

pytest.importorskip("onnxruntime")

# Inputs and outputs are (name, numpy dtype, shape) with str dims for symbolic sizes,
# initializers (name, array) pairs.
make_model = partial(onnx_model, opset=19)
check_against_ort = partial(assert_matches_ort, rtol=1e-5, atol=1e-5)

rng = np.random.default_rng(0)


def test_gather_on_symbolic_axis_keeps_symbolic_shape():
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    model = make_model(
        node, [("x", "float32", ["n", 3]), ("i", "int64", [2, 2])], [("y", "float32", None)]
    )
    mod = check_against_ort(
        model,
        {"x": rng.standard_normal((5, 3)).astype(np.float32), "i": np.array([[0, -1], [4, 2]])},
    )
    assert mod.functions["main"].ret.type.shape == (2, 2, 3)


@pytest.mark.parametrize(
    "op, attrs, idx",
    [
        ("GatherElements", {"axis": 1}, np.array([[0, 2, -1], [1, 1, 0]])),
        ("GatherND", {"batch_dims": 1}, np.array([[2], [0]])),
        ("GatherND", {}, np.array([[1, 2], [0, -1]])),
    ],
)
def test_gathers_match_ort(op, attrs, idx):
    node = helper.make_node(op, ["x", "i"], ["y"], **attrs)
    model = make_model(
        node, [("x", "float32", [2, 3]), ("i", "int64", idx.shape)], [("y", "float32", None)]
    )
    check_against_ort(model, {"x": rng.standard_normal((2, 3)).astype(np.float32), "i": idx})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatters_match_ort(reduction):
    data = rng.standard_normal((4, 3)).astype(np.float32)
    feeds = {"x": data, "i": np.array([[1, 0, 3], [-1, 2, 0]]), "u": np.ones((2, 3), np.float32)}
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0, reduction=reduction)
    inputs = [("x", "float32", [4, 3]), ("i", "int64", [2, 3]), ("u", "float32", [2, 3])]
    check_against_ort(make_model(node, inputs, [("y", "float32", None)]), feeds)
    node = helper.make_node("ScatterND", ["x", "j", "u"], ["y"], reduction=reduction)
    inputs = [("x", "float32", [4, 3]), ("j", "int64", [2, 1]), ("u", "float32", [2, 3])]
    feeds = {"x": data, "j": np.array([[2], [0]]), "u": feeds["u"]}
    check_against_ort(make_model(node, inputs, [("y", "float32", None)]), feeds)


RESIZE_CASES = [
    ({"mode": "linear"}, [1.0, 1.0, 2.0, 0.5]),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, [1.0, 1.0, 1.5, 2.0]),
    ({"mode": "cubic", "coordinate_transformation_mode": "asymmetric"}, [1.0, 1.0, 2.0, 3.0]),
    ({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, [1.0, 1.0, 0.6, 1.5]),
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, [1, 1, 0.5, 3]),
    ({"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, [1.0, 1.0, 2.5, 0.75]),
    ({"mode": "linear", "antialias": 1}, [1.0, 1.0, 0.5, 0.6]),
]


@pytest.mark.parametrize("attrs, scales", RESIZE_CASES)
def test_resize_static_scales_on_symbolic_batch(attrs, scales):
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], **attrs)
    s = np.array(scales, np.float32)
    model = make_model(
        node, [("x", "float32", ["n", 2, 4, 6])], [("y", "float32", None)], [("s", s)]
    )
    mod = check_against_ort(model, {"x": rng.standard_normal((3, 2, 4, 6)).astype(np.float32)})
    assert call_ops(mod) == ["resize"]
    out_shape = mod.functions["main"].ret.type.shape
    assert isinstance(out_shape[0], Var)
    assert out_shape[1:] == (2, int(4 * float(s[2])), int(6 * float(s[3])))


def test_resize_sizes_with_axes_roi_and_aspect_policy():
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    node = helper.make_node(
        "Resize",
        ["x", "roi", "", "sz"],
        ["y"],
        mode="linear",
        axes=[3, 2],
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-1.0,
    )
    inits = [("roi", np.array([0.2, 0.0, 1.3, 0.8], np.float32)), ("sz", np.array([5, 3]))]
    model = make_model(node, [("x", "float32", [1, 2, 4, 4])], [("y", "float32", None)], inits)
    assert call_ops(check_against_ort(model, {"x": x})) == ["resize"]
    node = helper.make_node(
        "Resize", ["x", "", "", "sz"], ["y"], axes=[2, 3], keep_aspect_ratio_policy="not_smaller"
    )
    model = make_model(node, [("x", "float32", [1, 2, 4, 4])], [("y", "float32", None)], inits[1:])
    check_against_ort(model, {"x": x})


def test_resize_with_run_time_sizes_is_data_dependent():
    node = helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="nearest")
    inputs = [("x", "float32", [1, 1, 2, 3]), ("sz", "int64", [4])]
    model = make_model(node, inputs, [("y", "float32", None)])
    feeds = {
        "x": rng.standard_normal((1, 1, 2, 3)).astype(np.float32),
        "sz": np.array([1, 1, 5, 4]),
    }
    mod = check_against_ort(model, feeds)
    assert call_ops(mod) == ["resize_dynamic"]


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize10_and_upsample_use_asymmetric_sampling(mode):
    x = rng.standard_normal((1, 1, 3, 4)).astype(np.float32)
    s = np.array([1.0, 1.0, 0.6, 1.7], np.float32)
    node = helper.make_node("Resize", ["x", "s"], ["y"], mode=mode)
    model = make_model(
        node, [("x", "float32", [1, 1, 3, 4])], [("y", "float32", None)], [("s", s)], opset=10
    )
    check_against_ort(model, {"x": x})
    node = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[1.0, 1.0, 2.0, 3.0])
    model = make_model(node, [("x", "float32", [1, 1, 3, 4])], [("y", "float32", None)], opset=8)
    check_against_ort(model, {"x": x})


def test_resize_rejects_unknown_mode():
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="area")
    s = ("s", np.array([2.0], np.float32))
    model = make_model(node, [("x", "float32", [4])], [("y", "float32", None)], [s])
    with pytest.raises(FrontendError, match="unsupported mode 'area'"):
        from_onnx(model)


def test_one_hot_with_constant_depth_is_static():
    node = helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=0)
    inits = [("d", np.array(4.0, np.float32)), ("v", np.array([-1.0, 3.0], np.float32))]
    model = make_model(node, [("i", "int64", ["n"])], [("y", "float32", None)], inits)
    mod = check_against_ort(model, {"i": np.array([0, -1, 9, 2])})
    assert mod.functions["main"].ret.type.shape[0] == 4


def test_unique_with_some_outputs_unused():
    node = helper.make_node("Unique", ["x"], ["y", "", "", "c"], sorted=0)
    model = make_model(
        node, [("x", "float32", [6])], [("y", "float32", None), ("c", "int64", None)]
    )
    check_against_ort(model, {"x": np.array([2, 1, 1, 3, 4, 3], np.float32)})


def test_nonzero_and_non_max_suppression_match_ort():
    node = helper.make_node("NonZero", ["x"], ["y"])
    model = make_model(node, [("x", "float32", [2, "m"])], [("y", "int64", None)])
    check_against_ort(model, {"x": np.array([[0, 1, 2], [3, 0, 0]], np.float32)})
    node = helper.make_node(
        "NonMaxSuppression", ["b", "s", "k", "iou", "st"], ["y"], center_point_box=1
    )
    inits = [
        ("k", np.array([2])),
        ("iou", np.array([0.3], np.float32)),
        ("st", np.array([0.1], np.float32)),
    ]
    boxes = np.concatenate([rng.uniform(0, 4, (1, 8, 2)), rng.uniform(1, 3, (1, 8, 2))], axis=2)
    feeds = {"b": boxes.astype(np.float32), "s": rng.uniform(0, 1, (1, 3, 8)).astype(np.float32)}
    inputs = [("b", "float32", [1, 8, 4]), ("s", "float32", [1, 3, 8])]
    check_against_ort(make_model(node, inputs, [("y", "int64", None)], inits), feeds)


def test_binarizer_ml_domain():
    node = helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.5)
    model = make_model(
        node, [("x", "float32", [3])], [("y", "float32", None)], extra_opsets=[("ai.onnx.ml", 1)]
    )
    check_against_ort(model, {"x": np.array([0.2, 0.5, 0.7], np.float32)})


def test_scatter_alias_imports_as_scatter_elements():
    node = helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=1)
    inputs = [("x", "float32", [2, 3]), ("i", "int64", [2, 1]), ("u", "float32", [2, 1])]
    model = make_model(node, inputs, [("y", "float32", None)], opset=10)
    mod = check_against_ort(
        model,
        {
            "x": np.zeros((2, 3), np.float32),
            "i": np.array([[2], [0]]),
            "u": np.ones((2, 1), np.float32),
        },
    )
    assert call_ops(mod) == ["scatter_elements"]
