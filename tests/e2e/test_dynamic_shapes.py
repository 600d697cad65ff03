"""Shapes computed from tensors, compiled: sizes read from a tensor at run time
(tensor_to_shape, lower-dynamic-shapes) and size variables passed to kernels as scalar
arguments. Each model compiles to one pack, runs at two shapes in the Python and the C
runtime, and matches onnxruntime; shape data that does not fit the op stops both runtimes
with the same one-line message naming the node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tcc.rt
from tcc.frontend.onnx import from_onnx
from tcc.ir.interp import run
from tcc.rt.errors import RunInputError
from tests.e2e.test_models import onnxruntime_outputs
from tests.packs import compiled_pack
from tests.runtime_c.capi import CRuntime, CRuntimeError, build_runtime


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.fixture(scope="module")
def crt(tmp_path_factory) -> CRuntime:
    return CRuntime(build_runtime(tmp_path_factory.mktemp("crt")) / "libtccrt.so")


def _run_both(crt, model, feeds):
    pack = compiled_pack(model)
    names = [i.name for i in model.graph.input]
    with tcc.rt.load(pack) as m:
        got = m["main"](feeds)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    c_got = crt.load(pack).run("main", [feeds[n] for n in names])
    return got, c_got


def _refused_alike(crt, model, feeds, words: str = "") -> str:
    """Both runtimes stop with the same one-line message naming the node 'y'."""
    pack = compiled_pack(model)
    with tcc.rt.load(pack) as m, pytest.raises(RunInputError, match=words) as py_err:
        m["main"](feeds)
    with pytest.raises(CRuntimeError) as c_err:
        crt.load(pack).run("main", [feeds[i.name] for i in model.graph.input])
    message = str(py_err.value)
    assert "'y'" in message and "\n" not in message
    assert c_err.value.message == message
    return message


def _check(crt, model, feeds, atol=0.0):
    want = onnxruntime_outputs(model, feeds)
    got, c_got = _run_both(crt, model, feeds)
    for g, c, w in zip(got, c_got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, f"{g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=atol)
        assert np.array_equal(g, c, equal_nan=g.dtype.kind == "f")


def _expand_model():
    return _model([helper.make_node("Expand", ["x", "shape"], ["y"])],
                  [_vi("x", TensorProto.FLOAT, ["n", 1]), _vi("shape", TensorProto.INT64, [3])],
                  [_vi("y", TensorProto.FLOAT, None)])


@pytest.mark.parametrize("shape", [(4, 3, 5), (2, 1, 1), (1, 3, 1)])
def test_expand_to_a_shape_read_at_run_time(crt, shape):
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    _check(crt, _expand_model(), {"x": x, "shape": np.array(shape, np.int64)})


@pytest.mark.parametrize("shape", [(4, 2, 5), (2, -1, 1)])
def test_a_shape_that_does_not_broadcast_stops_both_runtimes_alike(crt, shape):
    feeds = {"x": np.zeros((3, 1), np.float32), "shape": np.array(shape, np.int64)}
    _refused_alike(crt, _expand_model(), feeds, "does not broadcast")


def test_pad_and_constant_of_shape_with_run_time_operands(crt):
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["p"], mode="constant"),
        helper.make_node("Shape", ["p"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["y"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5])),
        helper.make_node("Add", ["p", "y"], ["z"]),
    ]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, ["n", "m"]),
                           _vi("pads", TensorProto.INT64, [4])],
                   [_vi("z", TensorProto.FLOAT, None)])
    rng = np.random.default_rng(0)
    for (n, m), pads in [((2, 3), (1, 0, 2, 1)), ((5, 4), (0, 2, 0, 0))]:
        x = rng.standard_normal((n, m)).astype(np.float32)
        _check(crt, model, {"x": x, "pads": np.array(pads, np.int64)})


def test_sizes_no_buffer_holds_reach_kernels_as_arguments(crt):
    """Shape of a (batch, seq) input as a tensor: the kernel writing it has no buffer whose
    dimension is batch or seq alone, so both come in as scalar arguments."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["y"], to=TensorProto.FLOAT)]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, ["batch", "seq"])],
                   [_vi("y", TensorProto.FLOAT, [2])])
    for shape in [(2, 7), (5, 1)]:
        _check(crt, model, {"x": np.zeros(shape, np.float32)})


