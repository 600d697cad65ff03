"""The ONNX importer core: signatures, symbolic shape folding, unsupported-op reports."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

from tcc.frontend.onnx import find_unsupported, from_onnx
from tcc.ir.errors import FrontendError
from tcc.ir.expr import Var, prove_equal
from tcc.ir.graph import Call
from tcc.ir.interp import run


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_dim_params_become_shared_size_variables():
    m = _model(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        [helper.make_tensor_value_info("a", TP.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("b", TP.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("c", TP.FLOAT, ["batch", 3])],
    )
    f = from_onnx(m)["main"]
    a, b = f.params
    assert isinstance(a.type.shape[0], Var) and a.type.shape[0] is b.type.shape[0]
    assert f.input_names == ("a", "b") and f.output_names == ("c",)


def test_shape_subgraph_folds_to_a_symbolic_reshape():
    """Shape -> Gather -> Concat -> Reshape keeps `batch` symbolic and leaves no Shape op."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Concat", ["b1", "tail"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [
        helper.make_tensor("i0", TP.INT64, [], [0]),
        helper.make_tensor("ax0", TP.INT64, [1], [0]),
        helper.make_tensor("tail", TP.INT64, [2], [4, -1]),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 8, 3])],
               [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    mod = from_onnx(m)
    f = mod["main"]
    ops = [b.value.op for b in f.bindings if isinstance(b.value, Call)]
    assert ops == ["reshape"]
    out_type = f.bindings[-1].var.type
    assert out_type.shape[0] is f.params[0].type.shape[0] and out_type.shape[1:] == (4, 6)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 8, 3)).astype(np.float32)
        (y,) = run(mod, {"x": x})
        np.testing.assert_array_equal(y, x.reshape(batch, 4, 6))


def _expand_as_torch_exports_it(placeholder):
    """torch's `mask.expand(batch, 1, seq, seq)` as its exporter writes it: the shape is
    Concat(batch, PLACEHOLDER, seq, seq), and each -1 in it is replaced by 1 through
    Where(Equal(shape, ConstantOfShape(Shape(shape)) * -1), 1, shape)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["b1", "mid", "n1", "n1"], ["cat"], axis=0),
        helper.make_node("Reshape", ["cat", "flat"], ["shape"]),
        helper.make_node("Shape", ["shape"], ["len"]),
        helper.make_node("ConstantOfShape", ["len"], ["ones"],
                         value=helper.make_tensor("v", TP.INT64, [1], [1])),
        helper.make_node("Mul", ["ones", "minus1"], ["minus1s"]),
        helper.make_node("Equal", ["shape", "minus1s"], ["is_placeholder"]),
        helper.make_node("Where", ["is_placeholder", "ones", "shape"], ["target"]),
        helper.make_node("Expand", ["mask", "target"], ["y"]),
    ]
    inits = [
        helper.make_tensor("i0", TP.INT64, [], [0]),
        helper.make_tensor("i1", TP.INT64, [], [1]),
        helper.make_tensor("ax0", TP.INT64, [1], [0]),
        helper.make_tensor("mid", TP.INT64, [1], [placeholder]),
        helper.make_tensor("flat", TP.INT64, [1], [-1]),
        helper.make_tensor("minus1", TP.INT64, [], [-1]),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", TP.INT64, ["batch", "seq"]),
                          helper.make_tensor_value_info("mask", TP.BOOL, ["seq", "seq"])],
                  [helper.make_tensor_value_info("y", TP.BOOL, None)], inits)


@pytest.mark.parametrize("placeholder", [-1, 1])
def test_an_expand_shape_with_placeholders_folds_to_the_sizes(placeholder):
    """A size is never -1 (sizes are nonnegative), so Equal(batch, -1) is known False at
    import: the Expand gets (batch, 1, seq, seq), not a shape read from a tensor at run
    time, whose fresh sizes would reach every op downstream."""
    mod = from_onnx(_expand_as_torch_exports_it(placeholder))
    f = mod["main"]
    batch, seq = f.params[0].type.shape
    out = f.bindings[-1].var.type
    assert out.shape[0] is batch and out.shape[1] == 1 and out.shape[2] is seq and out.shape[3] is seq
    ops = [b.value.op for b in f.bindings if isinstance(b.value, Call)]
    assert "equal" not in ops and "where" not in ops, ops
    rng = np.random.default_rng(0)
    for b, n in ((1, 3), (2, 5)):
        x = np.zeros((b, n), np.int64)
        mask = rng.random((n, n)) < 0.5
        (y,) = run(mod, {"x": x, "mask": mask})
        np.testing.assert_array_equal(y, np.broadcast_to(mask, (b, 1, n, n)))


def test_float_arithmetic_on_a_static_size_folds_into_the_reshape():
    """MobileViT's legacy export computes its patch grid as int(ceil(h / 2.0) * 2) in float
    from the feature map's static height, beside the symbolic batch: the float chain folds
    at import, so the Reshape gets (batch * 16, 2, 4, 2), not sizes read at run time."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i2"], ["h"], axis=0),
        helper.make_node("Cast", ["h"], ["hf"], to=TP.FLOAT),
        helper.make_node("Div", ["hf", "two_f"], ["half"]),
        helper.make_node("Ceil", ["half"], ["up"]),
        helper.make_node("Mul", ["up", "two_f"], ["grid_f"]),
        helper.make_node("Cast", ["grid_f"], ["grid"], to=TP.INT64),
        helper.make_node("Div", ["grid", "two"], ["patches"]),
        helper.make_node("Mul", ["b", "sixteen"], ["rows"]),
        helper.make_node("Unsqueeze", ["rows", "ax0"], ["rows1"]),
        helper.make_node("Unsqueeze", ["patches", "ax0"], ["patches1"]),
        helper.make_node("Concat", ["rows1", "two1", "patches1", "two1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [
        helper.make_tensor("i0", TP.INT64, [], [0]),
        helper.make_tensor("i2", TP.INT64, [], [2]),
        helper.make_tensor("two_f", TP.FLOAT, [], [2.0]),
        helper.make_tensor("two", TP.INT64, [], [2]),
        helper.make_tensor("sixteen", TP.INT64, [], [16]),
        helper.make_tensor("ax0", TP.INT64, [1], [0]),
        helper.make_tensor("two1", TP.INT64, [1], [2]),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, ["batch", 4, 8, 8])],
               [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    mod = from_onnx(m)
    f = mod["main"]
    (batch,) = [d for d in f.params[0].type.shape if not isinstance(d, int)]
    out = f.bindings[-1].var.type
    assert prove_equal(out.shape[0], batch * 16) and list(out.shape[1:]) == [2, 4, 2], out
    assert [b.value.op for b in f.bindings if isinstance(b.value, Call)] == ["reshape"]
    x = np.random.default_rng(0).standard_normal((3, 4, 8, 8)).astype(np.float32)
    (y,) = run(mod, {"x": x})
    np.testing.assert_array_equal(y, x.reshape(48, 2, 4, 2))


def test_every_unsupported_op_is_listed_once_with_opset_and_first_node():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="ok"),
        helper.make_node("FancyOp", ["r"], ["f1"], name="first_fancy"),
        helper.make_node("FancyOp", ["f1"], ["f2"], name="second_fancy"),
        helper.make_node("OtherOp", ["f2"], ["y"], name="other"),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [2])],
               [helper.make_tensor_value_info("y", TP.FLOAT, [2])])
    found = {op: (opset, names) for _, op, opset, names in find_unsupported(m)}
    assert found == {"FancyOp": (17, ["first_fancy", "second_fancy"]), "OtherOp": (17, ["other"])}
    with pytest.raises(FrontendError) as e:
        from_onnx(m)
    msg = str(e.value)
    assert "FancyOp (opset 17, first node 'first_fancy')" in msg and "OtherOp" in msg
    assert "\n" not in msg


