"""tcc.frontend.onnx.proto: ONNX's messages without onnx's import. Its values must be what
onnx's own helpers give, and its classes onnx's own."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tcc.frontend.onnx import proto
from tcc.ir.dtype import DTYPES

NUMPY_TYPES = ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8",
               "uint16", "uint32", "uint64", "bool", "complex64", "complex128"]


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(NUMPY_TYPES), shape=st.lists(st.integers(0, 3), max_size=3),
       raw=st.booleans(), seed=st.integers(0, 2**16))
def test_to_array_is_numpy_helpers(dtype, shape, raw, seed):
    """Raw and typed storage alike (onnx.helper.make_tensor stores each type in its own
    field, or in another one: float16 bits in int32_data)."""
    rng = np.random.default_rng(seed)
    values = (rng.standard_normal(shape) * 100).astype(dtype)
    elem = helper.np_dtype_to_tensor_dtype(values.dtype)
    if raw:
        t = helper.make_tensor("t", elem, shape, values.tobytes(), raw=True)
    else:
        t = helper.make_tensor("t", elem, shape, values.ravel().tolist())
    got, expected = proto.to_array(t), numpy_helper.to_array(t)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_to_array_leaves_other_types_to_onnx():
    t = helper.make_tensor("t", TensorProto.BFLOAT16, [3], [1.0, 2.5, -3.0])
    np.testing.assert_array_equal(proto.to_array(t).astype(np.float32), [1.0, 2.5, -3.0])


def test_dtype_names_are_onnxs():
    """Every ONNX element type tcc has a dtype for, named as onnx's numpy mapping names it."""
    for name, number in TensorProto.DataType.items():
        try:
            expected = np.dtype(helper.tensor_dtype_to_np_dtype(number)).name
        except Exception:  # UNDEFINED
            expected = None
        expected = {"object": "string"}.get(expected, expected)
        got = proto.dtype_name(number)
        assert got == (expected if expected in DTYPES else None), name
        if got is not None:
            assert proto.element_type(got) == number


def _attributes():
    g = helper.make_graph([], "g", [], [])
    t = numpy_helper.from_array(np.arange(3, dtype=np.float32), "t")
    tp = helper.make_tensor_type_proto(TensorProto.FLOAT, [2])
    return [helper.make_attribute("f", 1.5), helper.make_attribute("i", 3),
            helper.make_attribute("s", "text"), helper.make_attribute("t", t),
            helper.make_attribute("g", g), helper.make_attribute("floats", [1.0, 2.0]),
            helper.make_attribute("ints", [1, 2]), helper.make_attribute("strings", ["a", "b"]),
            helper.make_attribute("tensors", [t, t]), helper.make_attribute("graphs", [g]),
            helper.make_attribute("tp", tp), helper.make_attribute("tps", [tp, tp]),
            helper.make_attribute("empty", [], attr_type=onnx.AttributeProto.INTS)]


@pytest.mark.parametrize("attribute", _attributes(), ids=lambda a: a.name)
def test_attribute_values_are_onnxs(attribute):
    got, expected = proto.attribute_value(attribute), helper.get_attribute_value(attribute)
    assert type(got) is type(expected) and got == expected


def test_a_reference_attribute_has_no_value():
    a = onnx.AttributeProto(name="alpha", ref_attr_name="beta", type=onnx.AttributeProto.FLOAT)
    with pytest.raises(ValueError, match="refers to"):
        proto.attribute_value(a)


def test_the_classes_are_onnxs():
    assert proto.messages().ModelProto is onnx.ModelProto
    assert proto.TensorProto is onnx.TensorProto and proto.is_model(onnx.ModelProto())


def test_a_model_is_read_without_onnx(tmp_path):
    """In a fresh process: a plain model imports with neither onnx nor ml_dtypes (0.6 s),
    and onnx imported afterwards has the classes the model's messages have."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "m.onnx")
    script = f"""
import sys
from tcc.frontend.onnx import from_onnx, load_model
from_onnx({str(tmp_path / "m.onnx")!r})
assert "onnx" not in sys.modules and "ml_dtypes" not in sys.modules, "imported"
model = load_model({str(tmp_path / "m.onnx")!r})
import onnx
assert isinstance(model, onnx.ModelProto) and type(model.graph) is onnx.GraphProto
"""
    subprocess.run([sys.executable, "-c", script], check=True)


def test_what_is_no_model_is_refused_in_one_line():
    from tcc.frontend.onnx import load_model
    from tcc.ir.errors import FrontendError

    with pytest.raises(FrontendError, match="expected an ONNX ModelProto, its bytes or a path, got int"):
        load_model(42)
    with pytest.raises(FrontendError, match="got GraphProto"):
        load_model(onnx.GraphProto())