def test_lowered_module_prints_parses_and_interprets():
    """The Shape((dims...)) bindings and shape(..., checks=[...]) print, parse back to the same
    text, and run in the reference interpreter with the compiled pack's results and errors."""
    from tcc.frontend.onnx import from_onnx
    from tcc.ir.errors import InputError
    from tcc.ir.interp import run
    from tcc.ir.parser import parse_module as parse
    from tcc.ir.printer import print_module
    from tcc.lower.passes.lower_dynamic_shapes import lower_dynamic_shapes

    mod = lower_dynamic_shapes(from_onnx(_expand_model()))
    text = print_module(mod)
    assert "tensor_to_shape" in text and "checks=[" in text
    again = parse(text)
    assert print_module(again) == text
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    (y,) = run(again, {"x": x, "shape": np.array([2, 3, 4], np.int64)})
    np.testing.assert_array_equal(y, np.broadcast_to(x, (2, 3, 4)))
    with pytest.raises(InputError, match="'y'"):
        run(again, {"x": x, "shape": np.array([2, 4, 4], np.int64)})


def _reshape_model():
    return _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                  [_vi("x", TensorProto.FLOAT, ["n", 6]), _vi("shape", TensorProto.INT64, [3])],
                  [_vi("y", TensorProto.FLOAT, None)])


@pytest.mark.parametrize("n, shape", [(2, (0, -1, 3)), (4, (3, 2, -1)), (1, (1, 1, 6))])
def test_reshape_to_a_shape_read_at_run_time(crt, n, shape):
    x = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
    _check(crt, _reshape_model(), {"x": x, "shape": np.array(shape, np.int64)})


@pytest.mark.parametrize("shape, words", [((5, -1, 1), "multiply out"), ((-1, -1, 2), "more than one -1"),
                                          ((2, -3, 2), "below -1")])
def test_a_reshape_that_does_not_fit_stops_both_runtimes_alike(crt, shape, words):
    feeds = {"x": np.zeros((2, 6), np.float32), "shape": np.array(shape, np.int64)}
    _refused_alike(crt, _reshape_model(), feeds, words)


def test_tile_with_run_time_repeats(crt):
    model = _model([helper.make_node("Tile", ["x", "reps"], ["y"])],
                   [_vi("x", TensorProto.FLOAT, ["n", 3]), _vi("reps", TensorProto.INT64, [2])],
                   [_vi("y", TensorProto.FLOAT, None)])
    rng = np.random.default_rng(1)
    for n, reps in [(2, (3, 1)), (1, (2, 4))]:
        _check(crt, model, {"x": rng.standard_normal((n, 3)).astype(np.float32),
                            "reps": np.array(reps, np.int64)})