def test_op_without_converter_expands_its_onnx_function_body():
    """MeanVarianceNormalization is defined by the ONNX standard as a function."""
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
    m = _model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"])],
               [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3, 4, 4])],
               [helper.make_tensor_value_info("y", TP.FLOAT, [2, 3, 4, 4])])
    (y,) = run(from_onnx(m), [x])
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    std = np.sqrt(((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True))
    np.testing.assert_allclose(y, (x - mean) / (std + 1e-9), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("content", [b"", b"not a model at all \x00\xff", b"\x08\x07\x12"])
def test_malformed_model_bytes_give_a_frontend_error(tmp_path, content):
    p = tmp_path / "bad.onnx"
    p.write_bytes(content)
    with pytest.raises(FrontendError):
        mod = from_onnx(p)
        assert "main" in mod  # an empty model has no graph: import must still be sane


def test_missing_model_file():
    with pytest.raises(FrontendError, match="no such file"):
        from_onnx("/nonexistent/model.onnx")


def test_map_inputs_are_reported():
    map_type = helper.make_map_type_proto(TP.INT64, helper.make_tensor_type_proto(TP.FLOAT, [2]))
    m = _model([helper.make_node("Identity", ["s"], ["y"])], [helper.make_value_info("s", map_type)],
               [helper.make_value_info("y", map_type)])
    with pytest.raises(FrontendError, match="graph input 's': only tensor, sequence and optional "
                                            "inputs are supported, got map_type"):
        from_onnx(m)


def test_loaded_from_path(tmp_path):
    m = _model([helper.make_node("Relu", ["x"], ["y"])],
               [helper.make_tensor_value_info("x", TP.FLOAT, [2])],
               [helper.make_tensor_value_info("y", TP.FLOAT, [2])])
    onnx.save(m, tmp_path / "m.onnx")
    (y,) = run(from_onnx(tmp_path / "m.onnx"), [np.array([-1.0, 2.0], np.float32)])
    np.testing.assert_array_equal(y, [0.0, 2.0])


def test_constants_used_only_at_import_time_are_not_kept():
    """A Reshape's shape initializer is folded into an attribute: the module does not keep it."""
    m = _model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
               [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
               [helper.make_tensor_value_info("y", TP.FLOAT, [3, 2])],
               [helper.make_tensor("shape", TP.INT64, [2], [3, 2]),
                helper.make_tensor("unused", TP.FLOAT, [1000], [0.0] * 1000)])
    mod = from_onnx(m)
    assert mod.const_types == {} and mod.const_values == {}
