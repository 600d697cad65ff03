"""Legalization: the loop program of an op call on bfloat16 operands computes on the float32
values they hold and rounds each bfloat16 result once, as the reference interpreter does."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import tcc.rt
from tcc.frontend.onnx import from_onnx
from tcc.ir.dtype import round_to_bfloat16
from tcc.ir.interp import run
from tests.packs import compiled_pack

BF16 = TP.BFLOAT16


@pytest.mark.parametrize("nodes, inputs", [
    ([("MatMul", ["a", "b"], {})], ["a", "b"]),
    ([("Softmax", ["a"], {"axis": -1})], ["a"]),
    ([("ReduceSum", ["a"], {"keepdims": 0})], ["a"]),
    ([("Einsum", ["a", "b"], {"equation": "ij,jk->ik"})], ["a", "b"]),
    # fused: an elementwise chain over a matmul's bfloat16 result
    ([("MatMul", ["a", "b"], {}), ("Mul", ["y0", "a"], {}), ("Relu", ["y1"], {})], ["a", "b"]),
])
def test_bfloat16_results_are_rounded_once_as_the_reference_does(nodes, inputs):
    graph_nodes = [helper.make_node(op, ins, [f"y{k}"], **attrs)
                   for k, (op, ins, attrs) in enumerate(nodes)]
    graph = helper.make_graph(graph_nodes, "g",
                              [helper.make_tensor_value_info(n, BF16, [5, 5]) for n in inputs],
                              [helper.make_tensor_value_info(f"y{len(nodes) - 1}", BF16, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    rng = np.random.default_rng(4)
    feeds = {n: round_to_bfloat16(rng.standard_normal((5, 5)).astype(np.float32)) for n in inputs}
    want = run(from_onnx(model), feeds)[0]
    assert np.array_equal(round_to_bfloat16(want), want)
    with tcc.rt.load(compiled_pack(model)) as m:
        got = m["main"](feeds)
    got = got[0] if isinstance(got, (list, tuple)) else got
    np.testing.assert_array_equal(got, want)