def _reduce_model(op, keepdims):
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    return helper.make_model(
        helper.make_graph([node], "g", [_vi("x", TensorProto.FLOAT, ["n", 3, 4]),
                                        _vi("axes", TensorProto.INT64, [2])],
                          [_vi("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMean", "ReduceLogSumExp"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_over_axes_read_at_run_time(crt, op, keepdims):
    """One kernel reduces whichever axes the run asks for, from one pack."""
    model = _reduce_model(op, keepdims)
    rng = np.random.default_rng(2)
    for n, axes in [(2, (0, 2)), (5, (-1, 1)), (3, (1, 0))]:
        x = rng.standard_normal((n, 3, 4)).astype(np.float32)
        want = onnxruntime_outputs(model, {"x": x, "axes": np.array(axes, np.int64)})
        got, c_got = _run_both(crt, model, {"x": x, "axes": np.array(axes, np.int64)})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
        assert got[0].shape == want[0].shape and np.array_equal(got[0], c_got[0])


@pytest.mark.parametrize("axes, words", [((0, 3), "outside"), ((1, -2), "twice")])
def test_bad_run_time_axes_stop_both_runtimes_alike(crt, axes, words):
    feeds = {"x": np.zeros((2, 3, 4), np.float32), "axes": np.array(axes, np.int64)}
    _refused_alike(crt, _reduce_model("ReduceSum", 0), feeds, words)


@pytest.mark.parametrize("axes", [(0, 3), (-1, 1), (2, 0)])
def test_unsqueeze_then_squeeze_with_axes_read_at_run_time(crt, axes):
    nodes = [helper.make_node("Unsqueeze", ["x", "axes"], ["u"]),
             helper.make_node("Squeeze", ["u", "axes"], ["y"])]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [_vi("x", TensorProto.FLOAT, ["n", 3]),
                                       _vi("axes", TensorProto.INT64, [2])],
                          [_vi("y", TensorProto.FLOAT, None), _vi("u", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)])
    for n in (2, 5):
        _check(crt, model, {"x": np.arange(3 * n, dtype=np.float32).reshape(n, 3),
                            "axes": np.array(axes, np.int64)})


def test_bitcast_compiles_and_keeps_the_bits(crt):
    model = _model([helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.INT32)],
                   [_vi("x", TensorProto.FLOAT, ["n"])], [_vi("y", TensorProto.INT32, None)])
    model.opset_import[0].version = 26
    x = np.array([0.0, -0.0, 1.5, np.inf, np.nan, 1e-45], np.float32)
    got, c_got = _run_both(crt, model, {"x": x})
    assert np.array_equal(got[0], x.view(np.int32)) and np.array_equal(c_got[0], got[0])


def _slice_model():
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])
    ins = [_vi("x", TensorProto.FLOAT, ["n", 6])] + [
        _vi(k, TensorProto.INT64, [2]) for k in ("starts", "ends", "axes", "steps")]
    return _model([node], ins, [_vi("y", TensorProto.FLOAT, None)])


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ((0, 1), (2, 5), (0, 1), (1, 2)),
    ((-1, 5), (-10**18, 0), (0, -1), (-1, -2)),  # backwards, a start past the end clamped
    ((1, -100), (10**18, 3), (1, 0), (3, 1)),  # ends far past the axis, in int64 range
    ((2, 0), (1, 6), (0, 1), (1, 1)),  # an empty range
])
def test_slice_with_every_operand_read_at_run_time(crt, starts, ends, axes, steps):
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    feeds = {"x": x, **{k: np.array(v, np.int64) for k, v in
                        zip(("starts", "ends", "axes", "steps"), (starts, ends, axes, steps))}}
    _check(crt, _slice_model(), feeds)


def test_a_slice_step_of_0_stops_both_runtimes_alike(crt):
    feeds = {"x": np.zeros((5, 6), np.float32), "starts": np.array([0, 0], np.int64),
             "ends": np.array([2, 2], np.int64), "axes": np.array([0, 1], np.int64),
             "steps": np.array([1, 0], np.int64)}
    _refused_alike(crt, _slice_model(), feeds, "step 1 is 0")


