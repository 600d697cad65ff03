"""tcc.frontend.onnx.raw_data: a model file's initializers' raw_data read into arrays of
their own. The model without them, with each put back, must be the model protobuf reads
whole; the importer must give the same module either way."""

import tempfile

import numpy as np
import onnx
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from tcc.frontend.onnx import proto
from tcc.frontend.onnx.importer import from_onnx
from tcc.frontend.onnx.raw_data import read_lifted


def read_lifted_bytes(data: bytes):
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.flush()
        return read_lifted(f)


def _put_back(stripped: bytes, lifted: dict) -> onnx.ModelProto:
    model = proto.ModelProto()
    model.ParseFromString(stripped)
    for i, raw in lifted.items():
        model.graph.initializer[i].raw_data = bytes(raw)
    return model


_TENSOR = st.tuples(st.sampled_from(["w", "b", "x", "y"]),  # names may repeat
                    st.sampled_from(["raw float32", "raw int64", "raw bfloat16", "float_data",
                                     "empty raw", "long float_data"]),
                    st.integers(0, 70000))


@settings(max_examples=40, deadline=None)
@given(tensors=st.lists(_TENSOR, max_size=6), doc=st.text(max_size=20),
       constant_node=st.booleans())
def test_lifted_and_put_back_is_the_model(tensors, doc, constant_node):
    initializers = []
    for name, kind, n in tensors:
        if kind == "raw float32":
            t = helper.make_tensor(name, TensorProto.FLOAT, [n], np.arange(n, dtype=np.float32)
                                   .tobytes(), raw=True)
        elif kind == "raw int64":
            t = helper.make_tensor(name, TensorProto.INT64, [n % 50], np.arange(
                n % 50, dtype=np.int64).tobytes(), raw=True)
        elif kind == "raw bfloat16":
            t = helper.make_tensor(name, TensorProto.BFLOAT16, [n % 9],
                                   bytes(2 * (n % 9)), raw=True)
        elif kind == "empty raw":
            t = helper.make_tensor(name, TensorProto.FLOAT, [0], b"", raw=True)
        elif kind == "long float_data":  # longer than the reader's window
            t = helper.make_tensor(name, TensorProto.FLOAT, [n], np.arange(n, dtype=np.float32))
        else:
            t = helper.make_tensor(name, TensorProto.FLOAT, [n % 7], [1.5] * (n % 7))
        initializers.append(t)
    nodes = [helper.make_node("Identity", ["i"], ["o"])]
    if constant_node:  # a tensor in an attribute keeps its raw_data in the message
        nodes.append(helper.make_node("Constant", [], ["c"], value=helper.make_tensor(
            "c", TensorProto.FLOAT, [2], np.ones(2, np.float32).tobytes(), raw=True)))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("i", 1, [1])],
                              [helper.make_tensor_value_info("o", 1, [1])], initializers,
                              doc_string=doc)
    model = helper.make_model(graph)
    data = model.SerializeToString()
    found = read_lifted_bytes(data)
    raw_fields = [i for i, t in enumerate(initializers) if t.HasField("raw_data")]
    stripped, lifted = found
    assert sorted(lifted) == raw_fields
    assert all(not raw.flags.writeable and raw.ctypes.data % 16 == 0 for raw in lifted.values())
    if raw_fields:
        assert len(stripped) < len(data) - sum(len(initializers[i].raw_data) for i in raw_fields)
    assert _put_back(stripped, lifted) == model


def test_what_it_does_not_lift():
    w = helper.make_tensor("w", TensorProto.FLOAT, [2], np.ones(2, np.float32).tobytes(),
                           raw=True)
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["o"])], "g", [],
                              [helper.make_tensor_value_info("o", 1, [2])], [w])
    data = helper.make_model(graph).SerializeToString()
    assert read_lifted_bytes(data) is not None
    assert read_lifted_bytes(data[:-3]) is None  # cut short: protobuf says what is wrong
    assert read_lifted_bytes(b"\x0b\x00") is None  # a group, which no ONNX message has
    assert read_lifted_bytes(data + data) is None  # two graph fields merge into one: protobuf's to read


def _imported_both_ways(model: onnx.ModelProto, path) -> tuple:
    onnx.save(model, path)
    from_file, in_memory = from_onnx(path), from_onnx(model)
    assert str(from_file) == str(in_memory)
    assert from_file.const_values.keys() == in_memory.const_values.keys()
    for name, value in in_memory.const_values.items():
        assert value.dtype == from_file.const_values[name].dtype
        np.testing.assert_array_equal(from_file.const_values[name], value)
    return from_file, in_memory


def test_the_importer_reads_the_same_model_from_a_file(tmp_path):
    """Weights read from the file's bytes, a bfloat16 one (which onnx reads, from the
    message with its raw_data put back), and a model with a local function (which onnx's
    inliner reads whole)."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 4],
                           rng.standard_normal(12).astype(np.float32).tobytes(), raw=True)
    bf_raw = helper.make_tensor("bf", TensorProto.BFLOAT16, [4],  # 1, -2.5, 3, 0.5
                                np.array([0x3F80, 0xC020, 0x4040, 0x3F00], np.uint16).tobytes(),
                                raw=True)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("Cast", ["bf"], ["bf32"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["y", "bf32"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 3])],
                              [helper.make_tensor_value_info("z", 1, [2, 4])], [w, bf_raw])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    _, imported = _imported_both_ways(model, tmp_path / "m.onnx")
    assert any(v.dtype == np.float32 and v.shape == (3, 4)
               for v in imported.const_values.values())

    double = onnx.FunctionProto(name="Double", domain="local", input=["a"], output=["b"],
                                node=[helper.make_node("Add", ["a", "a"], ["b"])],
                                opset_import=[helper.make_opsetid("", 17)])
    graph.node.append(helper.make_node("Double", ["z"], ["d"], domain="local"))
    graph.output[0].CopyFrom(helper.make_tensor_value_info("d", 1, [2, 4]))
    model = helper.make_model(graph, functions=[double], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    _imported_both_ways(model, tmp_path / "f.onnx")