def test_pad_with_run_time_axes(crt):
    node = helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"], mode="constant")
    model = helper.make_model(
        helper.make_graph([node], "g", [_vi("x", TensorProto.FLOAT, ["n", 3, 4]),
                                        _vi("pads", TensorProto.INT64, [4]),
                                        _vi("axes", TensorProto.INT64, [2])],
                          [_vi("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 18)])
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for pads, axes in [((1, 0, 2, 1), (0, -1)), ((0, 1, 1, 0), (2, 1))]:
        _check(crt, model, {"x": x, "pads": np.array(pads, np.int64),
                            "axes": np.array(axes, np.int64)})


@pytest.mark.parametrize("mode", ["reflect", "wrap", "edge"])
def test_repeating_pads_read_at_run_time(crt, mode):
    """Pads (negative ones crop first) read at run time in the modes that repeat the axis;
    an axis cropped away entirely leaves nothing to repeat, which both runtimes refuse."""
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)
    model = _model([node], [_vi("x", TensorProto.FLOAT, ["n", 4]), _vi("pads", TensorProto.INT64, [4])],
                   [_vi("y", TensorProto.FLOAT, None)])
    model.opset_import[0].version = 19
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for pads in ((1, 2, 2, 3), (0, -1, 2, 1), (2, 0, 0, 0)):
        _check(crt, model, {"x": x, "pads": np.array(pads, np.int64)})
    _refused_alike(crt, model, {"x": x, "pads": np.array((0, -4, 0, 1), np.int64)},
                   f"axis 1 is empty after its negative pads, and {mode} padding has nothing")


def test_col2im_with_its_image_and_block_shapes_read_at_run_time(crt):
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], strides=[1, 2])
    model = _model([node], [_vi("x", TensorProto.FLOAT, [1, "c", "l"]), _vi("image", TensorProto.INT64, [2]),
                            _vi("block", TensorProto.INT64, [2])], [_vi("y", TensorProto.FLOAT, None)])
    model.opset_import[0].version = 18
    rng = np.random.default_rng(11)
    for image, block in (((4, 5), (2, 3)), ((3, 3), (1, 1))):
        blocks = (image[0] - block[0] + 1) * ((image[1] - block[1]) // 2 + 1)
        x = rng.standard_normal((1, 2 * block[0] * block[1], blocks)).astype(np.float32)
        _check(crt, model, {"x": x, "image": np.array(image, np.int64),
                            "block": np.array(block, np.int64)}, atol=1e-6)
    x = np.zeros((1, 12, 6), np.float32)
    for image, block, words in (((4, 5), (5, 1), "the image's dim 0 and its pads hold no block"),
                                ((4, 5), (2, 4), "is not a multiple of the block size"),
                                ((4, 7), (2, 3), "is not the number of blocks")):
        _refused_alike(crt, model, {"x": x, "image": np.array(image, np.int64),
                                    "block": np.array(block, np.int64)}, words)


@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid_of_a_size_read_at_run_time(crt, align_corners):
    node = helper.make_node("AffineGrid", ["theta", "size"], ["y"], align_corners=align_corners)
    model = _model([node], [_vi("theta", TensorProto.FLOAT, ["n", 2, 3]), _vi("size", TensorProto.INT64, [4])],
                   [_vi("y", TensorProto.FLOAT, None)])
    model.opset_import[0].version = 20
    theta = np.random.default_rng(12).standard_normal((2, 2, 3)).astype(np.float32)
    for size in ((2, 3, 4, 5), (2, 1, 2, 7)):  # (onnxruntime and ONNX differ on an axis of 1)
        _check(crt, model, {"theta": theta, "size": np.array(size, np.int64)}, atol=1e-6)
    _refused_alike(crt, model, {"theta": theta, "size": np.array((3, 1, 4, 4), np.int64)},
                   "the size's batch is not theta's")


def _cumsum_model(op, **attrs):
    node = helper.make_node(op, ["x", "axis"], ["y"], **attrs)
    return _model([node], [_vi("x", TensorProto.FLOAT, ["n", 3, 4]), _vi("axis", TensorProto.INT64, [])],
                  [_vi("y", TensorProto.FLOAT, None)])


@pytest.mark.parametrize("attrs", [{}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}])
def test_cumsum_along_an_axis_read_at_run_time(crt, attrs):
    """One kernel scans whichever axis the run names, over dimensions of any length."""
    model = _cumsum_model("CumSum", **attrs)
    rng = np.random.default_rng(3)
    for n, axis in [(2, 0), (5, -1), (6, 1), (1, 2)]:
        x = rng.standard_normal((n, 3, 4)).astype(np.float32)
        _check(crt, model, {"x": x, "axis": np.array(axis, np.int64)})


def test_a_scan_axis_out_of_range_stops_both_runtimes_alike(crt):
    feeds = {"x": np.zeros((2, 3, 4), np.float32), "axis": np.array(3, np.int64)}
    _refused_alike(crt, _cumsum_model("CumSum"), feeds, "axis is outside")


def test_resize_to_the_size_of_another_tensor(crt):
    """F.interpolate(x, size=y.shape[-2:]) as exporters write it: the sizes come from a Shape
    and a Slice, read when the program runs."""
    nodes = [helper.make_node("Shape", ["y_like"], ["s"], start=2),
             helper.make_node("Shape", ["x"], ["xs"], end=2),
             helper.make_node("Concat", ["xs", "s"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, ["n", 2, "h", "w"]),
                           _vi("y_like", TensorProto.FLOAT, [1, 1, "H", "W"])],
                   [_vi("y", TensorProto.FLOAT, None)], ())
    model.opset_import[0].version = 18
    rng = np.random.default_rng(4)
    for n, hw, out in [(1, (4, 5), (8, 3)), (2, (3, 3), (3, 7))]:
        feeds = {"x": rng.standard_normal((n, 2, *hw)).astype(np.float32),
                 "y_like": np.zeros((1, 1, *out), np.float32)}
        want = onnxruntime_outputs(model, feeds)
        got, c_got = _run_both(crt, model, feeds)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
        assert np.array_equal(got[0], c_got[0])


@pytest.mark.parametrize("mode", ["nearest", "cubic"])
def test_resize_by_scales_read_at_run_time(crt, mode):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode, axes=[2, 3])
    model = _model([node], [_vi("x", TensorProto.FLOAT, ["n", 1, 4, 4]),
                            _vi("scales", TensorProto.FLOAT, [2])], [_vi("y", TensorProto.FLOAT, None)])
    model.opset_import[0].version = 18
    x = np.random.default_rng(5).standard_normal((2, 1, 4, 4)).astype(np.float32)
    for scales in [(2.0, 0.5), (1.0, 1.5), (0.75, 1.0)]:
        feeds = {"x": x, "scales": np.array(scales, np.float32)}
        want = onnxruntime_outputs(model, feeds)
        got, c_got = _run_both(crt, model, feeds)
        assert got[0].shape == want[0].shape
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
        assert np.array_equal(got[0], c_got[0])


def test_resize_scales_that_give_a_negative_size_stop_both_runtimes_alike(crt):
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    model = _model([node], [_vi("x", TensorProto.FLOAT, [1, 1, 4, 4]),
                            _vi("scales", TensorProto.FLOAT, [4])], [_vi("y", TensorProto.FLOAT, None)])
    model.opset_import[0].version = 18
    feeds = {"x": np.zeros((1, 1, 4, 4), np.float32), "scales": np.array([1, 1, -2, np.nan], np.float32)}
    _refused_alike(crt, model, feeds, "negative")


def _topk_model():
    node = helper.make_node("TopK", ["x", "k"], ["y", "indices"], axis=1)
    return _model([node], [_vi("x", TensorProto.FLOAT, ["n", "m"]), _vi("k", TensorProto.INT64, [1])],
                  [_vi("y", TensorProto.FLOAT, None), _vi("indices", TensorProto.INT64, None)])


def test_topk_with_k_read_at_run_time(crt):
    rng = np.random.default_rng(6)
    for n, m, k in [(2, 7, 3), (3, 5, 5), (1, 4, 0)]:
        x = rng.integers(-3, 3, (n, m)).astype(np.float32)  # ties, which go to the lower index
        _check(crt, _topk_model(), {"x": x, "k": np.array([k], np.int64)})


def test_a_k_beyond_the_axis_stops_both_runtimes_alike(crt):
    feeds = {"x": np.zeros((2, 3), np.float32), "k": np.array([4], np.int64)}
    _refused_alike(crt, _topk_model(), feeds, "k is outside")


def _range_model(elem):
    node = helper.make_node("Range", ["start", "limit", "delta"], ["y"])
    return _model([node], [_vi(n, elem, []) for n in ("start", "limit", "delta")],
                  [_vi("y", elem, None)])


@pytest.mark.parametrize("dtype, bounds", [
    (np.float32, [(0.5, 7.2, 0.7), (3.0, -1.0, -0.3), (1.0, 1.0, 2.0)]),
    (np.int32, [(-3, 10, 4), (5, -7, -2), (0, 3, -1)]),
])
def test_range_with_bounds_read_at_run_time(crt, dtype, bounds):
    """Its length is counted by a kernel, read as a size, then the range is filled."""
    model = _range_model(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    for start, limit, delta in bounds:
        feeds = {n: np.array(v, dtype) for n, v in zip(("start", "limit", "delta"), (start, limit, delta))}
        got, c_got = _run_both(crt, model, feeds)
        # tcc fills as numpy's arange (and ONNX's reference) does, in float64; onnxruntime
        # accumulates in float32, so it is compared to within float32 rounding of the range
        want = np.arange(*(feeds[n].item() for n in ("start", "limit", "delta"))).astype(dtype)
        assert got[0].dtype == dtype and np.array_equal(got[0], want) and np.array_equal(got[0], c_got[0])
        ort = onnxruntime_outputs(model, feeds)[0]
        np.testing.assert_allclose(got[0], ort, rtol=0, atol=1e-6 * max(abs(start), abs(limit)))


def test_a_range_step_of_0_stops_both_runtimes_alike(crt):
    feeds = {n: np.array(v, np.float32) for n, v in (("start", 0), ("limit", 4), ("delta", 0))}
    _refused_alike(crt, _range_model(TensorProto.FLOAT), feeds, "negative")


def test_nonzero_sizes_its_result_by_a_count_read_at_run_time(crt):
    """Data-dependent outputs: a kernel counts, the count becomes a size, a kernel fills."""
    node = helper.make_node("NonZero", ["x"], ["y"])
    model = _model([node], [_vi("x", TensorProto.FLOAT, ["n", 3])], [_vi("y", TensorProto.INT64, None)])
    rng = np.random.default_rng(7)
    for n in (4, 1, 0):
        x = rng.integers(-1, 2, (n, 3)).astype(np.float32)
        _check(crt, model, {"x": x})
    _check(crt, model, {"x": np.zeros((5, 3), np.float32)})  # nothing selected: (2, 0)


@pytest.mark.parametrize("axis", [None, 1])
def test_compress_by_a_condition_read_at_run_time(crt, axis):
    node = helper.make_node("Compress", ["x", "cond"], ["y"], **({} if axis is None else {"axis": axis}))
    model = _model([node], [_vi("x", TensorProto.FLOAT, [2, "m"]), _vi("cond", TensorProto.BOOL, ["c"])],
                   [_vi("y", TensorProto.FLOAT, None)])
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    for cond in ([True, False, True], [False] * 4, [True, True, False, True, True]):
        _check(crt, model, {"x": x, "cond": np.array(cond)})


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_counts_then_fills_all_four_results(crt, axis, sorted_):
    """Unique with repeats, negative zero and NaN (NaN last when sorted, as np.unique has
    it), at several sizes from one pack; an empty input gives empty results."""
    attrs = {"sorted": sorted_, **({} if axis is None else {"axis": axis})}
    node = helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], **attrs)
    model = _model([node], [_vi("x", TensorProto.FLOAT, ["n", 2])],
                   [_vi(o, TensorProto.FLOAT if o == "y" else TensorProto.INT64, None)
                    for o in ("y", "indices", "inverse", "counts")])
    rng = np.random.default_rng(9)
    for n in (6, 3, 1):
        x = rng.integers(-1, 2, (n, 2)).astype(np.float32)
        x[0, 0] = -0.0
        _check(crt, model, {"x": x})
    if axis is None:  # onnxruntime keeps each NaN apart; np.unique (tcc's reference) one, last
        x = np.array([[2, np.nan], [1, 2], [np.nan, 0.0]], np.float32)
        got, c_got = _run_both(crt, model, {"x": x})
        want = run(from_onnx(model), {"x": x})
        assert want[0].size == 4 and np.isnan(want[0][-1 if sorted_ else 1])
        for g, c, w in zip(got, c_got, want):
            np.testing.assert_array_equal(g, w)
            np.testing.assert_array_equal(g, c)
    empty = {"x": np.zeros((0, 2), np.float32)}  # along axis 1: two equal empty columns
    got, c_got = _run_both(crt, model, empty)
    want = run(from_onnx(model), empty)
    assert got[0].shape == {None: (0,), 0: (0, 2), 1: (0, 1)}[axis]
    for g, c, w in zip(got, c_got, want):
        assert g.shape == w.shape and np.array_equal(g, w) and np.array_equal(g, c)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
def test_a_window_of_a_size_read_at_run_time(crt, op):
    node = helper.make_node(op, ["size"], ["y"], periodic=0)
    model = _model([node], [_vi("size", TensorProto.INT64, [])], [_vi("y", TensorProto.FLOAT, None)])
    for size in (8, 1, 0):  # onnxruntime's float32 cosines leave 1.5e-8 where 0 is exact
        _check(crt, model, {"size": np.array(size, np.int64)}, atol=1e-7)
    message = _refused_alike(crt, model, {"size": np.array(-3, np.int64)}, "negative")
    assert message.startswith("window 'y': the window size is negative")


def test_stft_with_its_frame_step_and_length_read_at_run_time(crt):
    node = helper.make_node("STFT", ["x", "step", "", "length"], ["y"])
    model = _model([node], [_vi("x", TensorProto.FLOAT, [1, "n", 1]), _vi("step", TensorProto.INT64, []),
                            _vi("length", TensorProto.INT64, [])], [_vi("y", TensorProto.FLOAT, None)])
    x = np.random.default_rng(10).standard_normal((1, 40, 1)).astype(np.float32)
    for step, length in ((4, 16), (7, 9), (1, 40)):
        feeds = {"x": x, "step": np.array(step, np.int64), "length": np.array(length, np.int64)}
        want = onnxruntime_outputs(model, feeds)[0]
        got, c_got = _run_both(crt, model, feeds)
        np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        assert np.array_equal(got[0], c_got[0])
    for step, length, words in ((0, 8, "frame_step must be at least 1"),
                                (2, 41, "the frame length is outside")):
        feeds = {"x": x, "step": np.array(step, np.int64), "length": np.array(length, np.int64)}
        assert _refused_alike(crt, model, feeds, words).startswith("stft 'y': ")


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_scatter_of_any_number_of_updates_none_included(crt, reduction):
    node = helper.make_node("ScatterElements", ["data", "indices", "updates"], ["y"], axis=0,
                            reduction=reduction)
    model = _model([node], [_vi("data", TensorProto.FLOAT, [4, 3]), _vi("indices", TensorProto.INT64, ["u", 3]),
                            _vi("updates", TensorProto.FLOAT, ["u", 3])], [_vi("y", TensorProto.FLOAT, None)])
    model.opset_import[0].version = 18
    rng = np.random.default_rng(8)
    data = rng.standard_normal((4, 3)).astype(np.float32)
    for u in (3, 0):
        indices = np.array([[0, 3, -1], [2, 0, 1], [1, 1, 2]][:u], np.int64).reshape(u, 3)
        _check(crt, model, {"data": data, "indices": indices,
                            "updates": rng.standard_normal((u, 3)).astype(np.float32)})


def _split_model():
    node = helper.make_node("Split", ["x", "split"], ["y", "b", "c"], axis=1)
    return _model([node], [_vi("x", TensorProto.FLOAT, [2, "n"]), _vi("split", TensorProto.INT64, [3])],
                  [_vi(v, TensorProto.FLOAT, None) for v in ("y", "b", "c")])


def test_split_into_parts_read_at_run_time(crt):
    x = np.arange(20, dtype=np.float32).reshape(2, 10)
    for parts in [(3, 5, 2), (1, 1, 8)]:
        _check(crt, _split_model(), {"x": x, "split": np.array(parts, np.int64)})


def test_parts_that_do_not_add_up_stop_both_runtimes_alike(crt):
    feeds = {"x": np.zeros((2, 10), np.float32), "split": np.array([3, 5, 3], np.int64)}
    _refused_alike(crt, _split_model(), feeds, "do not add up")
